/* Lease and clock arithmetic of the timestamp modes: pure functions, so
 * that every unit, offset, TTL and clock phase can be property-tested. */
#ifndef RELOCK_LEASE_H
#define RELOCK_LEASE_H

#include <stdint.h>

/* How the fleet's readers compare a value V with their clock (lease.c). */
#define RELOCK__READER_WHOLE 1
#define RELOCK__READER_FRAC 2

/* The settings that shape a timestamp lease. */
typedef struct relock__lease_cfg {
    long long unit_ms;        /* legacy.clock_unit: 1 (ms) or 1000 (s) */
    long long offset;         /* legacy.expiry_offset, in units (>= 0) */
    long long skew_margin_ms; /* legacy.skew_margin_ms (>= 0) */
    int bridge;               /* bridge mode: the key carries a PEXPIRE */
    int gc_expire;            /* legacy.gc_expire (legacy mode only) */
    int readers;              /* RELOCK__READER_* bits; 0 means whole readers */
    int frac_values;          /* legacy.values = "fractional": V written to the ms */
} relock__lease_cfg;

/* A stored timestamp: its integer part in units, and its fraction. */
typedef struct relock__stamp {
    long long ts;
    int frac;
    long long frac_num, frac_den; /* frac_den >= 1 */
} relock__stamp;

/* V·u in ms, rounded up (up) or down; a stamp beyond RELOCK__STAMP_MAX_MS
 * (16 digits and more, read as seconds) saturates to it, still far enough
 * below LLONG_MAX to add a unit and a skew margin. */
#define RELOCK__STAMP_MAX_MS (1LL << 62)
long long relock__stamp_ms(const relock__stamp *s, long long unit_ms, int up);

/* What a lease written at fleet time now puts in the key, and its ends. */
typedef struct relock__lease {
    long long ts;            /* the timestamp written (the value V; its integer part) */
    long long v_ms;          /* V·u in ms (V with its fraction, when written with one) */
    int frac;                /* V is written with a fraction: ts.(v_ms - ts·u) */
    long long px_ms;         /* bridge: the PEXPIRE in ms; else 0 */
    long long gc_s;          /* gc_expire: the EXPIRE in seconds; else 0 */
    long long legacy_end_ms; /* fleet ms at which the first legacy reader takes over */
    long long ours_end_ms;   /* fleet ms at which our clients take over */
    long long valid_ms;      /* our validity, from the moment now was read */
} relock__lease;

/* Plans the lease of ttl_ms (>= 1) written at fleet time now (ms). */
void relock__lease_plan(const relock__lease_cfg *cfg, long long now, long ttl_ms,
                        relock__lease *out);
/* When a stored timestamp stops holding the lock for our clients (ms). */
long long relock__lease_ours_end(const relock__lease_cfg *cfg, const relock__stamp *v);
/* The validity a lock adopted from timestamp v can claim at fleet time
 * now (ms, >= 0). */
long long relock__lease_adopted_ms(const relock__lease_cfg *cfg, const relock__stamp *v,
                                   long long now);

/* The allowance for clock drift over ttl_ms (Redlock's 1% + 2 ms). */
long long relock__drift_ms(long long ttl_ms);
/* The monotonic time at which a lease of ttl_ms requested at start stops
 * being safe to rely on (never before start). */
uint64_t relock__valid_until(uint64_t start, long long ttl_ms);
/* The validity a lock may claim during an extend and after it fails: the
 * earlier of was (before; 0, unknown, stays so) and until (the new lease's
 * from the extend's start), since the server may hold either lease. */
uint64_t relock__valid_min(uint64_t was, uint64_t until);
/* How long renewal waits at monotonic now before extending a lock of
 * ttl_ms valid until valid_until (0: unknown): a third of the ttl, at
 * most half the validity left (at least 1 ms); 1 ms when unknown or over.
 * The server's lease can be far shorter than the ttl (a failed shorter
 * extend, a late start, an adopted lock). */
long long relock__renew_wait_ms(long long ttl_ms, uint64_t valid_until, uint64_t now);

/* legacy.clock = "server": the server's clock as an offset from our
 * monotonic clock, so that a step of the local wall clock changes nothing. */
typedef struct relock__clock_est {
    long long offset_ms; /* server ms minus monotonic ms */
    long long rtt_ms;    /* the round trip of the measurement kept */
    uint64_t at;         /* monotonic ms of the measurement kept */
    uint64_t tried_at;   /* monotonic ms of the last measurement */
    int known;
} relock__clock_est;

/* How often (monotonic ms, checked on use) the offset is measured again. */
#define RELOCK__CLOCK_REMEASURE_MS 5000
/* How fast an estimate is assumed to age: the monotonic clock and the
 * server's may drift apart by this much per second (1000 ppm, generous
 * for crystals and NTP slewing). */
#define RELOCK__CLOCK_AGE_MS_PER_S 1

/* Whether the estimate should be measured again at monotonic time mono. */
int relock__clock_due(const relock__clock_est *e, uint64_t mono);
/* TIME sent at monotonic t0, its reply (server ms) read at t1: keeps the
 * more certain of the old (aged) and new estimates, unless the server's
 * clock stepped.  1 if the new one was kept. */
int relock__clock_measured(relock__clock_est *e, uint64_t t0, uint64_t t1, long long server_ms);
/* The server's clock now by the estimate (e->known). */
long long relock__clock_server_ms(const relock__clock_est *e, uint64_t mono);

#endif
