/* plan_run.c -- run the execution plan of one fused partition (every Compute): shapes,
 * the scratch arena, the fused loops and the step-by-step path. See ebe_plan_internal.h. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "ebe_plan_internal.h"

/* ---- shape rules (shared by the shape pass and the execution pass) ---------------------- */

/* Product of some of the dims of a shape that ebe_numel_overflow accepted (a batch or row
 * count, a prefix of the shape). Not checked again, so the execution pass does no more than
 * it did: every partial product of an accepted shape's nonzero dims is at most
 * EBE_MAX_ELEMENTS, and a zero dim makes it 0. Never call it on an unchecked shape. */
static size_t ebe_count_checked(const int64_t *dims, int32_t rank) {
  size_t n = 1;
  for (int32_t i = 0; i < rank; i++) n *= (size_t)dims[i];
  return n;
}

/* Is `small` (leading 1s stripped) equal to the trailing dims of `out`? */
static int ebe_is_suffix(const int64_t *small, int32_t rs, const int64_t *out, int32_t ro) {
  int32_t first = 0;
  while (first < rs && small[first] == 1) first++;
  const int32_t len = rs - first;
  if (len > ro) return 0;
  for (int32_t i = 0; i < len; i++)
    if (small[first + i] != out[ro - len + i]) return 0;
  return 1;
}

typedef enum ebe_bin_result {
  EBE_BIN_OK = 0,
  EBE_BIN_MISMATCH,
  EBE_BIN_UNSUPPORTED,
  EBE_BIN_TOO_LARGE /* the output (or a MatMul's m*k, k*n or m*n) overflows EBE_MAX_ELEMENTS */
} ebe_bin_result;

/* Broadcast shapes a and b (na, nb elements, both checked) into out (numpy rules), set *no
 * to its checked element count, and choose how to run the step: the fast kernel (same
 * shape, scalar, or a row repeated: *swap says whether b is the big operand, period is the
 * small operand's repeat length) or the general strided walk. Any two shapes that broadcast
 * are OK; incompatible dims are a MISMATCH, an output too large to exist is TOO_LARGE. */
static ebe_bin_result ebe_binary_shape(const int64_t *a, int32_t ra, size_t na,
                                       const int64_t *b, int32_t rb, size_t nb, int64_t *out,
                                       int32_t *ro, size_t *no, ebe_bcast *bc) {
  const int32_t r = ra > rb ? ra : rb;
  for (int32_t i = 0; i < r; i++) {
    const int64_t da = i < r - ra ? 1 : a[i - (r - ra)];
    const int64_t db = i < r - rb ? 1 : b[i - (r - rb)];
    if (da == db || db == 1) out[i] = da;
    else if (da == 1) out[i] = db;
    else return EBE_BIN_MISMATCH;
  }
  *ro = r;
  if (ebe_numel_overflow(out, r, no)) return EBE_BIN_TOO_LARGE;
  bc->general = 0;
  bc->swap = 0;
  bc->period = *no;
  if (*no == 0) return EBE_BIN_OK;
  if (na == *no && nb == *no) return EBE_BIN_OK;
  if (na == *no && (nb == 1 || ebe_is_suffix(b, rb, out, r))) {
    bc->period = nb;
    return EBE_BIN_OK;
  }
  if (nb == *no && (na == 1 || ebe_is_suffix(a, ra, out, r))) {
    bc->swap = 1;
    bc->period = na;
    return EBE_BIN_OK;
  }
  bc->general = 1; /* e.g. a column [n,1] against [n,m], or [n,1] against [1,m] */
  return EBE_BIN_OK;
}

/* MatMul shapes, as numpy.matmul: a [..., m, k] x b [..., k, n] -> out [batch..., m, n]
 * with the batch dims broadcast; a 1-D a is [k] taken as [1, k] and a 1-D b is [k] taken
 * as [k, 1], the added dim dropped from the output (both 1-D: a rank-0 output). *no is the
 * output's checked element count; m*k, k*n and m*n are checked too (the GEMM's extents). */
