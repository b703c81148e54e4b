/* The library's two exported entry points and the EP factory they hand to ORT.
 *
 * ORT calls CreateEpFactories once when the library is registered, under the name the
 * application chose; that name is also this EP's name, so one library registered twice
 * (two commits side by side, as epbench runs them) gives two distinct EPs.
 */
#include <stdlib.h>
#include <string.h>

#include "relu_ep.h"

static const char *ORT_API_CALL xrelu_factory_name(const OrtEpFactory *this_ptr) {
  return ((const xrelu_factory *)this_ptr)->name;
}

static const char *ORT_API_CALL xrelu_factory_vendor(const OrtEpFactory *this_ptr) {
  (void)this_ptr;
  return "epbench example";
}

static const char *ORT_API_CALL xrelu_factory_version(const OrtEpFactory *this_ptr) {
  (void)this_ptr;
  return "0.1.0";
}

/* Offers this EP on every CPU ORT found, as far as `max_ep_devices` allows. The devices
 * made are ORT's to free. */
static OrtStatus *ORT_API_CALL xrelu_factory_supported_devices(
    OrtEpFactory *this_ptr, const OrtHardwareDevice *const *devices, size_t num_devices,
    OrtEpDevice **ep_devices, size_t max_ep_devices, size_t *num_ep_devices) {
  xrelu_factory *factory = (xrelu_factory *)this_ptr;
  *num_ep_devices = 0;
  for (size_t i = 0; i < num_devices && *num_ep_devices < max_ep_devices; i++) {
    if (factory->api->HardwareDevice_Type(devices[i]) != OrtHardwareDeviceType_CPU)
      continue;
    OrtEpDevice *device = NULL;
    XRELU_RETURN_IF_ERROR(
        factory->ep_api->CreateEpDevice(this_ptr, devices[i], NULL, NULL, &device));
    ep_devices[(*num_ep_devices)++] = device;
  }
  return NULL;
}

/* One EP per session; *ep is NULL on failure. */
static OrtStatus *ORT_API_CALL xrelu_factory_create_ep(
    OrtEpFactory *this_ptr, const OrtHardwareDevice *const *devices,
    const OrtKeyValuePairs *const *ep_metadata_pairs, size_t num_devices,
    const OrtSessionOptions *session_options, const OrtLogger *logger, OrtEp **ep) {
  (void)devices, (void)ep_metadata_pairs, (void)num_devices, (void)session_options,
      (void)logger;
  *ep = NULL;
  xrelu_ep *made = NULL;
  XRELU_RETURN_IF_ERROR(xrelu_ep_create((const xrelu_factory *)this_ptr, &made));
  *ep = &made->base;
  return NULL;
}

static void ORT_API_CALL xrelu_factory_release_ep(OrtEpFactory *this_ptr, OrtEp *ep) {
  (void)this_ptr;
  xrelu_ep_release((xrelu_ep *)ep);
}

/* ORT calls this slot whatever the device; a CPU EP needs no data transfer: NULL. */
static OrtStatus *ORT_API_CALL xrelu_factory_data_transfer(OrtEpFactory *this_ptr,
                                                           OrtDataTransferImpl **data_transfer) {
  (void)this_ptr;
  *data_transfer = NULL;
  return NULL;
}

/* Exported. Makes this library's one factory; on success factories[0] owns it (freed by
 * ReleaseEpFactory), on failure nothing is left allocated. */
OrtStatus *CreateEpFactories(const char *registered_name, const OrtApiBase *ort_api_base,
                             const OrtLogger *default_logger, OrtEpFactory **factories,
                             size_t max_factories, size_t *num_factories) {
  (void)default_logger;
  *num_factories = 0;
  const OrtApi *api = ort_api_base->GetApi(XRELU_ORT_API_VERSION);
  if (api == NULL)
    return NULL; /* an ORT older than 1.29: nothing to offer it, and no way to say why */
  if (max_factories < 1)
    return api->CreateStatus(ORT_INVALID_ARGUMENT, "relu_ep: ORT left room for no factory");
  const OrtEpApi *ep_api = api->GetEpApi();
  xrelu_factory *factory = calloc(1, sizeof *factory); /* optional slots stay NULL */
  size_t name_size = strlen(registered_name) + 1;
  char *name = malloc(name_size);
  if (ep_api == NULL || factory == NULL || name == NULL) {
    free(factory);
    free(name);
    return api->CreateStatus(ORT_FAIL, ep_api == NULL
                                           ? "relu_ep: this ONNX Runtime has no plugin-EP API"
                                           : "relu_ep: out of memory");
  }
  memcpy(name, registered_name, name_size);
  factory->api = api;
  factory->ep_api = ep_api;
  factory->name = name;
  OrtEpFactory *base = &factory->base;
  base->ort_version_supported = XRELU_ORT_API_VERSION;
  base->GetName = xrelu_factory_name;
  base->GetVendor = xrelu_factory_vendor;
  base->GetVersion = xrelu_factory_version; /* required: ORT calls it */
  base->GetSupportedDevices = xrelu_factory_supported_devices;
  base->CreateEp = xrelu_factory_create_ep;
  base->ReleaseEp = xrelu_factory_release_ep;
  base->CreateDataTransfer = xrelu_factory_data_transfer; /* required, may yield NULL */
  /* Left NULL, optional on the CPU path: GetVendorId, CreateAllocator, IsStreamAware,
   * CreateSyncStreamForDevice and the rest. */
  factories[0] = base;
  *num_factories = 1;
  return NULL;
}

/* Exported. Frees a factory made by CreateEpFactories; this function can't fail. */
OrtStatus *ReleaseEpFactory(OrtEpFactory *factory) {
  xrelu_factory *made = (xrelu_factory *)factory;
  if (made != NULL)
    free(made->name);
  free(made);
  return NULL;
}
