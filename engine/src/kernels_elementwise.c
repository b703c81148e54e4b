/* kernels_elementwise.c -- Identity, Relu, Sigmoid, Add, Mul. */
#include <math.h>
#include <string.h>

#include "ebe_kernels.h"

void ebe_kernel_identity(const float *in, float *out, size_t n) {
  if (in != out && n != 0) memcpy(out, in, n * sizeof(float));
}

EBE_CLONES void ebe_kernel_relu(const float *in, float *out, size_t n) {
  /* `x < 0 ? 0 : x` keeps NaN as NaN (as ORT's CPU Relu does) and vectorizes to a blend. */
  for (size_t i = 0; i < n; i++) out[i] = in[i] < 0.0f ? 0.0f : in[i];
}

void ebe_kernel_sigmoid(const float *in, float *out, size_t n) {
  /* Split by sign so exp never overflows into inf/inf; NaN propagates. */
  for (size_t i = 0; i < n; i++) {
    float x = in[i];
    if (x >= 0.0f) {
      out[i] = 1.0f / (1.0f + expf(-x));
    } else {
      float e = expf(x);
      out[i] = e / (1.0f + e);
    }
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
