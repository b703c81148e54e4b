/* ep.c -- the engine's OrtEp: options, GetCapability (what it claims), Compile (plans),
 * and the compute functions ORT calls per fused node. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ebe_ep.h"
#include "ebe_plan.h"
#include "ebe_registry.h"

/* ---- options ------------------------------------------------------------------------------ */

static OrtStatus *ebe_parse_u64(ebe_ep *ep, const char *key, const char *text, uint64_t *out) {
  char *end = NULL;
  errno = 0;
  const unsigned long long value = strtoull(text, &end, 10);
  if (text[0] == '\0' || text[0] == '-' || *end != '\0' || errno != 0)
    return ebe_error(ep->api, ep->counters, ORT_INVALID_ARGUMENT,
                     "engine option %s='%s': expected a non-negative integer", key, text);
  *out = (uint64_t)value;
  return NULL;
}

static OrtStatus *ebe_apply_option(ebe_ep *ep, const char *key, const char *value) {
  ebe_ep_options *o = &ep->options;
  if (strcmp(key, "partition") == 0) {
    if (strcmp(value, "fused") == 0) o->partition = EBE_PARTITION_FUSED;
    else if (strcmp(value, "per_node") == 0) o->partition = EBE_PARTITION_PER_NODE;
    else if (strcmp(value, "kernel") == 0) o->partition = EBE_PARTITION_KERNEL;
    else
      return ebe_error(ep->api, ep->counters, ORT_INVALID_ARGUMENT,
                       "engine option partition='%s': expected fused, per_node or kernel",
                       value);
    return NULL;
  }
  if (strcmp(key, "inject_delay_ns_per_run") == 0)
    return ebe_parse_u64(ep, key, value, &o->inject_delay_ns_per_run);
  if (strcmp(key, "inject_delay_ns_per_node") == 0)
    return ebe_parse_u64(ep, key, value, &o->inject_delay_ns_per_node);
  if (strcmp(key, "inject_api_calls_per_run") == 0)
    return ebe_parse_u64(ep, key, value, &o->inject_api_calls_per_run);
  return ebe_error(ep->api, ep->counters, ORT_INVALID_ARGUMENT,
                   "unknown engine option '%s': the engine takes "
                   "partition=fused|per_node|kernel, inject_delay_ns_per_run, "
                   "inject_delay_ns_per_node, inject_api_calls_per_run",
                   key);
}

/* Read `ep.<lower-cased name>.<key>` session config entries into ep->options. */
static OrtStatus *ebe_read_options(ebe_ep *ep, const OrtSessionOptions *session_options) {
  char prefix[160];
  const size_t name_len = strlen(ep->name);
  if (name_len + 5 > sizeof prefix)
    return ebe_error(ep->api, ep->counters, ORT_INVALID_ARGUMENT,
                     "engine: EP name '%s' is too long", ep->name);
  memcpy(prefix, "ep.", 3);
  for (size_t i = 0; i < name_len; i++) prefix[3 + i] = (char)tolower((unsigned char)ep->name[i]);
  prefix[3 + name_len] = '.';
  prefix[4 + name_len] = '\0';
  const size_t prefix_len = name_len + 4;

  OrtKeyValuePairs *entries = NULL;
  EBE_RETURN_IF_ERROR(
      EBE_CALL(ep->counters, ep->api, GetSessionOptionsConfigEntries, session_options, &entries));
  const char *const *keys = NULL;
  const char *const *values = NULL;
  size_t count = 0;
  EBE_CALL(ep->counters, ep->api, GetKeyValuePairs, entries, &keys, &values, &count);
  OrtStatus *status = NULL;
  for (size_t i = 0; i < count && status == NULL; i++) {
    /* Exactly ep.<name>.<key> with a key that has no dot: `ep.eng.x.partition` belongs to an
     * EP named `eng.x`, not to option `x.partition` of an EP named `eng`. */
    const char *key = keys[i] + prefix_len;
    if (strncmp(keys[i], prefix, prefix_len) == 0 && strchr(key, '.') == NULL)
      status = ebe_apply_option(ep, key, values[i]);
  }
  EBE_CALL(ep->counters, ep->api, ReleaseKeyValuePairs, entries);
  return status;
}

