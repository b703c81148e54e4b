/* plan_build.c -- build the execution plan of one fused partition (in Compile): values,
 * steps, scratch slots by liveness and the fused loops' ops. See ebe_plan_internal.h. */
#include <string.h>

#include "ebe_plan_internal.h"

const char *const ebe_op_names[EBE_OP_COUNT] = {
    [EBE_OP_IDENTITY] = "Identity", [EBE_OP_RELU] = "Relu", [EBE_OP_SIGMOID] = "Sigmoid",
    [EBE_OP_ADD] = "Add",           [EBE_OP_MUL] = "Mul",   [EBE_OP_MATMUL] = "MatMul",
};

int ebe_op_from_name(const char *op_type) {
  for (int op = 0; op < EBE_OP_COUNT; op++)
    if (strcmp(op_type, ebe_op_names[op]) == 0) return op;
  return -1;
}

size_t ebe_op_arity(ebe_op op) {
  return op == EBE_OP_ADD || op == EBE_OP_MUL || op == EBE_OP_MATMUL ? 2 : 1;
}

/* ---- building ---------------------------------------------------------------------------- */

typedef struct ebe_names {
  const char **keys; /* borrowed from ORT, valid during Compile only */
  uint32_t *ids;
  size_t cap, count;
} ebe_names;

static uint64_t ebe_hash(const char *s) {
  uint64_t h = 1469598103934665603u;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211u;
  return h;
}

/* Id of a name, adding it when new; returns UINT32_MAX when the table is full (cannot happen:
 * the table is sized for every name the plan can see). */
static uint32_t ebe_names_intern(ebe_names *names, const char *key) {
  size_t slot = (size_t)(ebe_hash(key) & (names->cap - 1));
  for (size_t probe = 0; probe < names->cap; probe++) {
    if (names->keys[slot] == NULL) {
      names->keys[slot] = key;
      names->ids[slot] = (uint32_t)names->count;
      return (uint32_t)names->count++;
    }
    if (strcmp(names->keys[slot], key) == 0) return names->ids[slot];
    slot = (slot + 1) & (names->cap - 1);
  }
  return UINT32_MAX;
}

static OrtStatus *ebe_value_name(const ebe_plan_config *cfg, const OrtValueInfo *info,
                                 const char **name) {
  if (info == NULL)
    return ebe_error(cfg->api, cfg->counters, ORT_EP_FAIL, "engine: missing optional value");
  return EBE_CALL(cfg->counters, cfg->api, GetValueInfoName, info, name);
}

OrtStatus *ebe_static_shape_from_type(const OrtApi *api, ebe_counters *c,
                                      const OrtTypeInfo *type, ebe_static_shape *shape) {
  memset(shape, 0, sizeof *shape);
  const OrtTensorTypeAndShapeInfo *tensor = NULL;
  ONNXTensorElementDataType element = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  size_t rank = 0;
  if (type == NULL) return NULL;
  EBE_RETURN_IF_ERROR(EBE_CALL(c, api, CastTypeInfoToTensorInfo, type, &tensor));
  if (tensor == NULL || !EBE_CALL(c, api, TensorTypeAndShape_HasShape, tensor)) return NULL;
  EBE_RETURN_IF_ERROR(EBE_CALL(c, api, GetTensorElementType, tensor, &element));
  EBE_RETURN_IF_ERROR(EBE_CALL(c, api, GetDimensionsCount, tensor, &rank));
  if (element != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT || rank > EBE_MAX_RANK) return NULL;
  EBE_RETURN_IF_ERROR(EBE_CALL(c, api, GetDimensions, tensor, shape->dims, rank));
  for (size_t i = 0; i < rank; i++)
    if (shape->dims[i] < 0) return NULL;
  shape->rank = (int32_t)rank;
  /* Too many elements to exist: not static, so a Run checks what it gets and says so. */
  if (ebe_numel_overflow(shape->dims, shape->rank, &shape->numel)) return NULL;
  shape->is_static = 1;
  return NULL;
}

/* The static shape of a value info (see ebe_static_shape_from_type). */
static OrtStatus *ebe_read_static_shape(const ebe_plan_config *cfg, const OrtValueInfo *info,
                                        ebe_static_shape *shape) {
  const OrtTypeInfo *type = NULL;
  memset(shape, 0, sizeof *shape);
  EBE_RETURN_IF_ERROR(EBE_CALL(cfg->counters, cfg->api, GetValueInfoTypeInfo, info, &type));
  return ebe_static_shape_from_type(cfg->api, cfg->counters, type, shape);
}

