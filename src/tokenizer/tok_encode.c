/* tok_encode: text -> ids. Added tokens first, then NFC, the pre-tokenizer
 * regex, and byte-level BPE per piece with a cache of pieces seen before. */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "util/err.h"

/* ---- NFC --------------------------------------------------------------- */

/* A code point is "unsafe" when NFC might change it or what is next to it:
 * it is not a starter (combining class != 0), it is not stable alone under
 * NFC, or it can be the second part of a canonical composition. A run of
 * safe characters is NFC already, and NFC never reaches across a safe
 * character, so only the unsafe runs (with the safe character before them,
 * the starter they might compose with) need utf8proc. */
#define NFC_SCAN_END 0x40000 /* no canonical decompositions or marks above, but for plane 14 */
static uint8_t g_unsafe[0x110000 / 8];
static pthread_once_t g_nfc_once = PTHREAD_ONCE_INIT;

static inline void set_unsafe(uint32_t cp)
{
    if (cp < 0x110000)
        g_unsafe[cp >> 3] |= (uint8_t)(1u << (cp & 7));
}

static inline bool is_unsafe(uint32_t cp) { return (g_unsafe[cp >> 3] >> (cp & 7)) & 1; }

static void nfc_scan(uint32_t lo, uint32_t hi)
{
    utf8proc_int32_t buf[32];
    for (uint32_t cp = lo; cp < hi; cp++) {
        if ((cp >= 0xD800 && cp <= 0xDFFF) || (cp >= 0xAC00 && cp <= 0xD7A3))
            continue; /* surrogates; Hangul syllables are stable starters */
        const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)cp);
        if (p->combining_class != 0)
            set_unsafe(cp);
        int bc = 0;
        utf8proc_ssize_t n = utf8proc_decompose_char((utf8proc_int32_t)cp, buf, 32, UTF8PROC_DECOMPOSE, &bc);
        if (n <= 0 || n > 32 || (n == 1 && (uint32_t)buf[0] == cp))
            continue;
        for (utf8proc_ssize_t i = 1; i < n; i++)
            set_unsafe((uint32_t)buf[i]); /* may be the second part of a composition */
        /* stable alone? (singletons and composition exclusions are not) */
        char u[4];
        int k = tok_utf8_encode(cp, u);
        utf8proc_uint8_t *dst = NULL;
        utf8proc_ssize_t m =
            utf8proc_map((const utf8proc_uint8_t *)u, k, &dst, (utf8proc_option_t)(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
        if (m != k || memcmp(dst, u, (size_t)k) != 0)
            set_unsafe(cp);
        free(dst);
    }
}

static void nfc_init(void)
{
    nfc_scan(0x80, NFC_SCAN_END);
    nfc_scan(0xE0000, 0xE1000);
    /* Hangul: medial vowels and final consonants compose with what precedes */
    for (uint32_t cp = 0x1161; cp <= 0x1175; cp++)
        set_unsafe(cp);
    for (uint32_t cp = 0x11A8; cp <= 0x11C2; cp++)
        set_unsafe(cp);
}

static bool grow_buf(char **p, size_t *cap, size_t need)
{
    if (need <= *cap)
        return true;
    size_t nc = *cap ? *cap : 1024;
    while (nc < need) {
        if (nc > SIZE_MAX / 2)
            return false;
        nc *= 2;
    }
    char *q = realloc(*p, nc);
    if (!q)
        return false;
    *p = q;
    *cap = nc;
    return true;
}

