/* kernels_fused.c -- the fused elementwise loop (see ebe_kernels.h): one pass over memory
 * for a whole chain of Identity, Relu, Sigmoid, Add and Mul.
 *
 * Written with GCC's generic vectors (8 floats, 32 bytes). A tensor of at most one vector
 * (and the tail of any tensor) goes through the chain in registers; a wider one goes in
 * tiles of up to 32 vectors (1 KB, so a tile and its block registers stay in L1), op by op:
 * Relu 8 vectors at a time in registers, Sigmoid a whole tile a pass so that 32
 * independent vectors hide its latency.
 *
 * On x86-64 the loop is cloned for x86-64-v3 (AVX2 + FMA: one ymm register a vector, the
 * Sigmoid polynomial in FMAs) and the baseline (SSE2: two xmm registers a vector), and the
 * ifunc resolver picks the v3 clone on a CPU with AVX2 and FMA. There is no x86-64-v4 clone:
 * the vectors are 256 bits, so AVX-512 would add nothing. Checked 2026-12-07 on this
 * project's AMD EPYC host (AVX2 and FMA, no AVX-512): gdb stops in
 * `ebe_kernel_fused.arch_x86_64_v3` (never `.default`) when a fused Sigmoid chain runs, and
 * `objdump -d` of that clone in the built library shows the Relu loops as vmaxps on ymm
 * registers with no stack traffic (8 a pass for a tile, one for a lone vector). Checked again
 * for the degree 5/6 Sigmoid below (gdb again stops only in the v3 clone): a tile's Sigmoid
 * pass is a loop of 17 instructions a vector, 14 of them on ymm: the load, vmulps, vminps,
 * vaddps, 4 vfmadd, vdivps, vfmadd, vminps, vmaxps, the store and one register move (plus
 * the loop's add, cmp, jne). Elsewhere (aarch64) the same source builds
 * for the baseline ISA.
 */
#include <stdint.h>
#include <string.h>

#include "ebe_kernels.h"

typedef float ebe_v8 __attribute__((vector_size(32)));

#define EBE_LANES 8
#define EBE_TILE 32  /* vectors a tile: 256 floats (1 KB), so every tile of a loop stays in L1 */
#define EBE_CHAINS 8 /* Relu runs this many vectors at once in registers */

/* The helpers take vectors by pointer: a 32-byte vector passed by value has another ABI
 * without AVX, which gcc warns about even for a function that is always inlined. */
#define EBE_INLINE static inline __attribute__((always_inline))

/* x < 0 ? 0 : x lane by lane, written 0 > x ? 0 : x: NaN stays NaN and -0 stays -0 (the
 * scalar kernel's and ORT's answer), and with `zero` opaque (see ebe_kernel_fused) gcc
 * makes it one vmaxps (latency 1 cycle), where a literal 0 became a compare and a mask. */
EBE_INLINE void ebe_v8_relu(ebe_v8 *x, float zero) {
  ebe_v8 y;
  for (int l = 0; l < EBE_LANES; l++) y[l] = zero > (*x)[l] ? zero : (*x)[l];
  *x = y;
}

/* Relu `repeat` times on one vector: a chain of dependent 1-cycle vmaxps. Four a loop
 * iteration, so the loop's own add, compare and branch never set the pace: with one a loop
 * that loop went at 1 or 2 cycles an iteration by where it happened to fall in the code
 * (relu_d1000_w8 changed by 270 ns with an unrelated edit elsewhere in this file). */
EBE_INLINE void ebe_v8_relu_n(ebe_v8 *x, uint32_t repeat, float zero) {
  ebe_v8 v = *x;
  uint32_t r = repeat;
  for (; r >= 4; r -= 4) {
    ebe_v8_relu(&v, zero);
    ebe_v8_relu(&v, zero);
    ebe_v8_relu(&v, zero);
    ebe_v8_relu(&v, zero);
  }
  for (; r > 0; r--) ebe_v8_relu(&v, zero);
  *x = v;
}

