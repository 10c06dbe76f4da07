/* supervise: the parent process of `lilac serve --supervise` (see supervise.h).
 *
 * One poll loop, one thread. Signals reach it through a self-pipe (the handler writes the signal number), the child's
 * readiness through a socketpair, and while no child is ready the parent's own 503 clients through their sockets,
 * all non-blocking with deadlines, so neither a silent client nor a stuck child can hold the loop. */
#include "server/supervise.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h> /* PR_SET_PDEATHSIG: the child drains if the supervisor is killed outright */
#endif

#include "util/err.h"

/* ---- listening --------------------------------------------------------------------------------------------------- */

static void set_cloexec(int fd)
{
    int f = fcntl(fd, F_GETFD);
    if (f >= 0)
        fcntl(fd, F_SETFD, f | FD_CLOEXEC);
}

static int set_nonblock(int fd)
{
    int f = fcntl(fd, F_GETFL);
    return f < 0 ? -1 : fcntl(fd, F_SETFL, f | O_NONBLOCK);
}

lilac_status sup_listen(const char *host, int port, int *fd_out, lilac_error *err)
{
    if (!fd_out)
        return lilac_fail(err, LILAC_E_ARG, "sup_listen: no place for the socket");
    *fd_out = -1;
    if (!host || !*host)
        return lilac_fail(err, LILAC_E_ARG, "no host to listen on");
    if (port < 0 || port > 65535)
        return lilac_fail(err, LILAC_E_ARG, "port %d: not in 0..65535", port);

    /* Literals only: a name lookup could block or pick an address the user did not mean. */
    char lit[64];
    const char *h = host;
    size_t n = strlen(host);
    if (strcmp(host, "localhost") == 0) {
        h = "127.0.0.1";
    } else if (n > 2 && host[0] == '[' && host[n - 1] == ']' && n - 2 < sizeof lit) {
        memcpy(lit, host + 1, n - 2);
        lit[n - 2] = 0;
        h = lit;
    }
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t len;
    int family;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, h, &a4->sin_addr) == 1) {
        family = a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        len = sizeof *a4;
    } else if (inet_pton(AF_INET6, h, &a6->sin6_addr) == 1) {
        family = a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        len = sizeof *a6;
    } else {
        return lilac_fail(err, LILAC_E_ARG, "%s: not an IP address (give an IPv4 or IPv6 literal, or localhost)",
                          host);
    }
    char where[128];
    snprintf(where, sizeof where, family == AF_INET6 ? "[%s]:%d" : "%s:%d", h, port);

    int fd = socket(family, SOCK_STREAM, 0);
    if (fd < 0)
        return lilac_fail(err, LILAC_E_IO, "cannot listen on %s: socket: %s", where, strerror(errno));
    set_cloexec(fd);
    int one = 1;
    /* a restarted server must not wait out TIME_WAIT connections of the previous one */
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) {
        int e = errno;
        close(fd);
        return lilac_fail(err, LILAC_E_IO, "cannot listen on %s: SO_REUSEADDR: %s", where, strerror(e));
    }
    if (bind(fd, (struct sockaddr *)&ss, len) != 0) {
        int e = errno;
        close(fd);
        if (e == EADDRINUSE)
            return lilac_fail(err, LILAC_E_IO, "cannot listen on %s: address already in use (another server there? "
                              "pick another port)", where);
        if (e == EACCES || e == EPERM)
            return lilac_fail(err, LILAC_E_IO, "cannot listen on %s: permission denied (ports below 1024 need "
                              "privileges)", where);
        if (e == EADDRNOTAVAIL)
            return lilac_fail(err, LILAC_E_IO, "cannot listen on %s: no such local address", where);
        return lilac_fail(err, LILAC_E_IO, "cannot listen on %s: %s", where, strerror(e));
    }
    if (listen(fd, SOMAXCONN) != 0) {
        int e = errno;
        close(fd);
        return lilac_fail(err, LILAC_E_IO, "cannot listen on %s: %s", where, strerror(e));
    }
    *fd_out = fd;
    return LILAC_OK;
}

int sup_bound_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return -1;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return -1;
}

/* ---- the child's side -------------------------------------------------------------------------------------------- */

