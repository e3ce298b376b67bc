/*
 * conn: the per-connection relay (see conn.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* ppoll, SOCK_NONBLOCK */
#endif

#include "conn.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "control.h"
#include "counters.h"
#include "faults.h"
#include "log.h"
#include "native.h"
#include "replyfix.h"
#include "resp.h"
#include "volatile20.h"

/* Stop reading from a side while this much waits to go the other way, so
 * a peer that does not read cannot make the proxy buffer without end. */
#define OUT_LIMIT ((size_t)16 * 1024 * 1024)
/* Slack allowed to the kernel when it ends a timed wait, in ns (see
 * lower_timer_slack). */
#define TIMER_SLACK_NS 1000UL
/* Commands waiting for their reply before the proxy stops reading more. */
#define MAX_PENDING 65536
/* Fixes remembered for commands queued inside one MULTI. */
#define MAX_QUEUED ((size_t)1 << 20)
#define READ_CHUNK ((size_t)64 * 1024)
#define CONNECT_TIMEOUT_MS 5000
#define WRITEV_MAX 64

enum entry_kind { E_FORWARD, E_LOCAL, E_INTERNAL };

enum entry_flags {
    EF_FAULTABLE = 1 << 0, /* the reply stands for a server reply */
    EF_QUEUEABLE = 1 << 1, /* sent inside MULTI: "+QUEUED" is expected */
    EF_EXEC = 1 << 2,      /* the reply is an EXEC result */
    EF_DISCARD = 1 << 3,   /* the reply ends a transaction without result */
    EF_SUBSCRIBE = 1 << 4, /* answered by subscription confirmations */
    EF_REPLACE = 1 << 5,   /* forwarded, but the client gets `local` */
    EF_CLOSE = 1 << 6,     /* close the connection after this reply */
    EF_STARTED = 1 << 7,   /* a first confirmation was already relayed */
    EF_CMDINFO = 1 << 8,   /* COMMAND INFO: `local` holds the plan (native.h) */
    EF_CMDDOCS = 1 << 9,   /* COMMAND DOCS: likewise */
    EF_SHA_SET = 1 << 10,  /* internal SCRIPT LOAD of the native set script */
    EF_SHA_DEL = 1 << 11,  /* ... of the native delete script */
    EF_NATIVE = 1 << 12    /* a native command sent as the proxy's script */
};

struct entry {
    unsigned char kind;
    unsigned char fix;    /* FIX_* to apply to the reply */
    unsigned short flags; /* EF_* */
    size_t subs;          /* confirmations still expected (EF_SUBSCRIBE) */
    char *local;          /* E_LOCAL / EF_REPLACE: the reply to send */
    size_t local_len;
};

struct outitem {
    struct outitem *next;
    long long release_us; /* not before this (CLOCK_MONOTONIC, us) */
    size_t len;
    size_t pos;           /* bytes already written */
    unsigned char close_before;
    unsigned char close_after;
    char data[];
};

enum emit_mode {
    EMIT_REPLY, /* a reply: delay, and the close faults are drawn */
    EMIT_PUSH,  /* pub/sub and the like: delay only */
    EMIT_PLAIN  /* control replies: no fault at all */
};

struct conn {
    const proxy_ctx *ctx;
    const personality *pp;
    int cfd;
    int ufd;
    pbuf cin;  /* from the client, not yet parsed */
    pbuf uin;  /* from upstream, not yet framed */
    pbuf uout; /* to upstream, not yet written */
    pbuf tmp;  /* rewritten replies are built here */
    cmd_parser parser;
    resp_scan scan;
    /* FIFO of commands waiting for their reply (ring) */
    struct entry *q;
    size_t qcap;
    size_t qhead;
    size_t qcount;
    /* bytes waiting to be written to the client */
    struct outitem *ohead;
    struct outitem *otail;
    size_t obytes;
    /* transaction and subscription state */
    int in_multi;
    unsigned char *execfix;
    size_t nexec;
    size_t execcap;
    int exec_overflow;
    long long subs_normal;
    long long subs_shard;
    /* life cycle */
    int upstream_eof;
    int proto_error; /* a protocol error reply is queued: read no more */
    int closing;     /* a fault close is queued: read no more */
    /* When the last read returned (us): everything read so far had
     * arrived by then, so delays count from that moment. */
    long long read_us;
    /* the native scripts' SHA-1 on this upstream connection (native.h) */
    native_shas shas;
    /* faults */
    fault_settings faults;
    unsigned fault_gen;
    fault_rng rng;
};

/* Microseconds: delays are as short as a network round trip between hosts
 * (100-1000 us), which whole milliseconds would round away. */
static long long now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* poll() for at most wait_us microseconds, or without limit when wait_us is
 * negative.  ppoll() because poll()'s whole milliseconds would hold a
 * 250 us delay for 1 ms, or spin on a timeout of 0 until it falls due. */