/* ---- capability --------------------------------------------------------------------------- */

typedef struct ebe_dim_info {
  int has_shape;
  size_t rank;
  int64_t dims[EBE_MAX_RANK]; /* -1 when symbolic or unknown */
} ebe_dim_info;

/* *ok = 1 when the value is a float32 tensor (rank <= EBE_MAX_RANK when known); fills info. */
static OrtStatus *ebe_value_check(ebe_ep *ep, const OrtValueInfo *value, int *ok,
                                  ebe_dim_info *info) {
  const OrtApi *api = ep->api;
  ebe_counters *c = ep->counters;
  *ok = 0;
  memset(info, 0, sizeof *info);
  if (value == NULL) return NULL;
  const OrtTypeInfo *type = NULL;
  enum ONNXType onnx_type = ONNX_TYPE_UNKNOWN;
  EBE_RETURN_IF_ERROR(EBE_CALL(c, api, GetValueInfoTypeInfo, value, &type));
  if (type == NULL) return NULL;
  EBE_RETURN_IF_ERROR(EBE_CALL(c, api, GetOnnxTypeFromTypeInfo, type, &onnx_type));
  if (onnx_type != ONNX_TYPE_TENSOR) return NULL;
  const OrtTensorTypeAndShapeInfo *tensor = NULL;
  ONNXTensorElementDataType element = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  EBE_RETURN_IF_ERROR(EBE_CALL(c, api, CastTypeInfoToTensorInfo, type, &tensor));
  if (tensor == NULL) return NULL;
  EBE_RETURN_IF_ERROR(EBE_CALL(c, api, GetTensorElementType, tensor, &element));
  if (element != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT) return NULL;
  info->has_shape = EBE_CALL(c, api, TensorTypeAndShape_HasShape, tensor) ? 1 : 0;
  if (info->has_shape) {
    EBE_RETURN_IF_ERROR(EBE_CALL(c, api, GetDimensionsCount, tensor, &info->rank));
    if (info->rank > EBE_MAX_RANK) return NULL;
    EBE_RETURN_IF_ERROR(EBE_CALL(c, api, GetDimensions, tensor, info->dims, info->rank));
  }
  *ok = 1;
  return NULL;
}

/* Add/Mul run any two shapes that broadcast (the plan falls back to a strided walk when
 * the fast same-shape/scalar/row kernels do not apply to the shapes a Run brings), so what
 * is claimed is only what the plan can hold: both ranks known (and <= EBE_MAX_RANK). A
 * dims conflict at run time is the plan's error, as it is ORT's. */
static int ebe_binary_claimable(const ebe_dim_info *a, const ebe_dim_info *b) {
  return a->has_shape && b->has_shape;
}

/* numpy.matmul shapes: ranks >= 1 (1-D operands too), k equal where both are known. */
static int ebe_matmul_claimable(const ebe_dim_info *a, const ebe_dim_info *b) {
  if (!a->has_shape || !b->has_shape || a->rank < 1 || b->rank < 1) return 0;
  const int64_t ka = a->dims[a->rank - 1];
  const int64_t kb = b->rank == 1 ? b->dims[0] : b->dims[b->rank - 2];
  return !(ka >= 0 && kb >= 0 && ka != kb);
}

