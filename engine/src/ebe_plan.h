/* ebe_plan.h -- the execution plan of one fused partition: built once in Compile, run by
 * every Compute. A plan is immutable after ebe_plan_build except for its scratch pool, whose
 * entries are claimed with an atomic flag, so concurrent Runs on one session are safe. */
#ifndef EBE_PLAN_H
#define EBE_PLAN_H

#include "ebe_common.h"
#include "ebe_delay.h"

typedef enum ebe_op {
  EBE_OP_IDENTITY = 0,
  EBE_OP_RELU,
  EBE_OP_SIGMOID,
  EBE_OP_ADD,
  EBE_OP_MUL,
  EBE_OP_MATMUL,
  EBE_OP_COUNT
} ebe_op;

/* The op of an ONNX op type name (default domain), or -1 when the engine has no kernel. */
int ebe_op_from_name(const char *op_type);
/* Number of inputs the op takes (all ops have one output). */
size_t ebe_op_arity(ebe_op op);

typedef struct ebe_plan_config {
  const OrtApi *api;
  ebe_counters *counters;     /* per-EP block (may be NULL); totals are always counted */
  uint64_t delay_ns_per_node; /* test knob: spin this long after each node, 0 = off */
} ebe_plan_config;

typedef struct ebe_plan ebe_plan;

/* A tensor's declared shape when it is float32 with no symbolic or unknown dim. ORT checks a
 * graph input's dims and type against it before Run, and type-checks every kernel's output,
 * so a Run need not ask for the shape of such an input. */
typedef struct ebe_static_shape {
  int is_static; /* 0: ask ORT every Run (rank and dims unused) */
  int32_t rank;
  int64_t dims[EBE_MAX_RANK];
  size_t numel; /* element count (ebe_numel_overflow), checked when the shape is read */
} ebe_static_shape;

/* Fill *shape from a type (NULL: not static). Returns an error status only when an ORT query
 * fails; a type that is not a static float32 tensor, or whose element count overflows, just
 * leaves shape->is_static 0 (a Run then checks the shape it gets). Borrows `type`. */
OrtStatus *ebe_static_shape_from_type(const OrtApi *api, ebe_counters *counters,
                                      const OrtTypeInfo *type, ebe_static_shape *shape);

/* Build the plan of `graph` (the nodes of one partition) whose fused node is `fused_node`.
 * On success *out owns a new plan (free with ebe_plan_free); on failure *out is NULL and the
 * returned status says why. Does not keep any pointer into graph or fused_node. */
OrtStatus *ebe_plan_build(const ebe_plan_config *config, const OrtGraph *graph,
                          const OrtNode *fused_node, ebe_plan **out);

/* Build the plan of one node run as a registered kernel: inputs 0..arity-1, output 0,
 * `shapes` [arity] the inputs' static shapes (copied). On success *out owns a new plan (free
 * with ebe_plan_free); on failure *out is NULL and the status says why. `name` is copied. */
OrtStatus *ebe_plan_build_node(const ebe_plan_config *config, ebe_op op, const char *name,
                               const ebe_static_shape *shapes, ebe_plan **out);

/* Run the plan on a kernel context. Returns NULL or an error status the caller owns (bad
 * input shape, an input that is not float32, out of memory); never aborts. In steady state (after the first
 * Run with the largest shapes) it allocates nothing and makes exactly
 * 3 * inputs + 2 * outputs ORT calls. */
OrtStatus *ebe_plan_run(ebe_plan *plan, OrtKernelContext *context);

/* Free a plan and everything it owns. NULL is a no-op. */
void ebe_plan_free(ebe_plan *plan);

#endif
