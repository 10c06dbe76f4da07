/* tokenizer: building a tokenizer from its parts (the loaders call these),
 * the vocabulary accessors, decoding and streaming decoding, and tok_load. */
#include "tokenizer/tok_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/err.h"

/* ---- small helpers ----------------------------------------------------- */

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

/* Grow a byte buffer so it can take `more` bytes past `len`. */
static bool grow_bytes(char **p, size_t *cap, size_t len, size_t more)
{
    if (more > SIZE_MAX / 2 - len)
        return false;
    if (len + more <= *cap)
        return true;
    size_t nc = *cap ? *cap : 256;
    while (nc < len + more)
        nc *= 2;
    char *q = realloc(*p, nc);
    if (!q)
        return false;
    *p = q;
    *cap = nc;
    return true;
}

uint64_t tok_hash(const void *p, size_t n)
{
    const uint8_t *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ ((uint64_t)n * 0xFF51AFD7ED558CCDull);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = (h ^ v) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)s[i] << (8 * i);
    h = (h ^ v) * 0x94D049BB133111EBull;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return h;
}

/* ---- string map -------------------------------------------------------- */

static void strmap_free(tok_strmap *m)
{
    free(m->slots);
    free(m->keys);
    memset(m, 0, sizeof *m);
}

static bool strmap_rehash(tok_strmap *m, size_t ncap)
{
    struct tok_strent *ns = malloc(ncap * sizeof *ns);
    if (!ns)
        return false;
    for (size_t i = 0; i < ncap; i++)
        ns[i].off = UINT32_MAX;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->slots[i].off == UINT32_MAX)
            continue;
        size_t j = m->slots[i].hash & (ncap - 1);
        while (ns[j].off != UINT32_MAX)
            j = (j + 1) & (ncap - 1);
        ns[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = ns;
    m->cap = ncap;
    return true;
}

int32_t tok_strmap_get(const tok_strmap *m, const char *s, size_t len)
{
    if (!m->cap)
        return -1;
    uint32_t h = (uint32_t)tok_hash(s, len);
    for (size_t j = h & (m->cap - 1);; j = (j + 1) & (m->cap - 1)) {
        const struct tok_strent *e = &m->slots[j];
        if (e->off == UINT32_MAX)
            return -1;
        if (e->hash == h && e->len == len && memcmp(m->keys + e->off, s, len) == 0)
            return e->val;
    }
}

/* Insert s -> val unless s is there already (the first value stays).
 * false: out of memory. */
static bool strmap_put(tok_strmap *m, const char *s, size_t len, int32_t val)
{
    if ((m->n + 1) * 2 > m->cap && !strmap_rehash(m, m->cap ? m->cap * 2 : 1024))
        return false;
    if (len >= UINT32_MAX / 2 || m->keys_len + len >= UINT32_MAX / 2)
        return false;
    uint32_t h = (uint32_t)tok_hash(s, len);
    size_t j = h & (m->cap - 1);
    for (;; j = (j + 1) & (m->cap - 1)) {
        struct tok_strent *e = &m->slots[j];
        if (e->off == UINT32_MAX)
            break;
        if (e->hash == h && e->len == len && memcmp(m->keys + e->off, s, len) == 0)
            return true;
    }
    if (!grow_bytes(&m->keys, &m->keys_cap, m->keys_len, len + 1))
        return false;
    memcpy(m->keys + m->keys_len, s, len);
    m->keys[m->keys_len + len] = 0;
    m->slots[j] = (struct tok_strent){h, (uint32_t)len, (uint32_t)m->keys_len, val};
    m->keys_len += len + 1;
    m->n++;
    return true;
}

/* ---- pair map ---------------------------------------------------------- */

static inline uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }

static inline size_t pair_slot(uint64_t key, size_t cap)
{
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & (cap - 1);
}

static bool pairmap_rehash(tok_pairmap *m, size_t ncap)
{
    struct tok_pairent *ns = malloc(ncap * sizeof *ns);
    if (!ns)
        return false;
    for (size_t i = 0; i < ncap; i++)
        ns[i].key = UINT64_MAX;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->slots[i].key == UINT64_MAX)
            continue;
        size_t j = pair_slot(m->slots[i].key, ncap);
        while (ns[j].key != UINT64_MAX)
            j = (j + 1) & (ncap - 1);
        ns[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = ns;
    m->cap = ncap;
    return true;
}