/* *supported = 1 when the engine has a kernel for exactly this node. */
static OrtStatus *ebe_node_supported(ebe_ep *ep, const OrtNode *node, int *supported) {
  const OrtApi *api = ep->api;
  ebe_counters *c = ep->counters;
  *supported = 0;
  const char *domain = NULL, *op_type = NULL;
  size_t n_attrs = 0, n_in = 0, n_out = 0;
  EBE_RETURN_IF_ERROR(EBE_CALL(c, api, Node_GetDomain, node, &domain));
  if (domain != NULL && domain[0] != '\0' && strcmp(domain, "ai.onnx") != 0) return NULL;
  EBE_RETURN_IF_ERROR(EBE_CALL(c, api, Node_GetOperatorType, node, &op_type));
  const int op = ebe_op_from_name(op_type);
  if (op < 0) return NULL;
  EBE_RETURN_IF_ERROR(EBE_CALL(c, api, Node_GetNumAttributes, node, &n_attrs));
  if (n_attrs != 0) return NULL; /* none of our ops has attributes we implement */
  EBE_RETURN_IF_ERROR(EBE_CALL(c, api, Node_GetNumInputs, node, &n_in));
  EBE_RETURN_IF_ERROR(EBE_CALL(c, api, Node_GetNumOutputs, node, &n_out));
  if (n_in != ebe_op_arity((ebe_op)op) || n_out != 1) return NULL;
  const OrtValueInfo *io[3] = {NULL, NULL, NULL};
  EBE_RETURN_IF_ERROR(EBE_CALL(c, api, Node_GetInputs, node, io, n_in));
  EBE_RETURN_IF_ERROR(EBE_CALL(c, api, Node_GetOutputs, node, io + n_in, 1));
  ebe_dim_info info[3];
  for (size_t i = 0; i <= n_in; i++) {
    int ok = 0;
    EBE_RETURN_IF_ERROR(ebe_value_check(ep, io[i], &ok, &info[i]));
    if (!ok) return NULL;
    /* An input of unknown rank could bring more dims than a plan holds (EBE_MAX_RANK). */
    if (i < n_in && !info[i].has_shape) return NULL;
  }
  if (op == EBE_OP_ADD || op == EBE_OP_MUL) *supported = ebe_binary_claimable(&info[0], &info[1]);
  else if (op == EBE_OP_MATMUL) *supported = ebe_matmul_claimable(&info[0], &info[1]);
  else *supported = 1;
  return NULL;
}

typedef struct ebe_node_ref {
  const OrtNode *node;
  size_t index;
} ebe_node_ref;

static int ebe_node_ref_cmp(const void *x, const void *y) {
  const uintptr_t a = (uintptr_t)((const ebe_node_ref *)x)->node;
  const uintptr_t b = (uintptr_t)((const ebe_node_ref *)y)->node;
  return a < b ? -1 : a > b;
}

static size_t ebe_find_root(size_t *parent, size_t i) {
  while (parent[i] != i) {
    parent[i] = parent[parent[i]];
    i = parent[i];
  }
  return i;
}

/* Partition the supported nodes into maximal connected groups that are safe to fuse (no
 * path leaves a group through an unsupported node and comes back). A topological walk takes
 * every ready supported node before any unsupported one and closes the current group when it
 * must cross an unsupported node; each group is then split into connected components. */
