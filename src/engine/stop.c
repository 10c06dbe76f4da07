/* stop: stop strings matched across token boundaries. The watcher keeps
 * the longest tail of the text that is still a prefix of some stop string
 * and releases everything before it. */
#include <stdlib.h>
#include <string.h>

#include "lilac.h"
#include "util/err.h"

struct lilac_stop {
    char **stops;
    size_t *lens;
    int n;
    size_t max_len;
    char *buf; /* held-back tail + the new piece */
    size_t len, cap;
    char *out; /* what the last call released */
    size_t out_cap;
};

lilac_status lilac_stop_new(const char *const *stops, int n_stops, lilac_stop **out, lilac_error *err)
{
    *out = NULL;
    lilac_stop *st = calloc(1, sizeof *st);
    if (!st)
        return lilac_fail(err, LILAC_E_NOMEM, "out of memory");
    st->stops = calloc((size_t)(n_stops > 0 ? n_stops : 1), sizeof *st->stops);
    st->lens = calloc((size_t)(n_stops > 0 ? n_stops : 1), sizeof *st->lens);
    if (!st->stops || !st->lens) {
        lilac_stop_free(st);
        return lilac_fail(err, LILAC_E_NOMEM, "out of memory");
    }
    for (int i = 0; i < n_stops; i++) {
        size_t l = strlen(stops[i]);
        if (l == 0)
            continue; /* an empty stop string would stop at once: ignore it */
        st->stops[st->n] = strdup(stops[i]);
        if (!st->stops[st->n]) {
            lilac_stop_free(st);
            return lilac_fail(err, LILAC_E_NOMEM, "out of memory");
        }
        st->lens[st->n++] = l;
        if (l > st->max_len)
            st->max_len = l;
    }
    *out = st;
    return LILAC_OK;
}

void lilac_stop_free(lilac_stop *st)
{
    if (!st)
        return;
    for (int i = 0; i < st->n; i++)
        free(st->stops[i]);
    free(st->stops);
    free(st->lens);
    free(st->buf);
    free(st->out);
    free(st);
}

static bool reserve(char **p, size_t *cap, size_t need)
{
    if (need <= *cap)
        return true;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    char *q = realloc(*p, c);
    if (!q)
        return false;
    *p = q;
    *cap = c;
    return true;
}

/* Length of the longest suffix of buf[0..len) that is a proper prefix of a stop string. */
static size_t held_suffix(const lilac_stop *st, const char *buf, size_t len)
{
    size_t start = len > st->max_len ? len - st->max_len : 0;
    for (size_t i = start; i < len; i++)
        for (int k = 0; k < st->n; k++) {
            size_t tail = len - i;
            if (tail < st->lens[k] && memcmp(buf + i, st->stops[k], tail) == 0)
                return tail;
        }
    return 0;
}

static void release(lilac_stop *st, size_t n, const char **emit, size_t *n_emit)
{
    /* copy out so the caller's view survives the buffer being shifted */
    if (!reserve(&st->out, &st->out_cap, n + 1))
        n = 0;
    if (n)
        memcpy(st->out, st->buf, n);
    memmove(st->buf, st->buf + n, st->len - n);
    st->len -= n;
    *emit = st->out;
    *n_emit = n;
}

bool lilac_stop_feed(lilac_stop *st, const char *text, size_t len, const char **emit, size_t *n_emit)
{
    if (!reserve(&st->buf, &st->cap, st->len + len + 1)) {
        *emit = text; /* out of memory: pass the text through unwatched */
        *n_emit = len;
        return false;
    }
    memcpy(st->buf + st->len, text, len);
    st->len += len;
    /* the earliest complete stop string wins */
    size_t first = st->len;
    for (int k = 0; k < st->n; k++) {
        if (st->lens[k] > st->len)
            continue;
        for (size_t i = 0; i + st->lens[k] <= st->len && i < first; i++)
            if (memcmp(st->buf + i, st->stops[k], st->lens[k]) == 0) {
                first = i;
                break;
            }
    }
    if (first < st->len) {
        release(st, first, emit, n_emit);
        st->len = 0;
        return true;
    }
    release(st, st->len - held_suffix(st, st->buf, st->len), emit, n_emit);
    return false;
}

void lilac_stop_flush(lilac_stop *st, const char **emit, size_t *n_emit) { release(st, st->len, emit, n_emit); }
