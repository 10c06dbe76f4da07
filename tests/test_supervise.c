/* test_supervise: the supervisor of `lilac serve` (src/server/supervise.c).
 *
 * sup_run runs in a forked process (its signal handling stays out of this one) with fake engines:
 *   - serve: loads until the test creates a gate file, then sup_notify_ready and libmicrohttpd on the inherited
 *     socket (MHD_OPTION_LISTEN_SOCKET, as the engine does), 200 "child" to everything; on SIGTERM it quiesces,
 *     records the signal in a file and returns 0;
 *   - crash: returns at once with a status;
 *   - stubborn: ready, then ignores SIGTERM.
 * Checked over plain sockets: 503 + Retry-After + the OpenAI-shaped error while loading, /health 503 "loading";
 * a silent client neither blocks the others nor stays open; a request with an unread body still gets its answer;
 * 200 from the child once ready, every time (the supervisor no longer accepts); the child's signal state is the
 * test's own; after SIGKILL of the child: a child_exited line with "signal":"SIGKILL", 503 again, a new child, 200
 * again; SIGHUP restarts the child and the socket still works; a child that was up past backoff_reset_s restarts
 * after the initial delay; SIGTERM drains (the child got SIGTERM, exit 0, nothing left listening); the grace ends in
 * SIGKILL, a second signal cuts it short; a crashing child restarts with a doubling, capped delay (from the log's
 * timestamps); no_restart returns how the child died; a child that shuts the socket down (libmicrohttpd without
 * MHD_USE_ITC) does not leave the port dead; sup_listen's errors. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>
#include <arpa/inet.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "server/supervise.h"
#include "testutil.h"

static char g_dir[64];

static const char *in_dir(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/%s", g_dir, name);
    return buf;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void sleep_s(double s)
{
    struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
}

/* A JSON string's text, "" for anything else. */
static const char *str_of(const json_t *v) { return json_is_string(v) ? json_string_value(v) : ""; }

/* A whole file as a NUL-terminated string (malloc'd), or NULL. */
static char *read_text(const char *path)
{
    size_t n = 0;
    char *b = tu_read_file(path, &n), *t = b ? realloc(b, n + 1) : NULL;
    if (!t) {
        free(b);
        return NULL;
    }
    t[n] = 0;
    return t;
}

static bool exists(const char *path) { return access(path, F_OK) == 0; }

static void touch(const char *name)
{
    char p[128];
    tu_write_file(in_dir(p, sizeof p, name), "", 0);
}

/* ---- the fake engines -------------------------------------------------------------------------------------------- */

enum { FAKE_SERVE, FAKE_CRASH, FAKE_STUBBORN };
typedef struct fake {
    int mode;
    int exit_status; /* FAKE_CRASH */
    bool sloppy;     /* FAKE_SERVE: libmicrohttpd without MHD_USE_ITC, stopped without quiescing */
} fake;

/* The test's own signal state, which the fake engine must find again in itself. */
static const int g_sigs[4] = {SIGCHLD, SIGINT, SIGHUP, SIGTERM};
static void (*g_disp[4])(int);
static sigset_t g_mask;

static volatile sig_atomic_t fake_term;
static void fake_on_term(int s)
{
    (void)s;
    fake_term = 1;
}

static enum MHD_Result fake_answer(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                   const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)cls, (void)url, (void)method, (void)version, (void)upload, (void)upload_size, (void)con_cls;
    static const char body[] = "child\n";
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