/* Sigmoid, eight lanes at once, as 0.5 + x P(x^2) / Q(x^2): x P / Q is a degree 5/6 minimax
 * fit of tanh(x / 2) / 2 on [0, 12.4], within 5.6e-6 of the exact Sigmoid everywhere (the
 * cases' SIGMOID_TOLERANCE is 1e-5; the slope is <= 1/4, so sigmoid_d10_w4096's 10 nodes end
 * 7.1e-6 from ORT). Q is scaled to be monic, so its first step is an add (no copy of x^2 to a
 * scratch register): one multiply, 5 multiply-adds and a division a vector. The fit reaches
 * 1 + 1e-6 at 12.4, so only x^2 is clamped (to 12.4^2): past 12.4, and at +-88 and +-inf,
 * 0.5 + x P / Q leaves [0, 1] and the output clamp makes it exactly 1 or 0, as ORT's. Q has
 * no positive root. Each clamp compares with the bound first, so NaN passes through and comes
 * out NaN; with `zero` opaque gcc makes each one vminps or vmaxps (a literal bound became a
 * compare and a blend: 1.4x slower).
 * sigmoid_d10_w4096, fused, ratio to ORT, measured with epbench in one interleaved run: the
 * 7/6 fit with x clamped this replaces 0.730x, that fit laid out as here 0.651x, this 0.608x.
 * Slower in other runs: a vrcpps estimate and a Newton step for the division (0.715x against
 * 0.724x: 3 more multiply-adds cost more than the division saves), and exp-based forms
 * (2^n times a degree 4 polynomial 0.693x; an 8-entry vpermps table times a degree 2 one
 * 0.716x), and (2026-12-07, against this as an engine@LIB arm) P and Q in Estrin's form
 * (z^2 once, one multiply more, about 4 cycles less latency a vector) 0.633x against
 * 0.602x: the execution units, not the latency, set the pace; and the x^2 clamp as an
 * integer vpminsd (safe: x^2 >= 0 or NaN, and a NaN x still makes the result NaN; llvm-mca
 * puts vpminsd on FP0/2/3, off the FMA pipes' pair) 0.623x against 0.602x. */
EBE_INLINE void ebe_v8_sigmoid(ebe_v8 *xp, float zero) {
  const float zmax = zero + 153.76f, one = zero + 1.0f;
  const ebe_v8 x = *xp, z0 = x * x;
  ebe_v8 z, c, s;
  for (int l = 0; l < EBE_LANES; l++) z[l] = z0[l] > zmax ? zmax : z0[l];
  ebe_v8 p = z * 27.9851723f + 8889.41016f;
  p = p * z + 313671.812f;
  ebe_v8 q = z + 1339.02026f;
  q = q * z + 140073.281f;
  q = q * z + 1254749.38f;
  const ebe_v8 t = x * (p / q) + 0.5f;
  for (int l = 0; l < EBE_LANES; l++) c[l] = t[l] > one ? one : t[l];
  for (int l = 0; l < EBE_LANES; l++) s[l] = zero > c[l] ? zero : c[l];
  *xp = s;
}

/* The vector of operand elements [off, off + lanes) (lanes <= 8, the rest 0). A period
 * shorter than n repeats the operand: element i is data[i % period]. */
EBE_INLINE void ebe_v8_load(const float *data, size_t period, size_t n, size_t off,
                            size_t lanes, ebe_v8 *out) {
  ebe_v8 v = {0};
  if (period == n && lanes == EBE_LANES) {
    memcpy(&v, data + off, sizeof v);
  } else if (period == 1) {
    v += data[0];
  } else if (period == n) {
    for (size_t l = 0; l < lanes; l++) v[l] = data[off + l];
  } else if (period % EBE_LANES == 0 && lanes == EBE_LANES) {
    memcpy(&v, data + off % period, sizeof v); /* off is a multiple of 8: no wrap inside */
  } else {
    size_t at = off % period;
    for (size_t l = 0; l < lanes; l++) {
      v[l] = data[at];
      if (++at == period) at = 0;
    }
  }
  *out = v;
}

EBE_INLINE void ebe_v8_store(float *data, size_t off, size_t lanes, const ebe_v8 *v) {
  if (lanes == EBE_LANES) {
    memcpy(data + off, v, sizeof *v);
  } else {
    for (size_t l = 0; l < lanes; l++) data[off + l] = (*v)[l];
  }
}