static int wait_events(struct pollfd *pf, nfds_t n, long long wait_us)
{
    struct timespec ts;

    if (wait_us < 0)
        return ppoll(pf, n, NULL, NULL);
    ts.tv_sec = (time_t)(wait_us / 1000000);
    ts.tv_nsec = (long)(wait_us % 1000000) * 1000;
    return ppoll(pf, n, &ts, NULL);
}

/* Linux may end a timed wait up to the thread's timer slack late: 50 us by
 * default, a fifth of a 250 us delay.  The slack belongs to each thread, so
 * every connection thread lowers its own.  Failure only costs precision. */
static void lower_timer_slack(void)
{
    (void)prctl(PR_SET_TIMERSLACK, TIMER_SLACK_NS, 0UL, 0UL, 0UL);
}

/* Pick up changed fault settings; a change also reseeds (see faults.h). */
static void refresh_faults(struct conn *c)
{
    if (faults_generation() == c->fault_gen)
        return;
    faults_get(&c->faults);
    c->fault_gen = c->faults.gen;
    fault_rng_seed(&c->rng, c->faults.seed);
}

/* ---- the FIFO of pending commands ---- */

static struct entry *q_front(struct conn *c)
{
    return c->qcount ? &c->q[c->qhead] : NULL;
}

static void q_pop(struct conn *c)
{
    struct entry *e = &c->q[c->qhead];

    free(e->local);
    e->local = NULL;
    c->qhead = (c->qhead + 1) % c->qcap;
    c->qcount--;
}

/* Append an entry (takes a copy of local).  Returns 0 or -1. */
static int q_push(struct conn *c, unsigned char kind, unsigned char fix,
                  unsigned short flags, size_t subs, const char *local,
                  size_t local_len)
{
    struct entry *e;

    if (c->qcount == c->qcap) {
        size_t ncap = c->qcap ? c->qcap * 2 : 64;
        struct entry *nq = malloc(ncap * sizeof(*nq));
        size_t i;

        if (nq == NULL)
            return -1;
        for (i = 0; i < c->qcount; i++)
            nq[i] = c->q[(c->qhead + i) % c->qcap];
        free(c->q);
        c->q = nq;
        c->qcap = ncap;
        c->qhead = 0;
    }
    e = &c->q[(c->qhead + c->qcount) % c->qcap];
    memset(e, 0, sizeof(*e));
    e->kind = kind;
    e->fix = fix;
    e->flags = flags;
    e->subs = subs;
    if (local_len > 0) {
        e->local = malloc(local_len);
        if (e->local == NULL)
            return -1;
        memcpy(e->local, local, local_len);
        e->local_len = local_len;
    }
    c->qcount++;
    return 0;
}

/* ---- fixes remembered for queued commands ---- */

static void execfix_push(struct conn *c, unsigned char fix)
{
    if (c->nexec == c->execcap) {
        size_t ncap = c->execcap ? c->execcap * 2 : 32;
        unsigned char *n;

        if (ncap > MAX_QUEUED) {
            c->exec_overflow = 1;
            return;
        }
        n = realloc(c->execfix, ncap);
        if (n == NULL) {
            c->exec_overflow = 1;
            return;
        }
        c->execfix = n;
        c->execcap = ncap;
    }
    c->execfix[c->nexec++] = fix;
}

static void execfix_clear(struct conn *c)
{
    c->nexec = 0;
    c->exec_overflow = 0;
}

/* ---- output to the client ---- */

/* Queue bytes for the client.  Returns 0 or -1 (out of memory). */
static int emit(struct conn *c, const char *p, size_t n, enum emit_mode mode,
                int force_close_after)
{
    struct outitem *it;
    /* From the read, not from now: replies that arrived together leave
     * together, however long the proxy took to handle them. */
    long long release = c->read_us;
    int cb = 0;
    int ca = force_close_after;

    if (n == 0)
        return 0;
    if (mode != EMIT_PLAIN) {
        refresh_faults(c);
        release += c->faults.delay_us;
    }
    if (mode == EMIT_REPLY) {
        /* Draw only for settings in use, so that turning one fault on
         * does not shift the sequence of the other. */
        if (c->faults.p_before > 0.0 && fault_rng_next(&c->rng) < c->faults.p_before)
            cb = 1;
        if (c->faults.p_after > 0.0 && fault_rng_next(&c->rng) < c->faults.p_after)
            ca = 1;
        at_fault at;
        faults_count_reply(&at);
        if (at.fire) {
            release += at.hold_us;
            if (at.kind == AT_CLOSE_AFTER)
                ca = 1;
            else if (at.kind == AT_CLOSE_BEFORE)
                cb = 1;
        }
    }
    it = malloc(sizeof(*it) + n);
    if (it == NULL)
        return -1;
    it->next = NULL;
    it->release_us = release;
    it->len = n;
    it->pos = 0;
    it->close_before = (unsigned char)cb;
    it->close_after = (unsigned char)ca;
    memcpy(it->data, p, n);
    if (c->otail)
        c->otail->next = it;
    else
        c->ohead = it;
    c->otail = it;
    c->obytes += n;
    if (cb || ca)
        c->closing = 1;
    return 0;
}

