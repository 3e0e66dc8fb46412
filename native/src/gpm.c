/* gpm.c: GPU performance monitoring (nvmlGpm*), on the GPUs with gpm.supported (Hopper and later).
 * Like the hardware's, the counters only grow: at each sample the process adds, per GPU, each reading
 * (utilization %, PCIe MiB/s) times the time since its previous sample of that GPU, so a reading holds
 * since the sample before. A metric is computed from two samples as the real library does, delta / time:
 * a time-weighted mean over the interval. NVLink bytes are the links' own counters. SM activity is split
 * into occupancy and pipes by a fixed instruction mix (below); every other metric id answers NOT_SUPPORTED. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dynamic.h"
#include "util.h"

#define MK_GPM_MAGIC 0x4D504B4Du
#define MIB 1048576.0

enum { C_GPU, C_MEM, C_DEC, C_JPG, C_OFA, C_PCIE_TX, C_PCIE_RX, C_COUNT };
typedef unsigned __int128 mk_u128;

struct nvmlGpmSample_st {
    uint32_t magic;
    uint32_t filled;          /* 1 once nvmlGpmSampleGet / nvmlGpmMigSampleGet wrote it */
    uint32_t device, gpu_instance;  /* gpu_instance: 0xFFFFFFFF for the whole GPU */
    uint64_t time_ns;
    mk_u128 counter[C_COUNT]; /* reading x ns, summed since the process's first sample of the GPU */
    uint32_t nvlink_count;
    uint64_t nvlink_tx[MK_MAX_LINKS], nvlink_rx[MK_MAX_LINKS];
};

/* per GPU, in this process: the counters at its last sample */
static struct {
    pthread_mutex_t mu;
    uint64_t time_ns;
    mk_u128 counter[C_COUNT];
} acc[MK_MAX_DEVICES];
static pthread_once_t acc_once = PTHREAD_ONCE_INIT;
static void acc_init(void) {
    for (size_t i = 0; i < MK_MAX_DEVICES; i++) pthread_mutex_init(&acc[i].mu, NULL);
}

static _Atomic uint32_t streaming[MK_MAX_DEVICES]; /* nvmlGpmSetStreamingEnabled, in this process */

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

