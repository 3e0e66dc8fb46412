/* State file reader: framing, descriptor-table parser, snapshot publication.
 *
 * Format (documented in native/README.md):
 *   mokka-nvml-state 1
 *   key=value            (one per line; '#' comments and empty lines allowed)
 *   end
 * Keys: system.<k>, device.<i>.<k>, device.<i>.nvlink.<l>.<k>,
 *       device.<i>.process.<p>.<k>, event.<n>.<k>, pcifn.<n>.<k>.  Unknown keys are ignored,
 * malformed lines reject the whole file.  Values are decoded by a table of
 * {key, type, offset} descriptors; there is no per-key code.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O2") /* the library is built -Os for a small footprint; the parser runs at init */
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dynamic.h"
#include "failure.h"
#include "feed.h"
#include "levels.h"
#include "log.h"
#include "state.h"
#include "visible.h"

enum { T_U32, T_I32, T_U64, T_STR, T_U8LIST, T_CPUSET };

struct desc {
    const char *key;
    uint8_t type;
    uint32_t off;
    uint32_t size;   /* T_STR: buffer size; T_U8LIST: max entries */
    uint32_t aux;    /* T_U8LIST: offset of the count field; T_CPUSET: offset of the "set" flag */
    uint64_t max;    /* T_U32, T_U64: the highest value taken (0: the type's) */
};

#include "state_keys.inc" /* sys_desc, dev_desc, link_desc, proc_desc, migprofile_desc, event_desc, pcifn_desc */

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* Key lookup: one open-addressing hash table over all seven descriptor tables, built once. */
enum { SC_SYS, SC_DEV, SC_LINK, SC_PROC, SC_MIGPROFILE, SC_EVENT, SC_PCIFN };
#define HT_SIZE 512u /* power of two, about 2x the number of descriptors */
static uint16_t ht[HT_SIZE]; /* 0 = empty, else 1 + (scope << 12 | index) */
static const struct desc *const tables[] = {sys_desc, dev_desc, link_desc, proc_desc, migprofile_desc, event_desc,
                                            pcifn_desc};
static pthread_once_t ht_once = PTHREAD_ONCE_INIT;

/* cheap hash: length, first and last 8 bytes (keys are short, their ends differ) */
static uint32_t key_hash(unsigned scope, const char *k, size_t n) {
    uint64_t a = 0, b = 0;
    if (n >= 8) {
        memcpy(&a, k, 8);
        memcpy(&b, k + n - 8, 8);
    } else {
        memcpy(&a, k, n);
    }
    uint64_t h = (a * 0x9E3779B97F4A7C15ull) ^ (b * 0xC2B2AE3D27D4EB4Full) ^ (n * 0x165667B19E3779F9ull) ^ scope;
    return (uint32_t)(h >> 29) ^ (uint32_t)h;
}

static void ht_add(unsigned scope, const struct desc *t, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t h = key_hash(scope, t[i].key, strlen(t[i].key)) & (HT_SIZE - 1);
        while (ht[h]) h = (h + 1) & (HT_SIZE - 1);
        ht[h] = (uint16_t)(1 + (scope << 12 | i));
    }
}

static void build_tables(void) {
    ht_add(SC_SYS, sys_desc, N(sys_desc));
    ht_add(SC_DEV, dev_desc, N(dev_desc));
    ht_add(SC_LINK, link_desc, N(link_desc));
    ht_add(SC_PROC, proc_desc, N(proc_desc));
    ht_add(SC_MIGPROFILE, migprofile_desc, N(migprofile_desc));
    ht_add(SC_EVENT, event_desc, N(event_desc));
    ht_add(SC_PCIFN, pcifn_desc, N(pcifn_desc));
}

static const struct desc *lookup(unsigned scope, const char *key, size_t klen) {
    uint32_t h = key_hash(scope, key, klen) & (HT_SIZE - 1);
    while (ht[h]) {
        unsigned e = ht[h] - 1u;
        if (e >> 12 == scope) {
            const struct desc *d = &tables[scope][e & 0xfff];
            if (strncmp(d->key, key, klen) == 0 && d->key[klen] == '\0') return d;
        }
        h = (h + 1) & (HT_SIZE - 1);
    }
    return NULL;
}

/* parse unsigned decimal or 0x hex; whole string must be consumed */
static int parse_u64(const char *v, size_t len, uint64_t *out) {
    uint64_t x = 0;
    size_t i = 0;
    if (len == 0) return -1;
    if (len > 2 && v[0] == '0' && (v[1] == 'x' || v[1] == 'X')) {
        if (len > 18) return -1;
        for (i = 2; i < len; i++) {
            char c = v[i];
            int d;
            if (c >= '0' && c <= '9') d = c - '0';
            else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
            else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
            else return -1;
            x = (x << 4) | (uint64_t)d;
        }
    } else {
        if (len > 20) return -1;
        for (i = 0; i < len; i++) {
            if (v[i] < '0' || v[i] > '9') return -1;
            uint64_t d = (uint64_t)(v[i] - '0');
            if (x > (UINT64_MAX - d) / 10) return -1;
            x = x * 10 + d;
        }
    }
    *out = x;
    return 0;
}

