/* ebe_common.h -- what every engine file needs: the ORT header, the counting call macro,
 * status helpers, and the counted allocator.
 *
 * Rule: every call into OrtApiBase/OrtApi/OrtEpApi goes through EBE_CALL (or EBE_CALL0, or
 * EBE_CALL_T in the Compute hot path), which counts it in `ort_api_calls`.
 * tests/test_engine_source.py scans the sources and fails on any OrtApi/OrtEpApi member
 * name used other than as the member argument of these three macros, whose definitions
 * below it matches exactly (edit both together). Every heap allocation goes through
 * ebe_malloc/ebe_calloc/ebe_realloc/ebe_free, which count `heap_allocs`/`heap_bytes`.
 */
#ifndef EBE_COMMON_H
#define EBE_COMMON_H

#include <stddef.h>
#include <stdint.h>

/* Only this header: it includes onnxruntime_ep_c_api.h itself (including both breaks). */
#include "onnxruntime_c_api.h"

#include "ebe_probe.h"

#ifndef EBE_ORT_API_VERSION
#define EBE_ORT_API_VERSION 29 /* requested at run time: ORT 1.29 and newer load us */
#endif

#define EBE_VERSION "0.1.0"
#define EBE_VENDOR "epbench"
#define EBE_MAX_RANK 8

#define EBE_EXPORT __attribute__((visibility("default")))

/* Call an ORT API member, counting it first (in the EP's counters). */
#define EBE_CALL(counters, api, member, ...) \
  (ebe_probe_add((counters), EBE_C_ORT_API_CALLS, 1), (api)->member(__VA_ARGS__))
#define EBE_CALL0(counters, api, member) \
  (ebe_probe_add((counters), EBE_C_ORT_API_CALLS, 1), (api)->member())
/* Hot-path form: count into a local tally (a uint64_t lvalue) that the caller adds to
 * `ort_api_calls` once per Compute, on every path out (one atomic instead of one per call). */
#define EBE_CALL_T(tally, api, member, ...) (++(tally), (api)->member(__VA_ARGS__))

/* Return the status of an expression that yields OrtStatus*, if it is an error. */
#define EBE_RETURN_IF_ERROR(expr)          \
  do {                                     \
    OrtStatus *ebe_status_ = (expr);       \
    if (ebe_status_ != NULL) return ebe_status_; \
  } while (0)

/* Jump to a cleanup label with `status` set, if the expression failed. */
#define EBE_GOTO_IF_ERROR(status, expr, label) \
  do {                                         \
    (status) = (expr);                         \
    if ((status) != NULL) goto label;          \
  } while (0)

/* ---- checked size arithmetic ----------------------------------------------------------------
 * Element counts and byte sizes are computed with these. Each returns nonzero
 * when the true result does not fit (then *out is meaningless) and 0 with *out set
 * otherwise, as __builtin_*_overflow do. */

/* The most float32 elements one tensor (or the scratch arena) may hold: its byte size, and
 * any pointer difference inside it, then fit ptrdiff_t (numpy's limit too). */
#define EBE_MAX_ELEMENTS ((size_t)PTRDIFF_MAX / sizeof(float))

static inline int ebe_mul_overflow(size_t a, size_t b, size_t *out) {
  return __builtin_mul_overflow(a, b, out);
}

static inline int ebe_add_overflow(size_t a, size_t b, size_t *out) {
  return __builtin_add_overflow(a, b, out);
}

/* a rounded up to a multiple of `align`, a power of two. */
static inline int ebe_align_overflow(size_t a, size_t align, size_t *out) {
  if (__builtin_add_overflow(a, align - 1, out)) return 1;
  *out &= ~(align - 1);
  return 0;
}

/* Element count of a shape: 0 when a dim is 0, else the product of the dims. Like numpy,
 * a shape is refused (nonzero return) when the product of its nonzero dims exceeds
 * EBE_MAX_ELEMENTS, even if a zero dim empties it, and when a dim is negative. So for a
 * shape this accepted, every partial product of its nonzero dims (strides, batch and row
 * counts) is at most EBE_MAX_ELEMENTS, which is what lets the kernels index unchecked. */
static inline int ebe_numel_overflow(const int64_t *dims, int32_t rank, size_t *out) {
  size_t product = 1;
  int empty = 0;
  for (int32_t i = 0; i < rank; i++) {
    if (dims[i] < 0) return 1;
    if (dims[i] == 0) {
      empty = 1;
      continue;
    }
    if (ebe_mul_overflow(product, (size_t)dims[i], &product) || product > EBE_MAX_ELEMENTS)
      return 1;
  }
  *out = empty ? 0 : product;
  return 0;
}

/* Make an OrtStatus with a printf-formatted message (one counted ORT call).
 * Never fails from the caller's point of view: ORT returns a status or NULL on OOM. */
OrtStatus *ebe_error(const OrtApi *api, ebe_counters *counters, OrtErrorCode code,
                     const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Counted heap. NULL counters counts in the total only. ebe_free(NULL) is a no-op. */
void *ebe_malloc(ebe_counters *counters, size_t size);
void *ebe_calloc(ebe_counters *counters, size_t count, size_t size);
void ebe_free(ebe_counters *counters, void *ptr);
/* Copy of a NUL-terminated string, or NULL when out of memory. Caller frees with ebe_free. */
char *ebe_strdup(ebe_counters *counters, const char *text);

#endif
