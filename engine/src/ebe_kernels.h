/* ebe_kernels.h -- float32 compute kernels. They cannot fail: shapes are checked by the plan.
 * Vectorized by the compiler; on x86-64 each kernel is also cloned for wider vector ISAs and
 * the best clone the CPU supports is picked at load time (ifunc), so the library still runs
 * on any x86-64. Elementwise kernels get an AVX-512 (x86-64-v4) clone; the GEMV/GEMM kernel
 * stops at AVX2+FMA (x86-64-v3), which measured faster for it (memory-bound, and 512-bit
 * rows of B split over cache lines). */
#ifndef EBE_KERNELS_H
#define EBE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#if defined(__x86_64__) && !defined(EBE_NO_CLONES)
#define EBE_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define EBE_CLONES_AVX2 __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define EBE_CLONES
#define EBE_CLONES_AVX2
#endif

/* Unary elementwise over n floats; out may equal in (in-place), no other overlap. */
void ebe_kernel_identity(const float *in, float *out, size_t n);
void ebe_kernel_relu(const float *in, float *out, size_t n);
void ebe_kernel_sigmoid(const float *in, float *out, size_t n);

/* Binary elementwise: out[i] = big[i] op small[i % period], period divides n (period == n is
 * the same-shape case, period == 1 the scalar case). out may equal big. */
void ebe_kernel_add(const float *big, const float *small, float *out, size_t n, size_t period);
void ebe_kernel_mul(const float *big, const float *small, float *out, size_t n, size_t period);

/* One broadcast row: out[i] = a[i * a_step] op b[i * b_step], steps 0 (a broadcast value) or
 * 1; out overlaps neither input. The general broadcast path of the plan walks rows with it. */
void ebe_kernel_add_strided(const float *a, size_t a_step, const float *b, size_t b_step,
                            float *out, size_t n);
void ebe_kernel_mul_strided(const float *a, size_t a_step, const float *b, size_t b_step,
                            float *out, size_t n);

/* C[m,n] = A[m,k] x B[k,n], all row-major and contiguous; C must not overlap A or B. */
void ebe_kernel_matmul(const float *a, const float *b, float *c, size_t m, size_t k, size_t n);

#endif