/* ---- the byte-level alphabet ------------------------------------------- */

static uint32_t g_b2u[256];
static int16_t g_u2b[324];
static pthread_once_t g_bytes_once = PTHREAD_ONCE_INIT;

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves,
 * the other 68 are shifted to 256.. in byte order. */
static void bytes_init(void)
{
    int n = 0;
    for (int i = 0; i < 324; i++)
        g_u2b[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        g_b2u[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
        g_u2b[g_b2u[b]] = (int16_t)b;
    }
}

uint32_t tok_byte_to_cp(uint8_t b)
{
    pthread_once(&g_bytes_once, bytes_init);
    return g_b2u[b];
}

int tok_cp_to_byte(uint32_t cp)
{
    pthread_once(&g_bytes_once, bytes_init);
    return cp < 324 ? g_u2b[cp] : -1;
}

/* ---- UTF-8 ------------------------------------------------------------- */

int tok_utf8_step(const uint8_t *s, size_t n)
{
    uint8_t c = s[0];
    if (c < 0x80)
        return 1;
    int need;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        need = 1;
    else if (c == 0xE0)
        need = 2, lo = 0xA0;
    else if (c == 0xED)
        need = 2, hi = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF)
        need = 2;
    else if (c == 0xF0)
        need = 3, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3)
        need = 3;
    else if (c == 0xF4)
        need = 3, hi = 0x8F;
    else
        return -1;
    for (int k = 1; k <= need; k++) {
        if ((size_t)k >= n)
            return 0;
        if (s[k] < lo || s[k] > hi)
            return -k;
        lo = 0x80;
        hi = 0xBF;
    }
    return need + 1;
}

