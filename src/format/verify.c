#include "format/verify.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/err.h"

/* ---- hashing ------------------------------------------------------------ */

static void to_hex(const unsigned char *md, char out[VERIFY_HEX_LEN + 1])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < VERIFY_HEX_LEN / 2; i++) {
        out[2 * i] = digits[md[i] >> 4];
        out[2 * i + 1] = digits[md[i] & 15];
    }
    out[VERIFY_HEX_LEN] = 0;
}

/* OpenSSL's own reason, for the (unlikely) failure of a digest call. */
static lilac_status fail_openssl(lilac_error *err, const char *what)
{
    char reason[256];
    unsigned long e = ERR_get_error();
    if (e)
        ERR_error_string_n(e, reason, sizeof reason);
    else
        snprintf(reason, sizeof reason, "no reason given");
    return lilac_fail(err, LILAC_E_INTERNAL, "%s: OpenSSL SHA-256 failed: %s", what, reason);
}

static EVP_MD_CTX *digest_new(const char *what, lilac_error *err)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx) {
        lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory for a SHA-256 context", what);
        return NULL;
    }
    if (EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        fail_openssl(err, what);
        EVP_MD_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

static lilac_status digest_end(EVP_MD_CTX *ctx, const char *what, char hex_out[VERIFY_HEX_LEN + 1],
                               lilac_error *err)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(ctx, md, &len) != 1 || len != VERIFY_HEX_LEN / 2)
        return fail_openssl(err, what);
    to_hex(md, hex_out);
    return LILAC_OK;
}

lilac_status verify_sha256_buf(const void *data, size_t size, char hex_out[VERIFY_HEX_LEN + 1], lilac_error *err)
{
    EVP_MD_CTX *ctx = digest_new("buffer", err);
    if (!ctx)
        return err ? err->status : LILAC_E_INTERNAL;
    lilac_status s = EVP_DigestUpdate(ctx, data, size) == 1 ? digest_end(ctx, "buffer", hex_out, err)
                                                            : fail_openssl(err, "buffer");
    EVP_MD_CTX_free(ctx);
    return s;
}

/* Feed fd to ctx chunk by chunk until end of file. */
static lilac_status hash_fd(int fd, const char *path, uint64_t total, EVP_MD_CTX *ctx, verify_progress_fn fn,
                            void *user, lilac_error *err)
{
    unsigned char *buf = malloc(VERIFY_CHUNK);
    if (!buf)
        return lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory for a %zu-byte read buffer", path, VERIFY_CHUNK);
    lilac_status s = LILAC_OK;
    uint64_t done = 0;
    for (;;) {
        ssize_t n = read(fd, buf, VERIFY_CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            s = lilac_fail(err, LILAC_E_IO, "%s: read failed after %llu bytes: %s", path,
                           (unsigned long long)done, strerror(errno));
            break;
        }
        if (n == 0)
            break;
        if (EVP_DigestUpdate(ctx, buf, (size_t)n) != 1) {
            s = fail_openssl(err, path);
            break;
        }
        done += (uint64_t)n;
        if (fn)
            fn(user, done, total);
    }
    /* the end is where reading ended, whatever fstat said (a pipe, a file that changed); an empty file
     * gets its one call here too */
    if (!s && fn && (done != total || done == 0))
        fn(user, done, done);
    free(buf);
    return s;
}

lilac_status verify_sha256_file(const char *path, verify_progress_fn fn, void *user,
                                char hex_out[VERIFY_HEX_LEN + 1], lilac_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return lilac_fail(err, LILAC_E_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return lilac_fail(err, LILAC_E_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return lilac_fail(err, LILAC_E_IO, "%s: is a directory, not a file", path);
    }
    uint64_t total = S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0;
    /* one pass, front to back: let the kernel read further ahead */
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    lilac_status s;
    EVP_MD_CTX *ctx = digest_new(path, err);
    if (!ctx)
        s = err ? err->status : LILAC_E_INTERNAL;
    else if (!(s = hash_fd(fd, path, total, ctx, fn, user, err)))
        s = digest_end(ctx, path, hex_out, err);
    EVP_MD_CTX_free(ctx);
    close(fd);
    return s;
}

/* ---- hex ------------------------------------------------------------------ */

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Check n characters as a SHA-256 in hex; on success write it in lowercase.
 * On failure write why into why[size] and return false. */
static bool hex_check(const char *s, size_t n, char hex_out[VERIFY_HEX_LEN + 1], char *why, size_t size)
{
    for (size_t i = 0; i < n; i++)
        if (hex_value(s[i]) < 0) {
            unsigned char c = (unsigned char)s[i];
            if (c > ' ' && c < 127)
                snprintf(why, size, "'%c' at position %zu is not a hex digit", c, i + 1);
            else
                snprintf(why, size, "byte 0x%02x at position %zu is not a hex digit", c, i + 1);
            return false;
        }
    if (n != VERIFY_HEX_LEN) {
        snprintf(why, size, "a SHA-256 is 64 hex digits, this has %zu", n);
        return false;
    }
    for (size_t i = 0; i < n; i++)
        hex_out[i] = "0123456789abcdef"[hex_value(s[i])];
    hex_out[VERIFY_HEX_LEN] = 0;
    return true;
}

lilac_status verify_hex_parse(const char *s, char hex_out[VERIFY_HEX_LEN + 1], lilac_error *err)
{
    char why[128];
    if (!hex_check(s, strlen(s), hex_out, why, sizeof why))
        return lilac_fail(err, LILAC_E_ARG, "bad SHA-256 '%.80s%s': %s", s, strlen(s) > 80 ? "..." : "", why);
    return LILAC_OK;
}

/* ---- manifests ------------------------------------------------------------ */

struct verify_manifest {
    verify_entry *entries;
    size_t n, cap;
};

void verify_manifest_free(verify_manifest *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++)
        free(m->entries[i].name);
    free(m->entries);
    free(m);
}

