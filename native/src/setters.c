/* setters.c: the NVML setters, as node-wide state in the setter record (settings.c).
 * Order of checks, as the real library: handle, feature, argument, then permission (root only). */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "settings.h"
#include "setters.h"

static nvmlReturn_t set_power_limit(nvmlDevice_t device, unsigned int mw) {
    DEV(device);
    if (!D->power_supported || D->power_max == 0) NOTSUP();
    if (mw < D->power_min || mw > D->power_max) return NVML_ERROR_INVALID_ARGUMENT;
    struct mk_setting set[2];
    mk_setting_put(&set[0], "power.limit_mw", mw);
    mk_setting_put(&set[1], "power.enforced_limit_mw", mw);
    return mk_settings_set(device->index, set, 2);
}

MK_API nvmlReturn_t nvmlDeviceSetPowerManagementLimit(nvmlDevice_t device, unsigned int limit) {
    return set_power_limit(device, limit);
}

MK_API nvmlReturn_t nvmlDeviceSetPowerManagementLimit_v2(nvmlDevice_t device, nvmlPowerValue_v2_t *powerValue) {
    VERSIONED(powerValue, nvmlPowerValue_v2);
    if (powerValue->powerScope != NVML_POWER_SCOPE_GPU) NOTSUP();
    return set_power_limit(device, powerValue->powerValueMw);
}

/* a mode that is 0 or 1 */
static nvmlReturn_t set_flag(nvmlDevice_t device, const char *key, unsigned mode) {
    DEV(device);
    if (mode > 1) return NVML_ERROR_INVALID_ARGUMENT;
    struct mk_setting set[1];
    mk_setting_put(&set[0], key, mode);
    return mk_settings_set(device->index, set, 1);
}

MK_API nvmlReturn_t nvmlDeviceSetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t mode) {
    return set_flag(device, "persistence_mode", mode);
}

MK_API nvmlReturn_t nvmlDeviceSetAccountingMode(nvmlDevice_t device, nvmlEnableState_t mode) {
    return set_flag(device, "accounting_mode", mode);
}

