/* ebe_registry.h -- partition=kernel (and every mode inside a subgraph): the engine's ops as
 * kernels in an ORT kernel registry (OrtEp::GetKernelRegistry), each node claimed alone and
 * run by its own OrtKernelImpl. */
#ifndef EBE_REGISTRY_H
#define EBE_REGISTRY_H

#include "ebe_ep.h"

/* Create ep->registry with one kernel definition per op and opset range, for the EP's
 * name. On success ep->registry is set (the EP owns it: ebe_registry_release); on failure it
 * stays NULL and the status says why. */
OrtStatus *ebe_registry_create(ebe_ep *ep);

/* Release ep->registry (NULL is a no-op). Cannot fail. */
void ebe_registry_release(ebe_ep *ep);

#endif
