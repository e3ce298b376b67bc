/*
 * relock-compat-proxy: a Redis proxy that answers as an old server would.
 *
 * The main thread owns the listening socket and the workers: it accepts
 * clients, starts one thread per connection (conn.c), reaps finished
 * threads, and on SIGTERM or SIGINT tells every worker to stop, joins
 * them and exits 0.  See docs/proxy.md.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* accept4, pipe2, signalfd, SOCK_NONBLOCK */
#endif

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conn.h"
#include "faults.h"
#include "log.h"
#include "native.h"
#include "options.h"

/* Connections served at once; more are accepted and closed at once. */
#define MAX_CONNS 1024
/* Connections accepted per wake-up, so reaping and signals are not
 * starved by a flood of clients. */
#define ACCEPT_BATCH 64

struct worker {
    struct worker *next;
    pthread_t tid;
    int cfd;
    int reap_fd;           /* written once the thread is done */
    const proxy_ctx *ctx;
    _Atomic int done;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;

    conn_serve(w->ctx, w->cfd);
    atomic_store(&w->done, 1);
    /* Wake the main thread to join us; if the pipe is full a wake-up is
     * already pending, which is all that is needed. */
    if (write(w->reap_fd, "x", 1) < 0)
        return NULL;
    return NULL;
}

/* Join finished workers (all of them when all is set).  Returns how many
 * remain. */
static size_t reap(struct worker **list, int all)
{
    struct worker **pp = list;
    size_t left = 0;

    while (*pp != NULL) { /* bounded by the list length */
        struct worker *w = *pp;

        if (all || atomic_load(&w->done)) {
            pthread_join(w->tid, NULL);
            *pp = w->next;
            free(w);
        } else {
            left++;
            pp = &w->next;
        }
    }
    return left;
}

static int resolve_upstream(const proxy_options *o, proxy_ctx *ctx)
{
    struct addrinfo hints;
    struct addrinfo *res = NULL;
    int rc;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    rc = getaddrinfo(o->upstream_host, o->upstream_port, &hints, &res);
    if (rc != 0) {
        fprintf(stderr, "relock-compat-proxy: --upstream: cannot resolve '%s': %s\n",
                o->upstream_host, gai_strerror(rc));
        return -1;
    }
    memcpy(&ctx->up_addr, res->ai_addr, res->ai_addrlen);
    ctx->up_addrlen = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

static int listen_loopback(int port, int *bound_port)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    int one = 1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

    if (fd < 0) {
        fprintf(stderr, "relock-compat-proxy: listen: socket: %s\n", strerror(errno));
        return -1;
    }
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((unsigned short)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        fprintf(stderr, "relock-compat-proxy: listen: bind 127.0.0.1:%d: %s\n", port,
                strerror(errno));
        close(fd);
        return -1;
    }
    if (listen(fd, 128) < 0 || getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
        fprintf(stderr, "relock-compat-proxy: listen: 127.0.0.1:%d: %s\n", port,
                strerror(errno));
        close(fd);
        return -1;
    }
    *bound_port = ntohs(sa.sin_port);
    return fd;
}

/* Accept pending clients and start their workers. */
static void accept_clients(int lfd, const proxy_ctx *ctx, int reap_wr,
                           struct worker **list, size_t *nconns, int *backoff)
{
    int i;

    for (i = 0; i < ACCEPT_BATCH; i++) {
        struct worker *w;
        int cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

        if (cfd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOMEM ||
                errno == ENOBUFS) {
                /* The listening socket stays readable: pause accepting a
                 * little instead of spinning. */
                proxy_log("accept: %s: pausing for 100 ms", strerror(errno));
                *backoff = 1;
            }
            return; /* EAGAIN and transient errors: wait for poll() */
        }
        if (*nconns >= MAX_CONNS) {
            proxy_log("accept: %d connections already open: closing the new one",
                      MAX_CONNS);
            close(cfd);
            continue;
        }
        w = calloc(1, sizeof(*w));
        if (w == NULL) {
            proxy_log("accept: out of memory: closing the new connection");
            close(cfd);
            continue;
        }
        w->cfd = cfd;
        w->reap_fd = reap_wr;
        w->ctx = ctx;
        atomic_init(&w->done, 0);
        if (pthread_create(&w->tid, NULL, worker_main, w) != 0) {
            proxy_log("accept: cannot start a thread: closing the new connection");
            close(cfd);
            free(w);
            continue;
        }
        w->next = *list;
        *list = w;
        (*nconns)++;
    }
}