static int parse_cpuset(const char *v, size_t len, uint64_t *set) {
    memset(set, 0, sizeof(uint64_t) * MK_CPUSET_WORDS);
    size_t i = 0;
    if (len == 0) return 0;
    while (i <= len) {
        size_t j = i;
        while (j < len && v[j] != ',') j++;
        size_t dash = i;
        while (dash < j && v[dash] != '-') dash++;
        uint64_t a, b;
        if (parse_u64(v + i, dash - i, &a)) return -1;
        if (dash < j) { if (parse_u64(v + dash + 1, j - dash - 1, &b)) return -1; }
        else b = a;
        if (a > b || b >= MK_CPUSET_WORDS * 64) return -1;
        for (uint64_t c = a; c <= b; c++) set[c / 64] |= 1ull << (c % 64);
        i = j + 1;
    }
    return 0;
}

static int store(void *base, const struct desc *d, const char *v, size_t len) {
    char *p = (char *)base + d->off;
    uint64_t x;
    switch (d->type) {
    case T_U32:
        if (parse_u64(v, len, &x) || x > UINT32_MAX || (d->max && x > d->max)) return -1;
        *(uint32_t *)p = (uint32_t)x;
        return 0;
    case T_I32: {
        int neg = len > 0 && v[0] == '-';
        if (parse_u64(v + neg, len - (size_t)neg, &x) || x > (neg ? 2147483648ull : 2147483647ull)) return -1;
        *(int32_t *)p = neg ? (int32_t)(-(int64_t)x) : (int32_t)x;
        return 0;
    }
    case T_U64:
        if (parse_u64(v, len, &x) || (d->max && x > d->max)) return -1;
        *(uint64_t *)p = x;
        return 0;
    case T_STR:
        if (len >= d->size) return -1;
        memcpy(p, v, len);
        p[len] = '\0';
        return 0;
    case T_U8LIST: {
        uint8_t *arr = (uint8_t *)p;
        uint32_t n = 0;
        size_t i = 0;
        if (len > 0) {
            while (i <= len) {
                size_t j = i;
                while (j < len && v[j] != ',') j++;
                if (n >= d->size || parse_u64(v + i, j - i, &x) || x > 255) return -1;
                arr[n++] = (uint8_t)x;
                i = j + 1;
            }
        }
        *(uint32_t *)((char *)base + d->aux) = n;
        return 0;
    }
    case T_CPUSET:
        if (parse_cpuset(v, len, (uint64_t *)p)) return -1;
        *(uint32_t *)((char *)base + d->aux) = 1;
        return 0;
    }
    return -1;
}

static void device_defaults(struct mk_device *d) {
    memset(d, 0, sizeof(*d));
    d->mig_current = d->mig_pending = -1;
    d->numa_node = d->gpu_numa_node = d->root_complex = d->pcie_switch = -1;
    d->auto_boost = -1;
    d->host_vgpu_mode = -1;
    d->driver_model = -1;
    d->addressing_mode = d->sparse_mode = -1;
    d->gom_current = d->gom_pending = -1;
    d->fan_target = -1;
    d->ecc_supported = 1;
    d->accounting_buffer = 4000;
    d->brand = NVML_BRAND_NVIDIA;
    d->pci_base_class = 3;
    d->pci_sub_class = 2;
    d->pstate = 0;
    d->gsp_mode = d->gsp_default_mode = 1;
}

void mk_snap_free(struct mk_snap *s) {
    if (!s) return;
    for (uint32_t i = 0; s->dev && i < s->dev_cap; i++) free(s->dev[i].proc);
    free(s->dev);
    free(s->events);
    free(s->pcifn);
    free(s);
}

/* read a small unsigned index followed by '.' */
static const char *read_index(const char *k, const char *end, uint32_t *idx) {
    uint64_t x = 0;
    const char *p = k;
    while (p < end && *p >= '0' && *p <= '9') {
        x = x * 10 + (uint64_t)(*p - '0');
        if (x > 1000000) return NULL;
        p++;
    }
    if (p == k || p >= end || *p != '.' || (p - k > 1 && k[0] == '0')) return NULL;
    *idx = (uint32_t)x;
    return p + 1;
}

static const uint8_t key_char[256] = {
    ['.'] = 1, ['_'] = 1, ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1,
    ['8'] = 1, ['9'] = 1, ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1,
    ['i'] = 1, ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1, ['q'] = 1, ['r'] = 1,
    ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1, ['y'] = 1, ['z'] = 1,
};

#define FAIL(...) do { snprintf(err, errlen, __VA_ARGS__); goto fail; } while (0)

unsigned mk_ci_slices(unsigned profile) {
    static const unsigned slices[MK_CI_PROFILE_COUNT] = {1, 2, 3, 4, 7, 8, 6, 1}; /* NVML_COMPUTE_INSTANCE_PROFILE_* */
    return profile < MK_CI_PROFILE_COUNT ? slices[profile] : 0;
}

/* The MIG profile rows and the partition (mig.gpu_instances, mig.compute_instances) against every table and
 * caller's array they index: handle tables of MK_GI_IDS x MK_MAX_CI, a GPU's memory and compute slices, and
 * GetGpuInstances/GetComputeInstances, whose callers size their arrays by the profile's instanceCount. */