/* Release local replies that have nothing older outstanding. */
static int flush_locals(struct conn *c)
{
    struct entry *e = q_front(c);

    /* Bounded by the queue length. */
    while (e != NULL && e->kind == E_LOCAL) {
        enum emit_mode mode = (e->flags & EF_FAULTABLE) ? EMIT_REPLY : EMIT_PLAIN;

        if (emit(c, e->local, e->local_len, mode, (e->flags & EF_CLOSE) != 0) < 0)
            return -1;
        q_pop(c);
        e = q_front(c);
    }
    return 0;
}

/*
 * Write what is due.  Returns 0, or -1 when the connection is to close
 * (a fault, or the client went away).
 */
static int write_client(struct conn *c)
{
    long long now = now_us();
    int rounds;

    /* Each round writes or gives up; at most WRITEV_MAX * 64 items. */
    for (rounds = 0; rounds < 64 && c->ohead != NULL; rounds++) {
        struct iovec iov[WRITEV_MAX];
        struct outitem *it = c->ohead;
        int n = 0;
        ssize_t w;

        if (it->release_us > now)
            return 0;
        if (it->close_before)
            return -1; /* the upstream has applied the command: ambiguous */
        while (it != NULL && n < WRITEV_MAX && it->release_us <= now &&
               !it->close_before) {
            iov[n].iov_base = it->data + it->pos;
            iov[n].iov_len = it->len - it->pos;
            n++;
            if (it->close_after)
                break;
            it = it->next;
        }
        w = writev(c->cfd, iov, n);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            if (errno == EINTR)
                continue;
            return -1;
        }
        while (w > 0 && c->ohead != NULL) { /* bounded by n items */
            struct outitem *h = c->ohead;
            size_t take = h->len - h->pos;

            if ((size_t)w < take)
                take = (size_t)w;
            h->pos += take;
            w -= (ssize_t)take;
            c->obytes -= take;
            if (h->pos == h->len) {
                int close_now = h->close_after;

                c->ohead = h->next;
                if (c->ohead == NULL)
                    c->otail = NULL;
                free(h);
                if (close_now)
                    return -1;
            }
        }
        if (c->ohead != NULL && c->ohead->pos > 0)
            return 0; /* partial write: the socket is full */
    }
    return 0;
}

static int write_upstream(struct conn *c)
{
    /* Bounded: each pass writes something or returns. */
    while (pbuf_used(&c->uout) > 0) {
        ssize_t w = send(c->ufd, pbuf_head(&c->uout), pbuf_used(&c->uout),
                         MSG_NOSIGNAL);

        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            if (errno == EINTR)
                continue;
            return -1;
        }
        pbuf_consume(&c->uout, (size_t)w);
    }
    return 0;
}

/* ---- replies from upstream ---- */

enum ps_kind { PS_NONE, PS_MESSAGE, PS_CONFIRM, PS_CONFIRM_SHARD };

static int bulk_is(const char *s, size_t n, const char *word)
{
    size_t k = strlen(word);

    return n == k && memcmp(s, word, k) == 0;
}

/* Recognise pub/sub traffic: messages and subscription confirmations
 * (RESP2 arrays, or RESP3 pushes), with the subscription count the
 * confirmations carry. */
static enum ps_kind pubsub_kind(const char *p, size_t n, long long *count)
{
    long long elems;
    size_t first;
    size_t flen;
    size_t slen;
    const char *s;

    if (resp_aggregate(p, n, &elems, &first) < 0 || elems < 3)
        return PS_NONE;
    flen = resp_reply_len(p + first, n - first);
    if (flen == 0 || resp_bulk(p + first, flen, &s, &slen) < 0)
        return PS_NONE;
    if (bulk_is(s, slen, "message") || bulk_is(s, slen, "pmessage") ||
        bulk_is(s, slen, "smessage"))
        return PS_MESSAGE;
    if (elems != 3)
        return PS_NONE;
    if (bulk_is(s, slen, "subscribe") || bulk_is(s, slen, "unsubscribe") ||
        bulk_is(s, slen, "psubscribe") || bulk_is(s, slen, "punsubscribe") ||
        bulk_is(s, slen, "ssubscribe") || bulk_is(s, slen, "sunsubscribe")) {
        size_t at = first + flen;
        size_t l2 = resp_reply_len(p + at, n - at);

        if (l2 == 0)
            return PS_NONE;
        at += l2;
        if (resp_integer(p + at, n - at, count) < 0)
            return PS_NONE;
        return bulk_is(s, slen, "ssubscribe") || bulk_is(s, slen, "sunsubscribe")
                   ? PS_CONFIRM_SHARD
                   : PS_CONFIRM;
    }
    return PS_NONE;
}

