/* Getters of features the simulated boards do not have, or whose values no public source gives: each answers
 * what the real board answers (NOT_SUPPORTED, which nvidia-smi prints as N/A) after the argument checks the real
 * library makes first (the handle; NULL: INVALID_ARGUMENT; a struct's version: ARGUMENT_VERSION_MISMATCH), and
 * says why. Evidence: the captures (shared/reference/captures/qx-*.xml) and nvml.h 13.x. */
#include "util.h"

/* ----------------------------------------------------------------- fans */
/* Boards without fans (`fan.count` 0: every capture shows fan_speed N/A) answer NOT_SUPPORTED, as GetNumFans
 * does (nvml.h: "For all discrete products with dedicated fans"). A board with fans has them described by
 * count and speed only: no profile gives a fan's RPM, its settable range or its cooler's signal and target. */
static nvmlReturn_t fan(const struct mk_device *D, unsigned index) {
    if (!D->fan_count) NOTSUP();
    if (index >= D->fan_count) return NVML_ERROR_INVALID_ARGUMENT;
    NOTSUP();
}
MK_API nvmlReturn_t nvmlDeviceGetFanSpeedRPM(nvmlDevice_t device, nvmlFanSpeedInfo_t *fanSpeed) {
    DEV(device);
    VERSIONED(fanSpeed, nvmlFanSpeedInfo_v1);
    return fan(D, fanSpeed->fan);
}
MK_API nvmlReturn_t nvmlDeviceGetCoolerInfo(nvmlDevice_t device, nvmlCoolerInfo_t *coolerInfo) {
    DEV(device);
    VERSIONED(coolerInfo, nvmlCoolerInfo_v1);
    return fan(D, coolerInfo->index);
}
MK_API nvmlReturn_t nvmlDeviceGetMinMaxFanSpeed(nvmlDevice_t device, unsigned int *minSpeed, unsigned int *maxSpeed) {
    DEV(device);
    NONNULL(minSpeed);
    NONNULL(maxSpeed);
    return fan(D, 0);
}

/* nvml.h: Blackwell and newer, with the InfoROM's DEN object; every capture (the B200, GB200 and GB300 among
 * them) shows current_dram_encryption and pending_dram_encryption N/A */
MK_API nvmlReturn_t nvmlDeviceGetDramEncryptionMode(nvmlDevice_t device, nvmlDramEncryptionInfo_t *current,
                                                    nvmlDramEncryptionInfo_t *pending) {
    DEV(device);
    VERSIONED(current, nvmlDramEncryptionInfo_v1);
    VERSIONED(pending, nvmlDramEncryptionInfo_v1);
    NOTSUP();
}

/* ---------------------------------------------------------- clock offsets */
/* The VF curve offsets: no capture has a clock-offset element, GetPerformanceModes marks no domain editable, and
 * the public reports of working offsets are GeForce boards' (a Tesla P100 and T10 fail the same calls that
 * work on an RTX 4090: Dreaming-Codes/nvidia_oc issue 20), so no datacenter board's offset range is public. */
MK_API nvmlReturn_t nvmlDeviceGetGpcClkVfOffset(nvmlDevice_t device, int *offset) {
    DEV(device);
    NONNULL(offset);
    NOTSUP();
}
MK_API nvmlReturn_t nvmlDeviceGetMemClkVfOffset(nvmlDevice_t device, int *offset) {
    DEV(device);
    NONNULL(offset);
    NOTSUP();
}
MK_API nvmlReturn_t nvmlDeviceGetGpcClkMinMaxVfOffset(nvmlDevice_t device, int *minOffset, int *maxOffset) {
    DEV(device);
    NONNULL(minOffset);
    NONNULL(maxOffset);
    NOTSUP();
}
MK_API nvmlReturn_t nvmlDeviceGetMemClkMinMaxVfOffset(nvmlDevice_t device, int *minOffset, int *maxOffset) {
    DEV(device);
    NONNULL(minOffset);
    NONNULL(maxOffset);
    NOTSUP();
}
MK_API nvmlReturn_t nvmlDeviceGetClockOffsets(nvmlDevice_t device, nvmlClockOffset_t *info) {
    DEV(device);
    VERSIONED(info, nvmlClockOffset_v1);
    if ((unsigned)info->type >= NVML_CLOCK_COUNT || (unsigned)info->pstate > NVML_PSTATE_15)
        return NVML_ERROR_INVALID_ARGUMENT;
    NOTSUP();
}

