/* handle: one API request through the engine (see handle.h). */
#include "server/handle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double hnd_wall_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t next_id(void)
{
    static _Atomic uint64_t counter;
    return (uint64_t)time(NULL) * 1000003u + counter++;
}

int hnd_prepare(const hnd_engine *en, const api_request *req, hnd_prep *p, api_error *e)
{
    memset(p, 0, sizeof *p);
    p->req = req;
    p->created = (int64_t)time(NULL);
    api_make_id(p->id, sizeof p->id, req->kind == API_CHAT ? "chatcmpl-" : "cmpl-", next_id());
    lilac_error err;
    char *text = NULL;
    size_t n_text = 0;
    if (req->kind == API_CHAT) {
        if (!en->template_text)
            return api_error_set(e, 400, "invalid_request_error", "unsupported_value", "messages",
                                 "this model has no chat template; use /v1/completions");
        lilac_chat_opts co = {.add_generation_prompt = true, .thinking = req->thinking};
        if (lilac_chat_render(en->template_text, req->conversation, &co, &text, &err))
            return api_error_set(e, 400, "invalid_request_error", "invalid_value", "messages", "%s", err.msg);
        n_text = strlen(text);
        p->ropts.style = reply_style_of(en->template_text);
        p->ropts.starts_in_reasoning = reply_prompt_opens_reasoning(text, n_text);
        if (req->n_tools > 0) {
            json_t *conv = json_loads(req->conversation, 0, NULL);
            json_t *tools = json_is_object(conv) ? json_object_get(conv, "tools") : NULL;
            if (tools)
                p->tools = json_incref(tools);
            json_decref(conv);
            p->ropts.tools = p->tools;
        }
    }
    if (req->kind == API_CHAT || req->prompt) {
        const char *src = text ? text : req->prompt;
        size_t n = text ? n_text : req->prompt_len;
        size_t n_ids = 0;
        lilac_status st = lilac_tokenize(en->tok, src, n, true, &p->prompt, &n_ids, &err);
        free(text);
        p->n_prompt = n_ids > (size_t)INT32_MAX ? INT32_MAX : (int)n_ids;
        if (st)
            return api_error_set(e, 400, "invalid_request_error", "invalid_value", "prompt", "%s", err.msg);
    } else {
        int V = lilac_tokenizer_n_vocab(en->tok);
        for (int i = 0; i < req->n_prompt_ids; i++)
            if (req->prompt_ids[i] >= V)
                return api_error_set(e, 400, "invalid_request_error", "invalid_value", "prompt",
                                     "token id %d at index %d is outside the vocabulary (0..%d)", req->prompt_ids[i],
                                     i, V - 1);
        p->prompt = malloc((size_t)(req->n_prompt_ids ? req->n_prompt_ids : 1) * sizeof(int32_t));
        if (!p->prompt)
            return api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        memcpy(p->prompt, req->prompt_ids, (size_t)req->n_prompt_ids * sizeof(int32_t));
        p->n_prompt = req->n_prompt_ids;
    }
    if (p->n_prompt == 0)
        return api_error_set(e, 400, "invalid_request_error", "invalid_value", "prompt", "the prompt is empty");
    const char *param = req->kind == API_CHAT ? "messages" : "prompt";
    if (p->n_prompt >= en->n_ctx)
        return api_error_set(e, 400, "invalid_request_error", "context_length_exceeded", param,
                             "this model's context is %d tokens; the prompt has %d (at least one must be left to "
                             "generate)",
                             en->n_ctx, p->n_prompt);
    if (req->max_tokens > 0 && (int64_t)p->n_prompt + req->max_tokens > en->n_ctx)
        return api_error_set(e, 400, "invalid_request_error", "context_length_exceeded", "max_tokens",
                             "this model's context is %d tokens; the prompt (%d) and max_tokens (%d) need %lld",
                             en->n_ctx, p->n_prompt, req->max_tokens,
                             (long long)p->n_prompt + req->max_tokens);
    sched_gen *g = &p->gen;
    g->prompt = p->prompt;
    g->n_prompt = p->n_prompt;
    g->sampling = lilac_sampler_default_params();
    api_request_sampling(req, &g->sampling);
    lilac_gen_params gp = {.max_tokens = en->default_max_tokens};
    api_request_gen_params(req, &gp);
    g->max_tokens = gp.max_tokens;
    g->stop = gp.stop;
    g->n_stop = gp.n_stop;
    g->ignore_eos = gp.ignore_eos;
    g->n_logprobs = gp.n_logprobs; /* the chosen token's own logprob comes with every sample */
    return 0;
}

void hnd_prep_free(hnd_prep *p)
{
    free(p->prompt);
    json_decref(p->tools);
    memset(p, 0, sizeof *p);
}

int hnd_submit(const hnd_engine *en, hnd_prep *p, sched_req **out, api_error *e)
{
    lilac_error err;
    lilac_status st = sched_submit(en->sched, &p->gen, out, &err);
    if (st == LILAC_OK)
        return 0;
    if (st == LILAC_E_RANGE && strstr(err.msg, "shutting down"))
        return api_error_set(e, 503, "server_error", "server_draining", NULL, "%s", err.msg);
    if (st == LILAC_E_RANGE)
        return api_error_set(e, 429, "rate_limit_error", "queue_full", NULL, "%s; retry shortly", err.msg);
    return api_error_set(e, 400, "invalid_request_error", "invalid_value", NULL, "%s", err.msg);
}

int hnd_failed(const sched_req *r, api_error *e)
{
    if (r->timed_out)
        return api_error_set(e, 503, "server_error", "queue_timeout", NULL, "%s", r->error);
    if (r->status == LILAC_E_RANGE)
        return api_error_set(e, 503, "server_error", "server_draining", NULL, "%s", r->error);
    if (r->status != LILAC_OK)
        return api_error_set(e, 500, "server_error", NULL, NULL, "%s", r->error[0] ? r->error : "generation failed");
    return 0;
}

