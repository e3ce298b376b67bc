/*
 * The lease arithmetic of the timestamp modes, as a property over every
 * unit, legal offset, skew margin, mode, kind of reader (whole clocks,
 * fractional clocks, both), kind of value written (integer, fractional),
 * TTL (1 ms to a year, around unit boundaries) and sub-unit phase of the
 * clock: the validity we report ends before the key can disappear or be
 * taken over by anyone, even with our clock 1 % slow; our takeover never
 * comes before a peer writer's own lease ends; and the server-clock
 * estimate.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include <cmocka.h>

#include "internal.h"

#define YEAR_MS (365LL * 86400 * 1000)

static const long long units[] = {1, 1000};
static const long long offsets[] = {0, 1, 2, 7, 1000000};
static const long long margins[] = {0, 1, 499, 500, 1000, 3600000};
enum kind { LEGACY, LEGACY_GC, BRIDGE };
static const int readers[] = {0, RELOCK__READER_WHOLE, RELOCK__READER_FRAC,
                              RELOCK__READER_WHOLE | RELOCK__READER_FRAC};
static const long ttls[] = {1,    2,    3,    99,   100,   101,   499,   500,      501,
                            998,  999,  1000, 1001, 1499,  1500,  1501,  1999,     2000,
                            2001, 2999, 3000, 3001, 29999, 30000, 30001, 86400000, (long)YEAR_MS};

static long long min_ll(long long a, long long b)
{
    return a < b ? a : b;
}

/* The value as written (legacy.c prints ts, or ts.mmm), read back as the
 * peers read it: V·u in ms exactly (a fraction has at most three digits). */
static long long written_ms(const relock__lease_cfg *cfg, const relock__lease *ls)
{
    char text[64];
    long long u = cfg->unit_ms;
    if (ls->frac)
        snprintf(text, sizeof text, "%lld.%03lld", ls->ts, ls->v_ms - ls->ts * u);
    else
        snprintf(text, sizeof text, "%lld", ls->ts);
    long long ip = 0, fp = 0, fd = 1;
    const char *p = text;
    for (; *p >= '0' && *p <= '9'; p++)
        ip = ip * 10 + (*p - '0');
    if (*p == '.')
        for (p++; *p; p++) {
            fp = fp * 10 + (*p - '0');
            fd *= 10;
        }
    assert_int_equal(fp * u % fd, 0);
    return ip * u + fp * u / fd;
}

/* The first moment (fleet ms) at which the key written by ls at now can
 * vanish or be taken over, from the rules of design.md §4.3 rather than from
 * lease.c: a whole reader holds V until its clock, in whole units, passes
 * floor(V); a fractional reader until its clock reaches V·u; our clients
 * take over at ls->ours_end_ms (checked against the writers' leases
 * below); PEXPIRE and EXPIRE count from the write, which comes after
 * now. */
static long long first_end(const relock__lease_cfg *cfg, const relock__lease *ls, long long now)
{
    long long u = cfg->unit_ms;
    long long end = ls->ours_end_ms;
    if (!cfg->readers || (cfg->readers & RELOCK__READER_WHOLE))
        end = min_ll(end, (ls->ts + 1) * u); /* smallest t with floor(t / u) > floor(V) */
    if (cfg->readers & RELOCK__READER_FRAC)
        end = min_ll(end, written_ms(cfg, ls));
    if (cfg->bridge)
        end = min_ll(end, now + ls->px_ms);
    if (ls->gc_s)
        end = min_ll(end, now + ls->gc_s * 1000);
    return end;
}

/* Our validity v, on a monotonic clock up to 1 % slow plus 2 ms, still
 * ends no later than `room` ms of fleet time. */
static void assert_fits(long long v, long long room)
{
    if (v == 0)
        return;
    assert_true(v + v / 100 + 2 <= room);
}

static long long less_drift(long long ms)
{
    long long v = ms - relock__drift_ms((long)ms);
    return v > 0 ? v : 0;
}

