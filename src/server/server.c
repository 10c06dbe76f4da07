/* server: `lilac serve` — libmicrohttpd, one thread per connection, in
 * front of the scheduler. A request reads as a straight line: body ->
 * api_parse -> hnd_prepare (template, tokenizer) -> sched_submit -> wait
 * (watching the client's socket, so a client that leaves frees its slot)
 * -> the response, whole or as server-sent events. */
#define _GNU_SOURCE /* POLLRDHUP */
#include <errno.h>
#include <microhttpd.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/handle.h"
#include "server/metrics.h"
#include "server/supervise.h"
#include "util/err.h"

typedef struct server {
    const lilac_serve_params *p;
    hnd_engine en;
    api_limits lim;
    metrics *reg;
    metrics_series *m_queue, *m_busy, *m_in, *m_out, *m_cached, *m_ttft, *m_tpot, *m_rej_full, *m_rej_bad,
        *m_rej_timeout, *m_rej_drain, *m_rej_auth, *m_req_ok, *m_rss;
    _Atomic int state; /* 0 loading, 1 ready, 2 draining */
} server;

static const char *state_name(int s) { return s == 0 ? "loading" : s == 1 ? "ready" : "draining"; }

/* ---- logging: one JSON object per line on stderr ---- */

static void log_json(json_t *o)
{
    json_object_set_new(o, "ts", json_real(hnd_wall_time()));
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (s) {
        fprintf(stderr, "%s\n", s);
        free(s);
    }
    json_decref(o);
}

/* ---- responses ---- */

/* allow: the Allow header of a 405, else NULL */
static enum MHD_Result send_head(struct MHD_Connection *c, int status, const char *type, const char *body,
                                 int retry_after, const char *allow)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    if (retry_after > 0) {
        char v[16];
        snprintf(v, sizeof v, "%d", retry_after);
        MHD_add_response_header(r, "Retry-After", v);
    }
    if (allow)
        MHD_add_response_header(r, "Allow", allow);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_text(struct MHD_Connection *c, int status, const char *type, const char *body,
                                 int retry_after)
{
    return send_head(c, status, type, body, retry_after, NULL);
}

static enum MHD_Result send_error_allow(server *sv, struct MHD_Connection *c, const api_error *e, const char *allow)
{
    char *j = api_error_json(e);
    int retry = e->status == 429 ? 1 : e->status == 503 ? 5 : 0;
    if (e->status == 429)
        metrics_inc(sv->m_rej_full);
    else if (e->status == 503 && e->code && !strcmp(e->code, "queue_timeout"))
        metrics_inc(sv->m_rej_timeout);
    else if (e->status == 503)
        metrics_inc(sv->m_rej_drain);
    else if (e->status == 401)
        metrics_inc(sv->m_rej_auth);
    else
        metrics_inc(sv->m_rej_bad);
    enum MHD_Result r = send_head(c, e->status, "application/json", j ? j : "{}", retry, allow);
    free(j);
    return r;
}

static enum MHD_Result send_error(server *sv, struct MHD_Connection *c, const api_error *e)
{
    return send_error_allow(sv, c, e, NULL);
}

/* ---- the client's socket: has it gone? ---- */

