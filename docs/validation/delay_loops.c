/* Three loops the delay knob could spin, side by side: ns an iteration, the fastest of five
 * tries each, in one process. An experiment, not part of the build (see delay_clock.c for
 * the knob's own loop and calibration).
 *   gcc -O3 -o /tmp/delay_loops docs/validation/delay_loops.c
 *   for i in $(seq 12); do /tmp/delay_loops; sleep 0.5; done
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <time.h>

/* A bare counter in a register (the knob's loop at 1eee3bc). */
__attribute__((noinline)) static void counter_in_register(uint64_t spins) {
  for (uint64_t i = 0; i < spins; i++) __asm__ volatile("" : "+r"(i));
}

/* Each iteration waits for the last: x = 3x + 1 (the knob's loop since). */
__attribute__((noinline)) static void dependent_chain(uint64_t spins) {
  uint64_t x = 1;
  for (uint64_t i = 0; i < spins; i++) {
    x = 3 * x + 1;
    __asm__ volatile("" : "+r"(x));
  }
}

/* A volatile counter on the stack (the knob's loop before 1eee3bc). */
__attribute__((noinline)) static void counter_on_stack(uint64_t spins) {
  for (volatile uint64_t i = 0; i < spins; i++) {
  }
}

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static double fastest_ns_per_spin(void (*loop)(uint64_t), uint64_t spins) {
  double best = 1e9;
  for (int t = 0; t < 5; t++) {
    const uint64_t start = now_ns();
    loop(spins);
    const double ns = (double)(now_ns() - start) / (double)spins;
    if (ns < best) best = ns;
  }
  return best;
}

int main(void) {
  printf("counter in a register %.3f, dependent chain %.3f, counter on the stack %.3f\n",
         fastest_ns_per_spin(counter_in_register, 800000),
         fastest_ns_per_spin(dependent_chain, 300000),
         fastest_ns_per_spin(counter_on_stack, 150000));
  return 0;
}