/* Operand `which` of `op` for the `count` vectors at off into out[]. */
EBE_INLINE void ebe_fused_operand(const ebe_fused_op *op, const ebe_fused_bind *bind, int which,
                                  const ebe_v8 *acc, ebe_v8 (*regs)[EBE_TILE], size_t n,
                                  size_t off, size_t count, size_t lanes, ebe_v8 *out) {
  switch (op->kind[which]) {
    case EBE_FUSED_ACC:
      if (out != acc)
        for (size_t j = 0; j < count; j++) out[j] = acc[j];
      return;
    case EBE_FUSED_REG:
      for (size_t j = 0; j < count; j++) out[j] = regs[op->reg[which]][j];
      return;
    default:
      for (size_t j = 0; j < count; j++)
        ebe_v8_load(bind->data[which], bind->period[which], n, off + j * EBE_LANES,
                    j + 1 == count ? lanes : EBE_LANES, &out[j]);
      return;
  }
}

/* Relu `repeat` times on count vectors: 8 at a time in registers (independent chains, so
 * the compare and mask pipeline), the rest one by one. */
EBE_INLINE void ebe_fused_relu(ebe_v8 *acc, size_t count, uint32_t repeat, float zero) {
  size_t j = 0;
  for (; j + EBE_CHAINS <= count; j += EBE_CHAINS) {
    ebe_v8 block[EBE_CHAINS];
    for (size_t k = 0; k < EBE_CHAINS; k++) block[k] = acc[j + k];
    for (uint32_t r = 0; r < repeat; r++)
      for (size_t k = 0; k < EBE_CHAINS; k++) ebe_v8_relu(&block[k], zero);
    for (size_t k = 0; k < EBE_CHAINS; k++) acc[j + k] = block[k];
  }
  for (; j < count; j++) ebe_v8_relu_n(&acc[j], repeat, zero);
}

/* Every op on the `count` vectors at off, the last with `lanes` valid lanes. acc and other
 * hold count vectors (registers where count is a constant 1, else an L1 tile), regs the
 * spilled results. */
EBE_INLINE void ebe_fused_block(const ebe_fused_op *ops, const ebe_fused_bind *bind,
                                size_t n_ops, size_t n, size_t off, size_t count,
                                size_t lanes, ebe_v8 *acc, ebe_v8 *other,
                                ebe_v8 (*regs)[EBE_TILE], float zero) {
  for (size_t u = 0; u < n_ops; u++) {
    const ebe_fused_op *op = &ops[u];
    const int binary = op->code == EBE_FUSED_ADD || op->code == EBE_FUSED_MUL;
    /* operand 1 first: it may be the accumulator that loading operand 0 replaces */
    if (binary) ebe_fused_operand(op, &bind[u], 1, acc, regs, n, off, count, lanes, other);
    if (op->kind[0] != EBE_FUSED_ACC)
      ebe_fused_operand(op, &bind[u], 0, acc, regs, n, off, count, lanes, acc);
    switch (op->code) {
      case EBE_FUSED_RELU:
        ebe_fused_relu(acc, count, op->repeat, zero);
        break;
      case EBE_FUSED_SIGMOID:
        /* A whole tile a pass: count independent vectors keep the units busy. The empty
         * asm stops gcc's unroll-and-jam from putting two passes in one, which chains two
         * Sigmoids (each ~60 cycles of latency) a vector and made the loop 1.3x slower. */
        for (uint32_t r = 0; r < op->repeat; r++) {
          for (size_t j = 0; j < count; j++) ebe_v8_sigmoid(&acc[j], zero);
          __asm__ volatile("" ::: "memory");
        }
        break;
      case EBE_FUSED_ADD:
        for (size_t j = 0; j < count; j++) acc[j] += other[j];
        break;
      case EBE_FUSED_MUL:
        for (size_t j = 0; j < count; j++) acc[j] *= other[j];
        break;
      default: /* Identity: the value is already in the accumulator */
        break;
    }
    if (op->spill >= 0)
      for (size_t j = 0; j < count; j++) regs[op->spill][j] = acc[j];
    if (op->store)
      for (size_t j = 0; j < count; j++)
        ebe_v8_store(bind[u].store, off + j * EBE_LANES, j + 1 == count ? lanes : EBE_LANES,
                     &acc[j]);
  }
}

