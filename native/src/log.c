/* Messages on stderr: errors always, debug lines under MOKKA_DEBUG=nvml.
 * MOKKA_* variables are read with secure_getenv: a setuid client run by another user ignores them. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

int mk_g_debug;

void mk_debug_init(void) {
    const char *d = secure_getenv("MOKKA_DEBUG");
    mk_g_debug = d != NULL && (strstr(d, "nvml") != NULL || strcmp(d, "all") == 0 || strcmp(d, "1") == 0);
}

void mk_log(const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "mokka-nvml: %s\n", buf);
}

void mk_debug(const char *fmt, ...) {
    if (!mk_g_debug) return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "mokka-nvml: debug: %s\n", buf);
}

void mk_stub_called(const char *name) { mk_debug("stub %s -> NOT_SUPPORTED", name); }