static int fake_main(void *user, int listen_fd, int ready_fd)
{
    const fake *f = user;
    char p[128], buf[32];
    if (f->mode == FAKE_CRASH)
        return f->exit_status;
    if (f->mode == FAKE_STUBBORN) {
        signal(SIGTERM, SIG_IGN);
        sup_notify_ready(ready_fd);
        for (;;)
            pause();
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = fake_on_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    int n = snprintf(buf, sizeof buf, "%d", (int)getpid());
    tu_write_file(in_dir(p, sizeof p, "child.pid"), buf, (size_t)n);
    /* what the child inherited: the test's own signal state, as if no supervisor were in between */
    sigset_t mask;
    sigprocmask(SIG_SETMASK, NULL, &mask);
    int odd = 0;
    for (int i = 0; i < 4; i++) {
        struct sigaction cur;
        sigaction(g_sigs[i], NULL, &cur);
        odd += g_sigs[i] != SIGTERM && cur.sa_handler != g_disp[i]; /* SIGTERM: set just above */
        odd += sigismember(&mask, g_sigs[i]) != sigismember(&g_mask, g_sigs[i]);
    }
    n = snprintf(buf, sizeof buf, "%d", odd);
    tu_write_file(in_dir(p, sizeof p, "sigstate"), buf, (size_t)n);
    /* "loading the model": until the test opens the gate (15 s at most, so nothing is left behind) */
    for (int i = 0; i < 1500 && !fake_term && !exists(in_dir(p, sizeof p, "gate")); i++)
        sleep_s(0.01);
    if (fake_term || sup_notify_ready(ready_fd) != LILAC_OK)
        return 2;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG | (f->sloppy ? 0 : MHD_USE_ITC);
    struct MHD_Daemon *d = MHD_start_daemon(flags, 0, NULL, NULL, fake_answer, NULL, MHD_OPTION_LISTEN_SOCKET,
                                            listen_fd, MHD_OPTION_END);
    if (!d)
        return 3;
    while (!fake_term)
        sleep_s(0.01);
    /* drain as the engine will: stop accepting first (the socket goes back to the supervisor), then finish */
    MHD_socket lfd = f->sloppy ? MHD_INVALID_SOCKET : MHD_quiesce_daemon(d);
    snprintf(buf, sizeof buf, "term.%d", (int)getpid());
    touch(buf);
    MHD_stop_daemon(d);
    if (lfd != MHD_INVALID_SOCKET)
        close(lfd);
    return 0;
}

/* ---- the supervisor, in its own process -------------------------------------------------------------------------- */

static void log_line(void *user, const char *line)
{
    int fd = *(int *)user;
    size_t n = strlen(line);
    char *b = malloc(n + 1);
    if (!b)
        return;
    memcpy(b, line, n);
    b[n] = '\n';
    ssize_t w = write(fd, b, n + 1); /* one write per line: O_APPEND keeps lines whole */
    (void)w;
    free(b);
}

static pid_t start_supervisor(const sup_opts *base, const char *log_name)
{
    char p[128];
    in_dir(p, sizeof p, log_name);
    unlink(p);
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0)
        return pid;
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* a test that dies leaves no server behind */
#endif
    int fd = open(p, O_WRONLY | O_CREAT | O_APPEND, 0644);
    sup_opts o = *base;
    o.log = log_line;
    o.log_user = &fd;
    lilac_error err = {0};
    lilac_status st = sup_run(&o, &err);
    if (st != LILAC_OK)
        tu_write_file(in_dir(p, sizeof p, "result"), err.msg, strlen(err.msg));
    _exit(st == LILAC_OK ? 0 : 10 + (int)st);
}

/* Wait for a process of ours; -1 after timeout_s (then it is killed). */
static int wait_exit(pid_t pid, double timeout_s, double *took)
{
    double t0 = now_s();
    int st;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            break;
        if (r < 0 || now_s() - t0 > timeout_s) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        sleep_s(0.01);
    }
    if (took)
        *took = now_s() - t0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The log's events of one kind, in order (a new array). */
static json_t *events(const char *log_name, const char *event)
{
    char p[128];
    json_t *out = json_array();
    char *text = read_text(in_dir(p, sizeof p, log_name));
    if (!text)
        return out;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        json_t *ev = json_loads(line, 0, NULL);
        if (ev && strcmp(str_of(json_object_get(ev, "event")), event) == 0)
            json_array_append(out, ev);
        json_decref(ev);
    }
    free(text);
    return out;
}

static bool wait_events(const char *log_name, const char *event, size_t n, double timeout_s)
{
    double t0 = now_s();
    for (;;) {
        json_t *a = events(log_name, event);
        size_t got = json_array_size(a);
        json_decref(a);
        if (got >= n)
            return true;
        if (now_s() - t0 > timeout_s)
            return false;
        sleep_s(0.01);
    }
}