#define BAD(...) do { snprintf(err, errlen, __VA_ARGS__); return -1; } while (0)
static int check_mig(const struct mk_device *d, uint32_t i, char *err, size_t errlen) {
    for (uint32_t r = 0; r < d->nmig_profile; r++) {
        const struct mk_mig_profile *p = &d->mig_profile[r];
        if (p->placement_size > MK_MIG_MEM_SLICES || p->slices > MK_MIG_SLICES)
            BAD("device %u: mig_profile.%u wider than the GPU", i, r);
        for (uint32_t k = 0; k < p->placement_n; k++)
            if (p->placements[k] + p->placement_size > MK_MIG_MEM_SLICES)
                BAD("device %u: mig_profile.%u.placements past slice %d", i, r, MK_MIG_MEM_SLICES);
    }
    if (d->mig_gi_n % 3) BAD("device %u: mig.gpu_instances is not id,row,start triples", i);
    if (d->mig_ci_n % 4) BAD("device %u: mig.compute_instances is not gi,id,profile,start quadruples", i);
    unsigned mem = 0, of_row[MK_MAX_MIG_PROFILES] = {0}, ids = 0;
    for (uint32_t g = 0; g < d->mig_gi_n; g += 3) {
        unsigned id = d->mig_gi[g], row = d->mig_gi[g + 1], start = d->mig_gi[g + 2];
        if (id >= MK_GI_IDS || ids >> id & 1) BAD("device %u: GPU instance id %u out of range or repeated", i, id);
        ids |= 1u << id;
        if (row >= d->nmig_profile || !d->mig_profile[row].name[0]) BAD("device %u: GPU instance %u: no profile row %u", i, id, row);
        const struct mk_mig_profile *p = &d->mig_profile[row];
        int placed = 0;
        for (uint32_t k = 0; k < p->placement_n; k++) placed |= p->placements[k] == start;
        unsigned mask = ((1u << p->placement_size) - 1) << (start & 7);
        if (!placed || (mem & mask)) BAD("device %u: GPU instance %u: start %u not a free placement", i, id, start);
        mem |= mask;
        if (++of_row[row] > p->instances) BAD("device %u: more GPU instances of profile row %u than its instances", i, row);
    }
    unsigned used[MK_GI_IDS] = {0}, cids[MK_GI_IDS] = {0};
    for (uint32_t c = 0; c < d->mig_ci_n; c += 4) {
        unsigned gi = d->mig_ci[c], id = d->mig_ci[c + 1], s = mk_ci_slices(d->mig_ci[c + 2]), start = d->mig_ci[c + 3];
        if (gi >= MK_GI_IDS || !(ids >> gi & 1)) BAD("device %u: compute instance of no GPU instance %u", i, gi);
        if (id >= MK_MAX_CI || cids[gi] >> id & 1) BAD("device %u: compute instance id %u out of range or repeated", i, id);
        cids[gi] |= 1u << id;
        unsigned slices = 0;
        for (uint32_t g = 0; g < d->mig_gi_n; g += 3)
            if (d->mig_gi[g] == gi) slices = d->mig_profile[d->mig_gi[g + 1]].slices;
        unsigned mask = s && start + s <= slices ? ((1u << s) - 1) << start : 0;
        if (!mask || (used[gi] & mask)) BAD("device %u: compute instance %u.%u: bad profile or slices", i, gi, id);
        used[gi] |= mask;
    }
    return 0;
}

/* The checks of one GPU's values, whichever file gave them: the state file, or the setter record over it. */
static int check_device(struct mk_device *d, uint32_t i, char *err, size_t errlen) {
    if (d->bus_id[0]) {
        unsigned dom, bus, dev, fn;
        char tail;
        if (sscanf(d->bus_id, "%x:%x:%x.%x%c", &dom, &bus, &dev, &fn, &tail) != 4 || bus > 255 || dev > 31 || fn > 7)
            BAD("device %u: bad pci.bus_id '%s'", i, d->bus_id);
        d->pci_domain = dom; d->pci_bus = bus; d->pci_dev = dev; d->pci_func = fn;
    }
    if (d->nvlink_count > MK_MAX_LINKS) BAD("device %u: nvlink.count > %d", i, MK_MAX_LINKS);
    for (uint32_t p = 0; p < d->nproc; p++)
        if (d->proc[p].pid == 0) BAD("device %u: process %u has no pid", i, p);
    return check_mig(d, i, err, errlen);
}

/* The framing both files share (state file and setter record): no NUL, the magic line, '#' comments and
 * empty lines, the closing 'end' and nothing after it, key=value lines with keys of [a-z0-9_.]. */
struct lines { const char *buf, *magic; size_t len, pos; unsigned lineno; int seen_end; };

/* 1: the next key=value line (k..eq its key, eq + 1 its value, vlen long); 0: the whole file read; -1: err says */
static int next_line(struct lines *L, const char **k, const char **eq, size_t *vlen, char *err, size_t errlen) {
    if (L->lineno == 0 && memchr(L->buf, '\0', L->len)) BAD("NUL byte in file");
    while (L->pos < L->len) {
        const char *line = L->buf + L->pos;
        const char *nl = memchr(line, '\n', L->len - L->pos);
        size_t ll = nl ? (size_t)(nl - line) : L->len - L->pos;
        L->pos += ll + (nl ? 1 : 0);
        if (++L->lineno == 1) {
            if (ll != strlen(L->magic) || memcmp(line, L->magic, ll) != 0) BAD("line 1: expected '%s'", L->magic);
            continue;
        }
        if (L->seen_end) BAD("line %u: content after 'end'", L->lineno);
        if (ll == 0 || line[0] == '#') continue;
        if (ll == 3 && memcmp(line, "end", 3) == 0) { L->seen_end = 1; continue; }
        *k = line;
        *eq = memchr(line, '=', ll);
        if (!*eq || *eq == line) BAD("line %u: expected key=value", L->lineno);
        for (const char *c = line; c < *eq; c++)
            if (!key_char[(uint8_t)*c]) BAD("line %u: bad character in key", L->lineno);
        *vlen = ll - (size_t)(*eq + 1 - line);
        return 1;
    }
    if (L->lineno == 0) BAD("empty file");
    if (!L->seen_end) BAD("truncated (no 'end' line)");
    return 0;
}

