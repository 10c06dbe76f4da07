/* err: the engine's error values. Every fallible function returns a
 * lilac_status and, on failure, fills a lilac_error the caller can show. */
#ifndef LILAC_UTIL_ERR_H
#define LILAC_UTIL_ERR_H

#include "lilac.h"

/* Fill err (may be NULL) with a printf-style message and return status. */
lilac_status lilac_fail(lilac_error *err, lilac_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefix an existing message, e.g. with the file name: "FILE: old message". */
lilac_status lilac_fail_prefix(lilac_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#include <stddef.h>
#include <stdint.h>

/* "[2048, 256]": a shape for messages, cut to fit buf. */
void lilac_shape_str(const int64_t *shape, int n_dims, char *buf, size_t size);

#endif