/* A field of the i-th event of a kind. */
static json_t *ev_get(const char *log_name, const char *event, size_t i, const char *key, json_t **hold)
{
    *hold = events(log_name, event);
    return json_object_get(json_array_get(*hold, i), key);
}

static long ev_int(const char *log_name, const char *event, size_t i, const char *key)
{
    json_t *hold, *v = ev_get(log_name, event, i, key, &hold);
    long r = json_is_integer(v) ? (long)json_integer_value(v) : -1;
    json_decref(hold);
    return r;
}

/* ---- a plain HTTP client ----------------------------------------------------------------------------------------- */

typedef struct resp {
    int status;
    bool sent_all; /* the whole request went out */
    char text[16384];
    size_t n;
} resp;

static int connect_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Send req (len bytes), read the answer to EOF within 5 s. 0 when a status line came. */
static int http_raw(int port, const char *req, size_t len, resp *r)
{
    memset(r, 0, sizeof *r);
    int fd = connect_to(port);
    if (fd < 0)
        return -1;
    size_t off = 0;
    while (off < len) {
        ssize_t n = send(fd, req + off, len - off, MSG_NOSIGNAL);
        if (n <= 0)
            break; /* still read whatever the server said */
        off += (size_t)n;
    }
    r->sent_all = off == len;
    double t0 = now_s();
    while (r->n < sizeof r->text - 1 && now_s() - t0 < 5) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, 100) <= 0)
            continue;
        ssize_t n = recv(fd, r->text + r->n, sizeof r->text - 1 - r->n, 0);
        if (n <= 0)
            break;
        r->n += (size_t)n;
    }
    close(fd);
    r->text[r->n] = 0;
    return sscanf(r->text, "HTTP/1.%*d %d", &r->status) == 1 ? 0 : -1;
}

static int http_get(int port, const char *path, resp *r)
{
    char req[512];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", path);
    return http_raw(port, req, (size_t)n, r);
}

static json_t *body_json(const resp *r)
{
    const char *b = strstr(r->text, "\r\n\r\n");
    return b ? json_loads(b + 4, 0, NULL) : NULL;
}

static const char *body_str(const resp *r, const char *k1, const char *k2)
{
    static char out[256];
    json_t *j = body_json(r), *v = json_object_get(j, k1);
    if (k2)
        v = json_object_get(v, k2);
    snprintf(out, sizeof out, "%s", json_is_string(v) ? json_string_value(v) : "(none)");
    json_decref(j);
    return out;
}

/* A 503 from the supervisor, with everything a client needs to retry. */
static void check_503(const resp *r, const char *what)
{
    CHECKF(r->status == 503, "%s: status %d", what, r->status);
    CHECKF(strstr(r->text, "\r\nRetry-After: 5\r\n") != NULL, "%s: no Retry-After: %s", what, r->text);
    CHECKF(strstr(r->text, "\r\nConnection: close\r\n") != NULL, "%s: no Connection: close", what);
    CHECKF(strstr(r->text, "\r\nContent-Type: application/json\r\n") != NULL, "%s: not JSON", what);
    json_t *j = body_json(r), *e = json_object_get(j, "error");
    CHECKF(json_is_object(e), "%s: no error object: %s", what, r->text);
    CHECKF(strcmp(str_of(json_object_get(e, "code")), "engine_unavailable") == 0, "%s: code", what);
    CHECKF(strcmp(str_of(json_object_get(e, "type")), "server_error") == 0, "%s: type", what);
    CHECKF(json_is_null(json_object_get(e, "param")), "%s: param is not null", what);
    CHECKF(json_is_string(json_object_get(e, "message")), "%s: no message", what);
    const char *b = strstr(r->text, "\r\n\r\n");
    long cl = -1;
    const char *h = strstr(r->text, "Content-Length: ");
    if (h)
        cl = strtol(h + 16, NULL, 10);
    CHECKF(b && cl == (long)strlen(b + 4), "%s: Content-Length %ld does not match the body", what, cl);
    json_decref(j);
}

