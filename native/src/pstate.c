/* Performance levels: the P-states a board runs in, each clock's range there, the driver's perf-mode string
 * and the per-domain utilization the driver's P-state changes follow. */
#include <stdio.h>
#include <string.h>

#include "dynamic.h"
#include "util.h"

/* The boards list one P-state, P0 (every capture's performance_state); a clock's range there is from its
 * current value up to its max. 0: the board has no such clock. */
static int p0_range(const struct mk_device *d, nvmlClockType_t type, unsigned *min, unsigned *max) {
    int i = mk_clock_index(type);
    if (!d->clk_max[i]) return 0;
    *min = d->clk_cur[i] < d->clk_max[i] ? d->clk_cur[i] : d->clk_max[i];
    *max = d->clk_max[i];
    return 1;
}

MK_API nvmlReturn_t nvmlDeviceGetSupportedPerformanceStates(nvmlDevice_t device, nvmlPstates_t *pstates, unsigned int size) {
    DEV(device);
    NONNULL(pstates);
    unsigned n = size / sizeof *pstates; /* nvml.h: size is in bytes */
    if (n < 1) return NVML_ERROR_INSUFFICIENT_SIZE;
    pstates[0] = NVML_PSTATE_0;
    for (unsigned i = 1; i < n; i++) pstates[i] = NVML_PSTATE_UNKNOWN;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetMinMaxClockOfPState(nvmlDevice_t device, nvmlClockType_t type, nvmlPstates_t pstate,
                                                    unsigned int *minClockMHz, unsigned int *maxClockMHz) {
    DEV(device);
    NONNULL(minClockMHz);
    NONNULL(maxClockMHz);
    if (mk_clock_index(type) < 0) return NVML_ERROR_INVALID_ARGUMENT;
    if (pstate != NVML_PSTATE_0 || !p0_range(D, type, minClockMHz, maxClockMHz)) NOTSUP();
    return NVML_SUCCESS;
}

/* nvml.h's token list for the one level. The transfer rate is twice the memory clock (double data rate, as in
 * nvml.h's example) and no domain is editable: these boards take no clock offsets (the offset getters answer
 * NOT_SUPPORTED). */
MK_API nvmlReturn_t nvmlDeviceGetPerformanceModes(nvmlDevice_t device, nvmlDevicePerfModes_t *perfModes) {
    DEV(device);
    VERSIONED(perfModes, nvmlDevicePerfModes_v1);
    unsigned gmin, gmax, mmin, mmax;
    if (!p0_range(D, NVML_CLOCK_GRAPHICS, &gmin, &gmax) || !p0_range(D, NVML_CLOCK_MEM, &mmin, &mmax)) NOTSUP();
    snprintf(perfModes->str, sizeof perfModes->str,
             "perf=0, nvclock=%u, nvclockmin=%u, nvclockmax=%u, nvclockeditable=0, "
             "memclock=%u, memclockmin=%u, memclockmax=%u, memclockeditable=0, "
             "memtransferrate=%u, memtransferratemin=%u, memtransferratemax=%u, memtransferrateeditable=0 ;",
             gmin, gmin, gmax, mmin, mmin, mmax, 2 * mmin, 2 * mmin, 2 * mmax);
    return NVML_SUCCESS;
}

/* The utilization the GPU getters report now, per domain: graphics (GetUtilizationRates gpu), frame buffer
 * (its memory), video (the busier of the encoder and decoder). The bus domain and the drivers' P-state
 * thresholds have no reading here and no public value: not present, and 0. */
MK_API nvmlReturn_t nvmlDeviceGetDynamicPstatesInfo(nvmlDevice_t device, nvmlGpuDynamicPstatesInfo_t *info) {
    DEV(device);
    NONNULL(info);
    unsigned gpu, mem;
    mk_utilization(S, D, &gpu, &mem);
    memset(info, 0, sizeof *info);
    const unsigned busy[] = {
        [NVML_GPU_UTILIZATION_DOMAIN_GPU] = gpu,
        [NVML_GPU_UTILIZATION_DOMAIN_FB] = mem,
        [NVML_GPU_UTILIZATION_DOMAIN_VID] = D->util_enc > D->util_dec ? D->util_enc : D->util_dec,
    };
    for (unsigned i = 0; i < sizeof busy / sizeof *busy; i++) {
        info->utilization[i].bIsPresent = 1;
        info->utilization[i].percentage = busy[i];
    }
    return NVML_SUCCESS;
}
