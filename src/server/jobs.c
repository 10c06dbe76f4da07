/* jobs: `lilac batch` — a JSONL file of requests through the scheduler,
 * results appended as they complete, resumable (see lilac.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "server/handle.h"
#include "util/err.h"
#include "util/mapfile.h"

typedef struct job {
    char *id;        /* the id as JSON text, the key for resuming */
    char *line;      /* the request */
    api_request *req;
    hnd_prep prep;
    sched_req *r;
} job;

static char *id_text(json_t *line_obj, int line_no)
{
    json_t *id = json_is_object(line_obj) ? json_object_get(line_obj, "id") : NULL;
    if (json_is_string(id) || json_is_integer(id))
        return json_dumps(id, JSON_ENCODE_ANY | JSON_COMPACT);
    char buf[32];
    snprintf(buf, sizeof buf, "\"line:%d\"", line_no);
    return strdup(buf);
}

/* The ids already in out; cuts a torn last line off the file. */
static lilac_status done_ids(const char *path, char ***ids, int *n, lilac_error *err)
{
    *ids = NULL, *n = 0;
    if (access(path, F_OK) != 0)
        return LILAC_OK; /* nothing done yet */
    lilac_mapfile map;
    lilac_status mst = lilac_mapfile_open(&map, path, err);
    if (mst)
        return mst;
    const char *text = (const char *)map.data;
    size_t len = map.size;
    size_t good = 0; /* bytes up to the end of the last whole, parseable line */
    int cap = 0;
    for (size_t at = 0; at < len;) {
        const char *nl = memchr(text + at, '\n', len - at);
        if (!nl)
            break;
        json_t *o = json_loadb(text + at, (size_t)(nl - (text + at)), 0, NULL);
        json_t *id = o ? json_object_get(o, "id") : NULL;
        if (!id) {
            json_decref(o);
            break;
        }
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            char **ni = realloc(*ids, (size_t)cap * sizeof *ni);
            if (!ni) {
                json_decref(o);
                lilac_mapfile_close(&map);
                return lilac_fail(err, LILAC_E_NOMEM, "out of memory");
            }
            *ids = ni;
        }
        (*ids)[(*n)++] = json_dumps(id, JSON_ENCODE_ANY | JSON_COMPACT);
        json_decref(o);
        at = (size_t)(nl - text) + 1;
        good = at;
    }
    lilac_mapfile_close(&map);
    if (good < len && truncate(path, (off_t)good) != 0)
        return lilac_fail(err, LILAC_E_IO, "%s: cannot cut off its torn last line", path);
    return LILAC_OK;
}

static bool in_list(char **ids, int n, const char *id)
{
    for (int i = 0; i < n; i++)
        if (ids[i] && !strcmp(ids[i], id))
            return true;
    return false;
}

static void write_line(FILE *out, const char *id, const char *key, const char *json)
{
    fprintf(out, "{\"id\": %s, \"%s\": %s}\n", id, key, json);
    fflush(out);
}

static void write_error(FILE *out, const char *id, const api_error *e)
{
    char *j = api_error_json(e);
    json_t *o = j ? json_loads(j, 0, NULL) : NULL;
    json_t *inner = o ? json_object_get(o, "error") : NULL;
    char *ij = inner ? json_dumps(inner, JSON_COMPACT) : NULL;
    write_line(out, id, "error", ij ? ij : "{\"message\": \"out of memory\"}");
    free(ij);
    json_decref(o);
    free(j);
}

static void job_free(job *j)
{
    if (j->r)
        sched_req_release(j->r);
    hnd_prep_free(&j->prep);
    api_request_free(j->req);
    free(j->id);
    free(j->line);
    memset(j, 0, sizeof *j);
}