static char *token_text(const hnd_engine *en, int32_t id, size_t *len)
{
    char *t = NULL;
    lilac_error err;
    if (id < 0 || id >= lilac_tokenizer_n_vocab(en->tok) || lilac_detokenize(en->tok, &id, 1, &t, &err)) {
        t = strdup("");
    }
    *len = t ? strlen(t) : 0;
    return t;
}

api_logprob *hnd_logprobs(const hnd_engine *en, const sched_req *r, int from, int to)
{
    int n = to - from;
    api_logprob *lp = calloc((size_t)(n > 0 ? n : 1), sizeof *lp);
    if (!lp)
        return NULL;
    for (int i = 0; i < n; i++) {
        const sched_tok *t = &r->toks[from + i];
        lp[i].text = token_text(en, t->token, &lp[i].len);
        lp[i].logprob = t->logprob;
        int want = r->gen.n_logprobs;
        api_top_logprob *top = calloc((size_t)(t->n_top ? t->n_top : 1), sizeof *top);
        for (int k = 0; top && k < t->n_top && k < want; k++) {
            top[k].text = token_text(en, t->top[k].token, &top[k].len);
            top[k].logprob = t->top[k].logprob;
            lp[i].n_top = k + 1;
        }
        lp[i].top = top;
    }
    return lp;
}

void hnd_logprobs_free(api_logprob *lp, int n)
{
    if (!lp)
        return;
    for (int i = 0; i < n; i++) {
        free((char *)lp[i].text);
        for (int k = 0; k < lp[i].n_top; k++)
            free((char *)lp[i].top[k].text);
        free((api_top_logprob *)lp[i].top);
    }
    free(lp);
}

/* Append an event's text to a growing buffer. */
static void grow_append(char **buf, size_t *len, const char *s, size_t n)
{
    char *b = realloc(*buf, *len + n + 1);
    if (!b)
        return;
    memcpy(b + *len, s, n);
    *len += n;
    b[*len] = '\0';
    *buf = b;
}

char *hnd_response_json(const hnd_engine *en, const hnd_prep *p, sched_req *r, api_error *e)
{
    pthread_mutex_lock(&r->mu);
    if (hnd_failed(r, e)) {
        pthread_mutex_unlock(&r->mu);
        return NULL;
    }
    api_meta meta = {p->id, en->model_name, p->created};
    api_usage u = {r->n_prompt, r->n_toks, r->n_cached, 0};
    api_choice c = {0};
    api_logprob *lp = NULL;
    int n_lp = 0;
    if (p->req->logprobs) {
        n_lp = r->n_toks;
        lp = hnd_logprobs(en, r, 0, n_lp);
        c.logprobs = true;
        c.tokens = lp;
        c.n_tokens = n_lp;
    }
    char *json = NULL;
    if (p->req->kind == API_COMPLETION) {
        c.text = r->text ? r->text : "";
        c.text_len = r->text_len;
        c.finish = api_finish_from(r->finish, false);
        json = api_completion_response_json(&meta, &c, &u);
    } else {
        reply_parser *rp = NULL;
        lilac_error err;
        char *content = NULL, *reasoning = NULL;
        size_t n_content = 0, n_reasoning = 0;
        api_tool_call *calls = NULL; /* every call, however many; their strings owned here */
        int n_calls = 0;
        bool oom = false;
        if (reply_new(&p->ropts, &rp, &err) == LILAC_OK) {
            const reply_event *ev;
            size_t n_ev;
            for (int pass = 0; pass < 2; pass++) {
                lilac_status st = pass == 0 ? reply_feed(rp, r->text ? r->text : "", r->text_len, &ev, &n_ev, &err)
                                            : reply_finish(rp, &ev, &n_ev, &err);
                for (size_t i = 0; st == LILAC_OK && i < n_ev; i++) {
                    if (ev[i].kind == REPLY_CONTENT)
                        grow_append(&content, &n_content, ev[i].text, ev[i].len);
                    else if (ev[i].kind == REPLY_REASONING)
                        grow_append(&reasoning, &n_reasoning, ev[i].text, ev[i].len);
                    else {
                        char id[48];
                        api_make_id(id, sizeof id, "call_", next_id());
                        api_tool_call *more = realloc(calls, (size_t)(n_calls + 1) * sizeof *calls);
                        if (!more) {
                            oom = true;
                            continue;
                        }
                        calls = more;
                        calls[n_calls++] =
                            (api_tool_call){ev[i].index, strdup(id), strdup(ev[i].name), strdup(ev[i].arguments)};
                        oom |= !calls[n_calls - 1].id || !calls[n_calls - 1].name || !calls[n_calls - 1].arguments;
                    }
                }
            }
            reply_free(rp);
        } else {
            grow_append(&content, &n_content, r->text ? r->text : "", r->text_len);
        }
        c.text = content;
        c.text_len = n_content;
        c.reasoning = reasoning;
        c.reasoning_len = n_reasoning;
        c.tool_calls = calls;
        c.n_tool_calls = n_calls;
        c.finish = api_finish_from(r->finish, n_calls > 0);
        json = oom ? NULL : api_chat_response_json(&meta, &c, &u);
        free(content);
        free(reasoning);
        for (int i = 0; i < n_calls; i++) {
            free((char *)calls[i].id);
            free((char *)calls[i].name);
            free((char *)calls[i].arguments);
        }
        free(calls);
    }
    pthread_mutex_unlock(&r->mu);
    hnd_logprobs_free(lp, n_lp);
    if (!json)
        api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    return json;
}
