/* A stand-in for libcupti, built at test time: the CUPTI calls zym's agent makes, with records
 * in the CUPTI 13.0 layouts (CUpti_ActivityAPI: 40 bytes, CUpti_ActivityKernel10: 216 bytes;
 * field offsets as in zym/capture/cupti/layouts.py). `fake_launch` / `fake_get_device` play the
 * application: they append records the way CUPTI would, if their kind and callback are enabled. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>
#include <sys/syscall.h>

typedef void (*req_fn)(uint8_t **, size_t *, size_t *);
typedef void (*cmp_fn)(void *, uint32_t, uint8_t *, size_t, size_t);
static req_fn g_req; static cmp_fn g_cmp;
static int g_kind_on[64], g_rt_on[1024], g_tid_system;
static uint8_t g_pending[1 << 20]; static size_t g_len; static uint32_t g_corr = 1;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static const char *KERNEL_NAME = "fake_kernel(float*, int)";
static void release_names(char **names, int n);
static char *g_names[4096]; static int g_n_names;

static uint64_t now_ns(void) {
    struct timespec ts; clock_gettime(CLOCK_REALTIME, &ts);  /* epoch-based, like CUPTI's */
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}
int cuptiGetTimestamp(uint64_t *t) { *t = now_ns(); return 0; }
int cuptiGetVersion(uint32_t *v) { *v = 130001; return 0; }
int cuptiSetThreadIdType(int t) { g_tid_system = t; return 0; }
int cuptiActivityRegisterCallbacks(req_fn r, cmp_fn c) { g_req = r; g_cmp = c; return 0; }
int cuptiActivityEnable(int k) { if (k < 0 || k >= 64) return 1; g_kind_on[k] = 1; return 0; }
int cuptiActivityDisable(int k) { if (k < 0 || k >= 64) return 1; g_kind_on[k] = 0; return 0; }
int cuptiActivityEnableRuntimeApi(uint32_t cbid, uint8_t on) { if (cbid >= 1024) return 1; g_rt_on[cbid] = on; return 0; }
int cuptiActivityEnableDriverApi(uint32_t cbid, uint8_t on) { (void)cbid; (void)on; return 0; }
/* Detach: every kind and callback off, the callbacks forgotten (a later session registers
 * them again). fake_finalized() counts the detaches, fake_kind_on(k) shows what is on. */
static int g_finalized;
int cuptiFinalize(void) {
    pthread_mutex_lock(&g_mu);
    memset(g_kind_on, 0, sizeof g_kind_on); memset(g_rt_on, 0, sizeof g_rt_on);
    g_req = NULL; g_cmp = NULL; g_len = 0; g_finalized++;
    pthread_mutex_unlock(&g_mu);
    return 0;
}
int fake_finalized(void) { return g_finalized; }
int fake_kind_on(int k) { return k >= 0 && k < 64 ? g_kind_on[k] : 0; }
/* FAKE_CUPTI_DROPS=n: every buffer reports n records dropped (CUPTI's count since the last ask) */
int cuptiActivityGetNumDroppedRecords(void *c, uint32_t s, size_t *n) {
    (void)c; (void)s; const char *d = getenv("FAKE_CUPTI_DROPS"); *n = d ? (size_t)atoi(d) : 0; return 0;
}

int cuptiGetCallbackName(int domain, uint32_t cbid, const char **name) {
    if (domain == 2) {  /* runtime */
        switch (cbid) {
        case 3: *name = "cudaGetDevice_v3020"; return 0;
        case 41: *name = "cudaMemcpyAsync_v3020"; return 0;
        case 131: *name = "cudaStreamSynchronize_v3020"; return 0;
        case 211: *name = "cudaLaunchKernel_v7000"; return 0;
        }
    } else if (domain == 1 && cbid == 307) { *name = "cuLaunchKernel"; return 0; }
    *name = NULL; return 1;
}

