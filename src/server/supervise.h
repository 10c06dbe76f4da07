/* supervise: the parent process of `lilac serve --supervise`.
 *
 * The parent holds the listening socket and runs the engine in a forked child. While no child is ready (starting,
 * loading the model, or dead and waiting to be restarted) the parent itself accepts on the socket and answers every
 * request 503 with Retry-After, so clients see "try again" instead of "connection refused". Once the child says it is
 * ready, the parent stops accepting and the child accepts on the inherited socket: never both at once. A dead child
 * is logged (exit status or signal) and restarted after a backoff. SIGTERM/SIGINT drain: the child gets SIGTERM and
 * grace seconds to finish its requests, then SIGKILL. SIGHUP restarts the child the same way, at once.
 *
 * Events go to a log callback, one JSON object per line:
 *   {"ts":1718000000.123,"event":"child_started","pid":123,"restarts":0}
 *   {"ts":...,"event":"child_ready","pid":123,"startup_s":4.2}
 *   {"ts":...,"event":"child_exited","pid":123,"status":3,"uptime_s":9.1,"was_ready":true}
 *   {"ts":...,"event":"child_exited","pid":123,"signal":"SIGKILL","signo":9,"core_dumped":false,...,"hint":"..."}
 *   {"ts":...,"event":"restarting","backoff_s":0.5,"restarts":1}
 *   {"ts":...,"event":"spawn_failed","error":"fork: ..."}
 *   {"ts":...,"event":"reloading","pid":123}                       (SIGHUP)
 *   {"ts":...,"event":"draining","signal":"SIGTERM","pid":123,"grace_s":10.0}
 *   {"ts":...,"event":"killing","pid":123,"reason":"grace ran out","after_s":10.0}
 *   {"ts":...,"event":"relistened","port":8080,"hint":"..."}        (a child had shut the socket down)
 *   {"ts":...,"event":"listen_lost","port":8080,"hint":"..."}       (...and it could not be reopened: sup_run ends)
 *   {"ts":...,"event":"stopped","killed":false}
 * ts is Unix time in seconds; "pid" is absent where there is no child.
 *
 * One sup_run per process at a time (it owns SIGCHLD, SIGTERM, SIGINT and SIGHUP while it runs, and restores the
 * caller's handlers when it returns). Call it before starting any thread: it forks. */
#ifndef LILAC_SERVER_SUPERVISE_H
#define LILAC_SERVER_SUPERVISE_H

#include <stdbool.h>

#include "lilac.h"

/* A bound, listening TCP socket on host:port. host: an IPv4 or IPv6 literal ("127.0.0.1", "::1", "[::1]",
 * "0.0.0.0", "::") or "localhost" (taken as 127.0.0.1; no name lookups). port 0 picks a free port: see
 * sup_bound_port. The socket is blocking, SO_REUSEADDR, close-on-exec. */
lilac_status sup_listen(const char *host, int port, int *fd_out, lilac_error *err);

/* The local port of a bound socket, or -1. */
int sup_bound_port(int fd);

/* The engine, run in the forked child. listen_fd: the inherited listening socket; accept on it only after
 * sup_notify_ready has returned, and never shutdown() it (that stops it listening in every process; libmicrohttpd
 * does so in MHD_stop_daemon unless started with MHD_USE_ITC: use that flag, and MHD_quiesce_daemon to stop
 * accepting when draining). ready_fd: pass it to sup_notify_ready once the model is loaded. On SIGTERM the
 * child should stop accepting, finish its requests and return. The return value is the child's exit status (& 0xff).
 * Signal dispositions and the signal mask are the caller's of sup_run, as if sup_run had not been there. */
typedef int (*sup_child_fn)(void *user, int listen_fd, int ready_fd);

/* One JSON object, without a newline. */
typedef void (*sup_log_fn)(void *user, const char *json_line);

/* Zero in any number means its default, so `sup_opts o = {.listen_fd = fd, .child_main = f}` is a full setup. */
typedef struct sup_opts {
    int listen_fd;             /* from sup_listen; sup_run does not close it */
    sup_child_fn child_main;
    void *user;                /* for child_main */
    sup_log_fn log;            /* may be NULL: nothing is logged */
    void *log_user;
    double backoff_initial_s;  /* first restart delay (0.5); doubles per quick death... */
    double backoff_max_s;      /* ...up to this (30) */
    double backoff_reset_s;    /* a child that was ready this long resets the delay (60) */
    double grace_s;            /* SIGTERM to SIGKILL on stop and reload (10) */
    double client_timeout_s;   /* the parent's limit for reading a request head / sending the reply (2) */
    int retry_after_s;         /* Retry-After while loading (5); while waiting to restart, at least the wait */
    bool no_restart;           /* run the child once: sup_run returns when it exits */
} sup_opts;

/* Run until SIGTERM or SIGINT (then LILAC_OK once the child is gone), or with no_restart until the child exits
 * (LILAC_OK for status 0, else LILAC_E_INTERNAL saying how it died). A second SIGTERM/SIGINT while draining kills the
 * child at once. Fails up front on bad options or when signals or pipes cannot be set up; fork failures later are
 * logged and retried with the backoff. LILAC_E_IO when a child shut the listening socket down and listening again on
 * its port failed (see listen_lost). */
lilac_status sup_run(const sup_opts *o, lilac_error *err);

/* In the child: tell the parent the engine is ready, and wait until the parent has stopped accepting on the listening
 * socket. ready_fd < 0 (not supervised) does nothing. LILAC_E_IO when the parent is gone. */
lilac_status sup_notify_ready(int ready_fd);

#endif