lilac_status tok_nfc(const char *s, size_t n, char **buf, size_t *cap, const char **out, size_t *out_len,
                     lilac_error *err)
{
    pthread_once(&g_nfc_once, nfc_init);
    const uint8_t *u = (const uint8_t *)s;
    size_t i = 0, copied = 0, olen = 0;
    size_t prev = SIZE_MAX; /* start of the previous character when it is safe */
    bool copying = false;
    while (i < n) {
        if (u[i] < 0x80) {
            prev = i++;
            continue;
        }
        int l;
        uint32_t cp = tok_utf8_decode(u + i, &l);
        if (!is_unsafe(cp)) {
            prev = i;
            i += (size_t)l;
            continue;
        }
        /* an unsafe run, from the safe starter before it to the next safe character */
        size_t rs = prev != SIZE_MAX ? prev : i, re = i + (size_t)l;
        while (re < n) {
            if (u[re] < 0x80)
                break;
            int l2;
            uint32_t c2 = tok_utf8_decode(u + re, &l2);
            if (!is_unsafe(c2))
                break;
            re += (size_t)l2;
        }
        utf8proc_uint8_t *dst = NULL;
        utf8proc_ssize_t m = utf8proc_map(u + rs, (utf8proc_ssize_t)(re - rs), &dst,
                                          (utf8proc_option_t)(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
        if (m < 0) {
            free(dst);
            return lilac_fail(err, LILAC_E_INTERNAL, "NFC normalization failed: %s", utf8proc_errmsg(m));
        }
        if (!grow_buf(buf, cap, olen + (rs - copied) + (size_t)m + (n - re) + 1)) {
            free(dst);
            return lilac_fail(err, LILAC_E_NOMEM, "NFC normalization: out of memory");
        }
        memcpy(*buf + olen, s + copied, rs - copied);
        olen += rs - copied;
        memcpy(*buf + olen, dst, (size_t)m);
        olen += (size_t)m;
        free(dst);
        copying = true;
        copied = i = re;
        prev = SIZE_MAX;
    }
    if (!copying) {
        *out = s;
        *out_len = n;
        return LILAC_OK;
    }
    if (!grow_buf(buf, cap, olen + (n - copied) + 1))
        return lilac_fail(err, LILAC_E_NOMEM, "NFC normalization: out of memory");
    memcpy(*buf + olen, s + copied, n - copied);
    olen += n - copied;
    *out = *buf;
    *out_len = olen;
    return LILAC_OK;
}

/* ---- encoding context -------------------------------------------------- */

typedef struct enc_ctx {
    tok_tokenizer *t;
    bool parse_special;
    tok_ids *out;    /* encoding */
    tok_piece_fn fn; /* or reporting pieces */
    void *user;
    lilac_error *err;
} enc_ctx;

static lilac_status push_ids(enc_ctx *c, const int32_t *ids, size_t n)
{
    tok_ids *v = c->out;
    if (v->n + n > v->cap) {
        size_t nc = v->cap ? v->cap : 64;
        while (nc < v->n + n) {
            if (nc > SIZE_MAX / 2 / sizeof *v->ids)
                return lilac_fail(c->err, LILAC_E_NOMEM, "tok_encode: out of memory");
            nc *= 2;
        }
        int32_t *p = realloc(v->ids, nc * sizeof *p);
        if (!p)
            return lilac_fail(c->err, LILAC_E_NOMEM, "tok_encode: out of memory");
        v->ids = p;
        v->cap = nc;
    }
    memcpy(v->ids + v->n, ids, n * sizeof *ids);
    v->n += n;
    return LILAC_OK;
}

/* ---- the piece cache --------------------------------------------------- */

static void cache_clear(tok_tokenizer *t)
{
    if (t->cache)
        memset(t->cache, 0, t->cache_cap * sizeof *t->cache);
    t->cache_n = t->ckeys_len = t->cids_len = 0;
}

static const tok_cent *cache_get(const tok_tokenizer *t, uint64_t h, const uint8_t *s, size_t n)
{
    if (!t->cache)
        return NULL;
    for (size_t j = h & (t->cache_cap - 1);; j = (j + 1) & (t->cache_cap - 1)) {
        const tok_cent *e = &t->cache[j];
        if (!e->hash)
            return NULL;
        if (e->hash == h && e->key_len == n && memcmp(t->ckeys + e->key_off, s, n) == 0)
            return e;
    }
}

/* Remember a piece; failures only mean it is not remembered. */
static void cache_put(tok_tokenizer *t, uint64_t h, const uint8_t *s, size_t n, const int32_t *ids, size_t nid)
{
    if (!t->cache) {
        size_t cap = 16;
        while (cap < t->cache_max * 2)
            cap *= 2;
        if (!(t->cache = calloc(cap, sizeof *t->cache)))
            return;
        t->cache_cap = cap;
    }
    if (t->cache_n >= t->cache_max || t->ckeys_len + n > UINT32_MAX / 2 || t->cids_len + nid > UINT32_MAX / 2)
        cache_clear(t);
    if (!grow_buf(&t->ckeys, &t->ckeys_cap, t->ckeys_len + n))
        return;
    if (t->cids_len + nid > t->cids_cap) {
        size_t nc = t->cids_cap ? t->cids_cap * 2 : 4096;
        while (nc < t->cids_len + nid)
            nc *= 2;
        int32_t *p = realloc(t->cids, nc * sizeof *p);
        if (!p)
            return;
        t->cids = p;
        t->cids_cap = nc;
    }
    size_t j = h & (t->cache_cap - 1);
    while (t->cache[j].hash)
        j = (j + 1) & (t->cache_cap - 1);
    memcpy(t->ckeys + t->ckeys_len, s, n);
    memcpy(t->cids + t->cids_len, ids, nid * sizeof *ids);
    t->cache[j] = (tok_cent){h, (uint32_t)t->ckeys_len, (uint32_t)n, (uint32_t)t->cids_len, (uint32_t)nid};
    t->ckeys_len += n;
    t->cids_len += nid;
    t->cache_n++;
}

void tok_set_cache(tok_tokenizer *t, size_t max_entries)
{
    pthread_mutex_lock(&t->mu);
    free(t->cache);
    t->cache = NULL;
    t->cache_cap = 0;
    cache_clear(t);
    t->cache_max = max_entries > (1u << 24) ? (1u << 24) : max_entries;
    pthread_mutex_unlock(&t->mu);
}

/* ---- BPE --------------------------------------------------------------- */

static inline bool pair_get(const tok_pairmap *m, int32_t a, int32_t b, uint32_t *rank, int32_t *id)
{
    if (!m->cap)
        return false;
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    size_t j = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & (m->cap - 1);
    for (;; j = (j + 1) & (m->cap - 1)) {
        const struct tok_pairent *e = &m->slots[j];
        if (e->key == key) {
            *rank = e->rank;
            *id = e->id;
            return true;
        }
        if (e->key == UINT64_MAX)
            return false;
    }
}

/* Small pieces: the symbols in an array, the rank of each adjacent pair
 * beside them; merge the lowest rank, leftmost first, until none is left. */
static size_t merge_small(const tok_tokenizer *t, int32_t *id, size_t n, uint32_t *rk, int32_t *nid)
{
    rk[n - 1] = UINT32_MAX;
    nid[n - 1] = -1;
    for (size_t i = 0; i + 1 < n; i++)
        if (!pair_get(&t->merges, id[i], id[i + 1], &rk[i], &nid[i]))
            rk[i] = UINT32_MAX;
    while (n > 1) {
        size_t best = 0;
        uint32_t br = UINT32_MAX;
        for (size_t i = 0; i + 1 < n; i++)
            if (rk[i] < br) {
                br = rk[i];
                best = i;
            }
        if (br == UINT32_MAX)
            break;
        id[best] = nid[best];
        size_t tail = n - best - 2;
        memmove(id + best + 1, id + best + 2, tail * sizeof *id);
        memmove(rk + best + 1, rk + best + 2, tail * sizeof *rk);
        memmove(nid + best + 1, nid + best + 2, tail * sizeof *nid);
        n--;
        if (best + 1 < n && !pair_get(&t->merges, id[best], id[best + 1], &rk[best], &nid[best]))
            rk[best] = UINT32_MAX;
        if (best + 1 >= n)
            rk[best] = UINT32_MAX;
        if (best > 0 && !pair_get(&t->merges, id[best - 1], id[best], &rk[best - 1], &nid[best - 1]))
            rk[best - 1] = UINT32_MAX;
    }
    return n;
}

/* Large pieces: HF's algorithm, a heap of (rank, position) over a linked
 * list of symbols; stale entries are recognized and dropped when popped. */
typedef struct heap_ent {
    uint32_t rank;
    int32_t pos, nid;
} heap_ent;

static inline bool heap_less(const heap_ent *a, const heap_ent *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(heap_ent *h, size_t *n, heap_ent e)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(&e, &h[p]))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static heap_ent heap_pop(heap_ent *h, size_t *n)
{
    heap_ent top = h[0], last = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, s = i;
        const heap_ent *sv = &last;
        if (l < m && heap_less(&h[l], sv))
            s = l, sv = &h[l];
        if (r < m && heap_less(&h[r], sv))
            s = r;
        if (s == i)
            break;
        h[i] = h[s];
        i = s;
    }
    if (m)
        h[i] = last;
    return top;
}

static size_t merge_heap(const tok_tokenizer *t, int32_t *id, size_t n, int32_t *prev, int32_t *next, heap_ent *h)
{
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        heap_ent e = {0, (int32_t)i, 0};
        if (pair_get(&t->merges, id[i], id[i + 1], &e.rank, &e.nid))
            heap_push(h, &hn, e);
    }
    while (hn) {
        heap_ent e = heap_pop(h, &hn);
        int32_t p = e.pos, q;
        if (id[p] < 0 || (q = next[p]) < 0)
            continue;
        uint32_t r;
        int32_t nid;
        if (!pair_get(&t->merges, id[p], id[q], &r, &nid) || nid != e.nid)
            continue; /* stale */
        id[p] = nid;
        id[q] = -1;
        next[p] = next[q];
        if (next[q] >= 0)
            prev[next[q]] = p;
        if (prev[p] >= 0) {
            heap_ent f = {0, prev[p], 0};
            if (pair_get(&t->merges, id[prev[p]], id[p], &f.rank, &f.nid))
                heap_push(h, &hn, f);
        }
        if (next[p] >= 0) {
            heap_ent f = {0, p, 0};
            if (pair_get(&t->merges, id[p], id[next[p]], &f.rank, &f.nid))
                heap_push(h, &hn, f);
        }
    }
    size_t k = 0;
    for (int32_t i = 0; i >= 0 && (size_t)i < n; i = next[i])
        id[k++] = id[i];
    return k;
}

