/*
 * relock_worker: the interop worker loop of classic_lock.c, but taking the
 * lock through relock's public API, so that both kinds run identical
 * critical sections (worker.c) on one key.
 *
 *   relock_worker --port P --key K --unit s|ms --ttl MS --mode bridge|modern|legacy
 *                 --sections N --log FILE --counter C
 *                 [--wait MS --die-prob X --seed S --until-ms M --gap-ms G]
 *
 * --unit becomes legacy.clock_unit; --ttl is the lease (the interop test
 * gives it the classic clients' timeout); --wait bounds one acquire call,
 * after which the worker tries again until --until-ms.  The log kind is the
 * mode name.  Exit 0 when done (or past the deadline), 2 usage, 3 Redis,
 * 4 a relock call failed in a way a worker cannot shrug off.
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
    relock_client *c = NULL;
    relock_status st = relock_connect(cfg, &c);
    relock_config_free(cfg);
    if (st != RELOCK_OK) {
        if (!c)
            exit(4);
        fail(c, "connect", st);
    }
    redisContext *rc = wk_connect(o.port);
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
        if (st != RELOCK_OK)
            fail(c, "acquire", st);
        if (wk_section(&w, rc, still_valid, l) != 0)
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
            /* DESIGN §3: where ownership cannot be told, neither claim nor
             * delete.  Not a failure of the worker: logged and counted. */
            wk_log(&w, "ambiguous", NULL);
            fprintf(stderr, "relock_worker[%ld]: release: %s\n", (long)getpid(),
                    relock_client_error(c)->message);
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
