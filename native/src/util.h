/* util.c: what every NVML area needs: the handle table and handle resolution, string, PCI and
 * time helpers, topology lookups in a snapshot. Above state.c and log.c, below the NVML areas. */
#ifndef MOKKA_UTIL_H
#define MOKKA_UTIL_H

#include "log.h"
#include "state.h"

MK_HIDDEN extern _Atomic int mk_g_refcount;   /* nvmlInit* calls not yet shut down (core.c counts) */
MK_HIDDEN extern struct nvmlDevice_st mk_g_handles[MK_MAX_DEVICES];

nvmlReturn_t mk_copy_str(char *dst, unsigned int len, const char *src);
uint64_t mk_now_us(void);
/* does the bus id `query` ("[domain:]bus:dev.fn") name this PCI function / GPU */
int mk_bus_match_fn(const char *query, uint32_t domain, uint32_t bus, uint32_t dev, uint32_t fn);
int mk_bus_match(const char *query, const struct mk_device *d);
void mk_pci_fill(const struct mk_device *d, nvmlPciInfo_t *p, size_t upto);
/* topology.levels / topology.nvlinks between GPUs a and b of a snapshot */
unsigned mk_topo_level(const struct mk_snap *s, uint32_t a, uint32_t b);
unsigned mk_topo_nvlinks(const struct mk_snap *s, uint32_t a, uint32_t b);

static inline nvmlDevice_t mk_handle(uint32_t idx) { return &mk_g_handles[idx]; }

/* Resolve a handle: init check, handle check, lost check. */
static inline nvmlReturn_t mk_dev(nvmlDevice_t h, struct mk_snap **s, struct mk_device **d) {
    if (__builtin_expect(atomic_load_explicit(&mk_g_refcount, memory_order_relaxed) <= 0, 0))
        return NVML_ERROR_UNINITIALIZED;
    uintptr_t off = (uintptr_t)h - (uintptr_t)mk_g_handles;
    if (__builtin_expect(h == NULL || off % sizeof(struct nvmlDevice_st) != 0 ||
                         off / sizeof(struct nvmlDevice_st) >= MK_MAX_DEVICES, 0))
        return NVML_ERROR_INVALID_ARGUMENT;
    struct mk_snap *S = mk_snapshot();
    uint32_t i = h->index;
    if (__builtin_expect(S == NULL || i >= S->ndev, 0))
        return NVML_ERROR_GPU_IS_LOST;
    struct mk_device *D = &S->dev[i];
    if (__builtin_expect(D->lost != 0, 0))
        return NVML_ERROR_GPU_IS_LOST;
    *s = S;
    *d = D;
    return NVML_SUCCESS;
}

#define DEV(h)                                         \
    struct mk_snap *S; struct mk_device *D;            \
    do { nvmlReturn_t r_ = mk_dev((h), &S, &D);        \
         if (r_ != NVML_SUCCESS) return r_; } while (0); \
    (void)S
#define NONNULL(p) do { if ((p) == NULL) return NVML_ERROR_INVALID_ARGUMENT; } while (0)
#define NOTSUP() return NVML_ERROR_NOT_SUPPORTED

#endif