#define SMALL_PIECE 48

static lilac_status bpe_piece(enc_ctx *c, const uint8_t *s, size_t n)
{
    tok_tokenizer *t = c->t;
    if (n == 0)
        return LILAC_OK;
    uint64_t h = 0;
    if (t->cache_max && n <= TOK_CACHE_MAX_KEY) {
        h = tok_hash(s, n) | 1;
        const tok_cent *e = cache_get(t, h, s, n);
        if (e)
            return push_ids(c, t->cids + e->ids_off, e->n_ids);
    }
    /* symbols: id[n], then prev/next or ranks, then the heap: it starts
     * with at most n - 1 entries and each merge pops one and pushes at most
     * two, so it never holds more than 2 n */
    size_t need = n * (3 * sizeof(int32_t) + 2 * sizeof(heap_ent));
    if (n > SIZE_MAX / 64 || !grow_buf((char **)&t->scratch, &t->scratch_cap, need))
        return lilac_fail(c->err, LILAC_E_NOMEM, "tok_encode: out of memory");
    int32_t *id = t->scratch, *a1 = id + n, *a2 = a1 + n;
    heap_ent *hp = (heap_ent *)(a2 + n);
    size_t cnt = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t b = t->byte_id[s[i]];
        if (b < 0)
            b = t->unk_id;
        if (b >= 0)
            id[cnt++] = b; /* a byte with no token and no unk is dropped, as HF does */
    }
    bool whole = false;
    if (t->ignore_merges && cnt > 1) {
        /* the piece as one token when the vocabulary has it */
        if (!grow_buf(&t->bl, &t->bl_cap, 2 * n))
            return lilac_fail(c->err, LILAC_E_NOMEM, "tok_encode: out of memory");
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            k += (size_t)tok_utf8_encode(tok_byte_to_cp(s[i]), t->bl + k);
        int32_t w = tok_strmap_get(&t->vocab, t->bl, k);
        if (w >= 0) {
            id[0] = w;
            cnt = 1;
            whole = true;
        }
    }
    if (!whole && cnt > 1)
        cnt = cnt <= SMALL_PIECE ? merge_small(t, id, cnt, (uint32_t *)a1, a2) : merge_heap(t, id, cnt, a1, a2, hp);
    if (h)
        cache_put(t, h, s, n, id, cnt);
    return push_ids(c, id, cnt);
}

