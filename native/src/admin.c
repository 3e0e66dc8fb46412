/* admin.c: the administrative calls DCGM's config, policy and affinity code makes: clearing ECC counts and
 * accounting records, API restrictions, the target temperature (node state in the setter record, settings.c,
 * checked in the real library's order: handle, feature, argument, permission), and binding the calling
 * thread to the GPU's CPUs. An NVML area. */
#include <sched.h>
#include <sys/sysinfo.h>

#include "settings.h"

/* Binds the calling thread to the CPUs GetCpuAffinity names (host CPUs: the node's NUMA layout is mapped onto
 * them), as the real library does with sched_setaffinity. */
MK_API nvmlReturn_t nvmlDeviceSetCpuAffinity(nvmlDevice_t device) {
    DEV(device);
    if (!D->cpuset_set) NOTSUP();
    cpu_set_t set;
    CPU_ZERO(&set);
    for (unsigned cpu = 0; cpu < MK_CPUSET_WORDS * 64 && cpu < CPU_SETSIZE; cpu++)
        if (D->cpuset[cpu / 64] >> (cpu % 64) & 1) CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof set, &set) == 0 ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

/* Every CPU of the machine (the kernel keeps those the caller's cpuset allows). */
MK_API nvmlReturn_t nvmlDeviceClearCpuAffinity(nvmlDevice_t device) {
    DEV(device);
    int ncpu = get_nprocs_conf();
    cpu_set_t *set = CPU_ALLOC((size_t)ncpu);
    if (!set) return NVML_ERROR_MEMORY;
    size_t size = CPU_ALLOC_SIZE((size_t)ncpu);
    CPU_ZERO_S(size, set);
    for (int cpu = 0; cpu < ncpu; cpu++) CPU_SET_S((size_t)cpu, size, set);
    int r = sched_setaffinity(0, size, set);
    CPU_FREE(set);
    return r == 0 ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

/* nvidia-smi -p 0|1: every kind and location of the volatile or aggregate counters back to 0 (the totals are
 * their sums). Needs ECC on; aggregate counts live in the inforom's ECC object. */
MK_API nvmlReturn_t nvmlDeviceClearEccErrorCounts(nvmlDevice_t device, nvmlEccCounterType_t counterType) {
    DEV(device);
    if (D->ecc_supported <= 0 || !D->ecc_current) NOTSUP();
    if (counterType != NVML_VOLATILE_ECC && counterType != NVML_AGGREGATE_ECC) return NVML_ERROR_INVALID_ARGUMENT;
    if (counterType == NVML_AGGREGATE_ECC && !D->inforom_ecc[0]) NOTSUP();
    struct mk_setting set[MK_ECC_COUNT_KEYS];
    for (size_t i = 0; i < MK_ECC_COUNT_KEYS; i++) mk_setting_put(&set[i], mk_ecc_count_keys[counterType][i], 0);
    return mk_settings_set(device->index, set, MK_ECC_COUNT_KEYS);
}

/* The accounting buffer holds no terminated process here (GetAccountingPids lists none), so there is nothing
 * to drop; the checks are the real call's. */
MK_API nvmlReturn_t nvmlDeviceClearAccountingPids(nvmlDevice_t device) {
    DEV(device);
    if (!D->accounting) NOTSUP();
    return mk_settings_permitted();
}

/* Application clocks are root only until root lifts that (nvidia-smi -acp 0); auto boost is N/A on every
 * board (the captures' auto_boost), so its restriction is too. */
MK_API nvmlReturn_t nvmlDeviceGetAPIRestriction(nvmlDevice_t device, nvmlRestrictedAPI_t apiType,
                                                nvmlEnableState_t *isRestricted) {
    DEV(device);
    NONNULL(isRestricted);
    if (apiType == NVML_RESTRICTED_API_SET_AUTO_BOOSTED_CLOCKS) NOTSUP();
    if (apiType != NVML_RESTRICTED_API_SET_APPLICATION_CLOCKS) return NVML_ERROR_INVALID_ARGUMENT;
    if (D->clk_app[0] == 0 || D->clk_app[2] == 0) NOTSUP(); /* no application clocks (graphics, memory) */
    *isRestricted = D->app_clocks_unrestricted ? NVML_FEATURE_DISABLED : NVML_FEATURE_ENABLED;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceSetAPIRestriction(nvmlDevice_t device, nvmlRestrictedAPI_t apiType,
                                                nvmlEnableState_t isRestricted) {
    DEV(device);
    if (apiType == NVML_RESTRICTED_API_SET_AUTO_BOOSTED_CLOCKS) NOTSUP();
    if (apiType != NVML_RESTRICTED_API_SET_APPLICATION_CLOCKS || (unsigned)isRestricted > 1)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (D->clk_app[0] == 0 || D->clk_app[2] == 0) NOTSUP(); /* no application clocks (graphics, memory) */
    struct mk_setting set[1];
    mk_setting_put(&set[0], "app_clocks.unrestricted", isRestricted == NVML_FEATURE_DISABLED);
    return mk_settings_set(device->index, set, 1);
}

/* Only the acoustic target (nvidia-smi -gtt) is a setting, and only on a board that reports one with its range;
 * the other thresholds are the board's fixed limits. */
MK_API nvmlReturn_t nvmlDeviceSetTemperatureThreshold(nvmlDevice_t device, nvmlTemperatureThresholds_t thresholdType,
                                                      int *temp) {
    DEV(device);
    NONNULL(temp);
    if ((unsigned)thresholdType >= NVML_TEMPERATURE_THRESHOLD_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    if (thresholdType != NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_CURR || !D->temp_target || !D->temp_target_max) NOTSUP();
    if (*temp < (int)D->temp_target_min || *temp > (int)D->temp_target_max) return NVML_ERROR_INVALID_ARGUMENT;
    struct mk_setting set[1];
    mk_setting_put(&set[0], "temperature.target", (unsigned)*temp);
    return mk_settings_set(device->index, set, 1);
}
