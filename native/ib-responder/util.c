/* Small helpers: the program's name, the clock, big-endian fields, node names, a growable string. */
#include "responder.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char program_name[] = PROGRAM;

uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t get_be(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

void put_be(uint8_t *p, size_t n, uint64_t v)
{
    for (size_t i = n; i-- > 0; v >>= 8)
        p[i] = (uint8_t)v;
}

static bool alnum_lower(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

bool node_name_ok(const char *name)
{
    size_t len = strlen(name);
    if (len == 0 || len > NODE_NAME_MAX)
        return false;
    /* labels of [a-z0-9-], each starting and ending alphanumeric, joined by dots */
    const char *label = name;
    for (const char *p = name;; p++) {
        if (*p == '.' || *p == '\0') {
            if (p == label || !alnum_lower(*label) || !alnum_lower(p[-1]))
                return false;
            if (*p == '\0')
                return true;
            label = p + 1;
        } else if (!alnum_lower(*p) && *p != '-') {
            return false;
        }
    }
}

void buf_add(struct buf *b, const void *data, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (p == NULL) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void buf_printf(struct buf *b, const char *format, ...)
{
    char small[512];
    va_list args;
    va_start(args, format);
    int n = vsnprintf(small, sizeof small, format, args);
    va_end(args);
    if (n < 0) {
        b->failed = true;
        return;
    }
    if ((size_t)n < sizeof small) {
        buf_add(b, small, (size_t)n);
        return;
    }
    char *large = malloc((size_t)n + 1);
    if (large == NULL) {
        b->failed = true;
        return;
    }
    va_start(args, format);
    vsnprintf(large, (size_t)n + 1, format, args);
    va_end(args);
    buf_add(b, large, (size_t)n);
    free(large);
}

void buf_free(struct buf *b)
{
    free(b->p);
    *b = (struct buf){0};
}

bool admission(struct admission limits, bool privileged, size_t peers_own, size_t others, const char **why)
{
    if (limits.held >= limits.cap)
        *why = "all connections taken";
    else if (privileged)
        return true;
    else if (peers_own >= limits.per_peer)
        *why = "its limit reached";
    else if (others >= limits.cap - limits.reserved)
        *why = "the share of others taken";
    else
        return true;
    return false;
}