static ebe_bin_result ebe_matmul_shape(const int64_t *a, int32_t ra, const int64_t *b,
                                       int32_t rb, int64_t *out, int32_t *ro, size_t *no) {
  if (ra < 1 || rb < 1) return EBE_BIN_UNSUPPORTED;
  const int64_t kb = rb == 1 ? b[0] : b[rb - 2];
  if (a[ra - 1] != kb) return EBE_BIN_MISMATCH;
  const int32_t ba = ra < 2 ? 0 : ra - 2, bb = rb < 2 ? 0 : rb - 2, r = ba > bb ? ba : bb;
  for (int32_t i = 0; i < r; i++) {
    const int64_t da = i < r - ba ? 1 : a[i - (r - ba)];
    const int64_t db = i < r - bb ? 1 : b[i - (r - bb)];
    if (da == db || db == 1) out[i] = da;
    else if (da == 1) out[i] = db;
    else return EBE_BIN_MISMATCH;
  }
  int32_t rank = r;
  if (ra >= 2) out[rank++] = a[ra - 2];
  if (rb >= 2) out[rank++] = b[rb - 1];
  *ro = rank;
  const int64_t mk[2] = {ra < 2 ? 1 : a[ra - 2], kb};
  const int64_t kn[2] = {kb, rb < 2 ? 1 : b[rb - 1]};
  const int64_t mn[2] = {mk[0], kn[1]};
  size_t unused = 0;
  if (ebe_numel_overflow(mk, 2, &unused) || ebe_numel_overflow(kn, 2, &unused) ||
      ebe_numel_overflow(mn, 2, &unused) || ebe_numel_overflow(out, rank, no))
    return EBE_BIN_TOO_LARGE;
  return EBE_BIN_OK;
}

/* Room for "[d0,...,d7]" with every dim 19 digits and a sign. */
#define EBE_SHAPE_TEXT (2 + EBE_MAX_RANK * 21)

static void ebe_format_shape(char *buf, size_t cap, const int64_t *dims, int32_t rank) {
  size_t used = 0;
  used += (size_t)snprintf(buf + used, cap - used, "[");
  for (int32_t i = 0; i < rank && used < cap; i++)
    used += (size_t)snprintf(buf + used, cap - used, i ? ",%lld" : "%lld", (long long)dims[i]);
  if (used < cap) snprintf(buf + used, cap - used, "]");
}

/* ---- running ----------------------------------------------------------------------------- */

/* A free pooled scratch, or NULL when all are busy. */
static ebe_scratch *ebe_scratch_acquire(ebe_plan *plan) {
  for (size_t i = 0; i < EBE_POOL_SIZE; i++) {
    int expected = 0;
    if (atomic_compare_exchange_strong_explicit(&plan->pool[i].busy, &expected, 1,
                                                memory_order_acquire, memory_order_relaxed))
      return &plan->pool[i];
  }
  return NULL;
}

/* The error of a binary step whose input shapes do not go together, or whose output (dout,
 * ro: filled for TOO_LARGE) would be too large to exist (one counted call). */
static OrtStatus *ebe_shape_error(const ebe_plan *plan, const ebe_step *step, const int64_t *da,
                                  int32_t ra, const int64_t *db, int32_t rb,
                                  const int64_t *dout, int32_t ro, ebe_bin_result result) {
  char sa[EBE_SHAPE_TEXT], sb[EBE_SHAPE_TEXT], so[EBE_SHAPE_TEXT];
  ebe_format_shape(sa, sizeof sa, da, ra);
  ebe_format_shape(sb, sizeof sb, db, rb);
  if (result == EBE_BIN_TOO_LARGE) {
    ebe_format_shape(so, sizeof so, dout, ro);
    return ebe_error(plan->api, plan->counters, ORT_INVALID_ARGUMENT,
                     "engine: %s node '%s': input shapes %s and %s give %s, whose size "
                     "overflows (more than %zu float32 elements)",
                     ebe_op_names[step->op], step->name, sa, sb, so, EBE_MAX_ELEMENTS);
  }
  return ebe_error(plan->api, plan->counters, ORT_INVALID_ARGUMENT,
                   "engine: %s node '%s': input shapes %s and %s %s", ebe_op_names[step->op],
                   step->name, sa, sb,
                   result == EBE_BIN_MISMATCH ? "are incompatible"
                                              : "need a broadcast the engine does not do");
}

/* Shapes of one step's output from its input shapes (na, nb elements, checked): its dims,
 * rank and checked element count, and (binary elementwise) how it runs. */