size_t verify_manifest_count(const verify_manifest *m)
{
    return m->n;
}

const verify_entry *verify_manifest_at(const verify_manifest *m, size_t i)
{
    return i < m->n ? &m->entries[i] : NULL;
}

/* The name as sha256sum escapes it ("\\\\", "\\n", "\\r") when the line starts
 * with a backslash, else verbatim. NULL with why set if an escape is unknown
 * (or out of memory: why says so). */
static char *name_dup(const char *s, size_t n, bool escaped, char *why, size_t size)
{
    char *out = malloc(n + 1);
    if (!out) {
        snprintf(why, size, "out of memory");
        return NULL;
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (!escaped || s[i] != '\\') {
            out[o++] = s[i];
            continue;
        }
        char c = i + 1 < n ? s[++i] : 0;
        if (c == '\\' || c == 'n' || c == 'r')
            out[o++] = c == 'n' ? '\n' : c == 'r' ? '\r' : '\\';
        else {
            snprintf(why, size, "unknown escape in the file name (a leading '\\' escapes only \\\\, \\n, \\r)");
            free(out);
            return NULL;
        }
    }
    out[o] = 0;
    return out;
}

/* "SHA256 (name) = HEX", as sha256sum --tag and BSD's sha256 write it. The
 * name is not escaped by BSD tools, so its end is the last ") = ". */
static bool parse_tagged(const char *s, size_t n, bool escaped, verify_entry *e, char *why, size_t size)
{
    static const char tag[] = "SHA256 (", sep[] = ") = ";
    const size_t tl = sizeof tag - 1, sl = sizeof sep - 1;
    size_t end = 0;
    for (size_t i = tl; i + sl <= n; i++)
        if (!memcmp(s + i, sep, sl))
            end = i;
    if (!end) {
        snprintf(why, size, "a tagged line is \"SHA256 (FILE) = HEX\"");
        return false;
    }
    if (end == tl) {
        snprintf(why, size, "no file name");
        return false;
    }
    if (!hex_check(s + end + sl, n - end - sl, e->hex, why, size))
        return false;
    e->binary = true;
    return (e->name = name_dup(s + tl, end - tl, escaped, why, size)) != NULL;
}

/* "HEX  name" (text mode) or "HEX *name" (binary mode). */
static bool parse_plain(const char *s, size_t n, bool escaped, verify_entry *e, char *why, size_t size)
{
    size_t h = 0;
    while (h < n && s[h] != ' ' && s[h] != '\t')
        h++;
    if (!hex_check(s, h, e->hex, why, size))
        return false;
    if (h + 2 > n || s[h] != ' ' || (s[h + 1] != ' ' && s[h + 1] != '*')) {
        snprintf(why, size, "the hash must be followed by two spaces, or a space and '*', then the file name");
        return false;
    }
    if (h + 2 == n) {
        snprintf(why, size, "no file name after the hash");
        return false;
    }
    e->binary = s[h + 1] == '*';
    return (e->name = name_dup(s + h + 2, n - h - 2, escaped, why, size)) != NULL;
}

static bool blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t')
            return false;
    return true;
}

static lilac_status add_entry(verify_manifest *m, const verify_entry *e, const char *source, lilac_error *err)
{
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 16;
        verify_entry *ne = realloc(m->entries, cap * sizeof *ne);
        if (!ne)
            return lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory at line %d", source, e->line);
        m->entries = ne;
        m->cap = cap;
    }
    m->entries[m->n++] = *e;
    return LILAC_OK;
}

/* One line without its line ending; skipped if blank or a comment. */
static lilac_status parse_line(verify_manifest *m, const char *s, size_t n, int line, const char *source,
                               lilac_error *err)
{
    if (blank(s, n) || s[0] == '#')
        return LILAC_OK;
    while (*s == ' ' || *s == '\t') /* sha256sum ignores leading white space too */
        s++, n--;
    char why[160];
    verify_entry e = {.line = line};
    bool escaped = s[0] == '\\';
    const char *body = s + escaped;
    size_t bn = n - escaped;
    bool ok;
    if (memchr(s, 0, n)) {
        snprintf(why, sizeof why, "a NUL byte, so a binary file, not a manifest");
        ok = false;
    } else if (bn >= 8 && !memcmp(body, "SHA256 (", 8))
        ok = parse_tagged(body, bn, escaped, &e, why, sizeof why);
    else
        ok = parse_plain(body, bn, escaped, &e, why, sizeof why);
    if (!ok) {
        free(e.name);
        return lilac_fail(err, LILAC_E_FORMAT, "%s:%d: malformed line: %s; want \"HEX  FILE\" as sha256sum writes",
                          source, line, why);
    }
    lilac_status st = add_entry(m, &e, source, err);
    if (st)
        free(e.name);
    return st;
}

