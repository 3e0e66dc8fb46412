/* Device getters: identity, PCI, memory, thermal, power, clocks, ECC, modes. */
#include <stdio.h>
#include <string.h>

#include "dynamic.h"
#include "util.h"

#define STR_GETTER(fn, field)                                              \
    MK_API nvmlReturn_t fn(nvmlDevice_t device, char *buf, unsigned int length) { \
        DEV(device);                                                       \
        NONNULL(buf);                                                      \
        if (!D->field[0]) NOTSUP();                                        \
        return mk_copy_str(buf, length, D->field);                         \
    }

#define U32_GETTER(fn, expr, supported)                                    \
    MK_API nvmlReturn_t fn(nvmlDevice_t device, unsigned int *out) {       \
        DEV(device);                                                       \
        NONNULL(out);                                                      \
        if (!(supported)) NOTSUP();                                        \
        *out = (expr);                                                     \
        return NVML_SUCCESS;                                               \
    }

/* ------------------------------------------------------------ identity */
MK_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *buf, unsigned int length) {
    MIG_ANSWERS(device, mk_mig_name(device, buf, length));
    DEV_ATTACHED(device);
    NONNULL(buf);
    if (!D->name[0]) NOTSUP();
    return mk_copy_strn(buf, length, D->name, D->name_len);
}

MK_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *buf, unsigned int length) {
    MIG_ANSWERS(device, mk_mig_uuid(device, buf, length));
    DEV_ATTACHED(device);
    NONNULL(buf);
    if (!D->uuid[0]) NOTSUP();
    return mk_copy_strn(buf, length, D->uuid, D->uuid_len);
}
STR_GETTER(nvmlDeviceGetSerial, serial)
STR_GETTER(nvmlDeviceGetBoardPartNumber, board_part_number)
STR_GETTER(nvmlDeviceGetVbiosVersion, vbios)
STR_GETTER(nvmlDeviceGetInforomImageVersion, inforom_image)

MK_API nvmlReturn_t nvmlDeviceGetInforomVersion(nvmlDevice_t device, nvmlInforomObject_t object, char *version,
                                               unsigned int length) {
    DEV(device);
    NONNULL(version);
    const char *v;
    switch (object) {
    case NVML_INFOROM_OEM: v = D->inforom_oem; break;
    case NVML_INFOROM_ECC: v = D->inforom_ecc; break;
    case NVML_INFOROM_POWER: v = D->inforom_power; break;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!v[0]) NOTSUP();
    return mk_copy_str(version, length, v);
}

MK_API nvmlReturn_t nvmlDeviceValidateInforom(nvmlDevice_t device) {
    DEV(device);
    return D->inforom_image[0] ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

/* The black-box (BBX) object of the infoROM: flushed during the run (every capture of a board that has
 * flushed shows a timestamp of that run and a duration, `inforom_bbx_flush`); the simulated driver was loaded,
 * and flushed, when the node came up. Both need an infoROM (nvml.h: "For all products with an inforom"). */
MK_API nvmlReturn_t nvmlDeviceGetLastBBXFlushTime(nvmlDevice_t device, unsigned long long *timestamp,
                                                 unsigned long *durationUs) {
    DEV(device);
    NONNULL(timestamp);
    NONNULL(durationUs);
    if (!D->inforom_image[0]) NOTSUP();
    if (!D->bbx_flush_us || !S->booted_ms) return NVML_ERROR_NOT_READY;
    *timestamp = S->booted_ms * 1000; /* µs since 1970: nvidia-smi prints it as the captures do */
    *durationUs = D->bbx_flush_us;
    return NVML_SUCCESS;
}

/* timeRun: seconds the GPU has had the driver loaded; a simulated GPU has only ever run in this node */
MK_API nvmlReturn_t nvmlDeviceGetBBXTimeData_v1(nvmlDevice_t device, nvmlBBXTimeData_v1_t *timeData) {
    DEV(device);
    NONNULL(timeData);
    if (!D->inforom_image[0] || !S->booted_ms) NOTSUP();
    struct timespec now;
    clock_gettime(CLOCK_REALTIME_COARSE, &now);
    uint64_t now_ms = (uint64_t)now.tv_sec * 1000 + (uint64_t)now.tv_nsec / 1000000;
    timeData->timeRun = now_ms > S->booted_ms ? (unsigned)((now_ms - S->booted_ms) / 1000) : 0;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetInforomConfigurationChecksum(nvmlDevice_t device, unsigned int *checksum) {
    DEV(device);
    NONNULL(checksum);
    if (!D->inforom_image[0]) NOTSUP();
    /* stable per board: FNV-1a of the UUID */
    uint32_t h = 2166136261u;
    for (const char *p = D->uuid; *p; p++) h = (h ^ (uint8_t)*p) * 16777619u;
    *checksum = h;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    NONNULL(index);
    MIG_ANSWERS(device, mk_mig_index(device, index));
    DEV(device);
    *index = device->index;
    return NVML_SUCCESS;
}

U32_GETTER(nvmlDeviceGetMinorNumber, D->minor_number, 1)
U32_GETTER(nvmlDeviceGetBoardId, D->board_id, 1)
U32_GETTER(nvmlDeviceGetMultiGpuBoard, D->multi_gpu_board, 1)
U32_GETTER(nvmlDeviceGetModuleId, D->module_id, D->module_id != 0)
U32_GETTER(nvmlDeviceGetNumGpuCores, D->num_cores, D->num_cores != 0)
U32_GETTER(nvmlDeviceGetMemoryBusWidth, D->mem_bus_width, D->mem_bus_width != 0)

MK_API nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type) {
    DEV(device);
    NONNULL(type);
    *type = (nvmlBrandType_t)D->brand;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch) {
    DEV(device);
    NONNULL(arch);
    *arch = (nvmlDeviceArchitecture_t)D->architecture;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
    DEV(device);
    NONNULL(major);
    NONNULL(minor);
    *major = D->cc_major;
    *minor = D->cc_minor;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode) {
    DEV(device);
    if (currentMode == NULL && pendingMode == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (D->mig_current < 0) NOTSUP();
    if (currentMode) *currentMode = (unsigned)D->mig_current;
    if (pendingMode) *pendingMode = (unsigned)(D->mig_pending < 0 ? D->mig_current : D->mig_pending);
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    DEV(device);
    NONNULL(count);
    *count = D->mig_current < 0 ? 0 : D->mig_max;
    return NVML_SUCCESS;
}


MK_API nvmlReturn_t nvmlDeviceOnSameBoard(nvmlDevice_t device1, nvmlDevice_t device2, int *onSameBoard) {
    DEV2(device1, device2);
    NONNULL(onSameBoard);
    *onSameBoard = device1 == device2 || (D->multi_gpu_board && D->board_id == D2->board_id);
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *a) {
    MIG_ANSWERS(device, mk_mig_attributes(device, a));
    DEV(device);
    NONNULL(a);
    NOTSUP(); /* only MIG device handles answer this on real boards */
}
MK_API nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t device, nvmlDeviceAttributes_t *a) {
    return nvmlDeviceGetAttributes_v2(device, a);
}

/* ----------------------------------------------------------------- PCI */

MK_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    DEV_ATTACHED(device);
    NONNULL(pci);
    mk_pci_fill(D, pci, sizeof *pci);
    return NVML_SUCCESS;
}
/* v2 layout ends before busId[32] (52 bytes incl. 4 reserved words in the old ABI) */
MK_API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    DEV_ATTACHED(device);
    NONNULL(pci);
    mk_pci_fill(D, pci, offsetof(nvmlPciInfo_t, busId) + 16);
    return NVML_SUCCESS;
}
MK_API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    DEV_ATTACHED(device);
    NONNULL(pci);
    mk_pci_fill(D, pci, offsetof(nvmlPciInfo_t, busId));
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetPciInfoExt(nvmlDevice_t device, nvmlPciInfoExt_t *pci) {
    DEV(device);
    VERSIONED(pci, nvmlPciInfoExt_v1);
    pci->domain = D->pci_domain;
    pci->bus = D->pci_bus;
    pci->device = D->pci_dev;
    pci->pciDeviceId = D->pci_device_id;
    pci->pciSubSystemId = D->pci_subsystem_id;
    pci->baseClass = D->pci_base_class;
    pci->subClass = D->pci_sub_class;
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.%X", D->pci_domain, D->pci_bus, D->pci_dev,
             D->pci_func);
    return NVML_SUCCESS;
}

