/* registry.c -- the engine's ops registered as ORT kernels (partition=kernel, and every
 * node inside a subgraph in any mode).
 *
 * One kernel definition per op and opset range (float32 only); ORT creates one OrtKernelImpl
 * per node it assigned to us and calls its Compute every Run. A kernel holds a one-node plan
 * (ebe_plan_build_node), so it runs the very code a per_node partition runs: the difference
 * measured between the two modes is ORT's dispatch, not the engine's arithmetic. Relu,
 * Sigmoid and Identity declare their input and output as a mutable alias: ORT may then hand
 * the kernel one buffer for both (when nothing else reads the input), and the unary kernels
 * work in place.
 */
#include <limits.h>
#include <string.h>

#include "ebe_plan.h"
#include "ebe_registry.h"

_Static_assert(sizeof(((ebe_ep *)0)->kernel_sources) / sizeof(ebe_kernel_source) >= EBE_OP_COUNT,
               "ebe_ep.kernel_sources holds one entry per op");

typedef struct ebe_kernel {
  OrtKernelImpl base; /* first: ORT's pointer is ours */
  ebe_plan *plan;
  ebe_counters *counters;
} ebe_kernel;

/* One kernel definition: an op, one of its ONNX schema versions (ORT matches a node whose
 * since-version lies in [since_start, since_end]; an open-ended last range matches only its
 * exact start), and the name that version's schema gives the float type parameter. */
typedef struct ebe_kernel_range {
  ebe_op op;
  int since_start, since_end;
  const char *type_param;
} ebe_kernel_range;

/* The schema versions of ONNX 1.23 (onnx.defs), from where ORT's CPU EP starts (Add/Mul 7,
 * Relu/Sigmoid 6: the older ones had attributes the engine does not take). */
static const ebe_kernel_range ebe_kernel_ranges[] = {
    {EBE_OP_IDENTITY, 1, 12, "T"},   {EBE_OP_IDENTITY, 13, 13, "T"},
    {EBE_OP_IDENTITY, 14, 15, "V"},  {EBE_OP_IDENTITY, 16, 18, "V"},
    {EBE_OP_IDENTITY, 19, 20, "V"},  {EBE_OP_IDENTITY, 21, 22, "V"},
    {EBE_OP_IDENTITY, 23, 23, "V"},  {EBE_OP_IDENTITY, 24, 24, "V"},
    {EBE_OP_IDENTITY, 25, INT_MAX, "V"},
    {EBE_OP_RELU, 6, 12, "T"},       {EBE_OP_RELU, 13, 13, "T"},
    {EBE_OP_RELU, 14, INT_MAX, "T"},
    {EBE_OP_SIGMOID, 6, 12, "T"},    {EBE_OP_SIGMOID, 13, INT_MAX, "T"},
    {EBE_OP_ADD, 7, 12, "T"},        {EBE_OP_ADD, 13, 13, "T"},
    {EBE_OP_ADD, 14, INT_MAX, "T"},
    {EBE_OP_MUL, 7, 12, "T"},        {EBE_OP_MUL, 13, 13, "T"},
    {EBE_OP_MUL, 14, INT_MAX, "T"},
    {EBE_OP_MATMUL, 1, 8, "T"},      {EBE_OP_MATMUL, 9, 12, "T"},
    {EBE_OP_MATMUL, 13, INT_MAX, "T"},
};

static const char *const ebe_kernel_op_types[EBE_OP_COUNT] = {
    [EBE_OP_IDENTITY] = "Identity", [EBE_OP_RELU] = "Relu", [EBE_OP_SIGMOID] = "Sigmoid",
    [EBE_OP_ADD] = "Add",           [EBE_OP_MUL] = "Mul",   [EBE_OP_MATMUL] = "MatMul",
};

static OrtStatus *ORT_API_CALL ebe_kernel_compute(OrtKernelImpl *this_ptr,
                                                  OrtKernelContext *context) {
  return ebe_plan_run(((ebe_kernel *)this_ptr)->plan, context);
}

/* Frees the kernel and its plan; ORT calls it once per kernel. Cannot fail. */
static void ORT_API_CALL ebe_kernel_release(OrtKernelImpl *this_ptr) {
  ebe_kernel *kernel = (ebe_kernel *)this_ptr;
  if (kernel == NULL) return;
  ebe_plan_free(kernel->plan);
  ebe_free(kernel->counters, kernel);
}

/* The node's name into buf (cap bytes), or "" when ORT cannot give it (too long, an error:
 * the name only labels error messages). The status of a failed query is released. */
static void ebe_kernel_node_name(const ebe_ep *ep, const OrtKernelInfo *info, char *buf,
                                 size_t cap) {
  size_t size = cap;
  OrtStatus *status = EBE_CALL(ep->counters, ep->api, KernelInfo_GetNodeName, info, buf, &size);
  if (status != NULL) {
    EBE_CALL(ep->counters, ep->api, ReleaseStatus, status);
    buf[0] = '\0';
  }
}

/* ORT's kernel factory: a kernel for one node. On success *kernel_out is a new kernel that
 * ORT owns (and frees with its Release); on failure it is NULL and the status says why. */
