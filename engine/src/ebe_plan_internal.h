/* ebe_plan_internal.h -- what plan_build.c and plan_run.c share: the plan's layout.
 *
 * A plan is a list of steps (one per ONNX node, in ORT's topological order) over numbered
 * values. Each value lives in one place: a fused-node input (ORT's buffer), a fused-node
 * output (ORT's buffer, the caller's own when io-binding pre-bound it), or a slot of the
 * per-Run scratch arena. Slots are assigned once at build time by liveness, so a chain of
 * unary ops runs in place in one slot. Shapes are computed at run time from the input shapes
 * (symbolic dims included), which is why slot sizes are only known then: the arena grows on
 * the first Run that needs more and is reused afterwards (zero allocations in steady state).
 * When every input shape is static, the shapes, slots and fusion decisions of the first Run
 * that succeeds are kept and later Runs skip straight to the kernels.
 *
 * Loop fusion: every run of two or more consecutive elementwise steps (MatMul ends one) is a
 * group, compiled at build time into one fused loop (ebe_kernel_fused): each block of
 * elements goes through the whole group in registers before the next block is loaded, and
 * a value made inside the group is written to memory only when something after the group
 * reads it or it is a fused output. A Run whose shapes make some step of a group change the
 * element count, or need the general strided broadcast, runs that group step by step, from
 * the slots (every value keeps one, so that path is always there). For the fused loop to
 * read the slots the sequential liveness gave out, a value from before a group that the
 * group reads keeps its slot until the group ends (a repeated broadcast operand is read by
 * every block, so nothing made in the group may overwrite it).
 */
#ifndef EBE_PLAN_INTERNAL_H
#define EBE_PLAN_INTERNAL_H

#include <stdatomic.h>

#include "ebe_kernels.h"
#include "ebe_plan.h"

/* Scratch entries kept per plan: this many concurrent Runs never touch the heap. */
#define EBE_POOL_SIZE 4

typedef enum ebe_loc { EBE_LOC_NONE = 0, EBE_LOC_INPUT, EBE_LOC_OUTPUT, EBE_LOC_SLOT } ebe_loc;

typedef struct ebe_value {
  ebe_loc loc;
  uint32_t index;    /* input index, output index, or slot index */
  int32_t producer;  /* step index, -1 for fused inputs */
  int32_t last_use;  /* last step reading it, -1 when none */
} ebe_value;

typedef struct ebe_step {
  ebe_op op;
  uint32_t n_in;
  uint32_t in[2];
  uint32_t out;
  int32_t group; /* the fused loop (group) it belongs to, or -1 */
  char *name; /* node name, for error messages */
} ebe_step;

/* A fused loop: steps [first, first + count), ops [first_op, first_op + n_ops) of the plan's
 * fused_ops (fewer ops than steps where a chain of one unary op became one repeated op). */
typedef struct ebe_group {
  uint32_t first, count, first_op, n_ops;
  uint32_t n_stores; /* ops that write their result to memory */
} ebe_group;

/* How a binary elementwise step runs on this Run's shapes (decided once, in the shape pass). */
typedef struct ebe_bcast {
  uint8_t general; /* 1: numpy broadcast by strides (no fast case applies), 0: fast kernel */
  uint8_t swap;    /* fast kernel: b is the big operand */
  size_t period;   /* fast kernel: the small operand's repeat length */
} ebe_bcast;

typedef struct ebe_scratch {
  _Atomic int busy;
  ebe_bcast *bcast;   /* [n_steps] */
  int32_t *rank;      /* [n_values] */
  int64_t *dims;      /* [n_values * EBE_MAX_RANK] */
  size_t *numel;      /* [n_values] element counts, checked in the shape pass */
  float **data;       /* [n_values] */
  size_t *slot_elems; /* [n_slots] */
  uint8_t *group_ok;  /* [n_groups] 1: this Run's shapes let the group run as one loop */
  ebe_fused_bind *bind; /* [n_fused_ops] the fused loops' memory operands in this Run */
  float *arena;
  size_t arena_cap; /* floats */
  int ready; /* the shapes, slots and group_ok of static inputs are set: skip those passes */
  int bound; /* bind holds this scratch's data pointers as the last Run (a static plan's)
                left them: a Run whose inputs and outputs did not move skips binding */
} ebe_scratch;

struct ebe_plan {
  const OrtApi *api;
  ebe_counters *counters;
  ebe_delay delay_per_node; /* test knob, spun after every node */
  size_t n_values, n_steps, n_inputs, n_outputs, n_slots;
  ebe_value *values;
  ebe_step *steps;
  uint32_t *input_values;  /* [n_inputs] value of fused input k */
  ebe_static_shape *input_shapes; /* [n_inputs] the declared shape, when fully static */
  uint32_t *output_values; /* [n_outputs] value of fused output k */
  int single;              /* one node, one output: ebe_plan_run_single, no scratch */
  int all_static;          /* every input's shape is static: a scratch's first Run holds */
  size_t n_groups, n_fused_ops;
  ebe_group *groups;         /* [n_groups] */
  ebe_fused_op *fused_ops;   /* [n_fused_ops] */
  ebe_scratch pool[EBE_POOL_SIZE];
};

/* ONNX op type name of each op (error messages, ebe_op_from_name). */
extern const char *const ebe_op_names[EBE_OP_COUNT];

/* A scratch's per-Run tables, and their release (plan_build.c). */
OrtStatus *ebe_scratch_init(ebe_plan *plan, ebe_scratch *scratch);
void ebe_scratch_release(ebe_plan *plan, ebe_scratch *scratch);

#endif
