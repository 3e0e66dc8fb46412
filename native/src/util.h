/* util.c: what every NVML area needs: the handle table and handle resolution, string, PCI and
 * time helpers, topology lookups in a snapshot. Above state.c and log.c, below the NVML areas. */
#ifndef MOKKA_UTIL_H
#define MOKKA_UTIL_H

#include <string.h>

#include "log.h"
#include "state.h"

MK_HIDDEN extern _Atomic int mk_g_refcount;   /* nvmlInit* calls not yet shut down (core.c counts) */
MK_HIDDEN extern struct nvmlDevice_st mk_g_handles[MK_MAX_DEVICES];
/* GPUs this process attached when NVML came up (not lost then; core.c sets it at the first nvmlInit*). A GPU
 * lost after that keeps its handle: the driver still answers what it read at attach (handle by index,
 * name, UUID, PCI info, topology); anything that needs the GPU answers GPU_IS_LOST. */
MK_HIDDEN extern uint8_t mk_g_attached[MK_MAX_DEVICES];

nvmlReturn_t mk_copy_str(char *dst, unsigned int len, const char *src);
/* n bytes from src to dst, in overlapping 16-, 8- or 4-byte moves: the -Os build would make a memcpy of a
 * length it does not know a `rep movsb`, which costs more than the rest of a string getter */
