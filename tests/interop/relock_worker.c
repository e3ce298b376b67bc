/*
 * relock_worker: the interop worker loop of classic_lock.c, but taking the
 * lock through relock's public API, so that both kinds run identical
 * critical sections (worker.c) on one key.
 *
 *   relock_worker --port P --key K --unit s|ms --ttl MS --mode bridge|modern|legacy
 *                 --sections N --log FILE --counter C
 *                 [--wait MS --die-prob X --seed S --until-ms M --gap-ms G]
 *                 [--resource-port P --hold-ms MS --tolerate --fault-file F --skew-margin MS]
 *
 * --unit becomes legacy.clock_unit; --ttl is the lease (the interop test
 * gives it the classic clients' timeout); --wait bounds one acquire call,
 * after which the worker tries again until --until-ms.  The log kind is the
 * mode name.  Exit 0 when done (or past the deadline), 2 usage, 3 Redis,
 * 4 a relock call failed in a way a worker cannot shrug off.
 *
 * The torture runner (tests/torture/) adds the last line: the section uses
 * the fenced resource with the lock's fencing token; --skew-margin sets
 * legacy.skew_margin_ms; with --tolerate, failures that faults cause
 * (EIO, EAMBIGUOUS, EPROTO, ...) are logged as "error what:STATUS" and the
 * worker tries again instead of exiting.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "relock.h"
#include "worker.h"

static void fail(relock_client *c, const char *what, relock_status st)
{
    const relock_error *e = relock_client_error(c);
    fprintf(stderr, "relock_worker: %s: %s: %s\n", what, relock_status_name(st),
            e && e->message[0] ? e->message : relock_strerror(st));
    exit(4);
}

static void set(relock_config *cfg, const char *name, const char *value)
{
    relock_status st = relock_config_set(cfg, name, value);
    if (st != RELOCK_OK) {
        fprintf(stderr, "relock_worker: %s = %s: %s\n", name, value,
                relock_config_error(cfg)->message);
        exit(2);
    }
}

static int still_valid(void *ctx)
{
    return relock_lock_validity_ms(ctx) > 0;
}

/* "what:STATUS" without the RELOCK_ prefix, e.g. "acquire:EIO". */
static void log_status(wk_worker *w, const char *what, relock_status st)
{
    const char *name = relock_status_name(st);
    if (strncmp(name, "RELOCK_", 7) == 0)
        name += 7;
    char detail[48];
    snprintf(detail, sizeof detail, "%s:%s", what, name);
    wk_error(w, detail);
}

/* Failures a fault can cause; anything else is a bug or a bad setting. */
static int tolerable(relock_status st)
{
    return st == RELOCK_EIO || st == RELOCK_EAMBIGUOUS || st == RELOCK_EPROTO ||
           st == RELOCK_LOST || st == RELOCK_EFOREIGN;
}

/* --tolerate: connect until it works or the deadline passes (the server
 * may be restarting); NULL at the deadline. */
static relock_client *connect_tolerant(wk_worker *w, const relock_config *cfg)
{
    for (int i = 0; i < 100000; i++) {
        if (w->o->until_ms && wk_mono_ms() >= w->o->until_ms)
            return NULL;
        relock_client *c = NULL;
        relock_status st = relock_connect(cfg, &c);
        if (st == RELOCK_OK)
            return c;
        if (!c || !tolerable(st))
            fail(c, "connect", st);
        log_status(w, "connect", st);
        relock_client_free(c);
        wk_sleep_us(wk_rand_between(w, 20000, 60000));
    }
    return NULL;
}