int cuptiActivityFlushAll(uint32_t flag) {
    (void)flag;
    pthread_mutex_lock(&g_mu);
    if (g_len && g_req && g_cmp) {
        uint8_t *buf = NULL; size_t size = 0, maxrec = 0;
        g_req(&buf, &size, &maxrec);
        if (buf && size >= g_len) {
            memcpy(buf, g_pending, g_len);
            size_t valid = g_len; g_len = 0;
            /* the names of this buffer's records, taken out of the list now: a flush on
             * another thread (the agent's flusher, its stop) must not free them too */
            int named = g_n_names;
            char *mine[4096];
            memcpy(mine, g_names, (size_t)named * sizeof mine[0]);
            g_n_names = 0;
            cmp_fn cmp = g_cmp;
            pthread_mutex_unlock(&g_mu);
            /* FAKE_CUPTI_COMPLETE_DELAY_MS: the buffer is handed back this much later (a flush
             * on one thread overlapping a stop on another) */
            const char *d = getenv("FAKE_CUPTI_COMPLETE_DELAY_MS");
            if (d) usleep((useconds_t)atoi(d) * 1000);
            cmp(NULL, 0, buf, size, valid);
            release_names(mine, named);
            return 0;
        }
    }
    pthread_mutex_unlock(&g_mu);
    return 0;
}

static void put32(uint8_t *r, int off, uint32_t v) { memcpy(r + off, &v, 4); }
static void put64(uint8_t *r, int off, uint64_t v) { memcpy(r + off, &v, 8); }

static void api_record(uint32_t cbid, uint64_t start, uint64_t end, uint32_t corr) {
    uint8_t r[40] = {0};
    put32(r, 0, 5); put32(r, 4, cbid); put64(r, 8, start); put64(r, 16, end);
    put32(r, 24, (uint32_t)getpid());
    put32(r, 28, g_tid_system ? (uint32_t)syscall(SYS_gettid) : (uint32_t)pthread_self());
    put32(r, 32, corr);
    memcpy(g_pending + g_len, r, 40); g_len += 40;
}

static void kernel_record(uint64_t start, uint64_t end, uint32_t corr) {
    uint8_t r[216] = {0};
    put32(r, 0, 10); put64(r, 16, start); put64(r, 24, end); put32(r, 44, 1); put32(r, 48, 7);
    put32(r, 52, 4); put32(r, 56, 1); put32(r, 60, 1); put32(r, 64, 256); put32(r, 68, 1);
    put32(r, 72, 1); put32(r, 92, corr); put64(r, 104, (uint64_t)(uintptr_t)KERNEL_NAME);
    memcpy(g_pending + g_len, r, 216); g_len += 216;
}

/* The application's side: n kernel launches (cudaLaunchKernel) from the calling thread. */
void fake_launch(int n) {
    for (int i = 0; i < n; i++) {
        uint64_t t0 = now_ns();
        uint64_t t1 = t0 + 1500;
        pthread_mutex_lock(&g_mu);
        if (g_len + 256 < sizeof g_pending) {
            uint32_t corr = g_corr++;
            if (g_rt_on[211]) api_record(211, t0, t1, corr);
            if (g_kind_on[10]) kernel_record(t1 + 1000, t1 + 6000, corr);
        }
        pthread_mutex_unlock(&g_mu);
    }
}

/* n calls CUPTI would only record if every runtime callback were on. */
void fake_get_device(int n) {
    for (int i = 0; i < n; i++) {
        pthread_mutex_lock(&g_mu);
        if (g_rt_on[3] && g_len + 64 < sizeof g_pending) api_record(3, now_ns(), now_ns() + 10, g_corr++);
        pthread_mutex_unlock(&g_mu);
    }
}

static void sync_record(uint64_t start, uint64_t end, uint32_t corr) {
    uint8_t r[56] = {0};
    put32(r, 0, 38); put32(r, 4, 3); put64(r, 8, start); put64(r, 16, end);
    put32(r, 24, corr); put32(r, 28, 1); put32(r, 32, 7);
    memcpy(g_pending + g_len, r, 56); g_len += 56;
}

/* A runtime call around a driver call, as cudart makes it: the application takes the start
 * time, calls the (stand-in) driver, then ends the call. gpu: 10 kernel, 38 sync, 0 none. */
