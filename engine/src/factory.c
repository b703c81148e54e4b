/* factory.c -- the engine's OrtEpFactory: one CPU device, EPs named after the registration. */
#include <string.h>

#include "ebe_ep.h"
#include "ebe_factory.h"

static const char *ORT_API_CALL ebe_factory_get_name(const OrtEpFactory *this_ptr) {
  return ((const ebe_factory *)this_ptr)->name;
}

static const char *ORT_API_CALL ebe_factory_get_vendor(const OrtEpFactory *this_ptr) {
  (void)this_ptr;
  return EBE_VENDOR;
}

static const char *ORT_API_CALL ebe_factory_get_version(const OrtEpFactory *this_ptr) {
  (void)this_ptr;
  return EBE_VERSION;
}

/* Report one OrtEpDevice: the first CPU hardware device ORT offers. */
static OrtStatus *ORT_API_CALL ebe_factory_get_supported_devices(
    OrtEpFactory *this_ptr, const OrtHardwareDevice *const *devices, size_t num_devices,
    OrtEpDevice **ep_devices, size_t max_ep_devices, size_t *num_ep_devices) {
  ebe_factory *factory = (ebe_factory *)this_ptr;
  ebe_counters *c = factory->counters;
  *num_ep_devices = 0;
  for (size_t i = 0; i < num_devices && *num_ep_devices < max_ep_devices; i++) {
    if (EBE_CALL(c, factory->api, HardwareDevice_Type, devices[i]) != OrtHardwareDeviceType_CPU)
      continue;
    OrtEpDevice *device = NULL;
    EBE_RETURN_IF_ERROR(
        EBE_CALL(c, factory->ep_api, CreateEpDevice, this_ptr, devices[i], NULL, NULL, &device));
    ep_devices[(*num_ep_devices)++] = device; /* ORT owns it now */
    break;
  }
  return NULL;
}

static OrtStatus *ORT_API_CALL ebe_factory_create_ep(
    OrtEpFactory *this_ptr, const OrtHardwareDevice *const *devices,
    const OrtKeyValuePairs *const *ep_metadata_pairs, size_t num_devices,
    const OrtSessionOptions *session_options, const OrtLogger *logger, OrtEp **ep_out) {
  (void)devices;
  (void)ep_metadata_pairs;
  (void)num_devices;
  (void)logger;
  *ep_out = NULL;
  ebe_ep *ep = NULL;
  EBE_RETURN_IF_ERROR(ebe_ep_create((ebe_factory *)this_ptr, session_options, &ep));
  *ep_out = &ep->base;
  return NULL;
}

static void ORT_API_CALL ebe_factory_release_ep(OrtEpFactory *this_ptr, OrtEp *ep) {
  (void)this_ptr;
  ebe_ep_release((ebe_ep *)ep);
}

/* A CPU EP needs no data transfer; the slot must still be set (ORT calls it). */
static OrtStatus *ORT_API_CALL ebe_factory_create_data_transfer(
    OrtEpFactory *this_ptr, OrtDataTransferImpl **data_transfer) {
  (void)this_ptr;
  *data_transfer = NULL;
  return NULL;
}

OrtStatus *ebe_factory_create(const OrtApi *api, const char *registered_name,
                              ebe_factory **out) {
  *out = NULL;
  ebe_counters *c = ebe_probe_counters_for(registered_name);
  ebe_factory *factory = ebe_calloc(c, 1, sizeof *factory); /* optional slots stay NULL */
  char *name = ebe_strdup(c, registered_name);
  const OrtEpApi *ep_api = EBE_CALL0(c, api, GetEpApi);
  if (factory == NULL || name == NULL || ep_api == NULL) {
    ebe_free(c, factory);
    ebe_free(c, name);
    if (ep_api == NULL)
      return ebe_error(api, c, ORT_FAIL,
                       "engine: this ONNX Runtime has no plugin-EP API (GetEpApi returned "
                       "NULL); the engine needs ONNX Runtime 1.29 or newer");
    return ebe_error(api, c, ORT_FAIL, "engine: cannot create the EP factory (out of memory)");
  }
  factory->api = api;
  factory->ep_api = ep_api;
  factory->name = name;
  factory->counters = c;
  OrtEpFactory *base = &factory->base;
  base->ort_version_supported = EBE_ORT_API_VERSION;
  base->GetName = ebe_factory_get_name;
  base->GetVendor = ebe_factory_get_vendor;
  base->GetVersion = ebe_factory_get_version;          /* required: NULL crashes ORT */
  base->GetSupportedDevices = ebe_factory_get_supported_devices;
  base->CreateEp = ebe_factory_create_ep;
  base->ReleaseEp = ebe_factory_release_ep;
  base->CreateDataTransfer = ebe_factory_create_data_transfer; /* required, may yield NULL */
  /* Optional on the CPU path, left NULL: GetVendorId, ValidateCompiledModelCompatibilityInfo,
   * CreateAllocator, ReleaseAllocator, IsStreamAware, CreateSyncStreamForDevice, and the
   * later additions (custom op domains, graphics interop, model candidates). */
  *out = factory;
  return NULL;
}

/* Frees the factory and its name; its counters block stays (probe.c owns it). NULL is a
 * no-op; cannot fail. */
void ebe_factory_release(ebe_factory *factory) {
  if (factory == NULL) return;
  ebe_counters *c = factory->counters;
  ebe_free(c, factory->name);
  ebe_free(c, factory);
}
