/* Processes, fabric, C2C. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "state.h"
#include "util.h"

/* kind: 0 compute, 1 graphics, 2 MPS compute; ver: 1, 2, 3 (nvmlProcessInfo_v1_t / _v2_t / nvmlProcessInfo_t) */
static nvmlReturn_t procs(nvmlDevice_t device, unsigned int *infoCount, void *infos, unsigned kind, int ver) {
    DEV(device);
    NONNULL(infoCount);
    unsigned n = 0;
    for (unsigned p = 0; p < D->nproc; p++) n += D->proc[p].pid && D->proc[p].type == kind;
    if (n == 0) { *infoCount = 0; return NVML_SUCCESS; }
    if (infos == NULL || *infoCount < n) { *infoCount = n; return NVML_ERROR_INSUFFICIENT_SIZE; }
    unsigned k = 0;
    for (unsigned p = 0; p < D->nproc; p++) {
        const struct mk_proc *pr = &D->proc[p];
        if (!pr->pid || pr->type != kind) continue;
        if (ver == 1) {
            nvmlProcessInfo_v1_t *o = (nvmlProcessInfo_v1_t *)infos + k;
            o->pid = pr->pid;
            o->usedGpuMemory = pr->used_bytes;
        } else {
            nvmlProcessInfo_v2_t *o = (nvmlProcessInfo_v2_t *)infos + k;
            o->pid = pr->pid;
            o->usedGpuMemory = pr->used_bytes;
            o->gpuInstanceId = 0xFFFFFFFFu;
            o->computeInstanceId = 0xFFFFFFFFu;
        }
        k++;
    }
    *infoCount = n;
    return NVML_SUCCESS;
}

#define PROC_FN(name, kind, ver, type) \
    MK_API nvmlReturn_t name(nvmlDevice_t device, unsigned int *infoCount, type *infos) { \
        return procs(device, infoCount, infos, kind, ver); }
PROC_FN(nvmlDeviceGetComputeRunningProcesses, 0, 1, nvmlProcessInfo_v1_t)
PROC_FN(nvmlDeviceGetComputeRunningProcesses_v2, 0, 2, nvmlProcessInfo_v2_t)
PROC_FN(nvmlDeviceGetComputeRunningProcesses_v3, 0, 3, nvmlProcessInfo_t)
PROC_FN(nvmlDeviceGetGraphicsRunningProcesses, 1, 1, nvmlProcessInfo_v1_t)
PROC_FN(nvmlDeviceGetGraphicsRunningProcesses_v2, 1, 2, nvmlProcessInfo_v2_t)
PROC_FN(nvmlDeviceGetGraphicsRunningProcesses_v3, 1, 3, nvmlProcessInfo_t)
PROC_FN(nvmlDeviceGetMPSComputeRunningProcesses, 2, 1, nvmlProcessInfo_v1_t)
PROC_FN(nvmlDeviceGetMPSComputeRunningProcesses_v2, 2, 2, nvmlProcessInfo_v2_t)
PROC_FN(nvmlDeviceGetMPSComputeRunningProcesses_v3, 2, 3, nvmlProcessInfo_t)

