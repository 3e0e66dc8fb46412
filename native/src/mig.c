/* mig.c: MIG partitioning: GPU-instance profiles (state file, `mig_profile` rows), GPU and compute
 * instances (node state in the setter record: `mig.gpu_instances`, `mig.compute_instances`), and
 * their handles. An NVML area, writing through settings.c; the MIG device handles are util.c's. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "settings.h"

/* ---- GPU instance ids: the memory-slice tree real drivers number GPU instances by ------------------
 * 8 slices: 0; 4: start 0 -> 1, 4 -> 2; 2: start 0, 2, 4, 6 -> 3..6; 1: start 0..6 -> 7..13 (the MIG user
 * guide's 1g at 6:1 is id 13, its 2g at 4:2 id 5, its 4g at 0:4 id 1; an H100's 1g at 0, 1, 5 are 7, 8, 12) */
static unsigned gi_id_of(unsigned size, unsigned start) {
    switch (size) {
    case 8: return 0;
    case 4: return 1 + start / 4;
    case 2: return 3 + start / 2;
    default: return 7 + start;
    }
}

struct nvmlGpuInstance_st { uint32_t dev, id; };
struct nvmlComputeInstance_st { uint32_t dev, gi, id; };
static struct nvmlGpuInstance_st gi_handles[MK_MAX_DEVICES][MK_GI_IDS];
static struct nvmlComputeInstance_st ci_handles[MK_MAX_DEVICES][MK_GI_IDS][MK_MAX_CI];

static nvmlGpuInstance_t gi_handle(uint32_t dev, uint32_t id) {
    struct nvmlGpuInstance_st *h = &gi_handles[dev][id];
    h->dev = dev;
    h->id = id;
    return h;
}
static nvmlComputeInstance_t ci_handle(uint32_t dev, uint32_t gi, uint32_t id) {
    struct nvmlComputeInstance_st *h = &ci_handles[dev][gi][id];
    h->dev = dev;
    h->gi = gi;
    h->id = id;
    return h;
}

/* one GPU instance of a device: its record triple */
struct gi { unsigned id, row, start; const struct mk_mig_profile *p; };

static int gi_at(const struct mk_device *D, unsigned n, struct gi *g) {
    if (n * 3 + 2 >= D->mig_gi_n) return 0;
    g->id = D->mig_gi[n * 3];
    g->row = D->mig_gi[n * 3 + 1];
    g->start = D->mig_gi[n * 3 + 2];
    g->p = g->row < D->nmig_profile ? &D->mig_profile[g->row] : NULL;
    return g->p != NULL;
}
static int gi_find(const struct mk_device *D, unsigned id, struct gi *g) {
    for (unsigned n = 0; gi_at(D, n, g); n++)
        if (g->id == id) return 1;
    return 0;
}

static const struct mk_mig_profile *profile_by_id(const struct mk_device *D, unsigned id, unsigned *row) {
    for (unsigned r = 0; r < D->nmig_profile; r++)
        if (D->mig_profile[r].id == id && D->mig_profile[r].name[0]) { *row = r; return &D->mig_profile[r]; }
    return NULL;
}

/* MIG must be on for instances; boards without MIG answer NOT_SUPPORTED */
static nvmlReturn_t mig_on(const struct mk_device *D) {
    if (D->mig_current < 0 || D->nmig_profile == 0) return NVML_ERROR_NOT_SUPPORTED;
    return D->mig_current == 1 ? NVML_SUCCESS : NVML_ERROR_INVALID_STATE;
}

/* memory slices and compute slices in use, and instances of profile row `row` */
struct usage { unsigned mem_mask, compute, of_row; };
static struct usage usage_of(const struct mk_device *D, unsigned row) {
    struct usage u = {0, 0, 0};
    struct gi g;
    for (unsigned n = 0; gi_at(D, n, &g); n++) {
        u.mem_mask |= ((1u << g.p->placement_size) - 1) << g.start;
        u.compute += g.p->slices;
        u.of_row += g.row == row;
    }
    return u;
}

static int fits(const struct mk_mig_profile *p, struct usage u, unsigned start) {
    unsigned mask = ((1u << p->placement_size) - 1) << start;
    return !(u.mem_mask & mask) && u.compute + p->slices <= 7 && u.of_row < p->instances;
}

/* ---- profiles --------------------------------------------------------------------------------- */