static OrtStatus *ORT_API_CALL ebe_kernel_create(void *state, const OrtKernelInfo *info,
                                                 OrtKernelImpl **kernel_out) {
  *kernel_out = NULL;
  const ebe_kernel_source *source = state;
  ebe_ep *ep = source->ep;
  ebe_counters *c = ep->counters;
  const ebe_op op = (ebe_op)source->op;
  char name[256];
  ebe_kernel_node_name(ep, info, name, sizeof name);
  ebe_static_shape shapes[2];
  memset(shapes, 0, sizeof shapes);
  for (size_t k = 0; k < ebe_op_arity(op); k++) {
    OrtTypeInfo *type = NULL;
    EBE_RETURN_IF_ERROR(EBE_CALL(c, ep->api, KernelInfo_GetInputTypeInfo, info, k, &type));
    OrtStatus *status = ebe_static_shape_from_type(ep->api, c, type, &shapes[k]);
    EBE_CALL(c, ep->api, ReleaseTypeInfo, type);
    EBE_RETURN_IF_ERROR(status);
  }
  ebe_kernel *kernel = ebe_calloc(c, 1, sizeof *kernel); /* optional slots stay NULL */
  if (kernel == NULL) return ebe_error(ep->api, c, ORT_FAIL, "engine: out of memory for a kernel");
  const ebe_plan_config config = {ep->api, c, ep->options.inject_delay_ns_per_node};
  OrtStatus *status = ebe_plan_build_node(&config, op, name, shapes, &kernel->plan);
  if (status != NULL) {
    ebe_free(c, kernel);
    return status;
  }
  kernel->counters = c;
  kernel->base.ort_version_supported = EBE_ORT_API_VERSION;
  kernel->base.flags = 0;
  kernel->base.Compute = ebe_kernel_compute;
  kernel->base.Release = ebe_kernel_release;
  /* Optional, left NULL: PrePackWeight, SetSharedPrePackedWeight (nothing is pre-packed). */
  *kernel_out = &kernel->base;
  return NULL;
}

/* Add one kernel definition to ep->registry. The builder and definition are released on
 * every path (ORT copies what it keeps). */
static OrtStatus *ebe_registry_add(ebe_ep *ep, const ebe_kernel_range *range,
                                   const OrtDataType *float_type) {
  const OrtEpApi *x = ep->ep_api;
  ebe_counters *c = ep->counters;
  OrtKernelDefBuilder *builder = NULL;
  OrtKernelDef *def = NULL;
  OrtStatus *status = NULL;
  const int alias_in[1] = {0}, alias_out[1] = {0};
  EBE_GOTO_IF_ERROR(status, EBE_CALL(c, x, CreateKernelDefBuilder, &builder), done);
  EBE_GOTO_IF_ERROR(status,
                    EBE_CALL(c, x, KernelDefBuilder_SetOperatorType, builder,
                             ebe_kernel_op_types[range->op]),
                    done);
  EBE_GOTO_IF_ERROR(status, EBE_CALL(c, x, KernelDefBuilder_SetDomain, builder, ""), done);
  EBE_GOTO_IF_ERROR(status,
                    EBE_CALL(c, x, KernelDefBuilder_SetSinceVersion, builder, range->since_start,
                             range->since_end),
                    done);
  EBE_GOTO_IF_ERROR(status, EBE_CALL(c, x, KernelDefBuilder_SetExecutionProvider, builder, ep->name),
                    done);
  EBE_GOTO_IF_ERROR(status,
                    EBE_CALL(c, x, KernelDefBuilder_AddTypeConstraint, builder, range->type_param,
                             &float_type, 1),
                    done);
  if (ebe_op_arity(range->op) == 1) /* elementwise unary: in place where ORT allows */
    EBE_GOTO_IF_ERROR(status,
                      EBE_CALL(c, x, KernelDefBuilder_AddInputOutputMutableAliases, builder,
                               alias_in, alias_out, 1),
                      done);
  EBE_GOTO_IF_ERROR(status, EBE_CALL(c, x, KernelDefBuilder_Build, builder, &def), done);
  EBE_GOTO_IF_ERROR(status,
                    EBE_CALL(c, x, KernelRegistry_AddKernel, ep->registry, def, ebe_kernel_create,
                             &ep->kernel_sources[range->op]),
                    done);
done:
  if (def != NULL) EBE_CALL(c, x, ReleaseKernelDef, def);
  if (builder != NULL) EBE_CALL(c, x, ReleaseKernelDefBuilder, builder);
  return status;
}

OrtStatus *ebe_registry_create(ebe_ep *ep) {
  ebe_counters *c = ep->counters;
  const OrtDataType *float_type = NULL;
  ep->registry = NULL;
  EBE_RETURN_IF_ERROR(EBE_CALL(c, ep->ep_api, GetTensorDataType,
                               ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, &float_type));
  for (int op = 0; op < EBE_OP_COUNT; op++) {
    ep->kernel_sources[op].ep = ep;
    ep->kernel_sources[op].op = op;
  }
  EBE_RETURN_IF_ERROR(EBE_CALL(c, ep->ep_api, CreateKernelRegistry, &ep->registry));
  for (size_t i = 0; i < sizeof ebe_kernel_ranges / sizeof ebe_kernel_ranges[0]; i++) {
    OrtStatus *status = ebe_registry_add(ep, &ebe_kernel_ranges[i], float_type);
    if (status != NULL) {
      ebe_registry_release(ep);
      return status;
    }
  }
  return NULL;
}

void ebe_registry_release(ebe_ep *ep) {
  if (ep->registry == NULL) return;
  EBE_CALL(ep->counters, ep->ep_api, ReleaseKernelRegistry, ep->registry);
  ep->registry = NULL;
}