MK_API nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t device, nvmlProcessDetailList_t *pl) {
    DEV(device);
    VERSIONED(pl, nvmlProcessDetailList_v1);
    unsigned kind;
    switch (pl->mode) {
    case 0: kind = 0; break;
    case 1: kind = 1; break;
    case 2: kind = 2; break;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
    unsigned n = 0;
    for (unsigned p = 0; p < D->nproc; p++) n += D->proc[p].pid && D->proc[p].type == kind;
    if (n == 0) { pl->numProcArrayEntries = 0; return NVML_SUCCESS; }
    if (pl->procArray == NULL || pl->numProcArrayEntries < n) {
        pl->numProcArrayEntries = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    unsigned k = 0;
    for (unsigned p = 0; p < D->nproc; p++) {
        const struct mk_proc *pr = &D->proc[p];
        if (!pr->pid || pr->type != kind) continue;
        nvmlProcessDetail_v1_t *o = &pl->procArray[k++];
        o->pid = pr->pid;
        o->usedGpuMemory = pr->used_bytes;
        o->gpuInstanceId = 0xFFFFFFFFu;
        o->computeInstanceId = 0xFFFFFFFFu;
        o->usedGpuCcProtectedMemory = 0;
    }
    pl->numProcArrayEntries = n;
    return NVML_SUCCESS;
}

static unsigned util_samples(const struct mk_device *D, const struct mk_proc **out, unsigned cap);

MK_API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t *u,
                                                   unsigned int *count, unsigned long long lastSeen) {
    DEV(device);
    NONNULL(count);
    const struct mk_proc *list[MK_MAX_PROCS];
    unsigned n = util_samples(D, list, MK_MAX_PROCS);
    if (n == 0) return NVML_ERROR_NOT_FOUND; /* real driver: no samples */
    if (u == NULL || *count < n) { *count = n; return u == NULL ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE; }
    unsigned long long now = mk_now_us();
    for (unsigned p = 0; p < n; p++) {
        u[p].pid = list[p]->pid;
        u[p].timeStamp = now;
        u[p].smUtil = list[p]->sm_util;
        u[p].memUtil = list[p]->mem_util;
        u[p].encUtil = list[p]->enc_util;
        u[p].decUtil = list[p]->dec_util;
    }
    *count = n;
    return NVML_SUCCESS;
}

/* -------------------------------------------------------------- fabric */

static void cluster_uuid(const char *s, unsigned char out[NVML_GPU_FABRIC_UUID_LEN]) {
    memset(out, 0, NVML_GPU_FABRIC_UUID_LEN);
    unsigned n = 0;
    int hi = -1;
    for (; *s && n < NVML_GPU_FABRIC_UUID_LEN; s++) {
        int d;
        if (*s >= '0' && *s <= '9') d = *s - '0';
        else if (*s >= 'a' && *s <= 'f') d = *s - 'a' + 10;
        else if (*s >= 'A' && *s <= 'F') d = *s - 'A' + 10;
        else continue;
        if (hi < 0) hi = d;
        else { out[n++] = (unsigned char)(hi << 4 | d); hi = -1; }
    }
}

/* Fabric state `auto`: in progress until the fabric manager's readiness marker exists, then
 * completed (and back if it goes away). One caller stat()s the marker at most every 250 ms;
 * everyone else reads the cached answer. */
#define FABRIC_CHECK_NS 250000000ull
static _Atomic uint64_t fabric_next_check;
static _Atomic int fabric_ready;

/* The marker's path here: a relative one is relative to the directory of the state file as resolved (links
 * followed), so it names the node's marker wherever the node's root is mounted (a container's /opt/mokka,
 * mokka run's real paths, the host); 0 where it cannot be resolved (state from the persistenced feed). */
static int marker_path(const struct mk_snap *s, char *out, size_t n) {
    if (s->fabric_ready_file[0] == '/') return snprintf(out, n, "%s", s->fabric_ready_file) < (int)n;
    char state[PATH_MAX];
    if (mk_state_from_feed() || !realpath(mk_state_path(), state)) return 0;
    char *slash = strrchr(state, '/');
    if (!slash) return 0;
    *slash = '\0';
    return snprintf(out, n, "%s/%s", state, s->fabric_ready_file) < (int)n;
}

static unsigned fabric_state(const struct mk_snap *s, const struct mk_device *d) {
    if (!d->fabric_auto) return d->fabric_state;
    if (!s->fabric_ready_file[0]) return NVML_GPU_FABRIC_STATE_IN_PROGRESS;
    uint64_t now = mk_now_coarse();
    uint64_t next = atomic_load_explicit(&fabric_next_check, memory_order_relaxed);
    if (now >= next && atomic_compare_exchange_strong(&fabric_next_check, &next, now + FABRIC_CHECK_NS)) {
        struct stat st;
        char marker[PATH_MAX];
        atomic_store_explicit(&fabric_ready, marker_path(s, marker, sizeof marker) && stat(marker, &st) == 0,
                              memory_order_relaxed);
    }
    return atomic_load_explicit(&fabric_ready, memory_order_relaxed) ? NVML_GPU_FABRIC_STATE_COMPLETED
                                                                      : NVML_GPU_FABRIC_STATE_IN_PROGRESS;
}

MK_API nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *f) {
    DEV(device);
    NONNULL(f);
    if (!D->fabric_supported) NOTSUP();
    cluster_uuid(D->fabric_cluster, f->clusterUuid);
    f->status = (nvmlReturn_t)D->fabric_status;
    f->cliqueId = D->fabric_clique;
    f->state = (nvmlGpuFabricState_t)fabric_state(S, D);
    return NVML_SUCCESS;
}

/* nvidia-smi's "Summary" from the mask: unhealthy routes or configuration, else limited while bandwidth is
 * degraded or a recovery runs, else healthy */
