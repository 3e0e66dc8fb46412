/* See path.h. */
#include "path.h"

#include <limits.h>
#include <string.h>

int fold_path(const char *path, char *out, is_symlink_fn is_symlink)
{
    size_t n = 0;
    for (const char *s = path; *s;) {
        while (*s == '/')
            s++;
        if (*s == '\0')
            break;
        const char *end = strchrnul(s, '/');
        size_t len = (size_t)(end - s);
        if (len == 2 && s[0] == '.' && s[1] == '.') {
            out[n] = '\0';
            if (n > 0 && is_symlink(out, n))
                return 0;
            while (n > 0 && out[n - 1] != '/')
                n--;
            if (n > 0)
                n--;
        } else if (!(len == 1 && s[0] == '.')) {
            if (n + 1 + len + 2 > PATH_MAX)
                return 0;
            out[n++] = '/';
            memcpy(out + n, s, len);
            n += len;
        }
        s = end;
    }
    if (n == 0 || path[strlen(path) - 1] == '/')
        out[n++] = '/'; /* "/" itself, or a trailing slash kept: it still means "a directory" */
    out[n] = '\0';
    return 1;
}