lilac_status sup_notify_ready(int ready_fd)
{
    if (ready_fd < 0)
        return LILAC_OK;
    unsigned char b = 'R';
    ssize_t n;
    do
        n = send(ready_fd, &b, 1, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n != 1)
        return LILAC_E_IO;
    /* The parent answers once it has stopped accepting: from here on only the child accepts. */
    do
        n = recv(ready_fd, &b, 1, 0);
    while (n < 0 && errno == EINTR);
    return n == 1 ? LILAC_OK : LILAC_E_IO;
}

/* ---- state ------------------------------------------------------------------------------------------------------- */

enum { SUP_MAX_CLIENTS = 64, SUP_HEAD_MAX = 8192, SUP_OUT_MAX = 1024 };
enum { CL_FREE, CL_READ, CL_WRITE, CL_LINGER };

/* After answering, read and drop what the client still sends (a request body: clients send it all before they read)
 * for up to this long or this much before closing: closing with unread input makes the kernel send a reset, and the
 * client's send fails before it has read the answer. */
#define SUP_LINGER_S 2.0
#define SUP_LINGER_MAX ((size_t)64 << 20)
/* After SIGKILL, how long to wait for the child to be reaped (a process stuck in the kernel may take a while). */
#define SUP_REAP_WAIT_S 5.0

typedef struct sup_client {
    int fd, phase;
    double deadline;
    size_t n_in, n_out, off_out, discarded;
    char in[SUP_HEAD_MAX];
    char out[SUP_OUT_MAX];
} sup_client;

static const int sup_sigs[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP};
#define SUP_NSIGS ((int)(sizeof sup_sigs / sizeof sup_sigs[0]))

typedef struct sup_ctx {
    sup_opts o;            /* defaults filled in */
    int sig_r, sig_w;      /* self-pipe */
    pid_t pid;             /* the child, 0 when none */
    pid_t self;            /* the supervisor */
    int ready_fd;          /* our end of the child's ready socket, -1 once used */
    bool ready;
    double started_at, ready_at, next_start; /* monotonic seconds */
    double backoff;        /* the delay before the next quick restart */
    int restarts;
    bool stopping, reloading, sent_kill, done;
    int stop_signal;       /* 0: stopped because the child exited (no_restart) */
    double kill_at;        /* SIGKILL the child then; 0: not scheduled */
    double term_at;        /* when it was sent SIGTERM */
    double accept_pause_until;
    lilac_status outcome;
    char outcome_msg[256];
    sup_client *cl;
    int n_cl;
    int port;              /* the listening socket's, to check it after a relisten */
    struct sigaction old[SUP_NSIGS];
    sigset_t mask0;
} sup_ctx;

static volatile sig_atomic_t sup_sig_fd = -1;

static void sup_on_signal(int signo)
{
    int saved = errno;
    int fd = sup_sig_fd;
    if (fd >= 0) {
        unsigned char b = (unsigned char)signo;
        ssize_t r = write(fd, &b, 1); /* a full pipe already holds a wake-up */
        (void)r;
    }
    errno = saved;
}

static double mono_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double wall_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double ms3(double s) { return round(s * 1000.0) / 1000.0; }

