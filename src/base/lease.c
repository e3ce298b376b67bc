/*
 * Lease and clock arithmetic of the timestamp modes (lease.h), asked by
 * compat/legacy.c what to write and how long that lets us rely on a lock.
 * docs/legacy.md derives the value V written for a lease of ttl at fleet
 * time now (u: 1 or 1000 ms), rounded up so that V·u is never before
 * now + ttl where a reader compares fractions.  The lease ends at the
 * first of:
 *   - a legacy reader's takeover: (floor(V) + 1)·u for a whole reader (it
 *     holds V until its clock passes floor(V)), V·u for a fractional one;
 *   - our clients' takeover (relock__lease_ours_end), skew_margin_ms later;
 *   - bridge: the key's PEXPIRE, V·u + u/2 - now with whole readers only,
 *     V·u - now where a fraction is involved, so the server removes the
 *     key before any reader takes it over;
 *   - gc_expire: the key's EXPIRE, a second or more after our clients'
 *     takeover, so never first.
 * The validity is the shortest of those and the ttl, less the drift
 * allowance: with offset 0 in seconds and whole readers the PEXPIRE can
 * come before now + ttl, and the validity is shorter than the ttl, never
 * longer than the key.
 */
#include "lease.h"

long long relock__drift_ms(long long ttl_ms)
{
    return ttl_ms / 100 + 2;
}

/* A lease of ms milliseconds, less the drift allowance (never negative). */
static long long less_drift(long long ms)
{
    long long v = ms - relock__drift_ms(ms);
    return v > 0 ? v : 0;
}

uint64_t relock__valid_until(uint64_t start, long long ttl_ms)
{
    return start + (uint64_t)less_drift(ttl_ms);
}

uint64_t relock__valid_min(uint64_t was, uint64_t until)
{
    return was && until < was ? until : was;
}

static long long min_ll(long long a, long long b)
{
    return a < b ? a : b;
}

long long relock__renew_wait_ms(long long ttl_ms, uint64_t valid_until, uint64_t now)
{
    if (valid_until <= now)
        return 1; /* unknown (an adopted lock) or over: the server may hold less */
    long long wait = min_ll(ttl_ms / 3, (long long)((valid_until - now) / 2));
    return wait > 0 ? wait : 1;
}

long long relock__stamp_ms(const relock__stamp *s, long long unit_ms, int up)
{
    /* 18 digits of seconds overflow a long long in ms: saturate well
     * before (unit_ms >= 1, so the sum below stays under 2^62 + 1000). */
    if (s->ts >= RELOCK__STAMP_MAX_MS / unit_ms - 1)
        return RELOCK__STAMP_MAX_MS;
    long long den = s->frac_den > 0 ? s->frac_den : 1;
    long long part = s->frac_num * unit_ms; /* < 10^9 * 1000: no overflow */
    return s->ts * unit_ms + (up ? (part + den - 1) / den : part / den);
}

static int reads_whole(const relock__lease_cfg *cfg)
{
    return !cfg->readers || (cfg->readers & RELOCK__READER_WHOLE);
}

static int reads_frac(const relock__lease_cfg *cfg)
{
    return (cfg->readers & RELOCK__READER_FRAC) != 0;
}

long long relock__lease_ours_end(const relock__lease_cfg *cfg, const relock__stamp *v)
{
    long long u = cfg->unit_ms;
    /* A fraction was written by a client that compares fractions: its
     * holder relies on the lock until V·u at most.  An integer may come
     * from a whole-clock writer with no offset, who relies on it until
     * (V + 1)·u; only a fleet without whole readers ends it at V·u.  So
     * may a fraction of zero: redis-py 2.7 writes float(int(time()) +
     * timeout), "1795812032.0", and compares it with int(time()). */
    long long end = v->frac && v->frac_num > 0 ? relock__stamp_ms(v, u, 1)
                                               : (v->ts + reads_whole(cfg)) * u;
    return end + cfg->skew_margin_ms;
}

