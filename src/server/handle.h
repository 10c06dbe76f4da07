/* handle: one API request through the engine, shared by the HTTP server
 * and `lilac batch`: api_request -> prompt tokens (chat template,
 * tokenizer) -> sched_submit -> the generated text split into reasoning,
 * content and tool calls -> the OpenAI response object. The streaming
 * path (server.c) uses the same preparation and the same splitting. */
#ifndef LILAC_SERVER_HANDLE_H
#define LILAC_SERVER_HANDLE_H

#include <jansson.h>

#include "engine/reply.h"
#include "engine/sched.h"
#include "lilac.h"
#include "server/api.h"

/* What every request of one engine shares. */
typedef struct hnd_engine {
    lilac_model *model;
    lilac_tokenizer *tok;
    sched *sched;
    const char *model_name; /* as /v1/models lists it */
    const char *template_text;
    int n_ctx;
    int default_max_tokens; /* when the request gives none (<= 0: until the context is full) */
} hnd_engine;

/* A request made ready to submit. */
typedef struct hnd_prep {
    const api_request *req;
    int32_t *prompt; /* owned */
    int n_prompt;
    sched_gen gen;
    reply_opts ropts;
    json_t *tools; /* owned (ropts.tools points here) */
    char id[64];
    int64_t created;
} hnd_prep;

/* Render and tokenize; 0, or -1 with e filled (400 context_length_exceeded for a prompt over the context). */
int hnd_prepare(const hnd_engine *en, const api_request *req, hnd_prep *p, api_error *e);
void hnd_prep_free(hnd_prep *p);

/* Submit; 0, or -1 with e: 429 queue full, 503 draining, 400 refused. */
int hnd_submit(const hnd_engine *en, hnd_prep *p, sched_req **out, api_error *e);

/* The error of a finished request (503 when it timed out in the queue), or 0 when it succeeded. */
int hnd_failed(const sched_req *r, api_error *e);

/* The whole response JSON of a finished request (malloc'd), or NULL with e filled. */
char *hnd_response_json(const hnd_engine *en, const hnd_prep *p, sched_req *r, api_error *e);

/* Token text and logprobs of tokens [from, to) of r (called with r->mu held); free with hnd_logprobs_free. */
api_logprob *hnd_logprobs(const hnd_engine *en, const sched_req *r, int from, int to);
void hnd_logprobs_free(api_logprob *lp, int n);

double hnd_wall_time(void);

#endif
