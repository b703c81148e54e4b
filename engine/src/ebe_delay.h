/* ebe_delay.h -- the inject_delay_* test knobs: a counted, calibrated loop.
 *
 * A wait that watches the clock cannot be shorter than two clock reads (20-40 ns where the
 * clock ticks in 10 ns steps: 1 % of a 1.7 us Run was not injected, 2 % only in part). An
 * iteration of a loop costs a fraction of a nanosecond to a few cycles, so the knobs spin
 * a loop for the number of iterations that this library copy timed the first time a knob
 * was set.
 */
#ifndef EBE_DELAY_H
#define EBE_DELAY_H

#include <stdint.h>

#include "ebe_probe.h"

/* A delay asked for (ns) and the loop iterations that take that long here (spins). Both
 * are worked out when the EP or plan is made, so the hot path only spins. */
typedef struct ebe_delay {
  uint64_t ns;
  uint64_t spins;
} ebe_delay;

/* Loop iterations that take about ns nanoseconds: 0 for 0, else the nearest count at this
 * library copy's rate, timed on the first call (a few ms: tries of at least 250 us, the
 * fastest of five). Cannot fail. */
uint64_t ebe_delay_spins_for_ns(uint64_t ns);

/* The delay for ns nanoseconds (times the loop on first use). Cannot fail. */
ebe_delay ebe_delay_for_ns(uint64_t ns);

/* Spin `spins` iterations of the timed loop, then a fence on x86, so what follows does not
 * run beside it (never inlined: the calibration times the very same code). Cannot fail. */
void ebe_delay_loop(uint64_t spins);

/* The same iterations without the fence: the per-node knob's, where a fence after every node
 * added about 4 ns a node beyond the ask (delay.c). Cannot fail. */
void ebe_delay_chain(uint64_t spins);

/* Spin one per-node delay, counting nothing: a plan spins after each node and counts the
 * Run's worth once (an atomic add per node would add to each delay). With the knob at 0
 * this is one compare and branch. Cannot fail. */
static inline void ebe_delay_spin(const ebe_delay *delay) {
  if (delay->spins != 0) ebe_delay_chain(delay->spins);
}

/* Add times * ns to `counters`' injected_delay_ns (NULL: the unattributed block; saturates
 * rather than wraps). Nothing for a zero delay. Cannot fail. */
static inline void ebe_delay_count(ebe_counters *counters, const ebe_delay *delay,
                                   uint64_t times) {
  if (delay->ns == 0) return;
  const uint64_t ns =
      times != 0 && delay->ns > UINT64_MAX / times ? UINT64_MAX : delay->ns * times;
  ebe_probe_add(counters, EBE_C_INJECTED_DELAY_NS, ns);
}

/* Count and spin one per-Run delay, fenced. Nothing for a zero delay. Cannot fail. */
static inline void ebe_delay_inject(ebe_counters *counters, const ebe_delay *delay) {
  if (delay->ns == 0) return;
  ebe_probe_add(counters, EBE_C_INJECTED_DELAY_NS, delay->ns);
  ebe_delay_loop(delay->spins);
}

/* Count and spin one per-node delay, unfenced (the kernel-registry mode's, a node at a time).
 * Nothing for a zero delay: one compare and branch. Cannot fail. */
static inline void ebe_delay_inject_node(ebe_counters *counters, const ebe_delay *delay) {
  if (delay->ns == 0) return;
  ebe_probe_add(counters, EBE_C_INJECTED_DELAY_NS, delay->ns);
  ebe_delay_chain(delay->spins);
}

#endif
