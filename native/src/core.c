/* Init/shutdown, errors, system queries, handle lookup, events. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "failure.h"
#include "util.h"

static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;
static void fork_prepare(void) { pthread_mutex_lock(&init_mu); }
static void fork_release(void) { pthread_mutex_unlock(&init_mu); }
__attribute__((constructor)) static void core_init(void) { pthread_atfork(fork_prepare, fork_release, fork_release); }

/* ---------------------------------------------------------------- init */

#define INIT_TORN_NS 1000000000ull /* how long the first nvmlInit waits out a state file it cannot take */

MK_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    pthread_mutex_lock(&init_mu);
    if (atomic_load(&mk_g_refcount) == 0) {
        mk_debug_init();
        mk_refresh_slow(mk_now_coarse(), 1);
        /* no state yet and a file that could not be taken: maybe one being written over in place; look again
         * for up to INIT_TORN_NS before answering DRIVER_NOT_LOADED (a file that stays bad costs that once) */
        for (uint64_t t0 = mk_now_coarse(), now = t0;
             atomic_load(&mk_g_snap) == NULL && mk_state_torn() && now - t0 < INIT_TORN_NS; now = mk_now_coarse()) {
            int saved = errno;
            nanosleep(&(struct timespec){0, 2000000}, NULL);
            errno = saved;
            mk_refresh_slow(mk_now_coarse(), 1);
        }
    }
    struct mk_snap *s = mk_snap_take();
    nvmlReturn_t r = NVML_SUCCESS;
    if (s == NULL) {
        r = NVML_ERROR_DRIVER_NOT_LOADED;
    } else if (s->init_error != 0) {
        r = (nvmlReturn_t)s->init_error;
    } else {
        if (atomic_load(&mk_g_refcount) == 0)
            for (uint32_t i = 0; i < MK_MAX_DEVICES; i++) mk_g_attached[i] = i < s->ndev && s->dev[i].lost <= 0;
        atomic_fetch_add(&mk_g_refcount, 1);
    }
    pthread_mutex_unlock(&init_mu);
    mk_debug("nvmlInitWithFlags(0x%x) -> %d (state %s)", flags, r, mk_state_path());
    return r;
}

MK_API nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
MK_API nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

MK_API nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&init_mu);
    nvmlReturn_t r = NVML_SUCCESS;
    if (atomic_load(&mk_g_refcount) <= 0) r = NVML_ERROR_UNINITIALIZED;
    else atomic_fetch_sub(&mk_g_refcount, 1);
    pthread_mutex_unlock(&init_mu);
    return r;
}

MK_API const char *nvmlErrorString(nvmlReturn_t result) {
    switch ((int)result) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 5: return "Already Initialized";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 8: return "Insufficient External Power";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 11: return "Interrupt Request Issue";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 14: return "Corrupted infoROM";
    case 15: return "GPU is lost";
    case 16: return "GPU requires reset";
    case 17: return "GPU access blocked by the operating system";
    case 18: return "Driver/library version mismatch";
    case 19: return "In use by another client";
    case 20: return "Insufficient Memory";
    case 21: return "No data";
    case 22: return "vGPU ECC not supported";
    case 23: return "Insufficient Resources";
    case 24: return "Invalid Frequency";
    case 25: return "Argument version mismatch";
    case 26: return "Deprecated";
    case 27: return "System is not in ready state";
    case 28: return "GPU not found";
    case 29: return "Invalid state";
    default: return "Unknown Error";
    }
}

#define NEED_INIT() do { if (atomic_load_explicit(&mk_g_refcount, memory_order_relaxed) <= 0) \
                             return NVML_ERROR_UNINITIALIZED; } while (0)

/* -------------------------------------------------------------- system */

MK_API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    NEED_INIT();
    NONNULL(version);
    return mk_copy_str(version, length, mk_snapshot()->driver_version);
}

MK_API nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    NEED_INIT();
    NONNULL(version);
    return mk_copy_str(version, length, mk_snapshot()->nvml_version);
}

MK_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) {
    NEED_INIT();
    NONNULL(v);
    *v = (int)mk_snapshot()->cuda_version;
    return NVML_SUCCESS;
}
MK_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { return nvmlSystemGetCudaDriverVersion(v); }

MK_API nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length) {
    NEED_INIT();
    NONNULL(name);
    if (length == 0) return NVML_ERROR_INVALID_ARGUMENT;
    struct mk_snap *s = mk_snapshot();
    for (uint32_t i = 0; i < s->ndev; i++)
        for (uint32_t p = 0; p < s->dev[i].nproc; p++)
            if (s->dev[i].proc[p].pid == pid) {
                snprintf(name, length, "%s", s->dev[i].proc[p].name);
                return NVML_SUCCESS;
            }
    return NVML_ERROR_NOT_FOUND;
}

