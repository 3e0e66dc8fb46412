/* Handles, string/time/PCI helpers, topology lookups: shared by the NVML areas. */
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include "failure.h"
#include "util.h"

_Atomic int mk_g_refcount;
uint8_t mk_g_attached[MK_MAX_DEVICES];
/* Handles: a static, initialised table (file-backed .data, so pages are only faulted in when used). */
#define H1(i) {MK_HANDLE_MAGIC, (i), {0, 0}, 0}
#define H4(i) H1(i), H1((i) + 1), H1((i) + 2), H1((i) + 3)
#define H16(i) H4(i), H4((i) + 4), H4((i) + 8), H4((i) + 12)
#define H64(i) H16(i), H16((i) + 16), H16((i) + 32), H16((i) + 48)
struct nvmlDevice_st mk_g_handles[MK_MAX_DEVICES] = {H64(0), H64(64), H64(128), H64(192)};
_Static_assert(MK_MAX_DEVICES == 256, "handle table initialiser covers 256 devices");

nvmlReturn_t mk_copy_str(char *dst, unsigned int len, const char *src) {
    return mk_copy_strn(dst, len, src, strlen(src));
}

nvmlReturn_t mk_dev(nvmlDevice_t h, struct mk_snap **s, struct mk_device **d) {
    if (__builtin_expect(atomic_load_explicit(&mk_g_refcount, memory_order_relaxed) <= 0, 0))
        return NVML_ERROR_UNINITIALIZED;
    if (__builtin_expect(!mk_handle_valid(h), 0))
        return NVML_ERROR_INVALID_ARGUMENT;
    struct mk_snap *S = mk_snapshot();
    nvmlReturn_t r = mk_dev_in(&S, h, d);
    if (r == NVML_SUCCESS) *s = S;
    return r;
}

nvmlReturn_t mk_dev_attached(nvmlDevice_t h, struct mk_snap **s, struct mk_device **d) {
    nvmlReturn_t r = mk_dev(h, s, d);
    if (r != NVML_ERROR_GPU_IS_LOST || !mk_g_attached[h->index]) return r;
    struct mk_snap *S = mk_snapshot();
    if (S == NULL || h->index >= S->ndev) return r;
    *s = S;
    *d = &S->dev[h->index];
    return NVML_SUCCESS;
}