static const char *sig_name(int s, char *buf, size_t size)
{
    static const struct { int no; const char *name; } names[] = {
        {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
        {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
        {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
        {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGCHLD, "SIGCHLD"},
        {SIGCONT, "SIGCONT"}, {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"}, {SIGTTIN, "SIGTTIN"},
        {SIGTTOU, "SIGTTOU"}, {SIGURG, "SIGURG"},   {SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"},
        {SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGSYS, "SIGSYS"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].no == s)
            return names[i].name;
    snprintf(buf, size, "SIG%d", s);
    return buf;
}

/* ---- events ------------------------------------------------------------------------------------------------------ */

static json_t *ev_new(const char *event)
{
    return json_pack("{s:f, s:s}", "ts", ms3(wall_now()), "event", event);
}

static void ev_emit(sup_ctx *c, json_t *ev)
{
    if (ev && c->o.log) {
        /* 13 significant digits: milliseconds on a Unix time */
        char *s = json_dumps(ev, JSON_COMPACT | JSON_REAL_PRECISION(13));
        if (s)
            c->o.log(c->o.log_user, s);
        free(s);
    }
    json_decref(ev);
}

static void ev_pid(json_t *ev, pid_t pid)
{
    if (pid > 0)
        json_object_set_new(ev, "pid", json_integer(pid));
}

/* ---- the parent's 503 clients ------------------------------------------------------------------------------------ */

static void client_drop(sup_ctx *c, sup_client *k)
{
    close(k->fd);
    k->fd = -1;
    k->phase = CL_FREE;
    c->n_cl--;
}

static bool head_complete(const char *s, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++)
        if (s[i] == '\n' && (s[i + 1] == '\n' || (s[i + 1] == '\r' && i + 2 < n && s[i + 2] == '\n')))
            return true;
    return false;
}

/* The answer to whatever the head asked: 503, saying why and when to come back. */
static void client_reply(sup_ctx *c, sup_client *k, double now)
{
    /* the request line: METHOD SP TARGET SP VERSION */
    const char *s = k->in, *end = k->in + k->n_in;
    const char *sp1 = memchr(s, ' ', (size_t)(end - s));
    const char *t = sp1 ? sp1 + 1 : end;
    const char *t_end = t;
    while (t_end < end && *t_end != ' ' && *t_end != '\r' && *t_end != '\n')
        t_end++;
    size_t tn = (size_t)(t_end - t);
    bool is_head = sp1 && sp1 - s == 4 && memcmp(s, "HEAD", 4) == 0;
    bool health = tn >= 7 && memcmp(t, "/health", 7) == 0 && (tn == 7 || t[7] == '?');

    const char *state = c->stopping ? "stopping" : c->pid ? "loading" : "restarting";
    int retry = c->o.retry_after_s;
    if (!c->pid && !c->stopping && c->next_start - now > retry)
        retry = (int)ceil(c->next_start - now);
    char body[512];
    if (health)
        snprintf(body, sizeof body, "{\"status\":\"%s\"}\n", state);
    else
        snprintf(body, sizeof body,
                 "{\"error\":{\"message\":\"%s\",\"type\":\"server_error\",\"param\":null,"
                 "\"code\":\"engine_unavailable\"}}\n",
                 c->stopping ? "the server is shutting down"
                 : c->pid    ? "the engine is loading; retry shortly"
                             : "the engine is restarting; retry shortly");
    size_t blen = strlen(body);
    int n = snprintf(k->out, sizeof k->out,
                     "HTTP/1.1 503 Service Unavailable\r\n"
                     "Content-Type: application/json\r\n"
                     "Content-Length: %zu\r\n"
                     "Retry-After: %d\r\n"
                     "Cache-Control: no-store\r\n"
                     "Connection: close\r\n"
                     "\r\n%s",
                     blen, retry, is_head ? "" : body);
    k->n_out = n < 0 ? 0 : (size_t)n < sizeof k->out ? (size_t)n : sizeof k->out - 1;
    k->off_out = 0;
    k->phase = CL_WRITE;
    k->deadline = now + c->o.client_timeout_s;
}

static void client_io(sup_ctx *c, sup_client *k, double now)
{
    if (k->phase == CL_READ) {
        ssize_t n = recv(k->fd, k->in + k->n_in, sizeof k->in - k->n_in, 0);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return;
        if (n <= 0) { /* gone before finishing its request */
            client_drop(c, k);
            return;
        }
        k->n_in += (size_t)n;
        /* a head over the cap is answered on what arrived: the request line is all that matters here */
        if (!head_complete(k->in, k->n_in) && k->n_in < sizeof k->in)
            return;
        client_reply(c, k, now);
    }
    if (k->phase == CL_WRITE) {
        ssize_t n = send(k->fd, k->out + k->off_out, k->n_out - k->off_out, MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return;
        if (n < 0) {
            client_drop(c, k);
            return;
        }
        k->off_out += (size_t)n;
        if (k->off_out < k->n_out)
            return;
        shutdown(k->fd, SHUT_WR);
        k->phase = CL_LINGER;
        k->deadline = now + SUP_LINGER_S;
        k->discarded = 0;
        return; /* read the rest when poll says there is some */
    }
    if (k->phase == CL_LINGER) {
        char buf[4096];
        for (;;) {
            ssize_t n = recv(k->fd, buf, sizeof buf, 0);
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
                return;
            if (n <= 0 || (k->discarded += (size_t)n) > SUP_LINGER_MAX) {
                client_drop(c, k);
                return;
            }
        }
    }
}

static void accept_one(sup_ctx *c, double now)
{
    int fd = accept(c->o.listen_fd, NULL, NULL);
    if (fd < 0) {
        /* out of descriptors or buffers, or not listening any more: the socket stays readable, so pause instead
         * of spinning */
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM || errno == EINVAL)
            c->accept_pause_until = now + 0.1;
        return; /* EAGAIN, ECONNABORTED, EINTR...: nothing to do */
    }
    set_cloexec(fd);
    set_nonblock(fd); /* this socket's own file description: the listening socket's flags are untouched */
    for (int i = 0; i < SUP_MAX_CLIENTS; i++) {
        sup_client *k = &c->cl[i];
        if (k->phase == CL_FREE) {
            k->fd = fd;
            k->phase = CL_READ;
            k->n_in = 0;
            k->deadline = now + c->o.client_timeout_s;
            c->n_cl++;
            return;
        }
    }
    close(fd); /* not reached: we only accept with a free slot */
}

/* ---- the child --------------------------------------------------------------------------------------------------- */

static _Noreturn void child_after_fork(sup_ctx *c, int ready_fd, int parent_end)
{
    /* Nothing of the supervisor's machinery stays: its descriptors, its handlers, its mask. */
    sup_sig_fd = -1;
    close(parent_end);
    close(c->sig_r);
    close(c->sig_w);
    for (int i = 0; i < SUP_MAX_CLIENTS; i++)
        if (c->cl[i].phase != CL_FREE)
            close(c->cl[i].fd);
    for (int i = 0; i < SUP_NSIGS; i++)
        sigaction(sup_sigs[i], &c->old[i], NULL);
#ifdef __linux__
    /* If the supervisor dies without forwarding SIGTERM (SIGKILL, OOM), the engine still drains and goes away
     * instead of serving on, orphaned. The check after covers a supervisor that died before the prctl. */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != c->self)
        _exit(1);
#endif
    sigprocmask(SIG_SETMASK, &c->mask0, NULL);
    int rc = c->o.child_main(c->o.user, c->o.listen_fd, ready_fd);
    fflush(NULL); /* _exit does not flush stdio */
    _exit(rc & 0xff);
}

static void schedule_restart(sup_ctx *c, double now, bool quick)
{
    if (!quick)
        c->backoff = c->o.backoff_initial_s;
    double delay = c->backoff;
    c->backoff = fmin(c->backoff * 2, c->o.backoff_max_s);
    c->next_start = now + delay;
    c->restarts++;
    json_t *ev = ev_new("restarting");
    json_object_set_new(ev, "backoff_s", json_real(ms3(delay)));
    json_object_set_new(ev, "restarts", json_integer(c->restarts));
    ev_emit(c, ev);
}

static void spawn(sup_ctx *c, double now)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
        json_t *ev = ev_new("spawn_failed");
        json_object_set_new(ev, "error", json_sprintf("socketpair: %s", strerror(errno)));
        ev_emit(c, ev);
        schedule_restart(c, now, true);
        return;
    }
    set_cloexec(sv[0]);
    set_cloexec(sv[1]);
    /* Signals wait until the child has put its own handlers back: a handler run in the child before that would
     * write to our self-pipe. */
    sigset_t block, prev;
    sigemptyset(&block);
    for (int i = 0; i < SUP_NSIGS; i++)
        sigaddset(&block, sup_sigs[i]);
    sigprocmask(SIG_BLOCK, &block, &prev);
    fflush(NULL); /* else the child would inherit, and later write again, whatever stdio holds */
    pid_t pid = fork();
    if (pid == 0)
        child_after_fork(c, sv[1], sv[0]);
    int e = errno;
    sigprocmask(SIG_SETMASK, &prev, NULL);
    close(sv[1]);
    if (pid < 0) {
        close(sv[0]);
        json_t *ev = ev_new("spawn_failed");
        json_object_set_new(ev, "error", json_sprintf("fork: %s", strerror(e)));
        ev_emit(c, ev);
        schedule_restart(c, now, true);
        return;
    }
    c->pid = pid;
    c->ready_fd = sv[0];
    c->ready = false;
    c->sent_kill = false;
    c->kill_at = 0;
    c->started_at = now;
    json_t *ev = ev_new("child_started");
    ev_pid(ev, pid);
    json_object_set_new(ev, "restarts", json_integer(c->restarts));
    ev_emit(c, ev);
}

static void on_ready_fd(sup_ctx *c, double now)
{
    unsigned char b;
    ssize_t n = recv(c->ready_fd, &b, 1, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    if (n == 1) {
        /* From now on the loop no longer polls the listening socket; only then may the child accept. */
        c->ready = true;
        c->ready_at = now;
        json_t *ev = ev_new("child_ready");
        ev_pid(ev, c->pid);
        json_object_set_new(ev, "startup_s", json_real(ms3(now - c->started_at)));
        ev_emit(c, ev);
        b = 'A';
        ssize_t w = send(c->ready_fd, &b, 1, MSG_NOSIGNAL); /* fails only if the child is gone: waitpid tells */
        (void)w;
    }
    /* Used, or closed without a word: either way nothing more comes, and waitpid reports the child's fate. */
    close(c->ready_fd);
    c->ready_fd = -1;
}

/* A child can shut the shared socket down, which stops it listening in every process: libmicrohttpd does so in
 * MHD_stop_daemon when started without MHD_USE_ITC (and not quiesced first). Listen again on the same port, or give
 * up: false then, with the outcome set. */
static bool ensure_listening(sup_ctx *c)
{
    int acc = 0;
    socklen_t len = sizeof acc;
    if (getsockopt(c->o.listen_fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &len) == 0 && acc)
        return true;
    bool listening = listen(c->o.listen_fd, SOMAXCONN) == 0;
    int e = errno;
    int port = sup_bound_port(c->o.listen_fd);
    bool ok = listening && port == c->port; /* one bound to port 0 gets a new port, where nobody would look */
    json_t *ev = ev_new(ok ? "relistened" : "listen_lost");
    json_object_set_new(ev, "port", json_integer(c->port));
    json_object_set_new(ev, "hint", json_string("the engine shut the shared listening socket down: start "
                                                "libmicrohttpd with MHD_USE_ITC and MHD_quiesce_daemon it first"));
    ev_emit(c, ev);
    if (!ok) {
        c->stopping = c->done = true;
        c->outcome = LILAC_E_IO;
        if (!listening)
            snprintf(c->outcome_msg, sizeof c->outcome_msg, "the engine shut the listening socket (port %d) down, "
                     "and listening again failed: %s", c->port, strerror(e));
        else
            snprintf(c->outcome_msg, sizeof c->outcome_msg, "the engine shut the listening socket (port %d) down, "
                     "and listening again moved it to port %d", c->port, port);
    }
    return ok;
}

static void on_child_exit(sup_ctx *c, int st, bool known, double now)
{
    bool was_ready = c->ready;
    json_t *ev = ev_new("child_exited");
    ev_pid(ev, c->pid);
    char what[160], sbuf[16];
    if (!known) {
        snprintf(what, sizeof what, "the engine (pid %d) disappeared", (int)c->pid);
        json_object_set_new(ev, "status", json_null());
    } else if (WIFEXITED(st)) {
        json_object_set_new(ev, "status", json_integer(WEXITSTATUS(st)));
        snprintf(what, sizeof what, "the engine exited with status %d", WEXITSTATUS(st));
    } else {
        int s = WTERMSIG(st);
        const char *name = sig_name(s, sbuf, sizeof sbuf);
#ifdef WCOREDUMP
        bool core = WCOREDUMP(st);
#else
        bool core = (st & 0x80) != 0; /* WCOREDUMP is not POSIX; this is where Linux and the BSDs keep the bit */
#endif
        json_object_set_new(ev, "signal", json_string(name));
        json_object_set_new(ev, "signo", json_integer(s));
        json_object_set_new(ev, "core_dumped", json_boolean(core));
        if (s == SIGKILL && !c->sent_kill)
            json_object_set_new(ev, "hint", json_string("SIGKILL from outside the supervisor: often the kernel's "
                                                        "out-of-memory killer (see dmesg)"));
        snprintf(what, sizeof what, "the engine was killed by %s%s", name, core ? " (core dumped)" : "");
    }
    json_object_set_new(ev, "uptime_s", json_real(ms3(now - c->started_at)));
    json_object_set_new(ev, "was_ready", json_boolean(was_ready));
    ev_emit(c, ev);

    if (c->ready_fd >= 0)
        close(c->ready_fd);
    c->ready_fd = -1;
    c->ready = false;
    c->pid = 0;
    c->kill_at = 0;
    if (c->stopping)
        return;
    if (c->o.no_restart) {
        c->stopping = c->done = true;
        c->outcome = known && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? LILAC_OK : LILAC_E_INTERNAL;
        snprintf(c->outcome_msg, sizeof c->outcome_msg, "%s", what);
        return;
    }
    if (!ensure_listening(c))
        return;
    if (c->reloading) { /* asked for: no backoff, and the delay stays where it was */
        c->reloading = false;
        c->next_start = now;
        c->restarts++;
        json_t *r = ev_new("restarting");
        json_object_set_new(r, "backoff_s", json_real(0));
        json_object_set_new(r, "restarts", json_integer(c->restarts));
        json_object_set_new(r, "reason", json_string("reload"));
        ev_emit(c, r);
        return;
    }
    schedule_restart(c, now, !(was_ready && now - c->ready_at >= c->o.backoff_reset_s));
}

static void reap(sup_ctx *c, double now)
{
    if (!c->pid)
        return;
    int st = 0;
    pid_t r = waitpid(c->pid, &st, WNOHANG);
    if (r == c->pid)
        on_child_exit(c, st, true, now);
    else if (r < 0 && errno == ECHILD) /* reaped behind our back; it is gone all the same */
        on_child_exit(c, 0, false, now);
}

static void kill_child(sup_ctx *c, const char *why)
{
    json_t *ev = ev_new("killing");
    ev_pid(ev, c->pid);
    json_object_set_new(ev, "reason", json_string(why));
    json_object_set_new(ev, "after_s", json_real(ms3(mono_now() - c->term_at)));
    ev_emit(c, ev);
    kill(c->pid, SIGKILL);
    c->sent_kill = true;
    c->kill_at = mono_now(); /* from here SUP_REAP_WAIT_S counts */
}

static void begin_stop(sup_ctx *c, int signo, double now)
{
    char sbuf[16];
    if (c->stopping) { /* a second signal: no more patience */
        if (c->pid && !c->sent_kill)
            kill_child(c, "second signal");
        return;
    }
    c->stopping = true;
    c->stop_signal = signo;
    json_t *ev = ev_new("draining");
    json_object_set_new(ev, "signal", json_string(sig_name(signo, sbuf, sizeof sbuf)));
    ev_pid(ev, c->pid);
    json_object_set_new(ev, "grace_s", json_real(ms3(c->o.grace_s)));
    ev_emit(c, ev);
    if (c->pid && !c->sent_kill) {
        kill(c->pid, SIGTERM);
        if (!c->kill_at)
            c->term_at = now;
        double at = now + c->o.grace_s;
        if (!c->kill_at || at < c->kill_at) /* a reload's grace already running keeps its end */
            c->kill_at = at;
    }
}

static void begin_reload(sup_ctx *c, double now)
{
    if (c->stopping || c->reloading)
        return;
    json_t *ev = ev_new("reloading");
    ev_pid(ev, c->pid);
    ev_emit(c, ev);
    if (!c->pid) { /* waiting out a backoff: start now */
        c->next_start = now;
        return;
    }
    c->reloading = true;
    kill(c->pid, SIGTERM);
    c->term_at = now;
    c->kill_at = now + c->o.grace_s;
}

/* ---- the loop ---------------------------------------------------------------------------------------------------- */

static lilac_status check_opts(const sup_opts *in, sup_opts *o, lilac_error *err)
{
    if (!in)
        return lilac_fail(err, LILAC_E_ARG, "sup_run: no options");
    *o = *in;
    if (!o->child_main)
        return lilac_fail(err, LILAC_E_ARG, "sup_run: no child_main");
    int acc = 0;
    socklen_t len = sizeof acc;
    if (o->listen_fd < 0 || getsockopt(o->listen_fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &len) != 0 || !acc)
        return lilac_fail(err, LILAC_E_ARG, "sup_run: descriptor %d is not a listening socket", o->listen_fd);
    if (o->backoff_initial_s < 0 || o->backoff_max_s < 0 || o->backoff_reset_s < 0 || o->grace_s < 0 ||
        o->client_timeout_s < 0 || o->retry_after_s < 0)
        return lilac_fail(err, LILAC_E_ARG, "sup_run: negative backoff, grace, timeout or Retry-After");
    if (!o->backoff_initial_s)
        o->backoff_initial_s = 0.5;
    if (!o->backoff_max_s)
        o->backoff_max_s = 30;
    if (o->backoff_max_s < o->backoff_initial_s)
        o->backoff_max_s = o->backoff_initial_s;
    if (!o->backoff_reset_s)
        o->backoff_reset_s = 60;
    if (!o->grace_s)
        o->grace_s = 10;
    if (!o->client_timeout_s)
        o->client_timeout_s = 2;
    if (!o->retry_after_s)
        o->retry_after_s = 5;
    return LILAC_OK;
}

static lilac_status setup(sup_ctx *c, lilac_error *err)
{
    int p[2];
    if (pipe(p) != 0)
        return lilac_fail(err, LILAC_E_IO, "sup_run: pipe: %s", strerror(errno));
    c->sig_r = p[0];
    c->sig_w = p[1];
    for (int i = 0; i < 2; i++) {
        set_cloexec(p[i]);
        set_nonblock(p[i]); /* the handler must never block; the loop drains until empty */
    }
    sigprocmask(SIG_SETMASK, NULL, &c->mask0);
    sup_sig_fd = c->sig_w;
    for (int i = 0; i < SUP_NSIGS; i++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = sup_on_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = sup_sigs[i] == SIGCHLD ? SA_NOCLDSTOP : 0; /* no SA_RESTART: wake up, don't resume */
        if (sigaction(sup_sigs[i], &sa, &c->old[i]) != 0) {
            int e = errno;
            while (--i >= 0)
                sigaction(sup_sigs[i], &c->old[i], NULL);
            sup_sig_fd = -1;
            return lilac_fail(err, LILAC_E_INTERNAL, "sup_run: sigaction: %s", strerror(e));
        }
    }
    return LILAC_OK;
}

static void teardown(sup_ctx *c)
{
    for (int i = 0; i < SUP_MAX_CLIENTS; i++)
        if (c->cl[i].phase != CL_FREE)
            client_drop(c, &c->cl[i]);
    if (c->ready_fd >= 0)
        close(c->ready_fd);
    for (int i = 0; i < SUP_NSIGS; i++)
        sigaction(sup_sigs[i], &c->old[i], NULL);
    sup_sig_fd = -1;
    close(c->sig_r);
    close(c->sig_w);
    free(c->cl);
}

static void drain_signals(sup_ctx *c, double now)
{
    unsigned char buf[64];
    ssize_t n;
    while ((n = read(c->sig_r, buf, sizeof buf)) > 0)
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] == SIGTERM || buf[i] == SIGINT)
                begin_stop(c, buf[i], now);
            else if (buf[i] == SIGHUP)
                begin_reload(c, now);
            /* SIGCHLD: waitpid below, every turn anyway */
        }
}

