/* plugin.c -- the two entry points ORT looks up in a plugin EP library. */
#include "ebe_factory.h"

/* Create one factory named `registered_name`. If the running ORT is older than the API
 * version we request, report no factory (and make no OrtStatus: there is no API to make
 * one with). */
EBE_EXPORT OrtStatus *CreateEpFactories(const char *registered_name,
                                        const OrtApiBase *ort_api_base,
                                        const OrtLogger *default_logger,
                                        OrtEpFactory **factories, size_t max_factories,
                                        size_t *num_factories) {
  (void)default_logger;
  *num_factories = 0;
  ebe_counters *c = ebe_probe_counters_for(registered_name);
  const OrtApi *api = EBE_CALL(c, ort_api_base, GetApi, EBE_ORT_API_VERSION);
  if (api == NULL) return NULL;
  if (max_factories < 1)
    return ebe_error(api, c, ORT_INVALID_ARGUMENT, "engine: ORT offered no factory slot");
  ebe_factory *factory = NULL;
  EBE_RETURN_IF_ERROR(ebe_factory_create(api, registered_name, &factory));
  factories[0] = &factory->base;
  *num_factories = 1;
  return NULL;
}

EBE_EXPORT OrtStatus *ReleaseEpFactory(OrtEpFactory *factory) {
  ebe_factory_release((ebe_factory *)factory);
  return NULL;
}