static const struct mk_mig_profile *profile_by_index(const struct mk_device *D, unsigned profile) {
    for (unsigned r = 0; r < D->nmig_profile; r++)
        if (D->mig_profile[r].profile == profile && D->mig_profile[r].name[0]) return &D->mig_profile[r];
    return NULL;
}

#define FILL_PROFILE(info, p) do {                                                                  \
        (info)->id = (p)->id; (info)->sliceCount = (p)->slices; (info)->instanceCount = (p)->instances; \
        (info)->multiprocessorCount = (p)->sms; (info)->copyEngineCount = (p)->copy_engines;          \
        (info)->decoderCount = (p)->decoders; (info)->encoderCount = (p)->encoders;                   \
        (info)->jpegCount = (p)->jpegs; (info)->ofaCount = (p)->ofas; (info)->memorySizeMB = (p)->memory_mb; \
    } while (0)

MK_API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                        nvmlGpuInstanceProfileInfo_t *info) {
    DEV(device);
    NONNULL(info);
    if (D->mig_current != 1) NOTSUP(); /* MIG off: no profiles (nvidia-smi mig -lgip lists none) */
    if (profile >= MK_GI_PROFILE_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    const struct mk_mig_profile *p = profile_by_index(D, profile);
    if (!p) NOTSUP();
    memset(info, 0, sizeof *info);
    FILL_PROFILE(info, p);
    return NVML_SUCCESS;
}

/* a profile row into the caller's versioned info (v2 or v3, the version already checked) */
static void fill_profile_v(const struct mk_mig_profile *p, nvmlGpuInstanceProfileInfo_v2_t *info, unsigned version) {
    if (version == nvmlGpuInstanceProfileInfo_v3) {
        nvmlGpuInstanceProfileInfo_v3_t *v3 = (nvmlGpuInstanceProfileInfo_v3_t *)info;
        memset(v3, 0, sizeof *v3);
        v3->version = version;
        FILL_PROFILE(v3, p);
        snprintf(v3->name, sizeof v3->name, "MIG %s", p->name);
    } else {
        memset(info, 0, sizeof *info);
        info->version = version;
        FILL_PROFILE(info, p);
        snprintf(info->name, sizeof info->name, "MIG %s", p->name);
    }
}

#define PROFILE_INFO_VERSION(info, version) do {                                                    \
        (version) = (info)->version;                                                                \
        if ((version) != nvmlGpuInstanceProfileInfo_v2 && (version) != nvmlGpuInstanceProfileInfo_v3) \
            return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;                                            \
    } while (0)

MK_API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                         nvmlGpuInstanceProfileInfo_v2_t *info) {
    DEV(device);
    NONNULL(info);
    unsigned version;
    PROFILE_INFO_VERSION(info, version);
    if (D->mig_current != 1) NOTSUP(); /* MIG off: no profiles (nvidia-smi mig -lgip lists none) */
    if (profile >= MK_GI_PROFILE_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    const struct mk_mig_profile *p = profile_by_index(D, profile);
    if (!p) NOTSUP();
    fill_profile_v(p, info, version);
    return NVML_SUCCESS;
}

/* the same by profile id (19 for 1g.10gb) instead of NVML_GPU_INSTANCE_PROFILE_* */
MK_API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoByIdV(nvmlDevice_t device, unsigned int profileId,
                                                             nvmlGpuInstanceProfileInfo_v2_t *info) {
    DEV(device);
    NONNULL(info);
    unsigned version;
    PROFILE_INFO_VERSION(info, version);
    if (D->mig_current != 1) NOTSUP();
    unsigned row;
    const struct mk_mig_profile *p = profile_by_id(D, profileId, &row);
    if (!p) return NVML_ERROR_INVALID_ARGUMENT;
    fill_profile_v(p, info, version);
    return NVML_SUCCESS;
}

static nvmlReturn_t placements(nvmlDevice_t device, unsigned int profileId, nvmlGpuInstancePlacement_t *out,
                               unsigned int *count) {
    DEV(device);
    NONNULL(count);
    if (D->mig_current < 0) NOTSUP();
    unsigned row;
    const struct mk_mig_profile *p = profile_by_id(D, profileId, &row);
    if (!p) return NVML_ERROR_INVALID_ARGUMENT;
    if (out == NULL) { *count = p->placement_n; return NVML_SUCCESS; }
    if (*count < p->placement_n) { *count = p->placement_n; return NVML_ERROR_INSUFFICIENT_SIZE; }
    for (unsigned i = 0; i < p->placement_n; i++) out[i] = (nvmlGpuInstancePlacement_t){p->placements[i], p->placement_size};
    *count = p->placement_n;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device, unsigned int profileId,
                                                                  nvmlGpuInstancePlacement_t *placements_,
                                                                  unsigned int *count) {
    return placements(device, profileId, placements_, count);
}
MK_API nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements(nvmlDevice_t device, unsigned int profileId,
                                                               nvmlGpuInstancePlacement_t *placements_,
                                                               unsigned int *count) {
    return placements(device, profileId, placements_, count);
}

/* how many more instances of a profile fit, placing each at its lowest free start */
static unsigned remaining(const struct mk_device *D, unsigned row) {
    const struct mk_mig_profile *p = &D->mig_profile[row];
    struct usage u = usage_of(D, row);
    unsigned n = 0;
    for (unsigned i = 0; i < p->placement_n; i++)
        if (fits(p, u, p->placements[i])) {
            u.mem_mask |= ((1u << p->placement_size) - 1) << p->placements[i];
            u.compute += p->slices;
            u.of_row++;
            n++;
        }
    return n;
}

MK_API nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device, unsigned int profileId,
                                                              unsigned int *count) {
    DEV(device);
    NONNULL(count);
    nvmlReturn_t r = mig_on(D);
    if (r != NVML_SUCCESS) return r;
    unsigned row;
    if (!profile_by_id(D, profileId, &row)) return NVML_ERROR_INVALID_ARGUMENT;
    *count = remaining(D, row);
    return NVML_SUCCESS;
}