static OrtStatus *ebe_fuse_groups(ebe_ep *ep, const OrtNode **nodes, size_t n,
                                  const int *supported, OrtEpGraphSupportInfo *support_info) {
  const OrtApi *api = ep->api;
  ebe_counters *c = ep->counters;
  OrtStatus *status = NULL;
  ebe_node_ref *refs = ebe_calloc(c, n, sizeof *refs);
  size_t *edge_count = ebe_calloc(c, n + 1, sizeof *edge_count); /* CSR row starts */
  size_t *indegree = ebe_calloc(c, n, sizeof *indegree);
  size_t *group = ebe_calloc(c, n, sizeof *group);
  size_t *order = ebe_calloc(c, n, sizeof *order);
  size_t *ready_sup = ebe_calloc(c, n, sizeof *ready_sup);
  size_t *ready_other = ebe_calloc(c, n, sizeof *ready_other);
  size_t *parent = ebe_calloc(c, n, sizeof *parent);
  const OrtNode **members = ebe_calloc(c, n, sizeof *members);
  size_t *edges = NULL, *producers = NULL;
  size_t n_producers = 0;
  if (!refs || !edge_count || !indegree || !group || !order || !ready_sup || !ready_other ||
      !parent || !members) {
    status = ebe_error(api, c, ORT_FAIL, "engine: out of memory in GetCapability");
    goto done;
  }
  for (size_t i = 0; i < n; i++) {
    refs[i].node = nodes[i];
    refs[i].index = i;
  }
  qsort(refs, n, sizeof *refs, ebe_node_ref_cmp);

  /* Producer list per node (pairs producer -> consumer), counted then filled. */
  for (int pass = 0; pass < 2; pass++) {
    size_t filled = 0;
    for (size_t i = 0; i < n; i++) {
      size_t n_in = 0;
      EBE_GOTO_IF_ERROR(status, EBE_CALL(c, api, Node_GetNumInputs, nodes[i], &n_in), done);
      const OrtValueInfo *inline_inputs[8];
      const OrtValueInfo **inputs = inline_inputs;
      if (n_in > 8) {
        inputs = ebe_calloc(c, n_in, sizeof *inputs);
        if (inputs == NULL) {
          status = ebe_error(api, c, ORT_FAIL, "engine: out of memory in GetCapability");
          goto done;
        }
      }
      status = EBE_CALL(c, api, Node_GetInputs, nodes[i], inputs, n_in);
      for (size_t j = 0; j < n_in && status == NULL; j++) {
        if (inputs[j] == NULL) continue;
        const OrtNode *producer = NULL;
        status = EBE_CALL(c, api, ValueInfo_GetValueProducer, inputs[j], &producer, NULL);
        if (status != NULL || producer == NULL) continue;
        ebe_node_ref key = {producer, 0};
        const ebe_node_ref *hit = bsearch(&key, refs, n, sizeof *refs, ebe_node_ref_cmp);
        if (hit == NULL) continue; /* outer scope */
        if (pass == 0) {
          n_producers++;
        } else {
          producers[2 * filled] = hit->index;
          producers[2 * filled + 1] = i;
          filled++;
        }
      }
      if (inputs != inline_inputs) ebe_free(c, inputs);
      if (status != NULL) goto done;
    }
    if (pass == 0) {
      producers = ebe_calloc(c, 2 * n_producers + 1, sizeof *producers);
      edges = ebe_calloc(c, n_producers + 1, sizeof *edges);
      if (producers == NULL || edges == NULL) {
        status = ebe_error(api, c, ORT_FAIL, "engine: out of memory in GetCapability");
        goto done;
      }
    }
  }
  /* CSR of consumers by producer. */
  for (size_t e = 0; e < n_producers; e++) {
    edge_count[producers[2 * e] + 1]++;
    indegree[producers[2 * e + 1]]++;
  }
  for (size_t i = 0; i < n; i++) edge_count[i + 1] += edge_count[i];
  {
    size_t *cursor = order; /* borrow as a fill cursor, reset below */
    memcpy(cursor, edge_count, n * sizeof *cursor);
    for (size_t e = 0; e < n_producers; e++) edges[cursor[producers[2 * e]]++] = producers[2 * e + 1];
  }

  /* Topological walk preferring supported nodes. */
  size_t n_sup = 0, n_other = 0, n_order = 0, current = 0, current_size = 0;
  for (size_t i = n; i-- > 0;) {
    if (indegree[i] != 0) continue;
    if (supported[i]) ready_sup[n_sup++] = i;
    else ready_other[n_other++] = i;
  }
  while (n_sup + n_other > 0) {
    size_t node;
    if (n_sup > 0) {
      node = ready_sup[--n_sup];
      group[node] = current;
      current_size++;
    } else {
      node = ready_other[--n_other];
      if (current_size > 0) {
        current++;
        current_size = 0;
      }
    }
    order[n_order++] = node;
    for (size_t e = edge_count[node]; e < edge_count[node + 1]; e++) {
      const size_t next = edges[e];
      if (--indegree[next] == 0) {
        if (supported[next]) ready_sup[n_sup++] = next;
        else ready_other[n_other++] = next;
      }
    }
  }
  /* Connected components inside each group. */
  for (size_t i = 0; i < n; i++) parent[i] = i;
  for (size_t e = 0; e < n_producers; e++) {
    const size_t p = producers[2 * e], q = producers[2 * e + 1];
    if (supported[p] && supported[q] && group[p] == group[q])
      parent[ebe_find_root(parent, p)] = ebe_find_root(parent, q);
  }
  OrtNodeFusionOptions fusion = {0};
  fusion.ort_version_supported = EBE_ORT_API_VERSION;
  fusion.drop_constant_initializers = false;
  for (size_t r = 0; r < n_order; r++) {
    const size_t root_node = order[r];
    if (!supported[root_node] || ebe_find_root(parent, root_node) != root_node) continue;
    size_t count = 0;
    for (size_t t = 0; t < n_order; t++) /* members in walk (topological) order */
      if (supported[order[t]] && ebe_find_root(parent, order[t]) == root_node)
        members[count++] = nodes[order[t]];
    EBE_GOTO_IF_ERROR(status,
                      EBE_CALL(c, ep->ep_api, EpGraphSupportInfo_AddNodesToFuse, support_info,
                               members, count, &fusion),
                      done);
  }

done:
  ebe_free(c, refs);
  ebe_free(c, edge_count);
  ebe_free(c, indegree);
  ebe_free(c, group);
  ebe_free(c, order);
  ebe_free(c, ready_sup);
  ebe_free(c, ready_other);
  ebe_free(c, parent);
  ebe_free(c, members);
  ebe_free(c, edges);
  ebe_free(c, producers);
  return status;
}

