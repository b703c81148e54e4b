/* ebe_factory.h -- the OrtEpFactory of the engine: one per registration name. */
#ifndef EBE_FACTORY_H
#define EBE_FACTORY_H

#include "ebe_common.h"

typedef struct ebe_factory {
  OrtEpFactory base; /* first: ORT's pointer is ours */
  const OrtApi *api;
  const OrtEpApi *ep_api;
  char *name;             /* the registration name, which is also the EP name */
  ebe_counters *counters; /* per-name block (NULL if the registry is full) */
} ebe_factory;

/* Create the factory for `registered_name`. On success *out owns it (release with
 * ebe_factory_release); on failure *out is NULL and a status says why. */
OrtStatus *ebe_factory_create(const OrtApi *api, const char *registered_name,
                              ebe_factory **out);

/* Free a factory. NULL is a no-op. */
void ebe_factory_release(ebe_factory *factory);

#endif