uint32_t tok_utf8_decode(const uint8_t *s, int *len)
{
    uint8_t c = s[0];
    if (c < 0x80) {
        *len = 1;
        return c;
    }
    if (c < 0xE0) {
        *len = 2;
        return (uint32_t)(c & 0x1F) << 6 | (s[1] & 0x3F);
    }
    if (c < 0xF0) {
        *len = 3;
        return (uint32_t)(c & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
    }
    *len = 4;
    return (uint32_t)(c & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 | (uint32_t)(s[2] & 0x3F) << 6 |
           (s[3] & 0x3F);
}

int tok_utf8_encode(uint32_t cp, char *out)
{
    uint8_t *o = (uint8_t *)out;
    if (cp < 0x80) {
        o[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (uint8_t)(0xC0 | cp >> 6);
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | cp >> 12);
        o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | cp >> 18);
    o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* Append in[0..n) to out as valid UTF-8, one U+FFFD per maximal ill-formed
 * subpart. Not final: a valid but incomplete character at the end is left
 * out. Returns the bytes consumed; false in *ok when out of memory. */
static size_t lossy_append(char **out, size_t *len, size_t *cap, const uint8_t *in, size_t n, bool final,
                           bool *ok)
{
    size_t i = 0;
    *ok = true;
    /* worst case: every byte becomes U+FFFD (3 bytes), + NUL */
    if (!grow_bytes(out, cap, *len, 3 * n + 1)) {
        *ok = false;
        return 0;
    }
    char *o = *out + *len;
    while (i < n) {
        if (in[i] < 0x80) {
            *o++ = (char)in[i++];
            continue;
        }
        int k = tok_utf8_step(in + i, n - i);
        if (k > 0) {
            memcpy(o, in + i, (size_t)k);
            o += k;
            i += (size_t)k;
        } else if (k == 0 && !final) {
            break;
        } else {
            memcpy(o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += k == 0 ? n - i : (size_t)-k;
        }
    }
    *len = (size_t)(o - *out);
    (*out)[*len] = 0;
    return i;
}

/* ---- building ---------------------------------------------------------- */

tok_tokenizer *tok_new(const char *source)
{
    tok_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->source = dup_str(source ? source : "(tokenizer)");
    if (!t->source) {
        free(t);
        return NULL;
    }
    t->unk_id = t->eos_id = t->bos_id = t->pad_id = -1;
    t->eog_extra[0] = t->eog_extra[1] = -1;
    t->nfc = true;
    t->cache_max = TOK_CACHE_DEFAULT;
    snprintf(t->pre_name, sizeof t->pre_name, "tokenizer.json");
    return t;
}

static lilac_status nomem(tok_tokenizer *t, lilac_error *err)
{
    return lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory building the tokenizer", t->source);
}

lilac_status tok_reserve_ids(tok_tokenizer *t, int32_t n, lilac_error *err)
{
    if (n < 0 || n > TOK_MAX_ID)
        return lilac_fail(err, LILAC_E_FORMAT, "%s: token id %d out of range (at most %d)", t->source, n - 1,
                          TOK_MAX_ID - 1);
    if (n <= t->n_ids)
        return LILAC_OK;
    int32_t nc = t->n_ids ? t->n_ids : 1024;
    while (nc < n)
        nc = nc > TOK_MAX_ID / 2 ? TOK_MAX_ID : nc * 2;
    uint32_t *so = realloc(t->str_off, (size_t)nc * sizeof *so);
    if (so)
        t->str_off = so;
    uint32_t *sl = realloc(t->str_len, (size_t)nc * sizeof *sl);
    if (sl)
        t->str_len = sl;
    uint8_t *at = realloc(t->attr, (size_t)nc);
    if (at)
        t->attr = at;
    if (!so || !sl || !at)
        return nomem(t, err);
    for (int32_t i = t->n_ids; i < nc; i++) {
        so[i] = UINT32_MAX;
        sl[i] = 0;
        at[i] = 0;
    }
    t->n_ids = nc; /* trimmed to the largest id used in tok_finish */
    return LILAC_OK;
}

static lilac_status set_str(tok_tokenizer *t, int32_t id, const char *s, size_t len, lilac_error *err)
{
    if (len >= UINT32_MAX / 4 || t->strs_len + len >= UINT32_MAX / 2)
        return lilac_fail(err, LILAC_E_FORMAT, "%s: token strings too long", t->source);
    if (!grow_bytes(&t->strs, &t->strs_cap, t->strs_len, len + 1))
        return nomem(t, err);
    memcpy(t->strs + t->strs_len, s, len);
    t->strs[t->strs_len + len] = 0;
    t->str_off[id] = (uint32_t)t->strs_len;
    t->str_len[id] = (uint32_t)len;
    t->strs_len += len + 1;
    return LILAC_OK;
}

lilac_status tok_set_vocab(tok_tokenizer *t, int32_t id, const char *s, size_t len, lilac_error *err)
{
    lilac_status st = tok_reserve_ids(t, id + 1, err);
    if (st)
        return st;
    if (t->attr[id] & TOK_ATTR_VOCAB)
        return lilac_fail(err, LILAC_E_FORMAT, "%s: token id %d is given twice in the vocabulary", t->source, id);
    if (t->str_off[id] == UINT32_MAX && (st = set_str(t, id, s, len, err)))
        return st;
    if (!strmap_put(&t->vocab, s, len, id))
        return nomem(t, err);
    t->attr[id] |= TOK_ATTR_VOCAB;
    return LILAC_OK;
}

lilac_status tok_add_merge(tok_tokenizer *t, const char *a, size_t alen, const char *b, size_t blen,
                           bool *skipped, lilac_error *err)
{
    uint32_t rank = (uint32_t)t->n_merges++;
    *skipped = true;
    int32_t ia = tok_strmap_get(&t->vocab, a, alen), ib = tok_strmap_get(&t->vocab, b, blen);
    if (ia < 0 || ib < 0)
        return LILAC_OK;
    char small[256], *cat = small;
    if (alen + blen > sizeof small && !(cat = malloc(alen + blen)))
        return nomem(t, err);
    memcpy(cat, a, alen);
    memcpy(cat + alen, b, blen);
    int32_t im = tok_strmap_get(&t->vocab, cat, alen + blen);
    if (cat != small)
        free(cat);
    if (im < 0)
        return LILAC_OK;
    tok_pairmap *m = &t->merges;
    if ((m->n + 1) * 2 > m->cap && !pairmap_rehash(m, m->cap ? m->cap * 2 : 1024))
        return nomem(t, err);
    uint64_t key = pair_key(ia, ib);
    size_t j = pair_slot(key, m->cap);
    for (; m->slots[j].key != UINT64_MAX; j = (j + 1) & (m->cap - 1))
        if (m->slots[j].key == key)
            return LILAC_OK; /* the first (lowest) rank stays */
    m->slots[j] = (struct tok_pairent){key, rank, im};
    m->n++;
    *skipped = false;
    return LILAC_OK;
}

static bool valid_utf8(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        int k = tok_utf8_step((const uint8_t *)s + i, n - i);
        if (k <= 0)
            return false;
        i += (size_t)k;
    }
    return true;
}

lilac_status tok_add_added(tok_tokenizer *t, int32_t id, const char *s, size_t len, bool special,
                           bool normalized, lilac_error *err)
{
    lilac_status st = tok_reserve_ids(t, id + 1, err);
    if (st)
        return st;
    if (t->attr[id] & TOK_ATTR_ADDED)
        return lilac_fail(err, LILAC_E_FORMAT, "%s: added token id %d is given twice", t->source, id);
    if ((st = set_str(t, id, s, len, err)))
        return st;
    if (t->n_added == t->cap_added) {
        size_t nc = t->cap_added ? t->cap_added * 2 : 32;
        tok_added *a = realloc(t->added, nc * sizeof *a);
        if (!a)
            return nomem(t, err);
        t->added = a;
        t->cap_added = nc;
    }
    t->added[t->n_added] = (tok_added){id, t->str_off[id], (uint32_t)len, special, normalized,
                                       len > 0 && valid_utf8(s, len)};
    if (!strmap_put(&t->added_map, s, len, (int32_t)t->n_added))
        return nomem(t, err);
    t->n_added++;
    t->attr[id] |= TOK_ATTR_ADDED | (special ? TOK_ATTR_SPECIAL : 0);
    return LILAC_OK;
}

lilac_status tok_add_split(tok_tokenizer *t, const char *pattern, size_t len, bool literal, const char *what,
                           lilac_error *err)
{
    if (t->n_split >= TOK_MAX_SPLITS)
        return lilac_fail(err, LILAC_E_UNSUPPORTED, "%s: %s: more than %d pre-tokenizer splits", t->source, what,
                          TOK_MAX_SPLITS);
    int ec;
    PCRE2_SIZE eo;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, len, opts, &ec, &eo, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return lilac_fail(err, LILAC_E_UNSUPPORTED, "%s: %s: regex error at offset %zu: %s", t->source, what,
                          (size_t)eo, (const char *)msg);
    }
    t->re_jit[t->n_split] = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
    t->re[t->n_split++] = re;
    return LILAC_OK;
}

/* qsort has no context argument in C11: sort with a file-level pointer,
 * taken under a lock so that loads on several threads stay correct. */
static const tok_tokenizer *g_sort_t;
static pthread_mutex_t g_sort_mu = PTHREAD_MUTEX_INITIALIZER;

static int cmp_match_q(const void *pa, const void *pb)
{
    const tok_tokenizer *t = g_sort_t;
    const tok_added *a = &t->added[*(const uint32_t *)pa], *b = &t->added[*(const uint32_t *)pb];
    uint8_t fa = (uint8_t)t->strs[a->off], fb = (uint8_t)t->strs[b->off];
    if (fa != fb)
        return fa < fb ? -1 : 1;
    if (a->len != b->len)
        return a->len > b->len ? -1 : 1; /* longest first */
    return a->id < b->id ? -1 : a->id > b->id;
}

lilac_status tok_finish(tok_tokenizer *t, lilac_error *err)
{
    /* trim the id space to the largest id used (or the size declared) */
    int32_t n = t->n_ids;
    while (n > 0 && n > t->min_ids && t->str_off[n - 1] == UINT32_MAX)
        n--;
    t->n_ids = n;
    if (n == 0 || t->strs_len == 0)
        return lilac_fail(err, LILAC_E_FORMAT, "%s: the vocabulary is empty", t->source);

    /* each byte's one-character token */
    for (int b = 0; b < 256; b++) {
        char u[4];
        int k = tok_utf8_encode(tok_byte_to_cp((uint8_t)b), u);
        t->byte_id[b] = tok_strmap_get(&t->vocab, u, (size_t)k);
    }

    /* what each id decodes to: an added token its text; a vocabulary token
     * the byte-level inverse when every character of it is in the byte
     * alphabet, else its text as it is (HF's ByteLevel decoder, token by
     * token; added tokens skip it, as llama.cpp does and HF tokenizers does
     * since huggingface/tokenizers#1995, so that an added "été" does not
     * decode to the bytes E9 74 E9) */
    t->dec_off = malloc((size_t)n * sizeof *t->dec_off);
    t->dec_len = malloc((size_t)n * sizeof *t->dec_len);
    t->dec = malloc(t->strs_len + 1);
    if (!t->dec_off || !t->dec_len || !t->dec)
        return nomem(t, err);
    size_t dn = 0;
    for (int32_t id = 0; id < n; id++) {
        t->dec_off[id] = (uint32_t)dn;
        t->dec_len[id] = 0;
        if (t->str_off[id] == UINT32_MAX)
            continue;
        const uint8_t *s = (const uint8_t *)t->strs + t->str_off[id];
        size_t len = t->str_len[id], i = 0, start = dn;
        bool mapped = !(t->attr[id] & TOK_ATTR_ADDED);
        while (mapped && i < len) {
            int k = tok_utf8_step(s + i, len - i), b;
            uint32_t cp = 0;
            if (k > 0)
                cp = tok_utf8_decode(s + i, &k);
            if (k <= 0 || (b = tok_cp_to_byte(cp)) < 0) {
                mapped = false;
                break;
            }
            t->dec[dn++] = (char)b;
            i += (size_t)k;
        }
        if (!mapped) {
            dn = start;
            memcpy(t->dec + dn, s, len);
            dn += len;
        }
        t->dec_len[id] = (uint32_t)(dn - start);
    }

    /* the added-token matching index: grouped by first byte, longest first */
    size_t nm = 0;
    t->match_ix = malloc((t->n_added ? t->n_added : 1) * sizeof *t->match_ix);
    if (!t->match_ix)
        return nomem(t, err);
    for (size_t i = 0; i < t->n_added; i++) {
        if (!t->added[i].matchable)
            continue;
        t->match_ix[nm++] = (uint32_t)i;
        if (t->added[i].normalized)
            t->any_normalized_added = true;
    }
    pthread_mutex_lock(&g_sort_mu);
    g_sort_t = t;
    qsort(t->match_ix, nm, sizeof *t->match_ix, cmp_match_q);
    g_sort_t = NULL;
    pthread_mutex_unlock(&g_sort_mu);
    for (int c = 0, k = 0; c <= 256; c++) {
        while ((size_t)k < nm && (uint8_t)t->strs[t->added[t->match_ix[k]].off] < c)
            k++;
        t->match_start[c] = (uint32_t)k;
    }

    t->eog_extra[0] = tok_special_id(t, "<|im_end|>");
    t->eog_extra[1] = tok_special_id(t, "<|endoftext|>");

    /* matching state */
    for (int i = 0; i < t->n_split; i++)
        if (!(t->md[i] = pcre2_match_data_create_from_pattern(t->re[i], NULL)))
            return nomem(t, err);
    if (!(t->mctx = pcre2_match_context_create(NULL)))
        return nomem(t, err);
    /* The default match limit (10 M) stops a 10 MB run of spaces: these
     * patterns backtrack at most across the run they then consume, so the
     * work stays linear in the text and no limit is needed. */
    pcre2_set_match_limit(t->mctx, UINT32_MAX);
    /* long runs of one class make the JIT's backtracking stack grow */
    if ((t->jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL)))
        pcre2_jit_stack_assign(t->mctx, NULL, t->jit_stack);
    if (pthread_mutex_init(&t->mu, NULL) != 0)
        return lilac_fail(err, LILAC_E_INTERNAL, "%s: cannot create a mutex", t->source);
    t->mu_ok = true;
    return LILAC_OK;
}

void tok_free(tok_tokenizer *t)
{
    if (!t)
        return;
    free(t->source);
    free(t->str_off);
    free(t->str_len);
    free(t->strs);
    free(t->attr);
    strmap_free(&t->vocab);
    free(t->merges.slots);
    free(t->added);
    strmap_free(&t->added_map);
    free(t->match_ix);
    free(t->dec_off);
    free(t->dec_len);
    free(t->dec);
    for (int i = 0; i < TOK_MAX_SPLITS; i++) {
        pcre2_match_data_free(t->md[i]);
        pcre2_code_free(t->re[i]);
    }
    pcre2_match_context_free(t->mctx);
    pcre2_jit_stack_free(t->jit_stack);
    if (t->mu_ok)
        pthread_mutex_destroy(&t->mu);
    free(t->cache);
    free(t->ckeys);
    free(t->cids);
    free(t->scratch);
    free(t->bl);
    free(t->nbuf);
    free(t);
}

/* ---- accessors --------------------------------------------------------- */

int32_t tok_n_vocab(const tok_tokenizer *t) { return t->n_ids; }

const char *tok_token_str(const tok_tokenizer *t, int32_t id)
{
    if (id < 0 || id >= t->n_ids || t->str_off[id] == UINT32_MAX)
        return NULL;
    return t->strs + t->str_off[id];
}

const char *tok_token_bytes(const tok_tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->n_ids || t->str_off[id] == UINT32_MAX) {
        if (len)
            *len = 0;
        return NULL;
    }
    if (len)
        *len = t->dec_len[id];
    return t->dec + t->dec_off[id];
}

