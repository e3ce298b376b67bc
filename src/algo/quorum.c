/*
 * Quorum locks over independent masters (design.md §9.1, the Redlock
 * scheme), used whenever `servers` lists more than one.
 *
 * Every request goes to all servers at once, each with a short timeout of
 * its own, so a dead server costs its timeout once, not once per server.
 * A request is decided as soon as a majority did what it asked, or so many
 * said no that no majority can say yes: a slow server does not slow a
 * quorum that does not need it.  Values are unique tokens.
 *
 * Acquire wins on a majority within the validity time.  The fencing token
 * is the largest counter of that majority, whose counters are raised to it
 * before success is declared: any later majority shares a server with this
 * one, so the next holder's token is larger.
 */
#include <stdio.h>
#include <string.h>

#include "quorum.h"

/* Machine states: the round whose replies are awaited. */
enum { Q_START = 0, Q_CARRY, Q_ACQ, Q_RAISE, Q_ACQ_DEL, Q_REL, Q_EXT, Q_EXT_DEL };

static int majority(const relock_client *c)
{
    return c->s.nservers / 2 + 1;
}

static unsigned all_servers(const relock_client *c)
{
    return (1u << c->s.nservers) - 1;
}

long long relock__quorum_server_timeout(const relock_client *c, long long ttl_ms)
{
    /* Short against the lease, so a dead server cannot eat the validity. */
    long long t = ttl_ms / 10 > 10 ? ttl_ms / 10 : 10;
    return t < c->s.command_timeout_ms ? t : c->s.command_timeout_ms;
}

/* The rounds that compare-and-delete our value. */
static int deletes(int pc)
{
    return pc == Q_ACQ_DEL || pc == Q_REL || pc == Q_EXT_DEL;
}

/* Whether an answer did what the round asked: won or extended (1),
 * deleted (1 + waiters told), raised or carried (any integer). */
static int said_yes(int pc, long long v0)
{
    return pc == Q_ACQ || pc == Q_EXT ? v0 == 1 : deletes(pc) ? v0 >= 1 : 1;
}

/* Starts a round: script id with args (kept in m->args, for NOSCRIPT's
 * EVAL) to the servers in mask, decided once `need` said yes. */
static relock__step round_begin(relock__quorum_m *m, relock_client *c, int pc, unsigned mask,
                                int id, int nkeys, int nargs, const char *const *args, int need,
                                relock__fanout *out)
{
    m->h.pc = pc;
    m->r = (relock__qround){.asked = mask, .need = need};
    m->id = id;
    m->nkeys = nkeys;
    m->nargs = nargs;
    memcpy(m->args, args, (size_t)nargs * sizeof *args);
    out->mask = mask;
    out->round = 1;
    out->timeout_ms = m->tmo;
    out->after = 0;
    for (int i = 0; i < c->s.nservers; i++) {
        relock__batch_reset(&out->b[i]);
        if ((mask >> i) & 1u)
            relock__batch_script(&out->b[i], c, id, nkeys, nargs, m->args, 0);
    }
    return RELOCK__STEP_SEND;
}

/* Takes a feed of the round under way.  Returns 1 when the round is
 * decided, 2 when *out holds requests to send again (by EVAL), 0 to wait. */
