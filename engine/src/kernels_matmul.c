/* kernels_matmul.c -- row-major float32 GEMM/GEMV.
 *
 * The kernel works in "axpy" form: a row of C accumulates a[i,p] * B[p,:] over p, so the
 * innermost loop runs along contiguous rows of B and C and vectorizes without reassociating
 * a reduction. k is blocked so a block of B rows stays in cache across the rows of A, n is
 * blocked so the C row segment stays in L1, and eight rows of B are folded per pass to cut
 * C loads/stores by eight. For m == 1 ([1,k] x [k,n], a GEMV) this streams B once: memory-bound.
 */
#include <string.h>

#include "ebe_kernels.h"

enum { EBE_MM_KB = 256, EBE_MM_NB = 512 };

EBE_CLONES_AVX2 static void ebe_mm_block(const float *restrict a, const float *restrict b,
                                    float *restrict c, size_t k_len, size_t n_len,
                                    size_t ldb) {
  size_t p = 0;
  for (; p + 8 <= k_len; p += 8) {
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
  for (size_t k0 = 0; k0 < k; k0 += EBE_MM_KB) {
    const size_t k_len = k - k0 < EBE_MM_KB ? k - k0 : EBE_MM_KB;
    for (size_t n0 = 0; n0 < n; n0 += EBE_MM_NB) {
      const size_t n_len = n - n0 < EBE_MM_NB ? n - n0 : EBE_MM_NB;
      for (size_t i = 0; i < m; i++)
        ebe_mm_block(a + i * k + k0, b + k0 * n + n0, c + i * n + n0, k_len, n_len, n);
    }
  }
}