int32_t tok_token_id(const tok_tokenizer *t, const char *str, size_t len)
{
    int32_t i = tok_strmap_get(&t->added_map, str, len);
    if (i >= 0)
        return t->added[i].id;
    return tok_strmap_get(&t->vocab, str, len);
}

int32_t tok_special_id(const tok_tokenizer *t, const char *text)
{
    int32_t i = tok_strmap_get(&t->added_map, text, strlen(text));
    return i >= 0 ? t->added[i].id : -1;
}

bool tok_is_special(const tok_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_ids && (t->attr[id] & TOK_ATTR_SPECIAL);
}

bool tok_is_added(const tok_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_ids && (t->attr[id] & TOK_ATTR_ADDED);
}

size_t tok_n_added(const tok_tokenizer *t) { return t->n_added; }
size_t tok_n_merges(const tok_tokenizer *t) { return t->merges.n; }
int32_t tok_eos_id(const tok_tokenizer *t) { return t->eos_id; }
int32_t tok_bos_id(const tok_tokenizer *t) { return t->bos_id; }
int32_t tok_pad_id(const tok_tokenizer *t) { return t->pad_id; }
const char *tok_pre_name(const tok_tokenizer *t) { return t->pre_name; }

bool tok_is_eog(const tok_tokenizer *t, int32_t id)
{
    return id >= 0 && (id == t->eos_id || id == t->eog_extra[0] || id == t->eog_extra[1]);
}