static int round_feed(relock__quorum_m *m, relock_client *c, const relock__fanfeed *in,
                      relock__fanout *out)
{
    relock__qround *r = &m->r;
    int first = !r->started;
    if (first) {
        r->started = 1;
        r->live = in->reached & r->asked;
        r->reached = __builtin_popcount(r->live);
        r->start = in->mono_ms;
        r->deadline = in->mono_ms + (uint64_t)m->tmo;
    }
    unsigned again = 0;
    for (int i = 0; i < c->s.nservers; i++) {
        unsigned bit = 1u << i;
        if (!(in->from & bit))
            continue;
        const relock__feed *s = &in->srv[i];
        if (s->fault != RELOCK__FAULT_NONE) {
            if (s->fault_status == RELOCK_ECONFIG) {
                r->config = 1;
                if (!r->error[0]) /* the round's first error */
                    snprintf(r->error, sizeof r->error, "%s",
                             s->fault_text ? s->fault_text : "AUTH/SELECT refused");
                if (first)
                    continue; /* met on an earlier use: it was connected afresh */
            }
            if ((r->live & bit) && s->fault == RELOCK__FAULT_LOST &&
                s->fault_status != RELOCK_ECONFIG)
                r->unsure |= bit; /* its request was written: it may have run */
            r->live &= ~bit; /* dropped: its state is unknown */
            continue;
        }
        if (!(r->live & bit))
            continue; /* nothing asked of it */
        if (relock__script_again(s, 0, &r->by_eval[i])) {
            /* Its script cache was emptied since it was connected: send the
             * text, at once and to it alone. */
            relock__batch_reset(&out->b[i]);
            relock__batch_script(&out->b[i], c, m->id, m->nkeys, m->nargs, m->args, 1);
            again |= bit;
            continue;
        }
        r->live &= ~bit;
        const redisReply *rep = s->nreply > 0 ? s->reply[0] : NULL;
        /* The script's answer: an integer, or (acquire) an array of two. */
        if (relock__reply_is(rep, m->h.pc == Q_ACQ ? "a[ii]" : "i")) {
            r->answered++;
            r->answers |= bit;
            r->v0[i] = rep->type == REDIS_REPLY_ARRAY ? rep->element[0]->integer : rep->integer;
            r->v1[i] = rep->type == REDIS_REPLY_ARRAY ? rep->element[1]->integer : 0;
            if (said_yes(m->h.pc, r->v0[i])) {
                r->yes |= bit;
                r->good++;
            }
        } else {
            int err = rep && rep->type == REDIS_REPLY_ERROR && rep->str;
            const relock__server *srv = &c->s.servers[i];
            if (!r->error[0])
                snprintf(r->error, sizeof r->error, "%.255s:%d: %.150s", srv->host, srv->port,
                         err ? rep->str : "a reply of the wrong type");
            /* A server without Lua (Valkey 9.1 can run so): the quorum's
             * scripts have no fallback there. */
            if (err && strncmp(rep->str, "ERR unknown command 'EVAL", 25) == 0)
                r->nolua = 1;
        }
    }
    int asked = __builtin_popcount(r->asked);
    /* A delete round is not decided, short of its deadline, while one of
     * its deletes is not wholly written (a connection still connecting):
     * the driver would drop it unsent, and our token stay there for the
     * lease. */
    int unwritten = deletes(m->h.pc) && (r->live & ~in->written) != 0;
    /* Decided: enough said yes, or so many no that the rest cannot make up
     * `need` (a silent server's reply, or timeout, is waited for). */
    if (r->live == 0 || in->mono_ms >= r->deadline ||
        (!unwritten && (r->good >= r->need || r->answered - r->good > asked - r->need))) {
        /* A server whose request was written may run it, late or not: it
         * owes its reply, and a failed acquire's clean-up goes behind it. */
        r->owing = r->live & in->written;
        return 1;
    }
    if (again) {
        out->mask = again;
        out->round = 0;
        return 2;
    }
    return 0;
}

/* Whether so many servers said no (held by another, not ours) that no
 * majority can say yes, whatever the others would have answered. */
static int refused(const relock_client *c, int said_no)
{
    return c->s.nservers - said_no < majority(c);
}

/* Too few servers answered to decide: st (or RELOCK_ECONFIG for a refused
 * AUTH or SELECT), the consequence (NULL: a majority is needed) and the
 * first server error in the message. */