/* Each supported node alone, run by the kernel registered for it; a node the registry has
 * no kernel for (an opset outside the registered ranges) stays with ORT. */
static OrtStatus *ebe_claim_kernels(ebe_ep *ep, const OrtNode **nodes, size_t n,
                                    const int *supported, OrtEpGraphSupportInfo *support_info) {
  ebe_counters *c = ep->counters;
  for (size_t i = 0; i < n; i++) {
    if (!supported[i]) continue;
    const OrtKernelDef *def = NULL;
    EBE_RETURN_IF_ERROR(EBE_CALL(c, ep->ep_api, EpGraphSupportInfo_LookUpKernel, support_info,
                                 nodes[i], &def));
    if (def == NULL) continue;
    EBE_RETURN_IF_ERROR(
        EBE_CALL(c, ep->ep_api, EpGraphSupportInfo_AddSingleNode, support_info, nodes[i]));
  }
  return NULL;
}

static OrtStatus *ORT_API_CALL ebe_ep_get_capability(OrtEp *this_ptr, const OrtGraph *graph,
                                                     OrtEpGraphSupportInfo *support_info) {
  ebe_ep *ep = (ebe_ep *)this_ptr;
  const OrtApi *api = ep->api;
  ebe_counters *c = ep->counters;
  size_t n = 0;
  EBE_RETURN_IF_ERROR(EBE_CALL(c, api, Graph_GetNumNodes, graph, &n));
  if (n == 0) return NULL;
  OrtStatus *status = NULL;
  const OrtNode **nodes = ebe_calloc(c, n, sizeof *nodes);
  int *supported = ebe_calloc(c, n, sizeof *supported);
  if (nodes == NULL || supported == NULL) {
    status = ebe_error(api, c, ORT_FAIL, "engine: out of memory in GetCapability");
    goto done;
  }
  EBE_GOTO_IF_ERROR(status, EBE_CALL(c, api, Graph_GetNodes, graph, nodes, n), done);
  for (size_t i = 0; i < n; i++)
    EBE_GOTO_IF_ERROR(status, ebe_node_supported(ep, nodes[i], &supported[i]), done);
  /* A compiled partition is a node of the EP's own domain. ORT declares that domain where
   * the graph is the model's, but not in a subgraph it inlined from a function (the Loop
   * body of SequenceMap): a compiled node there fails session creation with "No opset
   * import for domain". Inside any subgraph every mode therefore claims as kernel mode
   * does: a registered kernel keeps the node's own domain. */
  const OrtNode *parent = NULL;
  EBE_GOTO_IF_ERROR(status, EBE_CALL(c, api, Graph_GetParentNode, graph, &parent), done);
  if (ep->options.partition == EBE_PARTITION_KERNEL || parent != NULL) {
    status = ebe_claim_kernels(ep, nodes, n, supported, support_info);
  } else if (ep->options.partition == EBE_PARTITION_PER_NODE) {
    OrtNodeFusionOptions fusion = {0};
    fusion.ort_version_supported = EBE_ORT_API_VERSION;
    for (size_t i = 0; i < n; i++) {
      if (!supported[i]) continue;
      EBE_GOTO_IF_ERROR(status,
                        EBE_CALL(c, ep->ep_api, EpGraphSupportInfo_AddNodesToFuse, support_info,
                                 &nodes[i], 1, &fusion),
                        done);
    }
  } else {
    status = ebe_fuse_groups(ep, nodes, n, supported, support_info);
  }
done:
  ebe_free(c, nodes);
  ebe_free(c, supported);
  return status;
}

