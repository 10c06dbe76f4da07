/* lilac verify FILE... [--sha256 HEX | --manifest SUMS]: SHA-256 of model
 * files (format/verify.h), printed as sha256sum prints it, or checked against
 * a publisher's hash or sha256sum manifest. On a terminal the progress is
 * redrawn in place on stderr; elsewhere stderr carries only errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "format/verify.h"

typedef struct progress {
    bool tty;
    bool drawn;       /* a progress line is on the screen */
    const char *name; /* the file being read */
    int index, count; /* 1-based, of how many */
    double start, last_draw;
} progress;

typedef struct tally {
    int ok, failed, unreadable;
} tally;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void clear_line(progress *p)
{
    if (p->drawn) {
        fputs("\r\033[K", stderr);
        p->drawn = false;
    }
}

static void on_progress(void *user, uint64_t done, uint64_t total)
{
    progress *p = user;
    double t = now_s();
    if (!p->tty || (done < total && t - p->last_draw < 0.1)) /* ten redraws a second are plenty */
        return;
    p->last_draw = t;
    double mb_s = (double)done / 1e6 / (t - p->start > 1e-3 ? t - p->start : 1e-3);
    size_t len = strlen(p->name);
    const char *shown = len > 48 ? p->name + len - 45 : p->name; /* one line, or \r cannot redraw it */
    fprintf(stderr, "\r\033[Klilac: verify");
    if (p->count > 1)
        fprintf(stderr, " [%d/%d]", p->index, p->count);
    fprintf(stderr, " %s%s  ", shown == p->name ? "" : "...", shown);
    if (total)
        fprintf(stderr, "%3d%% of %.2f GB", (int)(done >= total ? 100 : done * 100 / total), (double)total / 1e9);
    else
        fprintf(stderr, "%.2f GB", (double)done / 1e9);
    fprintf(stderr, "  %.0f MB/s", mb_s);
    fflush(stderr);
    p->drawn = true;
}

/* Hash one file; on failure the error is printed and -1 returned. "-" is
 * standard input, as for sha256sum. */
static int hash_one(const char *path, progress *p, int index, char hex[VERIFY_HEX_LEN + 1])
{
    p->name = path;
    p->index = index;
    p->start = p->last_draw = now_s();
    lilac_error err;
    lilac_status s = verify_sha256_file(strcmp(path, "-") ? path : "/dev/stdin", on_progress, p, hex, &err);
    clear_line(p);
    if (s) {
        fflush(stdout); /* keep the order of the lines on a shared terminal */
        cli_fail_err(&err);
        return -1;
    }
    return 0;
}

/* A file name as sha256sum writes it: with a backslash, a newline or a
 * carriage return in it, the line starts with '\' and those are escaped. */
static bool needs_escape(const char *name)
{
    return strpbrk(name, "\\\n\r") != NULL;
}

/* The name, escaped; the caller puts the '\' that starts the line. */
static void put_name(const char *name)
{
    for (const char *c = name; *c; c++) {
        if (*c == '\\')
            fputs("\\\\", stdout);
        else if (*c == '\n')
            fputs("\\n", stdout);
        else if (*c == '\r')
            fputs("\\r", stdout);
        else
            putchar(*c);
    }
}

static void put_result(const char *name, const char *want, const char *got, tally *t)
{
    if (needs_escape(name))
        putchar('\\');
    put_name(name);
    if (!strcmp(want, got)) {
        fputs(": OK\n", stdout);
        t->ok++;
    } else {
        printf(": FAILED (expected %s, got %s)\n", want, got);
        t->failed++;
    }
    fflush(stdout);
}

static void help(FILE *f)
{
    fputs("usage: lilac verify FILE... [--sha256 HEX | --manifest SUMS]\n"
          "\n"
          "SHA-256 of model files, to check a download against the hash its publisher lists.\n"
          "\n"
          "  (no option)      print \"HEX  FILE\" lines exactly as sha256sum does (save them as a manifest)\n"
          "  --sha256 HEX     check one FILE against HEX (64 hex digits, either case): OK or FAILED\n"
          "  --manifest SUMS  check each FILE against its line in SUMS, a sha256sum (or --tag) listing,\n"
          "                   found by the path as written, else by its base name; with no FILE, check\n"
          "                   every file SUMS lists, relative to the directory SUMS is in\n"
          "\n"
          "FILE may be '-' for standard input. Split GGUF shards (m-00001-of-00002.gguf, ...) are\n"
          "files like any other: list them all, or let --manifest check every one it names.\n"
          "Exit status: 0 all OK, 1 a hash did not match or a file was missing or unreadable,\n"
          "2 bad usage. On a terminal, progress (percent, MB/s) is shown on stderr.\n",
          f);
}

static int usage_fail(const char *fmt, const char *arg)
{
    cli_fail(fmt, arg);
    return 2;
}