/* When our clients take over a value v of the unit: never before the
 * lease of whoever may have written it ends.  A fraction comes from a
 * fractional writer (its lease ends by V·u); an integer from a whole
 * writer with no offset (floor(now) + timeout: its lease ends before
 * (V + 1)·u) unless the fleet has no whole readers (then from a
 * fractional writer, or from us). */
static void check_takeover(const relock__lease_cfg *cfg, long long ts, long long fnum,
                           long long fden)
{
    long long u = cfg->unit_ms;
    relock__stamp st = {ts, fden > 1, fnum, fden};
    long long ours = relock__lease_ours_end(cfg, &st);
    long long writer_end = fden > 1 && fnum > 0 ? ts * u + (fnum * u + fden - 1) / fden
                           : (!cfg->readers || (cfg->readers & RELOCK__READER_WHOLE)) ? (ts + 1) * u
                                                                                       : ts * u;
    assert_true(ours >= writer_end + cfg->skew_margin_ms);
    /* ... and not later than that either (liveness). */
    assert_true(ours <= writer_end + cfg->skew_margin_ms);
}

static void check_one(const relock__lease_cfg *cfg, long long now, long ttl)
{
    relock__lease ls;
    relock__lease_plan(cfg, now, ttl, &ls);
    long long u = cfg->unit_ms;
    int frac_readers = (cfg->readers & RELOCK__READER_FRAC) != 0;
    if (ls.frac) {
        /* legacy.values = "fractional": now + timeout + offset to the ms. */
        assert_true(cfg->frac_values && u == 1000);
        assert_int_equal(ls.v_ms, now + ttl + cfg->offset * u);
        assert_int_equal(ls.ts, ls.v_ms / u);
    } else if (frac_readers) {
        /* A fractional reader ends V at V·u: rounded up, so that V·u is
         * never before now + ttl, whatever the offset. */
        assert_int_equal(ls.ts, (now + ttl + u - 1) / u + cfg->offset);
        assert_int_equal(ls.v_ms, ls.ts * u);
    } else {
        /* The value is the classic one: now + timeout + offset, in the unit. */
        assert_int_equal(ls.ts, now / u + (ttl + u - 1) / u + cfg->offset);
        assert_int_equal(ls.v_ms, ls.ts * u);
    }
    if (cfg->bridge) {
        /* The TTL ends while legacy readers still see the lock held. */
        assert_true(now + ls.px_ms >= min_ll(ls.v_ms, ls.ts * u));
        assert_true(now + ls.px_ms <= first_end(cfg, &ls, now) || ls.px_ms == 1);
        assert_true(now + ls.px_ms < (ls.ts + 1) * u || u == 1);
        assert_int_equal(ls.gc_s, 0);
    } else {
        assert_int_equal(ls.px_ms, 0);
    }
    if (ls.gc_s) /* gc never removes a key our clients still see held */
        assert_true(now + ls.gc_s * 1000 > ls.ours_end_ms);
    /* Safety: the validity ends before the first end, drift included. */
    assert_true(ls.valid_ms >= 0);
    assert_true(ls.valid_ms <= ttl);
    assert_fits(ls.valid_ms, first_end(cfg, &ls, now) - now);
    /* Liveness: the validity is the ttl less drift, or (bridge in
     * seconds, whole readers only) at most half a unit shorter. */
    assert_true(ls.valid_ms >= less_drift(ttl) - (cfg->bridge && !frac_readers ? u / 2 : 0));
    if (!cfg->bridge || frac_readers || ls.frac)
        assert_int_equal(ls.valid_ms, less_drift(ttl));
    /* Our takeover of what we wrote, and of the peers' values of the
     * same time. */
    check_takeover(cfg, ls.ts, ls.frac ? ls.v_ms - ls.ts * u : 0, ls.frac ? u : 1);
    check_takeover(cfg, ls.ts, 47337, 100000);
    check_takeover(cfg, ls.ts, 1, 1000000000);
    check_takeover(cfg, ls.ts, 0, 10); /* "1700000002.0": a whole clock's float */
    /* A lock adopted from this value, at the write or later, claims no
     * more than the key allows either. */
    for (long long later = 0; later <= 2 * ttl + 2 * u; later += ttl / 3 + u / 3 + 1) {
        relock__stamp st = {ls.ts, ls.frac, ls.frac ? ls.v_ms - ls.ts * u : 0,
                            ls.frac ? u : 1};
        long long a = relock__lease_adopted_ms(cfg, &st, now + later);
        assert_true(a >= 0);
        assert_fits(a, first_end(cfg, &ls, now) - (now + later));
    }
}

