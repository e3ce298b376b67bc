/*
 * Events (relock_config_set_event_fn()): the program's callback and the
 * names of the kinds; src/base/handle.c fills each event and calls it.
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
