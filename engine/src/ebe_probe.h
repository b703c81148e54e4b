/* ebe_probe.h -- the engine's deterministic counters: one block in total, one per EP name.
 *
 * Exported with C linkage (see epbench_engine.map): epbench_probe_snapshot,
 * epbench_probe_snapshot_ep, epbench_probe_reset, epbench_probe_name,
 * epbench_probe_spins_for_ns. Counters are relaxed
 * atomics: exact counts, no ordering promises between them.
 */
#ifndef EBE_PROBE_H
#define EBE_PROBE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef enum ebe_counter_id {
  EBE_C_ORT_API_CALLS = 0, /* calls into OrtApiBase/OrtApi/OrtEpApi */
  EBE_C_HEAP_ALLOCS,       /* successful allocations by the engine */
  EBE_C_HEAP_BYTES,        /* bytes requested by those allocations */
  EBE_C_HEAP_FREES,        /* non-NULL frees by the engine */
  EBE_C_RUNS,              /* OnRunStart notifications (one per session Run) */
  EBE_C_COMPUTE_CALLS,     /* fused-node Compute calls */
  EBE_C_NODES_EXECUTED,    /* ONNX nodes executed inside those Compute calls */
  EBE_C_COMPUTE_ERRORS,    /* Compute calls that returned an error status */
  EBE_C_SCRATCH_OVERFLOWS, /* Runs that found every pooled scratch busy (heap fallback) */
  EBE_C_STRIDED_BROADCASTS, /* Add/Mul steps run by the general strided broadcast */
  EBE_C_IN_PLACE_STEPS,     /* one-node steps whose output buffer ORT made the input's */
  EBE_C_INJECTED_DELAY_NS,  /* nanoseconds asked of the inject_delay_* test knobs */
  EBE_C_FUSED_LOOPS,        /* fused elementwise loops run (one pass over memory each) */
  EBE_C_FUSED_LOOP_NODES,   /* nodes run inside those loops */
  EBE_C_FUSED_LOOP_STORES,  /* tensors those loops wrote to memory (the rest stayed in
                               registers) */
  EBE_C_COUNT
} ebe_counter_id;

typedef struct ebe_counters {
  _Atomic uint64_t value[EBE_C_COUNT];
} ebe_counters;

/* Counts made with no EP name to charge (counters == NULL). The total is not stored: a
 * snapshot sums this block and every per-EP block, so each count costs one atomic add. */
extern ebe_counters ebe_probe_unattributed;

/* Add n to one counter of `counters` (NULL: the unattributed block). */
static inline void ebe_probe_add(ebe_counters *counters, ebe_counter_id id, uint64_t n) {
  atomic_fetch_add_explicit(&(counters != NULL ? counters : &ebe_probe_unattributed)->value[id],
                            n, memory_order_relaxed);
}

/* The counter block of an EP name, created on first use. Lives until the library unloads
 * (never freed: its address is cached by factories, EPs and plans). NULL when the fixed
 * registry is full or the name is too long; callers then count in the total only. */
ebe_counters *ebe_probe_counters_for(const char *ep_name);

#endif