static void check_cfg(const relock__lease_cfg *cfg, uint64_t *rng)
{
    long long u = cfg->unit_ms;
    const long long base = 1700000000000LL; /* a present-day time, on a second */
    long long phases[] = {0, 1, u / 2 - 1, u / 2, u / 2 + 1, u - 2, u - 1, 0, 0, 0};
    for (int i = 7; i < 10; i++)
        phases[i] = (long long)(relock__rand64(rng) % (uint64_t)u);
    for (size_t p = 0; p < sizeof phases / sizeof phases[0]; p++) {
        if (phases[p] < 0 || phases[p] >= u)
            continue;
        for (size_t t = 0; t < sizeof ttls / sizeof ttls[0]; t++)
            check_one(cfg, base + 37 * 1000 + phases[p], ttls[t]);
        for (int r = 0; r < 20; r++) {
            long ttl = 1 + (long)(relock__rand64(rng) % 120000);
            check_one(cfg, base + phases[p], ttl);
        }
    }
}

/* Every unit, legal offset, skew margin, mode, kind of reader and kind
 * of value written. */
static void test_property(void **state)
{
    (void)state;
    uint64_t rng = 20240611;
    int n = 0;
    for (size_t iu = 0; iu < 2; iu++)
        for (size_t io = 0; io < sizeof offsets / sizeof offsets[0]; io++)
            for (size_t im = 0; im < sizeof margins / sizeof margins[0]; im++)
                for (int k = LEGACY; k <= BRIDGE; k++)
                    for (size_t ir = 0; ir < sizeof readers / sizeof readers[0]; ir++)
                        for (int fv = 0; fv <= 1; fv++) {
                            if (fv && units[iu] == 1)
                                continue; /* refused by the configuration */
                            relock__lease_cfg cfg = {units[iu],    offsets[io], margins[im],
                                                     k == BRIDGE,  k == LEGACY_GC,
                                                     readers[ir],  fv};
                            check_cfg(&cfg, &rng);
                            n++;
                        }
    assert_int_equal(n, 3 * 5 * 6 * 3 * 4);
}

/* The reported case: a float-second reader (redis-py < 2.10, redis-mutex)
 * beside relock with offset 0, a 2 s lease taken at .85 s.  The classic
 * value 1700000002 ends for that reader at .000, 1150 ms later, while
 * 1978 ms of validity was reported. */
static void test_fractional_reader_offset0(void **state)
{
    (void)state;
    relock__lease_cfg cfg = {1000, 0, 0, 0, 0, RELOCK__READER_FRAC, 0};
    relock__lease ls;
    relock__lease_plan(&cfg, 1700000000850LL, 2000, &ls);
    assert_int_equal(ls.ts, 1700000003LL); /* V·u at least now + ttl */
    assert_int_equal(ls.legacy_end_ms, 1700000003000LL);
    assert_int_equal(ls.valid_ms, 2000 - 22);
    /* Bridge: the TTL ends at V·u, where the reader takes over. */
    cfg.bridge = 1;
    relock__lease_plan(&cfg, 1700000000850LL, 2000, &ls);
    assert_int_equal(ls.px_ms, 2150);
    assert_int_equal(ls.valid_ms, 2000 - 22);
    /* Fractional values: V = now + ttl to the ms. */
    cfg.frac_values = 1;
    relock__lease_plan(&cfg, 1700000000850LL, 2000, &ls);
    assert_int_equal(ls.ts, 1700000002LL);
    assert_int_equal(ls.v_ms, 1700000002850LL);
    assert_int_equal(ls.px_ms, 2000);
    assert_int_equal(ls.valid_ms, 2000 - 22);
    /* A peer's "1700000002.47337" ends at .474 for us, not a second later. */
    relock__stamp st = {1700000002LL, 1, 47337, 100000};
    cfg.bridge = 0;
    assert_int_equal(relock__lease_ours_end(&cfg, &st), 1700000002474LL);
}

