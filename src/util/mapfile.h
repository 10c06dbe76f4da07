/* mapfile: a whole file mapped read-only. The model's tensors point into
 * these maps; nothing is copied at load. */
#ifndef LILAC_UTIL_MAPFILE_H
#define LILAC_UTIL_MAPFILE_H

#include <stddef.h>
#include <stdint.h>

#include "lilac.h"

typedef struct lilac_mapfile {
    const uint8_t *data; /* NULL for an empty file */
    size_t size;
    char *path; /* owned copy, for messages */
} lilac_mapfile;

/* Map path read-only. On failure *m is left zeroed and err names the file. */
lilac_status lilac_mapfile_open(lilac_mapfile *m, const char *path, lilac_error *err);
void lilac_mapfile_close(lilac_mapfile *m);

#endif