static int is_queued(const char *p, size_t n)
{
    return n == 9 && memcmp(p, "+QUEUED\r\n", 9) == 0;
}

/* Relay one complete upstream reply.  Returns 0 or -1 (fatal). */
static int on_reply(struct conn *c, const char *p, size_t n)
{
    struct entry *e = q_front(c);
    int subscribed = c->subs_normal + c->subs_shard > 0;
    int r;

    if (p[0] == '>' || (p[0] == '*' && (subscribed || (e && (e->flags & EF_SUBSCRIBE))))) {
        long long count = 0;
        enum ps_kind k = pubsub_kind(p, n, &count);

        if (k == PS_MESSAGE && (p[0] == '>' || subscribed))
            return emit(c, p, n, EMIT_PUSH, 0);
        if (k == PS_CONFIRM || k == PS_CONFIRM_SHARD) {
            if (k == PS_CONFIRM)
                c->subs_normal = count;
            else
                c->subs_shard = count;
            if (e != NULL && e->kind == E_FORWARD && (e->flags & EF_SUBSCRIBE)) {
                enum emit_mode mode = EMIT_PUSH;

                /* Faults are drawn once per command, on its first reply. */
                if (!(e->flags & EF_STARTED) && (e->flags & EF_FAULTABLE))
                    mode = EMIT_REPLY;
                e->flags |= EF_STARTED;
                if (emit(c, p, n, mode, 0) < 0)
                    return -1;
                if (e->subs > 0)
                    e->subs--;
                if (e->subs == 0)
                    q_pop(c);
                return flush_locals(c);
            }
            /* UNSUBSCRIBE without arguments confirms each channel. */
            return emit(c, p, n, EMIT_PUSH, 0);
        }
        if (p[0] == '>')
            return emit(c, p, n, EMIT_PUSH, 0);
    }
    if (e == NULL) /* MONITOR output, or a reply nobody waits for */
        return emit(c, p, n, EMIT_PUSH, 0);
    if (e->kind == E_INTERNAL) {
        const char *sv;
        size_t sl;

        /* SCRIPT LOAD of a native script: its SHA-1, or nothing when the
         * server refused it (say, before AUTH): then EVAL it stays. */
        if ((e->flags & (EF_SHA_SET | EF_SHA_DEL)) && resp_bulk(p, n, &sv, &sl) == 0 &&
            sl == 40) {
            char *dst = (e->flags & EF_SHA_SET) ? c->shas.set : c->shas.del;

            memcpy(dst, sv, 40);
            dst[40] = '\0';
        }
        /* Inside MULTI the internal command's result will be an element
         * of the EXEC reply: remember to drop it there. */
        if ((e->flags & EF_QUEUEABLE) && is_queued(p, n))
            execfix_push(c, FIX_DROP);
        q_pop(c);
        return flush_locals(c);
    }
    if (e->flags & EF_REPLACE) {
        r = emit(c, e->local, e->local_len, EMIT_REPLY, 0);
    } else if ((e->flags & EF_NATIVE) && n > 9 && memcmp(p, "-NOSCRIPT", 9) == 0) {
        /* The server lost the proxy's script (SCRIPT FLUSH by someone):
         * the command did not run.  Said so; from now on EVAL. */
        static const char gone[] = "-ERR relock-proxy: the proxy's script was flushed from "
                                   "the server (NOSCRIPT); the command did not run\r\n";

        memset(&c->shas, 0, sizeof(c->shas));
        r = emit(c, gone, sizeof(gone) - 1, EMIT_REPLY, 0);
    } else if ((e->flags & (EF_CMDINFO | EF_CMDDOCS)) && e->local != NULL) {
        pbuf_clear(&c->tmp);
        r = native_command_reply((e->flags & EF_CMDDOCS) != 0, e->local, p, n, &c->tmp);
        if (r < 0)
            return -1;
        r = r == 1 ? emit(c, pbuf_head(&c->tmp), pbuf_used(&c->tmp), EMIT_REPLY, 0)
                   : emit(c, p, n, EMIT_REPLY, 0);
    } else if ((e->flags & EF_QUEUEABLE) && is_queued(p, n)) {
        execfix_push(c, e->fix);
        r = emit(c, p, n, EMIT_REPLY, 0);
    } else {
        pbuf_clear(&c->tmp);
        if (e->flags & EF_EXEC) {
            r = c->exec_overflow ? 0
                                 : replyfix_exec(c->pp, c->execfix, c->nexec, p, n, &c->tmp);
            execfix_clear(c);
        } else {
            r = replyfix_apply(c->pp, e->fix, p, n, &c->tmp);
        }
        if (r < 0)
            return -1;
        if (r == 1)
            r = emit(c, pbuf_head(&c->tmp), pbuf_used(&c->tmp), EMIT_REPLY, 0);
        else
            r = emit(c, p, n, EMIT_REPLY, 0);
    }
    if (r < 0)
        return -1;
    if (e->flags & EF_DISCARD)
        execfix_clear(c);
    q_pop(c);
    return flush_locals(c);
}

