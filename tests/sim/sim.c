/*
 * The simulator's core (sim.h): coroutines, the socket and clock calls
 * answered from the model, the scheduler with its faults, the clients'
 * programs and the invariants.
 *
 * The socket calls.  This program defines connect(), read(), write(),
 * send(), poll() and close() (and clock_gettime(), nanosleep(), getrandom(),
 * time()).  hiredis, a shared library, calls them through its PLT, so they
 * reach these definitions: a connection to 127.0.0.1:SIM_PORT made from a
 * simulated client becomes a connection to the model server, and a read
 * that has no reply yet yields to the scheduler.  Every other descriptor,
 * and every call outside a simulated client, goes to the C library.  The
 * library under test is unchanged: relock's own code, through the
 * operation core down to hiredis's parser, runs as in production.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "sim.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "core/core.h"
#include "internal.h"
#include "model.h"
#include "relock_async.h"

/* AddressSanitizer is told of each switch of stacks, so that it keeps
 * track of the coroutines' stacks. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define FIBER_START(save, bottom, size) __sanitizer_start_switch_fiber((save), (bottom), (size))
#define FIBER_FINISH(save, bottom, size) __sanitizer_finish_switch_fiber((save), (bottom), (size))
#else
#define FIBER_START(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#define FIBER_FINISH(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#endif
static const void *sched_bottom;
static size_t sched_size;

#define SIM_PORT 9 /* server i of a scenario listens on SIM_PORT + i */
#define SIM_WAIT_FDS 8
#define SIM_FDS 4096
#define STACK_SIZE (512 * 1024)
#define WALL_BASE 1764000000000LL /* 2025-11-24, a present-day date */
#define MONO_BASE 5000000LL

enum cstate { ST_NEW, ST_RUN, ST_READ, ST_SLEEP, ST_DONE };

typedef struct sclient {
    int id;
    int owner;            /* whose connections write its values: itself, or its SK_ASYNC client */
    sim_client_spec sp;
    ucontext_t uc;
    char *stack;
    int state;
    long long wake;       /* ST_SLEEP: virtual ms to wake at */
    int wait_fds[SIM_WAIT_FDS]; /* woken early when one of these descriptors has data */
    int nwait;
    long long skew;       /* wall clock offset */
    long long paused;     /* ms spent paused by SF_PAUSE (for the wait bound) */
    long long resume_at;  /* SF_PAUSE: stopped until then */
    /* The claim: the client believes it holds sp.lock until claim_end. */
    int claim;
    int claim_void;       /* broken by an operator or forgotten by a restart */
    long long claim_start, claim_end;
    char claim_value[RELOCK__VALUE_MAX];
    /* An extend under way: meanwhile the claim is also bounded by what
     * relock states for the lock (a thread of the holder may read it). */
    relock_lock *extending;
    uint64_t rng;
    void *fiber;          /* AddressSanitizer's note of its fake stack */
    int epoch;            /* the server's life its lock handle comes from */
    int broken;           /* a classic client broken while it held: it does not know */
    uint64_t seen_ver;    /* its lock key's version at its last GET of it */
    int seen;             /* it has read its lock key (seen_ver is set) */
    long long wrote_at;   /* its last write of its lock key */
    unsigned long cmds;   /* commands of its that servers took (run or faulted) */
} sclient;

typedef struct sconn {
    int used;
    int client;
    int srv;              /* which server */
    int mconn;            /* the model's connection, -1 once dead */
    int dead;
    unsigned long seq;    /* the order connections were made in: descriptors can be reused */
    long long hold_until; /* SF_HOLD: the client times out then; 0 none */
    model_buf in;         /* bytes written by the client */
    size_t in_off;
    model_buf out;        /* reply bytes for the client */
    size_t out_off;
    model_buf late;       /* SF_DELAY: replies on their way, arriving at late_at */
    long long late_at;
} sconn;

/* Outside S, which is cleared at every run: only the servers a run uses
 * are (model_init). */
static model models[SIM_SERVERS];

static struct {
    const sim_scenario *sc;
    const sim_opts *o;
    sim_result *r;
    model *ms;            /* the servers (models[]): one, or a quorum's */
    int nserv;
    long long srv_skew[SIM_SERVERS]; /* each server's clock against the virtual clock */
    sclient cl[SIM_MAX_CLIENTS];
    int ncl;
    sconn conns[SIM_FDS];
    long long now;        /* virtual ms since the start of the run */
    long long wall0;      /* the true wall clock at now = 0 */
    ucontext_t sched;
    sclient *cur;
    uint64_t rng;         /* the chooser's generator */
    int faults_left;
    int epoch;            /* server restarts so far */
    long long max_fence[8];
    char fence_lock[8][64];
    int nfence;
    int maxfd;            /* above every simulated descriptor */
    unsigned long nextseq;
    model_buf trace;
    int quiet;
    int tracing;          /* keep the trace (a run is replayed with it to print one) */
    int violated;
    int draining;         /* past max_steps: no more faults, choice 0 */
    long long broken_at;  /* the last operator break or restart, or -1 */
    long long stepped_at; /* the last forward step of a server's clock, or -1 */
    long long refuse_until[SIM_SERVERS]; /* SF_REFUSE: server i refuses connections until then */
    long long loading_until[SIM_SERVERS]; /* SF_LOADING: server i answers -LOADING until then */
    int forced_done[4];
} S;

/* ------------------------------------------------------------------ real calls */