/* Allocate the per-Run tables of one scratch (the arena grows later, in Runs). On failure
 * the scratch may be half built: the caller releases it with ebe_scratch_release, which
 * copes with any mix of NULL and allocated tables. */
OrtStatus *ebe_scratch_init(ebe_plan *plan, ebe_scratch *scratch) {
  ebe_counters *c = plan->counters;
  size_t n_dims = 0;
  if (ebe_mul_overflow(plan->n_values, EBE_MAX_RANK, &n_dims))
    return ebe_error(plan->api, c, ORT_FAIL, "engine: too many values to plan");
  scratch->bcast = ebe_calloc(c, plan->n_steps, sizeof *scratch->bcast);
  scratch->rank = ebe_calloc(c, plan->n_values, sizeof *scratch->rank);
  scratch->dims = ebe_calloc(c, n_dims, sizeof *scratch->dims);
  scratch->numel = ebe_calloc(c, plan->n_values, sizeof *scratch->numel);
  scratch->data = ebe_calloc(c, plan->n_values, sizeof *scratch->data);
  scratch->slot_elems = ebe_calloc(c, plan->n_slots, sizeof *scratch->slot_elems);
  scratch->group_ok = ebe_calloc(c, plan->n_groups, sizeof *scratch->group_ok);
  scratch->bind = ebe_calloc(c, plan->n_fused_ops, sizeof *scratch->bind);
  scratch->ready = 0;
  scratch->bound = 0;
  if (!scratch->bcast || !scratch->rank || !scratch->dims || !scratch->numel || !scratch->data ||
      !scratch->slot_elems || !scratch->group_ok || !scratch->bind)
    return ebe_error(plan->api, c, ORT_FAIL, "engine: out of memory building a plan");
  return NULL;
}

/* Free everything a scratch owns (NULL tables are fine) and leave it empty. */
void ebe_scratch_release(ebe_plan *plan, ebe_scratch *scratch) {
  ebe_counters *c = plan->counters;
  ebe_free(c, scratch->bcast);
  scratch->bcast = NULL;
  ebe_free(c, scratch->rank);
  ebe_free(c, scratch->dims);
  ebe_free(c, scratch->numel);
  ebe_free(c, scratch->data);
  ebe_free(c, scratch->slot_elems);
  ebe_free(c, scratch->group_ok);
  ebe_free(c, scratch->bind);
  ebe_free(c, scratch->arena);
  scratch->rank = NULL;
  scratch->dims = NULL;
  scratch->numel = NULL;
  scratch->data = NULL;
  scratch->slot_elems = NULL;
  scratch->group_ok = NULL;
  scratch->bind = NULL;
  scratch->arena = NULL;
  scratch->arena_cap = 0;
}

void ebe_plan_free(ebe_plan *plan) {
  if (plan == NULL) return;
  ebe_counters *c = plan->counters;
  for (size_t i = 0; i < EBE_POOL_SIZE; i++) ebe_scratch_release(plan, &plan->pool[i]);
  if (plan->steps != NULL)
    for (size_t i = 0; i < plan->n_steps; i++) ebe_free(c, plan->steps[i].name);
  ebe_free(c, plan->steps);
  ebe_free(c, plan->values);
  ebe_free(c, plan->input_values);
  ebe_free(c, plan->input_shapes);
  ebe_free(c, plan->output_values);
  ebe_free(c, plan->groups);
  ebe_free(c, plan->fused_ops);
  ebe_free(c, plan);
}

/* Assign scratch slots by liveness: a value takes a free slot when produced and gives it back
 * after its last reader. A unary op whose input dies at it writes in place. A value made
 * before a group and last read inside it gives its slot back only when the group ends (see
 * the top of this file). */
