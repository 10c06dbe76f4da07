/* tokenizer: byte-level BPE as the Qwen family uses it (GPT-2's byte
 * alphabet, merges by rank, a pre-tokenizer regex, NFC normalization, and
 * added/special tokens matched in the text before anything else).
 *
 * Sources: a Hugging Face tokenizer.json (tok_load_json), the tokenizer.ggml.*
 * keys of a GGUF file (tok_load_gguf), or either found by tok_load.
 *
 * Encoding follows HF `tokenizers` with add_special_tokens=False: no BOS/EOS
 * is ever added. The pipeline for a text is
 *   1. added tokens (those with "normalized": false) are matched in the raw
 *      text, leftmost-longest; with parse_special off, tokens flagged special
 *      (GGUF: control) are left to the normal path, others are still matched;
 *   2. the text between them is NFC-normalized (utf8proc); added tokens with
 *      "normalized": true are matched in the normalized text;
 *   3. the pre-tokenizer regex (PCRE2, UTF + UCP, JIT) cuts it into pieces;
 *   4. each piece's bytes are mapped to GPT-2's byte alphabet and merged by
 *      merge rank, lowest rank first, leftmost first among equals;
 *   5. the merged symbols are the ids.
 * Invalid UTF-8 input is refused with LILAC_E_ARG naming the byte offset
 * (HF cannot be handed invalid UTF-8 at all, so there is nothing to mimic).
 *
 * Decoding maps each token back to bytes (the byte-level inverse; an added
 * token is its text) and repairs what is not UTF-8 the way Python's
 * errors="replace" and Rust's from_utf8_lossy do: one U+FFFD per maximal
 * ill-formed subsequence.
 *
 * Thread safety: tok_encode and tok_pretokenize serialize on a mutex inside
 * the tokenizer (they share its piece cache); everything else only reads and
 * may run concurrently. A tok_stream belongs to one thread. */
#ifndef LILAC_TOKENIZER_H
#define LILAC_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "format/gguf.h"
#include "lilac.h"

typedef struct tok_tokenizer tok_tokenizer;

/* ---- loading ----------------------------------------------------------- */

/* path: a directory holding tokenizer.json, a tokenizer.json file, or a GGUF
 * file (told apart by its magic). For tokenizer.json, eos/bos/pad come from a
 * tokenizer_config.json beside it when there is one (ignored if malformed). */
lilac_status tok_load(const char *path, tok_tokenizer **out, lilac_error *err);

/* A Hugging Face tokenizer.json: model.type "BPE" with a byte-level
 * pre-tokenizer and decoder. Fields it does not understand fail with
 * LILAC_E_UNSUPPORTED naming the file and the field; malformed JSON or wrong
 * types with LILAC_E_FORMAT. */
lilac_status tok_load_json(const char *path, tok_tokenizer **out, lilac_error *err);

/* tokenizer.ggml.model "gpt2" with tokens, merges, token_type (3 = control
 * -> special added token, 4 = user defined -> added token) and the
 * pre-tokenizer preset tokenizer.ggml.pre: "qwen2" or "qwen35". Everything is
 * copied: f may be closed afterwards. */
lilac_status tok_load_gguf(const gguf_file *f, tok_tokenizer **out, lilac_error *err);

void tok_free(tok_tokenizer *t);

/* ---- encoding ---------------------------------------------------------- */

typedef struct tok_encode_opts {
    /* Match the text of special tokens (e.g. "<|im_start|>") as those
     * tokens. Off: they are tokenized as plain text; added tokens that are
     * not special are matched either way (as HF and llama.cpp do). */
    bool parse_special;
} tok_encode_opts;

tok_encode_opts tok_encode_default_opts(void); /* parse_special = true */

/* A growable id array; zero-initialize it, tok_ids_free it. */
typedef struct tok_ids {
    int32_t *ids;
    size_t n, cap;
} tok_ids;
void tok_ids_free(tok_ids *v);

/* Append the ids of text[0..len) to out (opts NULL: the defaults). */
lilac_status tok_encode(tok_tokenizer *t, const char *text, size_t len, const tok_encode_opts *opts,
                        tok_ids *out, lilac_error *err);