MK_API nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *gpmSupport) {
    DEV(device);
    VERSIONED(gpmSupport, NVML_GPM_SUPPORT_VERSION);
    gpmSupport->isSupportedDevice = D->gpm_supported ? 1 : 0;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlGpmQueryIfStreamingEnabled(nvmlDevice_t device, unsigned int *state) {
    DEV(device);
    NONNULL(state);
    if (!D->gpm_supported) NOTSUP();
    *state = atomic_load(&streaming[device->index]);
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlGpmSetStreamingEnabled(nvmlDevice_t device, unsigned int state) {
    DEV(device);
    if (!D->gpm_supported) NOTSUP();
    if (state > 1) return NVML_ERROR_INVALID_ARGUMENT;
    atomic_store(&streaming[device->index], state);
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *gpmSample) {
    if (atomic_load(&mk_g_refcount) <= 0) return NVML_ERROR_UNINITIALIZED;
    NONNULL(gpmSample);
    struct nvmlGpmSample_st *s = calloc(1, sizeof *s);
    if (!s) return NVML_ERROR_MEMORY;
    s->magic = MK_GPM_MAGIC;
    *gpmSample = s;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t gpmSample) {
    if (atomic_load(&mk_g_refcount) <= 0) return NVML_ERROR_UNINITIALIZED;
    if (!gpmSample || gpmSample->magic != MK_GPM_MAGIC) return NVML_ERROR_INVALID_ARGUMENT;
    gpmSample->magic = 0;
    free(gpmSample);
    return NVML_SUCCESS;
}

static nvmlReturn_t take(nvmlDevice_t device, unsigned gpu_instance, nvmlGpmSample_t out) {
    DEV(device);
    if (!out || out->magic != MK_GPM_MAGIC) return NVML_ERROR_INVALID_ARGUMENT;
    if (!D->gpm_supported) NOTSUP();
    if (gpu_instance != 0xFFFFFFFFu) {
        if (D->mig_current != 1) NOTSUP();
        int found = 0;
        for (uint32_t k = 0; k + 2 < D->mig_gi_n; k += 3) found |= D->mig_gi[k] == gpu_instance;
        if (!found) return NVML_ERROR_NOT_FOUND;
    }
    struct nvmlGpmSample_st *s = out;
    s->device = device->index;
    s->gpu_instance = gpu_instance;
    unsigned gpu, mem;
    mk_utilization(D, &gpu, &mem);
    const uint64_t reading[C_COUNT] = {gpu, mem, D->util_dec, D->util_jpg, D->util_ofa, D->gpm_pcie_tx, D->gpm_pcie_rx};
    pthread_once(&acc_once, acc_init);
    pthread_mutex_lock(&acc[s->device].mu);
    s->time_ns = now_ns();
    uint64_t since = acc[s->device].time_ns ? s->time_ns - acc[s->device].time_ns : 0;
    for (int c = 0; c < C_COUNT; c++) s->counter[c] = acc[s->device].counter[c] += (mk_u128)reading[c] * since;
    acc[s->device].time_ns = s->time_ns;
    pthread_mutex_unlock(&acc[s->device].mu);
    s->nvlink_count = D->nvlink_count < MK_MAX_LINKS ? D->nvlink_count : MK_MAX_LINKS;
    for (uint32_t l = 0; l < s->nvlink_count; l++) {
        s->nvlink_tx[l] = D->link[l].tx_bytes;
        s->nvlink_rx[l] = D->link[l].rx_bytes;
    }
    s->filled = 1;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t gpmSample) {
    if (mk_is_mig_handle(device)) return NVML_ERROR_INVALID_ARGUMENT; /* a MIG instance: nvmlGpmMigSampleGet */
    return take(device, 0xFFFFFFFFu, gpmSample);
}

MK_API nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpuInstanceId, nvmlGpmSample_t gpmSample) {
    if (mk_is_mig_handle(device) || gpuInstanceId == 0xFFFFFFFFu) return NVML_ERROR_INVALID_ARGUMENT;
    return take(device, gpuInstanceId, gpmSample);
}

/* The instruction mix the SM activity is split by: of the cycles the SMs are busy, half issue to the tensor
 * cores (all HMMA), half hold warps resident, and the pipes are busy in these shares. */
#define SM_OCCUPANCY_SHARE 0.5
#define TENSOR_SHARE 0.5
#define FP32_SHARE 0.4
#define FP16_SHARE 0.2
#define INTEGER_SHARE 0.2

static const struct { unsigned id; const char *short_name, *long_name, *unit; } names[] = {
    {NVML_GPM_METRIC_GRAPHICS_UTIL, "gract", "graphics activity", "%"},
    {NVML_GPM_METRIC_SM_UTIL, "smutil", "SM activity", "%"},
    {NVML_GPM_METRIC_SM_OCCUPANCY, "smocc", "SM occupancy", "%"},
    {NVML_GPM_METRIC_INTEGER_UTIL, "intutil", "integer activity", "%"},
    {NVML_GPM_METRIC_ANY_TENSOR_UTIL, "anyten", "any tensor activity", "%"},
    {NVML_GPM_METRIC_DFMA_TENSOR_UTIL, "dfmaten", "DFMA tensor activity", "%"},
    {NVML_GPM_METRIC_HMMA_TENSOR_UTIL, "hmmaten", "HMMA tensor activity", "%"},
    {NVML_GPM_METRIC_DMMA_TENSOR_UTIL, "dmmaten", "DMMA tensor activity", "%"},
    {NVML_GPM_METRIC_IMMA_TENSOR_UTIL, "immaten", "IMMA tensor activity", "%"},
    {NVML_GPM_METRIC_DRAM_BW_UTIL, "dramu", "DRAM bandwidth utilization", "%"},
    {NVML_GPM_METRIC_FP64_UTIL, "fp64", "FP64 activity", "%"},
    {NVML_GPM_METRIC_FP32_UTIL, "fp32", "FP32 activity", "%"},
    {NVML_GPM_METRIC_FP16_UTIL, "fp16", "FP16 activity", "%"},
    {NVML_GPM_METRIC_PCIE_TX_PER_SEC, "pcitx", "PCIe transmit rate", "MiB/s"},
    {NVML_GPM_METRIC_PCIE_RX_PER_SEC, "pcirx", "PCIe receive rate", "MiB/s"},
    {NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, "nvlrx", "NVLink receive rate", "MiB/s"},
    {NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, "nvltx", "NVLink transmit rate", "MiB/s"},
};

static void name_of(nvmlGpmMetric_t *m) {
    memset(&m->metricInfo, 0, sizeof m->metricInfo);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].id == m->metricId) {
            m->metricInfo.shortName = (char *)names[i].short_name;
            m->metricInfo.longName = (char *)names[i].long_name;
            m->metricInfo.unit = (char *)names[i].unit;
        }
}

static double nvlink_rate(const struct nvmlGpmSample_st *a, const struct nvmlGpmSample_st *b, unsigned link,
                          int tx, double dt) {
    const uint64_t *x = tx ? a->nvlink_tx : a->nvlink_rx, *y = tx ? b->nvlink_tx : b->nvlink_rx;
    return y[link] >= x[link] ? (double)(y[link] - x[link]) / MIB / dt : 0.0;
}

/* the time-weighted mean of counter c between samples a (older) and b */
static double mean(const struct nvmlGpmSample_st *a, const struct nvmlGpmSample_st *b, int c) {
    return (double)(b->counter[c] - a->counter[c]) / (double)(b->time_ns - a->time_ns);
}

