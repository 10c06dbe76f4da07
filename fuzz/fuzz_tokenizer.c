/* libFuzzer target: the tokenizer on arbitrary bytes taken as text, and as
 * token ids. Checks, aborting on any failure:
 *   - invalid UTF-8 is refused with LILAC_E_ARG and leaves the output alone;
 *   - the chunked NFC equals utf8proc's NFC of the whole text;
 *   - decode(encode(text)) == NFC(text), with special tokens parsed or not;
 *     where the encoding holds an added token, NFC(decode(encode(text))) ==
 *     NFC(text): added tokens are matched on the raw text and the pieces
 *     between them normalized apart (as Hugging Face's tokenizers do), so a
 *     combining mark right after one stays uncomposed (">" of "<tool_call>"
 *     then U+0338 is not NFC's U+226F);
 *   - stream decoding, id by id, gives exactly what decode gives, and every
 *     chunk is valid UTF-8;
 *   - the same for the input reread as ids (some out of range: refused).
 * The tokenizers: the tiny model's tokenizer.json (from $LILAC_FIXTURES,
 * else ../shared/fixtures, as fuzz/run.sh runs from the repository root)
 * when it is there, and always two small ones built in memory (qwen2 and
 * qwen35 pre-tokenizer rules). Build and run with fuzz/run.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tok_internal.h"
#include "tokenizer/tokenizer.h"

static tok_tokenizer *g_tok[3];
static int g_n;

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_tokenizer: %s\n", what);
    abort();
}

/* GPT-2's byte alphabet as UTF-8. */
static int byte_char(int b, char out[4])
{
    return tok_utf8_encode(tok_byte_to_cp((uint8_t)b), out);
}

/* 256 byte tokens, a few merges, two added tokens. */
static tok_tokenizer *synthetic(const char *re)
{
    lilac_error err;
    tok_tokenizer *t = tok_new("synthetic");
    if (!t)
        fail("out of memory");
    char c[4];
    int32_t id = 0;
    for (int b = 0; b < 256; b++)
        if (tok_set_vocab(t, id++, c, (size_t)byte_char(b, c), &err))
            fail(err.msg);
    static const char *const m[][2] = {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {"Ġ", "w"},
                                       {"Ġw", "o"}, {"r", "l"}, {"Ġwo", "rl"}, {"Ġworl", "d"}, {"Ġ", "Ġ"},
                                       {"ĠĠ", "ĠĠ"}, {"à", "¤"}, {"à¤", "¹"}, {"a", "a"}, {"aa", "aa"}};
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        char both[32];
        int n = snprintf(both, sizeof both, "%s%s", m[i][0], m[i][1]);
        bool skipped;
        if (tok_set_vocab(t, id++, both, (size_t)n, &err) ||
            tok_add_merge(t, m[i][0], strlen(m[i][0]), m[i][1], strlen(m[i][1]), &skipped, &err) || skipped)
            fail("synthetic merges");
    }
    if (tok_add_added(t, id++, "<|im_end|>", 10, true, false, &err) ||
        tok_add_added(t, id++, "<x>", 3, false, false, &err) ||
        tok_add_added(t, id++, "\xC3\xA9t\xC3\xA9", 5, false, true, &err) || /* "été", matched after NFC */
        tok_add_split(t, re, strlen(re), false, "synthetic", &err) || tok_finish(t, &err))
        fail(err.msg);
    return t;
}

static void init(void)
{
    const char *fx = getenv("LILAC_FIXTURES");
    char path[4096];
    snprintf(path, sizeof path, "%s/tiny-qwen35moe/hf/tokenizer.json", fx && *fx ? fx : "../shared/fixtures");
    lilac_error err;
    tok_tokenizer *t = NULL;
    if (tok_load_json(path, &t, &err) == LILAC_OK)
        g_tok[g_n++] = t;
    else
        fprintf(stderr, "fuzz_tokenizer: %s; fuzzing the synthetic tokenizers only\n", err.msg);
    g_tok[g_n++] = synthetic(TOK_RE_QWEN2);
    g_tok[g_n++] = synthetic(TOK_RE_QWEN35);
}

static bool valid_utf8(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        int k = tok_utf8_step(s + i, n - i);
        if (k <= 0)
            return false;
        i += (size_t)k;
    }
    return true;
}