/* True when the server closes fd within timeout_s. */
static bool closed_by_peer(int fd, double timeout_s)
{
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, (int)(timeout_s * 1000)) <= 0)
        return false;
    char c;
    return recv(fd, &c, 1, 0) <= 0;
}

static int new_listener(int *port)
{
    int fd = -1;
    lilac_error err;
    lilac_status st = sup_listen("127.0.0.1", 0, &fd, &err);
    CHECKF(st == LILAC_OK, "sup_listen: %s", err.msg);
    *port = st == LILAC_OK ? sup_bound_port(fd) : -1;
    return fd;
}

/* ---- the scenarios ----------------------------------------------------------------------------------------------- */

static void test_lifecycle(void)
{
    char p[128], buf[64];
    const char *L = "life.log";
    unlink(in_dir(p, sizeof p, "gate"));
    int port, lfd = new_listener(&port);
    fake f = {.mode = FAKE_SERVE};
    sup_opts o = {.listen_fd = lfd, .child_main = fake_main, .user = &f, .backoff_initial_s = 0.3,
                  .backoff_reset_s = 0.2, .grace_s = 3, .client_timeout_s = 1.0};
    pid_t sp = start_supervisor(&o, L);
    close(lfd); /* the supervisor's copy is the only one: once it is gone, nothing listens */

    CHECK(wait_events(L, "child_started", 1, 5));
    resp r;
    CHECK(http_get(port, "/v1/models", &r) == 0);
    check_503(&r, "loading");
    const char *msg = body_str(&r, "error", "message");
    CHECKF(strstr(msg, "loading") != NULL, "message: %s", msg);
    CHECK(http_get(port, "/health", &r) == 0 && r.status == 503);
    CHECKF(strcmp(body_str(&r, "status", NULL), "loading") == 0, "health while loading: %s", r.text);

    /* a client that says nothing holds nobody up, and is dropped after client_timeout_s */
    int silent = connect_to(port);
    CHECK(silent >= 0);
    double t0 = now_s();
    CHECK(http_get(port, "/v1/chat/completions", &r) == 0);
    check_503(&r, "beside a silent client");
    CHECKF(now_s() - t0 < 0.5, "answer took %.2f s beside a silent client", now_s() - t0);
    /* A client that sends a whole body before reading (as HTTP clients do) can send it all and then read the
     * answer: the supervisor answers after the head, then reads and drops the body instead of resetting. */
    enum { BODY = 4 << 20 };
    char *big = malloc(BODY + 256);
    int hn = snprintf(big, 256, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                      "application/json\r\nContent-Length: %d\r\n\r\n", BODY);
    memset(big + hn, 'x', BODY);
    CHECK(http_raw(port, big, (size_t)hn + BODY, &r) == 0);
    CHECKF(r.sent_all, "the request body could not be sent whole");
    check_503(&r, "POST with a body");
    free(big);
    CHECKF(closed_by_peer(silent, 3.0), "the silent client was not dropped");
    close(silent);

    /* ready: the child answers */
    touch("gate");
    CHECK(wait_events(L, "child_ready", 1, 5));
    /* every one from the child: the supervisor has stopped accepting (were it still polling the socket, it would
     * win some of these) */
    int n200 = 0;
    for (int i = 0; i < 40; i++)
        n200 += http_get(port, "/v1/models", &r) == 0 && r.status == 200 && strstr(r.text, "child");
    CHECKF(n200 == 40, "after ready: %d of 40 answers from the child", n200);
    long pid1 = ev_int(L, "child_started", 0, "pid");
    char *pidtxt = read_text(in_dir(p, sizeof p, "child.pid"));
    CHECKF(pid1 > 0 && pidtxt && atol(pidtxt) == pid1, "child pid: log %ld, file %s", pid1, pidtxt ? pidtxt : "-");
    free(pidtxt);
    char *sigstate = read_text(in_dir(p, sizeof p, "sigstate"));
    CHECKF(sigstate && strcmp(sigstate, "0") == 0, "the child inherited %s odd signal settings",
           sigstate ? sigstate : "(unknown)");
    free(sigstate);

    /* SIGKILL the child: 503 again, logged with the signal, then a new child */
    unlink(in_dir(p, sizeof p, "gate"));
    CHECK(pid1 > 0 && kill((pid_t)pid1, SIGKILL) == 0);
    CHECK(wait_events(L, "child_exited", 1, 5));
    json_t *hold;
    {
        json_t *all = events(L, "child_exited"), *ex = json_array_get(all, 0);
        CHECKF(json_integer_value(json_object_get(ex, "pid")) == pid1, "child_exited pid");
        CHECKF(strcmp(str_of(json_object_get(ex, "signal")), "SIGKILL") == 0, "signal: %s",
               str_of(json_object_get(ex, "signal")));
        CHECK(json_integer_value(json_object_get(ex, "signo")) == SIGKILL);
        CHECK(json_is_false(json_object_get(ex, "core_dumped")));
        CHECK(json_is_true(json_object_get(ex, "was_ready")));
        CHECK(json_is_string(json_object_get(ex, "hint"))); /* not killed by the supervisor: maybe the OOM killer */
        json_decref(all);
    }
    CHECK(http_get(port, "/v1/completions", &r) == 0);
    check_503(&r, "after the child died");
    CHECK(http_get(port, "/health", &r) == 0 && r.status == 503);
    snprintf(buf, sizeof buf, "%s", body_str(&r, "status", NULL));
    CHECKF(strcmp(buf, "restarting") == 0 || strcmp(buf, "loading") == 0, "health after the death: %s", buf);
    CHECK(wait_events(L, "restarting", 1, 5));
    json_t *v = ev_get(L, "restarting", 0, "backoff_s", &hold);
    CHECKF(json_is_number(v) && json_number_value(v) == 0.3, "first backoff: %g", json_number_value(v));
    json_decref(hold);
    CHECK(wait_events(L, "child_started", 2, 5));
    long pid2 = ev_int(L, "child_started", 1, "pid");
    CHECKF(pid2 > 0 && pid2 != pid1, "new child %ld (old %ld)", pid2, pid1);
    CHECK(http_get(port, "/health", &r) == 0 && r.status == 503);
    CHECKF(strcmp(body_str(&r, "status", NULL), "loading") == 0, "health of the new child: %s", r.text);
    touch("gate");
    CHECK(wait_events(L, "child_ready", 2, 5));
    CHECK(http_get(port, "/v1/models", &r) == 0);
    CHECKF(r.status == 200 && strstr(r.text, "child"), "after the restart: %d %s", r.status, r.text);

    /* SIGHUP: the child drains and a new one takes over the same socket at once */
    CHECK(kill(sp, SIGHUP) == 0);
    CHECK(wait_events(L, "child_ready", 3, 5));
    CHECK(ev_int(L, "child_exited", 1, "status") == 0);
    snprintf(buf, sizeof buf, "term.%ld", pid2);
    CHECKF(exists(in_dir(p, sizeof p, buf)), "child %ld got no SIGTERM on reload", pid2);
    CHECK(http_get(port, "/v1/models", &r) == 0);
    CHECKF(r.status == 200 && strstr(r.text, "child"), "after the reload: %d %s", r.status, r.text);
    long pid3 = ev_int(L, "child_started", 2, "pid");

    /* a child that was up longer than backoff_reset_s: its death restarts after the initial delay again, not 0.6 s */
    sleep_s(0.3);
    CHECK(pid3 > 0 && kill((pid_t)pid3, SIGKILL) == 0);
    CHECK(wait_events(L, "restarting", 3, 5));
    v = ev_get(L, "restarting", 2, "backoff_s", &hold);
    CHECKF(json_is_number(v) && json_number_value(v) == 0.3, "backoff after a long run: %g", json_number_value(v));
    json_decref(hold);
    CHECK(wait_events(L, "child_ready", 4, 5));
    CHECK(http_get(port, "/v1/models", &r) == 0);
    CHECKF(r.status == 200 && strstr(r.text, "child"), "after the second restart: %d %s", r.status, r.text);
    long pid4 = ev_int(L, "child_started", 3, "pid");

    /* SIGTERM: drained, in time, and nothing left behind */
    double took = -1;
    CHECK(kill(sp, SIGTERM) == 0);
    int rc = wait_exit(sp, 10, &took);
    CHECKF(rc == 0, "supervisor exit %d", rc);
    CHECKF(took >= 0 && took < 2.0, "stop took %.2f s (grace 3 s; the child drains at once)", took);
    snprintf(buf, sizeof buf, "term.%ld", pid4);
    CHECKF(exists(in_dir(p, sizeof p, buf)), "child %ld got no SIGTERM on stop", pid4);
    CHECK(ev_int(L, "child_exited", 3, "status") == 0);
    CHECK(wait_events(L, "draining", 1, 0));
    v = ev_get(L, "draining", 0, "signal", &hold);
    CHECK(json_is_string(v) && strcmp(json_string_value(v), "SIGTERM") == 0);
    json_decref(hold);
    v = ev_get(L, "stopped", 0, "killed", &hold);
    CHECK(json_is_false(v));
    json_decref(hold);
    CHECKF(pid4 > 0 && kill((pid_t)pid4, 0) != 0 && errno == ESRCH, "child %ld still exists", pid4);
    int fd = connect_to(port);
    CHECKF(fd < 0, "something still listens on port %d", port);
    if (fd >= 0)
        close(fd);
}