/* ---- commands from the client ---- */

static int is_subscribe_family(const proxy_arg *a)
{
    return arg_is(a, "SUBSCRIBE") || arg_is(a, "PSUBSCRIBE") ||
           arg_is(a, "SSUBSCRIBE") || arg_is(a, "UNSUBSCRIBE") ||
           arg_is(a, "PUNSUBSCRIBE") || arg_is(a, "SUNSUBSCRIBE");
}

/* Send argv upstream: the client's own bytes when it used multibulk,
 * re-encoded when it used the inline form. */
static int forward(struct conn *c, const proxy_arg *argv, size_t argc,
                   const char *raw, size_t rawlen)
{
    if (raw != NULL)
        return pbuf_append(&c->uout, raw, rawlen);
    return resp_add_command(&c->uout, argv, argc);
}

static int refuse(struct conn *c, const gate_result *g, int counted)
{
    /* A refused command never reaches the server.  From 2.6.5 on, a
     * command refused while queueing also made EXEC fail
     * (EXECABORT); the real server only does that for commands it sees,
     * so a command it certainly does not know is sent in its place and its
     * error is replaced by the old server's.  Before 2.6.5 the transaction
     * went on without the refused command, which needs nothing sent. */
    static const proxy_arg poison = {"RELOCK-PROXY-REFUSED-IN-MULTI", 29};

    pbuf_clear(&c->tmp);
    if (resp_add_error(&c->tmp, g->err) < 0)
        return -1;
    if (counted)
        counters_add(g->counter);
    if (c->in_multi && c->pp->version >= PV(2, 6, 5)) {
        if (resp_add_command(&c->uout, &poison, 1) < 0)
            return -1;
        return q_push(c, E_FORWARD, FIX_NONE, EF_REPLACE | EF_FAULTABLE, 0,
                      pbuf_head(&c->tmp), pbuf_used(&c->tmp));
    }
    return q_push(c, E_LOCAL, FIX_NONE, EF_FAULTABLE, 0, pbuf_head(&c->tmp),
                  pbuf_used(&c->tmp));
}

/* Handle one command.  raw is NULL for an inline command.  Returns 0 or
 * -1 (out of memory: the connection is closed). */