int mk_parse(const char *buf, size_t len, struct mk_snap **out, char *err, size_t errlen) {
    pthread_once(&ht_once, build_tables);
    struct mk_snap *s = calloc(1, sizeof(*s));
    uint32_t cap = 0;
    struct lines L = {buf, MK_STATE_MAGIC, len, 0, 0, 0};
    const char *k, *kend;
    size_t vlen;
    int more;
    if (!s) { snprintf(err, errlen, "out of memory"); return -1; }
    s->cuda_version = 12040;

    while ((more = next_line(&L, &k, &kend, &vlen, err, errlen)) > 0) {
        const char *v = kend + 1;
        unsigned lineno = L.lineno;
        size_t klen = (size_t)(kend - k);
        void *base = NULL;
        const struct desc *d = NULL;
        if (klen > 7 && memcmp(k, "system.", 7) == 0) {
            base = s;
            d = lookup(SC_SYS, k + 7, klen - 7);
        } else if (klen > 7 && memcmp(k, "device.", 7) == 0) {
            uint32_t idx;
            const char *r = read_index(k + 7, kend, &idx);
            if (!r) FAIL("line %u: bad device index", lineno);
            if (idx >= MK_MAX_DEVICES) FAIL("line %u: device index %u >= %u", lineno, idx, MK_MAX_DEVICES);
            if (idx >= cap) {
                uint32_t ncap = cap ? cap : 8;
                while (ncap <= idx) ncap *= 2;
                if (ncap > MK_MAX_DEVICES) ncap = MK_MAX_DEVICES;
                struct mk_device *nd = realloc(s->dev, sizeof(struct mk_device) * ncap);
                if (!nd) FAIL("out of memory");
                for (uint32_t i = cap; i < ncap; i++) device_defaults(&nd[i]);
                s->dev = nd;
                cap = ncap;
                s->dev_cap = cap;
            }
            struct mk_device *dv = &s->dev[idx];
            dv->present = 1;
            if (idx + 1 > s->ndev) s->ndev = idx + 1;
            size_t rl = (size_t)(kend - r);
            uint32_t sub;
            const char *r2;
            if (rl > 7 && memcmp(r, "nvlink.", 7) == 0 && r[7] >= '0' && r[7] <= '9') {
                r2 = read_index(r + 7, kend, &sub);
                if (!r2 || sub >= MK_MAX_LINKS) FAIL("line %u: bad nvlink index", lineno);
                base = &dv->link[sub];
                d = lookup(SC_LINK, r2, (size_t)(kend - r2));
            } else if (rl > 8 && memcmp(r, "process.", 8) == 0) {
                r2 = read_index(r + 8, kend, &sub);
                if (!r2 || sub >= MK_MAX_PROCS) FAIL("line %u: bad process index", lineno);
                if (sub >= dv->proc_cap) {
                    uint32_t ncap = dv->proc_cap ? dv->proc_cap * 2 : 4;
                    while (ncap <= sub) ncap *= 2;
                    struct mk_proc *np = realloc(dv->proc, sizeof(struct mk_proc) * ncap);
                    if (!np) FAIL("out of memory");
                    memset(np + dv->proc_cap, 0, sizeof(struct mk_proc) * (ncap - dv->proc_cap));
                    dv->proc = np;
                    dv->proc_cap = ncap;
                }
                if (sub + 1 > dv->nproc) dv->nproc = sub + 1;
                base = &dv->proc[sub];
                d = lookup(SC_PROC, r2, (size_t)(kend - r2));
            } else if (rl > 12 && memcmp(r, "mig_profile.", 12) == 0) {
                r2 = read_index(r + 12, kend, &sub);
                if (!r2 || sub >= MK_MAX_MIG_PROFILES) FAIL("line %u: bad mig_profile index", lineno);
                if (sub + 1 > dv->nmig_profile) dv->nmig_profile = sub + 1;
                base = &dv->mig_profile[sub];
                d = lookup(SC_MIGPROFILE, r2, (size_t)(kend - r2));
            } else {
                base = dv;
                d = lookup(SC_DEV, r, rl);
            }
        } else if (klen > 6 && memcmp(k, "event.", 6) == 0) {
            uint32_t idx;
            const char *r = read_index(k + 6, kend, &idx);
            if (!r || idx >= MK_MAX_EVENTS) FAIL("line %u: bad event index", lineno);
            if (idx >= s->event_cap) {
                uint32_t ncap = s->event_cap ? s->event_cap * 2 : 8;
                while (ncap <= idx) ncap *= 2;
                struct mk_event *ne = realloc(s->events, sizeof(struct mk_event) * ncap);
                if (!ne) FAIL("out of memory");
                memset(ne + s->event_cap, 0, sizeof(struct mk_event) * (ncap - s->event_cap));
                s->events = ne;
                s->event_cap = ncap;
            }
            if (idx + 1 > s->nevent) s->nevent = idx + 1;
            base = &s->events[idx];
            d = lookup(SC_EVENT, r, (size_t)(kend - r));
        } else if (klen > 6 && memcmp(k, "pcifn.", 6) == 0) {
            uint32_t idx;
            const char *r = read_index(k + 6, kend, &idx);
            if (!r || idx >= MK_MAX_PCIFN) FAIL("line %u: bad pcifn index", lineno);
            if (idx >= s->pcifn_cap) {
                uint32_t ncap = s->pcifn_cap ? s->pcifn_cap * 2 : 16;
                while (ncap <= idx) ncap *= 2;
                struct mk_pcifn *nf = realloc(s->pcifn, sizeof(struct mk_pcifn) * ncap);
                if (!nf) FAIL("out of memory");
                memset(nf + s->pcifn_cap, 0, sizeof(struct mk_pcifn) * (ncap - s->pcifn_cap));
                for (uint32_t i = s->pcifn_cap; i < ncap; i++) nf[i].root_complex = nf[i].pcie_switch = nf[i].numa_node = -1;
                s->pcifn = nf;
                s->pcifn_cap = ncap;
            }
            if (idx + 1 > s->npcifn) s->npcifn = idx + 1;
            base = &s->pcifn[idx];
            d = lookup(SC_PCIFN, r, (size_t)(kend - r));
        }
        if (!d) continue; /* unknown key: forward compatible */
        if (store(base, d, v, vlen)) FAIL("line %u: bad value for %.*s", lineno, (int)klen, k);
    }
    if (more < 0) goto fail;

    /* cross-record validation */
    for (uint32_t i = 0; i < s->ndev; i++) {
        if (!s->dev[i].present) FAIL("device %u missing (devices must be 0..%u)", i, s->ndev - 1);
        s->dev[i].node_index = i;
        if (check_device(&s->dev[i], i, err, errlen)) goto fail;
    }
    for (uint32_t i = 0; i < s->npcifn; i++) {
        struct mk_pcifn *f = &s->pcifn[i];
        unsigned dom, bus, dev, fn;
        char tail;
        if (sscanf(f->bus_id, "%x:%x:%x.%x%c", &dom, &bus, &dev, &fn, &tail) != 4 || bus > 255 || dev > 31 || fn > 7)
            FAIL("pcifn %u: bad or missing bus_id '%s'", i, f->bus_id);
        f->pci_domain = dom; f->pci_bus = bus; f->pci_dev = dev; f->pci_func = fn;
    }
    if (s->declared_count && s->declared_count != s->ndev)
        FAIL("system.device_count=%u but %u devices described", s->declared_count, s->ndev);
    for (uint32_t e = 0; e < s->nevent; e++) {
        struct mk_event *ev = &s->events[e];
        if (ev->seq == 0 || ev->seq <= s->max_seq) FAIL("event %u: seq must be > 0 and increasing", e);
        if (ev->device >= s->ndev) FAIL("event %u: no device %u", e, ev->device);
        if (ev->type == 0) ev->type = nvmlEventTypeXidCriticalError;
        s->max_seq = ev->seq;
    }
    *out = s;
    return 0;
fail:
    mk_snap_free(s);
    return -1;
}