/* A child that shuts the shared socket down as it goes (libmicrohttpd without MHD_USE_ITC does): the supervisor
 * listens again on the same port, so the next child serves; on a port-0 socket (which would move) it gives up. */
static void test_relisten(bool fixed_port)
{
    char p[128];
    const char *L = "relisten.log";
    int port, lfd = new_listener(&port);
    if (fixed_port) { /* bound to a port by number, as `lilac serve --port N` does */
        close(lfd);
        lilac_error err;
        CHECKF(sup_listen("127.0.0.1", port, &lfd, &err) == LILAC_OK, "%s", err.msg);
    }
    touch("gate");
    unlink(in_dir(p, sizeof p, "result"));
    fake f = {.mode = FAKE_SERVE, .sloppy = true};
    sup_opts o = {.listen_fd = lfd, .child_main = fake_main, .user = &f};
    pid_t sp = start_supervisor(&o, L);
    close(lfd);
    CHECK(wait_events(L, "child_ready", 1, 5));
    resp r;
    CHECK(http_get(port, "/v1/models", &r) == 0 && r.status == 200);
    CHECK(kill(sp, SIGHUP) == 0);
    if (fixed_port) {
        CHECK(wait_events(L, "relistened", 1, 5));
        CHECK(wait_events(L, "child_ready", 2, 5));
        CHECK(http_get(port, "/v1/models", &r) == 0);
        CHECKF(r.status == 200 && strstr(r.text, "child"), "after the relisten: %d %s", r.status, r.text);
        CHECK(kill(sp, SIGTERM) == 0);
        CHECK(wait_exit(sp, 10, NULL) == 0);
    } else {
        int rc = wait_exit(sp, 10, NULL);
        CHECKF(rc == 10 + LILAC_E_IO, "port 0, socket shut down: exit %d", rc);
        char *msg = read_text(in_dir(p, sizeof p, "result"));
        CHECKF(msg && strstr(msg, "shut the listening socket"), "port 0: %s", msg ? msg : "(none)");
        free(msg);
        CHECK(wait_events(L, "listen_lost", 1, 0));
    }
}