U32_GETTER(nvmlDeviceGetMaxPcieLinkGeneration, D->pcie_max_gen, D->pcie_max_gen != 0)
U32_GETTER(nvmlDeviceGetGpuMaxPcieLinkGeneration, D->pcie_gpu_max_gen ? D->pcie_gpu_max_gen : D->pcie_max_gen,
           D->pcie_max_gen != 0)
U32_GETTER(nvmlDeviceGetCurrPcieLinkGeneration, D->pcie_cur_gen, D->pcie_cur_gen != 0)
U32_GETTER(nvmlDeviceGetMaxPcieLinkWidth, D->pcie_max_width, D->pcie_max_width != 0)
U32_GETTER(nvmlDeviceGetCurrPcieLinkWidth, D->pcie_cur_width, D->pcie_cur_width != 0)
U32_GETTER(nvmlDeviceGetPcieReplayCounter, D->pcie_replay, 1)

static unsigned gen_speed(unsigned gen) {
    static const unsigned s[] = {0, 2500, 5000, 8000, 16000, 32000, 64000};
    return gen < 7 ? s[gen] : 0;
}
U32_GETTER(nvmlDeviceGetPcieLinkMaxSpeed, gen_speed(D->pcie_max_gen), gen_speed(D->pcie_max_gen) != 0)
U32_GETTER(nvmlDeviceGetPcieSpeed, gen_speed(D->pcie_cur_gen), gen_speed(D->pcie_cur_gen) != 0)