static ebe_bin_result ebe_step_shape(const ebe_step *step, const int64_t *da, int32_t ra,
                                     size_t na, const int64_t *db, int32_t rb, size_t nb,
                                     int64_t *dout, int32_t *ro, size_t *no, ebe_bcast *bc) {
  if (step->op == EBE_OP_MATMUL) return ebe_matmul_shape(da, ra, db, rb, dout, ro, no);
  return ebe_binary_shape(da, ra, na, db, rb, nb, dout, ro, no, bc);
}

/* Shape pass: fill rank/dims/element count of every step output and the broadcast of every
 * binary elementwise step; error status on a bad input shape or an overflowing size. */
static OrtStatus *ebe_plan_shapes(ebe_plan *plan, ebe_scratch *scratch) {
  for (size_t s = 0; s < plan->n_steps; s++) {
    const ebe_step *step = &plan->steps[s];
    const uint32_t a = step->in[0], b = step->in[1], o = step->out;
    const int64_t *da = scratch->dims + (size_t)a * EBE_MAX_RANK;
    int64_t *dout = scratch->dims + (size_t)o * EBE_MAX_RANK;
    if (step->n_in == 1) {
      if (scratch->rank[a] > 0) memcpy(dout, da, sizeof(int64_t) * (size_t)scratch->rank[a]);
      scratch->rank[o] = scratch->rank[a];
      scratch->numel[o] = scratch->numel[a];
      continue;
    }
    const int64_t *db = scratch->dims + (size_t)b * EBE_MAX_RANK;
    int32_t ro = 0;
    const ebe_bin_result result =
        ebe_step_shape(step, da, scratch->rank[a], scratch->numel[a], db, scratch->rank[b],
                       scratch->numel[b], dout, &ro, &scratch->numel[o], &scratch->bcast[s]);
    if (result != EBE_BIN_OK)
      return ebe_shape_error(plan, step, da, scratch->rank[a], db, scratch->rank[b], dout, ro,
                             result);
    scratch->rank[o] = ro;
  }
  return NULL;
}

/* The error of a scratch arena too large to exist: names the node whose output needs the
 * slot where the running total overflowed (one counted call; not on any path that succeeds). */
static OrtStatus *ebe_arena_error(const ebe_plan *plan, const ebe_scratch *scratch,
                                  size_t slot) {
  const char *node = "";
  const char *op = "";
  for (size_t v = 0; v < plan->n_values; v++) {
    const ebe_value *value = &plan->values[v];
    if (value->loc == EBE_LOC_SLOT && value->index == slot && value->producer >= 0 &&
        scratch->numel[v] == scratch->slot_elems[slot]) {
      node = plan->steps[value->producer].name;
      op = ebe_op_names[plan->steps[value->producer].op];
      break;
    }
  }
  return ebe_error(plan->api, plan->counters, ORT_INVALID_ARGUMENT,
                   "engine: %s node '%s': the scratch its output adds to the partition's "
                   "overflows (more than %zu float32 elements in all)",
                   op, node, EBE_MAX_ELEMENTS);
}

/* Size the arena for this Run's shapes and point every slot value into it. Allocates only
 * when this Run needs more than any earlier one. */
static OrtStatus *ebe_plan_place_slots(ebe_plan *plan, ebe_scratch *scratch) {
  if (plan->n_slots == 0) return NULL;
  memset(scratch->slot_elems, 0, plan->n_slots * sizeof *scratch->slot_elems);
  for (size_t v = 0; v < plan->n_values; v++) {
    const ebe_value *value = &plan->values[v];
    if (value->loc != EBE_LOC_SLOT) continue;
    const size_t n = scratch->numel[v]; /* checked in the shape pass */
    if (n > scratch->slot_elems[value->index]) scratch->slot_elems[value->index] = n;
  }
  /* Each slot rounded up to 16 floats (64 bytes), all of it at most EBE_MAX_ELEMENTS, so
   * the offsets below and total * sizeof(float) cannot wrap. */
  size_t total = 0;
  for (size_t s = 0; s < plan->n_slots; s++) {
    size_t size = 0;
    if (ebe_align_overflow(scratch->slot_elems[s], 16, &size) ||
        ebe_add_overflow(total, size, &total) || total > EBE_MAX_ELEMENTS)
      return ebe_arena_error(plan, scratch, s);
  }
  if (total > scratch->arena_cap) {
    float *bigger = ebe_malloc(plan->counters, total * sizeof(float));
    if (bigger == NULL)
      return ebe_error(plan->api, plan->counters, ORT_FAIL,
                       "engine: out of memory for %zu floats of scratch", total);
    ebe_free(plan->counters, scratch->arena);
    scratch->arena = bigger;
    scratch->arena_cap = total;
  }
  /* Reuse slot_elems as slot offsets from here on (every sum below was checked above). */
  size_t offset = 0;
  for (size_t s = 0; s < plan->n_slots; s++) {
    const size_t size = (scratch->slot_elems[s] + 15) & ~(size_t)15;
    scratch->slot_elems[s] = offset;
    offset += size;
  }
  for (size_t v = 0; v < plan->n_values; v++) {
    const ebe_value *value = &plan->values[v];
    if (value->loc == EBE_LOC_SLOT)
      scratch->data[v] = scratch->arena + scratch->slot_elems[value->index];
  }
  return NULL;
}