static relock_status undecided(relock_client *c, relock_status st, const char *what,
                               const relock_lock *l, const relock__qround *f,
                               const char *consequence)
{
    char need[64];
    snprintf(need, sizeof need, "a majority (%d) is needed", majority(c));
    if (f->config)
        return RELOCK__FAIL(&c->err, RELOCK_ECONFIG, "%s %s: %s", what, l->name, f->error);
    if (f->nolua)
        return RELOCK__FAIL(&c->err, RELOCK_EUNSUPPORTED,
                            "%s %s: a server runs without Lua, and locking over several "
                            "servers needs scripts on every one (%s)",
                            what, l->name, f->error);
    int reachable = f->reached < majority(c);
    return RELOCK__FAIL(&c->err, st, "%s %s: only %d of %d servers %s; %s%s%s", what, l->name,
                        reachable ? f->reached : f->answered, c->s.nservers,
                        reachable ? "reachable" : "answered", consequence ? consequence : need,
                        f->error[0] ? "; first error: " : "", f->error);
}

/* Compare-and-delete of our value on the servers in mask; where it
 * deletes, it announces a release to waiters when announce is set. */
static relock__step delete_round(relock__quorum_m *m, relock_lock *l, int pc, unsigned mask,
                                 int need, int announce, relock__fanout *out)
{
    m->chan[0] = '\0'; /* '': the script publishes nothing */
    if (announce)
        relock__notify_channel(l, m->chan, sizeof m->chan);
    const char *args[] = {l->key, l->value, m->chan};
    return round_begin(m, l->c, pc, mask, RELOCK__SCRIPT_DEL_IF_EQ, 1, 3, args, need, out);
}

static relock__step acquire_round(relock__quorum_m *m, relock_lock *l, relock__fanout *out)
{
    snprintf(m->num, sizeof m->num, "%lld", l->ttl_ms);
    const char *args[] = {l->key, l->fence_key, l->value, m->num};
    return round_begin(m, l->c, Q_ACQ, all_servers(l->c), RELOCK__SCRIPT_MODERN_ACQUIRE, 2, 4,
                       args, majority(l->c), out);
}

static relock__step won(relock__quorum_m *m, relock_lock *l)
{
    l->fence = m->fence;
    l->valid_until = m->valid_until;
    l->acquired = 1;
    return relock__done(&m->h, RELOCK_OK);
}

static relock__step acquire_end(relock__quorum_m *m, relock_lock *l)
{
    relock_client *c = l->c;
    const relock__qround *f = &m->first;
    if (refused(c, f->answered - m->nwon) || (f->answered >= majority(c) && !m->raise_failed)) {
        /* Held elsewhere, won too slowly, or a majority answered and some
         * said held: wait and try again.  Only fewer answers than a
         * majority is an error.  No TTL known: the backoff decides. */
        m->h.hint_ms = m->shortest >= 0
                           ? (m->shortest > 0x7fffffffLL ? 0x7fffffffL : (long)m->shortest)
                           : -1;
        /* A release may be half-way through the servers (some said yes,
         * too few held to refuse, or a notice came just before): look again
         * after a server's timeout rather than a backoff, once per notice.
         * Without one, a majority that says held is a holder. */
        if (((m->nwon > 0 && m->nwon < majority(c) && !refused(c, f->answered - m->nwon)) ||
             l->after_notice) &&
            (m->h.hint_ms < 0 || m->tmo < m->h.hint_ms))
            m->h.hint_ms = (long)m->tmo;
        return relock__done(&m->h, RELOCK_BUSY);
    }
    if (m->raise_failed)
        return relock__done(
            &m->h, RELOCK__FAIL(&c->err, RELOCK_EIO,
                                "acquire %s: won on %d of %d servers, but could not raise "
                                "their fence counters%s%s",
                                l->name, m->nwon, c->s.nservers,
                                f->error[0] ? "; first error: " : "", f->error));
    return relock__done(&m->h, undecided(c, RELOCK_EIO, "acquire", l, f, NULL));
}

void relock__quorum_init(relock__quorum_m *m, int op, long long ttl_ms)
{
    *m = (relock__quorum_m){
        .h.hint_ms = -1, .op = op, .ttl_ms = ttl_ms, .lowest = -1, .shortest = -1};
}