/* ---- compile and compute ------------------------------------------------------------------ */

typedef struct ebe_compute_info {
  OrtNodeComputeInfo base; /* first: ORT's pointer is ours */
  ebe_plan *plan;
  ebe_counters *counters;
} ebe_compute_info;

/* The state is the plan itself: it is immutable and its scratch pool is thread-safe, so no
 * per-state allocation is needed. */
static OrtStatus *ORT_API_CALL ebe_create_state(OrtNodeComputeInfo *this_ptr,
                                                OrtNodeComputeContext *compute_context,
                                                void **compute_state) {
  (void)compute_context;
  *compute_state = ((ebe_compute_info *)this_ptr)->plan;
  return NULL;
}

static OrtStatus *ORT_API_CALL ebe_compute(OrtNodeComputeInfo *this_ptr, void *compute_state,
                                           OrtKernelContext *kernel_context) {
  (void)this_ptr;
  return ebe_plan_run((ebe_plan *)compute_state, kernel_context);
}

static void ORT_API_CALL ebe_release_state(OrtNodeComputeInfo *this_ptr, void *compute_state) {
  (void)this_ptr;
  (void)compute_state; /* owned by the compute info, freed in ReleaseNodeComputeInfos */
}

static void ebe_compute_info_free(ebe_compute_info *info) {
  if (info == NULL) return;
  ebe_plan_free(info->plan);
  ebe_free(info->counters, info);
}

static OrtStatus *ORT_API_CALL ebe_ep_compile(OrtEp *this_ptr, const OrtGraph **graphs,
                                              const OrtNode **fused_nodes, size_t count,
                                              OrtNodeComputeInfo **node_compute_infos,
                                              OrtNode **ep_context_nodes) {
  (void)ep_context_nodes; /* the engine writes no EPContext models */
  ebe_ep *ep = (ebe_ep *)this_ptr;
  ebe_counters *c = ep->counters;
  for (size_t i = 0; i < count; i++) node_compute_infos[i] = NULL;
  const ebe_plan_config config = {ep->api, c, ep->options.inject_delay_ns_per_node};
  for (size_t i = 0; i < count; i++) {
    ebe_compute_info *info = ebe_calloc(c, 1, sizeof *info);
    OrtStatus *status = NULL;
    if (info == NULL) status = ebe_error(ep->api, c, ORT_FAIL, "engine: out of memory in Compile");
    else status = ebe_plan_build(&config, graphs[i], fused_nodes[i], &info->plan);
    if (status != NULL) {
      ebe_free(c, info);
      for (size_t j = 0; j < i; j++) {
        ebe_compute_info_free((ebe_compute_info *)node_compute_infos[j]);
        node_compute_infos[j] = NULL;
      }
      return status;
    }
    info->counters = c;
    info->base.ort_version_supported = EBE_ORT_API_VERSION;
    info->base.CreateState = ebe_create_state;
    info->base.Compute = ebe_compute;
    info->base.ReleaseState = ebe_release_state;
    node_compute_infos[i] = &info->base;
  }
  return NULL;
}