/* A tensor as a kernel sees it. */
typedef struct ebe_operand {
  const int64_t *dims;
  int32_t rank;
  size_t numel; /* element count, checked (ebe_numel_overflow) before any kernel runs */
  float *data;
} ebe_operand;

/* numpy.matmul on shapes ebe_matmul_shape accepted: a 1-D operand is one row (a) or one
 * column (b) in the same memory, so every case is a batch of [m,k] x [k,n] products. The
 * counts, strides and offsets below are partial products of the three operands' checked
 * shapes (see ebe_count_checked), so none can wrap. */
static void ebe_exec_matmul(const ebe_operand *a, const ebe_operand *b, const ebe_operand *out) {
  if (out->numel == 0) return; /* a zero batch, m or n: nothing to write */
  const int64_t *da = a->dims, *db = b->dims, *dout = out->dims;
  const int32_t ra = a->rank, rb = b->rank;
  const size_t m = ra < 2 ? 1 : (size_t)da[ra - 2], k = (size_t)da[ra - 1];
  const size_t n = rb < 2 ? 1 : (size_t)db[rb - 1];
  const int32_t ba = ra < 2 ? 0 : ra - 2, bb = rb < 2 ? 0 : rb - 2;
  const int32_t nb = ba > bb ? ba : bb; /* output batch dims: dout[0, nb) */
  const size_t batches = ebe_count_checked(dout, nb);
  const size_t b_batches = ebe_count_checked(db, bb);
  const float *pa = a->data, *pb = b->data;
  float *pc = out->data;
  if (b_batches == 1) {
    /* B is one matrix: all of A's rows form one [batches*m, k] matrix. */
    ebe_kernel_matmul(pa, pb, pc, batches * m, k, n);
    return;
  }
  /* General batch broadcast: walk the output batch index, map it into A and B. */
  size_t stride_a[EBE_MAX_RANK], stride_b[EBE_MAX_RANK];
  size_t sa = m * k, sb = k * n;
  for (int32_t i = nb - 1; i >= 0; i--) {
    const int64_t dim_a = i < nb - ba ? 1 : da[i - (nb - ba)];
    const int64_t dim_b = i < nb - bb ? 1 : db[i - (nb - bb)];
    stride_a[i] = dim_a == 1 ? 0 : sa;
    stride_b[i] = dim_b == 1 ? 0 : sb;
    sa *= (size_t)dim_a;
    sb *= (size_t)dim_b;
  }
  int64_t index[EBE_MAX_RANK] = {0};
  for (size_t batch = 0; batch < batches; batch++) {
    size_t off_a = 0, off_b = 0;
    for (int32_t i = 0; i < nb; i++) {
      off_a += (size_t)index[i] * stride_a[i];
      off_b += (size_t)index[i] * stride_b[i];
    }
    ebe_kernel_matmul(pa + off_a, pb + off_b, pc + batch * m * n, m, k, n);
    for (int32_t i = nb - 1; i >= 0; i--) {
      if (++index[i] < dout[i]) break;
      index[i] = 0;
    }
  }
}

/* Add/Mul for any two shapes that broadcast (numpy rules), by strides: the output is walked
 * row by row (its last dim), each operand's row found by its strides, 0 along a dim it
 * broadcasts. Fixed-size stack state only: no allocation. out overlaps neither input, and
 * is not empty, so every dim is nonzero and every stride and offset is bounded by a checked
 * element count. */
