/* A C timing loop over ORT's C API, to measure what the Python loop costs per call.

   Not part of the package: docs/validation/c_vs_python_loop.py compiles it (C11, -Wall
   -Wextra -Werror, the engine's fetched ORT headers), loads it with ctypes and times the
   same cases through both loops in one process. It dlopens the wheel's own
   libonnxruntime.so (a second ORT copy beside the one in the pybind module), creates the
   session from the saved model with the SessionOptions harness/sessions.py sets, binds
   caller-owned buffers once and times RunWithBinding with clock_gettime(CLOCK_MONOTONIC),
   the clock behind Python's perf_counter_ns.

   Every function returns 0 on success, else -1 with a one-line message in err. */

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "onnxruntime_c_api.h"

#ifndef ECL_ORT_API_VERSION
#error "build with -DECL_ORT_API_VERSION=N (epbench.engine.build.ORT_API_VERSION)"
#endif

static const OrtApi *g_api;
static OrtEnv *g_env;

typedef struct ecl_loop {
    OrtSession *session;
    OrtIoBinding *binding;
    OrtMemoryInfo *cpu;
    OrtRunOptions *run_options; /* default options, as the pybind call makes per call */
    OrtValue *values[16];
    size_t n_values;
} ecl_loop;

/* Copies the status message into err and releases the status; returns -1. */
static int fail_status(OrtStatus *status, const char *what, char *err, size_t err_len)
{
    snprintf(err, err_len, "%s: %s", what, g_api->GetErrorMessage(status));
    g_api->ReleaseStatus(status);
    return -1;
}

#define CHECK(call, what)                                              \
    do {                                                               \
        OrtStatus *ecl_status_ = (call);                               \
        if (ecl_status_ != NULL) {                                     \
            rc = fail_status(ecl_status_, (what), err, err_len);       \
            goto done;                                                 \
        }                                                              \
    } while (0)

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Loads ort_lib (RTLD_LOCAL) and creates the one OrtEnv; idempotent. The library stays
   loaded for the life of the process. */
int ecl_init(const char *ort_lib, char *err, size_t err_len)
{
    int rc = 0;
    if (g_api != NULL)
        return 0;
    void *handle = dlopen(ort_lib, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        snprintf(err, err_len, "dlopen %s: %s", ort_lib, dlerror());
        return -1;
    }
    const OrtApiBase *(*get_base)(void) = NULL;
    *(void **)&get_base = dlsym(handle, "OrtGetApiBase");
    if (get_base == NULL) {
        snprintf(err, err_len, "%s has no OrtGetApiBase", ort_lib);
        return -1;
    }
    g_api = get_base()->GetApi(ECL_ORT_API_VERSION);
    if (g_api == NULL) {
        snprintf(err, err_len, "%s does not offer ORT API version %d", ort_lib,
                 ECL_ORT_API_VERSION);
        return -1;
    }
    CHECK(g_api->CreateEnv(ORT_LOGGING_LEVEL_ERROR, "ecl", &g_env), "CreateEnv");
done:
    return rc;
}

int ecl_register(const char *name, const char *ep_lib, char *err, size_t err_len)
{
    int rc = 0;
    CHECK(g_api->RegisterExecutionProviderLibrary(g_env, name, ep_lib),
          "RegisterExecutionProviderLibrary");
done:
    return rc;
}

void ecl_destroy(ecl_loop *loop)
{
    if (loop == NULL)
        return;
    if (loop->binding != NULL)
        g_api->ReleaseIoBinding(loop->binding);
    for (size_t i = 0; i < loop->n_values; i++)
        g_api->ReleaseValue(loop->values[i]);
    if (loop->session != NULL)
        g_api->ReleaseSession(loop->session);
    if (loop->cpu != NULL)
        g_api->ReleaseMemoryInfo(loop->cpu);
    if (loop->run_options != NULL)
        g_api->ReleaseRunOptions(loop->run_options);
    free(loop);
}

/* Creates a session with harness/sessions.py's options. ep_name NULL: ORT's CPU EP;
   else the devices whose EP name is ep_name, with the given options. On success *out owns
   the session (ecl_destroy frees it); on failure *out is NULL. */
