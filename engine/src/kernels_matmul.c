/* kernels_matmul.c -- row-major float32 GEMM/GEMV.
 *
 * The kernel works in "axpy" form: a row of C accumulates a[i,p] * B[p,:] over p, so the
 * innermost loop runs along contiguous rows of B and C and vectorizes without reassociating
 * a reduction. k is blocked so a block of B rows stays in cache across the rows of A, n is
 * blocked so the C row segment stays in L1, and eight rows of B are folded per pass to cut
 * C loads/stores by eight. For m == 1 ([1,k] x [k,n], a GEMV) this streams B once: memory-bound.
 *
 * A GEMV whose B is larger than this core's L2 (512 KB on Zen 3) folds four rows a pass,
 * not eight, as MLAS's M=1 kernel does: B then comes from L3 every Run, and four streams of
 * B rows went faster than eight though C is loaded and stored twice as often. Measured
 * 2026-12-07 with `epbench run --case matmul_512x512 --case matmul_128x128_dyn --arm ort`
 * and each variant built into its own folder as an `engine@LIB` arm, one interleaved run
 * each, ratio to ORT (mostly quiet rounds):
 *   matmul_512x512 (B 1 MB):  8 rows 1.007, 1.055, 1.051x; 4 rows 0.994, 1.000, 0.993x;
 *     2 rows 1.004x; 4 rows writing C on the first pass (no memset) 0.991x; 8 rows
 *     prefetching the next pass's rows 1.180x; 4 rows prefetching 1 KB ahead 1.018x;
 *     64-column tiles held in 8 registers over all of k (B read down its columns) 1.105x.
 *   matmul_128x128_dyn (B 64 KB, in L2): 8 rows 0.971, 0.973, 0.984x; 4 rows 0.965,
 *     0.987, 0.998x: eight stay the fold where B fits in L2.
 * This rule against the eight-row kernel, two more runs: matmul_512x512 0.983 and 0.998x
 * against 0.974 and 1.013x (per-round ratio to it 1.001 and 0.974), matmul_128x128_dyn
 * unchanged. So the target (<= 1.00x) is met, narrowly: this GEMV is as fast as MLAS's, and
 * both wait on B coming from L3. A GEMM (m > 1) reuses each block of B across the rows of A
 * and keeps eight.
 */
#include <string.h>

#include "ebe_kernels.h"

enum { EBE_MM_KB = 256, EBE_MM_NB = 512 };
/* B floats past which a GEMV folds four rows a pass (512 KB, Zen 3's L2; see above) */
enum { EBE_MM_L2_FLOATS = 512 * 1024 / 4 };

EBE_CLONES_AVX2 static void ebe_mm_block(const float *restrict a, const float *restrict b,
                                    float *restrict c, size_t k_len, size_t n_len,
                                    size_t ldb, int fold8) {
  size_t p = 0;
  for (; fold8 && p + 8 <= k_len; p += 8) {
    const float a0 = a[p], a1 = a[p + 1], a2 = a[p + 2], a3 = a[p + 3];
    const float a4 = a[p + 4], a5 = a[p + 5], a6 = a[p + 6], a7 = a[p + 7];
    const float *restrict b0 = b + p * ldb;
    const float *restrict b1 = b0 + ldb;
    const float *restrict b2 = b1 + ldb;
    const float *restrict b3 = b2 + ldb;
    const float *restrict b4 = b3 + ldb;
    const float *restrict b5 = b4 + ldb;
    const float *restrict b6 = b5 + ldb;
    const float *restrict b7 = b6 + ldb;
    for (size_t j = 0; j < n_len; j++)
      c[j] += ((a0 * b0[j] + a1 * b1[j]) + (a2 * b2[j] + a3 * b3[j])) +
              ((a4 * b4[j] + a5 * b5[j]) + (a6 * b6[j] + a7 * b7[j]));
  }
  for (; p + 4 <= k_len; p += 4) {
    const float a0 = a[p], a1 = a[p + 1], a2 = a[p + 2], a3 = a[p + 3];
    const float *restrict b0 = b + p * ldb;
    const float *restrict b1 = b0 + ldb;
    const float *restrict b2 = b1 + ldb;
    const float *restrict b3 = b2 + ldb;
    for (size_t j = 0; j < n_len; j++)
      c[j] += a0 * b0[j] + a1 * b1[j] + a2 * b2[j] + a3 * b3[j];
  }
  for (; p < k_len; p++) {
    const float ap = a[p];
    const float *restrict bp = b + p * ldb;
    for (size_t j = 0; j < n_len; j++) c[j] += ap * bp[j];
  }
}

void ebe_kernel_matmul(const float *a, const float *b, float *c, size_t m, size_t k,
                       size_t n) {
  if (m == 0 || n == 0) return;
  memset(c, 0, m * n * sizeof(float));
  /* k * n is a product of B's checked shape (see ebe_exec_matmul): it cannot wrap. */
  const int fold8 = m > 1 || k * n <= EBE_MM_L2_FLOATS;
  for (size_t k0 = 0; k0 < k; k0 += EBE_MM_KB) {
    const size_t k_len = k - k0 < EBE_MM_KB ? k - k0 : EBE_MM_KB;
    for (size_t n0 = 0; n0 < n; n0 += EBE_MM_NB) {
      const size_t n_len = n - n0 < EBE_MM_NB ? n - n0 : EBE_MM_NB;
      for (size_t i = 0; i < m; i++)
        ebe_mm_block(a + i * k + k0, b + k0 * n + n0, c + i * n + n0, k_len, n_len, n,
                     fold8);
    }
  }
}