static unsigned char health_summary(uint32_t mask) {
#define MK_FIELD(name) (mask >> NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_##name & NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_##name)
    if (MK_FIELD(ROUTE_UNHEALTHY) == NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_TRUE ||
        MK_FIELD(INCORRECT_CONFIGURATION) > NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NONE)
        return NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY;
    if (MK_FIELD(DEGRADED_BW) == NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE ||
        MK_FIELD(ROUTE_RECOVERY) == NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_RECOVERY_TRUE ||
        MK_FIELD(ACCESS_TIMEOUT_RECOVERY) == NVML_GPU_FABRIC_HEALTH_MASK_ACCESS_TIMEOUT_RECOVERY_TRUE)
        return NVML_GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY;
#undef MK_FIELD
    return NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY;
}

/* v2 and v3 (v3 appends healthSummary) */
MK_API nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfoV_t *f) {
    DEV(device);
    NONNULL(f);
    if (f->version != nvmlGpuFabricInfo_v2 && f->version != nvmlGpuFabricInfo_v3)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (!D->fabric_supported) NOTSUP();
    cluster_uuid(D->fabric_cluster, f->clusterUuid);
    f->status = (nvmlReturn_t)D->fabric_status;
    f->cliqueId = D->fabric_clique;
    f->state = (nvmlGpuFabricState_t)fabric_state(S, D);
    f->healthMask = D->fabric_health;
    if (f->version == nvmlGpuFabricInfo_v3) f->healthSummary = health_summary(D->fabric_health);
    return NVML_SUCCESS;
}

/* nvml.h: Hopper reports the unicast and multicast pointer cliques, Blackwell and newer the logical-endpoint
 * ones too; the fabric manager gives a GPU one clique id, so every entry carries it */