MK_API nvmlReturn_t nvmlSystemGetTopologyGpuSet(unsigned int cpuNumber, unsigned int *count, nvmlDevice_t *deviceArray) {
    NEED_INIT();
    NONNULL(count);
    struct mk_snap *s = mk_snapshot();
    unsigned n = 0;
    if (cpuNumber >= MK_CPUSET_WORDS * 64) return NVML_ERROR_INVALID_ARGUMENT;
    for (uint32_t i = 0; i < s->ndev; i++)
        if (s->dev[i].cpuset_set && (s->dev[i].cpuset[cpuNumber / 64] >> (cpuNumber % 64)) & 1) {
            if (deviceArray && n < *count) deviceArray[n] = mk_handle(i);
            n++;
        }
    if (deviceArray == NULL || *count == 0) { *count = n; return NVML_SUCCESS; }
    if (*count < n) { *count = n; return NVML_ERROR_INSUFFICIENT_SIZE; }
    *count = n;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlGetExcludedDeviceCount(unsigned int *deviceCount) {
    NEED_INIT();
    NONNULL(deviceCount);
    *deviceCount = 0;
    return NVML_SUCCESS;
}
MK_API nvmlReturn_t nvmlGetBlacklistDeviceCount(unsigned int *deviceCount) { return nvmlGetExcludedDeviceCount(deviceCount); }
MK_API nvmlReturn_t nvmlGetExcludedDeviceInfoByIndex(unsigned int index, nvmlExcludedDeviceInfo_t *info) {
    NEED_INIT();
    NONNULL(info);
    return NVML_ERROR_INVALID_ARGUMENT;
}
MK_API nvmlReturn_t nvmlGetBlacklistDeviceInfoByIndex(unsigned int index, nvmlExcludedDeviceInfo_t *info) {
    return nvmlGetExcludedDeviceInfoByIndex(index, info);
}

/* ------------------------------------------------------------- handles */

MK_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
    NEED_INIT();
    NONNULL(deviceCount);
    *deviceCount = mk_snapshot()->ndev;
    return NVML_SUCCESS;
}
MK_API nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount) { return nvmlDeviceGetCount_v2(deviceCount); }

MK_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    NEED_INIT();
    NONNULL(device);
    struct mk_snap *s = mk_snapshot();
    if (index >= s->ndev) return NVML_ERROR_INVALID_ARGUMENT;
    if (mk_lost(&s, index) && !mk_g_attached[index]) return NVML_ERROR_GPU_IS_LOST;
    *device = mk_handle(index);
    return NVML_SUCCESS;
}
MK_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

static nvmlReturn_t by_string(const char *q, nvmlDevice_t *device, int field) {
    NEED_INIT();
    NONNULL(q);
    NONNULL(device);
    struct mk_snap *s = mk_snapshot();
    for (uint32_t i = 0; i < s->ndev; i++) {
        const struct mk_device *d = &s->dev[i];
        int hit = field == 0 ? (d->uuid[0] && strcmp(d->uuid, q) == 0)
                : field == 1 ? (d->serial[0] && strcmp(d->serial, q) == 0)
                             : mk_bus_match(q, d);
        if (hit) {
            if (mk_lost(&s, i)) return NVML_ERROR_GPU_IS_LOST;
            *device = mk_handle(i);
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}
/* a `MIG-…` UUID names a MIG device: the compute instance whose derived UUID it is */
static nvmlReturn_t by_mig_uuid(const char *uuid, nvmlDevice_t *device) {
    struct mk_snap *S = mk_snapshot();
    char mine[96];
    for (uint32_t i = 0; S && i < S->ndev; i++)
        for (uint32_t k = 0; k + 3 < S->dev[i].mig_ci_n; k += 4) {
            nvmlDevice_t h = mk_mig_handle(i, S->dev[i].mig_ci[k], S->dev[i].mig_ci[k + 1]);
            if (mk_mig_uuid(h, mine, sizeof mine) == NVML_SUCCESS && strcmp(mine, uuid) == 0) {
                *device = h;
                return NVML_SUCCESS;
            }
        }
    return NVML_ERROR_NOT_FOUND;
}

MK_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    if (uuid && device && strncmp(uuid, "MIG-", 4) == 0 && atomic_load(&mk_g_refcount) > 0)
        return by_mig_uuid(uuid, device);
    return by_string(uuid, device, 0);
}
MK_API nvmlReturn_t nvmlDeviceGetHandleBySerial(const char *serial, nvmlDevice_t *device) { return by_string(serial, device, 1); }
MK_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device) { return by_string(pciBusId, device, 2); }
MK_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device) { return by_string(pciBusId, device, 2); }