/* The setter record (native/README.md, "Settings"): `device.<i>.<key>=value` lines of the device scope,
 * applied over a parsed snapshot; a device the state file does not describe is skipped. */
int mk_overlay_settings(struct mk_snap *s, const char *buf, size_t len, char *err, size_t errlen) {
    pthread_once(&ht_once, build_tables);
    struct lines L = {buf, MK_SETTINGS_MAGIC, len, 0, 0, 0};
    const char *k, *eq;
    size_t vlen;
    int more;
    /* applied to a copy, kept only when the whole record is good: a bad record is left out, not half applied */
    struct mk_device *dev = malloc(sizeof *dev * (s->ndev ? s->ndev : 1));
    if (!dev) { snprintf(err, errlen, "out of memory"); return -1; }
    if (s->ndev) memcpy(dev, s->dev, sizeof *dev * s->ndev);
    while ((more = next_line(&L, &k, &eq, &vlen, err, errlen)) > 0) {
        uint32_t idx;
        const char *r = (size_t)(eq - k) > 7 && memcmp(k, "device.", 7) == 0 ? read_index(k + 7, eq, &idx) : NULL;
        if (!r || idx >= MK_MAX_DEVICES) {
            snprintf(err, errlen, "line %u: expected device.<i>.<key>=value", L.lineno);
            goto fail;
        }
        const struct desc *d = lookup(SC_DEV, r, (size_t)(eq - r));
        if (!d || idx >= s->ndev) continue; /* unknown key or device: forward compatible */
        if (store(&dev[idx], d, eq + 1, vlen)) {
            snprintf(err, errlen, "line %u: bad value for %.*s", L.lineno, (int)(eq - k), k);
            goto fail;
        }
    }
    if (more < 0) goto fail;
    for (uint32_t i = 0; i < s->ndev; i++)
        if (check_device(&dev[i], i, err, errlen)) goto fail;
    if (s->ndev) memcpy(s->dev, dev, sizeof *dev * s->ndev);
    free(dev);
    return 0;
fail:
    free(dev);
    return -1;
}

/* ------------------------------------------------------------------------- */
/* Publication: staleness check, atomic swap, free once no thread holds it.  */

_Atomic(struct mk_snap *) mk_g_snap;
_Atomic uint64_t mk_g_next_check;
#define CHECK_INTERVAL_NS 2000000ull   /* 2 ms */

static pthread_mutex_t refresh_mu = PTHREAD_MUTEX_INITIALIZER;
struct file_sig { dev_t dev; ino_t ino; int64_t mtime_ns; off_t size; int valid; };
static struct file_sig cur_sig, bad_sig;
static uint64_t cur_failure_epoch; /* the failures started in this process that cur_sig's snapshot shows */
static struct file_sig settings_sig, bad_settings_sig; /* valid = 0: no setter record */
static char settings_path[4096 + 16];
static int last_errno_logged;
static struct mk_snap *retired;
static char state_path[4096];
static pthread_once_t path_once = PTHREAD_ONCE_INIT;
static int from_feed; /* no state file beside the library: the node's service passes its descriptors (feed.c) */

