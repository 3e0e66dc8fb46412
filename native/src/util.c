/* Handles, string/time/PCI helpers, topology lookups: shared by the NVML areas. */
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include "util.h"

_Atomic int mk_g_refcount;
/* Handles: a static, initialised table (file-backed .data, so pages are only faulted in when used). */
#define H1(i) {MK_HANDLE_MAGIC, (i), {0, 0}}
#define H4(i) H1(i), H1((i) + 1), H1((i) + 2), H1((i) + 3)
#define H16(i) H4(i), H4((i) + 4), H4((i) + 8), H4((i) + 12)
#define H64(i) H16(i), H16((i) + 16), H16((i) + 32), H16((i) + 48)
struct nvmlDevice_st mk_g_handles[MK_MAX_DEVICES] = {H64(0), H64(64), H64(128), H64(192)};
_Static_assert(MK_MAX_DEVICES == 256, "handle table initialiser covers 256 devices");

nvmlReturn_t mk_copy_str(char *dst, unsigned int len, const char *src) {
    if (dst == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    size_t n = strlen(src);
    if ((size_t)len < n + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, n + 1);
    return NVML_SUCCESS;
}

uint64_t mk_now_us(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (uint64_t)tv.tv_sec * 1000000ull + (uint64_t)tv.tv_usec;
}

/* "[domain:]bus:dev.fn", any case, 4- or 8-digit domain */
int mk_bus_match_fn(const char *q, uint32_t domain, uint32_t bus, uint32_t dev, uint32_t fn) {
    unsigned a[4];
    char tail;
    if (sscanf(q, "%x:%x:%x.%x%c", &a[0], &a[1], &a[2], &a[3], &tail) == 4)
        return a[0] == domain && a[1] == bus && a[2] == dev && a[3] == fn;
    if (sscanf(q, "%x:%x.%x%c", &a[1], &a[2], &a[3], &tail) == 3)
        return domain == 0 && a[1] == bus && a[2] == dev && a[3] == fn;
    return 0;
}

int mk_bus_match(const char *q, const struct mk_device *d) {
    return d->bus_id[0] && mk_bus_match_fn(q, d->pci_domain, d->pci_bus, d->pci_dev, d->pci_func);
}

/* Fill the leading `upto` bytes of an nvmlPciInfo_t (v1: 36, v2: 52, v3: all). */
void mk_pci_fill(const struct mk_device *d, nvmlPciInfo_t *p, size_t upto) {
    nvmlPciInfo_t t;
    memset(&t, 0, sizeof t);
    snprintf(t.busIdLegacy, sizeof t.busIdLegacy, "%04X:%02X:%02X.%X", d->pci_domain & 0xffff, d->pci_bus,
             d->pci_dev, d->pci_func);
    snprintf(t.busId, sizeof t.busId, "%08X:%02X:%02X.%X", d->pci_domain, d->pci_bus, d->pci_dev, d->pci_func);
    t.domain = d->pci_domain;
    t.bus = d->pci_bus;
    t.device = d->pci_dev;
    t.pciDeviceId = d->pci_device_id;
    t.pciSubSystemId = d->pci_subsystem_id;
    if (upto > sizeof t) upto = sizeof t;
    memcpy(p, &t, upto);
}

unsigned mk_topo_level(const struct mk_snap *s, uint32_t a, uint32_t b) {
    if (a == b) return NVML_TOPOLOGY_INTERNAL;
    const struct mk_device *d = &s->dev[a];
    if (b < d->topo_level_n) return d->topo_level[b];
    return NVML_TOPOLOGY_SINGLE;
}

unsigned mk_topo_nvlinks(const struct mk_snap *s, uint32_t a, uint32_t b) {
    const struct mk_device *d = &s->dev[a];
    return a != b && b < d->topo_nvlink_n ? d->topo_nvlink[b] : 0;
}