static OrtStatus *ebe_plan_assign_slots(ebe_plan *plan) {
  ebe_counters *c = plan->counters;
  /* n_values < max_values, whose + 1 was checked when the plan was sized */
  uint32_t *free_slots = ebe_calloc(c, plan->n_values + 1, sizeof *free_slots);
  uint32_t *deferred = ebe_calloc(c, plan->n_values + 1, sizeof *deferred);
  if (free_slots == NULL || deferred == NULL) {
    ebe_free(c, free_slots);
    ebe_free(c, deferred);
    return ebe_error(plan->api, c, ORT_FAIL, "engine: out of memory building a plan");
  }
  size_t n_free = 0, n_deferred = 0;
  for (size_t s = 0; s < plan->n_steps; s++) {
    ebe_step *step = &plan->steps[s];
    ebe_value *out = &plan->values[step->out];
    int reused = 0;
    if (out->loc == EBE_LOC_NONE) {
      ebe_value *in0 = &plan->values[step->in[0]];
      if (step->n_in == 1 && in0->loc == EBE_LOC_SLOT && in0->last_use == (int32_t)s) {
        out->loc = EBE_LOC_SLOT;
        out->index = in0->index;
        reused = 1;
      } else {
        out->loc = EBE_LOC_SLOT;
        out->index = n_free > 0 ? free_slots[--n_free] : (uint32_t)plan->n_slots++;
      }
    }
    for (uint32_t i = 0; i < step->n_in; i++) {
      if (i == 1 && step->in[1] == step->in[0]) continue; /* Mul(x, x): give back once */
      ebe_value *in = &plan->values[step->in[i]];
      if (in->loc == EBE_LOC_SLOT && in->last_use == (int32_t)s && !reused) {
        const int from_before = step->group >= 0 &&
                                in->producer < (int32_t)plan->groups[step->group].first;
        if (from_before) deferred[n_deferred++] = in->index;
        else free_slots[n_free++] = in->index;
      }
    }
    if (out->loc == EBE_LOC_SLOT && out->last_use < 0 && !reused)
      free_slots[n_free++] = out->index; /* produced but never read: dead after this step */
    if (step->group >= 0) {
      const ebe_group *group = &plan->groups[step->group];
      if (s + 1 == (size_t)group->first + group->count)
        while (n_deferred > 0) free_slots[n_free++] = deferred[--n_deferred];
    }
  }
  ebe_free(c, free_slots);
  ebe_free(c, deferred);
  return NULL;
}

/* Find the groups: runs of two or more consecutive elementwise steps. Sets each step's
 * group; plan->groups gets one entry per group (first and count; the ops come later). */
static OrtStatus *ebe_plan_find_groups(ebe_plan *plan) {
  size_t n_groups = 0;
  for (size_t pass = 0; pass < 2; pass++) {
    n_groups = 0;
    size_t s = 0;
    while (s < plan->n_steps) {
      size_t end = s;
      while (end < plan->n_steps && plan->steps[end].op != EBE_OP_MATMUL) end++;
      if (end - s >= 2) {
        if (pass == 1) {
          plan->groups[n_groups] = (ebe_group){(uint32_t)s, (uint32_t)(end - s), 0, 0, 0};
          for (size_t k = s; k < end; k++) plan->steps[k].group = (int32_t)n_groups;
        }
        n_groups++;
      }
      s = end > s ? end : s + 1; /* past the run, or past the MatMul that ends none */
    }
    if (pass == 0) {
      plan->groups = ebe_calloc(plan->counters, n_groups, sizeof *plan->groups);
      if (plan->groups == NULL)
        return ebe_error(plan->api, plan->counters, ORT_FAIL,
                         "engine: out of memory building a plan");
    }
  }
  plan->n_groups = n_groups;
  return NULL;
}

static uint8_t ebe_fused_code_of(ebe_op op) {
  switch (op) {
    case EBE_OP_RELU: return EBE_FUSED_RELU;
    case EBE_OP_SIGMOID: return EBE_FUSED_SIGMOID;
    case EBE_OP_ADD: return EBE_FUSED_ADD;
    case EBE_OP_MUL: return EBE_FUSED_MUL;
    default: return EBE_FUSED_IDENTITY;
  }
}

/* Compile each group into fused-loop ops (after ebe_plan_assign_slots: a value that needs a
 * block register when all EBE_FUSED_MAX_REGS are taken is stored to its slot instead).
 * A value made in the group is
 *   stored   when it is a fused output or a step after the group reads it (or, rarely, no
 *            block register is free): written to its memory, read back from there;
 *   spilled  when a step of the group other than the next one reads it: kept in a block
 *            register;
 *   else     only in the accumulator, never in memory (it is read by the next step only, or
 *            by nothing).
 * A unary step that reads the accumulator joins the op before it when that op has the same
 * code and its result goes nowhere else (a Relu chain is one op, repeated), and an Identity
 * joins any such op (in registers it does nothing). */