/* redis-py 2.7's Lock writes float(int(time.time()) + timeout), printed
 * "1700000002.0", and compares it with int(time.time()): its readers hold
 * it until 1700000003 s, and its holder counts its timeout from a moment
 * up to a second after 1700000002 - timeout.  A fraction of zero is a
 * whole clock's value: it ends as an integer does. */
static void test_whole_clock_fraction(void **state)
{
    (void)state;
    relock__lease_cfg cfg = {1000, 0, 0, 0, 0, RELOCK__READER_WHOLE, 0};
    relock__stamp st = {1700000002LL, 1, 0, 10};
    assert_int_equal(relock__lease_ours_end(&cfg, &st), 1700000003000LL);
    cfg.readers = RELOCK__READER_WHOLE | RELOCK__READER_FRAC;
    cfg.skew_margin_ms = 250;
    assert_int_equal(relock__lease_ours_end(&cfg, &st), 1700000003250LL);
    /* Nine zeros and a digit beyond them are a fraction all the same. */
    relock__stamp tiny = {1700000002LL, 1, 1, 1000000000};
    assert_int_equal(relock__lease_ours_end(&cfg, &tiny), 1700000002251LL);
}

/* A stamp of 16 to 18 digits (any number a key may hold, read as seconds
 * by inspect) does not fit in ms: the time saturates, far beyond every
 * clock, with room for a unit and a skew margin above it. */
static void test_stamp_saturates(void **state)
{
    (void)state;
    relock__stamp big = {999999999999999999LL, 0, 0, 1};
    assert_int_equal(relock__stamp_ms(&big, 1000, 1), RELOCK__STAMP_MAX_MS);
    relock__stamp frac = {9223372036854775LL, 1, 999999999, 1000000000};
    assert_int_equal(relock__stamp_ms(&frac, 1000, 1), RELOCK__STAMP_MAX_MS);
    relock__stamp fits = {1700000002LL, 1, 47337, 100000};
    assert_int_equal(relock__stamp_ms(&fits, 1000, 1), 1700000002474LL);
    assert_true(RELOCK__STAMP_MAX_MS + 1000 + 3600000 > RELOCK__STAMP_MAX_MS);
}

/* The reported case: bridge, seconds, offset 0, a 2 s lease acquired at
 * .85 s.  The key lives 1650 ms; 1978 ms of validity was reported. */
static void test_bridge_offset0_late_in_second(void **state)
{
    (void)state;
    relock__lease_cfg cfg = {1000, 0, 0, 1, 0, 0, 0};
    relock__lease ls;
    relock__lease_plan(&cfg, 1700000000850LL, 2000, &ls);
    assert_int_equal(ls.ts, 1700000002LL);
    assert_int_equal(ls.px_ms, 1650);
    assert_true(ls.valid_ms < 1650);
    assert_int_equal(ls.valid_ms, 1650 - 1650 / 100 - 2);
    /* Early in the second the ttl asked for binds. */
    relock__lease_plan(&cfg, 1700000000100LL, 2000, &ls);
    assert_int_equal(ls.px_ms, 2400);
    assert_int_equal(ls.valid_ms, 2000 - 22);
}

