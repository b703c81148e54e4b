/* probe.c -- counter storage and the exported probe functions. */
#include <pthread.h>
#include <string.h>

#include "ebe_common.h"
#include "ebe_delay.h"

#define EBE_PROBE_MAX_EPS 64
#define EBE_PROBE_MAX_NAME 128

typedef struct ebe_probe_entry {
  _Atomic int used; /* set (release) once name is written; entries are never removed */
  char name[EBE_PROBE_MAX_NAME];
  ebe_counters counters;
} ebe_probe_entry;

ebe_counters ebe_probe_unattributed;
static ebe_probe_entry ebe_probe_entries[EBE_PROBE_MAX_EPS];
static pthread_mutex_t ebe_probe_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const ebe_probe_names[EBE_C_COUNT] = {
    [EBE_C_ORT_API_CALLS] = "ort_api_calls",
    [EBE_C_HEAP_ALLOCS] = "heap_allocs",
    [EBE_C_HEAP_BYTES] = "heap_bytes",
    [EBE_C_HEAP_FREES] = "heap_frees",
    [EBE_C_RUNS] = "runs",
    [EBE_C_COMPUTE_CALLS] = "compute_calls",
    [EBE_C_NODES_EXECUTED] = "nodes_executed",
    [EBE_C_COMPUTE_ERRORS] = "compute_errors",
    [EBE_C_SCRATCH_OVERFLOWS] = "scratch_overflows",
    [EBE_C_STRIDED_BROADCASTS] = "strided_broadcasts",
    [EBE_C_IN_PLACE_STEPS] = "in_place_steps",
    [EBE_C_INJECTED_DELAY_NS] = "injected_delay_ns",
    [EBE_C_FUSED_LOOPS] = "fused_loops",
    [EBE_C_FUSED_LOOP_NODES] = "fused_loop_nodes",
    [EBE_C_FUSED_LOOP_STORES] = "fused_loop_stores",
};

/* Lock-free lookup of an existing entry; NULL when absent. */
static ebe_probe_entry *ebe_probe_find(const char *ep_name) {
  for (size_t i = 0; i < EBE_PROBE_MAX_EPS; i++) {
    ebe_probe_entry *entry = &ebe_probe_entries[i];
    if (!atomic_load_explicit(&entry->used, memory_order_acquire)) return NULL;
    if (strcmp(entry->name, ep_name) == 0) return entry;
  }
  return NULL;
}

ebe_counters *ebe_probe_counters_for(const char *ep_name) {
  if (ep_name == NULL || strlen(ep_name) >= EBE_PROBE_MAX_NAME) return NULL;
  pthread_mutex_lock(&ebe_probe_lock);
  ebe_counters *found = NULL;
  for (size_t i = 0; i < EBE_PROBE_MAX_EPS; i++) {
    ebe_probe_entry *entry = &ebe_probe_entries[i];
    if (!atomic_load_explicit(&entry->used, memory_order_acquire)) {
      /* Entries fill in order, so the first unused one is where the name goes. */
      memcpy(entry->name, ep_name, strlen(ep_name) + 1);
      atomic_store_explicit(&entry->used, 1, memory_order_release);
      found = &entry->counters;
      break;
    }
    if (strcmp(entry->name, ep_name) == 0) {
      found = &entry->counters;
      break;
    }
  }
  pthread_mutex_unlock(&ebe_probe_lock);
  return found;
}

static size_t ebe_probe_copy(const ebe_counters *counters, uint64_t *out, size_t len) {
  for (size_t i = 0; i < len && i < EBE_C_COUNT; i++)
    out[i] = atomic_load_explicit(&counters->value[i], memory_order_relaxed);
  return EBE_C_COUNT;
}

/* Copy up to len total counters (every EP plus unattributed) into out; returns how many
 * counters exist. */
EBE_EXPORT size_t epbench_probe_snapshot(uint64_t *out, size_t len) {
  if (out == NULL) return EBE_C_COUNT;
  ebe_probe_copy(&ebe_probe_unattributed, out, len);
  for (size_t e = 0; e < EBE_PROBE_MAX_EPS; e++) {
    if (!atomic_load_explicit(&ebe_probe_entries[e].used, memory_order_acquire)) break;
    for (size_t i = 0; i < len && i < EBE_C_COUNT; i++)
      out[i] += atomic_load_explicit(&ebe_probe_entries[e].counters.value[i],
                                     memory_order_relaxed);
  }
  return EBE_C_COUNT;
}

/* Same for one EP name; returns 0 when no EP of that name was ever created. */
EBE_EXPORT size_t epbench_probe_snapshot_ep(const char *ep_name, uint64_t *out, size_t len) {
  if (ep_name == NULL) return 0;
  ebe_probe_entry *entry = ebe_probe_find(ep_name);
  if (entry == NULL) return 0;
  return ebe_probe_copy(&entry->counters, out, out == NULL ? 0 : len);
}

/* Zero every counter (total and per EP). Not atomic as a whole: call it when idle. */
EBE_EXPORT void epbench_probe_reset(void) {
  for (size_t i = 0; i < EBE_C_COUNT; i++)
    atomic_store_explicit(&ebe_probe_unattributed.value[i], 0, memory_order_relaxed);
  for (size_t e = 0; e < EBE_PROBE_MAX_EPS; e++) {
    if (!atomic_load_explicit(&ebe_probe_entries[e].used, memory_order_acquire)) break;
    for (size_t i = 0; i < EBE_C_COUNT; i++)
      atomic_store_explicit(&ebe_probe_entries[e].counters.value[i], 0, memory_order_relaxed);
  }
}

/* Name of counter i, or NULL past the end. */
EBE_EXPORT const char *epbench_probe_name(size_t i) {
  return i < EBE_C_COUNT ? ebe_probe_names[i] : NULL;
}

/* Loop iterations the inject_delay_* knobs of this library copy spin for ns nanoseconds
 * (timing the loop first if no knob has yet). Cannot fail. */
EBE_EXPORT uint64_t epbench_probe_spins_for_ns(uint64_t ns) {
  return ebe_delay_spins_for_ns(ns);
}
