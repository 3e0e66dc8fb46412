/* vGPU: the host calls and vGPU software licensing, as the bare-metal datacenter driver answers them.
 *
 * Every node runs the bare-metal driver, not a vGPU host (Virtual GPU Manager) or guest driver: every capture
 * (shared/reference/captures/qx-*.xml) shows `host_vgpu_mode` and `vgpu_heterogeneous_mode` N/A and
 * `virtualization_mode` Pass-Through or None, and none shows a "vGPU Software Licensed Product" element. A board
 * is a vGPU host when the state says so (`virtualization_mode` Host VGPU, or a `host_vgpu_mode`: the profile's
 * `virtualization` block); nvml.h's answer elsewhere is NOT_SUPPORTED
 * ("if vGPU is not supported by the device", "device not in vGPU host mode"). Argument checks come first, as in
 * the other getters: the handle, NULL (INVALID_ARGUMENT), the struct version (ARGUMENT_VERSION_MISMATCH). */
#include "util.h"

static int vgpu_host(const struct mk_device *D) {
    return D->virt_mode == NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU || D->host_vgpu_mode >= 0;
}

/* nvml.h lists no NOT_SUPPORTED for these calls: they report "isGridLicenseSupported: zero" where vGPU software
 * licensing does not apply, and the datacenter driver licenses nothing (no capture prints a licensed product;
 * dcgm-exporter on bare-metal nodes prints DCGM_FI_DEV_VGPU_LICENSE_STATUS 0, NVIDIA/dcgm-exporter issue 317,
 * where it would skip a NOT_SUPPORTED value).
 * Every version's struct starts with the flag and the feature count; with a count of 0 the array is not read. */
static nvmlReturn_t no_licensing(nvmlDevice_t device, nvmlGridLicensableFeatures_t *f) {
    DEV(device);
    NONNULL(f);
    f->isGridLicenseSupported = 0;
    f->licensableFeaturesCount = 0;
    return NVML_SUCCESS;
}
MK_API nvmlReturn_t nvmlDeviceGetGridLicensableFeatures(nvmlDevice_t device, nvmlGridLicensableFeatures_t *f) {
    return no_licensing(device, f);
}
MK_API nvmlReturn_t nvmlDeviceGetGridLicensableFeatures_v2(nvmlDevice_t device, nvmlGridLicensableFeatures_t *f) {
    return no_licensing(device, f);
}
MK_API nvmlReturn_t nvmlDeviceGetGridLicensableFeatures_v3(nvmlDevice_t device, nvmlGridLicensableFeatures_t *f) {
    return no_licensing(device, f);
}
MK_API nvmlReturn_t nvmlDeviceGetGridLicensableFeatures_v4(nvmlDevice_t device, nvmlGridLicensableFeatures_t *f) {
    return no_licensing(device, f);
}

/* captures: vgpu_heterogeneous_mode N/A on every GPU */
MK_API nvmlReturn_t nvmlDeviceGetVgpuHeterogeneousMode(nvmlDevice_t device, nvmlVgpuHeterogeneousMode_t *mode) {
    DEV(device);
    VERSIONED(mode, nvmlVgpuHeterogeneousMode_v1);
    NOTSUP(); /* a vGPU host's mode is not node state either: no profile describes one */
}

/* The type and instance lists: a vGPU host the node describes has no vGPU type and runs no vGPU (nvml.h:
 * "NVML_SUCCESS if no vGPU types are supported", a count of 0); the bare-metal driver is not a vGPU host. */
static nvmlReturn_t empty_list(nvmlDevice_t device, unsigned int *count) {
    DEV(device);
    NONNULL(count);
    if (!vgpu_host(D)) NOTSUP();
    *count = 0;
    return NVML_SUCCESS;
}
MK_API nvmlReturn_t nvmlDeviceGetSupportedVgpus(nvmlDevice_t device, unsigned int *vgpuCount,
                                                nvmlVgpuTypeId_t *vgpuTypeIds) {
    return empty_list(device, vgpuCount);
}
MK_API nvmlReturn_t nvmlDeviceGetCreatableVgpus(nvmlDevice_t device, unsigned int *vgpuCount,
                                                nvmlVgpuTypeId_t *vgpuTypeIds) {
    return empty_list(device, vgpuCount);
}
MK_API nvmlReturn_t nvmlDeviceGetActiveVgpus(nvmlDevice_t device, unsigned int *vgpuCount,
                                             nvmlVgpuInstance_t *vgpuInstances) {
    return empty_list(device, vgpuCount);
}

