/* Events: the program's callback and the names of the kinds; src/base/
 * handle.c fills each event and calls it. */
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