MK_API nvmlReturn_t nvmlDeviceGetGpuFabricInfo_v4(nvmlDevice_t device, nvmlGpuFabricInfo_v4_t *f) {
    DEV(device);
    NONNULL(f);
    if (!D->fabric_supported) NOTSUP();
    memset(f, 0, sizeof *f);
    cluster_uuid(D->fabric_cluster, f->clusterUuid);
    f->status = (nvmlReturn_t)D->fabric_status;
    f->numCliques = D->architecture >= NVML_DEVICE_ARCH_BLACKWELL ? 4 : 2;
    for (unsigned i = 0; i < f->numCliques; i++) {
        f->cliques[i].type = (unsigned char)i; /* NVML_GPU_FABRIC_CLIQUE_TYPE_* in ascending order */
        f->cliques[i].id = D->fabric_clique;
    }
    f->state = (nvmlGpuFabricState_t)fabric_state(S, D);
    f->healthMask = D->fabric_health;
    f->healthSummary = health_summary(D->fabric_health);
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetC2cModeInfoV(nvmlDevice_t device, nvmlC2cModeInfo_v1_t *c) {
    DEV(device);
    NONNULL(c);
    if (!D->c2c_supported) NOTSUP();
    c->isC2cEnabled = D->c2c_enabled;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------- platform (13.x API) */

MK_API nvmlReturn_t nvmlDeviceGetAddressingMode(nvmlDevice_t device, nvmlDeviceAddressingMode_t *mode) {
    DEV(device);
    VERSIONED(mode, nvmlDeviceAddressingMode_v1);
    if (D->addressing_mode < 0) NOTSUP();
    mode->value = (unsigned)D->addressing_mode;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetPdi(nvmlDevice_t device, nvmlPdi_t *pdi) {
    DEV(device);
    VERSIONED(pdi, nvmlPdi_v1);
    if (!D->pdi) NOTSUP();
    pdi->value = D->pdi;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetIrqNum(nvmlDevice_t device, unsigned int *irq) {
    DEV(device);
    NONNULL(irq);
    if (!D->irq) NOTSUP();
    *irq = D->irq;
    return NVML_SUCCESS;
}

/* every board of these reports no capability (nvidia-smi: "EGM: disabled") */
MK_API nvmlReturn_t nvmlDeviceGetCapabilities(nvmlDevice_t device, nvmlDeviceCapabilities_t *caps) {
    DEV(device);
    VERSIONED(caps, nvmlDeviceCapabilities_v1);
    caps->capMask = 0;
    return NVML_SUCCESS;
}

/* v1 and v2 share the layout; v2 names the second array chassisSerialNumber (v1's rackGuid stays zero) */
MK_API nvmlReturn_t nvmlDeviceGetPlatformInfo(nvmlDevice_t device, nvmlPlatformInfo_t *info) {
    DEV(device);
    NONNULL(info);
    if (info->version != nvmlPlatformInfo_v2 && info->version != nvmlPlatformInfo_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (!D->platform_supported) NOTSUP();
    unsigned version = info->version;
    memset(info, 0, sizeof *info);
    info->version = version;
    if (version == nvmlPlatformInfo_v2)
        memcpy(info->chassisSerialNumber, D->platform_chassis, strnlen(D->platform_chassis, 13));
    info->slotNumber = (unsigned char)D->platform_slot;
    info->trayIndex = (unsigned char)D->platform_tray;
    info->hostId = (unsigned char)D->platform_host;
    info->peerType = (unsigned char)D->platform_peer;
    info->moduleId = (unsigned char)D->module_id;
    return NVML_SUCCESS;
}

/* nvml.h: Blackwell and newer; the value SetHostname_v1 set (setter record), empty before any was set */
MK_API nvmlReturn_t nvmlDeviceGetHostname_v1(nvmlDevice_t device, nvmlHostname_v1_t *hostname) {
    DEV(device);
    NONNULL(hostname);
    if (D->architecture < NVML_DEVICE_ARCH_BLACKWELL) NOTSUP();
    _Static_assert(sizeof D->hostname == sizeof hostname->value, "NVML_DEVICE_HOSTNAME_BUFFER_SIZE");
    memcpy(hostname->value, D->hostname, sizeof hostname->value); /* NUL-terminated: the state parser bounds it */
    return NVML_SUCCESS;
}

/* unique pids of a device (a C+G process is listed once per kind in the state file) */
static unsigned util_samples(const struct mk_device *D, const struct mk_proc **out, unsigned cap) {
    unsigned n = 0;
    for (unsigned p = 0; p < D->nproc; p++) {
        const struct mk_proc *pr = &D->proc[p];
        unsigned dup = 0;
        for (unsigned q = 0; q < p && !dup; q++) dup = D->proc[q].pid == pr->pid;
        if (!pr->pid || dup) continue;
        if (n < cap) out[n] = pr;
        n++;
    }
    return n;
}

MK_API nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t device, nvmlProcessesUtilizationInfo_t *info) {
    DEV(device);
    VERSIONED(info, nvmlProcessesUtilizationInfo_v1);
    const struct mk_proc *list[MK_MAX_PROCS];
    unsigned n = util_samples(D, list, MK_MAX_PROCS);
    if (info->procUtilArray == NULL || info->processSamplesCount < n) {
        info->processSamplesCount = n;
        return n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    }
    unsigned long long now = mk_now_us();
    for (unsigned i = 0; i < n; i++) {
        nvmlProcessUtilizationInfo_v1_t *o = &info->procUtilArray[i];
        o->timeStamp = now;
        o->pid = list[i]->pid;
        o->smUtil = list[i]->sm_util;
        o->memUtil = list[i]->mem_util;
        o->encUtil = list[i]->enc_util;
        o->decUtil = list[i]->dec_util;
        o->jpgUtil = 0;
        o->ofaUtil = 0;
    }
    info->processSamplesCount = n;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------- confidential computing */

/* The GPUs are capable when every GPU is (features.confidential_compute); CC mode itself stays off:
 * no confidential VM on the host, so the environment is unavailable and the feature disabled. */
MK_API nvmlReturn_t nvmlSystemGetConfComputeCapabilities(nvmlConfComputeSystemCaps_t *capabilities) {
    if (atomic_load(&mk_g_refcount) <= 0) return NVML_ERROR_UNINITIALIZED;
    NONNULL(capabilities);
    struct mk_snap *S = mk_snapshot();
    unsigned capable = S->ndev > 0;
    for (uint32_t i = 0; i < S->ndev; i++) capable &= S->dev[i].cc_supported != 0;
    capabilities->cpuCaps = NVML_CC_SYSTEM_CPU_CAPS_NONE;
    capabilities->gpusCaps = capable ? NVML_CC_SYSTEM_GPUS_CC_CAPABLE : NVML_CC_SYSTEM_GPUS_CC_NOT_CAPABLE;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlSystemGetConfComputeState(nvmlConfComputeSystemState_t *state) {
    if (atomic_load(&mk_g_refcount) <= 0) return NVML_ERROR_UNINITIALIZED;
    NONNULL(state);
    state->environment = NVML_CC_SYSTEM_ENVIRONMENT_UNAVAILABLE;
    state->ccFeature = NVML_CC_SYSTEM_FEATURE_DISABLED;
    state->devToolsMode = NVML_CC_SYSTEM_DEVTOOLS_MODE_OFF;
    return NVML_SUCCESS;
}
