/* ebe_ep.h -- the OrtEp of the engine: capability (what it claims), compile (plans). */
#ifndef EBE_EP_H
#define EBE_EP_H

#include "ebe_delay.h"
#include "ebe_factory.h"

typedef enum ebe_partition {
  EBE_PARTITION_FUSED = 0, /* maximal connected groups, one compiled partition each */
  EBE_PARTITION_PER_NODE,  /* one compiled partition per node */
  EBE_PARTITION_KERNEL     /* no compiling: each node runs as a registered kernel */
} ebe_partition;

typedef struct ebe_ep_options {
  ebe_partition partition;
  uint64_t inject_delay_ns_per_run; /* test knobs, default 0 */
  uint64_t inject_delay_ns_per_node;
  uint64_t inject_api_calls_per_run;
} ebe_ep_options;

struct ebe_ep;

/* What a registered kernel's create function is handed: its op and its EP. */
typedef struct ebe_kernel_source {
  struct ebe_ep *ep;
  int op; /* an ebe_op */
} ebe_kernel_source;

typedef struct ebe_ep {
  OrtEp base; /* first: ORT's pointer is ours */
  const OrtApi *api;
  const OrtEpApi *ep_api;
  char *name; /* == the factory's registration name */
  ebe_counters *counters;
  ebe_ep_options options;
  ebe_delay delay_per_run;         /* options.inject_delay_ns_per_run as loop iterations */
  OrtKernelRegistry *registry;     /* every mode (subgraphs claim kernels); owned */
  ebe_kernel_source kernel_sources[8]; /* [op]: the create functions' state (>= EBE_OP_COUNT) */
} ebe_ep;

/* Create an EP for a session; options are read from the session config entries
 * `ep.<lower-cased name>.<key>`. On success *out owns the EP (free with ebe_ep_release);
 * on failure *out is NULL (an unknown option or a bad value is an error that names it). */
OrtStatus *ebe_ep_create(ebe_factory *factory, const OrtSessionOptions *session_options,
                         ebe_ep **out);

/* Free an EP. NULL is a no-op. */
void ebe_ep_release(ebe_ep *ep);

#endif