/* one metric from samples a (older) and b; dt in seconds */
static nvmlReturn_t metric(const struct nvmlGpmSample_st *a, const struct nvmlGpmSample_st *b, double dt,
                           unsigned id, double *v) {
    double sm = mean(a, b, C_GPU);
    switch (id) {
    case NVML_GPM_METRIC_GRAPHICS_UTIL: case NVML_GPM_METRIC_SM_UTIL: *v = sm; return NVML_SUCCESS;
    case NVML_GPM_METRIC_SM_OCCUPANCY: *v = sm * SM_OCCUPANCY_SHARE; return NVML_SUCCESS;
    case NVML_GPM_METRIC_INTEGER_UTIL: *v = sm * INTEGER_SHARE; return NVML_SUCCESS;
    case NVML_GPM_METRIC_ANY_TENSOR_UTIL: case NVML_GPM_METRIC_HMMA_TENSOR_UTIL: *v = sm * TENSOR_SHARE; return NVML_SUCCESS;
    case NVML_GPM_METRIC_DFMA_TENSOR_UTIL: case NVML_GPM_METRIC_DMMA_TENSOR_UTIL:
    case NVML_GPM_METRIC_IMMA_TENSOR_UTIL: case NVML_GPM_METRIC_FP64_UTIL: *v = 0.0; return NVML_SUCCESS;
    case NVML_GPM_METRIC_FP32_UTIL: *v = sm * FP32_SHARE; return NVML_SUCCESS;
    case NVML_GPM_METRIC_FP16_UTIL: *v = sm * FP16_SHARE; return NVML_SUCCESS;
    case NVML_GPM_METRIC_DRAM_BW_UTIL: *v = mean(a, b, C_MEM); return NVML_SUCCESS;
    case NVML_GPM_METRIC_PCIE_TX_PER_SEC: *v = mean(a, b, C_PCIE_TX); return NVML_SUCCESS;
    case NVML_GPM_METRIC_PCIE_RX_PER_SEC: *v = mean(a, b, C_PCIE_RX); return NVML_SUCCESS;
    case NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC: case NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC:
        *v = 0.0;
        for (unsigned l = 0; l < b->nvlink_count; l++)
            *v += nvlink_rate(a, b, l, id == NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, dt);
        return NVML_SUCCESS;
    default: break;
    }
    if (id >= NVML_GPM_METRIC_NVDEC_0_UTIL && id <= NVML_GPM_METRIC_NVDEC_7_UTIL) {
        *v = mean(a, b, C_DEC);
        return NVML_SUCCESS;
    }
    if (id >= NVML_GPM_METRIC_NVJPG_0_UTIL && id <= NVML_GPM_METRIC_NVJPG_7_UTIL) {
        *v = mean(a, b, C_JPG);
        return NVML_SUCCESS;
    }
    if (id == NVML_GPM_METRIC_NVOFA_0_UTIL || id == NVML_GPM_METRIC_NVOFA_1_UTIL) {
        *v = mean(a, b, C_OFA);
        return NVML_SUCCESS;
    }
    if (id >= NVML_GPM_METRIC_NVLINK_L0_RX_PER_SEC && id <= NVML_GPM_METRIC_NVLINK_L17_TX_PER_SEC) {
        unsigned link = (id - NVML_GPM_METRIC_NVLINK_L0_RX_PER_SEC) / 2;
        if (link >= b->nvlink_count) return NVML_ERROR_NOT_SUPPORTED;
        *v = nvlink_rate(a, b, link, (id - NVML_GPM_METRIC_NVLINK_L0_RX_PER_SEC) % 2, dt);
        return NVML_SUCCESS;
    }
    return NVML_ERROR_NOT_SUPPORTED;
}

MK_API nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *metricsGet) {
    if (atomic_load(&mk_g_refcount) <= 0) return NVML_ERROR_UNINITIALIZED;
    VERSIONED(metricsGet, NVML_GPM_METRICS_GET_VERSION);
    const struct nvmlGpmSample_st *a = metricsGet->sample1, *b = metricsGet->sample2;
    if (metricsGet->numMetrics == 0 || metricsGet->numMetrics > NVML_GPM_METRIC_MAX || !a || !b ||
        a->magic != MK_GPM_MAGIC || b->magic != MK_GPM_MAGIC || !a->filled || !b->filled ||
        a->device != b->device || a->gpu_instance != b->gpu_instance)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (a->time_ns > b->time_ns) {
        const struct nvmlGpmSample_st *t = a;
        a = b;
        b = t;
    }
    double dt = (double)(b->time_ns - a->time_ns) / 1e9;
    for (unsigned i = 0; i < metricsGet->numMetrics; i++) {
        nvmlGpmMetric_t *m = &metricsGet->metrics[i];
        m->value = 0.0;
        name_of(m);
        m->nvmlReturn = dt > 0 ? metric(a, b, dt, m->metricId, &m->value) : NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
}