MK_API nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, nvmlPcieUtilCounter_t counter, unsigned int *value) {
    DEV(device);
    NONNULL(value);
    if (counter == NVML_PCIE_UTIL_TX_BYTES) *value = D->pcie_tx_kbps;
    else if (counter == NVML_PCIE_UTIL_RX_BYTES) *value = D->pcie_rx_kbps;
    else return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetBusType(nvmlDevice_t device, nvmlBusType_t *type) {
    DEV(device);
    NONNULL(type);
    *type = NVML_BUS_TYPE_PCIE;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetBridgeChipInfo(nvmlDevice_t device, nvmlBridgeChipHierarchy_t *h) {
    DEV(device);
    NONNULL(h);
    NOTSUP(); /* no bridge chip on these boards: nvidia-smi prints N/A */
}

/* -------------------------------------------------------------- memory */

/* a MIG device: its GPU instance's memory, none of it in use */
static nvmlReturn_t mig_memory(nvmlDevice_t device, unsigned long long *total, unsigned long long *used,
                               unsigned long long *free_) {
    uint64_t t = 0;
    nvmlReturn_t r = mk_mig_memory(device, &t);
    if (r != NVML_SUCCESS) return r;
    *total = t;
    *used = 0;
    *free_ = t;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *m) {
    NONNULL(m);
    MIG_ANSWERS(device, mig_memory(device, &m->total, &m->used, &m->free));
    DEV(device);
    uint64_t used = D->mem_reserved + D->mem_used;
    m->total = D->mem_total;
    m->used = used > D->mem_total ? D->mem_total : used;
    m->free = D->mem_total - m->used;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *m) {
    VERSIONED(m, nvmlMemory_v2);
    if (mk_is_mig_handle(device)) {
        m->reserved = 0;
        return mig_memory(device, &m->total, &m->used, &m->free);
    }
    DEV(device);
    uint64_t res = D->mem_reserved > D->mem_total ? D->mem_total : D->mem_reserved;
    uint64_t used = D->mem_used > D->mem_total - res ? D->mem_total - res : D->mem_used;
    m->total = D->mem_total;
    m->reserved = res;
    m->used = used;
    m->free = D->mem_total - res - used;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t *b) {
    MIG_AS_GPU(device);
    DEV(device);
    NONNULL(b);
    b->bar1Total = D->bar1_total;
    b->bar1Used = D->bar1_used > D->bar1_total ? D->bar1_total : D->bar1_used;
    b->bar1Free = D->bar1_total - b->bar1Used;
    return NVML_SUCCESS;
}

/* confidential computing is off on every simulated board: no protected memory (every capture: "0 MiB") */
MK_API nvmlReturn_t nvmlDeviceGetConfComputeProtectedMemoryUsage(nvmlDevice_t device, nvmlMemory_t *m) {
    DEV(device);
    NONNULL(m);
    m->total = m->used = m->free = 0;
    return NVML_SUCCESS;
}

/* The kernel module answers the protected/unprotected split from its allocator whatever the CC mode
 * (open-gpu-kernel-modules conf_compute_api.c, GET_VIDMEM_SIZE): with CC off nothing is protected (as the
 * usage above) and all of the framebuffer is unprotected. nvml.h: Ampere and newer. */
MK_API nvmlReturn_t nvmlDeviceGetConfComputeMemSizeInfo(nvmlDevice_t device, nvmlConfComputeMemSizeInfo_t *memInfo) {
    DEV(device);
    NONNULL(memInfo);
    if (D->architecture < NVML_DEVICE_ARCH_AMPERE) NOTSUP();
    memInfo->protectedMemSizeKib = 0;
    memInfo->unprotectedMemSizeKib = D->mem_total >> 10;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------- thermal */

MK_API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensor, unsigned int *temp) {
    DEV(device);
    NONNULL(temp);
    if (sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    if (!D->temp_gpu && !D->dyn_temp) NOTSUP();
    *temp = mk_temperature(D);
    return NVML_SUCCESS;
}

/* the 13.x form nvml.h prefers (nvitop calls it where it is exported): the same reading, one sensor */
MK_API nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_t *temperature) {
    DEV(device);
    VERSIONED(temperature, nvmlTemperature_v1);
    if (temperature->sensorType != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    if (!D->temp_gpu && !D->dyn_temp) NOTSUP();
    temperature->temperature = (int)mk_temperature(D);
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device, nvmlTemperatureThresholds_t t, unsigned int *temp) {
    DEV(device);
    NONNULL(temp);
    unsigned v;
    switch (t) {
    case NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: v = D->temp_shutdown; break;
    case NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: v = D->temp_slowdown; break;
    case NVML_TEMPERATURE_THRESHOLD_MEM_MAX: v = D->temp_mem_max; break;
    case NVML_TEMPERATURE_THRESHOLD_GPU_MAX: v = D->temp_gpu_max; break;
    case NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_MIN: v = D->temp_target_min; break;
    case NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_CURR: v = D->temp_target; break;
    case NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_MAX: v = D->temp_target_max; break;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!v) NOTSUP();
    *temp = v;
    return NVML_SUCCESS;
}

/* nvml.h: "the thermal margin temperature (distance to nearest slowdown threshold)": nvidia-smi's
 * "GPU T.Limit Temp" (captures' gpu_temp_tlimit, N/A on the A100 and T4), on the T.Limit boards */
MK_API nvmlReturn_t nvmlDeviceGetMarginTemperature(nvmlDevice_t device, nvmlMarginTemperature_t *marginTempInfo) {
    DEV(device);
    VERSIONED(marginTempInfo, nvmlMarginTemperature_v1);
    if (!D->temp_tlimit || !D->temp_gpu) NOTSUP();
    marginTempInfo->marginTemperature = (int)D->temp_tlimit_ref - (int)mk_temperature(D);
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetThermalSettings(nvmlDevice_t device, unsigned int sensorIndex, nvmlGpuThermalSettings_t *p) {
    DEV(device);
    NONNULL(p);
    if (!D->temp_gpu) NOTSUP();
    if (sensorIndex != NVML_THERMAL_TARGET_ALL && sensorIndex != NVML_THERMAL_TARGET_GPU && sensorIndex != 0)
        NOTSUP();
    memset(p, 0, sizeof *p);
    p->count = 1;
    p->sensor[0].controller = NVML_THERMAL_CONTROLLER_GPU_INTERNAL;
    p->sensor[0].defaultMinTemp = 0;
    p->sensor[0].defaultMaxTemp = (int)D->temp_gpu_max;
    p->sensor[0].currentTemp = (int)mk_temperature(D);
    p->sensor[0].target = NVML_THERMAL_TARGET_GPU;
    return NVML_SUCCESS;
}

/* --------------------------------------------------------------- power */

#define POWER_GETTER(fn, expr)                                             \
    MK_API nvmlReturn_t fn(nvmlDevice_t device, unsigned int *out) {       \
        DEV(device);                                                       \
        NONNULL(out);                                                      \
        if (!D->power_supported) NOTSUP();                                 \
        *out = (expr);                                                     \
        return NVML_SUCCESS;                                               \
    }
POWER_GETTER(nvmlDeviceGetPowerUsage, mk_power_usage(D))
POWER_GETTER(nvmlDeviceGetPowerManagementLimit, D->power_limit)
POWER_GETTER(nvmlDeviceGetPowerManagementDefaultLimit, D->power_default)
POWER_GETTER(nvmlDeviceGetEnforcedPowerLimit, D->power_enforced)

MK_API nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device, unsigned int *minLimit, unsigned int *maxLimit) {
    DEV(device);
    NONNULL(minLimit);
    NONNULL(maxLimit);
    if (!D->power_supported) NOTSUP();
    *minLimit = D->power_min;
    *maxLimit = D->power_max;
    return NVML_SUCCESS;
}

/* server boards draw from the host's supply: AC, never the battery or undersized-supply states of mobile and
 * external GPUs (nvml.h's NVML_POWER_SOURCE_*) */
MK_API nvmlReturn_t nvmlDeviceGetPowerSource(nvmlDevice_t device, nvmlPowerSource_t *powerSource) {
    DEV(device);
    NONNULL(powerSource);
    *powerSource = NVML_POWER_SOURCE_AC;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetPowerManagementMode(nvmlDevice_t device, nvmlEnableState_t *mode) {
    DEV(device);
    NONNULL(mode);
    if (!D->power_supported) NOTSUP();
    *mode = D->power_mode ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy) {
    DEV(device);
    NONNULL(energy);
    if (!D->power_supported) NOTSUP();
    *energy = D->energy_mj;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t *p) {
    DEV(device);
    NONNULL(p);
    *p = (nvmlPstates_t)D->pstate;
    return NVML_SUCCESS;
}
/* the deprecated name of the same reading (calling it from C would warn under the 13.x header) */
MK_API nvmlReturn_t nvmlDeviceGetPowerState(nvmlDevice_t device, nvmlPstates_t *p) {
    return nvmlDeviceGetPerformanceState(device, p);
}

/* ----------------------------------------------------------------- fan */

MK_API nvmlReturn_t nvmlDeviceGetNumFans(nvmlDevice_t device, unsigned int *numFans) {
    DEV(device);
    NONNULL(numFans);
    if (!D->fan_count) NOTSUP();
    *numFans = D->fan_count;
    return NVML_SUCCESS;
}
MK_API nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int *speed) {
    DEV(device);
    NONNULL(speed);
    if (!D->fan_count) NOTSUP();
    *speed = D->fan_speed;
    return NVML_SUCCESS;
}
MK_API nvmlReturn_t nvmlDeviceGetFanSpeed_v2(nvmlDevice_t device, unsigned int fan, unsigned int *speed) {
    DEV(device);
    NONNULL(speed);
    if (!D->fan_count) NOTSUP();
    if (fan >= D->fan_count) return NVML_ERROR_INVALID_ARGUMENT;
    *speed = D->fan_speed;
    return NVML_SUCCESS;
}
MK_API nvmlReturn_t nvmlDeviceGetTargetFanSpeed(nvmlDevice_t device, unsigned int fan, unsigned int *speed) {
    DEV(device);
    NONNULL(speed);
    if (!D->fan_count) NOTSUP();
    if (fan >= D->fan_count) return NVML_ERROR_INVALID_ARGUMENT;
    *speed = D->fan_target >= 0 ? (unsigned)D->fan_target : D->fan_speed;
    return NVML_SUCCESS;
}

/* -------------------------------------------------------------- clocks */

#define CLK_GETTER(fn, arr)                                                \
    MK_API nvmlReturn_t fn(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock) { \
        DEV(device);                                                       \
        NONNULL(clock);                                                    \
        int i = mk_clock_index(type);                                      \
        if (i < 0) return NVML_ERROR_INVALID_ARGUMENT;                     \
        if (!D->arr[i]) NOTSUP();                                          \
        *clock = D->arr[i];                                                \
        return NVML_SUCCESS;                                               \
    }
CLK_GETTER(nvmlDeviceGetClockInfo, clk_cur)
CLK_GETTER(nvmlDeviceGetMaxClockInfo, clk_max)
CLK_GETTER(nvmlDeviceGetApplicationsClock, clk_app)
CLK_GETTER(nvmlDeviceGetDefaultApplicationsClock, clk_default_app)
CLK_GETTER(nvmlDeviceGetMaxCustomerBoostClock, clk_boost)

MK_API nvmlReturn_t nvmlDeviceGetClock(nvmlDevice_t device, nvmlClockType_t type, nvmlClockId_t id, unsigned int *clock) {
    DEV(device);
    NONNULL(clock);
    int i = mk_clock_index(type);
    if (i < 0) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned v;
    switch (id) {
    case NVML_CLOCK_ID_CURRENT: v = D->clk_cur[i]; break;
    case NVML_CLOCK_ID_APP_CLOCK_TARGET: v = D->clk_app[i]; break;
    case NVML_CLOCK_ID_APP_CLOCK_DEFAULT: v = D->clk_default_app[i]; break;
    case NVML_CLOCK_ID_CUSTOMER_BOOST_MAX: v = D->clk_boost[i]; break;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!v) NOTSUP();
    *clock = v;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetSupportedMemoryClocks(nvmlDevice_t device, unsigned int *count, unsigned int *clocksMHz) {
    DEV(device);
    NONNULL(count);
    unsigned n = 0;
    while (n < 4 && D->sclk_memory[n]) n++;
    if (!n) NOTSUP();
    if (clocksMHz == NULL || *count < n) { *count = n; return NVML_ERROR_INSUFFICIENT_SIZE; }
    for (unsigned i = 0; i < n; i++) clocksMHz[i] = D->sclk_memory[i];
    *count = n;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetSupportedGraphicsClocks(nvmlDevice_t device, unsigned int memoryClockMHz, unsigned int *count,
                                                        unsigned int *clocksMHz) {
    DEV(device);
    NONNULL(count);
    unsigned m = 0;
    while (m < 4 && D->sclk_memory[m] && D->sclk_memory[m] != memoryClockMHz) m++;
    if (m == 0 && !D->sclk_memory[0]) NOTSUP();
    if (m == 4 || !D->sclk_memory[m]) return NVML_ERROR_NOT_FOUND;
    unsigned n = D->sclk_rungs[m];
    if (clocksMHz == NULL || *count < n) { *count = n; return NVML_ERROR_INSUFFICIENT_SIZE; }
    /* the ladder from its highest rung down, each rung rounded down to the MHz (7.5 MHz steps: 2062, 2055, 2047) */
    for (unsigned i = 0; i < n; i++)
        clocksMHz[i] = (unsigned)(((uint64_t)D->sclk_lowest_khz[m] + (uint64_t)D->sclk_step_khz[m] * (n - 1 - i)) / 1000);
    *count = n;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetAutoBoostedClocksEnabled(nvmlDevice_t device, nvmlEnableState_t *isEnabled,
                                                         nvmlEnableState_t *defaultIsEnabled) {
    DEV(device);
    if (isEnabled == NULL && defaultIsEnabled == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (D->auto_boost < 0) NOTSUP();
    if (isEnabled) *isEnabled = D->auto_boost ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    if (defaultIsEnabled) *defaultIsEnabled = D->auto_boost ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *r) {
    DEV(device);
    NONNULL(r);
    *r = D->throttle_reasons;
    return NVML_SUCCESS;
}
MK_API nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *r) {
    return nvmlDeviceGetCurrentClocksEventReasons(device, r);
}
MK_API nvmlReturn_t nvmlDeviceGetSupportedClocksEventReasons(nvmlDevice_t device, unsigned long long *r) {
    DEV(device);
    NONNULL(r);
    *r = D->supported_throttle_reasons;
    return NVML_SUCCESS;
}
MK_API nvmlReturn_t nvmlDeviceGetSupportedClocksThrottleReasons(nvmlDevice_t device, unsigned long long *r) {
    return nvmlDeviceGetSupportedClocksEventReasons(device, r);
}

MK_API nvmlReturn_t nvmlDeviceGetViolationStatus(nvmlDevice_t device, nvmlPerfPolicyType_t t, nvmlViolationTime_t *v) {
    DEV(device);
    NONNULL(v);
    unsigned long long ns;
    switch (t) {
    case NVML_PERF_POLICY_POWER: ns = D->viol_power_ns; break;
    case NVML_PERF_POLICY_THERMAL: ns = D->viol_thermal_ns; break;
    case NVML_PERF_POLICY_SYNC_BOOST: ns = D->viol_sync_boost_ns; break;
    case NVML_PERF_POLICY_BOARD_LIMIT:
    case NVML_PERF_POLICY_LOW_UTILIZATION:
    case NVML_PERF_POLICY_RELIABILITY:
    case NVML_PERF_POLICY_TOTAL_BASE_CLOCKS: ns = 0; break;
    case NVML_PERF_POLICY_TOTAL_APP_CLOCKS: NOTSUP();
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
    v->referenceTime = mk_now_us();
    v->violationTime = ns;
    return NVML_SUCCESS;
}

/* ---------------------------------------------------------- utilization */

MK_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *u) {
    DEV(device);
    NONNULL(u);
    mk_utilization(D, &u->gpu, &u->memory);
    return NVML_SUCCESS;
}

#define UTIL_GETTER(fn, field, period)                                     \
    MK_API nvmlReturn_t fn(nvmlDevice_t device, unsigned int *utilization, unsigned int *samplingPeriodUs) { \
        DEV(device);                                                       \
        NONNULL(utilization);                                              \
        NONNULL(samplingPeriodUs);                                         \
        *utilization = D->field;                                           \
        *samplingPeriodUs = (period);                                      \
        return NVML_SUCCESS;                                               \
    }
UTIL_GETTER(nvmlDeviceGetEncoderUtilization, util_enc, 167000)
UTIL_GETTER(nvmlDeviceGetDecoderUtilization, util_dec, 167000)
UTIL_GETTER(nvmlDeviceGetJpgUtilization, util_jpg, 167000)
UTIL_GETTER(nvmlDeviceGetOfaUtilization, util_ofa, 167000)

/* One sample, now, of what the matching getter reports (the real driver keeps a ring of them) */
MK_API nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t device, nvmlSamplingType_t type, unsigned long long lastSeen,
                                         nvmlValueType_t *valType, unsigned int *count, nvmlSample_t *samples) {
    DEV(device);
    NONNULL(valType);
    NONNULL(count);
    if (samples != NULL && *count == 0) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned gpu, mem, value;
    switch (type) {
    case NVML_TOTAL_POWER_SAMPLES:
        if (!D->power_supported) NOTSUP();
        value = mk_power_usage(D);
        break;
    case NVML_GPU_UTILIZATION_SAMPLES:
    case NVML_MEMORY_UTILIZATION_SAMPLES:
        mk_utilization(D, &gpu, &mem);
        value = type == NVML_GPU_UTILIZATION_SAMPLES ? gpu : mem;
        break;
    case NVML_ENC_UTILIZATION_SAMPLES: value = D->util_enc; break;
    case NVML_DEC_UTILIZATION_SAMPLES: value = D->util_dec; break;
    case NVML_JPG_UTILIZATION_SAMPLES: value = D->util_jpg; break;
    case NVML_OFA_UTILIZATION_SAMPLES: value = D->util_ofa; break;
    case NVML_PROCESSOR_CLK_SAMPLES: value = D->clk_cur[0]; break;
    case NVML_MEMORY_CLK_SAMPLES: value = D->clk_cur[2]; break;
    case NVML_MODULE_POWER_SAMPLES: NOTSUP(); /* no module power reading is modelled */
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
    *valType = NVML_VALUE_TYPE_UNSIGNED_INT;
    uint64_t now = mk_now_us();
    if (samples == NULL) {
        *count = 1;
        return NVML_SUCCESS;
    }
    if (lastSeen >= now) return NVML_ERROR_NOT_FOUND;
    samples[0].timeStamp = now;
    samples[0].sampleValue.ullVal = 0;
    samples[0].sampleValue.uiVal = value;
    *count = 1;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetEncoderCapacity(nvmlDevice_t device, nvmlEncoderType_t t, unsigned int *cap) {
    DEV(device);
    NONNULL(cap);
    if (t != NVML_ENCODER_QUERY_H264 && t != NVML_ENCODER_QUERY_HEVC && t != NVML_ENCODER_QUERY_AV1)
        return NVML_ERROR_INVALID_ARGUMENT;
    *cap = 100 - (D->util_enc > 100 ? 100 : D->util_enc);
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetEncoderStats(nvmlDevice_t device, unsigned int *sessionCount, unsigned int *averageFps,
                                             unsigned int *averageLatency) {
    DEV(device);
    NONNULL(sessionCount);
    NONNULL(averageFps);
    NONNULL(averageLatency);
    *sessionCount = D->enc_sessions;
    *averageFps = D->enc_fps;
    *averageLatency = D->enc_latency;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetEncoderSessions(nvmlDevice_t device, unsigned int *sessionCount, nvmlEncoderSessionInfo_t *s) {
    DEV(device);
    NONNULL(sessionCount);
    *sessionCount = 0;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetFBCStats(nvmlDevice_t device, nvmlFBCStats_t *f) {
    DEV(device);
    NONNULL(f);
    f->sessionsCount = D->fbc_sessions;
    f->averageFPS = D->fbc_fps;
    f->averageLatency = D->fbc_latency;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetFBCSessions(nvmlDevice_t device, unsigned int *sessionCount, nvmlFBCSessionInfo_t *s) {
    DEV(device);
    NONNULL(sessionCount);
    *sessionCount = 0;
    return NVML_SUCCESS;
}

/* ----------------------------------------------------------------- ECC */

MK_API nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *current, nvmlEnableState_t *pending) {
    DEV(device);
    if (current == NULL && pending == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (D->ecc_supported <= 0) NOTSUP();
    if (current) *current = D->ecc_current ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    if (pending) *pending = D->ecc_pending ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetDefaultEccMode(nvmlDevice_t device, nvmlEnableState_t *m) {
    DEV(device);
    NONNULL(m);
    if (D->ecc_supported <= 0) NOTSUP();
    *m = D->ecc_default ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

static nvmlReturn_t ecc_args(const struct mk_device *d, nvmlMemoryErrorType_t e, nvmlEccCounterType_t c) {
    if ((unsigned)e > NVML_MEMORY_ERROR_TYPE_UNCORRECTED || (unsigned)c > NVML_AGGREGATE_ECC)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (d->ecc_supported <= 0 || !d->ecc_current) return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t e, nvmlEccCounterType_t c,
                                               unsigned long long *count) {
    DEV(device);
    NONNULL(count);
    nvmlReturn_t r = ecc_args(D, e, c);
    if (r) return r;
    unsigned long long t = 0;
    for (int l = 0; l < 7; l++) t += D->ecc[c][e][l];
    *count = t;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetDetailedEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t e, nvmlEccCounterType_t c,
                                                  nvmlEccErrorCounts_t *counts) {
    DEV(device);
    NONNULL(counts);
    nvmlReturn_t r = ecc_args(D, e, c);
    if (r) return r;
    counts->l1Cache = D->ecc[c][e][0];
    counts->l2Cache = D->ecc[c][e][1];
    counts->deviceMemory = D->ecc[c][e][2];
    counts->registerFile = D->ecc[c][e][3];
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetMemoryErrorCounter(nvmlDevice_t device, nvmlMemoryErrorType_t e, nvmlEccCounterType_t c,
                                                   nvmlMemoryLocation_t loc, unsigned long long *count) {
    MIG_AS_GPU(device);
    DEV(device);
    NONNULL(count);
    nvmlReturn_t r = ecc_args(D, e, c);
    if (r) return r;
    int l;
    switch (loc) {
    case NVML_MEMORY_LOCATION_L1_CACHE: l = 0; break;
    case NVML_MEMORY_LOCATION_L2_CACHE: l = 1; break;
    case NVML_MEMORY_LOCATION_DRAM: l = 2; break;  /* == DEVICE_MEMORY */
    case NVML_MEMORY_LOCATION_REGISTER_FILE: l = 3; break;
    case NVML_MEMORY_LOCATION_TEXTURE_MEMORY: l = 4; break;
    case NVML_MEMORY_LOCATION_TEXTURE_SHM: l = 4; break;
    case NVML_MEMORY_LOCATION_CBU: l = 5; break;
    case NVML_MEMORY_LOCATION_SRAM: l = 6; break;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
    *count = D->ecc[c][e][l];
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetSramEccErrorStatus(nvmlDevice_t device, nvmlEccSramErrorStatus_t *s) {
    DEV(device);
    VERSIONED(s, nvmlEccSramErrorStatus_v1);
    if (D->ecc_supported <= 0 || !D->ecc_current || D->architecture < NVML_DEVICE_ARCH_AMPERE) NOTSUP();
    const uint64_t(*v)[7] = D->ecc[0], (*a)[7] = D->ecc[1];
    s->volatileCor = v[0][6];
    s->volatileUncSecDed = v[1][6];
    s->volatileUncParity = 0;
    s->aggregateCor = a[0][6];
    s->aggregateUncSecDed = a[1][6];
    s->aggregateUncParity = 0;
    s->aggregateUncBucketL2 = a[1][1];
    s->aggregateUncBucketSm = a[1][0] + a[1][3] + a[1][4];
    s->aggregateUncBucketPcie = 0;
    s->aggregateUncBucketMcu = 0;
    s->aggregateUncBucketOther = a[1][5];
    s->bThresholdExceeded = D->sram_threshold;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, nvmlPageRetirementCause_t cause, unsigned int *pageCount,
                                             unsigned long long *addresses) {
    DEV(device);
    NONNULL(pageCount);
    if (!D->retired_supported) NOTSUP();
    unsigned n;
    if (cause == NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS) n = D->retired_sbe;
    else if (cause == NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR) n = D->retired_dbe;
    else return NVML_ERROR_INVALID_ARGUMENT;
    if (*pageCount == 0 || addresses == NULL) {
        unsigned need = n;
        *pageCount = need;
        return need && addresses ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    }
    if (*pageCount < n) { *pageCount = n; return NVML_ERROR_INSUFFICIENT_SIZE; }
    for (unsigned i = 0; i < n; i++) addresses[i] = 0x100000ull * (i + 1) + (cause ? 0x800 : 0);
    *pageCount = n;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetRetiredPages_v2(nvmlDevice_t device, nvmlPageRetirementCause_t cause, unsigned int *pageCount,
                                                unsigned long long *addresses, unsigned long long *timestamps) {
    unsigned cap = pageCount ? *pageCount : 0;
    nvmlReturn_t r = nvmlDeviceGetRetiredPages(device, cause, pageCount, addresses);
    if (r == NVML_SUCCESS && timestamps && addresses && cap)
        for (unsigned i = 0; i < *pageCount; i++) timestamps[i] = 1700000000000000ull + i;
    return r;
}

MK_API nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, nvmlEnableState_t *isPending) {
    DEV(device);
    NONNULL(isPending);
    if (!D->retired_supported) NOTSUP();
    *isPending = D->retired_pending ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows,
                                             unsigned int *isPending, unsigned int *failureOccurred) {
    DEV(device);
    NONNULL(corrRows);
    NONNULL(uncRows);
    NONNULL(isPending);
    NONNULL(failureOccurred);
    if (!D->remap_supported) NOTSUP();
    *corrRows = D->remap_cor;
    *uncRows = D->remap_unc;
    *isPending = D->remap_pending;
    *failureOccurred = D->remap_failure;
    return NVML_SUCCESS;
}
MK_API nvmlReturn_t nvmlDeviceGetRemappedRows_v2(nvmlDevice_t device, nvmlRemappedRowsInfo_v2_t *info) {
    DEV(device);
    NONNULL(info);
    if (!D->remap_supported) NOTSUP();
    memset(info, 0, sizeof *info); /* every remapping is active: none is waiting for a reset */
    info->corrActiveRemaps = D->remap_cor;
    info->uncActiveRemaps = D->remap_unc;
    info->bPending = D->remap_pending;
    info->bFailureOccurred = D->remap_failure;
    return NVML_SUCCESS;
}

/* Ampere and newer (nvml.h); no repair is ever pending ("TPC/Channel Repair Pending: No" in every capture) */
MK_API nvmlReturn_t nvmlDeviceGetRepairStatus(nvmlDevice_t device, nvmlRepairStatus_t *status) {
    DEV(device);
    VERSIONED(status, nvmlRepairStatus_v1);
    if (D->architecture < NVML_DEVICE_ARCH_AMPERE) NOTSUP();
    status->bChannelRepairPending = 0;
    status->bTpcRepairPending = 0;
    return NVML_SUCCESS;
}

/* Hopper and newer (nvml.h; the L40S capture prints N/A); "Unrepairable Memory: No" */
MK_API nvmlReturn_t nvmlDeviceGetUnrepairableMemoryFlag_v1(nvmlDevice_t device,
                                                           nvmlUnrepairableMemoryStatus_v1_t *status) {
    DEV(device);
    NONNULL(status);
    if (D->architecture < NVML_DEVICE_ARCH_HOPPER) NOTSUP();
    status->bUnrepairableMemory = 0;
    return NVML_SUCCESS;
}
/* the name DCGM's sources call (its loader resolves it as written; nvml.h declares only _v1) */
MK_API nvmlReturn_t nvmlDeviceGetUnrepairableMemoryFlag(nvmlDevice_t device, nvmlUnrepairableMemoryStatus_v1_t *status)
    __attribute__((alias("nvmlDeviceGetUnrepairableMemoryFlag_v1")));

/* Ampere and newer (nvml.h): the clock monitors, no fault */
MK_API nvmlReturn_t nvmlDeviceGetClkMonStatus(nvmlDevice_t device, nvmlClkMonStatus_t *status) {
    DEV(device);
    NONNULL(status);
    if (D->architecture < NVML_DEVICE_ARCH_AMPERE) NOTSUP();
    memset(status, 0, sizeof *status);
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetRowRemapperHistogram(nvmlDevice_t device, nvmlRowRemapperHistogramValues_t *v) {
    DEV(device);
    NONNULL(v);
    if (!D->remap_supported) NOTSUP();
    v->max = D->remap_hist[0];
    v->high = D->remap_hist[1];
    v->partial = D->remap_hist[2];
    v->low = D->remap_hist[3];
    v->none = D->remap_hist[4];
    return NVML_SUCCESS;
}

/* --------------------------------------------------------------- modes */

#define ENABLE_GETTER(fn, expr, supported)                                 \
    MK_API nvmlReturn_t fn(nvmlDevice_t device, nvmlEnableState_t *out) {  \
        DEV(device);                                                       \
        NONNULL(out);                                                      \
        if (!(supported)) NOTSUP();                                        \
        *out = (expr) ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;      \
        return NVML_SUCCESS;                                               \
    }
ENABLE_GETTER(nvmlDeviceGetPersistenceMode, D->persistence, 1)
ENABLE_GETTER(nvmlDeviceGetDisplayMode, D->display_mode, 1)
ENABLE_GETTER(nvmlDeviceGetDisplayActive, D->display_active, 1)
ENABLE_GETTER(nvmlDeviceGetAccountingMode, D->accounting, 1)

U32_GETTER(nvmlDeviceGetAccountingBufferSize, D->accounting_buffer, 1)

MK_API nvmlReturn_t nvmlDeviceGetAccountingPids(nvmlDevice_t device, unsigned int *count, unsigned int *pids) {
    DEV(device);
    NONNULL(count);
    if (!D->accounting) NOTSUP();
    *count = 0;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetAccountingStats(nvmlDevice_t device, unsigned int pid, nvmlAccountingStats_t *stats) {
    DEV(device);
    NONNULL(stats);
    if (!D->accounting) NOTSUP();
    return NVML_ERROR_NOT_FOUND;
}

MK_API nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode) {
    DEV(device);
    NONNULL(mode);
    *mode = (nvmlComputeMode_t)D->compute_mode;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t device, nvmlGpuVirtualizationMode_t *m) {
    DEV(device);
    NONNULL(m);
    *m = (nvmlGpuVirtualizationMode_t)D->virt_mode;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetHostVgpuMode(nvmlDevice_t device, nvmlHostVgpuMode_t *m) {
    DEV(device);
    NONNULL(m);
    if (D->host_vgpu_mode < 0) NOTSUP();
    *m = (nvmlHostVgpuMode_t)D->host_vgpu_mode;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetDriverModel(nvmlDevice_t device, nvmlDriverModel_t *current, nvmlDriverModel_t *pending) {
    DEV(device);
    if (current == NULL && pending == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (D->driver_model < 0) NOTSUP(); /* Windows only */
    if (current) *current = (nvmlDriverModel_t)D->driver_model;
    if (pending) *pending = (nvmlDriverModel_t)D->driver_model;
    return NVML_SUCCESS;
}
/* the 555+ name: the same answer (Linux: NOT_SUPPORTED, nvidia-smi prints N/A) */
MK_API nvmlReturn_t nvmlDeviceGetDriverModel_v2(nvmlDevice_t device, nvmlDriverModel_t *current,
                                                nvmlDriverModel_t *pending) {
    return nvmlDeviceGetDriverModel(device, current, pending);
}

MK_API nvmlReturn_t nvmlDeviceGetGpuOperationMode(nvmlDevice_t device, nvmlGpuOperationMode_t *current,
                                                 nvmlGpuOperationMode_t *pending) {
    DEV(device);
    if (current == NULL && pending == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (D->gom_current < 0) NOTSUP();
    if (current) *current = (nvmlGpuOperationMode_t)D->gom_current;
    if (pending) *pending = (nvmlGpuOperationMode_t)(D->gom_pending < 0 ? D->gom_current : D->gom_pending);
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetGspFirmwareMode(nvmlDevice_t device, unsigned int *isEnabled, unsigned int *defaultMode) {
    DEV(device);
    if (isEnabled == NULL && defaultMode == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (isEnabled) *isEnabled = D->gsp_mode;
    if (defaultMode) *defaultMode = D->gsp_default_mode;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetGspFirmwareVersion(nvmlDevice_t device, char *version) {
    DEV(device);
    NONNULL(version);
    if (!D->gsp_mode || !D->gsp_version[0]) NOTSUP();
    /* buffer is NVML_GSP_FIRMWARE_VERSION_BUF_SIZE (0x40) by contract */
    snprintf(version, NVML_GSP_FIRMWARE_VERSION_BUF_SIZE, "%s", D->gsp_version);
    return NVML_SUCCESS;
}