static void ebe_exec_broadcast(ebe_op op, const ebe_operand *a, const ebe_operand *b,
                               const ebe_operand *out) {
  const int32_t r = out->rank; /* >= 1: a rank-0 output is the scalar fast case */
  size_t stride_a[EBE_MAX_RANK], stride_b[EBE_MAX_RANK];
  size_t sa = 1, sb = 1;
  for (int32_t i = r - 1; i >= 0; i--) {
    const int64_t dim_a = i < r - a->rank ? 1 : a->dims[i - (r - a->rank)];
    const int64_t dim_b = i < r - b->rank ? 1 : b->dims[i - (r - b->rank)];
    stride_a[i] = dim_a == 1 ? 0 : sa;
    stride_b[i] = dim_b == 1 ? 0 : sb;
    sa *= (size_t)dim_a;
    sb *= (size_t)dim_b;
  }
  const size_t row = (size_t)out->dims[r - 1];
  const size_t rows = ebe_count_checked(out->dims, r - 1);
  int64_t index[EBE_MAX_RANK] = {0};
  for (size_t k = 0; k < rows; k++) {
    size_t off_a = 0, off_b = 0;
    for (int32_t i = 0; i < r - 1; i++) {
      off_a += (size_t)index[i] * stride_a[i];
      off_b += (size_t)index[i] * stride_b[i];
    }
    float *dst = out->data + k * row;
    if (op == EBE_OP_ADD)
      ebe_kernel_add_strided(a->data + off_a, stride_a[r - 1], b->data + off_b,
                             stride_b[r - 1], dst, row);
    else
      ebe_kernel_mul_strided(a->data + off_a, stride_a[r - 1], b->data + off_b,
                             stride_b[r - 1], dst, row);
    for (int32_t i = r - 2; i >= 0; i--) {
      if (++index[i] < out->dims[i]) break;
      index[i] = 0;
    }
  }
}

/* Execute one op on shapes already checked by the shape rules (b unused by unary ops, bc
 * used by Add/Mul only). */
static void ebe_exec(ebe_op op, const ebe_operand *a, const ebe_operand *b,
                     const ebe_operand *out, const ebe_bcast *bc, ebe_counters *counters) {
  const size_t n = out->numel;
  switch (op) {
    case EBE_OP_IDENTITY:
      ebe_kernel_identity(a->data, out->data, n);
      return;
    case EBE_OP_RELU:
      ebe_kernel_relu(a->data, out->data, n);
      return;
    case EBE_OP_SIGMOID:
      ebe_kernel_sigmoid(a->data, out->data, n);
      return;
    case EBE_OP_ADD:
    case EBE_OP_MUL: {
      if (n == 0) return;
      if (bc->general) {
        ebe_probe_add(counters, EBE_C_STRIDED_BROADCASTS, 1); /* shows a fast path was missed */
        ebe_exec_broadcast(op, a, b, out);
        return;
      }
      const float *big = bc->swap ? b->data : a->data;
      const float *small = bc->swap ? a->data : b->data;
      if (op == EBE_OP_ADD) ebe_kernel_add(big, small, out->data, n, bc->period);
      else ebe_kernel_mul(big, small, out->data, n, bc->period);
      return;
    }
    case EBE_OP_MATMUL:
      ebe_exec_matmul(a, b, out);
      return;
    case EBE_OP_COUNT:
      return;
  }
}

static ebe_operand ebe_scratch_operand(const ebe_scratch *scratch, uint32_t value) {
  ebe_operand operand = {scratch->dims + (size_t)value * EBE_MAX_RANK, scratch->rank[value],
                         scratch->numel[value],
                         scratch->data[value]};
  return operand;
}

static void ebe_run_step(const ebe_plan *plan, const ebe_scratch *scratch, size_t s) {
  const ebe_step *step = &plan->steps[s];
  const ebe_operand a = ebe_scratch_operand(scratch, step->in[0]);
  const ebe_operand b = ebe_scratch_operand(scratch, step->in[step->n_in - 1]);
  const ebe_operand out = ebe_scratch_operand(scratch, step->out);
  ebe_exec(step->op, &a, &b, &out, &scratch->bcast[s], plan->counters);
}

/* The error of fused input k whose shape is too large to exist: names the first node that
 * reads it (one counted call; ORT makes no such tensor, so this is defence in depth). */
