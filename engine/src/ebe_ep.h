/* ebe_ep.h -- the OrtEp of the engine: capability (what it claims), compile (plans). */
#ifndef EBE_EP_H
#define EBE_EP_H

#include "ebe_factory.h"

typedef struct ebe_ep_options {
  int per_node;                     /* partition=per_node: one partition per node */
  uint64_t inject_delay_ns_per_run; /* test knobs, default 0 */
  uint64_t inject_delay_ns_per_node;
  uint64_t inject_api_calls_per_run;
} ebe_ep_options;

typedef struct ebe_ep {
  OrtEp base; /* first: ORT's pointer is ours */
  const OrtApi *api;
  const OrtEpApi *ep_api;
  char *name; /* == the factory's registration name */
  ebe_counters *counters;
  ebe_ep_options options;
} ebe_ep;

/* Create an EP for a session; options are read from the session config entries
 * `ep.<lower-cased name>.<key>`. On success *out owns the EP (free with ebe_ep_release);
 * on failure *out is NULL (an unknown option or a bad value is an error that names it). */
OrtStatus *ebe_ep_create(ebe_factory *factory, const OrtSessionOptions *session_options,
                         ebe_ep **out);

/* Free an EP. NULL is a no-op. */
void ebe_ep_release(ebe_ep *ep);

#endif
