/* settings.c: the setter record's writer. Above util.c. */
#ifndef MOKKA_SETTINGS_H
#define MOKKA_SETTINGS_H

#include "util.h"

/* one key of a device (`power.limit_mw`) and its new value; an empty value removes the key, so the
 * state file's value stands again */
struct mk_setting {
    const char *key;
    char value[160];
};

/* NVML_ERROR_NO_PERMISSION unless the caller is root, as the real driver answers setters */
nvmlReturn_t mk_settings_permitted(void);
#define MK_MAX_SETTING_KEYS 24

/* what to write, decided on the node as it is under the record's lock (S is fresh): fills up to
 * MK_MAX_SETTING_KEYS settings, or returns the NVML error that refuses the change */
typedef nvmlReturn_t (*mk_settings_fn)(struct mk_snap *S, uint32_t dev, void *ctx, struct mk_setting *out,
                                       size_t *n);

/* replace device `dev`'s keys in the record (read-modify-write under the record's lock) and reload */
nvmlReturn_t mk_settings_write(uint32_t dev, const struct mk_setting *set, size_t n);
/* the same, with the keys computed under the lock (a change that depends on the current record) */
nvmlReturn_t mk_settings_apply(uint32_t dev, mk_settings_fn compute, void *ctx);

#endif
