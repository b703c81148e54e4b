/* Which clock should time the engine's delay-knob loop (engine/src/delay.c)? An experiment,
 * not part of the build. It runs delay.c's own calibration N times with each clock,
 * alternating: CLOCK_MONOTONIC (the wall clock, what delay.c uses) and
 * CLOCK_THREAD_CPUTIME_ID (the thread's CPU time, which leaves out time the thread did not
 * run). With STOP_US, a parent process stops the calibrating one for STOP_US every RUN_US
 * (default 100): a stand-in for a hypervisor's steal, which only the CPU clock leaves out.
 * Prints, per clock, the femtoseconds per loop iteration it found (min, 10th percentile,
 * median, 90th, max over N) and how many calibrations were more than 25 % off the median
 * of both clocks' unstopped calibrations (from a first pass with no stops).
 *   gcc -O2 -std=gnu11 -Iengine/src -o /tmp/delay_clock docs/validation/delay_clock.c
 *   /tmp/delay_clock N [STOP_US [RUN_US]]
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static clockid_t timed_by = CLOCK_MONOTONIC;
static int clock_under_test(struct timespec *now) { return clock_gettime(timed_by, now); }
#define clock_gettime(id, now) clock_under_test(now)
#include "../../engine/src/delay.c"
#undef clock_gettime

static int by_value(const void *a, const void *b) {
  const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* Calibrate n times with each clock, alternating, into wall[] and cpu[] (fs per spin). */
static void calibrate(int n, uint64_t *wall, uint64_t *cpu) {
  for (int i = 0; i < n; i++) {
    timed_by = CLOCK_MONOTONIC;
    atomic_store(&ebe_delay_fs_per_spin, 0);
    wall[i] = ebe_delay_rate_fs();
    timed_by = CLOCK_THREAD_CPUTIME_ID;
    atomic_store(&ebe_delay_fs_per_spin, 0);
    cpu[i] = ebe_delay_rate_fs();
  }
}

static void report(const char *name, uint64_t *fs, int n, uint64_t reference) {
  int off = 0;
  for (int i = 0; i < n; i++)
    if (fs[i] * 4 > reference * 5 || fs[i] * 4 < reference * 3) off++;
  qsort(fs, (size_t)n, sizeof *fs, by_value);
  printf("%-5s fs/spin min %llu p10 %llu median %llu p90 %llu max %llu; >25 %% off %d of %d\n",
         name, (unsigned long long)fs[0], (unsigned long long)fs[n / 10],
         (unsigned long long)fs[n / 2], (unsigned long long)fs[n - 1 - n / 10],
         (unsigned long long)fs[n - 1], off, n);
}

int main(int argc, char **argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 0;
  const long stop_us = argc > 2 ? atol(argv[2]) : 0, run_us = argc > 3 ? atol(argv[3]) : 100;
  if (n < 1 || n > 100000 || stop_us < 0 || stop_us > 999999 || run_us < 1 || run_us > 999999) {
    fprintf(stderr, "usage: %s N [STOP_US [RUN_US]] (N 1-100000, microseconds < 10^6)\n",
            argv[0]);
    return 2;
  }
  uint64_t *wall = calloc((size_t)n, sizeof *wall), *cpu = calloc((size_t)n, sizeof *cpu);
  if (wall == NULL || cpu == NULL) return 1;
  calibrate(n, wall, cpu); /* unstopped: the reference */
  uint64_t *both = calloc(2 * (size_t)n, sizeof *both);
  if (both == NULL) return 1;
  for (int i = 0; i < n; i++) both[i] = wall[i], both[n + i] = cpu[i];
  qsort(both, 2 * (size_t)n, sizeof *both, by_value);
  const uint64_t reference = both[n];
  printf("unstopped (reference median %llu fs/spin)\n", (unsigned long long)reference);
  report("wall", wall, n, reference);
  report("cpu", cpu, n, reference);
  if (stop_us == 0) return 0;
  fflush(stdout);
  const pid_t child = fork();
  if (child < 0) return 1;
  if (child == 0) {
    calibrate(n, wall, cpu);
    printf("stopped %ld us every %ld us\n", stop_us, run_us);
    report("wall", wall, n, reference);
    report("cpu", cpu, n, reference);
    return 0;
  }
  const struct timespec run = {0, run_us * 1000}, stop = {0, stop_us * 1000};
  while (waitpid(child, NULL, WNOHANG) == 0) {
    nanosleep(&run, NULL);
    if (kill(child, SIGSTOP) != 0) break;
    nanosleep(&stop, NULL);
    kill(child, SIGCONT);
  }
  waitpid(child, NULL, 0);
  return 0;
}
