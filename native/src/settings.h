/* settings.c: the setter record's writer. Above util.c. */
#ifndef MOKKA_SETTINGS_H
#define MOKKA_SETTINGS_H

#include <stdio.h>

#include "util.h"

/* one key of a device (`power.limit_mw`) and its new value; an empty value removes the key, so the
 * state file's value stands again */
struct mk_setting {
    const char *key;
    char value[160];
};

/* NVML_ERROR_NO_PERMISSION unless the caller is root, as the real driver answers setters */
nvmlReturn_t mk_settings_permitted(void);
/* the keys of one ECC counter set ([0] volatile, [1] aggregate): every kind and location, in the key table's order */
#define MK_ECC_COUNT_KEYS 14
MK_HIDDEN extern const char *const mk_ecc_count_keys[2][MK_ECC_COUNT_KEYS];
#define MK_MAX_SETTING_KEYS 24

/* what to write, decided on the node as it is under the record's lock (S is fresh): fills up to
 * MK_MAX_SETTING_KEYS settings, or returns the NVML error that refuses the change */
typedef nvmlReturn_t (*mk_settings_fn)(struct mk_snap *S, uint32_t dev, void *ctx, struct mk_setting *out,
                                       size_t *n);

/* replace device `dev`'s keys in the record (read-modify-write under the record's lock) and reload */
nvmlReturn_t mk_settings_write(uint32_t dev, const struct mk_setting *set, size_t n);
/* the same for a setter only root may call: NO_PERMISSION for anyone else, nothing written */
nvmlReturn_t mk_settings_set(uint32_t dev, const struct mk_setting *set, size_t n);
/* fill one setting with a number */
static inline void mk_setting_put(struct mk_setting *s, const char *key, unsigned long long v) {
    s->key = key;
    snprintf(s->value, sizeof s->value, "%llu", v);
}
/* the same, with the keys computed under the lock (a change that depends on the current record) */
nvmlReturn_t mk_settings_apply(uint32_t dev, mk_settings_fn compute, void *ctx);

#endif
