/* Client handles: connect, choose the mode, free; the program's callback
 * for events (src/base/handle.c fills each event and calls it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "algo.h"
#include "core/pollloop.h"

void relock__client_init(relock_client *c, const relock_config *cfg, const void *salt)
{
    relock__err_clear(&c->err);
    c->s = cfg->s;
    c->conn.srv = &c->s.servers[0];
    relock__scripts_init(c);
    char tok[33];
    uint64_t seed = relock__mono_ms() ^ (uint64_t)(uintptr_t)salt;
    if (relock__token(tok) == 0)
        for (int i = 0; i < 16; i++)
            seed = seed * 31u + (unsigned char)tok[i];
    c->rng = seed ? seed : 1;
    c->replicas_acked = -1;
}

/* WAIT would have to be counted per server, and the quorum's validity
 * rules extended for lock_delay_ms (decisions 105 and 106). */
relock_status relock__quorum_check(relock_client *c)
{
    if (c->s.nservers > 1 && (relock__durable_on(c) || c->s.lock_delay_ms > 0))
        return RELOCK__FAIL(&c->err, RELOCK_EUNSUPPORTED,
                            "%s: not with several servers (a quorum); configure one server, "
                            "or turn it off",
                            relock__durable_on(c) ? "durability" : "lock_delay_ms");
    return RELOCK_OK;
}

relock_status relock_connect(const relock_config *cfg, relock_client **out)
{
    if (!out)
        return RELOCK_EINVAL;
    *out = NULL;
    if (!cfg)
        return RELOCK_EINVAL;
    relock_client *c = calloc(1, sizeof *c);
    if (!c)
        return RELOCK_ENOMEM;
    *out = c;
    relock__client_init(c, cfg, c);
    /* Several servers: a quorum, whose servers connect on first use (a
     * minority of them may be down). */
    relock_status st = relock__quorum_check(c);
    if (st != RELOCK_OK) {
        snprintf(c->mode_reason, sizeof c->mode_reason, "%.255s", c->err.msg);
        return st;
    }
    if (c->s.nservers > 1) {
        st = relock__quorum_setup(c);
        if (st == RELOCK_OK && relock__qpoll_new(c) != 0) {
            c->algo = NULL;
            st = RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "servers: out of memory");
        }
        return st;
    }
    /* The connection made, logged in and probed now: the mode is chosen
     * by the server's capabilities. */
    st = relock__drive_ready(c, NULL);
    if (st == RELOCK_OK)
        st = relock__select_mode(c);
    if (st != RELOCK_OK)
        return st;
    /* Settings the mode or the server cannot honour: no lock is taken
     * with them silently ignored (durable.c). */
    st = relock__durable_check(c);
    if (st != RELOCK_OK) {
        c->algo = NULL;
        snprintf(c->mode_reason, sizeof c->mode_reason, "%.255s", c->err.msg);
    }
    return st;
}

/* Connects with a configuration made by fill(); a configuration error is
 * handed over on a client handle, as relock_connect() promises. */
static relock_status connect_with(relock_status (*fill)(relock_config *, const char *),
                                  const char *arg, relock_client **out)
{
    if (!out)
        return RELOCK_EINVAL;
    *out = NULL;
    relock_config *cfg = relock_config_new();
    if (!cfg)
        return RELOCK_ENOMEM;
    relock_status st = fill(cfg, arg);
    if (st == RELOCK_OK)
        st = relock_connect(cfg, out);
    else if ((*out = calloc(1, sizeof **out)))
        relock__err_copy(&(*out)->err, &cfg->err);
    relock_config_free(cfg);
    return st;
}

relock_status relock_connect_file(const char *path, relock_client **out)
{
    return connect_with(relock_config_load_file, path, out);
}

relock_status relock_connect_url(const char *url, relock_client **out)
{
    return connect_with(relock_config_set_url, url, out);
}

void relock_client_free(relock_client *c)
{
    if (!c)
        return;
    relock__qpoll_free(c);
    /* Settings hold passwords; the pattern also makes use-after-free show. */
    memset(c, 0xa5, sizeof *c);
    free(c);
}

const relock_error *relock_client_error(const relock_client *c)
{
    return c ? &c->err.pub : &relock__null_handle_error;
}

relock_status relock_client_cancel_on(relock_client *c, const volatile sig_atomic_t *flag)
{
    if (!c)
        return RELOCK_EINVAL;
    c->cancel = flag;
    return RELOCK_OK;
}

relock_mode relock_client_mode(const relock_client *c)
{
    return c ? c->mode : RELOCK_MODE_AUTO;
}

const char *relock_client_mode_reason(const relock_client *c)
{
    return c ? c->mode_reason : "";
}

relock_status relock_config_set_event_fn(relock_config *cfg, relock_event_fn fn, void *arg)
{
    if (!cfg)
        return RELOCK_EINVAL;
    relock__err_clear(&cfg->err);
    cfg->s.event_fn = fn;
    cfg->s.event_arg = fn ? arg : NULL;
    return RELOCK_OK;
}

const char *relock_event_name(relock_event_kind kind)
{
    static const char *const names[] = {
        [RELOCK_EVENT_ACQUIRED] = "acquired",
        [RELOCK_EVENT_RENEWED] = "renewed",
        [RELOCK_EVENT_RENEW_FAILED] = "renew_failed",
        [RELOCK_EVENT_LOST] = "lost",
        [RELOCK_EVENT_RELEASED] = "released",
    };
    if ((unsigned)kind >= sizeof names / sizeof *names || !names[kind])
        return "unknown";
    return names[kind];
}