uint64_t fake_api_begin(void) { return now_ns(); }
void fake_api_end(uint32_t cbid, uint64_t start, int gpu) {
    uint64_t end = now_ns();
    pthread_mutex_lock(&g_mu);
    if (g_len + 512 < sizeof g_pending) {
        uint32_t corr = g_corr++;
        if (cbid < 1024 && g_rt_on[cbid]) api_record(cbid, start, end, corr);
        if (gpu == 10 && g_kind_on[10]) kernel_record(end + 1000, end + 9000, corr);
        if (gpu == 38 && g_kind_on[38]) sync_record(start + 200, end - 100, corr);
    }
    pthread_mutex_unlock(&g_mu);
}

/* NVTX, as the injection library: an NVTX v3 client (fake_nvtx.c plays one) calls
 * InitializeInjectionNvtx2 once, when NVTX_INJECTION64_PATH names this library. Then each push,
 * pop, range start/end and mark becomes a CUpti_ActivityMarker2 record (56 bytes) if the
 * MARKER kind (12) is on. Names are strdup'ed and wiped and freed after the completion callback
 * of the buffer that holds them, so a reader that looks at them later reads garbage. */
static int g_nvtx_injected; static uint32_t g_marker_id = 1;
static __thread uint32_t t_stack[64]; static __thread int t_depth;
int InitializeInjectionNvtx2(void *get_export_table) { (void)get_export_table; g_nvtx_injected = 1; return 1; }
int fake_nvtx_injected(void) { return g_nvtx_injected; }

static void marker_record(uint32_t flags, uint32_t id, const char *name, const char *domain) {
    uint8_t r[56] = {0};
    put32(r, 0, 12); put32(r, 4, flags); put64(r, 8, now_ns()); put32(r, 16, id);
    put32(r, 20, 2); put32(r, 24, (uint32_t)getpid());
    put32(r, 28, g_tid_system ? (uint32_t)syscall(SYS_gettid) : (uint32_t)pthread_self());
    char *n = NULL, *d = NULL;
    if (name && g_n_names < 4094) { n = strdup(name); g_names[g_n_names++] = n; }
    if (domain && g_n_names < 4094) { d = strdup(domain); g_names[g_n_names++] = d; }
    put64(r, 40, (uint64_t)(uintptr_t)n); put64(r, 48, (uint64_t)(uintptr_t)d);
    memcpy(g_pending + g_len, r, 56); g_len += 56;
}
static int marker_on(void) { return g_nvtx_injected && g_kind_on[12] && g_len + 64 < sizeof g_pending; }
void fake_nvtx_push(const char *name, const char *domain) {
    pthread_mutex_lock(&g_mu);
    uint32_t id = g_marker_id++;
    if (t_depth < 64) t_stack[t_depth++] = id;
    if (marker_on()) marker_record(2, id, name, domain);
    pthread_mutex_unlock(&g_mu);
}
void fake_nvtx_pop(void) {
    pthread_mutex_lock(&g_mu);
    if (t_depth > 0) { uint32_t id = t_stack[--t_depth]; if (marker_on()) marker_record(4, id, NULL, NULL); }
    pthread_mutex_unlock(&g_mu);
}
uint32_t fake_nvtx_start(const char *name) {
    pthread_mutex_lock(&g_mu);
    uint32_t id = g_marker_id++;
    if (marker_on()) marker_record(2, id, name, NULL);
    pthread_mutex_unlock(&g_mu);
    return id;
}
void fake_nvtx_end(uint32_t id) {
    pthread_mutex_lock(&g_mu);
    if (marker_on()) marker_record(4, id, NULL, NULL);
    pthread_mutex_unlock(&g_mu);
}
void fake_nvtx_mark(const char *name) {
    pthread_mutex_lock(&g_mu);
    if (marker_on()) marker_record(1, g_marker_id++, name, NULL);
    pthread_mutex_unlock(&g_mu);
}
/* Called by cuptiActivityFlushAll after the completion callback returned: its buffer's names,
 * wiped then freed. */
static void release_names(char **names, int n) {
    for (int i = 0; i < n; i++) { memset(names[i], 'X', strlen(names[i])); free(names[i]); }
}
