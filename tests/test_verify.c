/* verify: SHA-256 against the NIST vectors (from memory and from files),
 * files of several read chunks, progress, file errors, user-given hashes,
 * and sha256sum manifests: every accepted form, malformed lines by number,
 * lookup by path and base name. */
#ifndef _POSIX_C_SOURCE /* mkdtemp, ftruncate; the build sets it already */
#define _POSIX_C_SOURCE 200809L
#endif
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/verify.h"
#include "testutil.h"

static char dir[256];

static const char *tmp_path(const char *name)
{
    static char buf[4][512];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, sizeof buf[0], "%s/%s", dir, name);
    return p;
}

/* ---- NIST vectors ----------------------------------------------------- */

typedef struct vector {
    const char *label;
    const char *msg; /* NULL: one million 'a's */
    const char *hex;
} vector;

static const vector nist[] = {
    {"empty", "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
    {"abc", "abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
    {"448 bits, two blocks", "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
     "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    {"a million a", NULL, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
};

static void test_nist(void)
{
    char *million = malloc(1000000);
    CHECK(million);
    if (!million)
        return;
    memset(million, 'a', 1000000);
    for (size_t i = 0; i < sizeof nist / sizeof nist[0]; i++) {
        const vector *v = &nist[i];
        const char *msg = v->msg ? v->msg : million;
        size_t len = v->msg ? strlen(v->msg) : 1000000;
        char hex[VERIFY_HEX_LEN + 1] = {0};
        lilac_error err = {0};
        CHECKF(verify_sha256_buf(msg, len, hex, &err) == LILAC_OK, "%s: %s", v->label, err.msg);
        CHECKF(!strcmp(hex, v->hex), "%s from memory: %s, want %s", v->label, hex, v->hex);

        const char *path = tmp_path("vector.bin");
        CHECK(tu_write_file(path, msg, len) == 0);
        memset(hex, 0, sizeof hex);
        CHECKF(verify_sha256_file(path, NULL, NULL, hex, &err) == LILAC_OK, "%s: %s", v->label, err.msg);
        CHECKF(!strcmp(hex, v->hex), "%s from a file: %s, want %s", v->label, hex, v->hex);
        remove(path);
    }
    free(million);
}

/* ---- files of several chunks ------------------------------------------ */

typedef struct calls {
    int n;
    uint64_t last_done, last_total;
    bool monotonic, within;
} calls;

static void on_progress(void *user, uint64_t done, uint64_t total)
{
    calls *c = user;
    if (c->n && done < c->last_done)
        c->monotonic = false;
    if (done > total)
        c->within = false;
    c->n++;
    c->last_done = done;
    c->last_total = total;
}

static void test_chunks(void)
{
    /* three full chunks and a part: the last read is short, and no chunk boundary falls on the end. The
     * expected hash is Python's hashlib.sha256 of the same bytes. */
    const size_t size = 3 * ((size_t)4 << 20) + 12345;
    CHECKF(size > 3 * VERIFY_CHUNK && size % VERIFY_CHUNK != 0, "the file must span several chunks (chunk %zu)",
           VERIFY_CHUNK);
    unsigned char *data = malloc(size);
    CHECK(data);
    if (!data)
        return;
    for (size_t i = 0; i < size; i++)
        data[i] = (unsigned char)((i * 131 + (i >> 11)) & 0xff);
    const char *path = tmp_path("chunks.bin");
    CHECK(tu_write_file(path, data, size) == 0);
    char hex[VERIFY_HEX_LEN + 1] = {0};
    lilac_error err = {0};
    calls c = {.monotonic = true, .within = true};
    CHECKF(verify_sha256_file(path, on_progress, &c, hex, &err) == LILAC_OK, "%s", err.msg);
    CHECKF(!strcmp(hex, "712f8bfe6c3198913241d72605f12af1365e5baa9ea7f2275f5d9f02cbbe5837"), "chunked file: %s", hex);
    CHECKF(c.n >= 4, "progress called %d times for 4 chunks", c.n);
    CHECK(c.monotonic);
    CHECK(c.within);
    CHECKF(c.last_done == size && c.last_total == size, "last progress %llu of %llu, want %zu",
           (unsigned long long)c.last_done, (unsigned long long)c.last_total, size);

    char whole[VERIFY_HEX_LEN + 1];
    CHECK(verify_sha256_buf(data, size, whole, &err) == LILAC_OK && !strcmp(whole, hex));
    data[size - 1] ^= 1; /* one bit at the very end of the short last chunk */
    CHECK(tu_write_file(path, data, size) == 0);
    CHECK(verify_sha256_file(path, NULL, NULL, hex, &err) == LILAC_OK);
    CHECKF(strcmp(hex, whole) != 0, "a flipped last bit went unnoticed");
    remove(path);
    free(data);
}

static void test_file_errors(void)
{
    char hex[VERIFY_HEX_LEN + 1];
    lilac_error err = {0};
    const char *path = tmp_path("empty.bin");
    CHECK(tu_write_file(path, "", 0) == 0);
    calls c = {.monotonic = true, .within = true};
    CHECK(verify_sha256_file(path, on_progress, &c, hex, &err) == LILAC_OK);
    CHECK(!strcmp(hex, nist[0].hex));
    CHECKF(c.n == 1 && c.last_done == 0 && c.last_total == 0, "empty file: %d progress calls", c.n);
    remove(path);

    path = tmp_path("does-not-exist.gguf");
    CHECK(verify_sha256_file(path, NULL, NULL, hex, &err) == LILAC_E_IO);
    CHECKF(strstr(err.msg, path) && strstr(err.msg, strerror(ENOENT)), "message: %s", err.msg);

    CHECK(verify_sha256_file(dir, NULL, NULL, hex, &err) == LILAC_E_IO);
    CHECKF(strstr(err.msg, dir) && strstr(err.msg, "directory"), "message: %s", err.msg);
}

/* ---- hashes given by a user ------------------------------------------- */

static void test_hex_parse(void)
{
    char hex[VERIFY_HEX_LEN + 1];
    lilac_error err = {0};
    CHECK(verify_hex_parse("BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD", hex, &err) == LILAC_OK);
    CHECKF(!strcmp(hex, nist[1].hex), "upper case not folded: %s", hex);
    CHECK(verify_hex_parse("Ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015aD", hex, &err) == LILAC_OK);
    CHECK(!strcmp(hex, nist[1].hex));

    char s[80];
    snprintf(s, sizeof s, "%.63s", nist[1].hex); /* odd length */
    CHECK(verify_hex_parse(s, hex, &err) == LILAC_E_ARG);
    CHECKF(strstr(err.msg, "63") && strstr(err.msg, "64"), "message: %s", err.msg);
    snprintf(s, sizeof s, "%s0", nist[1].hex);
    CHECK(verify_hex_parse(s, hex, &err) == LILAC_E_ARG);
    CHECKF(strstr(err.msg, "65"), "message: %s", err.msg);
    snprintf(s, sizeof s, "%s", nist[1].hex);
    s[10] = 'g';
    CHECK(verify_hex_parse(s, hex, &err) == LILAC_E_ARG);
    CHECKF(strstr(err.msg, "'g'") && strstr(err.msg, "position 11"), "message: %s", err.msg);
    CHECK(verify_hex_parse("", hex, &err) == LILAC_E_ARG);
    s[10] = ' ';
    CHECK(verify_hex_parse(s, hex, &err) == LILAC_E_ARG);
}

/* ---- manifests -------------------------------------------------------- */

#define H1 "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
#define H2 "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
#define H3 "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"

static verify_manifest *parse(const char *text, lilac_error *err)
{
    verify_manifest *m = NULL;
    lilac_status s = verify_manifest_parse(text, strlen(text), "SUMS", &m, err);
    CHECK((s == LILAC_OK) == (m != NULL));
    return m;
}

static void test_manifest_good(void)
{
    const char *text = "# made by sha256sum\n"
                       H1 "  m-00001-of-00002.gguf\n"
                       "\n"
                       H2 " *m-00002-of-00002.gguf\r\n"
                       "  \t\n"
                       "\\" H3 "  dir/a\\\\b\\nc\n"
                       "SHA256 (tagged (1).gguf) = " H1 "\n"
                       "CDC76E5C9914FB9281A1C7E284D73E67F1809A48A497200E046D39CCC7112CD0  with  spaces.gguf\r\n"
                       H2 "  last, no newline";
    lilac_error err = {0};
    verify_manifest *m = parse(text, &err);
    CHECKF(m, "%s", err.msg);
    if (!m)
        return;
    CHECKF(verify_manifest_count(m) == 6, "%zu entries", verify_manifest_count(m));
    static const struct {
        const char *name, *hex;
        bool binary;
        int line;
    } want[] = {
        {"m-00001-of-00002.gguf", H1, false, 2}, {"m-00002-of-00002.gguf", H2, true, 4},
        {"dir/a\\b\nc", H3, false, 6},          {"tagged (1).gguf", H1, true, 7},
        {"with  spaces.gguf", H3, false, 8},     {"last, no newline", H2, false, 9},
    };
    for (size_t i = 0; i < 6 && i < verify_manifest_count(m); i++) {
        const verify_entry *e = verify_manifest_at(m, i);
        CHECKF(!strcmp(e->name, want[i].name), "entry %zu: name '%s', want '%s'", i, e->name, want[i].name);
        CHECKF(!strcmp(e->hex, want[i].hex), "entry %zu: hash %s", i, e->hex);
        CHECKF(e->binary == want[i].binary, "entry %zu: binary %d", i, e->binary);
        CHECKF(e->line == want[i].line, "entry %zu: line %d, want %d", i, e->line, want[i].line);
    }
    CHECK(verify_manifest_at(m, 6) == NULL);

    const verify_entry *e;
    CHECK(verify_manifest_find(m, "m-00002-of-00002.gguf", &e, &err) == LILAC_OK && e->line == 4);
    CHECK(verify_manifest_find(m, "/data/models/m-00001-of-00002.gguf", &e, &err) == LILAC_OK && e->line == 2);
    CHECK(verify_manifest_find(m, "./with  spaces.gguf", &e, &err) == LILAC_OK && e->line == 8);
    CHECK(verify_manifest_find(m, "elsewhere/a\\b\nc", &e, &err) == LILAC_OK && e->line == 6);
    CHECK(verify_manifest_find(m, "m-00003-of-00002.gguf", &e, &err) == LILAC_E_ARG && !e);
    CHECKF(strstr(err.msg, "m-00003-of-00002.gguf") && strstr(err.msg, "not listed"), "message: %s", err.msg);
    verify_manifest_free(m);
}

static void test_manifest_find_rules(void)
{
    lilac_error err = {0};
    /* the exact path wins over a base-name match; two base-name matches that disagree are an error */
    verify_manifest *m = parse(H1 "  a/model.gguf\n" H2 "  b/model.gguf\n" H3 "  model.gguf\n"
                                  H1 "  c/other.gguf\n" H1 "  d/other.gguf\n", &err);
    CHECKF(m, "%s", err.msg);
    if (!m)
        return;
    const verify_entry *e;
    CHECK(verify_manifest_find(m, "b/model.gguf", &e, &err) == LILAC_OK && !strcmp(e->hex, H2));
    CHECK(verify_manifest_find(m, "model.gguf", &e, &err) == LILAC_OK && !strcmp(e->hex, H3));
    CHECK(verify_manifest_find(m, "x/other.gguf", &e, &err) == LILAC_OK && !strcmp(e->hex, H1));
    verify_manifest_free(m);

    m = parse(H1 "  a/model.gguf\n" H2 "  b/model.gguf\n", &err);
    CHECK(m);
    if (!m)
        return;
    CHECK(verify_manifest_find(m, "model.gguf", &e, &err) == LILAC_E_FORMAT);
    CHECKF(strstr(err.msg, "model.gguf") && strstr(err.msg, "lines 1 and 2"), "message: %s", err.msg);
    verify_manifest_free(m);
}

/* text must be refused, the message holding each of the two strings */
static void bad(const char *label, const char *text, size_t size, lilac_status want, const char *s1, const char *s2)
{
    verify_manifest *m = (verify_manifest *)1;
    lilac_error err = {0};
    lilac_status s = verify_manifest_parse(text, size, "SUMS", &m, &err);
    CHECKF(s == want, "%s: status %s, want %s", label, lilac_status_name(s), lilac_status_name(want));
    CHECKF(m == NULL, "%s: a manifest came back", label);
    CHECKF(strstr(err.msg, s1) && (!s2 || strstr(err.msg, s2)), "%s: message '%s' lacks '%s'/'%s'", label, err.msg,
           s1, s2 ? s2 : "");
}

#define BAD(label, text, s1, s2) bad(label, text, strlen(text), LILAC_E_FORMAT, s1, s2)

static void test_manifest_bad(void)
{
    BAD("garbage on line 3", H1 "  a.gguf\n# note\nthis is not a sum\n" H2 "  b.gguf\n", "SUMS:3:", "malformed");
    BAD("CRLF lines are counted", H1 "  a.gguf\r\n\r\n" H1 "a.gguf\r\n", "SUMS:3:", NULL);
    BAD("63 hex digits", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015a  a.gguf\n", "SUMS:1:", "63");
    BAD("65 hex digits", H1 "0  a.gguf\n", "SUMS:1:", "65");
    BAD("not hex", "\n\nzz7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad  a.gguf\n", "SUMS:3:",
        "'z'");
    BAD("one space", H1 " a.gguf\n", "SUMS:1:", "two spaces");
    BAD("a tab", H1 "\ta.gguf\n", "SUMS:1:", NULL);
    BAD("no name", H1 "  \n", "SUMS:1:", "no file name");
    BAD("hash alone", H1 "\n", "SUMS:1:", NULL);
    BAD("unknown escape", "\\" H1 "  a\\tb\n", "SUMS:1:", "escape");
    BAD("tagged, short hash", "SHA256 (a.gguf) = abc\n", "SUMS:1:", "3");
    BAD("tagged, no name", "SHA256 () = " H1 "\n", "SUMS:1:", "no file name");
    BAD("md5 tag", "MD5 (a.gguf) = 0123456789abcdef0123456789abcdef\n", "SUMS:1:", NULL);
    BAD("only comments", "# nothing\n\n", "no SHA-256 lines", NULL);
    BAD("empty", "", "no SHA-256 lines", NULL);
    static const char nul[] = H1 "  a\0b\n";
    bad("a NUL byte", nul, sizeof nul - 1, LILAC_E_FORMAT, "SUMS:1:", "NUL");

    size_t big = VERIFY_MANIFEST_MAX + 1;
    char *text = malloc(big);
    CHECK(text);
    if (text) {
        memset(text, '#', big);
        bad("too large", text, big, LILAC_E_RANGE, "too large", NULL);
        free(text);
    }
}

static void test_manifest_load(void)
{
    lilac_error err = {0};
    verify_manifest *m = NULL;
    const char *path = tmp_path("SHA256SUMS");
    const char *text = H1 "  a.gguf\n" H2 "  b.gguf\n";
    CHECK(tu_write_file(path, text, strlen(text)) == 0);
    CHECKF(verify_manifest_load(path, &m, &err) == LILAC_OK, "%s", err.msg);
    CHECK(m && verify_manifest_count(m) == 2);
    verify_manifest_free(m);

    const char *garbage = H1 "  a.gguf\nnonsense\n";
    CHECK(tu_write_file(path, garbage, strlen(garbage)) == 0);
    CHECK(verify_manifest_load(path, &m, &err) == LILAC_E_FORMAT && !m);
    CHECKF(strstr(err.msg, path) && strstr(err.msg, ":2:"), "message: %s", err.msg);

    /* a model given as the manifest by mistake: refused from its size, not read (a sparse file here) */
    FILE *f = fopen(path, "wb");
    CHECK(f && ftruncate(fileno(f), (off_t)VERIFY_MANIFEST_MAX + 4096) == 0);
    if (f)
        fclose(f);
    CHECK(verify_manifest_load(path, &m, &err) == LILAC_E_RANGE && !m);
    CHECKF(strstr(err.msg, "too large"), "message: %s", err.msg);
    remove(path);

    CHECK(verify_manifest_load(path, &m, &err) == LILAC_E_IO && !m);
    CHECKF(strstr(err.msg, path) && strstr(err.msg, strerror(ENOENT)), "message: %s", err.msg);
    verify_manifest_free(NULL);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/lilac-verify-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "mkdtemp %s: %s\n", dir, strerror(errno));
        return 1;
    }
    test_nist();
    test_chunks();
    test_file_errors();
    test_hex_parse();
    test_manifest_good();
    test_manifest_find_rules();
    test_manifest_bad();
    test_manifest_load();
    rmdir(dir);
    TEST_END();
}