static int conn_fd(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

static bool client_gone(int fd)
{
    if (fd < 0)
        return false;
    struct pollfd pf = {fd, POLLRDHUP, 0};
    if (poll(&pf, 1, 0) <= 0)
        return false;
    if (pf.revents & (POLLRDHUP | POLLHUP | POLLERR))
        return true;
    char b;
    return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* ---- per connection ---- */

typedef struct conn {
    char *body;
    size_t len, cap;
    bool too_large;
} conn;

/* A streamed response: the state its reader keeps between calls. */
typedef struct stream {
    server *sv;
    hnd_prep prep;
    api_request *req;
    sched_req *r;
    reply_parser *rp;
    int fd;
    size_t text_seen;
    int toks_seen;
    int chars_seen; /* completions' text_offset */
    bool first, finished, done_sent;
    char *out; /* SSE bytes not yet handed to MHD */
    size_t out_len, out_pos;
    double t0;
} stream;

static void out_push(stream *st, char *json)
{
    if (!json)
        return;
    char *sse = api_sse_data(json);
    free(json);
    if (!sse)
        return;
    size_t n = strlen(sse);
    char *b = realloc(st->out, st->out_len + n);
    if (b) {
        memcpy(b + st->out_len, sse, n);
        st->out = b;
        st->out_len += n;
    }
    free(sse);
}

static void log_request(server *sv, const char *id, const char *path, int status, const sched_req *r, double t0)
{
    bool left = status == 499; /* the client went away: cancelled, whatever the engine had reached */
    json_t *o = json_pack("{s:s, s:s, s:s, s:i}", "event", "request", "id", id, "path", path, "status", status);
    if (r) {
        json_object_set_new(o, "prompt_tokens", json_integer(r->n_prompt));
        json_object_set_new(o, "cached_tokens", json_integer(r->n_cached));
        json_object_set_new(o, "completion_tokens", json_integer(r->n_toks));
        if (r->n_toks > 0)
            json_object_set_new(o, "ttft_s", json_real(r->t_first - r->t_submit));
        static const char *fin[] = {"stop", "length", "context", "cancelled"};
        json_object_set_new(o, "finish", json_string(left ? "cancelled" : fin[r->finish & 3]));
    }
    json_object_set_new(o, "total_s", json_real(sched_now() - t0));
    log_json(o);
    (void)sv;
}

static void observe_done(server *sv, const sched_req *r)
{
    metrics_add(sv->m_in, r->n_prompt);
    metrics_add(sv->m_cached, r->n_cached);
    metrics_add(sv->m_out, r->n_toks);
    if (r->n_toks > 0)
        metrics_observe(sv->m_ttft, r->t_first - r->t_submit);
    if (r->n_toks > 1)
        metrics_observe(sv->m_tpot, (r->t_done - r->t_first) / (r->n_toks - 1));
    metrics_inc(sv->m_req_ok);
}

/* Chat chunks for the reply parser's events; the tokens' logprobs ride on
 * the first (or on a chunk of their own when the text is held back). */
static void push_events(stream *st, const api_meta *meta, const reply_event *ev, size_t n_ev, const api_logprob *lp,
                        int n_lp, bool usage_null)
{
    bool lp_left = lp && n_lp > 0;
    for (size_t i = 0; i < n_ev || lp_left; i++) {
        api_choice c = {.role = st->first, .logprobs = st->req->logprobs && lp_left};
        if (c.logprobs)
            c.tokens = lp, c.n_tokens = n_lp;
        lp_left = false;
        api_tool_call call;
        char id[48];
        if (i >= n_ev)
            ; /* logprobs alone */
        else if (ev[i].kind == REPLY_CONTENT)
            c.text = ev[i].text, c.text_len = ev[i].len;
        else if (ev[i].kind == REPLY_REASONING)
            c.reasoning = ev[i].text, c.reasoning_len = ev[i].len;
        else {
            api_make_id(id, sizeof id, "call_", (uint64_t)st->t0 * 7919u + (uint64_t)ev[i].index);
            call = (api_tool_call){ev[i].index, id, ev[i].name, ev[i].arguments};
            c.tool_calls = &call, c.n_tool_calls = 1;
        }
        out_push(st, api_chat_chunk_json(meta, &c, usage_null));
        st->first = false;
    }
}

/* New text and tokens of the request as chunks (called with r->mu held). */
static void stream_collect(stream *st)
{
    sched_req *r = st->r;
    server *sv = st->sv;
    api_meta meta = {st->prep.id, sv->en.model_name, st->prep.created};
    bool chat = st->req->kind == API_CHAT;
    bool usage_null = st->req->include_usage;
    int to = r->n_toks;
    size_t text_to = r->text_len;
    if (to > st->toks_seen || text_to > st->text_seen) {
        api_logprob *lp = NULL;
        int n_lp = 0;
        if (st->req->logprobs) {
            n_lp = to - st->toks_seen;
            lp = hnd_logprobs(&sv->en, r, st->toks_seen, to);
        }
        const char *piece = r->text + st->text_seen;
        size_t n_piece = text_to - st->text_seen;
        if (!chat) {
            api_choice c = {.text = piece, .text_len = n_piece, .logprobs = st->req->logprobs, .tokens = lp,
                            .n_tokens = n_lp, .text_offset = st->chars_seen};
            out_push(st, api_completion_chunk_json(&meta, &c, usage_null));
            st->chars_seen += (int)api_utf8_chars(piece, n_piece);
        } else {
            const reply_event *ev = NULL;
            size_t n_ev = 0;
            lilac_error err;
            if (reply_feed(st->rp, piece, n_piece, &ev, &n_ev, &err) != LILAC_OK)
                n_ev = 0;
            push_events(st, &meta, ev, n_ev, lp, n_lp, usage_null);
        }
        hnd_logprobs_free(lp, n_lp);
        st->toks_seen = to;
        st->text_seen = text_to;
    }
    if (r->state == SCHED_DONE && !st->finished) {
        st->finished = true;
        api_error e;
        if (hnd_failed(r, &e)) {
            out_push(st, api_error_json(&e));
        } else {
            int n_calls = 0;
            if (chat) {
                const reply_event *ev = NULL;
                size_t n_ev = 0;
                lilac_error err;
                if (reply_finish(st->rp, &ev, &n_ev, &err) != LILAC_OK)
                    n_ev = 0;
                push_events(st, &meta, ev, n_ev, NULL, 0, usage_null);
                n_calls = reply_n_tool_calls(st->rp);
            }
            api_choice c = {.role = st->first, .finish = api_finish_from(r->finish, n_calls > 0)};
            out_push(st, chat ? api_chat_chunk_json(&meta, &c, usage_null)
                              : api_completion_chunk_json(&meta, &c, usage_null));
            if (st->req->include_usage) {
                api_usage u = {r->n_prompt, r->n_toks, r->n_cached, 0};
                out_push(st, api_usage_chunk_json(&meta, st->req->kind, &u));
            }
            observe_done(sv, r);
        }
    }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    stream *st = cls;
    while (st->out_pos == st->out_len) {
        st->out_pos = st->out_len = 0;
        if (st->done_sent)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (st->finished) {
            size_t n = strlen(API_SSE_DONE);
            st->out = realloc(st->out, n);
            if (!st->out)
                return MHD_CONTENT_READER_END_WITH_ERROR;
            memcpy(st->out, API_SSE_DONE, n);
            st->out_len = n;
            st->done_sent = true;
            break;
        }
        sched_req *r = st->r;
        pthread_mutex_lock(&r->mu);
        sched_req_wait_locked(r, st->text_seen, st->toks_seen, r->state, 100);
        stream_collect(st);
        pthread_mutex_unlock(&r->mu);
        if (st->out_len == 0 && client_gone(st->fd)) {
            sched_req_cancel(r);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
    size_t n = st->out_len - st->out_pos < max ? st->out_len - st->out_pos : max;
    memcpy(buf, st->out + st->out_pos, n);
    st->out_pos += n;
    return (ssize_t)n;
}

static void stream_free(void *cls)
{
    stream *st = cls;
    if (!st->finished)
        sched_req_cancel(st->r); /* the client went away mid-stream */
    pthread_mutex_lock(&st->r->mu);
    int status = st->r->state == SCHED_DONE && st->r->status == LILAC_OK ? 200 : 499;
    pthread_mutex_unlock(&st->r->mu);
    log_request(st->sv, st->prep.id, st->req->kind == API_CHAT ? "/v1/chat/completions" : "/v1/completions", status,
                st->r, st->t0);
    sched_req_release(st->r);
    reply_free(st->rp);
    hnd_prep_free(&st->prep);
    api_request_free(st->req);
    free(st->out);
    free(st);
}

/* Wait until the request leaves the queue (stream) or is done (whole);
 * false when the client went away meanwhile (the request is cancelled). */
static bool wait_for(sched_req *r, int fd, bool until_done)
{
    for (;;) {
        pthread_mutex_lock(&r->mu);
        sched_state s = r->state;
        if (s == SCHED_DONE || (!until_done && s == SCHED_RUNNING)) {
            pthread_mutex_unlock(&r->mu);
            return true;
        }
        sched_req_wait_locked(r, until_done ? (size_t)-1 : r->text_len, until_done ? 1 << 30 : r->n_toks, s, 100);
        pthread_mutex_unlock(&r->mu);
        if (client_gone(fd)) {
            sched_req_cancel(r);
            return false;
        }
    }
}

static enum MHD_Result completions(server *sv, struct MHD_Connection *c, conn *cn, api_kind kind, const char *path)
{
    double t0 = sched_now();
    api_error e;
    api_request *req = NULL;
    int rc = kind == API_CHAT ? api_parse_chat(cn->body ? cn->body : "", cn->len, &sv->lim, &req, &e)
                              : api_parse_completion(cn->body ? cn->body : "", cn->len, &sv->lim, &req, &e);
    if (rc)
        return send_error(sv, c, &e);
    hnd_prep prep;
    sched_req *r = NULL;
    if (hnd_prepare(&sv->en, req, &prep, &e) || hnd_submit(&sv->en, &prep, &r, &e)) {
        log_request(sv, prep.id[0] ? prep.id : "-", path, e.status, NULL, t0);
        hnd_prep_free(&prep);
        api_request_free(req);
        return send_error(sv, c, &e);
    }
    int fd = conn_fd(c);
    if (!wait_for(r, fd, !req->stream)) {
        log_request(sv, prep.id, path, 499, r, t0);
        sched_req_release(r);
        hnd_prep_free(&prep);
        api_request_free(req);
        return MHD_NO;
    }
    pthread_mutex_lock(&r->mu);
    int failed = r->state == SCHED_DONE ? hnd_failed(r, &e) : 0;
    pthread_mutex_unlock(&r->mu);
    if (failed) {
        log_request(sv, prep.id, path, e.status, r, t0);
        sched_req_release(r);
        hnd_prep_free(&prep);
        api_request_free(req);
        return send_error(sv, c, &e);
    }
    if (!req->stream) {
        char *json = hnd_response_json(&sv->en, &prep, r, &e);
        enum MHD_Result ret = json ? send_text(c, 200, "application/json", json, 0) : send_error(sv, c, &e);
        if (json)
            observe_done(sv, r);
        log_request(sv, prep.id, path, json ? 200 : e.status, r, t0);
        free(json);
        sched_req_release(r);
        hnd_prep_free(&prep);
        api_request_free(req);
        return ret;
    }
    stream *st = calloc(1, sizeof *st);
    lilac_error err;
    if (!st || (kind == API_CHAT && reply_new(&prep.ropts, &st->rp, &err) != LILAC_OK)) {
        free(st);
        sched_req_cancel(r);
        sched_req_release(r);
        hnd_prep_free(&prep);
        api_request_free(req);
        api_error_set(&e, 500, "server_error", NULL, NULL, "out of memory");
        return send_error(sv, c, &e);
    }
    st->sv = sv, st->prep = prep, st->req = req, st->r = r, st->fd = fd, st->first = true, st->t0 = t0;
    st->prep.req = req;
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, st, stream_free);
    if (!resp) {
        stream_free(st);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    enum MHD_Result ret = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return ret;
}

static double gauge_queue(void *u)
{
    sched_stats st;
    sched_get_stats(((server *)u)->en.sched, &st);
    return st.queued;
}

static double gauge_busy(void *u)
{
    sched_stats st;
    sched_get_stats(((server *)u)->en.sched, &st);
    return st.running;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    server *sv = cls;
    conn *cn = *con_cls;
    if (!cn) {
        cn = calloc(1, sizeof *cn);
        if (!cn)
            return MHD_NO;
        *con_cls = cn;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > sv->lim.max_body_bytes)
            cn->too_large = true; /* refused below, without reading the body */
        else
            return MHD_YES;
    }
    if (*upload_size) {
        if (!cn->too_large && cn->len + *upload_size > sv->lim.max_body_bytes)
            cn->too_large = true;
        if (!cn->too_large) {
            if (cn->len + *upload_size + 1 > cn->cap) {
                size_t cap = cn->cap ? cn->cap : 4096;
                while (cap < cn->len + *upload_size + 1)
                    cap *= 2;
                char *b = realloc(cn->body, cap);
                if (!b)
                    return MHD_NO;
                cn->body = b, cn->cap = cap;
            }
            memcpy(cn->body + cn->len, upload, *upload_size);
            cn->len += *upload_size;
            cn->body[cn->len] = '\0';
        }
        *upload_size = 0;
        return MHD_YES;
    }
    api_error e;
    if (cn->too_large) {
        api_error_set(&e, 413, "invalid_request_error", "request_too_large", NULL,
                      "the request body is over the limit of %zu bytes", sv->lim.max_body_bytes);
        return send_error(sv, c, &e);
    }
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    const char *allow = "GET"; /* for a 405 */
    int st = sv->state;
    if (!strcmp(url, "/health")) {
        if (!get)
            goto not_allowed;
        char body[64];
        snprintf(body, sizeof body, "{\"status\":\"%s\"}", state_name(st));
        return send_text(c, st == 1 ? 200 : 503, "application/json", body, st == 1 ? 0 : 5);
    }
    if (!strcmp(url, "/metrics")) {
        if (!get)
            goto not_allowed;
        char *text = metrics_render(sv->reg);
        enum MHD_Result r = send_text(c, 200, METRICS_CONTENT_TYPE, text ? text : "", 0);
        free(text);
        return r;
    }
    bool chat = !strcmp(url, "/v1/chat/completions"), compl = !strcmp(url, "/v1/completions");
    bool models = !strcmp(url, "/v1/models");
    const char *model_id = !strncmp(url, "/v1/models/", 11) ? url + 11 : NULL;
    if (model_id && !get)
        goto not_allowed;
    if (model_id) {
        if (strcmp(model_id, sv->en.model_name) != 0) {
            api_error_set(&e, 404, "invalid_request_error", "model_not_found", "model", "no model named '%s'",
                          model_id);
            return send_error(sv, c, &e);
        }
        json_t *o = json_pack("{s:s, s:s, s:I, s:s}", "id", sv->en.model_name, "object", "model", "created",
                              (json_int_t)time(NULL), "owned_by", "lilac");
        char *j = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_decref(o);
        enum MHD_Result r = send_text(c, 200, "application/json", j ? j : "{}", 0);
        free(j);
        return r;
    }
    if (!chat && !compl && !models) {
        api_error_set(&e, 404, "invalid_request_error", "unknown_url", NULL, "no such path: %s %s", method, url);
        return send_error(sv, c, &e);
    }
    if ((chat || compl) && !post) {
        allow = "POST";
        goto not_allowed;
    }
    if (models && !get)
        goto not_allowed;
    if (sv->p->api_key && *sv->p->api_key &&
        !api_check_bearer(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization"), sv->p->api_key)) {
        api_error_set(&e, 401, "invalid_request_error", "invalid_api_key", NULL,
                      "missing or wrong API key (Authorization: Bearer KEY)");
        return send_error(sv, c, &e);
    }
    if (models) {
        api_model_info mi = {sv->en.model_name, (int64_t)time(NULL), NULL};
        char *j = api_models_json(&mi, 1);
        enum MHD_Result r = send_text(c, 200, "application/json", j ? j : "{}", 0);
        free(j);
        return r;
    }
    if (st != 1) {
        api_error_set(&e, 503, "server_error", "server_draining", NULL, "the server is %s", state_name(st));
        return send_error(sv, c, &e);
    }
    return completions(sv, c, cn, chat ? API_CHAT : API_COMPLETION, url);
not_allowed:
    api_error_set(&e, 405, "invalid_request_error", "method_not_allowed", NULL, "%s is not allowed on %s (use %s)",
                  method, url, allow);
    return send_error_allow(sv, c, &e, allow);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)c, (void)toe;
    conn *cn = *con_cls;
    if (cn) {
        free(cn->body);
        free(cn);
        *con_cls = NULL;
    }
}

/* libmicrohttpd's own messages, as log lines like the others */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == ' '))
        msg[--n] = '\0';
    log_json(json_pack("{s:s, s:s}", "event", "http", "message", msg));
}