/* ---- decoding ---------------------------------------------------------- */

static lilac_status bad_id(const tok_tokenizer *t, int32_t id, lilac_error *err)
{
    return lilac_fail(err, LILAC_E_ARG, "%s: token id %d is not in the vocabulary (0..%d)", t->source, id,
                      t->n_ids - 1);
}

/* In range: an unused id (no token) decodes to nothing, as in HF
 * tokenizers and llama.cpp; its dec_len is 0. */
static bool id_ok(const tok_tokenizer *t, int32_t id) { return id >= 0 && id < t->n_ids; }

lilac_status tok_decode(const tok_tokenizer *t, const int32_t *ids, size_t n, bool skip_special, char **out,
                        size_t *out_len, lilac_error *err)
{
    if (!t || !out || (n && !ids))
        return lilac_fail(err, LILAC_E_ARG, "tok_decode: NULL argument");
    *out = NULL;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (!id_ok(t, ids[i]))
            return bad_id(t, ids[i], err);
        total += t->dec_len[ids[i]];
    }
    char *raw = malloc(total + 1);
    if (!raw)
        return lilac_fail(err, LILAC_E_NOMEM, "tok_decode: out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (skip_special && (t->attr[ids[i]] & TOK_ATTR_SPECIAL))
            continue;
        memcpy(raw + k, t->dec + t->dec_off[ids[i]], t->dec_len[ids[i]]);
        k += t->dec_len[ids[i]];
    }
    char *o = NULL;
    size_t olen = 0, ocap = 0;
    bool ok;
    lossy_append(&o, &olen, &ocap, (const uint8_t *)raw, k, true, &ok);
    free(raw);
    if (!ok) {
        free(o);
        return lilac_fail(err, LILAC_E_NOMEM, "tok_decode: out of memory");
    }
    *out = o;
    if (out_len)
        *out_len = olen;
    return LILAC_OK;
}