int mk_failure_count(struct mk_snap **s, uint32_t i) {
    int lost_mode = (*s)->dev[i].fail_mode != MK_FAIL_ECC;
    int started = mk_failure_call(&(*s)->dev[i], i);
    if (started == 2) {
        mk_refresh_slow(mk_now_coarse(), 1);
        struct mk_snap *now = mk_snap_take();
        if (now && i < now->ndev) *s = now;
    }
    return started && lost_mode; /* lost even where no new snapshot came (the file is being rewritten) */
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

/* ---- MIG device handles ---------------------------------------------------------------------- */

struct nvmlDevice_st mk_g_mig_handles[MK_MAX_DEVICES][MK_MIG_SLOTS];

nvmlDevice_t mk_mig_handle(uint32_t dev, uint32_t gi, uint32_t ci) {
    struct nvmlDevice_st *h = &mk_g_mig_handles[dev][gi * MK_MAX_CI + ci];
    h->magic = MK_HANDLE_MAGIC ^ 0x4D494700u; /* "MIG" */
    h->index = dev;
    h->reserved[0] = gi;
    h->reserved[1] = ci;
    return h;
}

nvmlReturn_t mk_mig_dev(nvmlDevice_t h, struct mk_mig *m) {
    if (atomic_load_explicit(&mk_g_refcount, memory_order_relaxed) <= 0) return NVML_ERROR_UNINITIALIZED;
    if (!mk_is_mig_handle(h) || h->magic == 0) return NVML_ERROR_INVALID_ARGUMENT;
    m->S = mk_snapshot();
    nvmlReturn_t r = mk_dev_in(&m->S, mk_handle(h->index), &m->D);
    if (r != NVML_SUCCESS) return r;
    m->gi = (unsigned)h->reserved[0];
    m->ci = (unsigned)h->reserved[1];
    const struct mk_device *D = m->D;
    for (unsigned k = 0; k + 3 < D->mig_ci_n; k += 4) {
        if (D->mig_ci[k] != m->gi || D->mig_ci[k + 1] != m->ci) continue;
        for (unsigned g = 0; g + 2 < D->mig_gi_n; g += 3)
            if (D->mig_gi[g] == m->gi && D->mig_gi[g + 1] < D->nmig_profile) {
                m->at = k;
                m->gp = &D->mig_profile[D->mig_gi[g + 1]];
                return NVML_SUCCESS;
            }
    }
    return NVML_ERROR_INVALID_ARGUMENT; /* its compute instance was destroyed */
}

unsigned mk_ci_sms(const struct mk_device *D, const struct mk_mig_profile *gp, unsigned s) {
    if (s == gp->slices) return gp->sms;
    for (unsigned r = 0; r < D->nmig_profile; r++) /* the board's plain GPU instance profile of that size */
        if (D->mig_profile[r].slices == s && D->mig_profile[r].profile == s - 1) return D->mig_profile[r].sms;
    return gp->sms * s / gp->slices;
}

/* the compute instance's profile name: `3g.40gb` for a whole GPU instance, else `1c.3g.40gb` */
static void ci_profile_name(const struct mk_mig *m, char *buf, size_t len) {
    unsigned s = mk_ci_slices(m->D->mig_ci[m->at + 2]);
    if (s == 0 || s == m->gp->slices) snprintf(buf, len, "%s", m->gp->name);
    else snprintf(buf, len, "%uc.%s", s, m->gp->name);
}

nvmlReturn_t mk_mig_attributes(nvmlDevice_t h, nvmlDeviceAttributes_t *a) {
    struct mk_mig m;
    nvmlReturn_t r = mk_mig_dev(h, &m);
    if (r != NVML_SUCCESS) return r;
    if (!a) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned s = mk_ci_slices(m.D->mig_ci[m.at + 2]);
    *a = (nvmlDeviceAttributes_t){mk_ci_sms(m.D, m.gp, s), m.gp->copy_engines, m.gp->decoders, m.gp->encoders,
                                  m.gp->jpegs, m.gp->ofas, m.gp->slices, s, m.gp->memory_mb};
    return NVML_SUCCESS;
}

nvmlReturn_t mk_mig_name(nvmlDevice_t h, char *buf, unsigned len) {
    struct mk_mig m;
    nvmlReturn_t r = mk_mig_dev(h, &m);
    if (r != NVML_SUCCESS) return r;
    if (!buf) return NVML_ERROR_INVALID_ARGUMENT;
    char profile[48], name[160];
    ci_profile_name(&m, profile, sizeof profile);
    snprintf(name, sizeof name, "%s MIG %s", m.D->name, profile);
    return mk_copy_str(buf, len, name);
}

static uint64_t splitmix(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* `MIG-` and a UUID derived from the GPU's and the instance ids: the same in every process */
nvmlReturn_t mk_mig_uuid(nvmlDevice_t h, char *buf, unsigned len) {
    struct mk_mig m;
    nvmlReturn_t r = mk_mig_dev(h, &m);
    if (r != NVML_SUCCESS) return r;
    if (!buf) return NVML_ERROR_INVALID_ARGUMENT;
    uint64_t x = 0xcbf29ce484222325ull;
    for (const char *c = m.D->uuid; *c; c++) x = (x ^ (uint8_t)*c) * 0x100000001b3ull;
    uint64_t a = splitmix(x ^ ((uint64_t)m.gi << 40) ^ ((uint64_t)m.ci << 48)), b = splitmix(a);
    char uuid[48];
    snprintf(uuid, sizeof uuid, "MIG-%08x-%04x-5%03x-%04x-%012llx", (unsigned)(a >> 32), (unsigned)(a >> 16) & 0xffff,
             (unsigned)a & 0xfff, (unsigned)(0x8000 | ((b >> 48) & 0x3fff)), (unsigned long long)(b & 0xffffffffffffull));
    return mk_copy_str(buf, len, uuid);
}

nvmlReturn_t mk_mig_memory(nvmlDevice_t h, uint64_t *total) {
    struct mk_mig m;
    nvmlReturn_t r = mk_mig_dev(h, &m);
    if (r != NVML_SUCCESS) return r;
    *total = m.gp->memory_mb << 20;
    return NVML_SUCCESS;
}

nvmlReturn_t mk_mig_index(nvmlDevice_t h, unsigned *index) {
    struct mk_mig m;
    nvmlReturn_t r = mk_mig_dev(h, &m);
    if (r != NVML_SUCCESS) return r;
    *index = m.at / 4;
    return NVML_SUCCESS;
}