/* The host driver's metadata (an opaque blob, the host's vGPU version range): only a vGPU host driver has one,
 * and its content is not public, so even a vGPU host board answers NOT_SUPPORTED. */
static nvmlReturn_t metadata(nvmlDevice_t device, const void *buf, const unsigned int *size) {
    DEV(device);
    NONNULL(size);
    if (buf == NULL && *size != 0) return NVML_ERROR_INVALID_ARGUMENT;
    NOTSUP();
}
MK_API nvmlReturn_t nvmlDeviceGetVgpuMetadata(nvmlDevice_t device, nvmlVgpuPgpuMetadata_t *pgpuMetadata,
                                              unsigned int *bufferSize) {
    return metadata(device, pgpuMetadata, bufferSize);
}
MK_API nvmlReturn_t nvmlDeviceGetPgpuMetadataString(nvmlDevice_t device, char *pgpuMetadata, unsigned int *bufferSize) {
    return metadata(device, pgpuMetadata, bufferSize);
}

/* The vGPU scheduler runs only in vGPU host mode (nvml.h: NOT_SUPPORTED "if MIG is enabled or device not in vGPU
 * host mode"); no profile describes a host's scheduler policy or time slices. */
static nvmlReturn_t scheduler(nvmlDevice_t device, const void *out) {
    DEV(device);
    NONNULL(out);
    NOTSUP();
}
MK_API nvmlReturn_t nvmlDeviceGetVgpuSchedulerCapabilities(nvmlDevice_t device, nvmlVgpuSchedulerCapabilities_t *c) {
    return scheduler(device, c);
}
MK_API nvmlReturn_t nvmlDeviceGetVgpuSchedulerLog(nvmlDevice_t device, nvmlVgpuSchedulerLog_t *log) {
    return scheduler(device, log);
}
MK_API nvmlReturn_t nvmlDeviceGetVgpuSchedulerState(nvmlDevice_t device, nvmlVgpuSchedulerGetState_t *state) {
    return scheduler(device, state);
}

/* Utilization of vGPU instances and of their processes: a vGPU host without vGPU instances has no samples
 * (nvml.h: NOT_FOUND "if sample entries are not found"), the bare-metal driver NOT_SUPPORTED. The older calls
 * (DCGM's) take the count and, for instances, the sample type; a count of 0 with a buffer is INVALID_ARGUMENT. */
static nvmlReturn_t no_samples(nvmlDevice_t device, int typed, const nvmlValueType_t *type, const unsigned int *count,
                               const void *samples) {
    DEV(device);
    if (typed) NONNULL(type);
    NONNULL(count);
    if (samples != NULL && *count == 0) return NVML_ERROR_INVALID_ARGUMENT;
    if (!vgpu_host(D)) NOTSUP();
    return NVML_ERROR_NOT_FOUND;
}
MK_API nvmlReturn_t nvmlDeviceGetVgpuUtilization(nvmlDevice_t device, unsigned long long lastSeenTimeStamp,
                                                 nvmlValueType_t *sampleValType, unsigned int *vgpuInstanceSamplesCount,
                                                 nvmlVgpuInstanceUtilizationSample_t *utilizationSamples) {
    return no_samples(device, 1, sampleValType, vgpuInstanceSamplesCount, utilizationSamples);
}
MK_API nvmlReturn_t nvmlDeviceGetVgpuProcessUtilization(nvmlDevice_t device, unsigned long long lastSeenTimeStamp,
                                                        unsigned int *vgpuProcessSamplesCount,
                                                        nvmlVgpuProcessUtilizationSample_t *utilizationSamples) {
    return no_samples(device, 0, NULL, vgpuProcessSamplesCount, utilizationSamples);
}
MK_API nvmlReturn_t nvmlDeviceGetVgpuInstancesUtilizationInfo(nvmlDevice_t device,
                                                              nvmlVgpuInstancesUtilizationInfo_t *info) {
    DEV(device);
    VERSIONED(info, nvmlVgpuInstancesUtilizationInfo_v1);
    if (!vgpu_host(D)) NOTSUP();
    return NVML_ERROR_NOT_FOUND;
}
MK_API nvmlReturn_t nvmlDeviceGetVgpuProcessesUtilizationInfo(nvmlDevice_t device,
                                                              nvmlVgpuProcessesUtilizationInfo_t *info) {
    DEV(device);
    VERSIONED(info, nvmlVgpuProcessesUtilizationInfo_v1);
    if (!vgpu_host(D)) NOTSUP();
    return NVML_ERROR_NOT_FOUND;
}