/* ------------------------------------------------- PowerMizer, adaptive clocking */
/* Both are driver settings of nvidia-settings' PowerMizer page (GeForce and workstation boards): no capture or
 * nvidia-smi output shows either, and no public report names what a datacenter board answers. */
MK_API nvmlReturn_t nvmlDeviceGetPowerMizerMode_v1(nvmlDevice_t device, nvmlDevicePowerMizerModes_v1_t *mode) {
    DEV(device);
    NONNULL(mode);
    NOTSUP();
}
MK_API nvmlReturn_t nvmlDeviceGetAdaptiveClockInfoStatus(nvmlDevice_t device, unsigned int *adaptiveClockStatus) {
    DEV(device);
    NONNULL(adaptiveClockStatus);
    NOTSUP();
}

/* Confidential computing is off on every capture, and the kernel module gives the certificate chain only with
 * SPDM enabled (open-gpu-kernel-modules conf_compute_api.c: NV_ERR_OBJECT_NOT_FOUND otherwise); a chain cannot
 * be made up. */
MK_API nvmlReturn_t nvmlDeviceGetConfComputeGpuCertificate(nvmlDevice_t device, nvmlConfComputeGpuCertificate_t *cert) {
    DEV(device);
    NONNULL(cert);
    NOTSUP();
}

/* ----------------------------------------------------------- Rubin and newer */
/* nvml.h: %RUBIN_OR_NEWER% for both; the boards are Blackwell or older (`architecture` <= 10). The captures'
 * row_remapper_histogram is the row remapper's (GetRowRemapperHistogram), not the bank remapper's. */
MK_API nvmlReturn_t nvmlDeviceGetAdaptiveTgpModeInfo_v1(nvmlDevice_t device, nvmlAdaptiveTgpModeInfo_v1_t *info) {
    DEV(device);
    NONNULL(info);
    NOTSUP(); /* above Blackwell too: no public source gives a Rubin module's TGP arbitration */
}
MK_API nvmlReturn_t nvmlDeviceGetBankRemapperStatus_v1(nvmlDevice_t device, nvmlEccBankRemapperStatus_v1_t *status) {
    DEV(device);
    NONNULL(status);
    NOTSUP(); /* above Blackwell too: no capture of a Rubin board */
}

/* ------------------------------------------------------ NVLink bandwidth modes */
/* nvml.h: Blackwell and newer. Its header does not enumerate the device modes (only their maximum count,
 * NVML_NVLINK_TOTAL_SUPPORTED_BW_MODES), no capture shows them (fabric/health/bandwidth is the fabric's health),
 * and the kernel module's list (link counts, open-gpu-kernel-modules kernel_nvlink_gb100.c) is cut at a maximum
 * the fabric manager's probe gives, a value no public source has for these nodes. */
MK_API nvmlReturn_t nvmlDeviceGetNvlinkSupportedBwModes(nvmlDevice_t device, nvmlNvlinkSupportedBwModes_t *modes) {
    DEV(device);
    VERSIONED(modes, nvmlNvlinkSupportedBwModes_v1);
    NOTSUP();
}
MK_API nvmlReturn_t nvmlDeviceGetNvlinkBwMode(nvmlDevice_t device, nvmlNvlinkGetBwMode_t *mode) {
    DEV(device);
    VERSIONED(mode, nvmlNvlinkGetBwMode_v1);
    NOTSUP();
}