/* decode == stream decode, all valid UTF-8; decode == want (nfc: its NFC == want) where want is given */
static void check_decode(tok_tokenizer *t, const int32_t *ids, size_t n, const char *want, size_t want_len, bool nfc)
{
    lilac_error err;
    char *d = NULL;
    size_t dl = 0;
    if (tok_decode(t, ids, n, false, &d, &dl, &err) != LILAC_OK)
        fail(err.msg);
    if (!valid_utf8((const uint8_t *)d, dl) || strlen(d) > dl)
        fail("decode gave invalid UTF-8");
    if (want && !nfc && (dl != want_len || memcmp(d, want, dl) != 0))
        fail("decode(encode(text)) != NFC(text)");
    if (want && nfc) {
        utf8proc_uint8_t *dn = NULL;
        const utf8proc_ssize_t nl = utf8proc_map((const utf8proc_uint8_t *)d, (utf8proc_ssize_t)dl, &dn,
                                                 (utf8proc_option_t)(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
        if (nl < 0 || (size_t)nl != want_len || memcmp(dn, want, want_len) != 0)
            fail("NFC(decode(encode(text))) != NFC(text) with an added token");
        free(dn);
    }
    tok_stream *s = NULL;
    if (tok_stream_new(t, false, &s, &err) != LILAC_OK)
        fail(err.msg);
    size_t k = 0;
    for (size_t i = 0; i <= n; i++) {
        const char *txt;
        size_t l;
        if (i < n) {
            if (tok_stream_feed(s, ids[i], &txt, &l, &err) != LILAC_OK)
                fail(err.msg);
        } else {
            txt = tok_stream_flush(s, &l);
        }
        if (!valid_utf8((const uint8_t *)txt, l) || k + l > dl || memcmp(d + k, txt, l) != 0)
            fail("stream decode differs from decode");
        k += l;
    }
    if (k != dl)
        fail("stream decode is short");
    tok_stream_free(s);
    free(d);
}

static void piece_sink(void *user, const char *piece, size_t len, int32_t special_id)
{
    size_t *total = user;
    if (!len && special_id < 0)
        fail("empty piece");
    (void)piece;
    *total += len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_n)
        init();
    const char *text = (const char *)data;
    bool valid = valid_utf8(data, size);

    char *want = NULL;
    size_t want_len = 0;
    if (valid) {
        /* the reference NFC, on a NUL-free copy (utf8proc_NFC stops at NUL) */
        utf8proc_uint8_t *ref = NULL;
        utf8proc_ssize_t rl = utf8proc_map(data, (utf8proc_ssize_t)size, &ref,
                                           (utf8proc_option_t)(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
        if (rl < 0)
            fail("utf8proc refused valid UTF-8");
        char *buf = NULL;
        size_t cap = 0, nl = 0;
        const char *norm;
        lilac_error err;
        if (tok_nfc(text, size, &buf, &cap, &norm, &nl, &err) != LILAC_OK)
            fail(err.msg);
        if (nl != (size_t)rl || memcmp(norm, ref, nl) != 0)
            fail("chunked NFC differs from utf8proc's NFC");
        want = (char *)ref;
        want_len = (size_t)rl;
        free(buf);
    }

    for (int k = 0; k < g_n; k++) {
        tok_tokenizer *t = g_tok[k];
        for (int ps = 0; ps < 2; ps++) {
            tok_encode_opts o = {.parse_special = ps};
            tok_ids v = {0};
            int32_t keep = 7;
            v.ids = malloc(sizeof *v.ids);
            v.ids[0] = keep;
            v.n = v.cap = 1;
            lilac_error err;
            lilac_status st = tok_encode(t, text, size, &o, &v, &err);
            if (!valid) {
                if (st != LILAC_E_ARG || v.n != 1 || v.ids[0] != keep)
                    fail("invalid UTF-8 was not refused cleanly");
                tok_ids_free(&v);
                continue;
            }
            if (st != LILAC_OK)
                fail(err.msg);
            for (size_t i = 1; i < v.n; i++)
                if (v.ids[i] < 0 || v.ids[i] >= tok_n_vocab(t))
                    fail("an id out of range");
            bool added = false; /* an added token: the text around it normalized apart */
            for (size_t i = 1; i < v.n; i++)
                added |= tok_is_added(t, v.ids[i]);
            check_decode(t, v.ids + 1, v.n - 1, want, want_len, added);
            size_t total = 0;
            if (tok_pretokenize(t, text, size, &o, piece_sink, &total, &err) != LILAC_OK)
                fail(err.msg);
            tok_ids_free(&v);
        }
        /* the input as ids */
        size_t n = size / 2;
        int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
        int32_t nv = tok_n_vocab(t);
        bool all_ok = true;
        for (size_t i = 0; i < n; i++) {
            ids[i] = (int32_t)((data[2 * i] | data[2 * i + 1] << 8) % (uint32_t)(nv + 8)) - 4;
            if (ids[i] < 0 || ids[i] >= nv)
                all_ok = false;
        }
        lilac_error err;
        char *d = NULL;
        lilac_status st = tok_decode(t, ids, n, false, &d, NULL, &err);
        if (all_ok)
            check_decode(t, ids, n, NULL, 0, false);
        else if (st != LILAC_E_ARG || d)
            fail("a bad id was not refused");
        free(d);
        free(ids);
    }
    free(want);
    return 0;
}