static void ORT_API_CALL ebe_ep_release_node_compute_infos(OrtEp *this_ptr,
                                                           OrtNodeComputeInfo **infos,
                                                           size_t count) {
  (void)this_ptr;
  for (size_t i = 0; i < count; i++) ebe_compute_info_free((ebe_compute_info *)infos[i]);
}

static const char *ORT_API_CALL ebe_ep_get_name(const OrtEp *this_ptr) {
  return ((const ebe_ep *)this_ptr)->name;
}

/* The registry made with the EP, in every mode (kernel mode runs all it claims from it, the
 * others what they claim inside subgraphs); the EP keeps it. */
static OrtStatus *ORT_API_CALL ebe_ep_get_kernel_registry(OrtEp *this_ptr,
                                                          const OrtKernelRegistry **registry) {
  *registry = ((ebe_ep *)this_ptr)->registry;
  return NULL;
}

/* Once per session Run: count it and apply the per-run test knobs. */
static OrtStatus *ORT_API_CALL ebe_ep_on_run_start(OrtEp *this_ptr,
                                                   const OrtRunOptions *run_options) {
  (void)run_options;
  ebe_ep *ep = (ebe_ep *)this_ptr;
  ebe_probe_add(ep->counters, EBE_C_RUNS, 1);
  for (uint64_t i = 0; i < ep->options.inject_api_calls_per_run; i++)
    (void)EBE_CALL0(ep->counters, ep->api, GetEpApi); /* harmless, visible in the counters */
  ebe_delay_inject(ep->counters, &ep->delay_per_run);
  return NULL;
}

/* ---- lifetime ----------------------------------------------------------------------------- */

OrtStatus *ebe_ep_create(ebe_factory *factory, const OrtSessionOptions *session_options,
                         ebe_ep **out) {
  *out = NULL;
  ebe_counters *c = factory->counters;
  ebe_ep *ep = ebe_calloc(c, 1, sizeof *ep); /* zeroed: every optional OrtEp slot is NULL */
  char *name = ebe_strdup(c, factory->name);
  if (ep == NULL || name == NULL) {
    ebe_free(c, ep);
    ebe_free(c, name);
    return ebe_error(factory->api, c, ORT_FAIL, "engine: out of memory creating the EP");
  }
  ep->api = factory->api;
  ep->ep_api = factory->ep_api;
  ep->name = name;
  ep->counters = c;
  ep->base.ort_version_supported = EBE_ORT_API_VERSION;
  ep->base.GetName = ebe_ep_get_name;
  ep->base.GetCapability = ebe_ep_get_capability;
  ep->base.Compile = ebe_ep_compile;
  ep->base.ReleaseNodeComputeInfos = ebe_ep_release_node_compute_infos;
  ep->base.OnRunStart = ebe_ep_on_run_start;
  ep->base.GetKernelRegistry = ebe_ep_get_kernel_registry;
  /* Optional slots left NULL: GetPreferredDataLayout, ShouldConvertDataLayoutForOp,
   * SetDynamicOptions, OnRunEnd, CreateAllocator, CreateSyncStreamForDevice, ... (ORT's CPU
   * defaults apply). */
  OrtStatus *status = ebe_read_options(ep, session_options);
  if (status == NULL) ep->delay_per_run = ebe_delay_for_ns(ep->options.inject_delay_ns_per_run);
  if (status == NULL) status = ebe_registry_create(ep); /* every mode: see GetCapability */
  if (status != NULL) {
    ebe_ep_release(ep);
    return status;
  }
  *out = ep;
  return NULL;
}

/* Frees the EP and its name (never the factory's state). NULL is a no-op; cannot fail. */
void ebe_ep_release(ebe_ep *ep) {
  if (ep == NULL) return;
  ebe_counters *c = ep->counters;
  ebe_registry_release(ep);
  ebe_free(c, ep->name);
  ebe_free(c, ep);
}