/* ---- GPU instances: created and destroyed in the setter record ---------------------------------- */

static void put_list(struct mk_setting *s, const char *key, const uint8_t *v, unsigned n) {
    s->key = key;
    size_t o = 0;
    s->value[0] = '\0';
    for (unsigned i = 0; i < n && o + 5 < sizeof s->value; i++)
        o += (size_t)snprintf(s->value + o, sizeof s->value - o, i ? ",%u" : "%u", v[i]);
}

/* `list` (n bytes of `width`-byte rows) with `row` inserted before the first row whose first `key` bytes
 * are greater, into `out`; its length.  The instances stay in id order, as the driver enumerates them:
 * GetGpuInstances, the compute instances and so the MIG device indices (the user guide's two 3g.20gb,
 * made as ids 2 then 1, are MIG devices 0 = GI 1 and 1 = GI 2). */
static unsigned insert_sorted(uint8_t *out, const uint8_t *list, unsigned n, const uint8_t *row, unsigned width,
                              unsigned key) {
    unsigned at = 0;
    while (at + width <= n && memcmp(list + at, row, key) <= 0) at += width;
    memcpy(out, list, at);
    memcpy(out + at, row, width);
    memcpy(out + at + width, list + at, n - at);
    return n + width;
}

/* an empty list is written as a removal: the state file's (empty) value stands again */
static void put_gis(struct mk_setting *s, const uint8_t *v, unsigned n) { put_list(s, "mig.gpu_instances", v, n); }
static void put_cis(struct mk_setting *s, const uint8_t *v, unsigned n) { put_list(s, "mig.compute_instances", v, n); }

struct create { unsigned profile_id; int start; /* -1: the driver's choice (auto_start) */ unsigned made; };

/* How many placements of every profile that are free now a GPU instance at mask would take away. */
static unsigned placements_taken(const struct mk_device *D, unsigned used, unsigned mask) {
    unsigned taken = 0;
    for (unsigned r = 0; r < D->nmig_profile; r++) {
        const struct mk_mig_profile *q = &D->mig_profile[r];
        for (unsigned i = 0; q->name[0] && i < q->placement_n; i++) {
            unsigned other = ((1u << q->placement_size) - 1) << q->placements[i];
            taken += !(used & other) && (mask & other);
        }
    }
    return taken;
}

/* Where the driver puts a GPU instance created without a placement: the free placement that takes the fewest
 * free placements of all profiles away, the lowest of equals.  This gives what real boards show: an empty
 * A100's first 1g at 6:1, seven 1g ids 13, 11, 12, 7, 8, 9, 10; three 2g ids 5, 3, 4; two 3g ids 2, 1; and
 * the MIG user guide's `-cgi 19,19,14,9` refused at the 3g (its "3g.20gb must be specified first"). */