MK_API nvmlReturn_t nvmlDeviceSetComputeMode(nvmlDevice_t device, nvmlComputeMode_t mode) {
    DEV(device);
    if ((unsigned)mode >= NVML_COMPUTEMODE_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    struct mk_setting set[1];
    mk_setting_put(&set[0], "compute_mode", mode);
    return mk_settings_set(device->index, set, 1);
}

/* ECC: the new mode is pending until the GPU is reset (mk_reset_gpu) */
MK_API nvmlReturn_t nvmlDeviceSetEccMode(nvmlDevice_t device, nvmlEnableState_t ecc) {
    DEV(device);
    if (!D->ecc_supported) NOTSUP();
    if ((unsigned)ecc > 1) return NVML_ERROR_INVALID_ARGUMENT;
    struct mk_setting set[1];
    mk_setting_put(&set[0], "ecc.pending", ecc);
    return mk_settings_set(device->index, set, 1);
}

/* GPU operation mode: pending until the GPU is reset, on the boards that have one (gom_current ≥ 0) */
MK_API nvmlReturn_t nvmlDeviceSetGpuOperationMode(nvmlDevice_t device, nvmlGpuOperationMode_t mode) {
    DEV(device);
    if (D->gom_current < 0) NOTSUP();
    if ((unsigned)mode > NVML_GOM_LOW_DP) return NVML_ERROR_INVALID_ARGUMENT;
    struct mk_setting set[1];
    mk_setting_put(&set[0], "gpu_operation_mode.pending", mode);
    return mk_settings_set(device->index, set, 1);
}

/* clock domains as `clk_*[]` indexes them */
enum { CLK_GRAPHICS, CLK_SM, CLK_MEMORY };

/* application clocks: root only, unless root lifted that restriction (SetAPIRestriction, admin.c) */
static nvmlReturn_t set_app_clocks(const struct mk_device *D, nvmlDevice_t device, const struct mk_setting *set) {
    return D->app_clocks_unrestricted ? mk_settings_write(device->index, set, 3) : mk_settings_set(device->index, set, 3);
}

MK_API nvmlReturn_t nvmlDeviceSetApplicationsClocks(nvmlDevice_t device, unsigned int memClockMHz,
                                                    unsigned int graphicsClockMHz) {
    DEV(device);
    if (D->clk_app[CLK_GRAPHICS] == 0 || D->clk_app[CLK_MEMORY] == 0) NOTSUP();
    if (memClockMHz == 0 || graphicsClockMHz == 0 || memClockMHz > D->clk_max[CLK_MEMORY] ||
        graphicsClockMHz > D->clk_max[CLK_GRAPHICS])
        return NVML_ERROR_INVALID_ARGUMENT;
    struct mk_setting set[3];
    mk_setting_put(&set[0], "clock.memory.app", memClockMHz);
    mk_setting_put(&set[1], "clock.graphics.app", graphicsClockMHz);
    mk_setting_put(&set[2], "clock.sm.app", graphicsClockMHz);
    return set_app_clocks(D, device, set);
}

MK_API nvmlReturn_t nvmlDeviceResetApplicationsClocks(nvmlDevice_t device) {
    DEV(device);
    if (D->clk_app[CLK_GRAPHICS] == 0 || D->clk_app[CLK_MEMORY] == 0) NOTSUP();
    struct mk_setting set[3];
    mk_setting_put(&set[0], "clock.memory.app", D->clk_default_app[CLK_MEMORY]);
    mk_setting_put(&set[1], "clock.graphics.app", D->clk_default_app[CLK_GRAPHICS]);
    mk_setting_put(&set[2], "clock.sm.app", D->clk_default_app[CLK_SM]);
    return set_app_clocks(D, device, set);
}

/* Locked clocks: the range is kept (clock.locked.*) and the current clock of its domain held inside it;
 * the reset removes both, so the state file's values stand again. */
static nvmlReturn_t lock_clocks(nvmlDevice_t device, int domain, unsigned lo, unsigned hi) {
    DEV(device);
    if (D->clk_max[domain] == 0) NOTSUP();
    if (lo > hi || hi > D->clk_max[domain]) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned cur = D->clk_cur[domain] < lo ? lo : D->clk_cur[domain] > hi ? hi : D->clk_cur[domain];
    struct mk_setting set[4];
    size_t n = 0;
    if (domain == CLK_MEMORY) {
        mk_setting_put(&set[n++], "clock.locked.memory_min", lo);
        mk_setting_put(&set[n++], "clock.locked.memory_max", hi);
        mk_setting_put(&set[n++], "clock.memory.current", cur);
    } else {
        mk_setting_put(&set[n++], "clock.locked.graphics_min", lo);
        mk_setting_put(&set[n++], "clock.locked.graphics_max", hi);
        mk_setting_put(&set[n++], "clock.graphics.current", cur);
        mk_setting_put(&set[n++], "clock.sm.current", cur);
    }
    return mk_settings_set(device->index, set, n);
}

static nvmlReturn_t unlock_clocks(nvmlDevice_t device, int domain) {
    DEV(device);
    if (D->clk_max[domain] == 0) NOTSUP();
    static const char *const memory[] = {"clock.locked.memory_min", "clock.locked.memory_max", "clock.memory.current"};
    static const char *const graphics[] = {"clock.locked.graphics_min", "clock.locked.graphics_max",
                                           "clock.graphics.current", "clock.sm.current"};
    const char *const *keys = domain == CLK_MEMORY ? memory : graphics;
    size_t n = domain == CLK_MEMORY ? 3 : 4;
    struct mk_setting set[4];
    for (size_t i = 0; i < n; i++) set[i] = (struct mk_setting){.key = keys[i], .value = ""};
    return mk_settings_set(device->index, set, n);
}

MK_API nvmlReturn_t nvmlDeviceSetGpuLockedClocks(nvmlDevice_t device, unsigned int minGpuClockMHz,
                                                 unsigned int maxGpuClockMHz) {
    return lock_clocks(device, CLK_GRAPHICS, minGpuClockMHz, maxGpuClockMHz);
}
MK_API nvmlReturn_t nvmlDeviceResetGpuLockedClocks(nvmlDevice_t device) { return unlock_clocks(device, CLK_GRAPHICS); }
MK_API nvmlReturn_t nvmlDeviceSetMemoryLockedClocks(nvmlDevice_t device, unsigned int minMemClockMHz,
                                                    unsigned int maxMemClockMHz) {
    return lock_clocks(device, CLK_MEMORY, minMemClockMHz, maxMemClockMHz);
}
MK_API nvmlReturn_t nvmlDeviceResetMemoryLockedClocks(nvmlDevice_t device) { return unlock_clocks(device, CLK_MEMORY); }

/* MIG mode: takes effect at once on an idle GPU; with processes on it, an Ampere board keeps it
 * pending until a reset (activationStatus IN_USE), as the MIG user guide describes. */
MK_API nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode, nvmlReturn_t *activationStatus) {
    DEV(device);
    NONNULL(activationStatus);
    if (D->mig_current < 0) NOTSUP();
    if (mode > 1) return NVML_ERROR_INVALID_ARGUMENT;
    if (mode == 0 && D->mig_gi_n > 0) return NVML_ERROR_IN_USE; /* GPU instances exist: destroy them first */
    int deferred = D->nproc > 0 && D->architecture < NVML_DEVICE_ARCH_HOPPER;
    struct mk_setting set[2];
    mk_setting_put(&set[0], "mig.pending", mode);
    mk_setting_put(&set[1], "mig.current", deferred ? (unsigned)D->mig_current : mode);
    nvmlReturn_t r = mk_settings_set(device->index, set, 2);
    if (r == NVML_SUCCESS) *activationStatus = deferred ? NVML_ERROR_IN_USE : NVML_SUCCESS;
    return r;
}