static void log_line(void *user, const char *json_line)
{
    (void)user;
    fprintf(stderr, "%s\n", json_line);
}

static void model_log(void *user, lilac_log_level level, const char *msg)
{
    (void)user;
    if (level > LILAC_LOG_INFO)
        return;
    static const char *names[] = {"error", "warning", "note", "debug"};
    log_json(json_pack("{s:s, s:s, s:s}", "event", "model", "level", names[level], "message", msg));
}

static lilac_status metrics_setup(server *sv, lilac_error *err)
{
    static const double lat[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
    const int nl = sizeof lat / sizeof lat[0];
    const char *rej = "lilac_rejections_total", *rh = "Requests refused, by reason";
    metrics_def defs[] = {
        {&sv->m_queue, METRICS_GAUGE, "lilac_queue_depth", "Requests waiting for a slot", .read = gauge_queue,
         .user = sv},
        {&sv->m_busy, METRICS_GAUGE, "lilac_busy_slots", "Sequence slots running a request", .read = gauge_busy,
         .user = sv},
        {&sv->m_in, METRICS_COUNTER, "lilac_prompt_tokens_total", "Prompt tokens of finished requests", {{0}}, 0, 0,
         0, 0},
        {&sv->m_cached, METRICS_COUNTER, "lilac_cached_prompt_tokens_total", "Prompt tokens reused from the cache",
         {{0}}, 0, 0, 0, 0},
        {&sv->m_out, METRICS_COUNTER, "lilac_generated_tokens_total", "Tokens generated", {{0}}, 0, 0, 0, 0},
        {&sv->m_ttft, METRICS_HISTOGRAM, "lilac_time_to_first_token_seconds", "From arrival to the first token",
         .buckets = lat, .n_buckets = nl},
        {&sv->m_tpot, METRICS_HISTOGRAM, "lilac_time_per_output_token_seconds", "Between generated tokens",
         .buckets = lat, .n_buckets = nl},
        {&sv->m_rej_full, METRICS_COUNTER, rej, rh, {{"reason", "queue_full"}}, 0, 0, 0, 0},
        {&sv->m_rej_timeout, METRICS_COUNTER, rej, rh, {{"reason", "queue_timeout"}}, 0, 0, 0, 0},
        {&sv->m_rej_drain, METRICS_COUNTER, rej, rh, {{"reason", "unavailable"}}, 0, 0, 0, 0},
        {&sv->m_rej_auth, METRICS_COUNTER, rej, rh, {{"reason", "unauthorized"}}, 0, 0, 0, 0},
        {&sv->m_rej_bad, METRICS_COUNTER, rej, rh, {{"reason", "bad_request"}}, 0, 0, 0, 0},
        {&sv->m_req_ok, METRICS_COUNTER, "lilac_requests_completed_total", "Requests answered in full", {{0}}, 0, 0,
         0, 0},
        {&sv->m_rss, METRICS_GAUGE, "lilac_resident_memory_bytes", "Resident memory of the engine",
         .read = metrics_rss_bytes},
    };
    lilac_status st = metrics_new(&sv->reg, err);
    return st ? st : metrics_register(sv->reg, defs, (int)(sizeof defs / sizeof defs[0]), err);
}

/* The engine: load, serve on listen_fd until SIGTERM/SIGINT, drain. */
static int engine_main(void *user, int listen_fd, int ready_fd)
{
    const lilac_serve_params *p = user;
    server sv = {.p = p};
    sv.lim = api_limits_default();
    if (p->max_body_bytes)
        sv.lim.max_body_bytes = p->max_body_bytes;
    /* SIGTERM and SIGINT go to sigwait below, in no other thread */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    lilac_error err;
    lilac_model_params mp = lilac_model_default_params();
    mp.n_threads = p->n_threads;
    mp.precise = p->precise;
    mp.log = model_log;
    lilac_model *m = NULL;
    struct MHD_Daemon *d = NULL;
    int rc = 1;
    if (lilac_model_open(p->model_path, &mp, &m, &err) ||
        lilac_model_mem_check(m, p->n_ctx, p->n_parallel, &err) || lilac_model_prepare(m, &err) ||
        lilac_model_tokenizer(m, &sv.en.tok, &err)) {
        log_json(json_pack("{s:s, s:s}", "event", "load_failed", "error", err.msg));
        goto done;
    }
    sv.en.model = m;
    sv.en.model_name = p->model_name;
    sv.en.template_text = lilac_model_chat_template(m);
    sv.en.n_ctx = p->n_ctx;
    sv.en.default_max_tokens = p->default_max_tokens;
    sched_params sp = {.n_parallel = p->n_parallel, .n_ctx = p->n_ctx, .queue_max = p->queue,
                       .queue_timeout_s = p->queue_timeout_s, .cache_bytes = p->cache_bytes, .chunk = 64};
    if (sched_new(m, sv.en.tok, &sp, &sv.en.sched, &err) || metrics_setup(&sv, &err)) {
        log_json(json_pack("{s:s, s:s}", "event", "load_failed", "error", err.msg));
        goto done;
    }
    if (sup_notify_ready(ready_fd) != LILAC_OK)
        goto done;
    /* MHD_USE_ITC: without it, stopping would shutdown() the listening
     * socket, which the supervisor and the next engine share */
    d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG |
                             MHD_USE_ITC,
                         0,
                         NULL, NULL, on_request, &sv, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                         MHD_OPTION_LISTEN_SOCKET, (MHD_socket)listen_fd,
                         MHD_OPTION_NOTIFY_COMPLETED, on_completed, &sv, MHD_OPTION_CONNECTION_LIMIT,
                         (unsigned)(p->max_connections > 0 ? p->max_connections : 512),
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120, MHD_OPTION_END);
    if (!d) {
        log_json(json_pack("{s:s, s:s}", "event", "start_failed", "error", "libmicrohttpd could not start"));
        goto done;
    }
    sv.state = 1;
    log_json(json_pack("{s:s, s:s, s:i, s:i}", "event", "ready", "model", p->model_name, "parallel", p->n_parallel,
                       "ctx", p->n_ctx));
    int sig = 0;
    sigwait(&sigs, &sig);
    sv.state = 2;
    log_json(json_pack("{s:s, s:s, s:f}", "event", "draining", "signal", sig == SIGTERM ? "SIGTERM" : "SIGINT",
                       "grace_s", p->grace_s));
    double t_drain = sched_now();
    int left = sched_drain(sv.en.sched, p->grace_s);
    /* the requests are done; let their connections send what they hold (the last chunks, [DONE]) */
    while (sched_now() - t_drain < p->grace_s) {
        const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
        if (!di || di->num_connections == 0)
            break;
        nanosleep(&(struct timespec){0, 20000000L}, NULL);
    }
    log_json(json_pack("{s:s, s:i}", "event", "drained", "cancelled", left));
    rc = 0;
done:
    if (sv.en.sched)
        sched_free(sv.en.sched); /* cancels what is left, so the connection threads can end */
    if (d) {
        MHD_socket ls = MHD_quiesce_daemon(d); /* stop accepting; the socket stays open for the supervisor */
        if (ls != MHD_INVALID_SOCKET && ls != (MHD_socket)listen_fd)
            close(ls);
        MHD_stop_daemon(d);
    }
    metrics_free(sv.reg);
    lilac_model_free(m);
    return rc;
}

