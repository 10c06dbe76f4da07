/* tok_internal: the tokenizer's insides, shared by tokenizer.c (building,
 * decoding, accessors), tok_encode.c and the two loaders. Not for use outside
 * src/tokenizer/. */
#ifndef LILAC_TOK_INTERNAL_H
#define LILAC_TOK_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/tokenizer.h"

#define TOK_MAX_ID (1 << 24)  /* ids beyond this are refused at load */
#define TOK_MAX_SPLITS 4      /* pre-tokenizer regex stages */
#define TOK_CACHE_DEFAULT 65536
#define TOK_CACHE_MAX_KEY 128 /* longer pieces are not cached */

/* The Qwen2 pre-tokenizer regex, as Qwen2/2.5/3's tokenizer.json gives it. */
#define TOK_RE_QWEN2                                                                                        \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"     \
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Qwen3.5's: letter runs take combining marks along ([\p{L}\p{M}]+), and the
 * punctuation runs leave them out (llama.cpp LLAMA_VOCAB_PRE_TYPE_QWEN35,
 * whose active pattern spells (?i:...) out as [sS] etc.). */
#define TOK_RE_QWEN35                                                                                       \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+" \
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* GPT-2's, what a ByteLevel pre-tokenizer with use_regex true applies. */
#define TOK_RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

/* ---- hash maps --------------------------------------------------------- */

uint64_t tok_hash(const void *p, size_t n);

/* bytes -> int32, keys copied into the map's own arena. */
typedef struct tok_strmap {
    struct tok_strent {
        uint32_t hash, len, off;
        int32_t val;
    } *slots; /* off == UINT32_MAX: empty */
    size_t cap, n; /* cap a power of two */
    char *keys;
    size_t keys_len, keys_cap;
} tok_strmap;

/* (a, b) -> (rank, merged id) */
typedef struct tok_pairmap {
    struct tok_pairent {
        uint64_t key; /* UINT64_MAX: empty */
        uint32_t rank;
        int32_t id;
    } *slots;
    size_t cap, n;
} tok_pairmap;

typedef struct tok_added {
    int32_t id;
    uint32_t off, len; /* content in t->strs */
    bool special, normalized;
    bool matchable; /* non-empty valid UTF-8 */
} tok_added;

/* A cached piece: its bytes and ids. */
typedef struct tok_cent {
    uint64_t hash; /* 0: empty */
    uint32_t key_off, key_len, ids_off, n_ids;
} tok_cent;

struct tok_tokenizer {
    char *source; /* file path, for messages */
    char pre_name[32];

    /* id -> stored token string (NUL-terminated in strs) */
    int32_t n_ids;
    int32_t min_ids; /* tok_finish trims unused ids at the end down to this */
    uint32_t *str_off; /* UINT32_MAX: unused id */
    uint32_t *str_len;
    char *strs;
    size_t strs_len, strs_cap;
    uint8_t *attr; /* TOK_ATTR_* per id */

    tok_strmap vocab;  /* model vocabulary: string -> id */
    tok_pairmap merges;
    size_t n_merges;
    int32_t byte_id[256]; /* id of each byte's one-character token, or -1 */
    int32_t unk_id;
    bool ignore_merges;

    tok_added *added;
    size_t n_added, cap_added;
    tok_strmap added_map; /* content -> index in added */
    /* matching: indices into added grouped by first byte, longest first */
    uint32_t *match_ix;
    uint32_t match_start[257];
    bool any_normalized_added;

    /* id -> decoded bytes */
    uint32_t *dec_off, *dec_len;
    char *dec;

    bool nfc;
    int n_split;
    pcre2_code *re[TOK_MAX_SPLITS];
    bool re_jit[TOK_MAX_SPLITS];

    int32_t eos_id, bos_id, pad_id;
    int32_t eog_extra[2];

    /* mutable state, under mu */
    pthread_mutex_t mu;
    bool mu_ok;
    pcre2_match_data *md[TOK_MAX_SPLITS];
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit_stack;
    size_t cache_max; /* entries; 0: off */
    tok_cent *cache;
    size_t cache_cap, cache_n;
    char *ckeys;
    size_t ckeys_len, ckeys_cap;
    int32_t *cids;
    size_t cids_len, cids_cap;
    /* scratch for BPE and normalization */
    void *scratch;
    size_t scratch_cap;
    char *bl; /* byte-level string of a piece (ignore_merges) */
    size_t bl_cap;
    char *nbuf; /* normalized text */
    size_t nbuf_cap;
};

enum { TOK_ATTR_ADDED = 1, TOK_ATTR_SPECIAL = 2, TOK_ATTR_VOCAB = 4 };

/* ---- building (tokenizer.c) -------------------------------------------- */

/* A tokenizer with nothing in it; source names it in messages. NULL: no memory. */
tok_tokenizer *tok_new(const char *source);
/* Make room for ids [0, n). */
lilac_status tok_reserve_ids(tok_tokenizer *t, int32_t n, lilac_error *err);
/* A model vocabulary entry. */
lilac_status tok_set_vocab(tok_tokenizer *t, int32_t id, const char *s, size_t len, lilac_error *err);
/* A merge of two vocabulary strings, ranked in the order added; *skipped set
 * (and LILAC_OK) when a part or the result is not in the vocabulary. */
lilac_status tok_add_merge(tok_tokenizer *t, const char *a, size_t alen, const char *b, size_t blen,
                           bool *skipped, lilac_error *err);
lilac_status tok_add_added(tok_tokenizer *t, int32_t id, const char *s, size_t len, bool special,
                           bool normalized, lilac_error *err);
/* Compile a pre-tokenizer regex stage (what names it in messages). */
lilac_status tok_add_split(tok_tokenizer *t, const char *pattern, size_t len, bool literal, const char *what,
                           lilac_error *err);
/* Everything derived: byte ids, decode table, matching index, match data. */
lilac_status tok_finish(tok_tokenizer *t, lilac_error *err);

/* The byte-level alphabet: byte -> code point, and back (-1: not in it). */
uint32_t tok_byte_to_cp(uint8_t b);
int tok_cp_to_byte(uint32_t cp);

/* UTF-8: length of a complete valid character at s[0..n) (> 0), 0 when s
 * holds only a valid but incomplete prefix, or -k for a maximal ill-formed
 * subpart of k bytes. */
int tok_utf8_step(const uint8_t *s, size_t n);
/* Decode the character at s (known valid), setting *len. */
uint32_t tok_utf8_decode(const uint8_t *s, int *len);
int tok_utf8_encode(uint32_t cp, char *out);

int32_t tok_strmap_get(const tok_strmap *m, const char *s, size_t len);

/* ---- normalization (tok_encode.c) -------------------------------------- */

/* NFC of s[0..n): *out points to s itself when it is already NFC, else to
 * *buf (malloc'd, grown as needed, *cap its size). */
lilac_status tok_nfc(const char *s, size_t n, char **buf, size_t *cap, const char **out, size_t *out_len,
                     lilac_error *err);

#endif