static void resolve_path(void) {
    const char *env = secure_getenv("MOKKA_NVML_STATE");
    if (env && *env) {
        snprintf(state_path, sizeof state_path, "%s", env);
        return;
    }
    Dl_info info;
    if (dladdr((void *)&resolve_path, &info) && info.dli_fname && strchr(info.dli_fname, '/')) {
        const char *slash = strrchr(info.dli_fname, '/');
        snprintf(state_path, sizeof state_path, "%.*s/mokka-nvml.state", (int)(slash - info.dli_fname),
                 info.dli_fname);
    } else {
        snprintf(state_path, sizeof state_path, "mokka-nvml.state");
    }
    struct stat st;
    const char *socket_path;
    if (stat(state_path, &st) != 0 && errno == ENOENT && (socket_path = mk_feed_connect()) != NULL) {
        snprintf(state_path, sizeof state_path, "%s", socket_path);
        from_feed = 1;
    }
}

const char *mk_state_path(void) {
    pthread_once(&path_once, resolve_path);
    return state_path;
}

int mk_state_from_feed(void) {
    pthread_once(&path_once, resolve_path);
    return from_feed;
}

/* `X.state` -> `X.settings`; any other name gets `.settings` appended.  X is the state file as
 * resolved (links followed, once it exists): the record lives beside the real file, in the node's
 * root, wherever a process found the library (a read-only overlay of links under `mokka run`). */
const char *mk_settings_path(void) {
    static int resolved; /* written once the buffer holds the resolved path */
    if (__atomic_load_n(&resolved, __ATOMIC_ACQUIRE)) return settings_path;
    char real[4096];
    const char *p = mk_state_path();
    int found = realpath(p, real) != NULL;
    if (found) p = real;
    size_t n = strlen(p);
    if (n > 6 && strcmp(p + n - 6, ".state") == 0) n -= 6;
    snprintf(settings_path, sizeof settings_path, "%.*s.settings", (int)n, p);
    if (found) __atomic_store_n(&resolved, 1, __ATOMIC_RELEASE);
    return settings_path;
}

static struct file_sig sig_of(const struct stat *st) {
    return (struct file_sig){st->st_dev, st->st_ino, (int64_t)st->st_mtim.tv_sec * 1000000000ll + st->st_mtim.tv_nsec,
                             st->st_size, 1};
}
static int sig_eq(struct file_sig a, struct file_sig b) {
    return a.valid == b.valid && (!a.valid || (a.dev == b.dev && a.ino == b.ino && a.mtime_ns == b.mtime_ns &&
                                               a.size == b.size));
}

/* the setter record's signature now (valid = 0: there is none) */
static struct file_sig settings_now(void) {
    struct stat st;
    if (from_feed) {
        int fd = mk_feed_settings_fd();
        return fd >= 0 && fstat(fd, &st) == 0 ? sig_of(&st) : (struct file_sig){0};
    }
    if (stat(mk_settings_path(), &st) != 0) return (struct file_sig){0};
    return sig_of(&st);
}

/* Apply the setter record over a freshly parsed snapshot. A record that cannot be read or parsed is
 * logged once per version and left out: the state file's values stand. */
