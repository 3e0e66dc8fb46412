/* settings.c: the setter record's writer. Above util.c. */
#ifndef MOKKA_SETTINGS_H
#define MOKKA_SETTINGS_H

#include "util.h"

/* one key of a device (`power.limit_mw`) and its new value; an empty value removes the key, so the
 * state file's value stands again */
struct mk_setting {
    const char *key;
    char value[64];
};

/* NVML_ERROR_NO_PERMISSION unless the caller is root, as the real driver answers setters */
nvmlReturn_t mk_settings_permitted(void);
/* replace device `dev`'s keys in the record (read-modify-write under the record's lock) and reload */
nvmlReturn_t mk_settings_write(uint32_t dev, const struct mk_setting *set, size_t n);

#endif