/* The first moment a reader of the configured kinds takes v over. */
static long long readers_end(const relock__lease_cfg *cfg, const relock__stamp *v)
{
    long long u = cfg->unit_ms;
    long long end = (v->ts + 1) * u; /* a whole reader: the integer part passed */
    if (reads_frac(cfg))
        end = min_ll(end, relock__stamp_ms(v, u, 0));
    return end;
}

void relock__lease_plan(const relock__lease_cfg *cfg, long long now, long ttl_ms,
                        relock__lease *out)
{
    long long u = cfg->unit_ms;
    long long ttl = ttl_ms > 0 ? ttl_ms : 1;
    relock__stamp st = {0, 0, 0, 1};
    long long v_ms;
    if (cfg->frac_values && u > 1) {
        v_ms = now + ttl + cfg->offset * u;
        st = (relock__stamp){v_ms / u, 1, v_ms % u, u};
    } else {
        st.ts = reads_frac(cfg) ? (now + ttl + u - 1) / u + cfg->offset
                                : now / u + (ttl + u - 1) / u + cfg->offset;
        v_ms = st.ts * u;
    }
    *out = (relock__lease){.ts = st.ts, .v_ms = v_ms, .frac = st.frac,
                           .legacy_end_ms = readers_end(cfg, &st),
                           .ours_end_ms = relock__lease_ours_end(cfg, &st)};
    long long first = min_ll(out->legacy_end_ms, out->ours_end_ms) - now;
    if (cfg->bridge) {
        long long px = reads_frac(cfg) || st.frac ? out->v_ms - now : out->v_ms + u / 2 - now;
        out->px_ms = px > 0 ? px : 1;
        if (out->px_ms < first)
            first = out->px_ms;
    } else if (cfg->gc_expire) {
        long long left = out->ours_end_ms - now;
        out->gc_s = (left > 0 ? (left + 999) / 1000 : 0) + 1;
    }
    out->valid_ms = less_drift(min_ll(first, ttl));
}

long long relock__lease_adopted_ms(const relock__lease_cfg *cfg, const relock__stamp *v,
                                   long long now)
{
    /* Whoever wrote it, with whatever TTL: V·u comes before every reader's
     * takeover and a bridge writer's PEXPIRE. */
    return less_drift(relock__stamp_ms(v, cfg->unit_ms, 0) - now);
}

int relock__clock_due(const relock__clock_est *e, uint64_t mono)
{
    return !e->known || mono - e->tried_at >= RELOCK__CLOCK_REMEASURE_MS;
}

/* Half the round trip, plus the age allowance at monotonic time mono. */
static long long uncertainty(long long rtt, uint64_t at, uint64_t mono)
{
    long long age = mono > at ? (long long)(mono - at) : 0;
    return (rtt + 1) / 2 + age * RELOCK__CLOCK_AGE_MS_PER_S / 1000;
}

int relock__clock_measured(relock__clock_est *e, uint64_t t0, uint64_t t1, long long server_ms)
{
    long long rtt = t1 >= t0 ? (long long)(t1 - t0) : 0;
    /* The server read its clock somewhere in the round trip: take the
     * middle, wrong by at most half of it. */
    long long offset = server_ms - (long long)(t0 + (t1 - t0) / 2);
    e->tried_at = t1;
    if (e->known) {
        long long kept = uncertainty(e->rtt_ms, e->at, t1), fresh = uncertainty(rtt, t1, t1);
        long long apart = offset > e->offset_ms ? offset - e->offset_ms : e->offset_ms - offset;
        /* The two disagree by more than both could be wrong: the server's
         * clock stepped, and the old estimate is simply wrong now, however
         * certain it looked.  Otherwise the more certain one is kept. */
        if (apart <= kept + fresh && fresh > kept)
            return 0;
    }
    *e = (relock__clock_est){.offset_ms = offset, .rtt_ms = rtt, .at = t1, .tried_at = t1,
                             .known = 1};
    return 1;
}

long long relock__clock_server_ms(const relock__clock_est *e, uint64_t mono)
{
    return (long long)mono + e->offset_ms;
}