static void apply_settings(struct mk_snap *s) {
    int fd = from_feed ? mk_feed_settings_fd() : open(mk_settings_path(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    settings_sig = (struct file_sig){0};
    if (fd < 0) return;
    char err[256] = "";
    char *buf = NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size > MK_MAX_SETTINGS) {
        snprintf(err, sizeof err, "not a regular file of at most %u bytes", MK_MAX_SETTINGS);
    } else if ((buf = malloc((size_t)st.st_size + 1)) == NULL) {
        snprintf(err, sizeof err, "out of memory");
    } else {
        size_t got = 0;
        ssize_t r = 1;
        while (got < (size_t)st.st_size && (r = pread(fd, buf + got, (size_t)st.st_size - got, (off_t)got)) > 0)
            got += (size_t)r;
        if (r < 0) snprintf(err, sizeof err, "read: %s", strerror(errno));
        else mk_overlay_settings(s, buf, got, err, sizeof err);
    }
    if (!from_feed) close(fd);
    free(buf);
    settings_sig = sig_of(&st);
    if (!err[0]) { bad_settings_sig.valid = 0; return; }
    if (!sig_eq(bad_settings_sig, settings_sig))
        mk_log("setter record %s ignored: %s", from_feed ? "from the state feed" : mk_settings_path(), err);
    bad_settings_sig = settings_sig;
}

/* ---- holds (state.h, struct mk_hold): hazard slots, one record per thread ---- */
__thread struct mk_hold *mk_t_hold __attribute__((tls_model("initial-exec")));
static _Atomic(struct mk_hold *) holds;
static atomic_int holds_lost; /* a thread read without a record (out of memory): nothing retired is freed again */
static pthread_key_t hold_key;
static int hold_key_ok;
static pthread_once_t hold_once = PTHREAD_ONCE_INIT;

static void hold_release(void *p) {
    struct mk_hold *h = p;
    atomic_store(&h->snap[0], NULL);
    atomic_store(&h->snap[1], NULL);
    mk_t_hold = NULL;
    atomic_store(&h->used, 0);
}

static void hold_key_make(void) { hold_key_ok = pthread_key_create(&hold_key, hold_release) == 0; }

static struct mk_hold *hold_register(void) {
    pthread_once(&hold_once, hold_key_make);
    struct mk_hold *h;
    for (h = atomic_load(&holds); h; h = h->next) {
        int free_ = 0;
        if (atomic_compare_exchange_strong(&h->used, &free_, 1)) break;
    }
    if (!h) {
        if ((h = calloc(1, sizeof *h)) == NULL) return NULL;
        atomic_store(&h->used, 1);
        h->next = atomic_load(&holds);
        while (!atomic_compare_exchange_weak(&holds, &h->next, h)) {}
    }
    if (hold_key_ok) pthread_setspecific(hold_key, h); /* no key: the record stays this thread's (a leak, no fault) */
    mk_t_hold = h;
    return h;
}

struct mk_snap *mk_snap_take_slow(void) {
    int saved = errno;
    struct mk_hold *h = mk_t_hold ? mk_t_hold : hold_register();
    errno = saved;
    if (!h) {
        atomic_store(&holds_lost, 1);
        return atomic_load(&mk_g_snap);
    }
    for (;;) {
        struct mk_snap *p = atomic_load(&mk_g_snap);
        struct mk_snap *cur = atomic_load_explicit(&h->snap[0], memory_order_relaxed);
        if (p != cur) {
            atomic_store(&h->snap[1], cur); /* still held in slot 0 meanwhile */
            atomic_store(&h->snap[0], p);
        }
        /* current after the slot was stored: the writer's scan, after its exchange, sees the slot */
        if (atomic_load(&mk_g_snap) == p) return p;
    }
}

static int held(const struct mk_snap *s) {
    for (struct mk_hold *h = atomic_load(&holds); h; h = h->next)
        if (atomic_load(&h->snap[0]) == s || atomic_load(&h->snap[1]) == s) return 1;
    return 0;
}

/* called under refresh_mu, after the exchange that retired old */
static void retire(struct mk_snap *old) {
    if (old) {
        old->retired_next = retired;
        retired = old;
    }
    if (atomic_load(&holds_lost)) return;
    struct mk_snap **pp = &retired;
    while (*pp) {
        if (!held(*pp)) {
            struct mk_snap *dead = *pp;
            *pp = dead->retired_next;
            mk_snap_free(dead);
        } else {
            pp = &(*pp)->retired_next;
        }
    }
}

/* The file is copied into a private buffer (reused, guarded by refresh_mu) and parsed from there: a
 * mapping would raise SIGBUS in the consumer when a writer truncates the file in place.  Opened
 * non-blocking and refused unless regular, so a FIFO or a device at the path never blocks a reader. */
static struct { char *data; size_t len, cap; } file_buf;

static int same_file(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

enum read_result { READ_OK, READ_REJECT, READ_RETRY };

/* READ_OK: file_buf holds the whole file fd is, as *st describes it; READ_REJECT: refuse this file (err
 * says why); READ_RETRY: nothing to judge (gone, or rewritten while it was read): the next check looks again. */
static enum read_result read_regular_fd(int fd, struct stat *st, char *err, size_t errlen) {
    struct stat after;
    enum read_result rc = READ_REJECT;
    if (fstat(fd, st) != 0) {
        rc = READ_RETRY;
    } else if (!S_ISREG(st->st_mode)) {
        snprintf(err, errlen, "not a regular file");
    } else if ((size_t)st->st_size > MK_MAX_FILE) {
        snprintf(err, errlen, "larger than %u bytes", MK_MAX_FILE);
    } else {
        size_t want = (size_t)st->st_size + 1; /* one byte more: a file that grew meanwhile reads long */
        if (want > file_buf.cap) {
            char *nb = realloc(file_buf.data, want);
            if (!nb) { snprintf(err, errlen, "out of memory"); return READ_RETRY; }
            file_buf.data = nb;
            file_buf.cap = want;
        }
        size_t got = 0;
        while (got < want) {
            ssize_t n = pread(fd, file_buf.data + got, want - got, (off_t)got);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            got += (size_t)n;
        }
        file_buf.len = got;
        int unchanged = got == (size_t)st->st_size && fstat(fd, &after) == 0 && same_file(st, &after);
        rc = unchanged ? READ_OK : READ_RETRY;
    }
    return rc;
}

static enum read_result read_regular_file(const char *path, struct stat *st, char *err, size_t errlen) {
    if (from_feed) {
        int fd = mk_feed_state_fd();
        return fd < 0 ? READ_RETRY : read_regular_fd(fd, st, err, errlen);
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return READ_RETRY;
    enum read_result rc = read_regular_fd(fd, st, err, errlen);
    close(fd);
    return rc;
}

/* the state file's stat: by its path, or in feed mode the descriptor held (ENOENT before the first one) */
static int stat_state(const char *path, struct stat *st) {
    if (!from_feed) return stat(path, st);
    int fd = mk_feed_state_fd();
    if (fd >= 0) return fstat(fd, st);
    errno = mk_feed_errno();
    return -1;
}

/* feed mode: a message came whose file is not judged yet, or its read must be retried */
static int feed_pending;

/* feed mode: whether anything may have changed since the last check (no message, no started failure: nothing
 * did, and the check costs one receive) */
static int feed_changed(uint64_t now) {
    static int waited;
    if (mk_feed_receive(now, waited ? 0 : 1000)) feed_pending = 1;
    waited = 1;
    return feed_pending || mk_feed_state_fd() < 0 || cur_failure_epoch != mk_failure_epoch();
}

/* the last check found a file it could not take (rejected, or rewritten while read): maybe one being written
 * over in place, which nvmlInit waits out (mk_state_torn) */
static int torn;

int mk_state_torn(void) {
    pthread_mutex_lock(&refresh_mu);
    int t = torn;
    pthread_mutex_unlock(&refresh_mu);
    return t;
}

static void load_locked(uint64_t now) {
    const char *path = mk_state_path();
    struct stat st;
    torn = 0;
    if (from_feed) {
        if (!feed_changed(now)) return;
        feed_pending = 0;
    }
    if (stat_state(path, &st) != 0) {
        int e = errno;
        if (last_errno_logged != e) {
            mk_log("state file %s: %s%s", path, strerror(e),
                   atomic_load(&mk_g_snap) ? " (keeping last good state)" : "");
            last_errno_logged = e;
        }
        return;
    }
    last_errno_logged = 0;
    int64_t mt = (int64_t)st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec;
    if (cur_sig.valid && cur_sig.dev == st.st_dev && cur_sig.ino == st.st_ino && cur_sig.mtime_ns == mt &&
        cur_sig.size == st.st_size && sig_eq(settings_sig, settings_now()) && cur_failure_epoch == mk_failure_epoch())
        return;
    if (bad_sig.valid && bad_sig.dev == st.st_dev && bad_sig.ino == st.st_ino && bad_sig.mtime_ns == mt &&
        bad_sig.size == st.st_size) {
        torn = 1;
        return; /* already rejected this exact file */
    }
    struct stat fst;
    char err[256] = "";
    struct mk_snap *s = NULL;
    int ok = 0;
    enum read_result r = read_regular_file(path, &fst, err, sizeof err);
    if (r == READ_RETRY) {
        feed_pending = from_feed;
        torn = 1;
        return;
    }
    if (r == READ_OK) ok = mk_parse(file_buf.data ? file_buf.data : "", file_buf.len, &s, err, sizeof err) == 0;
    mt = (int64_t)fst.st_mtim.tv_sec * 1000000000ll + fst.st_mtim.tv_nsec;
    if (ok) {
        apply_settings(s);
        if (mk_visible_select(s) != 0) { /* out of memory: the next check tries again */
            mk_snap_free(s);
            feed_pending = from_feed;
            return;
        }
        cur_failure_epoch = mk_failure_epoch();
        mk_failure_apply(s);
        mk_levels_derive(s);
        mk_dynamic_update(s);
        for (uint32_t i = 0; i < s->ndev; i++) {
            s->dev[i].name_len = (uint8_t)strlen(s->dev[i].name);
            s->dev[i].uuid_len = (uint8_t)strlen(s->dev[i].uuid);
        }
        cur_sig.dev = fst.st_dev; cur_sig.ino = fst.st_ino; cur_sig.mtime_ns = mt;
        cur_sig.size = fst.st_size; cur_sig.valid = 1;
        bad_sig.valid = 0;
        retire(atomic_exchange(&mk_g_snap, s));
    } else {
        bad_sig.dev = fst.st_dev; bad_sig.ino = fst.st_ino; bad_sig.mtime_ns = mt;
        bad_sig.size = fst.st_size; bad_sig.valid = 1;
        torn = 1;
        mk_log("state file %s rejected: %s%s", path, err,
               atomic_load(&mk_g_snap) ? " (keeping last good state)" : "");
    }
}

/* fork safety: never let a child inherit the refresh lock held by a thread that does not exist there */
static void fork_prepare(void) { pthread_mutex_lock(&refresh_mu); }
static void fork_release(void) { pthread_mutex_unlock(&refresh_mu); }
int (*mk_clock_gettime)(clockid_t, struct timespec *) = clock_gettime;

static void find_vdso_clock(void) {
    void *vdso = dlopen("linux-vdso.so.1", RTLD_LAZY | RTLD_NOLOAD); /* glibc lists the vDSO by this name */
    if (!vdso) return;
    void *fn = dlsym(vdso, "__vdso_clock_gettime");          /* x86 */
    if (!fn) fn = dlsym(vdso, "__kernel_clock_gettime");     /* arm64 */
    if (fn) mk_clock_gettime = (int (*)(clockid_t, struct timespec *))fn;
}

static void fork_child(void) {
    mk_feed_after_fork();
    pthread_mutex_unlock(&refresh_mu);
}

__attribute__((constructor)) static void state_init(void) {
    pthread_atfork(fork_prepare, fork_release, fork_child);
    find_vdso_clock();
}

void mk_refresh_slow(uint64_t now, int force) {
    if (force) {
        pthread_mutex_lock(&refresh_mu);
    } else if (pthread_mutex_trylock(&refresh_mu) != 0) {
        return; /* another thread is checking; use the current snapshot */
    }
    atomic_store_explicit(&mk_g_next_check, now + CHECK_INTERVAL_NS, memory_order_relaxed);
    load_locked(now);
    retire(NULL);
    /* a snapshot with dynamic metrics is also refreshed when the wall-clock second turns: its values change then */
    struct mk_snap *s = atomic_load_explicit(&mk_g_snap, memory_order_relaxed);
    uint64_t to_next_second = s ? mk_dynamic_update(s) : UINT64_MAX;
    if (to_next_second < CHECK_INTERVAL_NS)
        atomic_store_explicit(&mk_g_next_check, now + to_next_second, memory_order_relaxed);
    pthread_mutex_unlock(&refresh_mu);
}
