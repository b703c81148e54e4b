/* relu_ep: an ONNX Runtime plugin EP that runs one op, Relu on float32 tensors.
 *
 * The example of an outside EP repository that adopts epbench (see ../README.md).
 * Every symbol is prefixed `xrelu_`; only CreateEpFactories and ReleaseEpFactory are
 * exported (relu_ep.map).
 */
#ifndef XRELU_EP_H
#define XRELU_EP_H

#include <stdbool.h>
#include <stdint.h>

#include "onnxruntime_c_api.h"

/* The ORT API version this EP is written against and asks ORT for: 1.29's, the first
 * whose plugin-EP API it uses whole. ORT reads no table slot added after it. */
#define XRELU_ORT_API_VERSION 29

/* Nanoseconds spent at the start of every Run of a session whose model has a symbolic
 * dimension: a cost the build compiles in from the file `delay_ns` (0: none). */
#ifndef XRELU_DELAY_NS
#define XRELU_DELAY_NS 0
#endif

/* Returns `status` from the enclosing function when an ORT call fails. */
#define XRELU_RETURN_IF_ERROR(expr)       \
  do {                                    \
    OrtStatus *xrelu_status_ = (expr);    \
    if (xrelu_status_ != NULL)            \
      return xrelu_status_;               \
  } while (0)

typedef struct xrelu_factory {
  OrtEpFactory base; /* first: ORT hands back this pointer */
  const OrtApi *api;
  const OrtEpApi *ep_api;
  char *name; /* the name the library was registered under, also the EP's name */
} xrelu_factory;

typedef struct xrelu_ep {
  OrtEp base; /* first: ORT hands back this pointer */
  const OrtApi *api;
  const OrtEpApi *ep_api;
  const char *name; /* the factory's; the factory outlives its EPs */
  bool symbolic;    /* a claimed node's input has a symbolic dimension */
} xrelu_ep;

/* Creates an EP for one session. On success *out owns a new EP (freed by xrelu_ep_release);
 * on failure *out is NULL and the status says why. */
OrtStatus *xrelu_ep_create(const xrelu_factory *factory, xrelu_ep **out);

/* Frees an EP made by xrelu_ep_create. NULL is a no-op; this function can't fail. */
void xrelu_ep_release(xrelu_ep *ep);

#endif