static int auto_start(const struct mk_device *D, const struct mk_mig_profile *p, struct usage u) {
    int best = -1;
    unsigned best_taken = ~0u;
    for (unsigned i = 0; i < p->placement_n; i++) {
        if (!fits(p, u, p->placements[i])) continue;
        unsigned taken = placements_taken(D, u.mem_mask, ((1u << p->placement_size) - 1) << p->placements[i]);
        if (taken < best_taken || (taken == best_taken && p->placements[i] < (unsigned)best)) {
            best = (int)p->placements[i];
            best_taken = taken;
        }
    }
    return best;
}

static nvmlReturn_t create_gi(struct mk_snap *S, uint32_t dev, void *ctx, struct mk_setting *out, size_t *n) {
    struct create *c = ctx;
    if (!S || dev >= S->ndev) return NVML_ERROR_GPU_IS_LOST;
    const struct mk_device *D = &S->dev[dev];
    nvmlReturn_t r = mig_on(D);
    if (r != NVML_SUCCESS) return r;
    unsigned row;
    const struct mk_mig_profile *p = profile_by_id(D, c->profile_id, &row);
    if (!p) return NVML_ERROR_INVALID_ARGUMENT;
    if (D->mig_gi_n + 3 > sizeof D->mig_gi) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    struct usage u = usage_of(D, row);
    int start = -1;
    if (c->start < 0)
        start = auto_start(D, p, u);
    for (unsigned i = 0; c->start >= 0 && i < p->placement_n; i++)
        if ((unsigned)c->start == p->placements[i] && fits(p, u, p->placements[i])) start = c->start;
    if (start < 0) {
        for (unsigned i = 0; c->start >= 0 && i < p->placement_n; i++)
            if ((unsigned)c->start == p->placements[i]) return NVML_ERROR_INSUFFICIENT_RESOURCES;
        return c->start >= 0 ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_INSUFFICIENT_RESOURCES;
    }
    uint8_t gis[sizeof D->mig_gi];
    c->made = gi_id_of(p->placement_size, (unsigned)start);
    uint8_t add[3] = {(uint8_t)c->made, (uint8_t)row, (uint8_t)start};
    put_gis(&out[0], gis, insert_sorted(gis, D->mig_gi, D->mig_gi_n, add, 3, 1));
    *n = 1;
    return NVML_SUCCESS;
}

static nvmlReturn_t create(nvmlDevice_t device, struct create *c, nvmlGpuInstance_t *gpuInstance) {
    DEV(device);
    NONNULL(gpuInstance);
    nvmlReturn_t r = mig_on(D);
    if (r != NVML_SUCCESS) return r;
    if ((r = mk_settings_permitted()) != NVML_SUCCESS) return r;
    if ((r = mk_settings_apply(device->index, create_gi, c)) != NVML_SUCCESS) return r;
    *gpuInstance = gi_handle(device->index, c->made);
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profileId,
                                                nvmlGpuInstance_t *gpuInstance) {
    struct create c = {profileId, -1, 0};
    return create(device, &c, gpuInstance);
}

MK_API nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profileId,
                                                             const nvmlGpuInstancePlacement_t *placement,
                                                             nvmlGpuInstance_t *gpuInstance) {
    NONNULL(placement);
    if (placement->start > 7) return NVML_ERROR_INVALID_ARGUMENT;
    struct create c = {profileId, (int)placement->start, 0};
    return create(device, &c, gpuInstance);
}

/* a GPU-instance handle that still names an instance: its device and instance */
static nvmlReturn_t gi_resolve(nvmlGpuInstance_t h, struct mk_snap **s, struct mk_device **d, struct gi *g) {
    uintptr_t off = (uintptr_t)h - (uintptr_t)gi_handles;
    if (h == NULL || off % sizeof *h != 0 || off / sizeof *h >= MK_MAX_DEVICES * MK_GI_IDS)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = mk_dev(mk_handle(h->dev), s, d);
    if (r != NVML_SUCCESS) return r;
    return gi_find(*d, h->id, g) ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}
