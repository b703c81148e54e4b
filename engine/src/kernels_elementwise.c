/* kernels_elementwise.c -- Identity, Relu, Sigmoid, Add, Mul. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ebe_kernels.h"

void ebe_kernel_identity(const float *in, float *out, size_t n) {
  if (in != out && n != 0) memcpy(out, in, n * sizeof(float));
}

EBE_CLONES void ebe_kernel_relu(const float *in, float *out, size_t n) {
  /* `x < 0 ? 0 : x` keeps NaN as NaN (as ORT's CPU Relu does) and vectorizes to a blend. */
  for (size_t i = 0; i < n; i++) out[i] = in[i] < 0.0f ? 0.0f : in[i];
}

/* exp(y) for y <= 0, branch-free so the loop vectorizes: y = n*ln2 + r with |r| <= ln2/2,
 * exp(r) by the Cephes expf polynomial (about 1 ulp), 2^n built in the exponent bits.
 * Below -87 (where 2^n would leave the normal range) it returns 0; NaN stays NaN. Integer
 * work is unsigned so a NaN's bit pattern cannot overflow anything. */
static inline float ebe_exp_nonpositive(float y) {
  const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
  const float clamped = y < -87.0f ? -87.0f : y;
  const float t = clamped * 1.44269504088896341f + magic;
  const float n = t - magic;
  union { float f; uint32_t u; } tbits = {t};
  const float r = clamped - n * 0.693359375f - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  union { uint32_t u; float f; } scale = {((tbits.u - 0x4B400000u) + 127u) << 23};
  const float e = p * scale.f;
  return y < -87.0f ? 0.0f : e;
}

EBE_CLONES void ebe_kernel_sigmoid(const float *in, float *out, size_t n) {
  /* sigmoid(|x|) = 1 / (1 + exp(-|x|)) never overflows; sigmoid(-|x|) = exp(-|x|) * that. */
  for (size_t i = 0; i < n; i++) {
    const float x = in[i];
    const float e = ebe_exp_nonpositive(-fabsf(x));
    const float s = 1.0f / (1.0f + e);
    out[i] = x >= 0.0f ? s : e * s;
  }
}

EBE_CLONES void ebe_kernel_add(const float *big, const float *small, float *out, size_t n,
                               size_t period) {
  if (period == n) {
    for (size_t i = 0; i < n; i++) out[i] = big[i] + small[i];
  } else if (period == 1) {
    const float s = small[0];
    for (size_t i = 0; i < n; i++) out[i] = big[i] + s;
  } else {
    for (size_t row = 0; row < n; row += period)
      for (size_t j = 0; j < period; j++) out[row + j] = big[row + j] + small[j];
  }
}

EBE_CLONES void ebe_kernel_mul(const float *big, const float *small, float *out, size_t n,
                               size_t period) {
  if (period == n) {
    for (size_t i = 0; i < n; i++) out[i] = big[i] * small[i];
  } else if (period == 1) {
    const float s = small[0];
    for (size_t i = 0; i < n; i++) out[i] = big[i] * s;
  } else {
    for (size_t row = 0; row < n; row += period)
      for (size_t j = 0; j < period; j++) out[row + j] = big[row + j] * small[j];
  }
}

EBE_CLONES void ebe_kernel_add_strided(const float *a, size_t a_step, const float *b,
                                       size_t b_step, float *out, size_t n) {
  /* Steps are 0 or 1: four plain loops, so each vectorizes. */
  if (a_step != 0 && b_step != 0) {
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
  } else if (a_step != 0) {
    const float s = b[0];
    for (size_t i = 0; i < n; i++) out[i] = a[i] + s;
  } else if (b_step != 0) {
    const float s = a[0];
    for (size_t i = 0; i < n; i++) out[i] = s + b[i];
  } else {
    const float s = a[0] + b[0];
    for (size_t i = 0; i < n; i++) out[i] = s;
  }
}

EBE_CLONES void ebe_kernel_mul_strided(const float *a, size_t a_step, const float *b,
                                       size_t b_step, float *out, size_t n) {
  /* Steps are 0 or 1: four plain loops, so each vectorizes. */
  if (a_step != 0 && b_step != 0) {
    for (size_t i = 0; i < n; i++) out[i] = a[i] * b[i];
  } else if (a_step != 0) {
    const float s = b[0];
    for (size_t i = 0; i < n; i++) out[i] = a[i] * s;
  } else if (b_step != 0) {
    const float s = a[0];
    for (size_t i = 0; i < n; i++) out[i] = s * b[i];
  } else {
    const float s = a[0] * b[0];
    for (size_t i = 0; i < n; i++) out[i] = s;
  }
}