static int on_command(struct conn *c, const proxy_arg *argv, size_t argc,
                      const char *raw, size_t rawlen)
{
    gate_result g;
    unsigned char fix = FIX_NONE;
    unsigned short flags = EF_FAULTABLE;
    size_t subs = 0;
    int emulating = personality_emulates(c->pp);
    int is_multi;
    int is_exec;
    int is_discard;
    int is_reset;
    enum vol20_kind plan = VOL20_NONE;

    if (argc == 0)
        return 0; /* Redis ignores empty commands: no reply */
    if (control_match(argv, argc)) {
        pbuf_clear(&c->tmp);
        if (control_run(argv, argc, &c->tmp) < 0)
            return -1;
        return q_push(c, E_LOCAL, FIX_NONE, 0, 0, pbuf_head(&c->tmp),
                      pbuf_used(&c->tmp));
    }
    counters_command(&argv[0]);
    if (personality_gate(c->pp, argv, argc, &g))
        return refuse(c, &g, 1);
    if (native_lua_refused(c->pp, argv, argc, g.err, sizeof(g.err), g.counter,
                           sizeof(g.counter)))
        return refuse(c, &g, 1);
    at_fault at;
    faults_count_command(&at);
    if (at.fire) {
        /* A command the server rejects before running it: not a refusal
         * of the emulated version, so not counted as one. */
        snprintf(g.err, sizeof(g.err), "%s", AT_ERROR_TEXT);
        g.counter[0] = '\0';
        return refuse(c, &g, 0);
    }

    is_multi = arg_is(&argv[0], "MULTI");
    is_exec = arg_is(&argv[0], "EXEC");
    is_discard = arg_is(&argv[0], "DISCARD");
    is_reset = arg_is(&argv[0], "RESET");
    if (c->pp->version_str[0] != '\0' && !emulating && arg_is(&argv[0], "INFO"))
        fix |= FIX_INFO; /* a newer server's version line */
    if (emulating) {
        fix |= FIX_ERRTEXT;
        if (arg_is(&argv[0], "INFO"))
            fix |= FIX_INFO;
        /* TTL / PTTL of a missing key: -1 until 2.8 introduced -2. */
        if (c->pp->version < PV(2, 8, 0) &&
            (arg_is(&argv[0], "TTL") || arg_is(&argv[0], "PTTL")))
            fix |= FIX_TTL;
        if (c->pp->version < PV(2, 2, 0))
            plan = vol20_plan(argv, argc);
    }
    if (c->in_multi && !is_exec && !is_discard && !is_reset)
        flags |= EF_QUEUEABLE;
    if (is_exec)
        flags |= EF_EXEC;
    if (is_discard || is_reset)
        flags |= EF_DISCARD;
    if (is_subscribe_family(&argv[0])) {
        flags |= EF_SUBSCRIBE;
        subs = argc > 1 ? argc - 1 : 1;
    }

    if (native_mask(c->pp) != 0 || !native_lua_on()) {
        char cplan[64];
        int cd;

        pbuf_clear(&c->tmp);
        cd = native_command_docs(c->pp, argv, argc, &c->uout, cplan, sizeof(cplan), &c->tmp);
        if (cd < 0)
            return -1;
        if (cd == 2)
            return q_push(c, E_LOCAL, FIX_NONE, EF_FAULTABLE, 0, pbuf_head(&c->tmp),
                          pbuf_used(&c->tmp));
        if (cd == 1)
            return q_push(c, E_FORWARD, FIX_NONE,
                          flags | (arg_is(&argv[1], "DOCS") ? EF_CMDDOCS : EF_CMDINFO), 0,
                          cplan, strlen(cplan) + 1);
    }
    if (native_mask(c->pp) != 0) {
        unsigned nfix = FIX_NONE;
        int np = native_plan(c->pp, &c->shas, argv, argc, &c->uout, &nfix, g.err,
                             sizeof(g.err), g.counter, sizeof(g.counter));

        if (np < 0)
            return -1;
        if (np == NATIVE_ERROR) {
            /* A wrong number of words is refused before queueing (so
             * EXEC aborts); any other error comes from running the
             * command, inside EXEC's result when queued: the real server
             * answers it through a script that returns it. */
            if (strncmp(g.err, "ERR wrong number of arguments", 29) == 0)
                return refuse(c, &g, 0);
            if (native_error_command(&c->uout, g.err) < 0)
                return -1;
            np = NATIVE_SENT;
        }
        if (np == NATIVE_SENT)
            return q_push(c, E_FORWARD, fix | nfix, flags | EF_NATIVE, subs, NULL, 0);
    }

    if (plan == VOL20_WRAP || plan == VOL20_EXPIRE) {
        if (vol20_encode(plan, argv, argc, &c->uout) < 0)
            return -1;
    } else if (plan == VOL20_PREAMBLE) {
        if (vol20_encode(plan, argv, argc, &c->uout) < 0 ||
            q_push(c, E_INTERNAL, FIX_NONE, flags & EF_QUEUEABLE, 0, NULL, 0) < 0 ||
            forward(c, argv, argc, raw, rawlen) < 0)
            return -1;
    } else if (forward(c, argv, argc, raw, rawlen) < 0) {
        return -1;
    }
    if (q_push(c, E_FORWARD, fix, flags, subs, NULL, 0) < 0)
        return -1;

    if (is_multi)
        c->in_multi = 1;
    if (is_exec || is_discard || is_reset)
        c->in_multi = 0;
    if (is_reset) {
        c->subs_normal = 0;
        c->subs_shard = 0;
    }
    return 0;
}

/* Parse and handle what the client sent, as far as limits allow.  Called
 * on every pass: input left over when a limit was hit is taken up again
 * once replies have drained.  Returns 0 or -1 (fatal). */
static int process_client_input(struct conn *c)
{
    /* Each pass consumes one command or stops. */
    while (!c->closing && !c->proto_error && c->qcount < MAX_PENDING &&
           pbuf_used(&c->uout) < OUT_LIMIT && c->obytes < OUT_LIMIT) {
        proxy_arg *argv = NULL;
        size_t argc = 0;
        size_t consumed = 0;
        int is_inline = 0;
        char err[128];
        int r = cmd_parse(&c->parser, pbuf_head(&c->cin), pbuf_used(&c->cin),
                          &consumed, &argv, &argc, &is_inline, err, sizeof(err));

        if (r == 0)
            break;
        if (r < 0) {
            /* As Redis: answer the protocol error, then close. */
            pbuf_clear(&c->tmp);
            if (pbuf_append_str(&c->tmp, "-ERR ") < 0 ||
                pbuf_append_str(&c->tmp, err) < 0 ||
                pbuf_append(&c->tmp, "\r\n", 2) < 0 ||
                q_push(c, E_LOCAL, FIX_NONE, EF_CLOSE, 0, pbuf_head(&c->tmp),
                       pbuf_used(&c->tmp)) < 0)
                return -1;
            c->proto_error = 1;
            pbuf_clear(&c->cin);
            break;
        }
        if (on_command(c, argv, argc, is_inline ? NULL : pbuf_head(&c->cin),
                       consumed) < 0)
            return -1;
        pbuf_consume(&c->cin, consumed);
    }
    return flush_locals(c);
}