/* Operand `which` of `op` for the one vector at off, into *out. */
EBE_INLINE void ebe_fused_operand1(const ebe_fused_op *op, const ebe_fused_bind *bind, int which,
                                   ebe_v8 acc, ebe_v8 (*regs)[EBE_TILE], size_t n, size_t off,
                                   size_t lanes, ebe_v8 *out) {
  if (op->kind[which] == EBE_FUSED_ACC) *out = acc;
  else if (op->kind[which] == EBE_FUSED_REG) *out = regs[op->reg[which]][0];
  else ebe_v8_load(bind->data[which], bind->period[which], n, off, lanes, out);
}

/* One vector (at most 8 elements) through every op. The accumulator is a plain local, so it
 * stays in a register from op to op (ebe_fused_block's acc array went through the stack
 * between ops: a store-forwarding delay on every step of a chain of Adds). */
EBE_INLINE void ebe_fused_vector(const ebe_fused_op *ops, const ebe_fused_bind *bind,
                                 size_t n_ops, size_t n, size_t off, size_t lanes,
                                 ebe_v8 (*regs)[EBE_TILE], float zero) {
  ebe_v8 acc = {0};
  const int full = lanes == EBE_LANES;
  for (size_t u = 0; u < n_ops; u++) {
    const ebe_fused_op *op = &ops[u];
    /* The short way for the commonest op of a binary chain (acc + y, a whole vector of y):
     * about 8 instructions, where the general path below took about 35 and spilled a zeroed
     * vector to the stack (add_d100_w8's loop: 3.3 ns an op before, see the commit). */
    if (op->plain && full && bind[u].period[1] == n) {
      ebe_v8 b;
      memcpy(&b, bind[u].data[1] + off, sizeof b);
      if (op->code == EBE_FUSED_ADD) acc += b;
      else acc *= b;
      continue;
    }
    ebe_v8 a = acc, b = acc;
    if (op->code == EBE_FUSED_ADD || op->code == EBE_FUSED_MUL)
      ebe_fused_operand1(op, &bind[u], 1, acc, regs, n, off, lanes, &b);
    if (op->kind[0] != EBE_FUSED_ACC)
      ebe_fused_operand1(op, &bind[u], 0, acc, regs, n, off, lanes, &a);
    switch (op->code) {
      case EBE_FUSED_RELU:
        ebe_v8_relu_n(&a, op->repeat, zero);
        break;
      case EBE_FUSED_SIGMOID:
        for (uint32_t r = 0; r < op->repeat; r++) ebe_v8_sigmoid(&a, zero);
        break;
      case EBE_FUSED_ADD:
        a += b;
        break;
      case EBE_FUSED_MUL:
        a *= b;
        break;
      default: /* Identity */
        break;
    }
    acc = a;
    if (op->spill >= 0) regs[op->spill][0] = acc;
    if (op->store) ebe_v8_store(bind[u].store, off, lanes, &acc);
  }
}

EBE_CLONES_AVX2 void ebe_kernel_fused(const ebe_fused_op *ops, const ebe_fused_bind *bind,
                                      size_t n_ops, size_t n) {
  ebe_v8 tiles[2 + EBE_FUSED_MAX_REGS][EBE_TILE]; /* acc, other, the block registers */
  float zero = 0.0f;
  __asm__ volatile("" : "+m"(zero)); /* opaque to the optimizer: see ebe_v8_relu */
  size_t off = 0;
  while (n - off >= 2 * EBE_LANES) { /* tiles of 2 to EBE_TILE whole vectors */
    const size_t left = (n - off) / EBE_LANES;
    const size_t count = left < EBE_TILE ? left : EBE_TILE;
    ebe_fused_block(ops, bind, n_ops, n, off, count, EBE_LANES, tiles[0], tiles[1], tiles + 2,
                    zero);
    off += count * EBE_LANES;
  }
  if (n - off >= EBE_LANES) {
    ebe_fused_vector(ops, bind, n_ops, n, off, EBE_LANES, tiles + 2, zero);
    off += EBE_LANES;
  }
  if (off < n) ebe_fused_vector(ops, bind, n_ops, n, off, n - off, tiles + 2, zero);
}