/* ---- splitting --------------------------------------------------------- */

static lilac_status emit_piece(enc_ctx *c, const char *s, size_t n)
{
    if (c->fn) {
        if (n)
            c->fn(c->user, s, n, -1);
        return LILAC_OK;
    }
    return bpe_piece(c, (const uint8_t *)s, n);
}

static lilac_status split_stage(enc_ctx *c, const char *s, size_t n, int stage)
{
    tok_tokenizer *t = c->t;
    if (stage >= t->n_split)
        return emit_piece(c, s, n);
    pcre2_code *re = t->re[stage];
    pcre2_match_data *md = t->md[stage];
    size_t pos = 0, gap = 0;
    lilac_status st;
    while (pos < n) {
        int rc = t->re_jit[stage] ? pcre2_jit_match(re, (PCRE2_SPTR)s, n, pos, 0, md, t->mctx)
                                  : pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, md, t->mctx);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return lilac_fail(c->err, LILAC_E_RANGE, "%s: pre-tokenizer regex failed on a %zu-byte text: %s",
                              t->source, n, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms) { /* an empty match: nothing to cut, step past one character */
            if (ms >= n)
                break;
            int l;
            tok_utf8_decode((const uint8_t *)s + ms, &l);
            pos = ms + (size_t)l;
            continue;
        }
        if (ms > gap && (st = split_stage(c, s + gap, ms - gap, stage + 1)))
            return st;
        if ((st = split_stage(c, s + ms, me - ms, stage + 1)))
            return st;
        gap = pos = me;
    }
    return gap < n ? split_stage(c, s + gap, n - gap, stage + 1) : LILAC_OK;
}

