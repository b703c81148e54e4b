/* The EP of one session: which nodes it takes (GetCapability), how it runs them (Compile,
 * one compiled node per Relu), and what it does at the start of each Run.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "relu_ep.h"

/* One compiled Relu node. ORT calls its table; `api` is for the tensors. */
typedef struct xrelu_kernel {
  OrtNodeComputeInfo base; /* first: ORT hands back this pointer */
  const OrtApi *api;
} xrelu_kernel;

static const char *ORT_API_CALL xrelu_ep_name(const OrtEp *this_ptr) {
  return ((const xrelu_ep *)this_ptr)->name;
}

/* Whether `node` is a Relu on float32 this EP runs; *symbolic says whether its input's
 * shape has a dimension unknown until Run. */
static OrtStatus *xrelu_supported(const OrtApi *api, const OrtNode *node, bool *supported,
                                  bool *symbolic) {
  *supported = false;
  *symbolic = false;
  const char *op = NULL;
  const char *domain = NULL;
  size_t inputs = 0;
  size_t outputs = 0;
  XRELU_RETURN_IF_ERROR(api->Node_GetOperatorType(node, &op));
  XRELU_RETURN_IF_ERROR(api->Node_GetDomain(node, &domain));
  XRELU_RETURN_IF_ERROR(api->Node_GetNumInputs(node, &inputs));
  XRELU_RETURN_IF_ERROR(api->Node_GetNumOutputs(node, &outputs));
  if (strcmp(op, "Relu") != 0 || (domain[0] != '\0' && strcmp(domain, "ai.onnx") != 0) ||
      inputs != 1 || outputs != 1)
    return NULL;
  const OrtValueInfo *input = NULL;
  XRELU_RETURN_IF_ERROR(api->Node_GetInputs(node, &input, 1));
  if (input == NULL)
    return NULL;
  const OrtTypeInfo *type = NULL; /* owned by the value info */
  const OrtTensorTypeAndShapeInfo *tensor = NULL;
  XRELU_RETURN_IF_ERROR(api->GetValueInfoTypeInfo(input, &type));
  XRELU_RETURN_IF_ERROR(api->CastTypeInfoToTensorInfo(type, &tensor));
  if (tensor == NULL)
    return NULL; /* not a tensor */
  ONNXTensorElementDataType element = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  size_t rank = 0;
  XRELU_RETURN_IF_ERROR(api->GetTensorElementType(tensor, &element));
  XRELU_RETURN_IF_ERROR(api->GetDimensionsCount(tensor, &rank));
  if (element != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT)
    return NULL;
  int64_t *dims = calloc(rank > 0 ? rank : 1, sizeof *dims); /* calloc checks the product */
  if (dims == NULL)
    return api->CreateStatus(ORT_FAIL, "relu_ep: out of memory reading a shape");
  OrtStatus *status = api->GetDimensions(tensor, dims, rank);
  for (size_t i = 0; status == NULL && i < rank; i++)
    *symbolic = *symbolic || dims[i] < 0;
  free(dims);
  *supported = status == NULL;
  return status;
}

/* Claims every float32 Relu, each as its own compiled node. */
static OrtStatus *ORT_API_CALL xrelu_ep_get_capability(OrtEp *this_ptr, const OrtGraph *graph,
                                                       OrtEpGraphSupportInfo *support) {
  xrelu_ep *ep = (xrelu_ep *)this_ptr;
  const OrtApi *api = ep->api;
  size_t count = 0;
  XRELU_RETURN_IF_ERROR(api->Graph_GetNumNodes(graph, &count));
  if (count == 0)
    return NULL;
  const OrtNode **nodes = calloc(count, sizeof *nodes); /* calloc checks the product */
  if (nodes == NULL)
    return api->CreateStatus(ORT_FAIL, "relu_ep: out of memory listing the graph's nodes");
  OrtStatus *status = api->Graph_GetNodes(graph, nodes, count);
  for (size_t i = 0; status == NULL && i < count; i++) {
    bool supported = false;
    bool symbolic = false;
    status = xrelu_supported(api, nodes[i], &supported, &symbolic);
    if (status == NULL && supported) {
      status = ep->ep_api->EpGraphSupportInfo_AddNodesToFuse(support, &nodes[i], 1, NULL);
      ep->symbolic = ep->symbolic || (status == NULL && symbolic);
    }
  }
  free(nodes);
  return status;
}

static OrtStatus *ORT_API_CALL xrelu_kernel_create_state(OrtNodeComputeInfo *this_ptr,
                                                         OrtNodeComputeContext *context,
                                                         void **state) {
  (void)this_ptr, (void)context;
  *state = NULL; /* a Relu keeps nothing between Runs */
  return NULL;
}

static void ORT_API_CALL xrelu_kernel_release_state(OrtNodeComputeInfo *this_ptr, void *state) {
  (void)this_ptr, (void)state;
}