lilac_status sup_run(const sup_opts *opts, lilac_error *err)
{
    sup_ctx ctx, *c = &ctx;
    memset(c, 0, sizeof *c);
    lilac_status st = check_opts(opts, &c->o, err);
    if (st != LILAC_OK)
        return st;
    if (sup_sig_fd != -1)
        return lilac_fail(err, LILAC_E_ARG, "sup_run: already running in this process");
    c->cl = calloc(SUP_MAX_CLIENTS, sizeof *c->cl);
    if (!c->cl)
        return lilac_fail(err, LILAC_E_NOMEM, "sup_run: out of memory");
    for (int i = 0; i < SUP_MAX_CLIENTS; i++)
        c->cl[i].fd = -1;
    c->ready_fd = -1;
    c->self = getpid();
    c->port = sup_bound_port(c->o.listen_fd);
    c->backoff = c->o.backoff_initial_s;
    c->next_start = mono_now();
    st = setup(c, err);
    if (st != LILAC_OK) {
        free(c->cl);
        return st;
    }

    struct pollfd pf[3 + SUP_MAX_CLIENTS];
    int slot_of[SUP_MAX_CLIENTS];
    for (;;) {
        double now = mono_now();
        if (!c->stopping && !c->pid && now >= c->next_start)
            spawn(c, now);
        if (c->pid && c->kill_at > 0 && !c->sent_kill && now >= c->kill_at)
            kill_child(c, c->stopping ? "grace ran out" : "reload grace ran out");
        bool unreaped = c->pid && c->sent_kill && now >= c->kill_at + SUP_REAP_WAIT_S;
        if (c->stopping && (!c->pid || unreaped) && c->n_cl == 0)
            break;

        int np = 0, i_ready = -1, i_listen = -1;
        pf[np++] = (struct pollfd){.fd = c->sig_r, .events = POLLIN};
        if (c->ready_fd >= 0) {
            i_ready = np;
            pf[np++] = (struct pollfd){.fd = c->ready_fd, .events = POLLIN};
        }
        double wake = now + 1.0; /* waitpid runs every turn: a lost wake-up costs a second at most */
        if (!c->ready && !c->stopping && c->n_cl < SUP_MAX_CLIENTS) {
            if (now >= c->accept_pause_until) {
                i_listen = np;
                pf[np++] = (struct pollfd){.fd = c->o.listen_fd, .events = POLLIN};
            } else {
                wake = fmin(wake, c->accept_pause_until);
            }
        }
        int i_cl = np;
        for (int i = 0; i < SUP_MAX_CLIENTS; i++) {
            sup_client *k = &c->cl[i];
            if (k->phase == CL_FREE)
                continue;
            slot_of[np - i_cl] = i;
            pf[np++] = (struct pollfd){.fd = k->fd, .events = k->phase == CL_WRITE ? POLLOUT : POLLIN};
            wake = fmin(wake, k->deadline);
        }
        if (!c->pid && !c->stopping)
            wake = fmin(wake, c->next_start);
        if (c->pid && c->kill_at > 0)
            wake = fmin(wake, c->sent_kill ? c->kill_at + SUP_REAP_WAIT_S : c->kill_at);
        int timeout_ms = wake <= now ? 0 : (int)ceil((wake - now) * 1000.0);

        for (int i = 0; i < np; i++)
            pf[i].revents = 0;
        if (poll(pf, (nfds_t)np, timeout_ms) < 0 && errno != EINTR && errno != EAGAIN) {
            struct timespec ts = {0, 100 * 1000 * 1000}; /* ENOMEM and such: pause, do not spin */
            nanosleep(&ts, NULL);
        }
        now = mono_now();
        if (pf[0].revents)
            drain_signals(c, now);
        if (i_ready >= 0 && pf[i_ready].revents && c->ready_fd >= 0)
            on_ready_fd(c, now);
        reap(c, now);
        for (int i = i_cl; i < np; i++) {
            sup_client *k = &c->cl[slot_of[i - i_cl]];
            if (pf[i].revents && k->phase != CL_FREE)
                client_io(c, k, now);
        }
        for (int i = 0; i < SUP_MAX_CLIENTS; i++) /* silent or slow: dropped, never waited for */
            if (c->cl[i].phase != CL_FREE && now >= c->cl[i].deadline)
                client_drop(c, &c->cl[i]);
        /* ready or stopping may have changed above: then the child owns the socket, or nobody does */
        if (i_listen >= 0 && (pf[i_listen].revents & POLLIN) && !c->ready && !c->stopping)
            accept_one(c, now);
    }

    json_t *ev = ev_new("stopped");
    char sbuf[16];
    if (c->stop_signal)
        json_object_set_new(ev, "signal", json_string(sig_name(c->stop_signal, sbuf, sizeof sbuf)));
    json_object_set_new(ev, "killed", json_boolean(c->sent_kill));
    if (c->pid) {
        ev_pid(ev, c->pid);
        json_object_set_new(ev, "unreaped", json_true());
    }
    if (c->done)
        json_object_set_new(ev, "reason", json_string(c->outcome_msg));
    ev_emit(c, ev);
    teardown(c);
    if (c->done && c->outcome != LILAC_OK)
        return lilac_fail(err, c->outcome, "%s", c->outcome_msg);
    return LILAC_OK;
}