/* Hostname (nvml.h: Blackwell and newer, root): a host name's characters, RFC 1123 (letters, digits,
 * hyphens, dots), NUL-terminated within the buffer; anything else is INVALID_ARGUMENT. */
MK_API nvmlReturn_t nvmlDeviceSetHostname_v1(nvmlDevice_t device, nvmlHostname_v1_t *hostname) {
    DEV(device);
    if (D->architecture < NVML_DEVICE_ARCH_BLACKWELL) NOTSUP();
    NONNULL(hostname);
    size_t len = strnlen(hostname->value, sizeof hostname->value);
    if (len == sizeof hostname->value) return NVML_ERROR_INVALID_ARGUMENT;
    for (size_t i = 0; i < len; i++) {
        char c = hostname->value[i];
        if (!isalnum((unsigned char)c) && c != '-' && c != '.') return NVML_ERROR_INVALID_ARGUMENT;
    }
    struct mk_setting set[1] = {{.key = "hostname"}};
    memcpy(set[0].value, hostname->value, len);
    return mk_settings_set(device->index, set, 1);
}

/* GPU reset: refused while processes use the GPU; applies the pending ECC, MIG and operation modes and clears
 * the volatile ECC counts and the hostname. */
nvmlReturn_t mk_reset_gpu(nvmlDevice_t device) {
    DEV(device);
    if (D->nproc > 0) return NVML_ERROR_IN_USE;
    struct mk_setting set[4 + MK_ECC_COUNT_KEYS];
    size_t n = 0;
    mk_setting_put(&set[n++], "ecc.current", D->ecc_pending);
    if (D->mig_current >= 0) mk_setting_put(&set[n++], "mig.current", (unsigned)D->mig_pending);
    if (D->gom_current >= 0)
        mk_setting_put(&set[n++], "gpu_operation_mode.current", (unsigned)(D->gom_pending < 0 ? D->gom_current : D->gom_pending));
    for (size_t i = 0; i < MK_ECC_COUNT_KEYS; i++) mk_setting_put(&set[n++], mk_ecc_count_keys[0][i], 0);
    set[n++] = (struct mk_setting){.key = "hostname"}; /* nvml.h: not kept across GPU resets */
    return mk_settings_set(device->index, set, n);
}