/* Read what the client sent.  Returns 0, or -1 when it has gone. */
static int read_client(struct conn *c)
{
    char *dst = pbuf_reserve(&c->cin, READ_CHUNK);
    ssize_t r;

    if (dst == NULL) {
        /* The command being received exceeds every limit. */
        proxy_log("client: command larger than %zu bytes or out of memory: "
                  "closing the connection", (size_t)PROXY_MAX_MSG);
        return -1;
    }
    r = recv(c->cfd, dst, READ_CHUNK, 0);
    if (r < 0)
        return (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) ? 0 : -1;
    if (r == 0)
        return -1; /* as Redis: a client that closes loses its replies */
    pbuf_commit(&c->cin, (size_t)r);
    c->read_us = now_us();
    return 0;
}

/* Read and relay what upstream sent.  Returns 0, or -1 (fatal). */
static int read_upstream(struct conn *c)
{
    char *dst = pbuf_reserve(&c->uin, READ_CHUNK);
    ssize_t r;

    if (dst == NULL) {
        proxy_log("upstream %s: reply larger than %zu bytes or out of memory: "
                  "closing the connection", c->ctx->upstream, (size_t)PROXY_MAX_MSG);
        return -1;
    }
    r = recv(c->ufd, dst, READ_CHUNK, 0);
    if (r < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            return 0;
        c->upstream_eof = 1;
        return 0;
    }
    if (r == 0) {
        c->upstream_eof = 1;
        return 0;
    }
    pbuf_commit(&c->uin, (size_t)r);
    c->read_us = now_us();
    /* Each pass consumes one whole reply or stops. */
    while (!c->closing && pbuf_used(&c->uin) > 0) {
        size_t len = 0;
        int s = resp_scan_reply(&c->scan, pbuf_head(&c->uin), pbuf_used(&c->uin), &len);

        if (s == 0)
            break;
        if (s < 0) {
            proxy_log("upstream %s: malformed reply: closing the connection",
                      c->ctx->upstream);
            return -1;
        }
        if (on_reply(c, pbuf_head(&c->uin), len) < 0) {
            proxy_log("client: out of memory while relaying a reply: closing "
                      "the connection");
            return -1;
        }
        pbuf_consume(&c->uin, len);
    }
    return 0;
}

