/* mokka-ib shim: shared helpers of the UMAD and verbs interposers. Everything here is internal. */
#ifndef MOKKA_IB_SHIM_H
#define MOKKA_IB_SHIM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define SHIM_INTERNAL __attribute__((visibility("hidden")))

/* Look up the next definition of a libc function once and cache it; abort with a named error if absent. */
#define libc_func(name, rettype, ...)                                                   \
    static rettype (*_##name)(__VA_ARGS__) = NULL;                                      \
    if (_##name == NULL) {                                                              \
        _##name = (rettype (*)(__VA_ARGS__))dlsym(RTLD_NEXT, #name);                    \
        if (_##name == NULL) {                                                          \
            fprintf(stderr, "mokka-ib: cannot find the real %s: %s\n", #name, dlerror()); \
            abort();                                                                    \
        }                                                                               \
    }

/* Debug categories of $MOKKA_DEBUG that this library knows: "ib" (all of it). */
SHIM_INTERNAL int shim_debug_enabled(void);
#define DBG(...)                                                   \
    do {                                                           \
        if (shim_debug_enabled()) {                                \
            fprintf(stderr, "mokka-ib: " __VA_ARGS__);             \
            fputc('\n', stderr);                                   \
        }                                                          \
    } while (0)

/* The responder's Unix socket: $MOKKA_IB_SOCKET, else <$MOKKA_ROOT or />/var/lib/mokka/ib/responder.sock. */
SHIM_INTERNAL const char *shim_socket_path(void);

/* Read a one-line sysfs attribute "<dir>/<name>" into buf without its newline; -1 if unreadable. */
SHIM_INTERNAL int shim_read_attr(const char *dir, const char *name, char *buf, size_t size);

#endif