lilac_status verify_manifest_parse(const char *text, size_t size, const char *source, verify_manifest **out,
                                   lilac_error *err)
{
    *out = NULL;
    if (size > VERIFY_MANIFEST_MAX)
        return lilac_fail(err, LILAC_E_RANGE, "%s: %zu bytes is too large for a manifest (at most %zu)", source, size,
                          VERIFY_MANIFEST_MAX);
    verify_manifest *m = calloc(1, sizeof *m);
    if (!m)
        return lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory", source);
    int line = 0;
    for (size_t p = 0; p < size;) {
        const char *nl = memchr(text + p, '\n', size - p);
        size_t end = nl ? (size_t)(nl - text) : size;
        size_t n = end - p;
        if (n && text[p + n - 1] == '\r') /* CRLF, e.g. a manifest saved on Windows */
            n--;
        lilac_status s = parse_line(m, text + p, n, ++line, source, err);
        if (s) {
            verify_manifest_free(m);
            return s;
        }
        p = end + 1;
    }
    if (m->n == 0) {
        verify_manifest_free(m);
        return lilac_fail(err, LILAC_E_FORMAT, "%s: no SHA-256 lines in the manifest", source);
    }
    *out = m;
    return LILAC_OK;
}

/* Read all of fd, up to VERIFY_MANIFEST_MAX + 1 bytes (so "too large" shows). */
static lilac_status read_all(int fd, const char *path, char **out, size_t *size, lilac_error *err)
{
    size_t cap = 64 << 10, n = 0;
    char *buf = malloc(cap);
    if (!buf)
        return lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory", path);
    for (;;) {
        if (n == cap) {
            if (cap > VERIFY_MANIFEST_MAX)
                break;
            char *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                return lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory", path);
            }
            buf = nb;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            free(buf);
            return lilac_fail(err, LILAC_E_IO, "%s: read failed: %s", path, strerror(e));
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    *out = buf;
    *size = n;
    return LILAC_OK;
}

lilac_status verify_manifest_load(const char *path, verify_manifest **out, lilac_error *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return lilac_fail(err, LILAC_E_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    lilac_status s = LILAC_OK;
    if (fstat(fd, &st) != 0)
        s = lilac_fail(err, LILAC_E_IO, "%s: cannot stat: %s", path, strerror(errno));
    else if (S_ISDIR(st.st_mode))
        s = lilac_fail(err, LILAC_E_IO, "%s: is a directory, not a manifest", path);
    else if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > VERIFY_MANIFEST_MAX)
        s = lilac_fail(err, LILAC_E_RANGE, "%s: %llu bytes is too large for a manifest (at most %zu)", path,
                       (unsigned long long)st.st_size, VERIFY_MANIFEST_MAX);
    char *text = NULL;
    size_t size = 0;
    if (!s)
        s = read_all(fd, path, &text, &size, err);
    close(fd);
    if (!s)
        s = verify_manifest_parse(text, size, path, out, err);
    free(text);
    return s;
}

static const char *base_name(const char *p)
{
    const char *slash = strrchr(p, '/');
    return slash ? slash + 1 : p;
}

/* The first entry matching path (exactly, or by base name); n_found counts
 * them, *clash the first whose hash differs from it. */
static const verify_entry *find_by(const verify_manifest *m, const char *path, bool by_base, int *n_found,
                                   const verify_entry **clash)
{
    const verify_entry *first = NULL;
    *n_found = 0;
    *clash = NULL;
    for (size_t i = 0; i < m->n; i++) {
        const verify_entry *e = &m->entries[i];
        if (by_base ? strcmp(base_name(e->name), base_name(path)) : strcmp(e->name, path))
            continue;
        ++*n_found;
        if (!first)
            first = e;
        else if (!*clash && strcmp(first->hex, e->hex))
            *clash = e;
    }
    return first;
}

lilac_status verify_manifest_find(const verify_manifest *m, const char *path, const verify_entry **out,
                                  lilac_error *err)
{
    *out = NULL;
    int n;
    const verify_entry *clash;
    const verify_entry *e = find_by(m, path, false, &n, &clash);
    if (!e)
        e = find_by(m, path, true, &n, &clash);
    if (!e)
        return lilac_fail(err, LILAC_E_ARG, "%s: not listed in the manifest", path);
    if (clash) /* two different hashes for the one file: which is right is not ours to guess */
        return lilac_fail(err, LILAC_E_FORMAT, "%s: the manifest lists it with different hashes (lines %d and %d)",
                          path, e->line, clash->line);
    *out = e;
    return LILAC_OK;
}