lilac_status lilac_jobs_run(const lilac_jobs_params *p, lilac_jobs_result *res, lilac_error *err)
{
    memset(res, 0, sizeof *res);
    lilac_mapfile in_map;
    lilac_status mst = lilac_mapfile_open(&in_map, p->in_path, err);
    if (mst)
        return mst;
    const char *in = (const char *)in_map.data; /* not NUL-terminated: lengths throughout */
    size_t in_len = in_map.size;
    char **done = NULL;
    int n_done = 0;
    lilac_status st = done_ids(p->out_path, &done, &n_done, err);
    FILE *out = st ? NULL : fopen(p->out_path, "ab");
    if (!st && !out)
        st = lilac_fail(err, LILAC_E_IO, "%s: cannot open for appending", p->out_path);
    lilac_model *m = NULL;
    sched *sc = NULL;
    hnd_engine en = {0};
    int slots = p->n_parallel > 0 ? p->n_parallel : 4, n_ctx = p->n_ctx > 1 ? p->n_ctx : 4096;
    if (!st) {
        lilac_model_params mp = lilac_model_default_params();
        mp.n_threads = p->n_threads;
        mp.precise = p->precise;
        if (!(st = lilac_model_open(p->model_path, &mp, &m, err)) && !(st = lilac_model_mem_check(m, n_ctx, slots, err)) &&
            !(st = lilac_model_tokenizer(m, &en.tok, err))) {
            sched_params sp = {.n_parallel = slots, .n_ctx = n_ctx, .queue_max = slots, .cache_bytes = 256u << 20,
                               .chunk = 64};
            st = sched_new(m, en.tok, &sp, &sc, err);
        }
    }
    en.model = m, en.sched = sc, en.n_ctx = n_ctx, en.default_max_tokens = p->default_max_tokens;
    en.model_name = p->model_path;
    en.template_text = m ? lilac_model_chat_template(m) : NULL;
    int max_flight = 2 * slots;
    job *fl = calloc((size_t)max_flight, sizeof *fl);
    char **seen = calloc(in_len / 2 + 2, sizeof *seen); /* ids of this input, for duplicates */
    int n_seen = 0;
    if (!st && (!fl || !seen))
        st = lilac_fail(err, LILAC_E_NOMEM, "out of memory");
    for (size_t i = 0; !st && i < in_len; i++) /* lines, the last one with or without its newline */
        res->n_total += in[i] == '\n' || i + 1 == in_len;
    size_t at = 0;
    int line_no = 0, n_flight = 0, finished = 0;
    double t_start = sched_now(), t_draw = 0;
    while (!st && (at < in_len || n_flight > 0)) {
        /* fill the flight */
        while (at < in_len && n_flight < max_flight) {
            const char *nl = memchr(in + at, '\n', in_len - at);
            size_t n = nl ? (size_t)(nl - (in + at)) : in_len - at;
            const char *line = in + at;
            at += n + (nl ? 1 : 0);
            line_no++;
            size_t blank = 0; /* a line of spaces only is skipped (bounded: the map has no NUL) */
            while (blank < n && (line[blank] == ' ' || line[blank] == '\t' || line[blank] == '\r'))
                blank++;
            if (blank == n)
                continue;
            json_t *o = json_loadb(line, n, 0, NULL);
            char *id = id_text(o, line_no);
            bool is_chat = json_is_object(o) && json_object_get(o, "messages");
            json_decref(o);
            if (!id) {
                st = lilac_fail(err, LILAC_E_NOMEM, "out of memory");
                break;
            }
            api_error e;
            if (in_list(done, n_done, id) && !in_list(seen, n_seen, id)) {
                res->n_skipped++;
                seen[n_seen++] = id; /* a later line with this id is still a duplicate */
                continue;
            }
            if (in_list(seen, n_seen, id)) {
                /* reported under its line, not the id: the id's own answer may still be coming */
                char dup_id[32];
                snprintf(dup_id, sizeof dup_id, "\"line:%d\"", line_no);
                if (in_list(done, n_done, dup_id)) {
                    res->n_skipped++;
                } else {
                    api_error_set(&e, 400, "invalid_request_error", "duplicate_id", "id",
                                  "line %d: the id %s came before", line_no, id);
                    write_error(out, dup_id, &e);
                    res->n_failed++, finished++;
                }
                free(id);
                continue;
            }
            seen[n_seen++] = strdup(id);
            job *j = &fl[n_flight];
            memset(j, 0, sizeof *j);
            j->id = id;
            int rc = is_chat ? api_parse_chat(line, n, NULL, &j->req, &e) : api_parse_completion(line, n, NULL, &j->req, &e);
            if (!rc && j->req->stream)
                j->req->stream = false; /* a file gets whole answers */
            if (rc || hnd_prepare(&en, j->req, &j->prep, &e) || hnd_submit(&en, &j->prep, &j->r, &e)) {
                write_error(out, id, &e);
                res->n_failed++, finished++;
                job_free(j);
                continue;
            }
            n_flight++;
        }
        /* collect what is done */
        bool any = false;
        for (int i = 0; i < n_flight; i++) {
            job *j = &fl[i];
            pthread_mutex_lock(&j->r->mu);
            bool fin = j->r->state == SCHED_DONE;
            pthread_mutex_unlock(&j->r->mu);
            if (!fin)
                continue;
            api_error e;
            char *json = hnd_response_json(&en, &j->prep, j->r, &e);
            if (json)
                write_line(out, j->id, "response", json), res->n_done++;
            else
                write_error(out, j->id, &e), res->n_failed++;
            free(json);
            job_free(j);
            fl[i] = fl[--n_flight];
            memset(&fl[n_flight], 0, sizeof fl[n_flight]); /* moved, not to be freed twice */
            i--;
            finished++;
            any = true;
        }
        if (p->progress && sched_now() - t_draw > 0.2) {
            t_draw = sched_now();
            int todo = res->n_total - res->n_skipped;
            fprintf(stderr, "\r%d/%d requests (%d skipped as done before), %.1f s", finished, todo, res->n_skipped,
                    t_draw - t_start);
        }
        if (!any && n_flight > 0)
            nanosleep(&(struct timespec){0, 5000000L}, NULL);
    }
    if (p->progress)
        fputc('\n', stderr);
    for (int i = 0; fl && i < n_flight; i++)
        job_free(&fl[i]);
    free(fl);
    for (int i = 0; i < n_seen; i++)
        free(seen[i]);
    free(seen);
    for (int i = 0; i < n_done; i++)
        free(done[i]);
    free(done);
    sched_free(sc);
    lilac_model_free(m);
    if (out && fclose(out) != 0 && !st)
        st = lilac_fail(err, LILAC_E_IO, "%s: write failed", p->out_path);
    lilac_mapfile_close(&in_map);
    return st;
}