static void test_clock_estimate(void **state)
{
    (void)state;
    relock__clock_est e = {0};
    assert_true(relock__clock_due(&e, 100));
    /* Sent at 1000, answered at 1010: the server read 5e12 at the middle. */
    assert_int_equal(relock__clock_measured(&e, 1000, 1010, 5000000000000LL), 1);
    assert_int_equal(relock__clock_server_ms(&e, 1005), 5000000000000LL);
    assert_int_equal(relock__clock_server_ms(&e, 3005), 5000000002000LL);
    assert_false(relock__clock_due(&e, 1010 + RELOCK__CLOCK_REMEASURE_MS - 1));
    assert_true(relock__clock_due(&e, 1010 + RELOCK__CLOCK_REMEASURE_MS));
    /* A slow round trip soon after does not replace the better estimate
     * while the two agree within their uncertainties (150 ms and 10). */
    assert_int_equal(relock__clock_measured(&e, 6010, 6310, 5000000005255LL), 0);
    assert_int_equal(relock__clock_server_ms(&e, 1005), 5000000000000LL);
    assert_false(relock__clock_due(&e, 6311)); /* tried: not again at once */
    /* A step of the server's clock: a measurement that disagrees by more
     * than both uncertainties replaces the estimate, however slow, since
     * the old one is simply wrong now (a minute back, then back again). */
    relock__clock_est s = e;
    assert_int_equal(relock__clock_measured(&s, 7010, 7310, 5000000006155LL - 60000), 1);
    assert_int_equal(relock__clock_server_ms(&s, 7160), 5000000006155LL - 60000);
    assert_int_equal(relock__clock_measured(&s, 8010, 8310, 5000000007155LL), 1);
    assert_int_equal(relock__clock_server_ms(&s, 8160), 5000000007155LL);
    /* Just beyond the two uncertainties (150 + 10 ms) is a step too. */
    s = e;
    assert_int_equal(relock__clock_measured(&s, 6010, 6310, 5000000005155LL + 161), 1);
    s = e;
    assert_int_equal(relock__clock_measured(&s, 6010, 6310, 5000000005155LL + 160), 0);
    /* As the old estimate ages, a measurement as good as it is taken. */
    assert_int_equal(relock__clock_measured(&e, 20000, 20012, 5000000019006LL), 1);
    assert_int_equal(relock__clock_server_ms(&e, 20006), 5000000019006LL);
    /* ... and after long enough even a slow one (a server clock step is
     * followed within minutes, not never). */
    assert_int_equal(relock__clock_measured(&e, 400000, 400300, 5000000900000LL), 1);
}

/* Whatever moment within the round trip the server read its clock, the
 * estimate is off by at most half the round trip. */
static void test_clock_error_bound(void **state)
{
    (void)state;
    uint64_t rng = 7;
    for (int i = 0; i < 10000; i++) {
        relock__clock_est e = {0};
        long long offset = 1700000000000LL + (long long)(relock__rand64(&rng) % 100000000);
        uint64_t t0 = 1000 + relock__rand64(&rng) % 1000000;
        uint64_t rtt = relock__rand64(&rng) % 2000;
        uint64_t when = t0 + (rtt ? relock__rand64(&rng) % (rtt + 1) : 0);
        relock__clock_measured(&e, t0, t0 + rtt, (long long)when + offset);
        long long err = relock__clock_server_ms(&e, when) - ((long long)when + offset);
        assert_true(err <= (long long)(rtt + 1) / 2 && -err <= (long long)(rtt + 1) / 2);
    }
}

/* Automatic renewal waits a third of the ttl, never more than half of the
 * validity left, never less than 1 ms; 1 ms when the validity is unknown
 * (0: an adopted lock) or already over. */
static void test_renew_wait(void **state)
{
    (void)state;
    uint64_t now = 100000;
    assert_int_equal(relock__renew_wait_ms(30000, now + 29698, now), 10000);
    assert_int_equal(relock__renew_wait_ms(30000, now + 20000, now), 10000);
    assert_int_equal(relock__renew_wait_ms(30000, now + 1978, now), 989);
    assert_int_equal(relock__renew_wait_ms(30000, now + 1, now), 1);
    assert_int_equal(relock__renew_wait_ms(30000, 0, now), 1);
    assert_int_equal(relock__renew_wait_ms(30000, now, now), 1);
    assert_int_equal(relock__renew_wait_ms(2, now + 1000, now), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_property),
        cmocka_unit_test(test_bridge_offset0_late_in_second),
        cmocka_unit_test(test_fractional_reader_offset0),
        cmocka_unit_test(test_whole_clock_fraction),
        cmocka_unit_test(test_stamp_saturates),
        cmocka_unit_test(test_clock_estimate),
        cmocka_unit_test(test_clock_error_bound),
        cmocka_unit_test(test_renew_wait),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