struct tok_stream {
    const tok_tokenizer *t;
    bool skip_special;
    uint8_t pend[4];
    size_t npend; /* an incomplete character: at most 3 bytes */
    char *work;
    size_t work_cap;
    char *out;
    size_t out_len, out_cap;
};

lilac_status tok_stream_new(const tok_tokenizer *t, bool skip_special, tok_stream **out, lilac_error *err)
{
    if (!t || !out)
        return lilac_fail(err, LILAC_E_ARG, "tok_stream_new: NULL argument");
    tok_stream *s = calloc(1, sizeof *s);
    if (!s)
        return lilac_fail(err, LILAC_E_NOMEM, "tok_stream_new: out of memory");
    s->t = t;
    s->skip_special = skip_special;
    *out = s;
    return LILAC_OK;
}

void tok_stream_free(tok_stream *s)
{
    if (!s)
        return;
    free(s->work);
    free(s->out);
    free(s);
}

void tok_stream_reset(tok_stream *s) { s->npend = 0; }

lilac_status tok_stream_feed(tok_stream *s, int32_t id, const char **text, size_t *len, lilac_error *err)
{
    const tok_tokenizer *t = s->t;
    if (!id_ok(t, id))
        return bad_id(t, id, err);
    s->out_len = 0;
    if (!grow_bytes(&s->out, &s->out_cap, 0, 1))
        return lilac_fail(err, LILAC_E_NOMEM, "tok_stream_feed: out of memory");
    s->out[0] = 0;
    if (!(s->skip_special && (t->attr[id] & TOK_ATTR_SPECIAL))) {
        size_t n = t->dec_len[id];
        if (!grow_bytes(&s->work, &s->work_cap, 0, s->npend + n + 1))
            return lilac_fail(err, LILAC_E_NOMEM, "tok_stream_feed: out of memory");
        memcpy(s->work, s->pend, s->npend);
        memcpy(s->work + s->npend, t->dec + t->dec_off[id], n);
        n += s->npend;
        bool ok;
        size_t used = lossy_append(&s->out, &s->out_len, &s->out_cap, (const uint8_t *)s->work, n, false, &ok);
        if (!ok)
            return lilac_fail(err, LILAC_E_NOMEM, "tok_stream_feed: out of memory");
        s->npend = n - used; /* < 4: only an incomplete character is held */
        memcpy(s->pend, s->work + used, s->npend);
    }
    if (text)
        *text = s->out;
    if (len)
        *len = s->out_len;
    return LILAC_OK;
}