/* Where the next added token of the given kind starts in s[pos..n) (n if
 * none); *ai its index in t->added. Leftmost, then longest. */
static size_t find_added(const tok_tokenizer *t, const char *s, size_t n, size_t pos, bool normalized,
                         bool parse_special, size_t *ai)
{
    const uint32_t *ms = t->match_start;
    for (size_t p = pos; p < n; p++) {
        uint8_t ch = (uint8_t)s[p];
        for (uint32_t k = ms[ch]; k < ms[ch + 1]; k++) {
            const tok_added *a = &t->added[t->match_ix[k]];
            if (a->normalized != normalized || (a->special && !parse_special) || a->len > n - p)
                continue;
            if (memcmp(s + p, t->strs + a->off, a->len) == 0) {
                *ai = t->match_ix[k];
                return p;
            }
        }
    }
    return n;
}

static lilac_status emit_added(enc_ctx *c, size_t ai)
{
    const tok_added *a = &c->t->added[ai];
    if (c->fn) {
        c->fn(c->user, c->t->strs + a->off, a->len, a->id);
        return LILAC_OK;
    }
    return push_ids(c, &a->id, 1);
}

/* Text with the added tokens of one kind cut out; the rest goes on to
 * normalization (raw text) or the pre-tokenizer (normalized text). */
static lilac_status segment(enc_ctx *c, const char *s, size_t n, bool normalized);