static OrtStatus *ebe_plan_build_fused(ebe_plan *plan) {
  ebe_counters *c = plan->counters;
  size_t in_groups = 0;
  for (size_t g = 0; g < plan->n_groups; g++) in_groups += plan->groups[g].count;
  uint8_t *stored = ebe_calloc(c, plan->n_values, sizeof *stored);
  uint8_t *far = ebe_calloc(c, plan->n_values, sizeof *far);
  int16_t *reg_of = ebe_calloc(c, plan->n_values, sizeof *reg_of);
  plan->fused_ops = ebe_calloc(c, in_groups, sizeof *plan->fused_ops);
  if (stored == NULL || far == NULL || reg_of == NULL || plan->fused_ops == NULL) {
    ebe_free(c, stored);
    ebe_free(c, far);
    ebe_free(c, reg_of);
    return ebe_error(plan->api, c, ORT_FAIL, "engine: out of memory building a plan");
  }
  size_t n_ops = 0;
  for (size_t g = 0; g < plan->n_groups; g++) {
    ebe_group *group = &plan->groups[g];
    const size_t first = group->first, end = first + group->count;
    for (size_t s = first; s < end; s++) {
      const uint32_t v = plan->steps[s].out;
      const ebe_value *value = &plan->values[v];
      stored[v] = value->loc == EBE_LOC_OUTPUT || value->last_use >= (int32_t)end;
      far[v] = 0;
      reg_of[v] = -1;
    }
    for (size_t s = first; s < end; s++) {
      const ebe_step *step = &plan->steps[s];
      for (uint32_t i = 0; i < step->n_in; i++) {
        const int32_t producer = plan->values[step->in[i]].producer;
        if (producer >= (int32_t)first && producer + 1 != (int32_t)s) far[step->in[i]] = 1;
      }
    }
    /* Block registers by liveness: a register read last at step s can take s's result
     * (the op reads its operands before it spills). */
    uint32_t owner[EBE_FUSED_MAX_REGS];
    for (size_t r = 0; r < EBE_FUSED_MAX_REGS; r++) owner[r] = UINT32_MAX;
    for (size_t s = first; s < end; s++) {
      const uint32_t v = plan->steps[s].out;
      for (size_t r = 0; r < EBE_FUSED_MAX_REGS; r++)
        if (owner[r] != UINT32_MAX && plan->values[owner[r]].last_use <= (int32_t)s)
          owner[r] = UINT32_MAX;
      if (!far[v] || stored[v]) continue;
      for (size_t r = 0; r < EBE_FUSED_MAX_REGS && reg_of[v] < 0; r++) {
        if (owner[r] == UINT32_MAX) {
          owner[r] = v;
          reg_of[v] = (int16_t)r;
        }
      }
      if (reg_of[v] < 0) stored[v] = 1; /* every register taken: its slot holds it */
    }
    group->first_op = (uint32_t)n_ops;
    for (size_t s = first; s < end; s++) {
      const ebe_step *step = &plan->steps[s];
      ebe_fused_op op = {ebe_fused_code_of(step->op), {EBE_FUSED_MEM, EBE_FUSED_MEM}, 0, -1,
                         {0, 0}, 1, {step->in[0], step->in[step->n_in - 1]}, step->out, 0};
      for (uint32_t i = 0; i < 2; i++) {
        const uint32_t x = op.value[i];
        const int32_t producer = plan->values[x].producer;
        if (producer < (int32_t)first) continue; /* from before the group: memory */
        if (producer + 1 == (int32_t)s) {
          op.kind[i] = EBE_FUSED_ACC;
        } else if (reg_of[x] >= 0) {
          op.kind[i] = EBE_FUSED_REG;
          op.reg[i] = (uint16_t)reg_of[x];
        }
      }
      ebe_fused_op *last = n_ops > group->first_op ? &plan->fused_ops[n_ops - 1] : NULL;
      if (last != NULL && step->n_in == 1 && op.kind[0] == EBE_FUSED_ACC &&
          !stored[last->out] && reg_of[last->out] < 0 &&
          (op.code == EBE_FUSED_IDENTITY || op.code == last->code)) {
        if (op.code != EBE_FUSED_IDENTITY) last->repeat++;
        last->out = step->out;
        continue;
      }
      plan->fused_ops[n_ops++] = op;
    }
    group->n_ops = (uint32_t)(n_ops - group->first_op);
    for (size_t u = group->first_op; u < n_ops; u++) {
      ebe_fused_op *op = &plan->fused_ops[u];
      op->store = stored[op->out];
      op->spill = reg_of[op->out];
      op->plain = (op->code == EBE_FUSED_ADD || op->code == EBE_FUSED_MUL) &&
                  op->kind[0] == EBE_FUSED_ACC && op->kind[1] == EBE_FUSED_MEM && !op->store &&
                  op->spill < 0;
      group->n_stores += op->store;
    }
  }
  plan->n_fused_ops = n_ops;
  ebe_free(c, stored);
  ebe_free(c, far);
  ebe_free(c, reg_of);
  return NULL;
}

