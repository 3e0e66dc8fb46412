/* What both harnesses check of an accepted snapshot: every value a getter reads, and the bounds the
 * getters index arrays with (state.c's check_device promises them; a broken promise traps). */
#ifndef MOKKA_FUZZ_TOUCH_H
#define MOKKA_FUZZ_TOUCH_H
#include <string.h>

#include "state.h"

#define PROMISE(c) do { if (!(c)) __builtin_trap(); } while (0)

static void touch(const struct mk_snap *s) {
    volatile uint64_t sink = s->ndev + s->nevent + s->max_seq + strlen(s->driver_version);
    for (uint32_t i = 0; i < s->ndev; i++) {
        const struct mk_device *d = &s->dev[i];
        sink += strlen(d->name) + strlen(d->bus_id) + d->pci_bus + d->nproc + d->topo_level_n;
        PROMISE(d->nvlink_count <= MK_MAX_LINKS && d->mig_max <= MK_MAX_CI);
        for (uint32_t l = 0; l < d->nvlink_count; l++) sink += d->link[l].state;
        for (uint32_t p = 0; p < d->nproc; p++) sink += strlen(d->proc[p].name);
        for (uint32_t l = 0; l < MK_MAX_LINKS; l++) sink += strlen(d->link[l].remote_bus_id);
        /* the MIG partition: what GetGpuInstances, GetComputeInstances and the handle tables index */
        unsigned of_row[MK_MAX_MIG_PROFILES] = {0};
        PROMISE(d->mig_gi_n % 3 == 0 && d->mig_ci_n % 4 == 0);
        for (uint32_t g = 0; g < d->mig_gi_n; g += 3) {
            PROMISE(d->mig_gi[g] < MK_GI_IDS && d->mig_gi[g + 1] < d->nmig_profile);
            const struct mk_mig_profile *p = &d->mig_profile[d->mig_gi[g + 1]];
            PROMISE(++of_row[d->mig_gi[g + 1]] <= p->instances);
            PROMISE(d->mig_gi[g + 2] + p->placement_size <= MK_MIG_MEM_SLICES);
        }
        for (uint32_t c = 0; c < d->mig_ci_n; c += 4)
            PROMISE(d->mig_ci[c] < MK_GI_IDS && d->mig_ci[c + 1] < MK_MAX_CI && mk_ci_slices(d->mig_ci[c + 2]) &&
                    d->mig_ci[c + 3] + mk_ci_slices(d->mig_ci[c + 2]) <= MK_MIG_SLICES);
        for (uint32_t r = 0; r < d->nmig_profile; r++)
            for (uint32_t k = 0; k < d->mig_profile[r].placement_n; k++)
                PROMISE(d->mig_profile[r].placements[k] + d->mig_profile[r].placement_size <= MK_MIG_MEM_SLICES);
    }
    (void)sink;
}

#endif