#define REAL(name, ret, args)                                                                 \
    static ret(*real_##name) args;                                                            \
    static void load_##name(void)                                                             \
    {                                                                                         \
        if (!real_##name)                                                                     \
            *(void **)&real_##name = dlsym(RTLD_NEXT, #name);                                 \
    }
REAL(connect, int, (int, const struct sockaddr *, socklen_t))
REAL(read, ssize_t, (int, void *, size_t))
REAL(write, ssize_t, (int, const void *, size_t))
REAL(send, ssize_t, (int, const void *, size_t, int))
REAL(poll, int, (struct pollfd *, nfds_t, int))
REAL(close, int, (int))
REAL(nanosleep, int, (const struct timespec *, struct timespec *))

/* ------------------------------------------------------------------ trace */

static void tracef(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void tracef(const char *fmt, ...)
{
    if (!S.tracing)
        return;
    char line[700];
    int n = snprintf(line, sizeof line, "%7lld ", S.now);
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (k < 0)
        return;
    n += k;
    if ((size_t)n > sizeof line - 2)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    model_buf_add(&S.trace, line, (size_t)n);
}

static void violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void violation(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (S.tracing)
        tracef("VIOLATION: %s", msg);
    if (!S.violated) {
        S.violated = 1;
        snprintf(S.r->msg, sizeof S.r->msg, "%s", msg);
    }
}

/* ------------------------------------------------------------------ choices */

static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* One choice among n (n >= 2).  fault: choice 0 is "no fault", taken most
 * of the time when choosing at random. */
static int choose(int n, int fault)
{
    sim_result *r = S.r;
    int pick;
    if (n < 2 || S.draining)
        return 0;
    if (S.o->dfs) {
        if (r->nchoices >= S.o->depth || r->nchoices >= (int)(sizeof r->picks / sizeof r->picks[0]))
            return 0;
        pick = r->nchoices < S.o->npath ? S.o->path[r->nchoices] : 0;
        if (pick >= n)
            pick = n - 1;
    } else {
        uint64_t x = mix(&S.rng);
        if (fault) {
            double u = (double)(x >> 11) / 9007199254740992.0;
            pick = u < S.o->fault_rate ? 1 + (int)(mix(&S.rng) % (uint64_t)(n - 1)) : 0;
        } else {
            pick = (int)(x % (uint64_t)n);
        }
        if (r->nchoices >= (int)(sizeof r->picks / sizeof r->picks[0]))
            return pick;
    }
    r->picks[r->nchoices] = pick;
    r->ns[r->nchoices] = n;
    r->nchoices++;
    return pick;
}

/* ------------------------------------------------------------------ coroutines */

static void yield(void)
{
    sclient *c = S.cur;
    FIBER_START(&c->fiber, sched_bottom, sched_size);
    swapcontext(&c->uc, &S.sched);
    FIBER_FINISH(c->fiber, &sched_bottom, &sched_size);
}

static void resume(sclient *c)
{
    void *save = NULL;
    S.cur = c;
    c->state = ST_RUN;
    FIBER_START(&save, c->stack, STACK_SIZE);
    swapcontext(&S.sched, &c->uc);
    FIBER_FINISH(save, NULL, NULL);
    S.cur = NULL;
}

/* Sleeps for ms, or until one of the n descriptors has data. */
static void sim_sleep_fds(long long ms, const int *fds, int n)
{
    sclient *c = S.cur;
    c->state = ST_SLEEP;
    c->wake = S.now + (ms > 0 ? ms : 0);
    c->nwait = n < SIM_WAIT_FDS ? n : SIM_WAIT_FDS;
    for (int i = 0; i < c->nwait; i++)
        c->wait_fds[i] = fds[i];
    yield();
    c->nwait = 0;
}

static void sim_sleep_ms(long long ms, int fd)
{
    sim_sleep_fds(ms, &fd, fd >= 0 ? 1 : 0);
}

/* ------------------------------------------------------------------ clocks, randomness */

/* The virtual time as a client's clock counts it: off by its drift. */
static long long drifted(const sclient *c)
{
    return c && c->sp.drift_ppm ? S.now + S.now * c->sp.drift_ppm / 1000000 : S.now;
}

/* How long ms of a client's clock last in virtual time. */
static long long real_ms(const sclient *c, long long ms)
{
    /* Rounded up: a wait of 1 ms never becomes one of none. */
    if (!c || !c->sp.drift_ppm || ms <= 0)
        return ms;
    return (ms * 1000000 + 1000000 + c->sp.drift_ppm - 1) / (1000000 + c->sp.drift_ppm);
}

static long long wall_of(const sclient *c)
{
    return S.wall0 + drifted(c) + (c ? c->skew : 0);
}

int clock_gettime(clockid_t id, struct timespec *ts)
{
    if (!S.cur)
        return (int)syscall(SYS_clock_gettime, id, ts);
    long long ms = id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE ? wall_of(S.cur)
                                                                        : MONO_BASE + drifted(S.cur);
    ts->tv_sec = (time_t)(ms / 1000);
    ts->tv_nsec = (long)(ms % 1000) * 1000000L;
    return 0;
}

time_t time(time_t *t)
{
    time_t v;
    if (S.cur) {
        v = (time_t)(wall_of(S.cur) / 1000);
    } else {
        struct timespec ts;
        syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts);
        v = ts.tv_sec;
    }
    if (t)
        *t = v;
    return v;
}

int nanosleep(const struct timespec *req, struct timespec *rem)
{
    if (!S.cur) {
        load_nanosleep();
        return real_nanosleep(req, rem);
    }
    sim_sleep_ms(real_ms(S.cur, (long long)req->tv_sec * 1000 + req->tv_nsec / 1000000), -1);
    if (rem)
        rem->tv_sec = rem->tv_nsec = 0;
    return 0;
}

ssize_t getrandom(void *buf, size_t len, unsigned flags)
{
    (void)flags;
    unsigned char *p = buf;
    uint64_t *st = S.cur ? &S.cur->rng : &S.rng;
    for (size_t i = 0; i < len; i++)
        p[i] = (unsigned char)(mix(st) >> 24);
    return (ssize_t)len;
}

/* ------------------------------------------------------------------ sockets */

static sconn *sim_conn(int fd)
{
    if (fd < 0 || fd >= SIM_FDS || !S.conns[fd].used)
        return NULL;
    return &S.conns[fd];
}

static void kill_conn(sconn *k, const char *why)
{
    if (k->dead)
        return;
    k->dead = 1;
    k->late.n = 0; /* replies on their way are lost with it */
    if (k->mconn >= 0)
        model_conn_close(&S.ms[k->srv], k->mconn);
    k->mconn = -1;
    tracef("c%d connection to s%d closed (%s)", k->client, k->srv, why);
}

int connect(int fd, const struct sockaddr *sa, socklen_t len)
{
    if (S.cur && sa && sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        int sv = ntohs(in->sin_port) - SIM_PORT;
        if (sv >= 0 && sv < S.nserv && fd >= 0 && fd < SIM_FDS) {
            if (S.ms[sv].down || S.now < S.refuse_until[sv]) {
                errno = ECONNREFUSED;
                return -1;
            }
            sconn *k = &S.conns[fd];
            memset(k, 0, sizeof *k);
            k->used = 1;
            k->client = S.cur->id;
            k->srv = sv;
            k->mconn = model_conn_open(&S.ms[sv], S.cur->id);
            if (k->mconn < 0) {
                k->used = 0;
                errno = ECONNREFUSED;
                return -1;
            }
            if (fd + 1 > S.maxfd)
                S.maxfd = fd + 1;
            k->seq = ++S.nextseq;
            return 0;
        }
    }
    load_connect();
    return real_connect(fd, sa, len);
}

static size_t pending_cmds(sconn *k)
{
    size_t n = 0, off = k->in_off;
    while (off < k->in.n) {
        int argc;
        const char *argv[MODEL_ARGS];
        size_t l[MODEL_ARGS];
        long used = model_parse_command(k->in.p + off, k->in.n - off, &argc, argv, l, MODEL_ARGS);
        if (used <= 0)
            break;
        off += (size_t)used;
        n++;
    }
    return n;
}

ssize_t write(int fd, const void *buf, size_t n)
{
    sconn *k = S.cur ? sim_conn(fd) : NULL;
    if (!k) {
        load_write();
        return real_write(fd, buf, n);
    }
    if (k->dead) {
        errno = EPIPE;
        return -1;
    }
    model_buf_add(&k->in, buf, n);
    return (ssize_t)n;
}

/* relock's own writes (src/core/loop.c): as write(), the flags aside. */
ssize_t send(int fd, const void *buf, size_t n, int flags)
{
    sconn *k = S.cur ? sim_conn(fd) : NULL;
    if (!k) {
        load_send();
        return real_send(fd, buf, n, flags);
    }
    return write(fd, buf, n);
}

ssize_t read(int fd, void *buf, size_t n)
{
    sconn *k = S.cur ? sim_conn(fd) : NULL;
    if (!k) {
        load_read();
        return real_read(fd, buf, n);
    }
    long timeout = 1000; /* every client's command_timeout_ms */
    for (int rounds = 0;; rounds++) {
        if (k->out_off < k->out.n) {
            size_t m = k->out.n - k->out_off;
            if (m > n)
                m = n;
            memcpy(buf, k->out.p + k->out_off, m);
            k->out_off += m;
            if (k->out_off == k->out.n)
                k->out_off = k->out.n = 0;
            return (ssize_t)m;
        }
        /* hiredis's non-blocking contexts (the quorum's, the asynchronous
         * client's) read only what is there, and find a dead connection
         * closed at once (also one whose reply was being held). */
        if (fcntl(fd, F_GETFL) & O_NONBLOCK) {
            if (k->dead)
                return 0;
            errno = EAGAIN;
            return -1;
        }
        if (k->late.n) { /* delivered by the scheduler at late_at */
            sim_sleep_ms(k->late_at - S.now, fd);
            continue;
        }
        if (k->hold_until) {
            if (S.now >= k->hold_until) {
                k->hold_until = 0;
                kill_conn(k, "reply never came; client timed out");
                errno = EAGAIN;
                return -1;
            }
            sim_sleep_ms(k->hold_until - S.now, -1);
            continue;
        }
        if (k->dead)
            return 0;
        if (pending_cmds(k) > 0) {
            S.cur->state = ST_READ;
            S.cur->wait_fds[0] = fd;
            S.cur->nwait = 1;
            yield();
            continue;
        }
        /* Nothing asked and nothing to read (a subscriber): the socket's
         * timeout ends the wait. */
        if (rounds > 0) {
            errno = EAGAIN;
            return -1;
        }
        sim_sleep_ms(timeout, fd);
    }
}

int poll(struct pollfd *fds, nfds_t n, int timeout)
{
    int sim = 0;
    for (nfds_t i = 0; i < n; i++)
        if (sim_conn(fds[i].fd))
            sim = 1;
    if (!S.cur || !sim) {
        load_poll();
        return real_poll(fds, n, timeout);
    }
    long long end = timeout < 0 ? S.now + 3600000 : S.now + real_ms(S.cur, timeout);
    for (;;) {
        int ready = 0;
        int wait[SIM_WAIT_FDS], nw = 0;
        for (nfds_t i = 0; i < n; i++) {
            sconn *k = sim_conn(fds[i].fd);
            fds[i].revents = 0;
            if (!k)
                continue;
            if (nw < SIM_WAIT_FDS)
                wait[nw++] = fds[i].fd;
            if (k->out_off < k->out.n)
                fds[i].revents |= POLLIN;
            if (k->dead)
                fds[i].revents |= POLLIN | POLLHUP;
            if ((fds[i].events & POLLOUT) && !k->dead)
                fds[i].revents |= POLLOUT;
            if (fds[i].revents)
                ready++;
        }
        if (ready || S.now >= end)
            return ready;
        sim_sleep_fds(end - S.now, wait, nw);
    }
}

static void exec_one(int fd, int f);

int close(int fd)
{
    sconn *k = sim_conn(fd);
    if (k) {
        /* What the client wrote before it closed reaches the server ahead
         * of the end of the connection, which runs it (its replies go
         * nowhere): a late server's clean-up written behind its request
         * still runs when the client drops the connection afterwards. */
        while (S.cur && !k->dead && k->mconn >= 0 && !k->hold_until && pending_cmds(k) > 0)
            exec_one(fd, SF_NONE);
        if (!k->dead && k->mconn >= 0)
            model_conn_close(&S.ms[k->srv], k->mconn);
        model_buf_free(&k->in);
        model_buf_free(&k->out);
        model_buf_free(&k->late);
        memset(k, 0, sizeof *k);
    }
    load_close();
    return real_close(fd);
}

/* ------------------------------------------------------------------ invariants */

static int is_lock_key(const char *name)
{
    for (int i = 0; i < S.ncl; i++)
        if (S.sc->c[i].lock && strcmp(S.sc->c[i].lock, name) == 0)
            return 1;
    return 0;
}

/* When the client's claim ends: during an extend, no later than the
 * validity relock states for the lock now. */
static long long claim_until(const sclient *c)
{
    long long end = c->claim_end;
    if (c->extending) {
        /* The library reads the virtual clock only inside a client. */
        sclient *was = S.cur;
        S.cur = (sclient *)c;
        long long now_end = S.now + real_ms(c, relock_lock_validity_ms(c->extending));
        S.cur = was;
        if (now_end < end)
            end = now_end;
    }
    return end;
}

static int claim_live(const sclient *c, const char *lock)
{
    return c->claim && !c->claim_void && claim_until(c) > S.now &&
           strcmp(c->sp.lock, lock) == 0;
}

static void void_claims(const char *lock, const char *why)
{
    for (int i = 0; i < S.ncl; i++) {
        if (claim_live(&S.cl[i], lock)) {
            S.cl[i].claim_void = 1;
            S.cl[i].broken = S.cl[i].sp.kind == SK_CLASSIC;
            tracef("c%d's claim on %s ends: %s", i, lock, why);
        }
    }
}

/* The model's hook before every write. */
static void on_write(void *arg, model *m, int writer, const model_key *before, const char *what)
{
    (void)arg;
    if (writer < 0 || writer >= S.ncl || !is_lock_key(before->name))
        return;
    sclient *w = &S.cl[writer];
    for (int i = 0; i < S.ncl; i++) /* an asynchronous client's operations too */
        if (S.cl[i].owner == writer && S.cl[i].sp.lock &&
            strcmp(S.cl[i].sp.lock, before->name) == 0)
            S.cl[i].wrote_at = S.now;
    if (w->sp.kind == SK_BREAK || w->sp.kind == SK_DEL) {
        if (before->exists) {
            void_claims(before->name, "broken by the operator");
            S.broken_at = S.now;
        }
        return;
    }
    /* A classic client broken while it held does not know it: its DEL at
     * the end of its hold removes whoever holds the key now (docs/safety.md,
     * "After a break or a new holder": the window that remains).  That ends
     * the claim, as a break does. */
    if (w->broken && before->exists && before->author != writer) {
        void_claims(before->name, "deleted by a classic client broken earlier");
        S.broken_at = S.now;
        return;
    }
    if (!before->exists || before->author == writer || before->author < 0 ||
        before->author >= S.ncl)
        return;
    /* A handle from before a restart without persistence: the counters
     * started again, so its value and fence can be a new holder's too,
     * and its write ends that holder's lock (docs/safety.md, "Restart"):
     * a documented limit, not checked. */
    if (w->epoch != S.epoch) {
        /* Also a claim granted but not yet returned (broken_at). */
        S.broken_at = S.now;
        for (int i = 0; i < S.ncl; i++) {
            sclient *h = &S.cl[i];
            if (h->owner != before->author ||
                !(claim_live(h, before->name) || S.cl[h->owner].state != ST_DONE))
                continue;
            h->claim_void = 1;
            /* Its holder's handle is now as unreliable as the old one:
             * the fence no longer tells it from anyone (a classic SETNX
             * next is followed), so its writes are the same limit. */
            S.cl[h->owner].epoch = -1;
            tracef("c%d's claim ends: c%d's handle from before the restart matched it", i,
                   writer);
        }
        return;
    }
    /* Only relock's clients are held to this: a classic client that
     * loses a GETSET race writes over the winner by design. */
    if (w->sp.kind != SK_RELOCK && w->sp.kind != SK_ASYNC)
        return;
    /* On 2.0 relock looks (GET), then writes (GETSET): its takeover, and
     * its extend.  A value written between the two is hit, the window
     * 2.0 leaves (docs/legacy.md); a value that was already there when
     * it looked is not: relock saw it, and the break counter read with it
     * must have told it the lock was no longer its own. */
    if (strcmp(what, "GETSET") == 0 && m->p.version < MODEL_PV(2, 2, 0)) {
        /* What the writer last read of this lock: its own record's, or
         * that of the asynchronous client's operation on it. */
        const sclient *rd = NULL;
        for (int i = 0; i < S.ncl && !rd; i++)
            if (S.cl[i].owner == writer && S.cl[i].sp.lock &&
                strcmp(S.cl[i].sp.lock, before->name) == 0)
                rd = &S.cl[i];
        if (!rd || !rd->seen || rd->seen_ver != before->ver)
            return;
    }
    /* The value's author, or one of its operations when it is an
     * asynchronous client. */
    for (int i = 0; i < S.ncl; i++) {
        const sclient *a = &S.cl[i];
        if (a->owner == before->author && claim_live(a, before->name)) {
            violation("c%d wrote to a lock it does not own (%s on %s over c%d's value \"%s\", "
                      "c%d valid for %lld ms more)",
                      writer, what, before->name, before->author, before->val, i,
                      claim_until(a) - S.now);
            break;
        }
    }
}

/* The model's hook at every GET: what a client last saw of its lock.  An
 * asynchronous client's GET is its operation's on that lock (operations
 * of one client on one lock share what they saw: its connection is one). */
static void on_read(void *arg, model *m, int reader, const char *name, const model_key *k)
{
    (void)arg;
    (void)m;
    if (reader < 0 || reader >= S.ncl)
        return;
    for (int i = 0; i < S.ncl; i++)
        if (S.cl[i].owner == reader && S.cl[i].sp.lock && strcmp(S.cl[i].sp.lock, name) == 0) {
            S.cl[i].seen = 1;
            S.cl[i].seen_ver = k ? k->ver : 0;
        }
}

static long long parse_ll(const char *s, int *digits)
{
    long long v = 0;
    int d = 0;
    while (s[d] >= '0' && s[d] <= '9' && d < 18)
        v = v * 10 + (s[d++] - '0');
    *digits = d;
    return v;
}

/* Each server's clock brought to the present, so that expiries are
 * applied before a check reads the keys. */
static void sync_clocks(void)
{
    for (int i = 0; i < S.nserv; i++)
        S.ms[i].now_ms = S.wall0 + S.now + S.srv_skew[i];
}

static int majority(void)
{
    return S.nserv / 2 + 1;
}

/* How many servers hold value in the lock's key for at least ms more
 * (no TTL counts as long enough); writer >= 0: written by that client. */
static int servers_holding(const char *lock, const char *value, long long ms, int writer)
{
    int n = 0;
    sync_clocks();
    for (int i = 0; i < S.nserv; i++) {
        model_key *k = model_lookup(&S.ms[i], lock);
        if (!k || !k->exists || strcmp(k->val, value) != 0 || (writer >= 0 && k->author != writer))
            continue;
        long long pttl = model_pttl(&S.ms[i], lock);
        if (pttl < 0 || pttl >= ms)
            n++;
    }
    return n;
}

/* After an acquire or extend that returned OK: the key holds the value
 * and lives (by its TTL and by its timestamp) at least as long as the
 * holder is told; no one else holds it.  Over a quorum: on a majority of
 * the servers (the validity counted from the requests' send, design.md
 * §9.1: the servers started the TTL no earlier). */
static void check_held(sclient *c, relock_lock *l, const char *op)
{
    const char *v = relock_lock_value(l);
    if (c->claim_end <= S.now)
        return; /* validity 0: the holder knows it holds nothing */
    if (S.nserv > 1) {
        int n = servers_holding(c->sp.lock, v, c->claim_end - S.now, -1);
        if (n < majority())
            violation("c%d: %s: the holder is told %lld ms, but only %d of %d servers hold its "
                      "value that long",
                      c->id, op, c->claim_end - S.now, n, S.nserv);
        return;
    }
    sync_clocks();
    model_key *k = model_lookup(&S.ms[0], c->sp.lock);
    if (!k || !k->exists || strcmp(k->val, v) != 0) {
        violation("c%d: %s returned OK but the key holds %s%s%s (an outcome claimed as success "
                  "that did not happen)",
                  c->id, op, k && k->exists ? "\"" : "", k && k->exists ? k->val : "nothing",
                  k && k->exists ? "\"" : "");
        return;
    }
    long long pttl = model_pttl(&S.ms[0], c->sp.lock);
    if (pttl >= 0 && c->claim_end > S.now + pttl)
        violation("c%d: %s: the key lives %lld ms, the holder is told %lld ms", c->id, op, pttl,
                  c->claim_end - S.now);
    int digits;
    long long ts = parse_ll(k->val, &digits);
    /* (an asynchronous client's operation goes by its client's clock) */
    if (digits > 0 && (S.cl[c->owner].skew == 0 || c->sp.clock_server) &&
        (k->val[digits] == '\0' || k->val[digits] == ':')) {
        long long unit = c->sp.unit_ms ? 1 : 1000;
        /* A classic reader's takeover; by the server's clock for a client
         * that reads it (legacy.clock = "server"). */
        long long takeover = (ts + 1) * unit - S.wall0 - (c->sp.clock_server ? S.srv_skew[0] : 0);
        if (c->claim_end > takeover)
            violation("c%d: %s: value %lld is taken over by legacy readers at %lld, the holder "
                      "is told it holds until %lld",
                      c->id, op, ts, takeover, c->claim_end);
    }
}

/* After an extend that did not succeed: where the key still holds the
 * holder's value, it lives at least as long as the holder is now told. */
static void check_kept(sclient *c, relock_lock *l, const char *op)
{
    if (c->claim_end <= S.now || S.nserv > 1)
        return;
    sync_clocks();
    model_key *k = model_lookup(&S.ms[0], c->sp.lock);
    if (!k || !k->exists || strcmp(k->val, relock_lock_value(l)) != 0)
        return;
    long long pttl = model_pttl(&S.ms[0], c->sp.lock);
    if (pttl >= 0 && c->claim_end > S.now + pttl)
        violation("c%d: %s: the key lives %lld ms, the holder is told %lld ms", c->id, op, pttl,
                  c->claim_end - S.now);
}

/* A durable acquire or extend that returned OK: the replicas hold the
 * value at least as long as the holder is told (a failover to one of
 * them keeps the lock). */
static void check_replica(sclient *c, relock_lock *l, const char *op)
{
    if (!c->sp.durability || c->claim_end <= S.now || c->claim_void || S.nserv > 1)
        return;
    sync_clocks();
    long long pttl;
    const char *v = model_replica_get(&S.ms[0], c->sp.lock, &pttl);
    if (!v || strcmp(v, relock_lock_value(l)) != 0)
        violation("c%d: %s returned OK with durability, but the replicas hold %s", c->id, op,
                  v ? v : "nothing");
    else if (pttl >= 0 && c->claim_end > S.now + pttl)
        violation("c%d: %s: on the replicas the key lives %lld ms, the holder is told %lld ms",
                  c->id, op, pttl, c->claim_end - S.now);
}

static void check_overlap(sclient *c)
{
    for (int i = 0; i < S.ncl; i++) {
        if (i != c->id && claim_live(&S.cl[i], c->sp.lock))
            violation("two holders: c%d acquired %s while c%d holds it for %lld ms more", c->id,
                      c->sp.lock, i, claim_until(&S.cl[i]) - S.now);
    }
}

static void check_fence(sclient *c, long long f)
{
    if (f <= 0)
        return;
    int i;
    for (i = 0; i < S.nfence; i++)
        if (strcmp(S.fence_lock[i], c->sp.lock) == 0)
            break;
    if (i == S.nfence) {
        if (S.nfence == 8)
            return;
        snprintf(S.fence_lock[i], sizeof S.fence_lock[i], "%s", c->sp.lock);
        S.max_fence[i] = 0;
        S.nfence++;
    }
    if (f <= S.max_fence[i])
        violation("c%d: fence %lld for %s is not above the earlier holder's %lld", c->id, f,
                  c->sp.lock, S.max_fence[i]);
    else
        S.max_fence[i] = f;
}

static void claim_begin(sclient *c, long long end, const char *value)
{
    c->claim = 1;
    c->claim_void = 0;
    c->claim_start = S.now;
    c->claim_end = end;
    snprintf(c->claim_value, sizeof c->claim_value, "%s", value);
}

static void claim_stop(sclient *c)
{
    if (c->claim && c->claim_end > S.now)
        c->claim_end = S.now;
    c->claim = 0;
}

/* A release or extend said LOST: wrong while the key still holds the
 * value the client itself wrote, within its validity (ending at end),
 * unbroken. */
static void check_lost_value(sclient *c, const char *value, const char *op, int valid,
                             long long end)
{
    if (S.nserv > 1) {
        int n = servers_holding(c->sp.lock, value, 0, c->owner);
        if (valid && !c->claim_void && end > S.now && n >= majority())
            violation("c%d: %s reported the lock lost while %d of %d servers hold its value and "
                      "its validity lasts %lld ms more",
                      c->id, op, n, S.nserv, end - S.now);
        return;
    }
    sync_clocks();
    model_key *k = model_lookup(&S.ms[0], c->sp.lock);
    if (valid && !c->claim_void && end > S.now && k && k->exists && k->author == c->owner &&
        strcmp(k->val, value) == 0)
        violation("c%d: %s reported the lock lost while the key holds its value \"%s\" and its "
                  "validity lasts %lld ms more",
                  c->id, op, k->val, end - S.now);
}

static void check_lost(sclient *c, relock_lock *l, const char *op, int valid, long long end)
{
    check_lost_value(c, relock_lock_value(l), op, valid, end);
}

/* Every client ended, none holds: a token on a majority of the servers
 * (on the server) makes every other client wait for nobody. */
static void check_orphans(void)
{
    sync_clocks();
    for (int i = 0; i < S.nserv; i++)
        for (int j = 0; j < MODEL_KEYS; j++) {
            model_key *k = &S.ms[i].keys[j];
            if (!k->used || !k->exists || !is_lock_key(k->name))
                continue;
            int n = servers_holding(k->name, k->val, 1, -1);
            if (n >= (S.nserv > 1 ? majority() : 1)) {
                violation("c%d's token for %s stays on %d of %d servers for %lld ms more, with "
                          "no client holding it",
                          k->author, k->name, n, S.nserv, model_pttl(&S.ms[i], k->name));
                return;
            }
        }
}

/* ------------------------------------------------------------------ client programs */

static const char *st_name(relock_status st)
{
    return relock_status_name(st) + 7;
}

/* A waiter's load on the servers: not a safety property, but a waiter
 * that wakes itself (a quorum's undo of a failed attempt announcing a
 * release) tries again at network speed for as long as the lock stays
 * held on part of the servers, an attempt every few virtual ms.  The
 * backoff (5 to 100 ms here, a pause of half to all of it) allows about
 * 8 attempts, then one each 50 ms at most; a few more are woken by
 * releases, or follow the subscription or a holder's known end.  An
 * attempt sends each server its acquire and at most its delete (a
 * restart's NOSCRIPT or a fence raise now and then: the slack).  The
 * busy loop exceeds this about threefold with 1 ms per command (the
 * scenarios' own, and most seeds'); with 5 ms it may pass unseen. */
static void check_wait_load(sclient *c, unsigned long cmds, long long took_ms)
{
    if (S.nserv < 2 || !c->sp.notify)
        return;
    unsigned long attempts = 16 + (unsigned long)(took_ms > 0 ? took_ms : 0) / 50;
    unsigned long bound = attempts * (2 * (unsigned long)S.nserv + 2) + 40;
    tracef("c%d's acquire sent %lu commands in %lld ms (bound %lu)", c->id, cmds, took_ms, bound);
    if (cmds > bound)
        violation("c%d: acquire sent %lu commands in %lld ms, more than the backoff allows "
                  "(%lu): the waiter does not wait",
                  c->id, cmds, took_ms, bound);
}

static relock_config *relock_config_for(sclient *c)
{
    relock_config *cfg = relock_config_new();
    char url[200], num[32];
    const sim_client_spec *sp = &c->sp;
    if (!cfg)
        return NULL;
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", SIM_PORT);
    relock_config_set_url(cfg, url);
    if (S.nserv > 1) { /* a quorum over every server of the scenario */
        size_t w = 0;
        for (int i = 0; i < S.nserv && w < sizeof url - 40; i++)
            w += (size_t)snprintf(url + w, sizeof url - w, "%sredis://127.0.0.1:%d", i ? "," : "",
                                  SIM_PORT + i);
        relock_config_set(cfg, "servers", url);
    }
    static const char *const modes[] = {"auto", "legacy", "bridge", "modern"};
    relock_config_set(cfg, "mode", modes[sp->mode]);
    snprintf(num, sizeof num, "%ld", sp->ttl_ms > 0 ? sp->ttl_ms : 2000);
    relock_config_set(cfg, "ttl_ms", num);
    relock_config_set(cfg, "command_timeout_ms", "1000");
    relock_config_set(cfg, "connect_timeout_ms", "1000");
    relock_config_set(cfg, "wait.notify", sp->notify ? "true" : "false");
    relock_config_set(cfg, "wait.backoff_min_ms", "5");
    relock_config_set(cfg, "wait.backoff_max_ms", "100");
    relock_config_set(cfg, "legacy.clock_unit", sp->unit_ms ? "ms" : "s");
    snprintf(num, sizeof num, "%ld", sp->offset);
    relock_config_set(cfg, "legacy.expiry_offset", num);
    snprintf(num, sizeof num, "%ld", sp->skew_margin_ms);
    relock_config_set(cfg, "legacy.skew_margin_ms", num);
    relock_config_set(cfg, "legacy.clock", sp->clock_server ? "server" : "local");
    if (sp->durability) {
        snprintf(num, sizeof num, "%d", sp->durability);
        relock_config_set(cfg, "durability.replicas", num);
        relock_config_set(cfg, "durability.timeout_ms", "200");
    }
    return cfg;
}

static relock_client *relock_client_for(sclient *c)
{
    relock_config *cfg = relock_config_for(c);
    if (!cfg)
        return NULL;
    relock_client *rc = NULL;
    for (int tries = 0; tries < 3 && !rc; tries++) {
        relock_status st = relock_connect(cfg, &rc);
        if (st != RELOCK_OK) {
            tracef("c%d connect: %s: %s", c->id, st_name(st),
                   rc ? relock_client_error(rc)->message : "");
            if (rc)
                relock_client_free(rc);
            rc = NULL;
            if (st != RELOCK_EIO && st != RELOCK_EPROTO)
                break;
            sim_sleep_ms(50, -1);
        }
    }
    relock_config_free(cfg);
    /* The library seeds its backoff jitter from the clock, getrandom()
     * and the handle's address; the address varies from run to run, so
     * the seed is replaced by one of the run's own. */
    if (rc)
        rc->rng = mix(&c->rng) | 1;
    return rc;
}

static void run_relock(sclient *c)
{
    relock_client *rc = relock_client_for(c);
    if (!rc)
        return;
    const sim_client_spec *sp = &c->sp;
    for (int it = 0; it < sp->iters; it++) {
        relock_lock *l = NULL;
        long long t0 = S.now, p0 = c->paused;
        c->epoch = S.epoch; /* the handle belongs to the server's life it began in */
        c->wrote_at = t0;
        unsigned long n0 = c->cmds;
        relock_status st = relock_acquire(rc, sp->lock, sp->ttl_ms, sp->wait_ms, &l);
        long long took = S.now - t0 - (c->paused - p0);
        check_wait_load(c, c->cmds - n0, S.now - t0);
        tracef("c%d acquire %s -> %s%s%s", c->id, sp->lock, st_name(st),
               st == RELOCK_OK ? "" : ": ", st == RELOCK_OK ? "" : relock_client_error(rc)->message);
        /* Decision 83: the bound, the attempt under way and one
         * subscription, each command within its timeouts. */
        long slack = 8 * (1000 + 1000) + 200;
        if (sp->wait_ms >= 0 && took > sp->wait_ms + slack)
            violation("c%d: acquire with wait %ld ms took %lld ms", c->id, sp->wait_ms, took);
        if (st != RELOCK_OK) {
            sim_sleep_ms(20 + (long long)(mix(&c->rng) % 50), -1);
            continue;
        }
        long long fence = relock_lock_fence(l);
        claim_begin(c, S.now + real_ms(c, relock_lock_validity_ms(l)), relock_lock_value(l));
        /* Broken (or forgotten) after the server said yes (its last
         * write of the key) and before the client heard it: the
         * operator's word wins.  A break earlier in a long wait ended
         * someone else's claim, not this one.  A restart during the
         * acquire may have forgotten an earlier write (over a quorum, on
         * one server while the others took it later: docs/safety.md).
         * A forward step of the server's clock during the acquire ends
         * the lease it planned on the clock read before (a stated limit). */
        if (S.broken_at >= c->wrote_at || c->epoch != S.epoch || S.stepped_at >= t0) {
            c->claim_void = 1;
            tracef("c%d's claim was broken before it returned", c->id);
        }
        tracef("c%d holds %s value %s fence %lld valid %lld ms", c->id, sp->lock,
               relock_lock_value(l), fence, relock_lock_validity_ms(l));
        /* Validity 0 (stopped between the reply and the return): the
         * holder is told it holds nothing, and its fence, handed out
         * back then, is refused by a resource that saw a later one. */
        if (relock_lock_validity_ms(l) > 0 && !c->claim_void) {
            check_overlap(c);
            check_held(c, l, "acquire");
            check_replica(c, l, "acquire");
            check_fence(c, fence);
        }
        if (sp->extend) {
            sim_sleep_ms(sp->hold_ms / 2, -1);
            if (c->claim_end <= S.now) {
                tracef("c%d's validity passed while it slept", c->id);
            }
            long long e0 = S.now;
            c->extending = l;
            st = relock_extend(l, sp->extend_ms);
            c->extending = NULL;
            tracef("c%d extend -> %s%s%s value %s valid %lld", c->id, st_name(st),
                   st == RELOCK_OK ? "" : ": ", st == RELOCK_OK ? "" : relock_client_error(rc)->message,
                   relock_lock_value(l), relock_lock_validity_ms(l));
            if (st == RELOCK_OK && S.broken_at >= e0)
                c->claim_void = 1;
            if (st == RELOCK_OK) {
                if (!c->claim_void) {
                    c->claim_end = S.now + real_ms(c, relock_lock_validity_ms(l));
                    snprintf(c->claim_value, sizeof c->claim_value, "%s", relock_lock_value(l));
                    check_held(c, l, "extend");
                    check_replica(c, l, "extend");
                }
            } else if (st == RELOCK_LOST || relock_lock_validity_ms(l) <= 0) {
                if (st == RELOCK_LOST)
                    check_lost(c, l, "extend", c->claim, c->claim_end);
                claim_stop(c);
            } else if (c->claim && !c->claim_void) {
                /* A failed extend leaves the lock ours for the validity
                 * relock still states, and the holder acts on it: that
                 * must be no more than what the server may hold (the
                 * new lease, when shorter, may have been written), and
                 * never more than before. */
                long long end = S.now + real_ms(c, relock_lock_validity_ms(l));
                if (end < c->claim_end)
                    c->claim_end = end;
                else if (end > c->claim_end + 1) /* 1 ms: real_ms() rounds up */
                    violation("c%d: extend failed (%s), but the validity grew to %lld ms",
                              c->id, st_name(st), end - S.now);
                tracef("c%d keeps its claim for %lld ms after the failed extend", c->id,
                       c->claim_end - S.now);
                check_kept(c, l, "failed extend");
            }
            sim_sleep_ms(sp->hold_ms - sp->hold_ms / 2, -1);
        } else {
            sim_sleep_ms(sp->hold_ms, -1);
        }
        /* The holder stops acting before it releases. */
        int had = c->claim && !c->claim_void && c->claim_end > S.now;
        long long had_end = c->claim_end;
        claim_stop(c);
        st = relock_release(l);
        tracef("c%d release -> %s%s%s", c->id, st_name(st), st == RELOCK_OK ? "" : ": ",
               st == RELOCK_OK ? "" : relock_client_error(rc)->message);
        if (st == RELOCK_LOST)
            check_lost(c, l, "release", had, had_end);
        if (st == RELOCK_OK) {
            /* Over a quorum, a majority deleted it (a late minority may
             * keep it until its TTL). */
            int n = servers_holding(sp->lock, relock_lock_value(l), 0, c->id);
            if (n >= (S.nserv > 1 ? majority() : 1))
                violation("c%d: release returned OK but its value is still in the key on %d of "
                          "%d servers",
                          c->id, n, S.nserv);
        }
        relock_lock_free(l);
        sim_sleep_ms(5 + (long long)(mix(&c->rng) % 20), -1);
    }
    relock_client_free(rc);
}

static redisReply *classic_cmd(sclient *c, redisContext **ctx, const char *fmt, ...)
{
    if (!*ctx) {
        struct timeval tv = {1, 0};
        *ctx = redisConnectWithTimeout("127.0.0.1", SIM_PORT, tv);
        if (!*ctx || (*ctx)->err) {
            if (*ctx)
                redisFree(*ctx);
            *ctx = NULL;
            return NULL;
        }
        redisSetTimeout(*ctx, tv);
    }
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(*ctx, fmt, ap);
    va_end(ap);
    if (!r) {
        tracef("c%d classic: connection error: %s", c->id, (*ctx)->errstr);
        redisFree(*ctx);
        *ctx = NULL;
    }
    return r;
}

/* The classic pattern: the value is the expiry in whole seconds, now +
 * timeout + 1; expired when value < now. */
static void run_classic(sclient *c)
{
    redisContext *ctx = NULL;
    const sim_client_spec *sp = &c->sp;
    long timeout_s = sp->ttl_ms / 1000 > 0 ? sp->ttl_ms / 1000 : 1;
    for (int it = 0; it < sp->iters; it++) {
        int won = 0;
        long long mine = 0;
        long long t0 = S.now;
        long long t_try = S.now;
        for (int tries = 0; tries < 400 && !won && S.now - t0 <= sp->wait_ms; tries++) {
            t_try = S.now;
            c->epoch = S.epoch;
            c->broken = 0;
            long long now_s = wall_of(c) / 1000;
            mine = now_s + timeout_s + 1;
            redisReply *r = classic_cmd(c, &ctx, "SETNX %s %lld", sp->lock, mine);
            if (!r)
                continue;
            won = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
            freeReplyObject(r);
            if (won)
                break;
            r = classic_cmd(c, &ctx, "GET %s", sp->lock);
            if (!r)
                continue;
            int expired = 0;
            if (r->type == REDIS_REPLY_STRING)
                expired = strtoll(r->str, NULL, 10) < now_s;
            freeReplyObject(r);
            if (expired) {
                r = classic_cmd(c, &ctx, "GETSET %s %lld", sp->lock, mine);
                if (!r)
                    continue;
                won = r->type == REDIS_REPLY_NIL ||
                      (r->type == REDIS_REPLY_STRING && strtoll(r->str, NULL, 10) < now_s);
                freeReplyObject(r);
                if (won)
                    break;
            }
            sim_sleep_ms(30 + (long long)(mix(&c->rng) % 40), -1);
        }
        if (!won) {
            tracef("c%d classic: gave up", c->id);
            continue;
        }
        char v[32];
        snprintf(v, sizeof v, "%lld", mine);
        long hold = sp->hold_ms < timeout_s * 1000 ? sp->hold_ms : timeout_s * 1000;
        claim_begin(c, S.now + hold, v);
        tracef("c%d classic holds %s value %s for %ld ms", c->id, sp->lock, v, hold);
        if (S.broken_at >= t_try) {
            c->claim_void = 1; /* broken between its win and its knowing it */
            tracef("c%d's claim was broken before it knew it had won", c->id);
        } else {
            check_overlap(c);
        }
        sim_sleep_ms(hold, -1);
        claim_stop(c);
        /* Release: DEL while our own timeout has not passed. */
        if (wall_of(c) / 1000 < mine) {
            redisReply *r = classic_cmd(c, &ctx, "DEL %s", sp->lock);
            if (r)
                freeReplyObject(r);
        }
        sim_sleep_ms(10 + (long long)(mix(&c->rng) % 30), -1);
    }
    if (ctx)
        redisFree(ctx);
}

static void run_breaker(sclient *c)
{
    sim_sleep_ms(c->sp.start_ms, -1);
    if (c->sp.kind == SK_DEL) {
        redisContext *ctx = NULL;
        redisReply *r = classic_cmd(c, &ctx, "DEL %s", c->sp.lock);
        tracef("c%d operator DEL -> %lld", c->id, r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1);
        if (r)
            freeReplyObject(r);
        if (ctx)
            redisFree(ctx);
        return;
    }
    relock_client *rc = relock_client_for(c);
    if (!rc)
        return;
    relock_status st = relock_break(rc, c->sp.lock, NULL);
    tracef("c%d operator break -> %s", c->id, st_name(st));
    relock_client_free(rc);
}

/* ------------------------------------------------------------------ the asynchronous client */

/* Its loop, a few lines around poll() as docs/examples/async_poll.c: the
 * descriptors relock asks it to watch, one-shot timers on the client's
 * monotonic clock (the simulator's, drift included).  poll() and the clock
 * are the simulator's, so the loop waits in virtual time and the core's
 * reads and writes reach the model server. */
#define AL_FDS 16
#define AL_TIMERS 128
#define AS_OPS 3

typedef struct awatch {
    relock_async_socket *s; /* NULL: a free slot */
    int fd;
    short events;
    unsigned gen; /* a new one each time the slot is let go */
} awatch;

typedef struct atimer {
    void (*fn)(void *arg); /* NULL: a free slot */
    void *arg;
    long long due;
} atimer;

struct aprog;

/* One of the client's operations in flight: its lock handle, its plan,
 * and the simulated client whose claim it is (rec). */
typedef struct aslot {
    struct aprog *p;
    int i;
    sclient *rec;
    relock_lock *l;
    relock_async_op *op;
    int busy; /* acquiring, holding or releasing in this iteration */
    int plan;
    long long t0, p0;
    void *hold; /* the program's own timer: the end of a hold */
    int kept, lost;
    char value[RELOCK__VALUE_MAX];
    int had;
    long long had_end, rel_at; /* the claim as the release began, and when */
} aslot;

typedef struct aprog {
    sclient *c;
    relock_async *a;
    awatch w[AL_FDS];
    atimer t[AL_TIMERS];
    aslot s[AS_OPS];
    int n;
    int it;
    int last;  /* the last iteration */
    int freed; /* relock_async_free() was called */
    /* A handle an extend found lost, kept to be released from the next
     * iteration's first acquire callback (with sp.free_in_cb, that
     * release's own callback frees the client on the last iteration). */
    relock_lock *stale;
} aprog;

static long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int al_watch(void *data, relock_async_socket *s, int fd, int events, void **sockp)
{
    aprog *p = data;
    awatch *w = *sockp;
    if (events & RELOCK_IO_REMOVE) {
        if (w) {
            w->s = NULL;
            w->gen++;
        }
        return 0;
    }
    if (!w) {
        for (w = p->w; w < p->w + AL_FDS && w->s; w++)
            ;
        if (w == p->w + AL_FDS)
            return -1;
        w->s = s;
        w->fd = fd;
        *sockp = w;
    }
    w->events = (short)(((events & RELOCK_IO_READ) ? POLLIN : 0) |
                        ((events & RELOCK_IO_WRITE) ? POLLOUT : 0));
    return 0;
}

static void *al_timer_start(void *data, long long ms, void (*fn)(void *arg), void *arg)
{
    aprog *p = data;
    for (atimer *t = p->t; t < p->t + AL_TIMERS; t++)
        if (!t->fn) {
            t->fn = fn;
            t->arg = arg;
            t->due = mono_ms() + (ms > 0 ? ms : 0);
            return t;
        }
    return NULL;
}

static void al_timer_stop(void *data, void *timer)
{
    (void)data;
    ((atimer *)timer)->fn = NULL;
}

static void keep_watch(aprog *p);

/* One turn: waits for a descriptor, the nearest timer or until (a time
 * of the client's clock, -1: none), then reports each ready descriptor
 * (unless an earlier report removed it) and runs the timers that are due. */
static void al_turn(aprog *p, long long until)
{
    struct pollfd pf[AL_FDS];
    awatch *w[AL_FDS];
    unsigned gen[AL_FDS];
    int n = 0;
    long long now = mono_ms(), wait = 1000;
    for (atimer *t = p->t; t < p->t + AL_TIMERS; t++)
        if (t->fn && t->due - now < wait)
            wait = t->due > now ? t->due - now : 0;
    if (until >= 0 && until - now < wait)
        wait = until > now ? until - now : 0;
    for (int i = 0; i < AL_FDS; i++)
        if (p->w[i].s) {
            pf[n] = (struct pollfd){.fd = p->w[i].fd, .events = p->w[i].events};
            w[n] = &p->w[i];
            gen[n++] = p->w[i].gen;
        }
    if (n > 0) {
        if (poll(pf, (nfds_t)n, (int)wait) > 0)
            for (int i = 0; i < n; i++) {
                int ev = ((pf[i].revents & (POLLIN | POLLHUP | POLLERR)) ? RELOCK_IO_READ : 0) |
                         ((pf[i].revents & POLLOUT) ? RELOCK_IO_WRITE : 0);
                if (ev && w[i]->gen == gen[i] && w[i]->s)
                    relock_async_socket_action(w[i]->s, ev);
            }
    } else if (wait > 0) {
        struct timespec ts = {(time_t)(wait / 1000), (long)(wait % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    now = mono_ms();
    for (atimer *t = p->t; t < p->t + AL_TIMERS; t++)
        if (t->fn && t->due <= now) {
            void (*fn)(void *) = t->fn;
            t->fn = NULL;
            fn(t->arg);
        }
    keep_watch(p);
}

static void as_release(aslot *s);

static void as_stop_hold(aslot *s)
{
    if (s->hold) {
        al_timer_stop(s->p, s->hold);
        s->hold = NULL;
    }
}

static void as_hold(aslot *s, long long ms, void (*fn)(void *))
{
    as_stop_hold(s);
    s->hold = al_timer_start(s->p, ms, fn, s);
    if (!s->hold)
        violation("c%d: the simulated loop ran out of timers", s->p->c->id);
}

/* The program frees the client from a callback (allowed): every other
 * operation ends from within the call, its holds stop. */
static void as_free_client(aprog *p)
{
    if (p->freed)
        return;
    p->freed = 1;
    tracef("c%d frees its asynchronous client from a callback", p->c->id);
    for (int i = 0; i < p->n; i++) {
        as_stop_hold(&p->s[i]);
        claim_stop(p->s[i].rec);
        p->s[i].kept = 0;
    }
    relock_async_free(p->a);
    for (int i = 0; i < p->n; i++)
        p->s[i].busy = 0;
}

static void as_done(aslot *s)
{
    as_stop_hold(s);
    s->busy = 0;
}

static void as_rel_cb(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                      void *arg)
{
    aslot *s = arg;
    sclient *r = s->rec;
    (void)a;
    tracef("c%d op%d release -> %s%s%s", s->p->c->id, s->i, st_name(st), st == RELOCK_OK ? "" : ": ",
           st == RELOCK_OK ? "" : e->message);
    if (st == RELOCK_LOST)
        /* A claim the release had may end while it is on its way, by a
         * break, a restart or a forward step of the server's clock
         * (claim_stop() took it out of their reach): another operation of
         * this client, whose writes carry the same author, may then take
         * the lock with the same timestamp. */
        check_lost_value(r, s->value, "release", s->had && S.broken_at < s->rel_at,
                         s->had_end);
    if (st == RELOCK_OK) {
        int n = servers_holding(r->sp.lock, s->value, 0, r->owner);
        if (n >= (S.nserv > 1 ? majority() : 1))
            violation("c%d: release returned OK but its value is still in the key on %d of "
                      "%d servers",
                      r->id, n, S.nserv);
    }
    if (l)
        relock_lock_free(l);
    s->l = NULL;
    as_done(s);
    if (s->p->last && s->i == 0 && s->p->c->sp.free_in_cb)
        as_free_client(s->p);
}

/* The holder stops acting, then releases; SAP_FREE frees the handle with
 * the release in flight (its callback then gets NULL). */
static void as_release(aslot *s)
{
    sclient *r = s->rec;
    as_stop_hold(s);
    s->had = r->claim && !r->claim_void && r->claim_end > S.now;
    s->rel_at = S.now;
    s->had_end = r->claim_end;
    claim_stop(r);
    s->kept = 0;
    relock_status st = relock_async_release(s->l, as_rel_cb, s);
    if (st != RELOCK_OK) {
        tracef("c%d op%d release not started: %s: %s", s->p->c->id, s->i, st_name(st),
               relock_async_error(s->p->a)->message);
        relock_lock_free(s->l);
        s->l = NULL;
        as_done(s);
        return;
    }
    if (s->plan == SAP_FREE || s->plan == SAP_KEEP_FREE) {
        tracef("c%d op%d frees its handle with the release in flight", s->p->c->id, s->i);
        relock_lock_free(s->l);
        s->l = NULL;
        /* The last iteration's last such release: the program frees the
         * client at once, from the timer that ended the hold, with the
         * releases (waiting behind renewals, or in flight) unfinished. */
        if (s->plan == SAP_KEEP_FREE && s->p->last && s->p->c->sp.free_in_cb &&
            s->i == s->p->n - 1)
            as_free_client(s->p);
    }
}

static void as_release_fire(void *arg)
{
    aslot *s = arg;
    s->hold = NULL;
    as_release(s);
}

static void as_ext_cb(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                      void *arg)
{
    aslot *s = arg;
    sclient *r = s->rec, *c = s->p->c;
    const sim_client_spec *sp = &c->sp;
    (void)a;
    r->extending = NULL;
    if (!l) { /* cannot happen: the handle is freed only with a release */
        as_done(s);
        return;
    }
    tracef("c%d op%d extend -> %s%s%s value %s valid %lld", c->id, s->i, st_name(st),
           st == RELOCK_OK ? "" : ": ", st == RELOCK_OK ? "" : e->message, relock_lock_value(l),
           relock_lock_validity_ms(l));
    if (st == RELOCK_OK && S.broken_at >= s->t0)
        r->claim_void = 1;
    if (st == RELOCK_OK) {
        if (!r->claim_void) {
            r->claim_end = S.now + real_ms(c, relock_lock_validity_ms(l));
            snprintf(r->claim_value, sizeof r->claim_value, "%s", relock_lock_value(l));
            check_held(r, l, "extend");
            check_replica(r, l, "extend");
        }
        /* A timestamp mode's extend writes a new value: the release and
         * loss checks look for that one. */
        snprintf(s->value, sizeof s->value, "%s", relock_lock_value(l));
    } else if (st == RELOCK_LOST || relock_lock_validity_ms(l) <= 0) {
        if (st == RELOCK_LOST)
            check_lost(r, l, "extend", r->claim, r->claim_end);
        claim_stop(r);
        if (st == RELOCK_LOST && !s->p->stale) {
            /* Lost: the handle is released later, from another callback. */
            s->p->stale = l;
            s->l = NULL;
            as_done(s);
            return;
        }
    } else if (r->claim && !r->claim_void) {
        /* As the blocking client's failed extend (run_relock). */
        long long end = S.now + real_ms(c, relock_lock_validity_ms(l));
        if (end < r->claim_end)
            r->claim_end = end;
        else if (end > r->claim_end + 1)
            violation("c%d: extend failed (%s), but the validity grew to %lld ms", r->id,
                      st_name(st), end - S.now);
        check_kept(r, l, "failed extend");
    }
    as_hold(s, sp->hold_ms - sp->hold_ms / 2, as_release_fire);
}

static void as_extend_fire(void *arg)
{
    aslot *s = arg;
    sclient *r = s->rec, *c = s->p->c;
    s->hold = NULL;
    s->t0 = S.now;
    r->extending = s->l;
    relock_status st = relock_async_extend(s->l, c->sp.extend_ms, as_ext_cb, s);
    if (st != RELOCK_OK) {
        r->extending = NULL;
        tracef("c%d op%d extend not started: %s", c->id, s->i, st_name(st));
        as_hold(s, c->sp.hold_ms - c->sp.hold_ms / 2, as_release_fire);
    }
}

/* The end of the validity relock computed passed with the lock kept: the
 * renewals must have reported the loss by then (decision 284). */
static void keep_deadline_check(aslot *s, const char *when)
{
    sclient *r = s->rec, *c = s->p->c;
    long long slack = 2 * S.sc->tick_ms + 3;
    if (S.now > r->claim_end + slack && c->resume_at <= r->claim_end)
        violation("c%d: op%d's kept lock %s: its validity ended %lld ms ago and it was not "
                  "reported lost (%s)",
                  r->id, s->i, r->sp.lock, S.now - r->claim_end, when);
}

static void as_lost_cb(relock_async *a, relock_lock *l, relock_status why, const relock_error *e,
                       void *arg)
{
    aslot *s = arg;
    sclient *r = s->rec, *c = s->p->c;
    (void)a;
    (void)l;
    tracef("c%d op%d kept lock lost: %s: %s", c->id, s->i, st_name(why), e->message);
    keep_deadline_check(s, "on_lost came late");
    if (why == RELOCK_LOST)
        check_lost_value(r, s->value, "renewal", r->claim, r->claim_end);
    /* A failed renewal is tried again while validity remains: with every
     * fault short beside its margin, one fault cannot lose the lock. */
    if (S.sc->keep_survives && S.r->faults_used <= 1 && S.broken_at < 0 && c->paused == 0)
        violation("c%d: op%d's kept lock %s was reported lost (%s) after %d short fault%s",
                  r->id, s->i, r->sp.lock, st_name(why), S.r->faults_used,
                  S.r->faults_used == 1 ? "" : "s");
    s->lost = 1;
    s->kept = 0;
    claim_stop(r);
    as_release(s); /* from the lost callback: a lost lock's release ends at once */
}

static void as_keep_end(void *arg)
{
    aslot *s = arg;
    s->hold = NULL;
    relock_status st = relock_async_keep_stop(s->l);
    tracef("c%d op%d keep_stop -> %s", s->p->c->id, s->i, st_name(st));
    s->kept = 0;
    as_release(s);
}

/* After each turn: a kept lock's validity as the program reads it.  A
 * renewal that raised it is checked as an extend; one lowered by a failed
 * renewal lowers the claim; past its end the loss must have been told. */
static void keep_watch(aprog *p)
{
    for (int i = 0; i < p->n && !p->freed; i++) {
        aslot *s = &p->s[i];
        sclient *r = s->rec;
        if (!s->kept || s->lost || !s->l || !r->claim)
            continue;
        long long v = relock_lock_validity_ms(s->l);
        long long end = S.now + real_ms(p->c, v);
        if (strcmp(s->value, relock_lock_value(s->l)) != 0) /* a timestamp mode's renewal */
            snprintf(s->value, sizeof s->value, "%s", relock_lock_value(s->l));
        if (v > 0 && end > r->claim_end + 1) {
            r->claim_end = end;
            tracef("c%d op%d renewed: valid %lld ms", p->c->id, i, v);
            if (!r->claim_void)
                check_held(r, s->l, "renewal");
        } else if (v > 0 && end < r->claim_end) {
            r->claim_end = end;
        }
        keep_deadline_check(s, "no on_lost yet");
    }
}

static void as_stale_cb(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                        void *arg)
{
    aprog *p = arg;
    (void)a;
    tracef("c%d release of the lost handle -> %s%s%s", p->c->id, st_name(st),
           st == RELOCK_OK ? "" : ": ", st == RELOCK_OK ? "" : e->message);
    if (st == RELOCK_OK)
        violation("c%d: the release of a lock its extend found lost returned OK", p->c->id);
    if (l)
        relock_lock_free(l);
    if (p->last && p->c->sp.free_in_cb)
        as_free_client(p);
}

static void as_acq_cb(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                      void *arg)
{
    aslot *s = arg;
    aprog *p = s->p;
    sclient *r = s->rec, *c = p->c;
    const sim_client_spec *sp = &c->sp;
    (void)a;
    s->op = NULL;
    long long took = S.now - s->t0 - (c->paused - s->p0);
    tracef("c%d op%d acquire %s -> %s%s%s", c->id, s->i, r->sp.lock, st_name(st),
           st == RELOCK_OK ? "" : ": ", st == RELOCK_OK ? "" : e->message);
    long slack = 8 * (1000 + 1000) + 200;
    if (sp->wait_ms >= 0 && took > sp->wait_ms + slack)
        violation("c%d: acquire with wait %ld ms took %lld ms", r->id, sp->wait_ms, took);
    /* The first operation's callback, whatever its outcome, cancels the
     * last one's acquire while it is still pending, every other iteration
     * (also from within the walk of a connection's queue whose setup
     * failed). */
    if (s->i == 0 && p->n > 2 && p->it % 2 == 0 && p->s[p->n - 1].op && !p->freed) {
        tracef("c%d op0 cancels op%d's acquire from its callback", c->id, p->n - 1);
        relock_async_cancel(p->s[p->n - 1].op);
    }
    /* A lost handle kept from an earlier iteration: released from this
     * callback, while the other acquires' replies may be read with it. */
    if (s->i == 0 && p->stale && !p->freed) {
        relock_lock *old = p->stale;
        p->stale = NULL;
        tracef("c%d op0 releases the lost handle from its callback", c->id);
        if (relock_async_release(old, as_stale_cb, p) != RELOCK_OK)
            relock_lock_free(old);
    }
    if (st != RELOCK_OK) {
        as_done(s);
        return;
    }
    s->l = l;
    snprintf(s->value, sizeof s->value, "%s", relock_lock_value(l));
    claim_begin(r, S.now + real_ms(c, relock_lock_validity_ms(l)), relock_lock_value(l));
    if (S.broken_at >= r->wrote_at || c->epoch != S.epoch || S.stepped_at >= s->t0) {
        r->claim_void = 1;
        tracef("c%d op%d's claim was broken before it returned", c->id, s->i);
    }
    tracef("c%d op%d holds %s value %s fence %lld valid %lld ms", c->id, s->i, r->sp.lock,
           relock_lock_value(l), relock_lock_fence(l), relock_lock_validity_ms(l));
    if (relock_lock_validity_ms(l) > 0 && !r->claim_void) {
        check_overlap(r);
        check_held(r, l, "acquire");
        check_replica(r, l, "acquire");
        check_fence(r, relock_lock_fence(l));
    }
    if (p->freed) { /* cannot happen: free ends acquires unheld */
        claim_stop(r);
        return;
    }
    switch (s->plan) {
    case SAP_QUICK:
        as_release(s);
        break;
    case SAP_KEEP:
    case SAP_KEEP_FREE:
        if (relock_async_keep(l, as_lost_cb, s) == RELOCK_OK)
            s->kept = 1;
        /* Long enough for renewals: two leases and a half at least. */
        as_hold(s, sp->hold_ms > sp->ttl_ms * 5 / 2 ? sp->hold_ms : sp->ttl_ms * 5 / 2,
                s->plan == SAP_KEEP ? as_keep_end : as_release_fire);
        break;
    case SAP_FREE:
        as_hold(s, sp->hold_ms, as_release_fire);
        break;
    default:
        /* Extends hold_ms / 2 after the iteration began (at once when the
         * acquire took longer): operations that got their locks together
         * extend together, one's batch waiting behind the other's. */
        if (sp->extend)
            as_hold(s, s->t0 + sp->hold_ms / 2 > S.now ? s->t0 + sp->hold_ms / 2 - S.now : 0,
                    as_extend_fire);
        else
            as_hold(s, sp->hold_ms, as_release_fire);
        break;
    }
}

static int as_busy(const aprog *p)
{
    for (int i = 0; i < p->n; i++)
        if (p->s[i].busy)
            return 1;
    return 0;
}

/* Turns of the loop until nothing is under way (or until, when >= 0),
 * bounded: a loop that turns without the clock moving is a fault of its
 * own. */
static int as_run(aprog *p, long long until)
{
    long long t = S.now, stuck = 0;
    while (!p->freed && (until >= 0 ? mono_ms() < until : as_busy(p))) {
        al_turn(p, until);
        if (S.violated)
            return -1;
        stuck = S.now == t ? stuck + 1 : 0;
        t = S.now;
        if (stuck > 20000) {
            violation("c%d: the asynchronous client's loop turns without time passing", p->c->id);
            return -1;
        }
        if (S.now > 600000) {
            violation("c%d: the asynchronous client's operations did not end", p->c->id);
            return -1;
        }
    }
    return 0;
}

static void run_async(sclient *c)
{
    const sim_client_spec *sp = &c->sp;
    aprog *p = calloc(1, sizeof *p);
    relock_config *cfg = relock_config_for(c);
    if (!p || !cfg)
        abort();
    p->c = c;
    p->n = sp->ops < 1 ? 1 : sp->ops > AS_OPS ? AS_OPS : sp->ops;
    for (int i = 0; i < p->n; i++) {
        p->s[i].p = p;
        p->s[i].i = i;
        p->s[i].rec = &S.cl[c->id + i];
        if (i > 0 && (c->id + i >= S.ncl || S.cl[c->id + i].sp.kind != SK_SLOT))
            abort(); /* a scenario without the SK_SLOT clients it needs */
    }
    relock_async_loop loop = {
        .size = sizeof loop,
        .version = RELOCK_ASYNC_LOOP_VERSION,
        .data = p,
        .watch = al_watch,
        .timer_start = al_timer_start,
        .timer_stop = al_timer_stop,
    };
    relock_status st = relock_async_new(cfg, &loop, &p->a);
    relock_config_free(cfg);
    if (st != RELOCK_OK) {
        tracef("c%d async new: %s", c->id, st_name(st));
        relock_async_free(p->a);
        free(p);
        return;
    }
    /* As for the blocking client: the backoff's jitter from the run's seed. */
    p->a->c->rng = mix(&c->rng) | 1;
    for (p->it = 0; p->it < sp->iters && !p->freed; p->it++) {
        p->last = p->it == sp->iters - 1;
        c->epoch = S.epoch;
        for (int i = 0; i < p->n; i++) {
            aslot *s = &p->s[i];
            s->plan = sp->plans[(i + p->it) % p->n];
            s->t0 = S.now;
            s->p0 = c->paused;
            s->rec->wrote_at = S.now;
            s->kept = s->lost = 0;
            st = relock_async_acquire(p->a, s->rec->sp.lock, sp->ttl_ms, sp->wait_ms, as_acq_cb, s,
                                      &s->op);
            s->busy = st == RELOCK_OK;
            if (st != RELOCK_OK)
                tracef("c%d op%d acquire not started: %s", c->id, i, st_name(st));
        }
        if (as_run(p, -1) < 0)
            break;
        as_run(p, mono_ms() + 5 + (long long)(mix(&c->rng) % 20));
        if (S.violated)
            break;
    }
    if (S.violated) {
        free(p); /* the client is left as the blocking one's (the run ends) */
        return;
    }
    if (!p->freed) {
        p->freed = 1;
        relock_async_free(p->a);
    }
    for (int i = 0; i < p->n; i++)
        if (p->s[i].l)
            relock_lock_free(p->s[i].l);
    if (p->stale)
        relock_lock_free(p->stale);
    free(p);
}

static void client_main(void)
{
    sclient *c = S.cur;
    FIBER_FINISH(NULL, &sched_bottom, &sched_size);
    if (c->sp.kind != SK_BREAK && c->sp.kind != SK_DEL)
        sim_sleep_ms(c->sp.start_ms, -1);
    switch (c->sp.kind) {
    case SK_RELOCK:
        run_relock(c);
        break;
    case SK_CLASSIC:
        run_classic(c);
        break;
    case SK_ASYNC:
        run_async(c);
        break;
    default:
        run_breaker(c);
        break;
    }
    c->state = ST_DONE;
    FIBER_START(NULL, sched_bottom, sched_size); /* this stack is done with */
    swapcontext(&c->uc, &S.sched);
}

/* ------------------------------------------------------------------ the scheduler */

static const char *fault_name(int f)
{
    static const char *const n[] = {"",           "lost-before", "lost-after", "hold",
                                    "dead-after", "error-reply", "pause",      "clock-step",
                                    "restart",    "dead-idle",   "server-clock-step",
                                    "delay",      "replica",     "refuse",
                                    "loading"};
    return f >= 0 && f < SF_COUNT ? n[f] : "?";
}

/* The faults this command may meet. */
static int fault_menu(const sconn *k, int *menu)
{
    int n = 0;
    menu[n++] = SF_NONE;
    if (S.faults_left <= 0)
        return n;
    const sim_client_spec *sp = &S.sc->c[k->client];
    unsigned mask = S.sc->faults;
    for (int f = 1; f < SF_COUNT; f++) {
        if (!(mask & SF_BIT(f)))
            continue;
        /* The classic pattern has flaws of its own when its process stops
         * or its clock moves (docs/legacy.md): those faults hit relock. */
        if (sp->kind != SK_RELOCK && sp->kind != SK_ASYNC && (f == SF_PAUSE || f == SF_CLOCK))
            continue;
        menu[n++] = f;
    }
    return n;
}

static void flush_push(void)
{
    for (int fd = 0; fd < S.maxfd; fd++) {
        sconn *k = &S.conns[fd];
        if (!k->used || k->dead || k->mconn < 0)
            continue;
        model_conn *mc = &S.ms[k->srv].conns[k->mconn];
        if (mc->push.n) {
            /* Behind the replies still on their way. */
            model_buf_add(k->late.n ? &k->late : &k->out, mc->push.p, mc->push.n);
            mc->push.n = 0;
        }
    }
}

static void describe(const char *p, size_t n, char *out, size_t cap)
{
    int argc;
    const char *argv[MODEL_ARGS];
    size_t len[MODEL_ARGS];
    size_t w = 0;
    out[0] = '\0';
    if (model_parse_command(p, n, &argc, argv, len, MODEL_ARGS) <= 0)
        return;
    for (int i = 0; i < argc && w + 4 < cap; i++) {
        size_t l = len[i] > 44 ? 44 : len[i];
        if ((i == 1 && len[0] == 4 && strncasecmp(argv[0], "EVAL", 4) == 0) ||
            (i == 2 && len[0] == 6 && strncasecmp(argv[0], "SCRIPT", 6) == 0))
            l = 12; /* a script's text: its start is enough */
        int k = snprintf(out + w, cap - w, "%s%.*s%s", i ? " " : "", (int)l, argv[i],
                         l < len[i] ? "..." : "");
        if (k < 0)
            break;
        w += (size_t)k;
        if (w >= cap)
            w = cap - 1;
    }
}

static void reply_text(const model_buf *b, char *out, size_t cap)
{
    size_t n = b->n < cap - 1 ? b->n : cap - 1;
    for (size_t i = 0; i < n; i++)
        out[i] = (b->p[i] == '\r' || b->p[i] == '\n') ? ' ' : b->p[i];
    out[n] = '\0';
}

/* Server sv restarts.  Every claim ends, also over a quorum, where a
 * restart without persistence lets a second majority form at once (the
 * limit design.md §9.1 states for its scheme). */
static void restart_server(int sv)
{
    tracef("server s%d restarts without persistence", sv);
    model_flush(&S.ms[sv]);
    for (int fd = 0; fd < S.maxfd; fd++)
        if (S.conns[fd].used && S.conns[fd].srv == sv)
            kill_conn(&S.conns[fd], "server restarted");
    for (int i = 0; i < S.ncl; i++)
        if (S.cl[i].claim && S.cl[i].claim_end > S.now && !S.cl[i].claim_void) {
            S.cl[i].claim_void = 1;
            tracef("c%d's claim is forgotten by the restart", i);
        }
    S.nfence = 0; /* counters start again: fences are compared within an epoch */
    S.broken_at = S.now;
    S.epoch++;
}

/* Runs the first pending command of connection fd with fault f. */
static void exec_one(int fd, int f)
{
    sconn *k = &S.conns[fd];
    sclient *c = &S.cl[k->client];
    int argc;
    const char *argv[MODEL_ARGS];
    size_t len[MODEL_ARGS];
    char what[200], rep[120];
    long used = model_parse_command(k->in.p + k->in_off, k->in.n - k->in_off, &argc, argv, len,
                                    MODEL_ARGS);
    c->cmds++;
    what[0] = rep[0] = '\0';
    if (S.tracing) /* the words and the reply are for the trace alone */
        describe(k->in.p + k->in_off, k->in.n - k->in_off, what, sizeof what);
    if (f == SF_CLOCK) {
        c->skew += S.sc->clock_step_ms;
        tracef("c%d's wall clock steps %+ld ms", c->id, S.sc->clock_step_ms);
        f = SF_NONE;
    }
    if (f == SF_REPLICA) {
        model *m = &S.ms[k->srv];
        model_replica_set(m, !m->replica_down);
        tracef("s%d's replicas %s", k->srv, m->replica_down ? "go down" : "come back");
        f = SF_NONE;
    }
    if (f == SF_SERVER_CLOCK) {
        long long *skew = &S.srv_skew[k->srv];
        long long step = *skew ? -*skew : S.sc->server_step_ms;
        *skew += step;
        tracef("s%d's wall clock steps %+lld ms", k->srv, step);
        /* A forward step ends every lease early, by the server's expiry and
         * by the timestamps every client reads: a stated limit
         * (docs/legacy.md), not a fault of the holder's. */
        if (step > 0) {
            for (int i = 0; i < S.ncl; i++)
                if (S.cl[i].sp.lock)
                    void_claims(S.cl[i].sp.lock, "the server's clock stepped forward");
            /* Also the leases being written: planned on the clock read
             * before the step, granted after it. */
            S.broken_at = S.now;
            S.stepped_at = S.now;
        }
        f = SF_NONE;
    }
    if (f == SF_NONE && (S.sc->slow >> k->srv) & 1u)
        f = SF_DELAY; /* a slow server: not counted as a fault */
    if (f == SF_RESTART) {
        restart_server(k->srv);
        k->in_off += (size_t)used;
        tracef("c%d %s: never ran (server restarted)", c->id, what);
        return;
    }
    k->in_off += (size_t)used;
    if (k->in_off == k->in.n)
        k->in_off = k->in.n = 0;
    if (f == SF_REFUSE) {
        S.refuse_until[k->srv] = S.now + S.sc->refuse_ms;
        tracef("s%d refuses connections for %ld ms", k->srv, S.sc->refuse_ms);
    }
    if (f == SF_LOADING) {
        S.loading_until[k->srv] = S.now + S.sc->refuse_ms;
        tracef("s%d answers -LOADING for %ld ms", k->srv, S.sc->refuse_ms);
    }
    if (f == SF_LOST_BEFORE || f == SF_REFUSE || f == SF_LOADING) {
        tracef("c%d %s: lost before it ran", c->id, what);
        kill_conn(k, "fault");
        return;
    }
    model_buf reply = {0};
    if (f == SF_ERROR || S.now < S.loading_until[k->srv]) {
        model_buf_add(&reply, "-LOADING Redis is loading the dataset in memory\r\n", 49);
    } else {
        model *m = &S.ms[k->srv];
        m->now_ms = S.wall0 + S.now + S.srv_skew[k->srv];
        m->reply_delay_ms = 0;
        model_exec(m, k->mconn, argc, argv, len, &reply);
    }
    /* The server holds the reply back (WAIT short of replicas). */
    long long held = S.ms[k->srv].reply_delay_ms;
    S.ms[k->srv].reply_delay_ms = 0;
    if (S.tracing)
        reply_text(&reply, rep, sizeof rep);
    char on[8] = "";
    if (S.nserv > 1)
        snprintf(on, sizeof on, "s%d ", k->srv);
    tracef("c%d %s%s -> %s%s%s", c->id, on, what, rep, f ? "  [fault: " : "",
           f ? fault_name(f) : "");
    if (f == SF_ERROR)
        tracef("  [fault: error-reply]");
    if (f == SF_LOST_AFTER) {
        kill_conn(k, "fault");
    } else if (f == SF_HOLD) {
        k->hold_until = S.now + 1000;
        if (k->mconn >= 0)
            model_conn_close(&S.ms[k->srv], k->mconn);
        k->mconn = -1;
    } else if (f == SF_DELAY || k->late.n || held > 0) {
        /* On its way, behind any reply delayed before it. */
        if (!k->late.n)
            k->late_at = S.now + (f == SF_DELAY ? S.sc->delay_ms : 0);
        if (held > 0 && k->late_at < S.now + held)
            k->late_at = S.now + held;
        model_buf_add(&k->late, reply.p, reply.n);
    } else {
        model_buf_add(&k->out, reply.p, reply.n);
        if (f == SF_DEAD_AFTER || f == SF_DEAD_IDLE)
            kill_conn(k, "fault after the reply");
    }
    /* The client stops after the reply: for the lease (pause), or long
     * enough for its idle check to look at the dead connection. */
    if (f == SF_PAUSE || f == SF_DEAD_IDLE) {
        long long ms = f == SF_PAUSE ? S.sc->pause_ms : 250;
        c->resume_at = S.now + ms;
        c->paused += ms;
        if (c->state == ST_SLEEP && c->wake < c->resume_at)
            c->wake = c->resume_at; /* in poll(): it looks again when it wakes */
        tracef("c%d stops for %lld ms", c->id, ms);
    }
    model_buf_free(&reply);
    flush_push();
}

/* A fault the scenario places on this command, or -1. */
static int forced(int fd)
{
    sconn *k = &S.conns[fd];
    char what[200];
    describe(k->in.p + k->in_off, k->in.n - k->in_off, what, sizeof what);
    for (int i = 0; i < S.sc->nforce && i < 4; i++) {
        if (!S.forced_done[i] && S.sc->force[i].client == k->client &&
            strstr(what, S.sc->force[i].match)) {
            S.forced_done[i] = 1;
            return S.sc->force[i].fault;
        }
    }
    return -1;
}

/* A client's record; 0 when it runs a program (start_clients gives it a
 * coroutine), 1 for an SK_SLOT, which runs none. */
static int client_init(int i)
{
    sclient *c = &S.cl[i];
    memset(c, 0, sizeof *c);
    c->id = i;
    c->owner = i;
    c->sp = S.sc->c[i];
    if (c->sp.kind != SK_SLOT)
        return 0;
    /* An asynchronous client's further operation: its clocks and settings,
     * its own lock; no program of its own. */
    int o = i;
    while (o > 0 && S.sc->c[o].kind == SK_SLOT)
        o--;
    const char *lock = c->sp.lock;
    c->owner = o;
    c->sp = S.sc->c[o];
    c->sp.kind = SK_SLOT;
    c->sp.lock = lock ? lock : S.sc->c[o].lock;
    c->skew = c->sp.skew_ms;
    c->state = ST_DONE;
    return 1;
}

/* A client with a program of its own: its coroutine. */
static void client_start(int i)
{
    sclient *c = &S.cl[i];
    c->skew = c->sp.skew_ms;
    c->nwait = 0;
    c->rng = S.o->seed * 1000003u + (uint64_t)i * 7919u + 1;
    c->stack = malloc(STACK_SIZE);
    if (!c->stack)
        abort();
    getcontext(&c->uc);
    c->uc.uc_stack.ss_sp = c->stack;
    c->uc.uc_stack.ss_size = STACK_SIZE;
    c->uc.uc_link = NULL;
    makecontext(&c->uc, client_main, 0);
    /* makecontext was the size's only reader.  AddressSanitizer's
     * swapcontext clears the shadow of the size given here at every
     * switch into the client (an mmap and two madvise calls for these
     * 512 KB, which made the sanitizer build's sim_short 15 times
     * slower than the normal one); the fiber calls above already tell
     * it which stack runs, and a client's frames are only left behind
     * when it never finishes, after a violation. */
    c->uc.uc_stack.ss_size = 0;
    c->state = ST_NEW;
}

static void start_clients(void)
{
    for (int i = 0; i < S.ncl; i++)
        if (!client_init(i))
            client_start(i);
}

/* Replies delayed (SF_DELAY) whose time came reach their clients; the
 * earliest still on its way, or -1. */
static long long deliver_late(void)
{
    long long next = -1;
    for (int fd = 0; fd < S.maxfd; fd++) {
        sconn *k = &S.conns[fd];
        if (!k->used || !k->late.n)
            continue;
        if (k->late_at <= S.now) {
            if (!k->dead)
                model_buf_add(&k->out, k->late.p, k->late.n);
            k->late.n = 0;
        } else if (next < 0 || k->late_at < next) {
            next = k->late_at;
        }
    }
    return next;
}

/* Resumes every client that can go on without the server: new ones,
 * sleepers whose time came, pollers with data. */
static int wake_due(void)
{
    int any = 0;
    for (int again = 1; again;) {
        again = 0;
        for (int i = 0; i < S.ncl; i++) {
            sclient *c = &S.cl[i];
            int go = c->state == ST_NEW || (c->state == ST_SLEEP && c->wake <= S.now);
            /* Data on a descriptor it waits on (not while paused). */
            for (int j = 0; !go && (c->state == ST_SLEEP || c->state == ST_READ) &&
                            c->resume_at <= S.now && j < c->nwait;
                 j++) {
                sconn *k = sim_conn(c->wait_fds[j]);
                go = !k || k->out_off < k->out.n || k->dead;
            }
            if (go) {
                resume(c);
                again = any = 1;
            }
        }
    }
    return any;
}

int sim_run(const sim_scenario *sc, const sim_opts *o, sim_result *r, int quiet)
{
    memset(r, 0, sizeof *r);
    memset(&S, 0, sizeof S);
    S.sc = sc;
    S.o = o;
    S.r = r;
    S.quiet = quiet;
    S.tracing = o->trace || !quiet;
    S.rng = o->seed * 0x2545F4914F6CDD1DULL + 17;
    S.faults_left = o->max_faults;
    S.broken_at = -1;
    S.stepped_at = -1;
    S.ncl = sc->nclients;
    model_personality p;
    if (model_personality_parse(sc->personality, &p) != 0) {
        fprintf(stderr, "sim: unknown personality %s\n", sc->personality);
        return -1;
    }
    /* The phase of the clock within a second matters to timestamps. */
    S.wall0 = WALL_BASE + (long long)(mix(&S.rng) % 1000);
    if (sc->phase_ms > 0)
        S.wall0 = WALL_BASE + sc->phase_ms % 1000;
    S.ms = models;
    S.nserv = sc->servers > 1 ? (sc->servers < SIM_SERVERS ? sc->servers : SIM_SERVERS) : 1;
    for (int i = 0; i < S.nserv; i++) {
        model_init(&S.ms[i], &p, S.wall0);
        S.ms[i].replicas = sc->replicas;
        S.ms[i].on_write = on_write;
        S.ms[i].on_read = on_read;
        S.ms[i].down = (sc->down >> i) & 1u;
    }
    tracef("scenario %s on %s, seed %llu, wall clock %lld", sc->name, sc->personality,
           (unsigned long long)o->seed, S.wall0);
    start_clients();
    long max_steps = o->max_steps > 0 ? o->max_steps : 3000;
    long guard = 0;
    for (;;) {
        if (++guard > 200000) {
            violation("the run did not end (livelock?)");
            break;
        }
        long long late = deliver_late();
        wake_due();
        int done = 1;
        for (int i = 0; i < S.ncl; i++)
            if (S.cl[i].state != ST_DONE)
                done = 0;
        if (done)
            break;
        /* The commands that can run now, in descriptor order. */
        int ready[64], nready = 0;
        long long next = -1;
        for (int fd = 0; fd < S.maxfd && nready < 64; fd++) {
            sconn *k = &S.conns[fd];
            if (!k->used || k->dead || k->hold_until || pending_cmds(k) == 0)
                continue;
            /* By connection order, whatever the descriptors' numbers. */
            int j = nready++;
            while (j > 0 && S.conns[ready[j - 1]].seq > k->seq) {
                ready[j] = ready[j - 1];
                j--;
            }
            ready[j] = fd;
        }
        if (nready == 0) {
            for (int i = 0; i < S.ncl; i++)
                if (S.cl[i].state == ST_SLEEP && (next < 0 || S.cl[i].wake < next))
                    next = S.cl[i].wake;
            if (late >= 0 && (next < 0 || late < next))
                next = late;
            if (next < 0) {
                violation("deadlock: no client can go on");
                break;
            }
            if (next > S.now)
                S.now = next;
            continue;
        }
        if (r->steps >= max_steps)
            S.draining = 1;
        int pick = nready > 1 ? choose(nready, 0) : 0;
        int fd = ready[pick];
        int menu[SF_COUNT];
        int nf = fault_menu(&S.conns[fd], menu);
        int f = forced(fd);
        if (f < 0 && o->fault_step >= 0) {
            f = SF_NONE;
            if (r->steps == o->fault_step)
                for (int i = 1; i < nf; i++)
                    if (menu[i] == o->fault_kind)
                        f = o->fault_kind;
        } else if (f < 0) {
            f = menu[nf > 1 ? choose(nf, 1) : 0];
        }
        if (f != SF_NONE) {
            S.faults_left--;
            r->faults_used++;
        }
        exec_one(fd, f);
        r->steps++;
        S.now += sc->tick_ms;
        sclient *c = &S.cl[S.conns[fd].client];
        if (c->state == ST_READ && c->nwait == 1 && c->wait_fds[0] == fd) {
            if (c->resume_at > S.now) {
                c->state = ST_SLEEP; /* read() looks again when it wakes */
                c->wake = c->resume_at;
                c->nwait = 0;
            } else {
                resume(c);
            }
        }
    }
    if (!S.violated && sc->no_orphans)
        check_orphans();
    /* Clients that did not finish (only after a violation) are left. */
    for (int i = 0; i < S.ncl; i++) {
        if (S.cl[i].state == ST_DONE && S.cl[i].stack)
            free(S.cl[i].stack);
    }
    for (int fd = 0; fd < S.maxfd; fd++) {
        if (S.conns[fd].used) {
            if (!S.violated)
                violation("c%d left a connection open", S.conns[fd].client);
            model_buf_free(&S.conns[fd].in);
            model_buf_free(&S.conns[fd].out);
            model_buf_free(&S.conns[fd].late);
        }
    }
    for (int s = 0; s < S.nserv; s++) {
        for (int i = 0; i < MODEL_CONNS; i++)
            if (S.ms[s].conns[i].open)
                model_conn_close(&S.ms[s], i);
        r->commands += S.ms[s].commands;
    }
    r->violation = S.violated;
    if ((o->trace || (S.violated && !quiet)) && S.trace.n)
        fwrite(S.trace.p, 1, S.trace.n, stdout);
    model_buf_free(&S.trace);
    return S.violated;
}