int main(int argc, char **argv)
{
    proxy_options opt;
    proxy_ctx ctx;
    char err[512];
    sigset_t sigs;
    int sfd;
    int lfd;
    int port = 0;
    int stop_pipe[2];
    int reap_pipe[2];
    struct worker *workers = NULL;
    size_t nconns = 0;

    if (options_parse(argc, argv, &opt, err, sizeof(err)) < 0) {
        fprintf(stderr, "relock-compat-proxy: %s\n", err);
        return 2;
    }
    if (opt.help) {
        fputs(options_usage(), stdout);
        return 0;
    }
    memset(&ctx, 0, sizeof(ctx));
    ctx.pers = opt.pers;
    snprintf(ctx.upstream, sizeof(ctx.upstream), "%s", opt.upstream);
    if (resolve_upstream(&opt, &ctx) < 0)
        return 2;
    faults_init(opt.delay_us, opt.p_before, opt.p_after, opt.seed);
    native_set_lua(!opt.no_lua);

    /* Signals are taken synchronously through a signalfd; blocking them
     * here, before any thread starts, keeps every worker out of it. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    if (pthread_sigmask(SIG_BLOCK, &sigs, NULL) != 0) {
        fprintf(stderr, "relock-compat-proxy: signals: cannot block SIGTERM/SIGINT\n");
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    sfd = signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0) {
        fprintf(stderr, "relock-compat-proxy: signals: signalfd: %s\n", strerror(errno));
        return 1;
    }
    if (pipe2(stop_pipe, O_CLOEXEC) < 0 || pipe2(reap_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
        fprintf(stderr, "relock-compat-proxy: pipe: %s\n", strerror(errno));
        return 1;
    }
    ctx.stop_fd = stop_pipe[0];
    lfd = listen_loopback(opt.listen_port, &port);
    if (lfd < 0)
        return 1;
    printf("port %d\n", port);
    fflush(stdout);

    /* Every pass blocks in poll(): a signal, a client, or a worker done. */
    for (;;) {
        struct pollfd pf[3];
        int backoff = 0;
        int rc;

        pf[0].fd = sfd;
        pf[0].events = POLLIN;
        pf[1].fd = reap_pipe[0];
        pf[1].events = POLLIN;
        pf[2].fd = lfd;
        pf[2].events = POLLIN;
        rc = poll(pf, 3, -1);
        if (rc < 0) {
            if (errno == EINTR)
                continue;
            proxy_log("poll: %s: shutting down", strerror(errno));
            break;
        }
        if (pf[0].revents != 0)
            break;
        if (pf[1].revents != 0) {
            char drain[256];

            while (read(reap_pipe[0], drain, sizeof(drain)) > 0)
                ; /* bounded: the pipe holds a few bytes per finished worker */
            nconns = reap(&workers, 0);
        }
        if (pf[2].revents != 0)
            accept_clients(lfd, &ctx, reap_pipe[1], &workers, &nconns, &backoff);
        if (backoff)
            (void)poll(NULL, 0, 100);
    }

    /* Tell every worker to stop (the pipe stays readable), then join. */
    if (write(stop_pipe[1], "x", 1) < 0)
        proxy_log("shutdown: cannot signal the workers: %s", strerror(errno));
    reap(&workers, 1);
    close(lfd);
    close(sfd);
    close(stop_pipe[0]);
    close(stop_pipe[1]);
    close(reap_pipe[0]);
    close(reap_pipe[1]);
    return 0;
}
