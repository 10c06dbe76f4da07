#include "util/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

lilac_status lilac_fail(lilac_error *err, lilac_status status, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->status = status;
    }
    return status;
}

lilac_status lilac_fail_prefix(lilac_error *err, const char *fmt, ...)
{
    if (!err)
        return LILAC_E_INTERNAL;
    char prefix[512], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    /* "prefix: old", cut to fit: the end of an over-long message is lost */
    size_t cap = sizeof err->msg - 1, n = 0;
    for (const char *parts[3] = {prefix, ": ", old}, **p = parts; p < parts + 3; p++)
        for (const char *c = *p; *c && n < cap; c++)
            err->msg[n++] = *c;
    err->msg[n] = 0;
    return err->status;
}

const char *lilac_status_name(lilac_status s)
{
    switch (s) {
    case LILAC_OK: return "ok";
    case LILAC_E_IO: return "i/o error";
    case LILAC_E_FORMAT: return "malformed file";
    case LILAC_E_UNSUPPORTED: return "unsupported";
    case LILAC_E_ARG: return "invalid argument";
    case LILAC_E_NOMEM: return "out of memory";
    case LILAC_E_RANGE: return "out of range";
    case LILAC_E_INTERNAL: return "internal error";
    }
    return "unknown status";
}

void lilac_shape_str(const int64_t *shape, int n_dims, char *buf, size_t size)
{
    size_t o = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < n_dims && o < size; i++)
        o += (size_t)snprintf(buf + o, size - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (o < size)
        snprintf(buf + o, size - o, "]");
}
