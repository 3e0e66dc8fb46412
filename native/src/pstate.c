/* Performance levels: the P-states a board runs in, each clock's range there, the driver's perf-mode string
 * and the per-domain utilization the driver's P-state changes follow. */
#include <string.h>

#include "dynamic.h"
#include "levels.h"
#include "util.h"

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
    if (pstate != NVML_PSTATE_0 || !mk_p0_range(D, mk_clock_index(type), minClockMHz, maxClockMHz)) NOTSUP();
    return NVML_SUCCESS;
}

/* The one level (levels.c derives its string at snapshot load). No domain is editable: these boards take no
 * clock offsets (the offset getters answer NOT_SUPPORTED). */
MK_API nvmlReturn_t nvmlDeviceGetPerformanceModes(nvmlDevice_t device, nvmlDevicePerfModes_t *perfModes) {
    DEV(device);
    VERSIONED(perfModes, nvmlDevicePerfModes_v1);
    if (!D->p0_modes[0]) NOTSUP();
    memcpy(perfModes->str, D->p0_modes, sizeof D->p0_modes);
    return NVML_SUCCESS;
}

/* The level the GPU runs in now (P0), without its `perf` token: what the driver's current-clock string holds
 * (nvidia-settings' GPUCurrentClockFreqsString, the same driver string, lists nvclock..memtransferrateeditable
 * of the current level, the transfer rate twice the memory clock). */
MK_API nvmlReturn_t nvmlDeviceGetCurrentClockFreqs(nvmlDevice_t device, nvmlDeviceCurrentClockFreqs_t *currentClockFreqs) {
    DEV(device);
    VERSIONED(currentClockFreqs, nvmlDeviceCurrentClockFreqs_v1);
    if (!D->p0_modes[0]) NOTSUP();
    memcpy(currentClockFreqs->str, D->p0_modes + sizeof MK_P0_PERF - 1, sizeof D->p0_modes - (sizeof MK_P0_PERF - 1));
    return NVML_SUCCESS;
}

/* The utilization the GPU getters report now, per domain: graphics (GetUtilizationRates gpu), frame buffer
 * (its memory), video (the busier of the encoder and decoder). The bus domain and the drivers' P-state
 * thresholds have no reading here and no public value: not present, and 0. */
MK_API nvmlReturn_t nvmlDeviceGetDynamicPstatesInfo(nvmlDevice_t device, nvmlGpuDynamicPstatesInfo_t *info) {
    DEV(device);
    NONNULL(info);
    unsigned gpu, mem;
    mk_utilization(D, &gpu, &mem);
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
