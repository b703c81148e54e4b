/* ebe_delay.h -- the inject_delay_* test knobs: a counted, calibrated loop.
 *
 * A wait that watches the clock cannot be shorter than two clock reads (about 40 ns where
 * the clock ticks in 10 ns steps: 2 % of a 1.7 us Run was not injected at all). A loop
 * iteration costs well under a nanosecond on a current x86 core, so the knobs spin a loop
 * for the number of iterations that the library timed when it was first registered.
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

/* Time the loop, once per library copy (later calls return at once). Cannot fail. */
void ebe_delay_calibrate(void);

/* Loop iterations that take about ns nanoseconds (0 for 0; the nearest count; calibrates
 * first if nothing has). Cannot fail. */
uint64_t ebe_delay_spins_for_ns(uint64_t ns);

/* The delay for ns nanoseconds. Cannot fail. */
ebe_delay ebe_delay_for_ns(uint64_t ns);

/* Spin one delay and add its ns to `counters`' injected_delay_ns (NULL: the unattributed
 * block). A zero delay costs one branch. Cannot fail. */
void ebe_delay_inject(ebe_counters *counters, const ebe_delay *delay);

/* Spin one delay, counting nothing: a plan spins after each node and counts the Run's
 * worth once (an atomic add per node would be part of a delay of a few ns). */
void ebe_delay_spin(const ebe_delay *delay);

/* Add times * ns to injected_delay_ns (nothing for a zero delay). Cannot fail. */
void ebe_delay_count(ebe_counters *counters, const ebe_delay *delay, uint64_t times);

#endif