/* No option: the lines sha256sum prints. */
static int print_sums(char **files, int n, progress *p)
{
    int rc = 0;
    for (int i = 0; i < n; i++) {
        char hex[VERIFY_HEX_LEN + 1];
        if (hash_one(files[i], p, i + 1, hex)) {
            rc = 1;
            continue;
        }
        printf("%s%s  ", needs_escape(files[i]) ? "\\" : "", hex);
        put_name(files[i]);
        putchar('\n');
        fflush(stdout);
    }
    return rc;
}

static int check_one_hash(const char *file, const char *given, progress *p)
{
    char want[VERIFY_HEX_LEN + 1], got[VERIFY_HEX_LEN + 1];
    lilac_error err;
    if (verify_hex_parse(given, want, &err)) {
        fprintf(stderr, "lilac: error: verify: --sha256: %s\n", err.msg);
        return 2;
    }
    if (hash_one(file, p, 1, got))
        return 1;
    tally t = {0};
    put_result(file, want, got, &t);
    return t.failed ? 1 : 0;
}

/* Hash path and compare with e, counting the outcome. */
static void check_entry(const char *path, const verify_entry *e, progress *p, int index, tally *t)
{
    char got[VERIFY_HEX_LEN + 1];
    if (hash_one(path, p, index, got))
        t->unreadable++;
    else
        put_result(path, e->hex, got, t);
}

/* name joined to the manifest's directory, unless it is absolute or the
 * manifest has no directory part. NULL when out of memory. */
static char *beside_manifest(const char *manifest, const char *name)
{
    const char *slash = strrchr(manifest, '/');
    size_t dl = slash ? (size_t)(slash - manifest) + 1 : 0; /* with its '/' */
    if (name[0] == '/')
        dl = 0;
    size_t nl = strlen(name);
    char *out = malloc(dl + nl + 1);
    if (out) {
        memcpy(out, manifest, dl);
        memcpy(out + dl, name, nl + 1);
    }
    return out;
}

static int check_manifest(const char *sums, char **files, int n, progress *p)
{
    verify_manifest *m;
    lilac_error err;
    if (verify_manifest_load(sums, &m, &err))
        return cli_fail_err(&err);
    tally t = {0};
    int rc = 0;
    if (n) {
        /* every FILE must have its line before any is read: hashing 20 GB to then say so helps no one */
        for (int i = 0; i < n; i++) {
            const verify_entry *e;
            if (verify_manifest_find(m, files[i], &e, &err)) {
                fprintf(stderr, "lilac: error: %s (%s)\n", err.msg, sums);
                rc = 1;
            }
        }
        for (int i = 0; i < n && !rc; i++) {
            const verify_entry *e;
            verify_manifest_find(m, files[i], &e, &err); /* found above */
            check_entry(files[i], e, p, i + 1, &t);
        }
    } else {
        p->count = (int)verify_manifest_count(m);
        for (size_t i = 0; i < verify_manifest_count(m) && !rc; i++) {
            const verify_entry *e = verify_manifest_at(m, i);
            char *path = beside_manifest(sums, e->name);
            if (!path)
                rc = cli_fail("%s", "out of memory");
            else
                check_entry(path, e, p, (int)i + 1, &t);
            free(path);
        }
    }
    verify_manifest_free(m);
    if (rc)
        return rc;
    printf("%d file%s checked: %d OK, %d FAILED, %d unreadable\n", t.ok + t.failed + t.unreadable,
           t.ok + t.failed + t.unreadable == 1 ? "" : "s", t.ok, t.failed, t.unreadable);
    return t.failed || t.unreadable ? 1 : 0;
}

int cmd_verify(int argc, char **argv)
{
    const char *sha = NULL, *sums = NULL;
    char **files = argv; /* the FILEs are packed to the front of argv as it is read */
    int n = 0;
    bool opts_done = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (opts_done || a[0] != '-' || !a[1])
            files[n++] = argv[i];
        else if (!strcmp(a, "--"))
            opts_done = true;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            help(stdout);
            return 0;
        } else if (!strcmp(a, "--sha256") || !strcmp(a, "--manifest")) {
            if (i + 1 >= argc)
                return usage_fail("verify: %s wants a value", a);
            if (sha || sums)
                return usage_fail("verify: %s: give one --sha256 or one --manifest", a);
            if (!strcmp(a, "--sha256"))
                sha = argv[++i];
            else
                sums = argv[++i];
        } else
            return usage_fail("verify: unknown option '%s' (lilac verify --help)", a);
    }
    progress p = {.tty = isatty(2) != 0, .count = n};
    if (sha) {
        if (n != 1)
            return usage_fail("verify: --sha256 checks exactly one FILE%s",
                              n ? ", not several" : ", and none was given");
        return check_one_hash(files[0], sha, &p);
    }
    if (sums)
        return check_manifest(sums, files, n, &p);
    if (!n)
        return usage_fail("%s", "verify: no FILE given (lilac verify --help)");
    return print_sums(files, n, &p);
}