/* A child that ignores SIGTERM: killed when the grace runs out, or at a second signal. */
static void test_stubborn(bool second_signal)
{
    const char *L = "stubborn.log";
    int port, lfd = new_listener(&port);
    fake f = {.mode = FAKE_STUBBORN};
    sup_opts o = {.listen_fd = lfd, .child_main = fake_main, .user = &f, .grace_s = second_signal ? 20 : 0.5};
    pid_t sp = start_supervisor(&o, L);
    close(lfd);
    CHECK(wait_events(L, "child_ready", 1, 5));
    double took = -1;
    CHECK(kill(sp, SIGTERM) == 0);
    if (second_signal) {
        sleep_s(0.2);
        CHECK(kill(sp, SIGINT) == 0);
    }
    int rc = wait_exit(sp, 10, &took);
    CHECKF(rc == 0, "supervisor exit %d", rc);
    if (second_signal)
        CHECKF(took < 2.0, "second signal: stop took %.2f s", took);
    else
        CHECKF(took >= 0.45 && took < 2.5, "grace 0.5 s: stop took %.2f s", took);
    json_t *hold, *v = ev_get(L, "child_exited", 0, "signal", &hold);
    CHECKF(json_is_string(v) && strcmp(json_string_value(v), "SIGKILL") == 0, "child_exited signal");
    json_decref(hold);
    v = ev_get(L, "child_exited", 0, "hint", &hold);
    CHECK(v == NULL); /* the supervisor's own SIGKILL is not blamed on the OOM killer */
    json_decref(hold);
    v = ev_get(L, "killing", 0, "reason", &hold);
    CHECKF(json_is_string(v) && strcmp(json_string_value(v), second_signal ? "second signal" : "grace ran out") == 0,
           "killing reason");
    json_decref(hold);
    v = ev_get(L, "stopped", 0, "killed", &hold);
    CHECK(json_is_true(v));
    json_decref(hold);
}