relock__step relock__quorum_step(void *vm, relock_lock *l, const relock__fanfeed *in,
                                 relock__fanout *out)
{
    relock__quorum_m *m = vm;
    relock_client *c = l->c;
    if (m->h.pc == Q_START) {
        long long lease = m->op == RELOCK__Q_EXTEND ? m->ttl_ms : l->ttl_ms;
        m->tmo = relock__quorum_server_timeout(c, lease);
        switch (m->op) {
        case RELOCK__Q_ACQUIRE:
            if (relock__fence_key_before(l->key, m->before, sizeof m->before) == 1) {
                /* A whole-tag key: carry its earlier counter over first
                 * (keys.c), best effort: a later acquisition carries it to
                 * a server this one does not reach. */
                const char *args[] = {l->fence_key, m->before};
                return round_begin(m, c, Q_CARRY, all_servers(c), RELOCK__SCRIPT_FENCE_CARRY, 2,
                                   2, args, c->s.nservers, out);
            }
            return acquire_round(m, l, out);
        case RELOCK__Q_RELEASE:
            return delete_round(m, l, Q_REL, all_servers(c), majority(c), 1, out);
        default:
            /* The servers may hold the new lease from now on: a shorter
             * one shortens our validity unless a majority extends in time. */
            l->valid_until = relock__valid_min(l->valid_until,
                                               relock__valid_until(in->mono_ms, m->ttl_ms));
            snprintf(m->num, sizeof m->num, "%lld", m->ttl_ms);
            const char *args[] = {l->key, l->value, m->num};
            return round_begin(m, c, Q_EXT, all_servers(c), RELOCK__SCRIPT_PEXPIRE_IF_EQ, 1, 3,
                               args, majority(c), out);
        }
    }
    int d = round_feed(m, c, in, out);
    if (d == 0)
        return RELOCK__STEP_WAIT;
    if (d == 2)
        return RELOCK__STEP_SEND;
    relock__qround *r = &m->r;
    uint64_t now = in->mono_ms;
    relock__step s;
    switch (m->h.pc) {
    case Q_CARRY:
        return acquire_round(m, l, out);
    case Q_ACQ:
        m->first = *r;
        for (int i = 0; i < c->s.nservers; i++) {
            unsigned bit = 1u << i;
            if (r->yes & bit) { /* {1, our counter} */
                m->won |= bit;
                m->nwon++;
                if (r->v1[i] > m->fence)
                    m->fence = r->v1[i];
                if (m->lowest < 0 || r->v1[i] < m->lowest)
                    m->lowest = r->v1[i];
            } else if ((r->answers & bit) && r->v1[i] >= 0 &&
                       (m->shortest < 0 || r->v1[i] < m->shortest)) {
                m->shortest = r->v1[i]; /* {0, the holder's PTTL} */
            }
        }
        m->valid_until = relock__valid_until(r->start, l->ttl_ms);
        if (m->nwon >= majority(c) && now < m->valid_until) {
            if (m->lowest == m->fence)
                return won(m, l); /* the counters agree: nothing to raise */
            /* Raise the majority's counters to the token before claiming it. */
            snprintf(m->num, sizeof m->num, "%lld", m->fence);
            const char *args[] = {l->fence_key, m->num};
            return round_begin(m, c, Q_RAISE, m->won, RELOCK__SCRIPT_FENCE_RAISE, 1, 2, args,
                               majority(c), out);
        }
        break;
    case Q_RAISE:
        if (r->good >= majority(c) && now < m->valid_until)
            return won(m, l);
        m->raise_failed = r->good < majority(c);
        if (m->raise_failed && !m->first.error[0])
            memcpy(m->first.error, r->error, sizeof r->error);
        break;
    case Q_ACQ_DEL:
        return acquire_end(m, l);
    case Q_REL:
        if (r->good >= majority(c))
            return relock__done(&m->h, RELOCK_OK);
        if (refused(c, r->answered - r->good))
            return relock__done(&m->h, RELOCK__FAIL(&c->err, RELOCK_LOST,
                                                    "release %s: lock lost: held on only %d "
                                                    "of %d servers",
                                                    l->name, r->good, c->s.nservers));
        return relock__done(&m->h, undecided(c, RELOCK_EAMBIGUOUS, "release", l, r,
                                             "the lock's state is unknown"));
    case Q_EXT: {
        uint64_t valid_until = relock__valid_until(r->start, m->ttl_ms);
        if (r->good >= majority(c) && now < valid_until) {
            l->ttl_ms = m->ttl_ms;
            l->valid_until = valid_until;
            return relock__done(&m->h, RELOCK_OK);
        }
        if (r->good >= majority(c) || refused(c, r->answered - r->good)) {
            /* Lost: the handle will not be released, so our (unique) value
             * goes now from the servers that extended it. */
            m->first = *r;
            m->tmo = relock__quorum_server_timeout(c, l->ttl_ms); /* the lease held */
            s = delete_round(m, l, Q_EXT_DEL, all_servers(c), majority(c), 1, out);
            /* The delete goes behind the extend on a server owing its reply. */
            out->after = m->first.owing;
            return s;
        }
        return relock__done(&m->h, undecided(c, RELOCK_EIO, "extend", l, r, NULL));
    }
    case Q_EXT_DEL:
        relock__err_clear(&c->err);
        if (m->first.good >= majority(c))
            return relock__done(&m->h, RELOCK__FAIL(&c->err, RELOCK_LOST,
                                                    "extend %s: lock lost: extending took "
                                                    "longer than the %lld ms asked",
                                                    l->name, m->ttl_ms));
        return relock__done(&m->h, RELOCK__FAIL(&c->err, RELOCK_LOST,
                                                "extend %s: lock lost: held on only %d of %d "
                                                "servers",
                                                l->name, m->first.good, c->s.nservers));
    default:
        return relock__done(&m->h, RELOCK__FAIL(&c->err, RELOCK_EPROTO,
                                                "lock %s: internal error: quorum state %d",
                                                l->name, m->h.pc));
    }
    /* Q_ACQ or Q_RAISE without the lock, which has no majority in time:
     * delete our token wherever it may be (won, written without a reply,
     * or written before the connection failed), behind the acquire on each
     * connection still open; a failed one's server gets it on a new one,
     * where the old request ran or never will. */
    unsigned maybe = m->won | m->first.owing | m->first.unsure;
    if (!maybe)
        return acquire_end(m, l);
    /* The delete announces a release only after a majority was won: then
     * others found the lock held.  Short of one, a notice would wake every
     * waiter for nothing, this one first, and contenders that split the
     * servers would wake each other without end; they undo in silence and
     * sleep their jittered backoff. */
    s = delete_round(m, l, Q_ACQ_DEL, maybe, m->nwon, m->nwon >= majority(c), out);
    out->after = maybe;
    return s;
}

/* The operation core's machines: one fan machine for every operation. */
static relock_status quorum_acq_init(void *m, relock_lock *l)
{
    relock__quorum_init(m, RELOCK__Q_ACQUIRE, l->ttl_ms);
    return relock__token_for(l->c, "acquire", l->name, l->value);
}

static relock_status quorum_upd_init(void *m, relock_lock *l, int extend, long long ttl_ms)
{
    relock__quorum_init(m, extend ? RELOCK__Q_EXTEND : RELOCK__Q_RELEASE,
                        extend ? ttl_ms : l->ttl_ms);
    return RELOCK_OK;
}

const relock__machines relock__quorum_machines = {
    sizeof(relock__quorum_m), quorum_acq_init, NULL,
    sizeof(relock__quorum_m), quorum_upd_init, NULL,
    relock__quorum_step,
};
