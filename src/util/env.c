#include "util/env.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

bool lilac_env_switch(const char *name, bool dflt)
{
    const char *e = getenv(name);
    return dflt ? !(e && *e == '0') : (e && *e == '1');
}

bool lilac_env_list_has(const char *list, const char *name)
{
    const size_t n = strlen(name);
    for (const char *p = list; p && *p;) {
        const char *c = strchr(p, ',');
        const size_t len = c ? (size_t)(c - p) : strlen(p);
        if (len == n && !strncmp(p, name, n))
            return true;
        p += len + (c != NULL);
    }
    return false;
}

int lilac_env_int(const char *name, int dflt, int lo, int hi)
{
    const char *e = getenv(name);
    if (!e || !*e)
        return dflt;
    char *end = NULL;
    errno = 0;
    const long v = strtol(e, &end, 10);
    return errno || *end || v < lo || v > hi ? dflt : (int)v;
}