/* A child that dies at once: restarted after 0.1, 0.2, 0.4, 0.4 s (capped), as the timestamps show. */
static void test_backoff(void)
{
    const char *L = "crash.log";
    int port, lfd = new_listener(&port);
    fake f = {.mode = FAKE_CRASH, .exit_status = 3};
    sup_opts o = {.listen_fd = lfd, .child_main = fake_main, .user = &f, .backoff_initial_s = 0.1,
                  .backoff_max_s = 0.4};
    pid_t sp = start_supervisor(&o, L);
    close(lfd);
    CHECK(wait_events(L, "child_exited", 5, 10));
    resp r;
    CHECK(http_get(port, "/health", &r) == 0 && r.status == 503); /* still answering between deaths */
    CHECK(kill(sp, SIGTERM) == 0);
    CHECK(wait_exit(sp, 10, NULL) == 0);
    json_t *st = events(L, "child_started"), *ex = events(L, "child_exited"), *rs = events(L, "restarting");
    const double want[4] = {0.1, 0.2, 0.4, 0.4};
    double gap[4] = {0};
    for (size_t i = 0; i < 4; i++) {
        json_t *e = json_array_get(ex, i), *s = json_array_get(st, i + 1), *b = json_array_get(rs, i);
        CHECKF(json_integer_value(json_object_get(e, "status")) == 3, "exit %zu: status", i);
        CHECKF(json_number_value(json_object_get(b, "backoff_s")) == want[i], "restart %zu: backoff_s %g, want %g", i,
               json_number_value(json_object_get(b, "backoff_s")), want[i]);
        gap[i] = json_number_value(json_object_get(s, "ts")) - json_number_value(json_object_get(e, "ts"));
        CHECKF(gap[i] >= want[i] - 0.003 && gap[i] < want[i] + 0.5, "restart %zu came %.3f s after the death, "
               "want %.1f", i, gap[i], want[i]);
    }
    CHECKF(gap[0] < gap[1] && gap[1] < gap[2], "gaps do not grow: %.3f %.3f %.3f", gap[0], gap[1], gap[2]);
    json_decref(st);
    json_decref(ex);
    json_decref(rs);
}

/* no_restart: sup_run returns when the child does, saying how. */
static void test_no_restart(int status)
{
    char p[128];
    int port, lfd = new_listener(&port);
    fake f = {.mode = FAKE_CRASH, .exit_status = status};
    sup_opts o = {.listen_fd = lfd, .child_main = fake_main, .user = &f, .no_restart = true};
    unlink(in_dir(p, sizeof p, "result"));
    pid_t sp = start_supervisor(&o, "once.log");
    close(lfd);
    int rc = wait_exit(sp, 10, NULL);
    char *msg = read_text(in_dir(p, sizeof p, "result"));
    if (status == 0) {
        CHECKF(rc == 0 && !msg, "no_restart, status 0: exit %d, %s", rc, msg ? msg : "");
    } else {
        CHECKF(rc == 10 + LILAC_E_INTERNAL, "no_restart, status %d: exit %d", status, rc);
        CHECKF(msg && strstr(msg, "exited with status 7"), "no_restart message: %s", msg ? msg : "(none)");
    }
    free(msg);
    CHECK(wait_events("once.log", "child_started", 1, 0) && !wait_events("once.log", "child_started", 2, 0));
}

