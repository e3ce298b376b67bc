/*
 * Events (relock_config_set_event_fn()): one place that fills the event
 * and calls the program's callback, for the calls that acquire and release
 * (lock.c) and the renewal thread (renew.c).
 */
#include "handle.h"

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
    switch (kind) {
    case RELOCK_EVENT_ACQUIRED:
        return "acquired";
    case RELOCK_EVENT_RENEWED:
        return "renewed";
    case RELOCK_EVENT_RENEW_FAILED:
        return "renew_failed";
    case RELOCK_EVENT_LOST:
        return "lost";
    case RELOCK_EVENT_RELEASED:
        return "released";
    }
    return "unknown";
}

void relock__event(const relock_client *c, relock_event_kind kind, const relock_lock *l,
                   relock_status st, long long waited_ms)
{
    if (!c || !c->s.event_fn)
        return;
    uint64_t now = relock__mono_ms();
    relock_event ev;
    ev.kind = kind;
    ev.name = l->name;
    ev.status = st;
    ev.waited_ms = waited_ms;
    ev.held_ms = l->acquired_at ? (long long)(now - l->acquired_at) : -1;
    ev.validity_ms = 0;
    if (kind == RELOCK_EVENT_ACQUIRED || kind == RELOCK_EVENT_RENEWED ||
        kind == RELOCK_EVENT_RENEW_FAILED)
        ev.validity_ms = l->valid_until > now ? (long long)(l->valid_until - now) : 0;
    c->s.event_fn(&ev, c->s.event_arg);
}