static void set_socket_options(int fd)
{
    int one = 1;
    int fl = fcntl(fd, F_GETFL, 0);

    if (fl >= 0)
        (void)fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    /* Small replies must not wait for Nagle: the tests measure latency. */
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Connect to the real server, giving up after CONNECT_TIMEOUT_MS or at
 * shutdown.  Returns 0 or -1 (reported). */
static int connect_upstream(struct conn *c)
{
    const proxy_ctx *ctx = c->ctx;
    long long deadline = now_us() + (long long)CONNECT_TIMEOUT_MS * 1000;
    int err = 0;
    socklen_t elen = sizeof(err);
    int fd = socket(ctx->up_addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

    if (fd < 0) {
        proxy_log("upstream %s: socket: %s", ctx->upstream, strerror(errno));
        return -1;
    }
    c->ufd = fd;
    if (connect(fd, (const struct sockaddr *)&ctx->up_addr, ctx->up_addrlen) == 0)
        goto connected;
    if (errno != EINPROGRESS) {
        proxy_log("upstream %s: connect: %s", ctx->upstream, strerror(errno));
        return -1;
    }
    /* Bounded by the deadline. */
    for (;;) {
        struct pollfd pf[2];
        long long left = deadline - now_us();
        int rc;

        if (left <= 0) {
            proxy_log("upstream %s: connect: timed out after %d ms", ctx->upstream,
                      CONNECT_TIMEOUT_MS);
            return -1;
        }
        pf[0].fd = fd;
        pf[0].events = POLLOUT;
        pf[1].fd = ctx->stop_fd;
        pf[1].events = POLLIN;
        rc = wait_events(pf, 2, left);
        if (rc < 0 && errno != EINTR) {
            proxy_log("upstream %s: poll: %s", ctx->upstream, strerror(errno));
            return -1;
        }
        if (rc > 0 && pf[1].revents != 0)
            return -1; /* shutting down */
        if (rc > 0 && pf[0].revents != 0)
            break;
    }
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0 || err != 0) {
        proxy_log("upstream %s: connect: %s", ctx->upstream,
                  strerror(err != 0 ? err : errno));
        return -1;
    }
connected:
    set_socket_options(fd);
    return 0;
}

static void conn_free(struct conn *c)
{
    struct outitem *it = c->ohead;

    while (it != NULL) { /* bounded by the list length */
        struct outitem *next = it->next;

        free(it);
        it = next;
    }
    while (c->qcount > 0)
        q_pop(c);
    free(c->q);
    free(c->execfix);
    pbuf_free(&c->cin);
    pbuf_free(&c->uin);
    pbuf_free(&c->uout);
    pbuf_free(&c->tmp);
    cmd_parser_free(&c->parser);
    if (c->ufd >= 0)
        close(c->ufd);
    if (c->cfd >= 0)
        close(c->cfd);
}

void conn_serve(const proxy_ctx *ctx, int cfd)
{
    struct conn c;

    memset(&c, 0, sizeof(c));
    c.ctx = ctx;
    c.pp = &ctx->pers;
    c.cfd = cfd;
    c.ufd = -1;
    cmd_parser_init(&c.parser);
    resp_scan_reset(&c.scan);
    c.fault_gen = faults_generation() - 1; /* force a first refresh */
    refresh_faults(&c);
    lower_timer_slack();
    set_socket_options(cfd);
    if (connect_upstream(&c) < 0)
        goto done;
    /* A newer personality's scripts, loaded once so that its native
     * commands go as EVALSHA, as a client caching its scripts sends them. */
    if (c.pp->native != 0 &&
        (native_load_command(&c.uout, 0) < 0 ||
         q_push(&c, E_INTERNAL, FIX_NONE, EF_SHA_SET, 0, NULL, 0) < 0 ||
         native_load_command(&c.uout, 1) < 0 ||
         q_push(&c, E_INTERNAL, FIX_NONE, EF_SHA_DEL, 0, NULL, 0) < 0))
        goto done;

    /* Every pass blocks in ppoll() until a socket is ready, a delayed reply
     * falls due or the proxy stops: no busy waiting. */
    c.read_us = now_us();
    for (;;) {
        struct pollfd pf[3];
        long long now;
        long long timeout_us = -1;
        int rc;

        if (process_client_input(&c) < 0 || write_upstream(&c) < 0 ||
            write_client(&c) < 0)
            break;
        /* The server closed (QUIT, or it died): what it answered has been
         * relayed, the rest will never come.  (A protocol error, by
         * contrast, closes through its reply's close-after mark, once the
         * replies to the commands before it have gone out.) */
        if (c.upstream_eof && c.ohead == NULL)
            break;

        pf[0].fd = ctx->stop_fd;
        pf[0].events = POLLIN;
        pf[1].fd = c.cfd;
        pf[1].events = 0;
        if (!c.closing && !c.proto_error && pbuf_used(&c.uout) < OUT_LIMIT &&
            c.obytes < OUT_LIMIT && c.qcount < MAX_PENDING)
            pf[1].events |= POLLIN;
        now = now_us();
        if (c.ohead != NULL) {
            if (c.ohead->release_us <= now)
                pf[1].events |= POLLOUT;
            else
                timeout_us = c.ohead->release_us - now;
        }
        pf[2].fd = c.ufd;
        pf[2].events = 0;
        if (!c.closing && !c.upstream_eof && c.obytes < OUT_LIMIT)
            pf[2].events |= POLLIN;
        if (!c.upstream_eof && pbuf_used(&c.uout) > 0)
            pf[2].events |= POLLOUT;
        /* A socket we want nothing from is left out: otherwise a hang-up
         * on it would wake poll() again and again.  The hang-up is seen
         * when we next read or write it. */
        if (pf[1].events == 0)
            pf[1].fd = -1;
        if (pf[2].events == 0)
            pf[2].fd = -1;

        rc = wait_events(pf, 3, timeout_us);
        if (rc < 0) {
            if (errno == EINTR)
                continue;
            proxy_log("client: poll: %s", strerror(errno));
            break;
        }
        if (pf[0].revents != 0)
            break; /* shutdown */
        if ((pf[2].events & POLLIN) && (pf[2].revents & (POLLIN | POLLHUP | POLLERR)) &&
            read_upstream(&c) < 0)
            break;
        if ((pf[1].events & POLLIN) && (pf[1].revents & (POLLIN | POLLHUP | POLLERR)) &&
            read_client(&c) < 0)
            break;
        if ((pf[1].revents | pf[2].revents) & POLLNVAL) {
            proxy_log("client: poll: invalid descriptor");
            break;
        }
    }
done:
    conn_free(&c);
}
