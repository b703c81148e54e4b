/* common.c -- counted heap and status helpers shared by every engine file. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ebe_common.h"

/* Returns NULL on failure (nothing counted then); caller owns the block. */
void *ebe_malloc(ebe_counters *counters, size_t size) {
  void *ptr = malloc(size == 0 ? 1 : size);
  if (ptr != NULL) {
    ebe_probe_add(counters, EBE_C_HEAP_ALLOCS, 1);
    ebe_probe_add(counters, EBE_C_HEAP_BYTES, size);
  }
  return ptr;
}

/* Zeroed array; NULL on failure or when count * size overflows (nothing counted then);
 * caller owns the block. */
void *ebe_calloc(ebe_counters *counters, size_t count, size_t size) {
  size_t bytes = 0;
  if (ebe_mul_overflow(count, size, &bytes)) return NULL;
  void *ptr = calloc(count == 0 ? 1 : count, size == 0 ? 1 : size);
  if (ptr != NULL) {
    ebe_probe_add(counters, EBE_C_HEAP_ALLOCS, 1);
    ebe_probe_add(counters, EBE_C_HEAP_BYTES, bytes);
  }
  return ptr;
}

/* Frees a block from ebe_malloc/ebe_calloc/ebe_strdup, counted in the same counters it was
 * allocated in; NULL is a no-op. Cannot fail. */
void ebe_free(ebe_counters *counters, void *ptr) {
  if (ptr == NULL) return;
  ebe_probe_add(counters, EBE_C_HEAP_FREES, 1);
  free(ptr);
}

/* Copy of text, or NULL when out of memory; caller frees it with ebe_free. */
char *ebe_strdup(ebe_counters *counters, const char *text) {
  size_t len = strlen(text);
  char *copy = ebe_malloc(counters, len + 1);
  if (copy != NULL) memcpy(copy, text, len + 1);
  return copy;
}

OrtStatus *ebe_error(const OrtApi *api, ebe_counters *counters, OrtErrorCode code,
                     const char *fmt, ...) {
  char message[512];
  va_list args;
  va_start(args, fmt);
  vsnprintf(message, sizeof message, fmt, args);
  va_end(args);
  return EBE_CALL(counters, api, CreateStatus, code, message);
}