OrtStatus *ebe_plan_build(const ebe_plan_config *cfg, const OrtGraph *graph,
                          const OrtNode *fused_node, ebe_plan **out) {
  *out = NULL;
  const OrtApi *api = cfg->api;
  ebe_counters *c = cfg->counters;
  OrtStatus *status = NULL;
  const OrtValueInfo **in_infos = NULL, **out_infos = NULL;
  const OrtNode **nodes = NULL;
  ebe_names names = {0};
  size_t n_nodes = 0;

  ebe_plan *plan = ebe_calloc(c, 1, sizeof *plan);
  if (plan == NULL) return ebe_error(api, c, ORT_FAIL, "engine: out of memory building a plan");
  plan->api = api;
  plan->counters = c;
  plan->delay_per_node = ebe_delay_for_ns(cfg->delay_ns_per_node);

  EBE_GOTO_IF_ERROR(status, EBE_CALL(c, api, Node_GetNumInputs, fused_node, &plan->n_inputs),
                    fail);
  EBE_GOTO_IF_ERROR(status, EBE_CALL(c, api, Node_GetNumOutputs, fused_node, &plan->n_outputs),
                    fail);
  EBE_GOTO_IF_ERROR(status, EBE_CALL(c, api, Graph_GetNumNodes, graph, &n_nodes), fail);
  plan->n_steps = n_nodes;

  /* Every value is a fused input or some node's output (one per node): an upper bound. The
   * name table holds at least twice as many (a power of two), and ids are uint32_t. */
  size_t max_values = 0, twice = 0;
  if (ebe_mul_overflow(n_nodes, 3, &max_values) ||
      ebe_add_overflow(max_values, plan->n_inputs, &max_values) ||
      ebe_add_overflow(max_values, plan->n_outputs, &max_values) ||
      ebe_add_overflow(max_values, 1, &max_values) || ebe_mul_overflow(max_values, 2, &twice) ||
      max_values >= UINT32_MAX || twice > (SIZE_MAX >> 1) + 1) {
    status = ebe_error(api, c, ORT_EP_FAIL, "engine: partition too large to plan (%zu nodes)",
                       n_nodes);
    goto fail;
  }
  in_infos = ebe_calloc(c, plan->n_inputs, sizeof *in_infos);
  out_infos = ebe_calloc(c, plan->n_outputs, sizeof *out_infos);
  nodes = ebe_calloc(c, n_nodes, sizeof *nodes);
  plan->steps = ebe_calloc(c, n_nodes, sizeof *plan->steps);
  plan->input_values = ebe_calloc(c, plan->n_inputs, sizeof *plan->input_values);
  plan->input_shapes = ebe_calloc(c, plan->n_inputs, sizeof *plan->input_shapes);
  plan->output_values = ebe_calloc(c, plan->n_outputs, sizeof *plan->output_values);
  names.cap = 16;
  while (names.cap < twice) names.cap *= 2; /* twice <= 2^(bits-1): cannot wrap */
  names.keys = ebe_calloc(c, names.cap, sizeof *names.keys);
  names.ids = ebe_calloc(c, names.cap, sizeof *names.ids);
  plan->values = ebe_calloc(c, max_values, sizeof *plan->values);
  if (!in_infos || !out_infos || !nodes || !plan->steps || !plan->input_values ||
      !plan->input_shapes ||
      !plan->output_values || !names.keys || !names.ids ||
      !plan->values) {
    status = ebe_error(api, c, ORT_FAIL, "engine: out of memory building a plan");
    goto fail;
  }
  for (size_t v = 0; v < max_values; v++) {
    plan->values[v].producer = -1;
    plan->values[v].last_use = -1;
  }

  EBE_GOTO_IF_ERROR(status,
                    EBE_CALL(c, api, Node_GetInputs, fused_node, in_infos, plan->n_inputs), fail);
  for (size_t k = 0; k < plan->n_inputs; k++) {
    const char *name = NULL;
    EBE_GOTO_IF_ERROR(status, ebe_value_name(cfg, in_infos[k], &name), fail);
    const uint32_t id = ebe_names_intern(&names, name);
    plan->input_values[k] = id;
    EBE_GOTO_IF_ERROR(status, ebe_read_static_shape(cfg, in_infos[k], &plan->input_shapes[k]),
                      fail);
    if (plan->values[id].loc == EBE_LOC_NONE) {
      plan->values[id].loc = EBE_LOC_INPUT;
      plan->values[id].index = (uint32_t)k;
    }
  }
  EBE_GOTO_IF_ERROR(status,
                    EBE_CALL(c, api, Node_GetOutputs, fused_node, out_infos, plan->n_outputs),
                    fail);
  for (size_t k = 0; k < plan->n_outputs; k++) {
    const char *name = NULL;
    EBE_GOTO_IF_ERROR(status, ebe_value_name(cfg, out_infos[k], &name), fail);
    const uint32_t id = ebe_names_intern(&names, name);
    plan->output_values[k] = id;
    /* ORT lists each value once among a fused node's outputs, and never one of its inputs
     * (a graph naming one tensor as two outputs, or an input as an output, still gives
     * distinct fused outputs on ORT 1.32): anything else is refused, not copied. */
    if (plan->values[id].loc != EBE_LOC_NONE) {
      status = ebe_error(api, c, ORT_EP_FAIL,
                         "engine: fused output '%s' is listed twice or is also an input", name);
      goto fail;
    }
    plan->values[id].loc = EBE_LOC_OUTPUT;
    plan->values[id].index = (uint32_t)k;
  }

  EBE_GOTO_IF_ERROR(status, EBE_CALL(c, api, Graph_GetNodes, graph, nodes, n_nodes), fail);
  for (size_t s = 0; s < n_nodes; s++) {
    ebe_step *step = &plan->steps[s];
    const char *op_type = NULL, *node_name = NULL;
    size_t n_in = 0, n_out = 0;
    EBE_GOTO_IF_ERROR(status, EBE_CALL(c, api, Node_GetOperatorType, nodes[s], &op_type), fail);
    EBE_GOTO_IF_ERROR(status, EBE_CALL(c, api, Node_GetName, nodes[s], &node_name), fail);
    step->name = ebe_strdup(c, node_name != NULL ? node_name : "");
    const int op = ebe_op_from_name(op_type);
    EBE_GOTO_IF_ERROR(status, EBE_CALL(c, api, Node_GetNumInputs, nodes[s], &n_in), fail);
    EBE_GOTO_IF_ERROR(status, EBE_CALL(c, api, Node_GetNumOutputs, nodes[s], &n_out), fail);
    if (step->name == NULL || op < 0 || n_in != ebe_op_arity((ebe_op)op) || n_out != 1) {
      status = ebe_error(api, c, ORT_EP_FAIL,
                         "engine: cannot compile node '%s' (%s, %zu inputs, %zu outputs)",
                         node_name ? node_name : "", op_type, n_in, n_out);
      goto fail;
    }
    step->op = (ebe_op)op;
    step->n_in = (uint32_t)n_in;
    step->group = -1;
    const OrtValueInfo *io[3] = {NULL, NULL, NULL};
    EBE_GOTO_IF_ERROR(status, EBE_CALL(c, api, Node_GetInputs, nodes[s], io, n_in), fail);
    EBE_GOTO_IF_ERROR(status, EBE_CALL(c, api, Node_GetOutputs, nodes[s], io + n_in, 1), fail);
    for (size_t i = 0; i <= n_in; i++) {
      const char *name = NULL;
      EBE_GOTO_IF_ERROR(status, ebe_value_name(cfg, io[i], &name), fail);
      const uint32_t id = ebe_names_intern(&names, name);
      if (id >= max_values) {
        status = ebe_error(api, c, ORT_FAIL, "engine: value table overflow");
        goto fail;
      }
      ebe_value *value = &plan->values[id];
      if (i < n_in) {
        step->in[i] = id;
        if (value->loc != EBE_LOC_INPUT && value->producer < 0) {
          status = ebe_error(api, c, ORT_EP_FAIL,
                             "engine: node '%s' reads '%s', which nothing before it produces",
                             step->name, name);
          goto fail;
        }
        value->last_use = (int32_t)s;
      } else {
        step->out = id;
        if (value->producer >= 0 || value->loc == EBE_LOC_INPUT) {
          status = ebe_error(api, c, ORT_EP_FAIL, "engine: value '%s' is produced twice", name);
          goto fail;
        }
        value->producer = (int32_t)s;
      }
    }
  }
  plan->n_values = names.count;
  for (size_t k = 0; k < plan->n_outputs; k++) {
    if (plan->values[plan->output_values[k]].producer < 0) {
      status = ebe_error(api, c, ORT_EP_FAIL, "engine: fused output %zu is produced by no node",
                         k);
      goto fail;
    }
  }
  EBE_GOTO_IF_ERROR(status, ebe_plan_find_groups(plan), fail);
  EBE_GOTO_IF_ERROR(status, ebe_plan_assign_slots(plan), fail);
  EBE_GOTO_IF_ERROR(status, ebe_plan_build_fused(plan), fail);
  plan->single = plan->n_steps == 1 && plan->n_outputs == 1 && plan->n_inputs <= 2;
  plan->all_static = 1;
  for (size_t k = 0; k < plan->n_inputs; k++)
    if (!plan->input_shapes[k].is_static) plan->all_static = 0;
  for (size_t i = 0; i < EBE_POOL_SIZE; i++)
    EBE_GOTO_IF_ERROR(status, ebe_scratch_init(plan, &plan->pool[i]), fail);

  ebe_free(c, in_infos);
  ebe_free(c, out_infos);
  ebe_free(c, nodes);
  ebe_free(c, names.keys);
  ebe_free(c, names.ids);
  *out = plan;
  return NULL;

fail:
  ebe_free(c, in_infos);
  ebe_free(c, out_infos);
  ebe_free(c, nodes);
  ebe_free(c, names.keys);
  ebe_free(c, names.ids);
  ebe_plan_free(plan);
  return status;
}