int main(int argc, char **argv)
{
    wk_opts o;
    wk_parse(argc, argv, &o, 1);
    wk_worker w;
    wk_init(&w, &o, o.mode);

    relock_config *cfg = relock_config_new();
    if (!cfg)
        exit(4);
    char buf[64];
    snprintf(buf, sizeof buf, "redis://127.0.0.1:%d", o.port);
    if (relock_config_set_url(cfg, buf) != RELOCK_OK) {
        fprintf(stderr, "relock_worker: url: %s\n", relock_config_error(cfg)->message);
        exit(2);
    }
    set(cfg, "mode", o.mode);
    set(cfg, "legacy.clock_unit", o.unit_ms ? "ms" : "s");
    snprintf(buf, sizeof buf, "%ld", o.ttl_ms);
    set(cfg, "ttl_ms", buf);
    if (o.skew_margin_ms >= 0) {
        snprintf(buf, sizeof buf, "%ld", o.skew_margin_ms);
        set(cfg, "legacy.skew_margin_ms", buf);
    }
    relock_client *c = NULL;
    relock_status st = RELOCK_OK;
    if (o.tolerate) {
        c = connect_tolerant(&w, cfg);
        relock_config_free(cfg);
        if (!c)
            return 0; /* the deadline passed while the server was away */
    } else {
        st = relock_connect(cfg, &c);
        relock_config_free(cfg);
        if (st != RELOCK_OK) {
            if (!c)
                exit(4);
            fail(c, "connect", st);
        }
    }
    /* The section's data: the counter on the lock server, or the fenced
     * resource on a server of its own. */
    redisContext *rc = o.resource_port ? wk_connect(o.resource_port) : wk_connect(o.port);
    long lost = 0;

    while (w.done < o.sections) {
        long wait = o.wait_ms;
        if (o.until_ms) {
            uint64_t now = wk_mono_ms();
            if (now >= o.until_ms)
                break;
            if ((uint64_t)wait > o.until_ms - now)
                wait = (long)(o.until_ms - now);
        }
        relock_lock *l = NULL;
        st = relock_acquire(c, o.key, o.ttl_ms, wait, &l);
        if (st == RELOCK_TIMEOUT)
            continue;
        if (st != RELOCK_OK && o.tolerate && tolerable(st)) {
            /* The lock may be ours after an ambiguous reply: its TTL or
             * timestamp ends it, and then anyone may take it. */
            log_status(&w, "acquire", st);
            wk_sleep_us(wk_rand_between(&w, 5000, 30000));
            continue;
        }
        if (st != RELOCK_OK)
            fail(c, "acquire", st);
        int sect;
        if (o.resource_port) {
            /* The lease ends validity_ms from now on the monotonic clock
             * (validity is rounded down to the ms, so this is at most 1 ms
             * early). */
            uint64_t lease_end =
                wk_mono_ns() + (uint64_t)relock_lock_validity_ms(l) * 1000000u;
            sect = wk_section_fenced(&w, rc, relock_lock_fence(l), lease_end, still_valid, l);
        } else {
            sect = wk_section(&w, rc, still_valid, l);
        }
        if (sect != 0)
            exit(3);
        int valid_before = relock_lock_validity_ms(l) > 0;
        st = relock_release(l);
        if (st == RELOCK_LOST) {
            wk_log(&w, "lost", valid_before ? "valid" : "expired");
            /* The first one says why; the log counts them all. */
            if (lost++ == 0)
                fprintf(stderr, "relock_worker[%ld]: release: %s\n", (long)getpid(),
                        relock_client_error(c)->message);
        } else if (st == RELOCK_EAMBIGUOUS) {
            /* design.md §4.6: where ownership cannot be told, neither claim nor
             * delete.  Not a failure of the worker: logged and counted. */
            wk_log(&w, "ambiguous", NULL);
            fprintf(stderr, "relock_worker[%ld]: release: %s\n", (long)getpid(),
                    relock_client_error(c)->message);
        } else if (st != RELOCK_OK && o.tolerate && tolerable(st)) {
            log_status(&w, "release", st);
        } else if (st != RELOCK_OK) {
            fail(c, "release", st);
        }
        relock_lock_free(l);
        wk_gap(&w);
    }
    redisFree(rc);
    relock_client_free(c);
    return 0;
}