#define GI(h)                                                              \
    struct mk_snap *S; struct mk_device *D; struct gi G;                   \
    do { nvmlReturn_t r_ = gi_resolve((h), &S, &D, &G);                    \
         if (r_ != NVML_SUCCESS) return r_; } while (0);                   \
    (void)S

static int gi_has_ci(const struct mk_device *D, unsigned gi) {
    for (unsigned k = 0; k + 3 < D->mig_ci_n; k += 4)
        if (D->mig_ci[k] == gi) return 1;
    return 0;
}

static nvmlReturn_t destroy_gi(struct mk_snap *S, uint32_t dev, void *ctx, struct mk_setting *out, size_t *n) {
    unsigned id = *(unsigned *)ctx;
    if (!S || dev >= S->ndev) return NVML_ERROR_GPU_IS_LOST;
    const struct mk_device *D = &S->dev[dev];
    if (gi_has_ci(D, id)) return NVML_ERROR_IN_USE;
    uint8_t gis[sizeof D->mig_gi];
    unsigned k = 0, found = 0;
    for (unsigned i = 0; i + 2 < D->mig_gi_n; i += 3) {
        if (D->mig_gi[i] == id) { found = 1; continue; }
        memcpy(gis + k, D->mig_gi + i, 3);
        k += 3;
    }
    if (!found) return NVML_ERROR_INVALID_ARGUMENT;
    put_gis(&out[0], gis, k);
    *n = 1;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance) {
    GI(gpuInstance);
    nvmlReturn_t r = mk_settings_permitted();
    if (r != NVML_SUCCESS) return r;
    unsigned id = G.id;
    return mk_settings_apply(gpuInstance->dev, destroy_gi, &id);
}

MK_API nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId,
                                              nvmlGpuInstance_t *gpuInstances, unsigned int *count) {
    DEV(device);
    NONNULL(count);
    nvmlReturn_t r = mig_on(D);
    if (r != NVML_SUCCESS) return r;
    unsigned row;
    if (!profile_by_id(D, profileId, &row)) return NVML_ERROR_INVALID_ARGUMENT;
    /* count is output only: the array holds the profile's instanceCount handles (nvml.h) */
    NONNULL(gpuInstances);
    unsigned k = 0;
    struct gi g;
    for (unsigned n = 0; gi_at(D, n, &g); n++)
        if (g.row == row) gpuInstances[k++] = gi_handle(device->index, g.id);
    *count = k;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t *gpuInstance) {
    DEV(device);
    NONNULL(gpuInstance);
    nvmlReturn_t r = mig_on(D);
    if (r != NVML_SUCCESS) return r;
    struct gi g;
    if (!gi_find(D, id, &g)) return NVML_ERROR_NOT_FOUND;
    *gpuInstance = gi_handle(device->index, id);
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info) {
    GI(gpuInstance);
    NONNULL(info);
    info->device = mk_handle(gpuInstance->dev);
    info->id = G.id;
    info->profileId = G.p->id;
    info->placement = (nvmlGpuInstancePlacement_t){G.start, G.p->placement_size};
    return NVML_SUCCESS;
}

/* ---- compute-instance profiles: sizes 1, 2, 3, 4, 7 slices up to the GPU instance's (no 3 on 4) --- */

static int ci_profile_ok(const struct mk_mig_profile *gp, unsigned profile) {
    if (profile > NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE) return 0;
    unsigned s = mk_ci_slices(profile), n = gp->slices;
    return s <= n && !(n == 4 && s == 3);
}

/* A compute-instance profile is named after its GPU instance's slices and memory, without the media extensions
 * (`nvidia-smi mig -cgi 20 -C` on a real A100 80GB: GPU instance "MIG 1g.10gb+me", compute instance "MIG 1g.10gb"). */
static void ci_name(char *buf, size_t len, const struct mk_mig_profile *gp, unsigned s) {
    int base = (int)strcspn(gp->name, "+");
    if (s == gp->slices) snprintf(buf, len, "MIG %.*s", base, gp->name);
    else snprintf(buf, len, "MIG %uc.%.*s", s, base, gp->name);
}

