/* libFuzzer harness for the setter record and its MIG partition (src/state.c: mk_overlay_settings), applied
 * over a MIG-capable state file as the library applies it: a record left out leaves the snapshot as it was. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "touch.h"

void mk_log(const char *fmt, ...) { (void)fmt; }

/* two GPUs, two profile rows (1g: 7 at 0..6, 3g: 2 at 0, 4), MIG on, NVLinks */
static const char STATE[] =
    "mokka-nvml-state 1\n"
    "device.0.name=G\ndevice.0.pci.bus_id=00000000:1A:00.0\ndevice.0.nvlink.count=4\ndevice.0.mig.current=1\n"
    "device.0.mig.max_devices=7\n"
    "device.0.mig_profile.0.profile=0\ndevice.0.mig_profile.0.id=19\ndevice.0.mig_profile.0.name=1g.10gb\n"
    "device.0.mig_profile.0.slices=1\ndevice.0.mig_profile.0.instances=7\ndevice.0.mig_profile.0.placement_size=1\n"
    "device.0.mig_profile.0.placements=0,1,2,3,4,5,6\n"
    "device.0.mig_profile.1.profile=2\ndevice.0.mig_profile.1.id=9\ndevice.0.mig_profile.1.name=3g.40gb\n"
    "device.0.mig_profile.1.slices=3\ndevice.0.mig_profile.1.instances=2\ndevice.0.mig_profile.1.placement_size=4\n"
    "device.0.mig_profile.1.placements=0,4\n"
    "device.1.name=G\ndevice.1.pci.bus_id=00000000:1B:00.0\n"
    "end\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct mk_snap *s = NULL;
    char err[256];
    if (mk_parse(STATE, sizeof STATE - 1, &s, err, sizeof err) != 0) __builtin_trap();
    struct mk_device before = s->dev[0];
    if (mk_overlay_settings(s, (const char *)data, size, err, sizeof err) != 0)
        PROMISE(memcmp(&before, &s->dev[0], sizeof before) == 0); /* left out whole */
    touch(s);
    mk_snap_free(s);
    return 0;
}