static void test_listen(void)
{
    lilac_error err;
    int fd = -1, fd2 = -1, port;
    CHECK(sup_listen("127.0.0.1", 0, &fd, &err) == LILAC_OK);
    port = sup_bound_port(fd);
    CHECKF(port > 0, "bound port %d", port);
    char where[64];
    snprintf(where, sizeof where, "127.0.0.1:%d", port);
    CHECK(sup_listen("127.0.0.1", port, &fd2, &err) == LILAC_E_IO && fd2 == -1);
    CHECKF(strstr(err.msg, where) && strstr(err.msg, "already in use"), "in use: %s", err.msg);
    close(fd);
    CHECK(sup_listen("localhost", 0, &fd, &err) == LILAC_OK && sup_bound_port(fd) > 0);
    close(fd);
    const char *v6[] = {"::1", "[::1]"};
    for (int i = 0; i < 2; i++) { /* containers without IPv6 fail, but must say where */
        if (sup_listen(v6[i], 0, &fd, &err) == LILAC_OK) {
            CHECK(sup_bound_port(fd) > 0);
            close(fd);
        } else {
            CHECKF(strstr(err.msg, "[::1]:0") != NULL, "IPv6: %s", err.msg);
        }
    }
    CHECK(sup_listen("example.com", 8080, &fd, &err) == LILAC_E_ARG);
    CHECKF(strstr(err.msg, "example.com") && strstr(err.msg, "not an IP address"), "name: %s", err.msg);
    CHECK(sup_listen("127.0.0.1", 70000, &fd, &err) == LILAC_E_ARG);
    CHECK(sup_listen("", 80, &fd, &err) == LILAC_E_ARG);
    if (sup_listen("127.0.0.1", 1, &fd, &err) == LILAC_OK) /* root, or unprivileged low ports allowed */
        close(fd);
    else
        CHECKF(strstr(err.msg, "127.0.0.1:1") && strstr(err.msg, "permission denied"), "port 1: %s", err.msg);

    /* sup_run refuses what cannot work */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    fake f = {.mode = FAKE_CRASH};
    sup_opts o = {.listen_fd = s, .child_main = fake_main, .user = &f};
    CHECK(sup_run(&o, &err) == LILAC_E_ARG && strstr(err.msg, "not a listening socket"));
    close(s);
    int lfd = new_listener(&port);
    o.listen_fd = lfd;
    o.child_main = NULL;
    CHECK(sup_run(&o, &err) == LILAC_E_ARG && strstr(err.msg, "child_main"));
    o.child_main = fake_main;
    o.grace_s = -1;
    CHECK(sup_run(&o, &err) == LILAC_E_ARG);
    close(lfd);
    CHECK(sup_notify_ready(-1) == LILAC_OK);
}

static void rm_dir(const char *dir)
{
    DIR *d = opendir(dir);
    char p[512];
    for (struct dirent *e; d && (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    if (d)
        closedir(d);
    rmdir(dir);
}

int main(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/lilac-sup-XXXXXX");
    if (!mkdtemp(g_dir))
        SKIP("cannot make a temporary directory");
    for (int i = 0; i < 4; i++) { /* SIGINT is ignored when run in the background by a shell, for one */
        struct sigaction cur;
        sigaction(g_sigs[i], NULL, &cur);
        g_disp[i] = cur.sa_handler;
    }
    sigprocmask(SIG_SETMASK, NULL, &g_mask);
    double t0 = now_s();
    test_listen();
    test_lifecycle();
    test_relisten(true);
    test_relisten(false);
    test_stubborn(false);
    test_stubborn(true);
    test_backoff();
    test_no_restart(7);
    test_no_restart(0);
    printf("%.1f s\n", now_s() - t0);
    rm_dir(g_dir);
    TEST_END();
}