static lilac_status run_added(enc_ctx *c, const char *s, size_t n, bool normalized)
{
    size_t pos = 0, ai = 0;
    lilac_status st;
    while (pos < n) {
        size_t m = find_added(c->t, s, n, pos, normalized, c->parse_special, &ai);
        if (m > pos && (st = segment(c, s + pos, m - pos, normalized)))
            return st;
        if (m >= n)
            break;
        if ((st = emit_added(c, ai)))
            return st;
        pos = m + c->t->added[ai].len;
    }
    return LILAC_OK;
}

static lilac_status segment(enc_ctx *c, const char *s, size_t n, bool normalized)
{
    tok_tokenizer *t = c->t;
    if (normalized)
        return split_stage(c, s, n, 0);
    const char *ns = s;
    size_t nn = n;
    lilac_status st;
    if (t->nfc && (st = tok_nfc(s, n, &t->nbuf, &t->nbuf_cap, &ns, &nn, c->err)))
        return st;
    if (!t->any_normalized_added)
        return split_stage(c, ns, nn, 0);
    /* (the normalized path below never normalizes again, so ns, which may
     * be t->nbuf, stays as it is) */
    return run_added(c, ns, nn, true);
}

/* ---- the entry points -------------------------------------------------- */

tok_encode_opts tok_encode_default_opts(void) { return (tok_encode_opts){.parse_special = true}; }

void tok_ids_free(tok_ids *v)
{
    if (!v)
        return;
    free(v->ids);
    v->ids = NULL;
    v->n = v->cap = 0;
}

static lilac_status check_utf8(const tok_tokenizer *t, const char *text, size_t len, lilac_error *err)
{
    const uint8_t *s = (const uint8_t *)text;
    size_t i = 0;
    while (i < len) {
        if (i + 8 <= len) {
            uint64_t v;
            memcpy(&v, s + i, 8);
            if (!(v & 0x8080808080808080ull)) {
                i += 8;
                continue;
            }
        }
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        int k = tok_utf8_step(s + i, len - i);
        if (k <= 0)
            return lilac_fail(err, LILAC_E_ARG, "%s: text is not valid UTF-8 (byte 0x%02X at offset %zu)",
                              t->source, s[i], i);
        i += (size_t)k;
    }
    return LILAC_OK;
}

static lilac_status run(enc_ctx *c, const char *text, size_t len)
{
    tok_tokenizer *t = c->t;
    if (!t || (!text && len))
        return lilac_fail(c->err, LILAC_E_ARG, "tok_encode: NULL argument");
    lilac_status st = check_utf8(t, text, len, c->err);
    if (st)
        return st;
    pthread_mutex_lock(&t->mu);
    st = len ? run_added(c, text, len, false) : LILAC_OK;
    pthread_mutex_unlock(&t->mu);
    return st;
}

lilac_status tok_encode(tok_tokenizer *t, const char *text, size_t len, const tok_encode_opts *opts,
                        tok_ids *out, lilac_error *err)
{
    if (!out)
        return lilac_fail(err, LILAC_E_ARG, "tok_encode: NULL argument");
    tok_encode_opts o = opts ? *opts : tok_encode_default_opts();
    enc_ctx c = {t, o.parse_special, out, NULL, NULL, err};
    size_t n0 = out->n;
    lilac_status st = run(&c, text, len);
    if (st)
        out->n = n0; /* nothing half-done is left behind */
    return st;
}

lilac_status tok_pretokenize(tok_tokenizer *t, const char *text, size_t len, const tok_encode_opts *opts,
                             tok_piece_fn fn, void *user, lilac_error *err)
{
    if (!fn)
        return lilac_fail(err, LILAC_E_ARG, "tok_pretokenize: NULL callback");
    tok_encode_opts o = opts ? *opts : tok_encode_default_opts();
    enc_ctx c = {t, o.parse_special, NULL, fn, user, err};
    return run(&c, text, len);
}