/* The pieces encoding would hand to BPE, for inspection and tests: fn is
 * called for each piece of the normalized text (special_id -1) and for each
 * added token matched (special_id its id, piece its text). */
typedef void (*tok_piece_fn)(void *user, const char *piece, size_t len, int32_t special_id);
lilac_status tok_pretokenize(tok_tokenizer *t, const char *text, size_t len, const tok_encode_opts *opts,
                             tok_piece_fn fn, void *user, lilac_error *err);

/* The piece cache (on by default): at most max_entries pieces and their ids
 * are remembered; 0 turns it off. Clears it either way. */
void tok_set_cache(tok_tokenizer *t, size_t max_entries);

/* ---- decoding ---------------------------------------------------------- */

/* The text of ids, valid UTF-8 (ill-formed bytes become U+FFFD), as a
 * NUL-terminated malloc'd string in *out (its length in *out_len, may be
 * NULL). skip_special leaves out tokens flagged special. An id outside
 * 0..tok_n_vocab-1 fails with LILAC_E_ARG; an unused id inside it (no token,
 * e.g. a GGUF's "[PAD2047]" rows of token_type 5) decodes to nothing, as in
 * HF tokenizers and llama.cpp. */
lilac_status tok_decode(const tok_tokenizer *t, const int32_t *ids, size_t n, bool skip_special, char **out,
                        size_t *out_len, lilac_error *err);

/* Streaming decode: feed ids one at a time, get the text that is complete.
 * Bytes of a character split across tokens are held until it completes;
 * bytes that can never form a character come out as U+FFFD. The text of all
 * feeds plus the final flush equals tok_decode of all the ids. */
typedef struct tok_stream tok_stream;
lilac_status tok_stream_new(const tok_tokenizer *t, bool skip_special, tok_stream **out, lilac_error *err);
void tok_stream_free(tok_stream *s);
/* *text (NUL-terminated, *len bytes, possibly 0) stays valid until the next
 * call on s. */
lilac_status tok_stream_feed(tok_stream *s, int32_t id, const char **text, size_t *len, lilac_error *err);
/* End of the sequence: whatever is held comes out (as U+FFFD: it was an
 * incomplete character). Leaves s ready for a new sequence. */
const char *tok_stream_flush(tok_stream *s, size_t *len);
void tok_stream_reset(tok_stream *s);

/* ---- the vocabulary ---------------------------------------------------- */

/* One more than the largest id (ids in between may be unused). */
int32_t tok_n_vocab(const tok_tokenizer *t);
/* The token as stored (byte-level alphabet, e.g. "Ġthe"; added tokens as
 * their text); NULL for an id out of range or unused. NUL-terminated. */
const char *tok_token_str(const tok_tokenizer *t, int32_t id);
/* The bytes the token decodes to (not NUL-terminated); NULL for an id out
 * of range or unused. */
const char *tok_token_bytes(const tok_tokenizer *t, int32_t id, size_t *len);
/* The id of a token given as stored (byte-level form or added-token text),
 * or -1. */
int32_t tok_token_id(const tok_tokenizer *t, const char *str, size_t len);
/* The id of an added token by its text, e.g. "<|im_end|>", or -1. */
int32_t tok_special_id(const tok_tokenizer *t, const char *text);
bool tok_is_special(const tok_tokenizer *t, int32_t id); /* added and flagged special/control */
bool tok_is_added(const tok_tokenizer *t, int32_t id);
size_t tok_n_added(const tok_tokenizer *t);
size_t tok_n_merges(const tok_tokenizer *t);

/* -1 when unknown. */
int32_t tok_eos_id(const tok_tokenizer *t);
int32_t tok_bos_id(const tok_tokenizer *t);
int32_t tok_pad_id(const tok_tokenizer *t);
/* End of generation: the eos id, or the added tokens <|im_end|> and
 * <|endoftext|> when present. */
bool tok_is_eog(const tok_tokenizer *t, int32_t id);

/* "qwen2", "qwen35" for a GGUF preset, "tokenizer.json" otherwise. */
const char *tok_pre_name(const tok_tokenizer *t);

#endif