static OrtStatus *ebe_input_size_error(const ebe_plan *plan, size_t k, const int64_t *dims,
                                       int32_t rank) {
  const ebe_step *reader = &plan->steps[0];
  for (size_t s = 0; s < plan->n_steps; s++) {
    const ebe_step *step = &plan->steps[s];
    if (step->in[0] == plan->input_values[k] ||
        (step->n_in == 2 && step->in[1] == plan->input_values[k])) {
      reader = step;
      break;
    }
  }
  char text[EBE_SHAPE_TEXT];
  ebe_format_shape(text, sizeof text, dims, rank);
  return ebe_error(plan->api, plan->counters, ORT_INVALID_ARGUMENT,
                   "engine: %s node '%s': input %zu has shape %s, whose size overflows (more "
                   "than %zu float32 elements)",
                   ebe_op_names[reader->op], reader->name, k, text, EBE_MAX_ELEMENTS);
}

/* Fetch fused input k: its float32 data, shape (borrowed from ORT for this Compute, or
 * from the plan when the shape is static) and checked element count. Two ORT calls for a
 * static input, three else. */
static OrtStatus *ebe_fetch_input(const ebe_plan *plan, OrtKernelContext *context, size_t k,
                                  ebe_operand *operand, uint64_t *calls) {
  const OrtApi *api = plan->api;
  const OrtValue *value = NULL;
  const void *data = NULL;
  EBE_RETURN_IF_ERROR(EBE_CALL_T(*calls, api, KernelContext_GetInput, context, k, &value));
  if (value == NULL)
    return ebe_error(api, plan->counters, ORT_INVALID_ARGUMENT, "engine: input %zu is missing",
                     k);
  const ebe_static_shape *declared = &plan->input_shapes[k];
  if (declared->is_static) {
    operand->dims = declared->dims;
    operand->rank = declared->rank;
    operand->numel = declared->numel; /* checked when the plan was built */
  } else {
    ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    const int64_t *shape = NULL;
    size_t rank = 0;
    EBE_RETURN_IF_ERROR(EBE_CALL_T(*calls, api, GetTensorElementTypeAndShapeDataReference,
                                   value, &type, &shape, &rank));
    if (type != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT)
      return ebe_error(api, plan->counters, ORT_INVALID_ARGUMENT,
                       "engine: input %zu has element type %d; the engine computes float32 "
                       "only", k, (int)type);
    if (rank > EBE_MAX_RANK)
      return ebe_error(api, plan->counters, ORT_INVALID_ARGUMENT,
                       "engine: input %zu has rank %zu > %d", k, rank, EBE_MAX_RANK);
    for (size_t i = 0; i < rank; i++)
      if (shape[i] < 0)
        return ebe_error(api, plan->counters, ORT_INVALID_ARGUMENT,
                         "engine: input %zu has a negative dim", k);
    operand->dims = shape;
    operand->rank = (int32_t)rank;
    if (ebe_numel_overflow(shape, operand->rank, &operand->numel))
      return ebe_input_size_error(plan, k, shape, operand->rank);
  }
  EBE_RETURN_IF_ERROR(EBE_CALL_T(*calls, api, GetTensorData, value, &data));
  operand->data = (float *)(uintptr_t)data; /* inputs are only ever read */
  return NULL;
}

/* Output k with the given shape: ORT's buffer (the caller's when io-binding bound it). */
static OrtStatus *ebe_fetch_output(const ebe_plan *plan, OrtKernelContext *context, size_t k,
                                   const int64_t *dims, int32_t rank, float **data,
                                   uint64_t *calls) {
  OrtValue *value = NULL;
  void *raw = NULL;
  EBE_RETURN_IF_ERROR(EBE_CALL_T(*calls, plan->api, KernelContext_GetOutput, context, k, dims,
                                 (size_t)rank, &value));
  EBE_RETURN_IF_ERROR(EBE_CALL_T(*calls, plan->api, GetTensorMutableData, value, &raw));
  *data = raw;
  return NULL;
}

/* One node, one output: no scratch, no value table (the per_node partitions and single-node
 * models). Same ORT calls as the general path. */