lilac_status lilac_serve(const lilac_serve_params *p, lilac_error *err)
{
    if (!p->model_path)
        return lilac_fail(err, LILAC_E_ARG, "no model given");
    if (p->n_parallel < 1 || p->n_ctx < 2 || p->queue < 0)
        return lilac_fail(err, LILAC_E_ARG, "bad --parallel, --ctx or --queue");
    int fd;
    lilac_status st = sup_listen(p->host ? p->host : "127.0.0.1", p->port, &fd, err);
    if (st)
        return st;
    log_json(json_pack("{s:s, s:s, s:i, s:b}", "event", "listening", "host", p->host ? p->host : "127.0.0.1", "port",
                       sup_bound_port(fd), "supervised", p->supervise));
    if (!p->supervise) {
        int rc = engine_main((void *)p, fd, -1);
        return rc ? lilac_fail(err, LILAC_E_INTERNAL, "the engine stopped with status %d (see the log)", rc)
                  : LILAC_OK;
    }
    /* the engine drains for grace_s on SIGTERM: the supervisor's SIGKILL comes a little after */
    sup_opts o = {.listen_fd = fd, .child_main = engine_main, .user = (void *)p, .log = log_line,
                  .grace_s = p->grace_s + 5};
    return sup_run(&o, err);
}