const char *tok_stream_flush(tok_stream *s, size_t *len)
{
    s->out_len = 0;
    bool ok = grow_bytes(&s->out, &s->out_cap, 0, 8);
    if (ok && s->npend) {
        /* an incomplete character is one maximal ill-formed subpart */
        memcpy(s->out, "\xEF\xBF\xBD", 3);
        s->out_len = 3;
    }
    s->npend = 0;
    if (!ok) {
        if (len)
            *len = 0;
        return "";
    }
    s->out[s->out_len] = 0;
    if (len)
        *len = s->out_len;
    return s->out;
}

/* ---- tok_load ---------------------------------------------------------- */

lilac_status tok_load(const char *path, tok_tokenizer **out, lilac_error *err)
{
    if (!path || !out)
        return lilac_fail(err, LILAC_E_ARG, "tok_load: NULL argument");
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0)
        return lilac_fail(err, LILAC_E_IO, "%s: cannot open: no such file or directory", path);
    if (S_ISDIR(st.st_mode)) {
        size_t n = strlen(path) + sizeof "/tokenizer.json";
        char *p = malloc(n);
        if (!p)
            return lilac_fail(err, LILAC_E_NOMEM, "%s: out of memory", path);
        snprintf(p, n, "%s/tokenizer.json", path);
        if (stat(p, &st) != 0) {
            free(p);
            return lilac_fail(err, LILAC_E_IO, "%s: no tokenizer.json in this directory", path);
        }
        lilac_status s = tok_load_json(p, out, err);
        free(p);
        return s;
    }
    FILE *f = fopen(path, "rb");
    if (!f)
        return lilac_fail(err, LILAC_E_IO, "%s: cannot open", path);
    char magic[4] = {0};
    size_t got = fread(magic, 1, 4, f);
    fclose(f);
    if (got == 4 && memcmp(magic, "GGUF", 4) == 0) {
        gguf_file *g = NULL;
        lilac_status s = gguf_open(path, &g, err);
        if (s)
            return s;
        s = tok_load_gguf(g, out, err);
        gguf_close(g);
        return s;
    }
    return tok_load_json(path, out, err);
}