MK_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                                  unsigned int engProfile,
                                                                  nvmlComputeInstanceProfileInfo_v2_t *info) {
    GI(gpuInstance);
    NONNULL(info);
    unsigned version = info->version; /* v3 is v2 and a capabilities word after it */
    if (version != nvmlComputeInstanceProfileInfo_v2 && version != nvmlComputeInstanceProfileInfo_v3)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (engProfile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED) return NVML_ERROR_INVALID_ARGUMENT;
    if (profile >= MK_CI_PROFILE_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    if (!ci_profile_ok(G.p, profile)) NOTSUP();
    unsigned s = mk_ci_slices(profile);
    if (version == nvmlComputeInstanceProfileInfo_v3) ((nvmlComputeInstanceProfileInfo_v3_t *)info)->capabilities = 0;
    memset(info, 0, sizeof *info);
    info->version = version;
    info->id = profile;
    info->sliceCount = s;
    info->instanceCount = G.p->slices / s;
    info->multiprocessorCount = mk_ci_sms(D, G.p, s);
    info->sharedCopyEngineCount = G.p->copy_engines;
    info->sharedDecoderCount = G.p->decoders;
    info->sharedEncoderCount = G.p->encoders;
    info->sharedJpegCount = G.p->jpegs;
    info->sharedOfaCount = G.p->ofas;
    ci_name(info->name, sizeof info->name, G.p, s);
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                                 unsigned int engProfile,
                                                                 nvmlComputeInstanceProfileInfo_t *info) {
    NONNULL(info);
    nvmlComputeInstanceProfileInfo_v2_t v2 = {.version = nvmlComputeInstanceProfileInfo_v2};
    nvmlReturn_t r = nvmlGpuInstanceGetComputeInstanceProfileInfoV(gpuInstance, profile, engProfile, &v2);
    if (r != NVML_SUCCESS) return r;
    *info = (nvmlComputeInstanceProfileInfo_t){v2.id, v2.sliceCount, v2.instanceCount, v2.multiprocessorCount,
                                               v2.sharedCopyEngineCount, v2.sharedDecoderCount,
                                               v2.sharedEncoderCount, v2.sharedJpegCount, v2.sharedOfaCount};
    return NVML_SUCCESS;
}

/* compute slices of GPU instance `gi` in use */
static unsigned ci_used(const struct mk_device *D, unsigned gi) {
    unsigned mask = 0;
    for (unsigned k = 0; k + 3 < D->mig_ci_n; k += 4)
        if (D->mig_ci[k] == gi) mask |= ((1u << mk_ci_slices(D->mig_ci[k + 2])) - 1) << D->mig_ci[k + 3];
    return mask;
}

static int ci_free_start(const struct mk_device *D, const struct gi *g, unsigned profile, int want) {
    unsigned s = mk_ci_slices(profile), used = ci_used(D, g->id);
    for (unsigned start = 0; start + s <= g->p->slices; start += s)
        if ((want < 0 || (unsigned)want == start) && !(used & (((1u << s) - 1) << start))) return (int)start;
    return -1;
}

MK_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t gpuInstance,
                                                                       unsigned int profileId, unsigned int *count) {
    GI(gpuInstance);
    NONNULL(count);
    if (!ci_profile_ok(G.p, profileId)) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned s = mk_ci_slices(profileId), used = ci_used(D, G.id), n = 0;
    for (unsigned start = 0; start + s <= G.p->slices; start += s)
        if (!(used & (((1u << s) - 1) << start))) n++;
    *count = n;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlGpuInstanceGetComputeInstancePossiblePlacements(nvmlGpuInstance_t gpuInstance,
                                                                        unsigned int profileId,
                                                                        nvmlComputeInstancePlacement_t *placements_,
                                                                        unsigned int *count) {
    GI(gpuInstance);
    NONNULL(count);
    if (!ci_profile_ok(G.p, profileId)) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned s = mk_ci_slices(profileId), n = G.p->slices / s;
    if (placements_ == NULL) { *count = n; return NVML_SUCCESS; }
    if (*count < n) { *count = n; return NVML_ERROR_INSUFFICIENT_SIZE; }
    for (unsigned i = 0; i < n; i++) placements_[i] = (nvmlComputeInstancePlacement_t){i * s, s};
    *count = n;
    return NVML_SUCCESS;
}

struct ci_create { unsigned gi, profile; int start; unsigned made; };

static nvmlReturn_t create_ci(struct mk_snap *S, uint32_t dev, void *ctx, struct mk_setting *out, size_t *n) {
    struct ci_create *c = ctx;
    if (!S || dev >= S->ndev) return NVML_ERROR_GPU_IS_LOST;
    const struct mk_device *D = &S->dev[dev];
    struct gi g;
    if (!gi_find(D, c->gi, &g)) return NVML_ERROR_INVALID_ARGUMENT;
    if (!ci_profile_ok(g.p, c->profile)) return NVML_ERROR_INVALID_ARGUMENT;
    if (D->mig_ci_n + 4 > sizeof D->mig_ci) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    int start = ci_free_start(D, &g, c->profile, c->start);
    if (start < 0) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    unsigned id = 0;
    for (int taken = 1; taken && id < MK_MAX_CI;) { /* the lowest free id in the GPU instance */
        taken = 0;
        for (unsigned k = 0; k + 3 < D->mig_ci_n; k += 4)
            if (D->mig_ci[k] == c->gi && D->mig_ci[k + 1] == id) { taken = 1; id++; break; }
    }
    uint8_t cis[sizeof D->mig_ci];
    uint8_t add[4] = {(uint8_t)c->gi, (uint8_t)id, (uint8_t)c->profile, (uint8_t)start};
    put_cis(&out[0], cis, insert_sorted(cis, D->mig_ci, D->mig_ci_n, add, 4, 2));
    *n = 1;
    c->made = id;
    return NVML_SUCCESS;
}

static nvmlReturn_t ci_create(nvmlGpuInstance_t gpuInstance, struct ci_create *c, nvmlComputeInstance_t *out) {
    GI(gpuInstance);
    NONNULL(out);
    if (!ci_profile_ok(G.p, c->profile)) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = mk_settings_permitted();
    if (r != NVML_SUCCESS) return r;
    c->gi = G.id;
    if ((r = mk_settings_apply(gpuInstance->dev, create_ci, c)) != NVML_SUCCESS) return r;
    *out = ci_handle(gpuInstance->dev, G.id, c->made);
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                         nvmlComputeInstance_t *computeInstance) {
    struct ci_create c = {0, profileId, -1, 0};
    return ci_create(gpuInstance, &c, computeInstance);
}

MK_API nvmlReturn_t nvmlGpuInstanceCreateComputeInstanceWithPlacement(nvmlGpuInstance_t gpuInstance,
                                                                      unsigned int profileId,
                                                                      const nvmlComputeInstancePlacement_t *placement,
                                                                      nvmlComputeInstance_t *computeInstance) {
    NONNULL(placement);
    if (placement->start > 7) return NVML_ERROR_INVALID_ARGUMENT;
    struct ci_create c = {0, profileId, (int)placement->start, 0};
    return ci_create(gpuInstance, &c, computeInstance);
}

/* a compute-instance handle that still names an instance: its record quad's position */
static nvmlReturn_t ci_resolve(nvmlComputeInstance_t h, struct mk_snap **s, struct mk_device **d, unsigned *at) {
    uintptr_t off = (uintptr_t)h - (uintptr_t)ci_handles;
    if (h == NULL || off % sizeof *h != 0 || off / sizeof *h >= MK_MAX_DEVICES * MK_GI_IDS * MK_MAX_CI)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = mk_dev(mk_handle(h->dev), s, d);
    if (r != NVML_SUCCESS) return r;
    for (unsigned k = 0; k + 3 < (*d)->mig_ci_n; k += 4)
        if ((*d)->mig_ci[k] == h->gi && (*d)->mig_ci[k + 1] == h->id) { *at = k; return NVML_SUCCESS; }
    return NVML_ERROR_INVALID_ARGUMENT;
}

struct ci_ref { unsigned gi, id; };

static nvmlReturn_t destroy_ci(struct mk_snap *S, uint32_t dev, void *ctx, struct mk_setting *out, size_t *n) {
    const struct ci_ref *c = ctx;
    if (!S || dev >= S->ndev) return NVML_ERROR_GPU_IS_LOST;
    const struct mk_device *D = &S->dev[dev];
    uint8_t cis[sizeof D->mig_ci];
    unsigned k = 0, found = 0;
    for (unsigned i = 0; i + 3 < D->mig_ci_n; i += 4) {
        if (D->mig_ci[i] == c->gi && D->mig_ci[i + 1] == c->id) { found = 1; continue; }
        memcpy(cis + k, D->mig_ci + i, 4);
        k += 4;
    }
    if (!found) return NVML_ERROR_INVALID_ARGUMENT;
    put_cis(&out[0], cis, k);
    *n = 1;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance) {
    struct mk_snap *S;
    struct mk_device *D;
    unsigned at;
    nvmlReturn_t r = ci_resolve(computeInstance, &S, &D, &at);
    if (r != NVML_SUCCESS) return r;
    if ((r = mk_settings_permitted()) != NVML_SUCCESS) return r;
    struct ci_ref c = {computeInstance->gi, computeInstance->id};
    return mk_settings_apply(computeInstance->dev, destroy_ci, &c);
}

MK_API nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                       nvmlComputeInstance_t *computeInstances, unsigned int *count) {
    GI(gpuInstance);
    NONNULL(count);
    if (profileId >= MK_CI_PROFILE_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    NONNULL(computeInstances); /* count is output only, as for GPU instances */
    unsigned k = 0;
    for (unsigned i = 0; i + 3 < D->mig_ci_n; i += 4)
        if (D->mig_ci[i] == G.id && D->mig_ci[i + 2] == profileId)
            computeInstances[k++] = ci_handle(gpuInstance->dev, G.id, D->mig_ci[i + 1]);
    *count = k;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance, unsigned int id,
                                                          nvmlComputeInstance_t *computeInstance) {
    GI(gpuInstance);
    NONNULL(computeInstance);
    for (unsigned i = 0; i + 3 < D->mig_ci_n; i += 4)
        if (D->mig_ci[i] == G.id && D->mig_ci[i + 1] == id) {
            *computeInstance = ci_handle(gpuInstance->dev, G.id, id);
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

MK_API nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_t *info) {
    struct mk_snap *S;
    struct mk_device *D;
    unsigned at;
    nvmlReturn_t r = ci_resolve(computeInstance, &S, &D, &at);
    if (r != NVML_SUCCESS) return r;
    NONNULL(info);
    info->device = mk_handle(computeInstance->dev);
    info->gpuInstance = gi_handle(computeInstance->dev, computeInstance->gi);
    info->id = computeInstance->id;
    info->profileId = D->mig_ci[at + 2];
    info->placement = (nvmlComputeInstancePlacement_t){D->mig_ci[at + 3], mk_ci_slices(D->mig_ci[at + 2])};
    return NVML_SUCCESS;
}

/* the export older binaries call: its struct ends before `placement` (added with _v2), so that stays unwritten */
MK_API nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_t *info) {
    NONNULL(info);
    nvmlComputeInstanceInfo_t full;
    nvmlReturn_t r = nvmlComputeInstanceGetInfo_v2(computeInstance, &full);
    if (r != NVML_SUCCESS) return r;
    memcpy(info, &full, offsetof(nvmlComputeInstanceInfo_t, placement));
    return NVML_SUCCESS;
}

/* ---- MIG devices: one per compute instance, in the record's order ----------------------------- */

MK_API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *migDevice) {
    DEV(device);
    NONNULL(migDevice);
    if (D->mig_current <= 0) return NVML_ERROR_INVALID_ARGUMENT;
    if ((size_t)index * 4 + 3 >= D->mig_ci_n) return NVML_ERROR_NOT_FOUND;
    *migDevice = mk_mig_handle(device->index, D->mig_ci[index * 4], D->mig_ci[index * 4 + 1]);
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice) {
    NONNULL(isMigDevice);
    struct mk_mig m;
    if (mk_is_mig_handle(device)) {
        nvmlReturn_t r = mk_mig_dev(device, &m);
        if (r != NVML_SUCCESS) return r;
        *isMigDevice = 1;
        return NVML_SUCCESS;
    }
    DEV(device);
    *isMigDevice = 0;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device) {
    NONNULL(device);
    struct mk_mig m;
    nvmlReturn_t r = mk_mig_dev(migDevice, &m);
    if (r != NVML_SUCCESS) return r;
    *device = mk_handle(migDevice->index);
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    NONNULL(id);
    struct mk_mig m;
    nvmlReturn_t r = mk_mig_dev(device, &m);
    if (r != NVML_SUCCESS) return r;
    *id = m.gi;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) {
    NONNULL(id);
    struct mk_mig m;
    nvmlReturn_t r = mk_mig_dev(device, &m);
    if (r != NVML_SUCCESS) return r;
    *id = m.ci;
    return NVML_SUCCESS;
}