OrtStatus *ebe_plan_build_node(const ebe_plan_config *cfg, ebe_op op, const char *name,
                               const ebe_static_shape *shapes, ebe_plan **out) {
  *out = NULL;
  ebe_counters *c = cfg->counters;
  const size_t arity = ebe_op_arity(op);
  ebe_plan *plan = ebe_calloc(c, 1, sizeof *plan);
  if (plan == NULL)
    return ebe_error(cfg->api, c, ORT_FAIL, "engine: out of memory building a kernel");
  plan->api = cfg->api;
  plan->counters = c;
  plan->delay_per_node = ebe_delay_for_ns(cfg->delay_ns_per_node);
  plan->n_inputs = arity;
  plan->n_outputs = 1;
  plan->n_steps = 1;
  plan->n_values = arity + 1;
  plan->steps = ebe_calloc(c, 1, sizeof *plan->steps);
  plan->values = ebe_calloc(c, arity + 1, sizeof *plan->values);
  plan->input_values = ebe_calloc(c, arity, sizeof *plan->input_values);
  plan->output_values = ebe_calloc(c, 1, sizeof *plan->output_values);
  plan->input_shapes = ebe_calloc(c, arity, sizeof *plan->input_shapes);
  if (plan->steps != NULL) plan->steps[0].name = ebe_strdup(c, name);
  if (!plan->steps || !plan->values || !plan->input_values || !plan->output_values ||
      !plan->input_shapes || !plan->steps[0].name) {
    ebe_plan_free(plan);
    return ebe_error(cfg->api, c, ORT_FAIL, "engine: out of memory building a kernel");
  }
  ebe_step *step = &plan->steps[0];
  step->op = op;
  step->n_in = (uint32_t)arity;
  step->group = -1;
  for (size_t k = 0; k < arity; k++) {
    plan->values[k] = (ebe_value){EBE_LOC_INPUT, (uint32_t)k, -1, 0};
    plan->input_values[k] = (uint32_t)k;
    plan->input_shapes[k] = shapes[k];
    step->in[k] = (uint32_t)k;
  }
  plan->values[arity] = (ebe_value){EBE_LOC_OUTPUT, 0, 0, -1};
  plan->output_values[0] = (uint32_t)arity;
  step->out = (uint32_t)arity;
  plan->single = 1; /* ebe_plan_run_single: no scratch pool, no slots */
  *out = plan;
  return NULL;
}