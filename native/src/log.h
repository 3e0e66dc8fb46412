/* log.c: messages on stderr, all starting with "mokka-nvml:". The bottom layer: no other file. */
#ifndef MOKKA_LOG_H
#define MOKKA_LOG_H

#include "mokka.h"

MK_HIDDEN extern int mk_g_debug;   /* MOKKA_DEBUG names nvml (read at the first nvmlInit) */
void mk_debug_init(void);
void mk_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void mk_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void mk_stub_called(const char *name);

#endif