static OrtStatus *ebe_plan_run_single(ebe_plan *plan, OrtKernelContext *context,
                                      uint64_t *calls) {
  const ebe_step *step = &plan->steps[0];
  ebe_operand in[2] = {{NULL, 0, 0, NULL}, {NULL, 0, 0, NULL}};
  for (size_t k = 0; k < plan->n_inputs; k++)
    EBE_RETURN_IF_ERROR(ebe_fetch_input(plan, context, k, &in[k], calls));
  const ebe_operand *a = &in[plan->values[step->in[0]].index];
  const ebe_operand *b = &in[plan->values[step->in[step->n_in - 1]].index];
  int64_t dims[EBE_MAX_RANK];
  ebe_operand out = {dims, 0, 0, NULL};
  ebe_bcast bc = {0, 0, 0};
  if (step->n_in == 1) {
    out.dims = a->dims; /* ORT's shape array stays valid for the whole Compute */
    out.rank = a->rank;
    out.numel = a->numel;
  } else {
    const ebe_bin_result result = ebe_step_shape(step, a->dims, a->rank, a->numel, b->dims,
                                                 b->rank, b->numel, dims, &out.rank,
                                                 &out.numel, &bc);
    if (result != EBE_BIN_OK)
      return ebe_shape_error(plan, step, a->dims, a->rank, b->dims, b->rank, dims, out.rank,
                             result);
  }
  EBE_RETURN_IF_ERROR(ebe_fetch_output(plan, context, 0, out.dims, out.rank, &out.data, calls));
  if (out.data == a->data && step->n_in == 1) /* a kernel's mutable alias taken by ORT */
    ebe_probe_add(plan->counters, EBE_C_IN_PLACE_STEPS, 1);
  ebe_exec(step->op, a, b, &out, &bc, plan->counters);
  ebe_delay_inject_node(plan->counters, &plan->delay_per_node);
  ebe_probe_add(plan->counters, EBE_C_NODES_EXECUTED, 1);
  return NULL;
}

/* Decide, for this Run's shapes, which groups run as one loop: every step's output has the
 * group's element count n and no Add/Mul needs the general strided broadcast (so each
 * memory operand is a whole tensor of n elements or one repeated with a period dividing n;
 * checked again here, as the kernel relies on it). */
static void ebe_plan_decide_groups(const ebe_plan *plan, ebe_scratch *scratch) {
  for (size_t g = 0; g < plan->n_groups; g++) {
    const ebe_group *group = &plan->groups[g];
    const size_t n = scratch->numel[plan->steps[group->first].out];
    uint8_t ok = 1;
    for (size_t s = group->first; s < (size_t)group->first + group->count; s++) {
      const ebe_step *step = &plan->steps[s];
      if (scratch->numel[step->out] != n || (step->n_in == 2 && scratch->bcast[s].general))
        ok = 0;
    }
    for (size_t u = group->first_op; ok && u < (size_t)group->first_op + group->n_ops; u++) {
      const ebe_fused_op *op = &plan->fused_ops[u];
      for (size_t i = 0; i < 2; i++) {
        const size_t period = scratch->numel[op->value[i]];
        if (op->kind[i] == EBE_FUSED_MEM && n != 0 && (period == 0 || n % period != 0)) ok = 0;
      }
    }
    scratch->group_ok[g] = ok;
  }
}

/* Point group g's ops at this Run's memory (inputs and outputs may move between Runs). */
static void ebe_plan_bind_group(const ebe_plan *plan, ebe_scratch *scratch, size_t g) {
  const ebe_group *group = &plan->groups[g];
  for (size_t u = group->first_op; u < (size_t)group->first_op + group->n_ops; u++) {
    const ebe_fused_op *op = &plan->fused_ops[u];
    ebe_fused_bind *bind = &scratch->bind[u];
    for (size_t i = 0; i < 2; i++) {
      bind->data[i] = scratch->data[op->value[i]];
      bind->period[i] = scratch->numel[op->value[i]];
    }
    bind->store = scratch->data[op->out];
  }
}

/* Run the plan with one scratch. Every ORT call it makes is added to *calls, on every
 * path out (the caller charges them to ort_api_calls once). */
