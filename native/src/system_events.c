/* system_events.c: the system event API (GPU driver bind and unbind), versioned requests as nvml.h defines them.
 * The node model has no bind or unbind the library could see while a process runs (the pci surface links a GPU
 * to the driver when the gpu surface is staged, and a restage replaces the whole node), so a registered set never
 * receives an event: a wait sleeps its timeout and answers TIMEOUT. An NVML area. */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "util.h"

#define SET_MAGIC 0x6d6b7379u /* "mksy": a set this library made and has not freed */
#define KNOWN_TYPES (nvmlSystemEventTypeGpuDriverUnbind | nvmlSystemEventTypeGpuDriverBind)

struct nvmlSystemEventSet_st {
    unsigned magic;
    unsigned long long types;
};

static nvmlReturn_t initialized(void) {
    return atomic_load(&mk_g_refcount) > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

static int valid(nvmlSystemEventSet_t set) { return set != NULL && set->magic == SET_MAGIC; }

MK_API nvmlReturn_t nvmlSystemEventSetCreate(nvmlSystemEventSetCreateRequest_t *request) {
    nvmlReturn_t r = initialized();
    if (r != NVML_SUCCESS) return r;
    VERSIONED(request, nvmlSystemEventSetCreateRequest_v1);
    nvmlSystemEventSet_t set = calloc(1, sizeof *set);
    if (!set) return NVML_ERROR_MEMORY;
    set->magic = SET_MAGIC;
    request->set = set;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlSystemEventSetFree(nvmlSystemEventSetFreeRequest_t *request) {
    nvmlReturn_t r = initialized();
    if (r != NVML_SUCCESS) return r;
    VERSIONED(request, nvmlSystemEventSetFreeRequest_v1);
    if (!valid(request->set)) return NVML_ERROR_INVALID_ARGUMENT;
    request->set->magic = 0;
    free(request->set);
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlSystemRegisterEvents(nvmlSystemRegisterEventRequest_t *request) {
    nvmlReturn_t r = initialized();
    if (r != NVML_SUCCESS) return r;
    VERSIONED(request, nvmlSystemRegisterEventRequest_v1);
    if (!valid(request->set) || request->eventTypes & ~(unsigned long long)KNOWN_TYPES)
        return NVML_ERROR_INVALID_ARGUMENT;
    request->set->types |= request->eventTypes;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlSystemEventSetWait(nvmlSystemEventSetWaitRequest_t *request) {
    nvmlReturn_t r = initialized();
    if (r != NVML_SUCCESS) return r;
    VERSIONED(request, nvmlSystemEventSetWaitRequest_v1);
    if (!valid(request->set) || (request->dataSize > 0 && request->data == NULL)) return NVML_ERROR_INVALID_ARGUMENT;
    request->numEvent = 0;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += request->timeoutms / 1000;
    until.tv_nsec += (long)(request->timeoutms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR) {}
    return NVML_ERROR_TIMEOUT;
}
