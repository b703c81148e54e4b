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

/* ---- the fused elementwise loop ------------------------------------------------------------
 * A chain of elementwise ops over n floats as one pass: each block (8 vectors of 8 floats,
 * then single vectors, then one partial vector) is loaded once and goes through every op in
 * registers before the next block is loaded. Each op reads its first operand from the
 * accumulator (the previous op's result), a block register (an earlier result spilled to
 * the stack, L1), or memory (a tensor from outside the loop, or one the loop wrote), and
 * leaves its result in the accumulator, optionally spilled and/or stored to memory. */

#define EBE_FUSED_MAX_REGS 8 /* block registers a loop may spill to; the plan stores beyond */

typedef enum ebe_fused_code {
  EBE_FUSED_IDENTITY = 0,
  EBE_FUSED_RELU,
  EBE_FUSED_SIGMOID,
  EBE_FUSED_ADD,
  EBE_FUSED_MUL
} ebe_fused_code;

typedef enum ebe_fused_kind {
  EBE_FUSED_ACC = 0, /* the previous op's result */
  EBE_FUSED_REG,     /* block register `reg` */
  EBE_FUSED_MEM      /* memory: the bound pointer and period */
} ebe_fused_kind;

/* One op of a fused loop (built with the plan). */
typedef struct ebe_fused_op {
  uint8_t code;      /* ebe_fused_code */
  uint8_t kind[2];   /* ebe_fused_kind of operand 0 and (binary ops) operand 1 */
  uint8_t store;     /* 1: write the result to the bound `store` pointer */
  int16_t spill;     /* block register the result is also kept in, or -1 */
  uint16_t reg[2];   /* block register of an operand of kind EBE_FUSED_REG */
  uint32_t repeat;   /* a unary op applied this many times in a row (the plan merges a chain
                        of the same op whose intermediates nothing else reads) */
  uint32_t value[2]; /* the plan's value ids of the operands (for binding memory) */
  uint32_t out;      /* the plan's value id of the result (for binding `store`) */
  uint8_t plain;     /* 1: Add or Mul of the accumulator and memory, result neither stored nor
                        spilled (the plan sets it; the one-vector path's short way) */
} ebe_fused_op;

/* Where one op's memory operands and result live in this Run. An operand of period n is a
 * whole tensor; a shorter period p (dividing n) repeats it: element i reads data[i % p]. */
typedef struct ebe_fused_bind {
  const float *data[2];
  size_t period[2];
  float *store;
} ebe_fused_bind;

/* Run ops[0..n_ops) over n elements. Memory written (`store`) may alias a memory operand of
 * the same or a later op only element for element (the same i), never a repeated (period <
 * n) operand. Cannot fail. */
void ebe_kernel_fused(const ebe_fused_op *ops, const ebe_fused_bind *bind, size_t n_ops,
                      size_t n);

#endif