static OrtStatus *ebe_plan_run_with(ebe_plan *plan, ebe_scratch *scratch,
                                    OrtKernelContext *context, uint64_t *calls) {
  /* The fused loops' bindings (one per op: 100 for add_d100_w8) depend only on data[], which
   * for a static plan moves only when ORT hands over other input or output buffers. Cleared
   * first so that a Run failing half way leaves them to be redone. */
  int moved = !scratch->bound;
  scratch->bound = 0;
  for (size_t k = 0; k < plan->n_inputs; k++) {
    ebe_operand input = {NULL, 0, 0, NULL};
    EBE_RETURN_IF_ERROR(ebe_fetch_input(plan, context, k, &input, calls));
    const uint32_t id = plan->input_values[k];
    moved |= scratch->data[id] != input.data;
    scratch->data[id] = input.data;
    if (scratch->ready) continue; /* static shapes, set by an earlier Run */
    if (input.rank > 0) /* a scalar's shape pointer is NULL */
      memcpy(scratch->dims + (size_t)id * EBE_MAX_RANK, input.dims,
             sizeof(int64_t) * (size_t)input.rank);
    scratch->rank[id] = input.rank;
    scratch->numel[id] = input.numel;
  }
  if (!scratch->ready) {
    EBE_RETURN_IF_ERROR(ebe_plan_shapes(plan, scratch));
    EBE_RETURN_IF_ERROR(ebe_plan_place_slots(plan, scratch));
    ebe_plan_decide_groups(plan, scratch);
    scratch->ready = plan->all_static;
    moved = 1; /* the slots may have moved */
  }
  for (size_t k = 0; k < plan->n_outputs; k++) {
    const uint32_t id = plan->output_values[k];
    float *const before = scratch->data[id];
    EBE_RETURN_IF_ERROR(ebe_fetch_output(plan, context, k,
                                         scratch->dims + (size_t)id * EBE_MAX_RANK,
                                         scratch->rank[id], &scratch->data[id], calls));
    moved |= scratch->data[id] != before;
  }
  uint64_t loops = 0, looped = 0, stores = 0;
  for (size_t s = 0; s < plan->n_steps;) {
    const int32_t g = plan->steps[s].group;
    if (g >= 0 && scratch->group_ok[g] && plan->groups[g].first == s) {
      const ebe_group *group = &plan->groups[g];
      if (moved) ebe_plan_bind_group(plan, scratch, (size_t)g);
      ebe_kernel_fused(plan->fused_ops + group->first_op, scratch->bind + group->first_op,
                       group->n_ops, scratch->numel[plan->steps[s].out]);
      if (plan->delay_per_node.spins != 0) /* one test a loop, not one a node */
        for (size_t k = 0; k < group->count; k++) ebe_delay_spin(&plan->delay_per_node);
      loops++;
      looped += group->count;
      stores += group->n_stores;
      s += group->count;
      continue;
    }
    ebe_run_step(plan, scratch, s);
    ebe_delay_spin(&plan->delay_per_node);
    s++;
  }
  scratch->bound = scratch->ready;
  ebe_delay_count(plan->counters, &plan->delay_per_node, plan->n_steps); /* one add a Run */
  ebe_probe_add(plan->counters, EBE_C_NODES_EXECUTED, plan->n_steps);
  if (loops != 0) {
    ebe_probe_add(plan->counters, EBE_C_FUSED_LOOPS, loops);
    ebe_probe_add(plan->counters, EBE_C_FUSED_LOOP_NODES, looped);
    ebe_probe_add(plan->counters, EBE_C_FUSED_LOOP_STORES, stores);
  }
  return NULL;
}

OrtStatus *ebe_plan_run(ebe_plan *plan, OrtKernelContext *context) {
  ebe_probe_add(plan->counters, EBE_C_COMPUTE_CALLS, 1);
  uint64_t calls = 0;
  OrtStatus *status = NULL;
  if (plan->single) {
    status = ebe_plan_run_single(plan, context, &calls);
  } else {
    ebe_scratch *scratch = ebe_scratch_acquire(plan);
    if (scratch != NULL) {
      status = ebe_plan_run_with(plan, scratch, context, &calls);
      atomic_store_explicit(&scratch->busy, 0, memory_order_release);
    } else {
      /* More concurrent Runs than pooled scratch: a one-off scratch on the heap. */
      ebe_probe_add(plan->counters, EBE_C_SCRATCH_OVERFLOWS, 1);
      ebe_scratch temporary = {0};
      status = ebe_scratch_init(plan, &temporary);
      if (status == NULL) status = ebe_plan_run_with(plan, &temporary, context, &calls);
      ebe_scratch_release(plan, &temporary);
    }
  }
  ebe_probe_add(plan->counters, EBE_C_ORT_API_CALLS, calls);
  if (status != NULL) ebe_probe_add(plan->counters, EBE_C_COMPUTE_ERRORS, 1);
  return status;
}
