/* delay.c -- the inject_delay_* test knobs (see ebe_delay.h). */
#include <stdatomic.h>
#include <time.h>

#include "ebe_delay.h"

/* Picoseconds per loop iteration in this library copy; 0 until calibrated. */
static _Atomic uint64_t ebe_delay_ps_per_spin;

enum {
  EBE_DELAY_TRY_NS = 250000, /* a timed try lasts at least this long: 10 ns clock steps are
                                0.004 % of it, and a coarse clock still gives a rate */
  EBE_DELAY_TRIES = 5        /* the fastest try is kept: a preemption in one is ignored */
};

static uint64_t ebe_delay_now_ns(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

/* The loop itself: volatile, so the compiler keeps every iteration. */
static void ebe_delay_loop(uint64_t spins) {
  for (volatile uint64_t i = 0; i < spins; i++) {
  }
}

static uint64_t ebe_delay_time_ns(uint64_t spins) {
  const uint64_t start = ebe_delay_now_ns();
  ebe_delay_loop(spins);
  return ebe_delay_now_ns() - start;
}

void ebe_delay_calibrate(void) {
  if (atomic_load_explicit(&ebe_delay_ps_per_spin, memory_order_relaxed) != 0) return;
  uint64_t spins = 1000;
  while (spins < (UINT64_C(1) << 40) && ebe_delay_time_ns(spins) < EBE_DELAY_TRY_NS)
    spins *= 2;
  uint64_t best = UINT64_MAX;
  for (int t = 0; t < EBE_DELAY_TRIES; t++) {
    const uint64_t took = ebe_delay_time_ns(spins);
    if (took < best) best = took;
  }
  /* best < 2^64 / 1000 holds: a try lasts about EBE_DELAY_TRY_NS, not 213 days. */
  const uint64_t ps = best * 1000u / spins;
  atomic_store_explicit(&ebe_delay_ps_per_spin, ps > 0 ? ps : 1, memory_order_relaxed);
}

uint64_t ebe_delay_spins_for_ns(uint64_t ns) {
  if (ns == 0) return 0;
  ebe_delay_calibrate();
  const uint64_t ps = atomic_load_explicit(&ebe_delay_ps_per_spin, memory_order_relaxed);
  const uint64_t whole = ns / ps; /* ns * 1000 / ps without overflowing ns * 1000 */
  if (whole > (UINT64_MAX - 1000u) / 1000u) return UINT64_MAX;
  return whole * 1000u + ((ns % ps) * 1000u + ps / 2) / ps;
}

ebe_delay ebe_delay_for_ns(uint64_t ns) {
  const ebe_delay delay = {ns, ebe_delay_spins_for_ns(ns)};
  return delay;
}

void ebe_delay_spin(const ebe_delay *delay) {
  ebe_delay_loop(delay->spins);
}

void ebe_delay_count(ebe_counters *counters, const ebe_delay *delay, uint64_t times) {
  if (delay->ns != 0) ebe_probe_add(counters, EBE_C_INJECTED_DELAY_NS, delay->ns * times);
}

void ebe_delay_inject(ebe_counters *counters, const ebe_delay *delay) {
  if (delay->ns == 0) return;
  ebe_probe_add(counters, EBE_C_INJECTED_DELAY_NS, delay->ns);
  ebe_delay_loop(delay->spins);
}
