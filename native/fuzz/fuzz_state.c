/* libFuzzer harness for the state-file reader (src/state.c: mk_parse). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "touch.h"

/* state.c logs through mk_log (log.c, which the harness does not link: rejected inputs stay quiet) */
void mk_log(const char *fmt, ...) { (void)fmt; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct mk_snap *s = NULL;
    char err[256];
    if (mk_parse((const char *)data, size, &s, err, sizeof err) == 0) {
        touch(s);
        mk_snap_free(s);
    } else {
        err[sizeof err - 1] = 0;
        (void)strlen(err);
    }
    return 0;
}
