/* verify: SHA-256 of files (OpenSSL's EVP), and manifests in the format
 * `sha256sum` writes, so a download can be checked against the hashes its
 * publisher lists. Files are read with read(2) in VERIFY_CHUNK pieces, never
 * mapped, so a file of any size costs one chunk of memory. */
#ifndef LILAC_FORMAT_VERIFY_H
#define LILAC_FORMAT_VERIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lilac.h"

#define VERIFY_HEX_LEN 64                   /* hex digits of a SHA-256 */
#define VERIFY_CHUNK ((size_t)4 << 20)      /* bytes per read(2) */
#define VERIFY_MANIFEST_MAX ((size_t)16 << 20) /* a larger "manifest" is surely some other file */

/* Called after every chunk, and once at the end with done == total. total
 * is the size fstat saw (0 for a pipe); done may pass it if the file grows. */
typedef void (*verify_progress_fn)(void *user, uint64_t done, uint64_t total);

/* The SHA-256 of size bytes, as 64 lowercase hex digits and a NUL. */
lilac_status verify_sha256_buf(const void *data, size_t size, char hex_out[VERIFY_HEX_LEN + 1], lilac_error *err);

/* The SHA-256 of a file's contents; fn may be NULL. Errors name the path and
 * give strerror's reason. */
lilac_status verify_sha256_file(const char *path, verify_progress_fn fn, void *user,
                                char hex_out[VERIFY_HEX_LEN + 1], lilac_error *err);

/* A hash given by a user: exactly 64 hex digits in either case, written to
 * hex_out in lowercase. The error says what is wrong with it. */
lilac_status verify_hex_parse(const char *s, char hex_out[VERIFY_HEX_LEN + 1], lilac_error *err);

/* One line of a manifest. */
typedef struct verify_entry {
    char *name;                    /* owned; unescaped as sha256sum writes "\\" and "\n" */
    char hex[VERIFY_HEX_LEN + 1];  /* lowercase */
    bool binary;                   /* "HEX *name": sha256sum -b (the same bytes on POSIX) */
    int line;                      /* 1-based, for messages */
} verify_entry;

typedef struct verify_manifest verify_manifest;

/* Parse a manifest as `sha256sum` and `sha256sum --tag` write it: lines
 * "HEX  name", "HEX *name" or "SHA256 (name) = HEX", ending in \n or \r\n; a
 * leading backslash marks an escaped name. Blank lines and lines starting
 * with '#' are skipped; any other line is an error giving its number.
 * source names the text in messages ("SHA256SUMS:3: ..."). */
lilac_status verify_manifest_parse(const char *text, size_t size, const char *source, verify_manifest **out,
                                   lilac_error *err);
/* Read and parse a manifest file of at most VERIFY_MANIFEST_MAX bytes (a pipe
 * works too). */
lilac_status verify_manifest_load(const char *path, verify_manifest **out, lilac_error *err);
void verify_manifest_free(verify_manifest *m);

size_t verify_manifest_count(const verify_manifest *m);
const verify_entry *verify_manifest_at(const verify_manifest *m, size_t i);

/* The entry for path: the one whose name is path as written, else the one
 * with path's base name. None, or several with that base name and different
 * hashes, is an error naming path. */
lilac_status verify_manifest_find(const verify_manifest *m, const char *path, const verify_entry **out,
                                  lilac_error *err);

#endif
