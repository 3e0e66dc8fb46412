/* libFuzzer harness for the state-file reader (src/state.c: mk_parse). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "state.h"

/* state.c logs through mk_log (log.c, which the harness does not link: rejected inputs stay quiet) */
void mk_log(const char *fmt, ...) { (void)fmt; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct mk_snap *s = NULL;
    char err[256];
    if (mk_parse((const char *)data, size, &s, err, sizeof err) == 0) {
        /* touch everything a getter could read */
        volatile uint64_t sink = s->ndev + s->nevent + s->max_seq + strlen(s->driver_version);
        for (uint32_t i = 0; i < s->ndev; i++) {
            const struct mk_device *d = &s->dev[i];
            sink += strlen(d->name) + strlen(d->bus_id) + d->pci_bus + d->nproc + d->topo_level_n + d->nvlink_count;
            for (uint32_t p = 0; p < d->nproc; p++) sink += strlen(d->proc[p].name);
            for (uint32_t l = 0; l < MK_MAX_LINKS; l++) sink += strlen(d->link[l].remote_bus_id);
        }
        (void)sink;
        mk_snap_free(s);
    } else {
        err[sizeof err - 1] = 0;
        (void)strlen(err);
    }
    return 0;
}
