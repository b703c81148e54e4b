/* delay.c -- the inject_delay_* test knobs (see ebe_delay.h). */
#include <stdatomic.h>
#include <time.h>

#include "ebe_delay.h"

/* Femtoseconds per loop iteration in this library copy; 0 until timed. (Whole
 * picoseconds were too coarse: a 222 ps iteration rounds by up to 0.45 %.) */
static _Atomic uint64_t ebe_delay_fs_per_spin;

enum {
  EBE_DELAY_TRY_NS = 250000, /* the fastest try lasts at least this long: 10 ns clock steps
                                are 0.004 % of it, and a coarse clock still gives a rate */
  EBE_DELAY_TRIES = 5        /* the fastest try is kept: a preemption in one is ignored */
};

#define EBE_FS_PER_NS UINT64_C(1000000)

/* The wall clock (a vDSO read, 29 ns on VM E). The thread's CPU clock would leave out
 * steal, which can make all five tries slow, but is a system call (482 ns), and was not
 * shown better unstopped (docs/validation/delay_clock.c, and the README beside it). */
static uint64_t ebe_delay_now_ns(void) {
  struct timespec now;
  if (clock_gettime(CLOCK_MONOTONIC, &now) != 0) return 0; /* never on Linux; a 0 try
                                                              then only lengthens delays */
  return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

/* Ends the loop's delay on x86: lfence starts nothing after it until every instruction
 * before it (the whole chain) has finished (Intel's rule; on AMD only where the kernel or
 * hypervisor made lfence dispatch-serializing, as Linux does on bare metal). Without it the
 * front end runs ahead of the chain and the work after the loop can run beside its tail.
 * On VM H, an Intel Xeon (docs/validation/summaries.tar.xz:delay_knob.txt: 6 interleaved quick-grid runs
 * each way, 17, 34 and 68 ns asked), the loop in a Run's own library added 0.94, 0.90 and
 * 0.83 of the ask without it, a line of slope 0.80; 1.08, 1.03 and 0.97 with it, slope 0.94.
 * At 68, 272 and 1088 ns an unfenced copy that pays ~10 ns more a call fell short by 6, 22
 * and 25 ns (an overlap of about 16, 32 and 35 ns), consistent with an overlap bounded by the
 * reorder buffer; the fenced loop was within 2 ns of each.
 * A second fence before the loop added a fixed ~16 ns (it waits for the work before it), so
 * there is none. lfence came with SSE2; without SSE2 and off x86: no fence, not measured. */
#if defined(__SSE2__)
#define EBE_DELAY_FENCE() __asm__ volatile("lfence" ::: "memory")
#else
#define EBE_DELAY_FENCE() ((void)0)
#endif

/* Each iteration waits for the last: x = 3x + 1 (one lea on x86), with an empty asm hiding
 * x, so the compiler keeps every iteration. The counter and branch do not wait for x, which
 * is why the front end can run ahead (the fence above). The calibration, between ordered
 * clock reads, times the chain; costs paid once a call (the call, the fence) are lost in
 * its 250 us tries, so a delay lasts a few ns more than asked (the lines above, fenced or
 * not: +2.5 to +2.7 ns at zero, over 17-68 ns). The per-node knob spins the chain alone
 * (ebe_delay_spin): with the fence after every node, validate's 5 % per-node level measured
 * +7.0 to +7.7 % on the 10-node quick-grid cases (VM H, sustained load, 5 repeats), about
 * 4 ns a node over the ask (why is not known), where unfenced it had measured +3.7 to +4.7 %
 * (16 repeats). On VM E, side by side in 12 processes (docs/validation/delay_loops.c): this
 * chain 0.65-0.69 ns an iteration (8 calibrations 0.67-0.72); a bare counter in a register
 * 0.32-0.61 ns, probably bound by its taken branch and a busy sibling hyperthread (not
 * confirmed: the guest has no performance counters); the volatile counter on the stack that
 * this was at first 1.35-2.45 ns, and at times five to six times faster within a process
 * (probably memory renaming), so a Run's delay lasted a sixth of what was asked. */
static inline __attribute__((always_inline)) void ebe_delay_iterate(uint64_t spins) {
  uint64_t x = 1;
  for (uint64_t i = 0; i < spins; i++) {
    x = 3 * x + 1;
    __asm__ volatile("" : "+r"(x));
  }
}

/* The two are separate copies of the chain, so the per-Run delay is the very code measured
 * (no extra call) and the per-node one has no fence. */
__attribute__((noinline)) void ebe_delay_loop(uint64_t spins) {
  ebe_delay_iterate(spins);
  EBE_DELAY_FENCE();
}

__attribute__((noinline)) void ebe_delay_chain(uint64_t spins) { ebe_delay_iterate(spins); }

static uint64_t ebe_delay_time_ns(uint64_t spins) {
  const uint64_t start = ebe_delay_now_ns();
  ebe_delay_loop(spins);
  return ebe_delay_now_ns() - start;
}

/* Two threads making their first delayed EP at once both time the loop; either rate is
 * a measured one, so the race is harmless. */
static uint64_t ebe_delay_rate_fs(void) {
  uint64_t fs = atomic_load_explicit(&ebe_delay_fs_per_spin, memory_order_relaxed);
  if (fs != 0) return fs;
  /* Double the tries' length until even the fastest of them is long enough (a single
   * preempted try cannot stop the doubling early). A few ms in all. */
  uint64_t spins = 1000, best = 0;
  for (;;) {
    best = UINT64_MAX;
    for (int t = 0; t < EBE_DELAY_TRIES; t++) {
      const uint64_t took = ebe_delay_time_ns(spins);
      if (took < best) best = took;
    }
    if (best >= EBE_DELAY_TRY_NS || spins >= (UINT64_C(1) << 40)) break;
    spins *= 2;
  }
  /* best * 10^6 cannot wrap: the fastest try lasts under 2 * EBE_DELAY_TRY_NS (its half
   * was shorter), far below 5 hours. */
  fs = (best * EBE_FS_PER_NS + spins / 2) / spins;
  if (fs == 0) fs = 1;
  atomic_store_explicit(&ebe_delay_fs_per_spin, fs, memory_order_relaxed);
  return fs;
}

uint64_t ebe_delay_spins_for_ns(uint64_t ns) {
  if (ns == 0) return 0;
  const uint64_t fs = ebe_delay_rate_fs();
  const uint64_t whole = ns / fs; /* ns * 10^6 / fs without wrapping ns * 10^6 */
  if (whole > (UINT64_MAX - EBE_FS_PER_NS) / EBE_FS_PER_NS) return UINT64_MAX;
  return whole * EBE_FS_PER_NS + ((ns % fs) * EBE_FS_PER_NS + fs / 2) / fs;
}

ebe_delay ebe_delay_for_ns(uint64_t ns) {
  const ebe_delay delay = {ns, ebe_delay_spins_for_ns(ns)};
  return delay;
}