MK_HOT_INLINE void mk_copy_short(char *dst, const char *src, size_t n) {
    if (n >= 32) {
        for (size_t i = 0; i + 32 < n; i += 32) memcpy(dst + i, src + i, 32);
        memcpy(dst + n - 32, src + n - 32, 32);
    } else if (n >= 16) {
        memcpy(dst, src, 16);
        memcpy(dst + n - 16, src + n - 16, 16);
    } else if (n >= 8) {
        memcpy(dst, src, 8);
        memcpy(dst + n - 8, src + n - 8, 8);
    } else if (n >= 4) {
        memcpy(dst, src, 4);
        memcpy(dst + n - 4, src + n - 4, 4);
    } else {
        for (size_t i = 0; i < n; i++) dst[i] = src[i];
    }
}
/* mk_copy_str of a string whose length n is known */
MK_HOT_INLINE nvmlReturn_t mk_copy_strn(char *dst, unsigned int len, const char *src, size_t n) {
    if (dst == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if ((size_t)len < n + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
    mk_copy_short(dst, src, n + 1);
    return NVML_SUCCESS;
}
uint64_t mk_now_us(void);
/* does the bus id `query` ("[domain:]bus:dev.fn") name this PCI function / GPU */
int mk_bus_match_fn(const char *query, uint32_t domain, uint32_t bus, uint32_t dev, uint32_t fn);
int mk_bus_match(const char *query, const struct mk_device *d);
void mk_pci_fill(const struct mk_device *d, nvmlPciInfo_t *p, size_t upto);
/* topology.levels / topology.nvlinks between GPUs a and b of a snapshot */
unsigned mk_topo_level(const struct mk_snap *s, uint32_t a, uint32_t b);
unsigned mk_topo_nvlinks(const struct mk_snap *s, uint32_t a, uint32_t b);

static inline nvmlDevice_t mk_handle(uint32_t idx) { return &mk_g_handles[idx]; }
/* the position of a clock type in the clk_* arrays ([graphics, sm, mem, video]), -1 for any other */
static inline int mk_clock_index(nvmlClockType_t t) {
    switch (t) {
    case NVML_CLOCK_GRAPHICS: return 0;
    case NVML_CLOCK_SM: return 1;
    case NVML_CLOCK_MEM: return 2;
    case NVML_CLOCK_VIDEO: return 3;
    default: return -1;
    }
}

/* MIG device handles: one per (GPU, GPU instance id, compute instance id); what they name is node state
 * (the compute instances of `mig.compute_instances`), so a handle of a destroyed instance stops resolving */
#define MK_MIG_SLOTS (15 * MK_MAX_CI)
MK_HIDDEN extern struct nvmlDevice_st mk_g_mig_handles[MK_MAX_DEVICES][MK_MIG_SLOTS];
nvmlDevice_t mk_mig_handle(uint32_t dev, uint32_t gi, uint32_t ci);
MK_HOT_INLINE int mk_is_mig_handle(nvmlDevice_t h) {
    uintptr_t off = (uintptr_t)h - (uintptr_t)mk_g_mig_handles; /* NULL and lower addresses wrap to past the end */
    return off < sizeof mk_g_mig_handles && (off & (sizeof(struct nvmlDevice_st) - 1)) == 0;
}
/* a MIG device: its GPU, the position of its compute instance in mig_ci and its GPU-instance profile */
struct mk_mig {
    struct mk_snap *S;
    struct mk_device *D;
    unsigned at, gi, ci;
    const struct mk_mig_profile *gp;
};
nvmlReturn_t mk_mig_dev(nvmlDevice_t h, struct mk_mig *m);
/* what the identity and memory getters answer for a MIG device */
nvmlReturn_t mk_mig_name(nvmlDevice_t h, char *buf, unsigned len);
nvmlReturn_t mk_mig_uuid(nvmlDevice_t h, char *buf, unsigned len);
nvmlReturn_t mk_mig_memory(nvmlDevice_t h, uint64_t *total);
nvmlReturn_t mk_mig_index(nvmlDevice_t h, unsigned *index); /* its place among its GPU's MIG devices */
nvmlReturn_t mk_mig_attributes(nvmlDevice_t h, nvmlDeviceAttributes_t *a);
/* compute instances: slices of an NVML_COMPUTE_INSTANCE_PROFILE_* (0: none), and the SMs of one of s slices
 * in a GPU instance of profile gp: the whole instance's, else the board's plain GPU instance of that size */
unsigned mk_ci_sms(const struct mk_device *D, const struct mk_mig_profile *gp, unsigned s);

/* a getter whose answer for a MIG device is its GPU's (ECC counters) continues with the GPU's handle */
#define MIG_AS_GPU(h)                                          \
    do {                                                       \
        if (mk_is_mig_handle(h)) {                             \
            struct mk_mig m_;                                  \
            nvmlReturn_t r_ = mk_mig_dev((h), &m_);            \
            if (r_ != NVML_SUCCESS) return r_;                 \
            (h) = mk_handle((h)->index);                       \
        }                                                      \
    } while (0)
/* the getters that also answer for MIG devices start with this */
#define MIG_ANSWERS(h, call) do { if (mk_is_mig_handle(h)) return (call); } while (0)

MK_HOT_INLINE int mk_handle_valid(nvmlDevice_t h) {
    uintptr_t off = (uintptr_t)h - (uintptr_t)mk_g_handles;
    return off < sizeof mk_g_handles && (off & (sizeof(struct nvmlDevice_st) - 1)) == 0;
}

/* A call on GPU i of *s whose failure starts after calls (failure.c): counts it; where this call started the
 * failure, publishes the failed snapshot and points *s at it. 1: the GPU is lost now. */
int mk_failure_count(struct mk_snap **s, uint32_t i);

/* GPU i of snapshot *s is lost (marked lost, or its delayed failure has started). */
MK_HOT_INLINE int mk_lost(struct mk_snap **s, uint32_t i) {
    int32_t lost = (*s)->dev[i].lost;
    if (__builtin_expect(lost == 0, 1)) return 0;
    return lost == MK_LOST_LATER ? mk_failure_count(s, i) : lost > 0;
}

/* The device of a valid handle in snapshot *s: GPU_IS_LOST when it is gone or lost. */
MK_HOT_INLINE nvmlReturn_t mk_dev_in(struct mk_snap **s, nvmlDevice_t h, struct mk_device **d) {
    uint32_t i = h->index;
    if (__builtin_expect(*s == NULL || i >= (*s)->ndev, 0))
        return NVML_ERROR_GPU_IS_LOST;
    if (__builtin_expect(mk_lost(s, i), 0))
        return NVML_ERROR_GPU_IS_LOST;
    *d = &(*s)->dev[i];
    return NVML_SUCCESS;
}

/* Resolve a handle: init check, handle check, lost check.  One copy (util.c) for every getter. */
nvmlReturn_t mk_dev(nvmlDevice_t h, struct mk_snap **s, struct mk_device **d);
/* mk_dev for what the driver read when this process attached the GPU: a GPU lost since still answers. */
nvmlReturn_t mk_dev_attached(nvmlDevice_t h, struct mk_snap **s, struct mk_device **d);

/* Resolve two handles in the same snapshot; the first handle's error wins. */
static inline nvmlReturn_t mk_dev2(nvmlDevice_t h1, nvmlDevice_t h2, struct mk_snap **s, struct mk_device **d1,
                                   struct mk_device **d2) {
    nvmlReturn_t r = mk_dev(h1, s, d1);
    if (r != NVML_SUCCESS) return r;
    if (__builtin_expect(!mk_handle_valid(h2), 0))
        return NVML_ERROR_INVALID_ARGUMENT;
    return mk_dev_in(s, h2, d2);
}

#define DEV(h)                                         \
    struct mk_snap *S; struct mk_device *D;            \
    do { nvmlReturn_t r_ = mk_dev((h), &S, &D);        \
         if (r_ != NVML_SUCCESS) return r_; } while (0); \
    (void)S
/* two-handle calls: S, D (first handle) and D2 (second) */
#define DEV2(h1, h2)                                           \
    struct mk_snap *S; struct mk_device *D, *D2;               \
    do { nvmlReturn_t r_ = mk_dev2((h1), (h2), &S, &D, &D2);   \
         if (r_ != NVML_SUCCESS) return r_; } while (0);       \
    (void)S; (void)D2
/* DEV for the attach-time identity (mk_dev_attached) */
#define DEV_ATTACHED(h)                                        \
    struct mk_snap *S; struct mk_device *D;                    \
    do { nvmlReturn_t r_ = mk_dev_attached((h), &S, &D);       \
         if (r_ != NVML_SUCCESS) return r_; } while (0);       \
    (void)S
#define NONNULL(p) do { if ((p) == NULL) return NVML_ERROR_INVALID_ARGUMENT; } while (0)
/* a versioned struct argument: non-NULL and carrying nvml.h's version tag of its layout */
#define VERSIONED(p, tag)                                                           \
    do { NONNULL(p);                                                                \
         if ((p)->version != (tag)) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH; } while (0)
#define NOTSUP() return NVML_ERROR_NOT_SUPPORTED

#endif
