/* JSON as the fabric messages use it (fabric.c): a strict reader into a flat token array, and string output.
 *
 * Only what another responder may send is read: objects, arrays, strings, non-negative integers and the
 * literals; every length is checked against the text, the nesting depth and the token count are capped.
 * Anything else is malformed (-1), never a crash: the text comes from the network. */
#include "responder.h"

#include <string.h>

#define MAX_DEPTH 16

struct reader {
    const char *s;
    size_t len, pos;
    struct jtok *tok;
    size_t cap, count;
};

static void skip_space(struct reader *r)
{
    while (r->pos < r->len && strchr(" \t\r\n", r->s[r->pos]) != NULL && r->s[r->pos] != '\0')
        r->pos++;
}

static int add(struct reader *r, enum jtype type)
{
    if (r->count >= r->cap)
        return -1;
    r->tok[r->count] = (struct jtok){.type = (uint8_t)type, .start = (uint32_t)r->pos};
    return (int)r->count++;
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                                                                      : -1;
}

static bool string_body(struct reader *r)
{
    while (r->pos < r->len) {
        unsigned char c = (unsigned char)r->s[r->pos];
        if (c == '"')
            return true;
        if (c < 0x20)
            return false;
        if (c == '\\') {
            if (++r->pos >= r->len)
                return false;
            char e = r->s[r->pos];
            if (e == 'u') {
                if (r->pos + 4 >= r->len)
                    return false;
                for (int i = 1; i <= 4; i++)
                    if (hex_digit(r->s[r->pos + (size_t)i]) < 0)
                        return false;
                r->pos += 4;
            } else if (strchr("\"\\/bfnrt", e) == NULL || e == '\0') {
                return false;
            }
        }
        r->pos++;
    }
    return false;
}

static bool value(struct reader *r, int depth)
{
    skip_space(r);
    if (r->pos >= r->len || depth > MAX_DEPTH)
        return false;
    char c = r->s[r->pos];
    int at;
    if (c == '{' || c == '[') {
        bool object = c == '{';
        if ((at = add(r, object ? J_OBJECT : J_ARRAY)) < 0)
            return false;
        r->pos++;
        skip_space(r);
        if (r->pos < r->len && r->s[r->pos] == (object ? '}' : ']')) {
            r->pos++;
        } else {
            for (;;) {
                if (object) {
                    skip_space(r);
                    if (r->pos >= r->len || r->s[r->pos] != '"' || !value(r, depth + 1))
                        return false;
                    skip_space(r);
                    if (r->pos >= r->len || r->s[r->pos++] != ':')
                        return false;
                }
                if (!value(r, depth + 1))
                    return false;
                r->tok[at].size++;
                skip_space(r);
                if (r->pos >= r->len)
                    return false;
                char next = r->s[r->pos++];
                if (next == (object ? '}' : ']'))
                    break;
                if (next != ',')
                    return false;
            }
        }
        r->tok[at].end = (uint32_t)r->pos;
    } else if (c == '"') {
        r->pos++;
        if ((at = add(r, J_STRING)) < 0 || !string_body(r))
            return false;
        r->tok[at].end = (uint32_t)r->pos++;
    } else if (c >= '0' && c <= '9') {
        if ((at = add(r, J_NUMBER)) < 0)
            return false;
        while (r->pos < r->len && r->s[r->pos] >= '0' && r->s[r->pos] <= '9')
            r->pos++;
        r->tok[at].end = (uint32_t)r->pos;
    } else {
        static const char *const literals[] = {"null", "true", "false"};
        size_t i = 0;
        while (i < 3 && (r->len - r->pos < strlen(literals[i]) ||
                         memcmp(r->s + r->pos, literals[i], strlen(literals[i])) != 0))
            i++;
        if (i == 3 || (at = add(r, J_LITERAL)) < 0)
            return false;
        r->pos += strlen(literals[i]);
        r->tok[at].end = (uint32_t)r->pos;
    }
    r->tok[at].after = (uint32_t)r->count;
    return true;
}

int json_parse(const char *text, size_t len, struct jtok *tok, size_t cap)
{
    if (len >= UINT32_MAX)
        return -1;
    struct reader r = {.s = text, .len = len, .tok = tok, .cap = cap};
    if (!value(&r, 0))
        return -1;
    skip_space(&r);
    return r.pos == len ? (int)r.count : -1;
}

int json_get(const char *text, const struct jtok *tok, int obj, const char *key)
{
    if (obj < 0 || tok[obj].type != J_OBJECT)
        return -1;
    size_t klen = strlen(key);
    int at = obj + 1;
    for (uint32_t i = 0; i < tok[obj].size; i++) {
        const struct jtok *k = &tok[at];
        int v = (int)k->after;
        if (k->end - k->start == klen && memcmp(text + k->start, key, klen) == 0)
            return v;
        at = (int)tok[v].after;
    }
    return -1;
}

bool json_u64(const char *text, const struct jtok *tok, int at, uint64_t max, uint64_t *value)
{
    if (at < 0 || tok[at].type != J_NUMBER || tok[at].end - tok[at].start > 20)
        return false;
    uint64_t v = 0;
    for (uint32_t i = tok[at].start; i < tok[at].end; i++) {
        uint64_t digit = (uint64_t)(text[i] - '0');
        if (v > (max - digit) / 10)
            return false;
        v = v * 10 + digit;
    }
    *value = v;
    return true;
}

bool json_is_null(const char *text, const struct jtok *tok, int at)
{
    return at >= 0 && tok[at].type == J_LITERAL && text[tok[at].start] == 'n';
}

static size_t put_utf8(char *out, uint32_t cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static uint32_t hex4(const char *p)
{
    return (uint32_t)(hex_digit(p[0]) << 12 | hex_digit(p[1]) << 8 | hex_digit(p[2]) << 4 | hex_digit(p[3]));
}

bool json_string(const char *text, const struct jtok *tok, int at, char *out, size_t cap)
{
    if (at < 0 || tok[at].type != J_STRING || cap == 0)
        return false;
    size_t n = 0;
    for (uint32_t i = tok[at].start; i < tok[at].end;) { /* escapes were checked by the parser */
        char piece[4];
        size_t plen = 1;
        if (text[i] != '\\') {
            piece[0] = text[i++];
        } else {
            char e = text[i + 1];
            i += 2;
            if (e == 'u') {
                uint32_t cp = hex4(text + i);
                i += 4;
                if (cp >= 0xD800 && cp < 0xDC00 && i + 6 <= tok[at].end && text[i] == '\\' && text[i + 1] == 'u') {
                    uint32_t low = hex4(text + i + 2);
                    if (low >= 0xDC00 && low < 0xE000) {
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                        i += 6;
                    }
                }
                if (cp == 0)
                    return false; /* no NUL inside a C string */
                plen = put_utf8(piece, cp);
            } else {
                piece[0] = e == 'b' ? '\b' : e == 'f' ? '\f' : e == 'n' ? '\n' : e == 'r' ? '\r' : e == 't' ? '\t' : e;
            }
        }
        if (n + plen >= cap)
            return false;
        memcpy(out + n, piece, plen);
        n += plen;
    }
    out[n] = '\0';
    return true;
}

void json_add_string(struct buf *b, const char *s)
{
    buf_add(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            buf_printf(b, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            buf_printf(b, "\\u%04x", c);
        else
            buf_add(b, s, 1);
    }
    buf_add(b, "\"", 1);
}