/* -------------------------------------------------------------- events */

struct nvmlEventSet_st {
    uint32_t magic;
    pthread_mutex_t mu;
    uint64_t last_seq;                    /* events with seq <= last_seq are not delivered */
    uint64_t types[MK_MAX_DEVICES];       /* registered event types per device */
    uint64_t failure_epoch;               /* delayed failures started by then are not delivered (failure.c) */
};
#define MK_EVSET_MAGIC 0x45564B4Du

MK_API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    NEED_INIT();
    NONNULL(set);
    struct nvmlEventSet_st *e = calloc(1, sizeof(*e));
    if (!e) return NVML_ERROR_MEMORY;
    e->magic = MK_EVSET_MAGIC;
    pthread_mutex_init(&e->mu, NULL);
    mk_refresh_slow(mk_now_coarse(), 1);
    e->last_seq = mk_snapshot()->max_seq;
    e->failure_epoch = mk_failure_epoch();
    *set = e;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    NEED_INIT();
    if (!set || set->magic != MK_EVSET_MAGIC) return NVML_ERROR_INVALID_ARGUMENT;
    set->magic = 0;
    pthread_mutex_destroy(&set->mu);
    free(set);
    return NVML_SUCCESS;
}

#define MK_SUPPORTED_EVENTS (nvmlEventTypeXidCriticalError | nvmlEventTypeSingleBitEccError | \
                             nvmlEventTypeDoubleBitEccError)

MK_API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes) {
    DEV(device);
    NONNULL(eventTypes);
    *eventTypes = MK_SUPPORTED_EVENTS;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set) {
    DEV(device);
    if (!set || set->magic != MK_EVSET_MAGIC) return NVML_ERROR_INVALID_ARGUMENT;
    if (eventTypes & ~(unsigned long long)MK_SUPPORTED_EVENTS) return NVML_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&set->mu);
    set->types[device->index] |= eventTypes;
    pthread_mutex_unlock(&set->mu);
    return NVML_SUCCESS;
}

static nvmlReturn_t event_wait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms, int v2) {
    NEED_INIT();
    if (!set || set->magic != MK_EVSET_MAGIC) return NVML_ERROR_INVALID_ARGUMENT;
    NONNULL(data);
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        mk_refresh_slow(mk_now_coarse(), 1);
        struct mk_snap *s = mk_snapshot();
        pthread_mutex_lock(&set->mu);
        for (uint32_t i = 0; i < s->nevent; i++) {
            const struct mk_event *ev = &s->events[i];
            if (ev->seq <= set->last_seq) continue;
            set->last_seq = ev->seq;
            if (!(set->types[ev->device] & ev->type)) continue;
            pthread_mutex_unlock(&set->mu);
            data->device = mk_handle(ev->device);
            data->eventType = ev->type;
            data->eventData = ev->data;
            if (v2) {
                data->gpuInstanceId = 0xFFFFFFFFu;
                data->computeInstanceId = 0xFFFFFFFFu;
            }
            return NVML_SUCCESS;
        }
        /* the Xid of a delayed failure this process started since: once per set, in the order they started */
        uint64_t at = 0, first = 0;
        uint32_t which = 0, xid = 0;
        for (uint32_t i = 0; i < s->ndev; i++) {
            uint32_t code = mk_failure_xid(s, i, set->failure_epoch, &at);
            if (code && (set->types[i] & nvmlEventTypeXidCriticalError) && (!xid || at < first))
                which = i, xid = code, first = at;
        }
        if (xid) {
            set->failure_epoch = first;
            pthread_mutex_unlock(&set->mu);
            data->device = mk_handle(which);
            data->eventType = nvmlEventTypeXidCriticalError;
            data->eventData = xid;
            if (v2) {
                data->gpuInstanceId = 0xFFFFFFFFu;
                data->computeInstanceId = 0xFFFFFFFFu;
            }
            return NVML_SUCCESS;
        }
        pthread_mutex_unlock(&set->mu);
        clock_gettime(CLOCK_MONOTONIC, &now);
        int64_t elapsed_ms = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
        if (elapsed_ms >= (int64_t)timeoutms) return NVML_ERROR_TIMEOUT;
        struct timespec ts = {0, 2000000}; /* poll the state file every 2 ms */
        nanosleep(&ts, NULL);
    }
}

MK_API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    return event_wait(set, data, timeoutms, 1);
}
MK_API nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    return event_wait(set, data, timeoutms, 0);
}