int ecl_create(const void *model, size_t model_len, int opt_all, int threads,
               const char *ep_name, const char *const *keys, const char *const *vals,
               size_t n_opts, int allow_fallback, ecl_loop **out, char *err, size_t err_len)
{
    int rc = 0;
    OrtSessionOptions *so = NULL;
    ecl_loop *loop = NULL;
    *out = NULL;
    loop = calloc(1, sizeof *loop);
    if (loop == NULL) {
        snprintf(err, err_len, "out of memory");
        return -1;
    }
    CHECK(g_api->CreateSessionOptions(&so), "CreateSessionOptions");
    CHECK(g_api->SetIntraOpNumThreads(so, threads), "SetIntraOpNumThreads");
    CHECK(g_api->SetInterOpNumThreads(so, threads), "SetInterOpNumThreads");
    CHECK(g_api->SetSessionExecutionMode(so, ORT_SEQUENTIAL), "SetSessionExecutionMode");
    CHECK(g_api->SetSessionGraphOptimizationLevel(so, opt_all ? ORT_ENABLE_ALL : ORT_DISABLE_ALL),
          "SetSessionGraphOptimizationLevel");
    CHECK(g_api->AddSessionConfigEntry(so, "session.intra_op.allow_spinning", "0"), "config");
    CHECK(g_api->AddSessionConfigEntry(so, "session.inter_op.allow_spinning", "0"), "config");
    CHECK(g_api->AddSessionConfigEntry(so, "session.record_ep_graph_assignment_info", "1"),
          "config");
    CHECK(g_api->SetSessionLogSeverityLevel(so, 3), "SetSessionLogSeverityLevel");
    if (ep_name != NULL) {
        const OrtEpDevice *const *devices = NULL;
        size_t n_devices = 0;
        const OrtEpDevice *mine[8];
        size_t n_mine = 0;
        CHECK(g_api->GetEpDevices(g_env, &devices, &n_devices), "GetEpDevices");
        for (size_t i = 0; i < n_devices && n_mine < sizeof mine / sizeof mine[0]; i++)
            if (strcmp(g_api->EpDevice_EpName(devices[i]), ep_name) == 0)
                mine[n_mine++] = devices[i];
        if (n_mine == 0) {
            snprintf(err, err_len, "no device of EP %s: register its library first", ep_name);
            rc = -1;
            goto done;
        }
        if (!allow_fallback)
            CHECK(g_api->AddSessionConfigEntry(so, "session.disable_cpu_ep_fallback", "1"),
                  "config");
        CHECK(g_api->SessionOptionsAppendExecutionProvider_V2(so, g_env, mine, n_mine, keys,
                                                              vals, n_opts),
              "SessionOptionsAppendExecutionProvider_V2");
    }
    CHECK(g_api->CreateSessionFromArray(g_env, model, model_len, so, &loop->session),
          "CreateSessionFromArray");
    CHECK(g_api->CreateIoBinding(loop->session, &loop->binding), "CreateIoBinding");
    CHECK(g_api->CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, &loop->cpu),
          "CreateCpuMemoryInfo");
    CHECK(g_api->CreateRunOptions(&loop->run_options), "CreateRunOptions");
done:
    if (so != NULL)
        g_api->ReleaseSessionOptions(so);
    if (rc == 0)
        *out = loop;
    else
        ecl_destroy(loop);
    return rc;
}

/* Binds a caller-owned tensor (which must outlive the loop) as input or output `name`. */
int ecl_bind(ecl_loop *loop, int is_output, const char *name, int elem_type,
             const int64_t *shape, size_t rank, void *data, size_t bytes, char *err,
             size_t err_len)
{
    int rc = 0;
    OrtValue *value = NULL;
    if (loop->n_values >= sizeof loop->values / sizeof loop->values[0]) {
        snprintf(err, err_len, "more than %zu bound tensors",
                 sizeof loop->values / sizeof loop->values[0]);
        return -1;
    }
    CHECK(g_api->CreateTensorWithDataAsOrtValue(loop->cpu, data, bytes, shape, rank,
                                                (ONNXTensorElementDataType)elem_type, &value),
          "CreateTensorWithDataAsOrtValue");
    loop->values[loop->n_values++] = value;
    if (is_output)
        CHECK(g_api->BindOutput(loop->binding, name, value), "BindOutput");
    else
        CHECK(g_api->BindInput(loop->binding, name, value), "BindInput");
done:
    return rc;
}

/* Times n RunWithBinding calls, one sample per call, into samples[0..n). */
int ecl_time_block(ecl_loop *loop, int64_t n, int64_t *samples, char *err, size_t err_len)
{
    int rc = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t t0 = now_ns();
        OrtStatus *status = g_api->RunWithBinding(loop->session, loop->run_options, loop->binding);
        samples[i] = now_ns() - t0;
        if (status != NULL)
            CHECK(status, "RunWithBinding");
    }
done:
    return rc;
}

/* The C loop's floor: n timed empty samples (two clock reads), as ecl_time_block times. */
void ecl_clock_pairs(int64_t n, int64_t *samples)
{
    for (int64_t i = 0; i < n; i++) {
        int64_t t0 = now_ns();
        samples[i] = now_ns() - t0;
    }
}