/* Output 0 = max(input 0, 0), of the input's shape. */
static OrtStatus *ORT_API_CALL xrelu_kernel_compute(OrtNodeComputeInfo *this_ptr, void *state,
                                                    OrtKernelContext *context) {
  (void)state;
  const OrtApi *api = ((xrelu_kernel *)this_ptr)->api;
  const OrtValue *input = NULL;
  OrtTensorTypeAndShapeInfo *shape = NULL;
  size_t rank = 0;
  size_t elements = 0;
  XRELU_RETURN_IF_ERROR(api->KernelContext_GetInput(context, 0, &input));
  XRELU_RETURN_IF_ERROR(api->GetTensorTypeAndShape(input, &shape));
  OrtStatus *status = api->GetDimensionsCount(shape, &rank);
  int64_t *dims = status == NULL ? calloc(rank > 0 ? rank : 1, sizeof *dims) : NULL;
  if (status == NULL && dims == NULL)
    status = api->CreateStatus(ORT_FAIL, "relu_ep: out of memory reading a shape");
  if (status == NULL)
    status = api->GetDimensions(shape, dims, rank);
  if (status == NULL)
    status = api->GetTensorShapeElementCount(shape, &elements);
  api->ReleaseTensorTypeAndShapeInfo(shape);
  OrtValue *output = NULL;
  const void *from = NULL;
  void *to = NULL;
  if (status == NULL)
    status = api->KernelContext_GetOutput(context, 0, dims, rank, &output);
  free(dims);
  if (status == NULL)
    status = api->GetTensorData(input, &from);
  if (status == NULL)
    status = api->GetTensorMutableData(output, &to);
  if (status != NULL)
    return status;
  const float *x = from;
  float *y = to;
  for (size_t i = 0; i < elements; i++)
    y[i] = x[i] > 0.0f ? x[i] : 0.0f;
  return NULL;
}

/* One kernel per compiled graph (each holds one Relu). On failure every kernel made here is
 * freed and node_compute_infos is left all NULL. */
static OrtStatus *ORT_API_CALL xrelu_ep_compile(OrtEp *this_ptr, const OrtGraph **graphs,
                                                const OrtNode **fused_nodes, size_t count,
                                                OrtNodeComputeInfo **node_compute_infos,
                                                OrtNode **ep_context_nodes) {
  (void)graphs, (void)fused_nodes, (void)ep_context_nodes; /* no EPContext nodes made */
  xrelu_ep *ep = (xrelu_ep *)this_ptr;
  for (size_t i = 0; i < count; i++)
    node_compute_infos[i] = NULL;
  for (size_t i = 0; i < count; i++) {
    xrelu_kernel *kernel = calloc(1, sizeof *kernel);
    if (kernel == NULL) {
      for (size_t j = 0; j < i; j++) {
        free(node_compute_infos[j]);
        node_compute_infos[j] = NULL;
      }
      return ep->api->CreateStatus(ORT_FAIL, "relu_ep: out of memory compiling");
    }
    kernel->api = ep->api;
    kernel->base.ort_version_supported = XRELU_ORT_API_VERSION;
    kernel->base.CreateState = xrelu_kernel_create_state;
    kernel->base.Compute = xrelu_kernel_compute;
    kernel->base.ReleaseState = xrelu_kernel_release_state;
    node_compute_infos[i] = &kernel->base;
  }
  return NULL;
}

static void ORT_API_CALL xrelu_ep_release_node_compute_infos(OrtEp *this_ptr,
                                                             OrtNodeComputeInfo **infos,
                                                             size_t count) {
  (void)this_ptr;
  for (size_t i = 0; i < count; i++)
    free(infos[i]);
}

/* Spins for XRELU_DELAY_NS when this session's model has a symbolic dimension. */
static OrtStatus *ORT_API_CALL xrelu_ep_on_run_start(OrtEp *this_ptr,
                                                     const OrtRunOptions *run_options) {
  (void)run_options;
  const xrelu_ep *ep = (const xrelu_ep *)this_ptr;
  if (XRELU_DELAY_NS <= 0 || !ep->symbolic)
    return NULL;
  struct timespec now;
  if (clock_gettime(CLOCK_MONOTONIC, &now) != 0)
    return NULL;
  const int64_t until = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec + XRELU_DELAY_NS;
  do {
    if (clock_gettime(CLOCK_MONOTONIC, &now) != 0)
      break;
  } while ((int64_t)now.tv_sec * 1000000000 + now.tv_nsec < until);
  return NULL;
}

OrtStatus *xrelu_ep_create(const xrelu_factory *factory, xrelu_ep **out) {
  *out = NULL;
  xrelu_ep *ep = calloc(1, sizeof *ep); /* zeroed: every optional OrtEp slot is NULL */
  if (ep == NULL)
    return factory->api->CreateStatus(ORT_FAIL, "relu_ep: out of memory creating the EP");
  ep->api = factory->api;
  ep->ep_api = factory->ep_api;
  ep->name = factory->name;
  ep->base.ort_version_supported = XRELU_ORT_API_VERSION;
  ep->base.GetName = xrelu_ep_name;
  ep->base.GetCapability = xrelu_ep_get_capability;
  ep->base.Compile = xrelu_ep_compile;
  ep->base.ReleaseNodeComputeInfos = xrelu_ep_release_node_compute_infos;
  ep->base.OnRunStart = xrelu_ep_on_run_start;
  /* Left NULL, optional: GetPreferredDataLayout, OnRunEnd, CreateAllocator and the rest
   * (ORT's CPU defaults apply). */
  *out = ep;
  return NULL;
}

void xrelu_ep_release(xrelu_ep *ep) {
  free(ep);
}
