/* The wait planner: see waitplan.h.  Pure; reads nothing but its inputs. */
#include "engine/waitplan.h"

long long relock__backoff(long long min_ms, long long max_ms, unsigned attempt, long long hint_ms,
                          uint64_t rnd)
{
    long long d = min_ms;
    for (unsigned i = 0; i < attempt && d < max_ms; i++)
        d *= 2;
    if (d > max_ms)
        d = max_ms;
    /* Jitter in [d/2, d] keeps waiters from moving in lockstep. */
    long long half = d / 2;
    if (d - half > 0)
        d = half + (long long)(rnd % (uint64_t)(d - half + 1));
    if (d < 1)
        d = 1;
    /* Wake just after the holder's known end rather than a backoff later. */
    if (hint_ms >= 0 && hint_ms + 1 < d)
        d = hint_ms + 1;
    return d;
}

long long relock__legacy_poll_ms(long long backoff_min_ms)
{
    return 2 * backoff_min_ms;
}

/* How long to sleep before the next attempt (>= 1 ms, not yet clamped to
 * the bound); *window set when polling a silent holder near its end. */
static long long delay_of(const relock__wait_in *in, int *window)
{
    unsigned a = in->attempt < RELOCK__BACKOFF_ATTEMPTS_MAX ? in->attempt
                                                            : RELOCK__BACKOFF_ATTEMPTS_MAX;
    long long d =
        relock__backoff(in->backoff_min_ms, in->backoff_max_ms, a, in->holder_ms, in->rnd);
    *window = 0;
    if (!in->silent_holder)
        return d;
    long long poll = relock__legacy_poll_ms(in->backoff_min_ms);
    /*
     * Classic clients find the holder expired at its end less the skew
     * margin by their clocks, which may differ from ours by the margin:
     * from holder_ms - 2 * margin on.  Near that, the lock changes hands
     * among them every few ms, and so does a holder's late DEL: poll as
     * often, or lose every race.  Further off only a holder's early DEL
     * can free it: the backoff notices that, and we wake at the window's
     * start at the latest.  An unknown end may be near: poll.
     */
    long long lead = RELOCK__LEGACY_WINDOW_MS + 2 * in->skew_margin_ms;
    if (in->holder_ms < 0 || in->holder_ms <= lead) {
        *window = 1;
        return d < poll ? d : poll;
    }
    long long to_window = in->holder_ms - lead;
    return d < to_window ? d : to_window;
}

relock__wait_plan relock__wait_plan_next(const relock__wait_in *in)
{
    if (in->bound_ms == 0)
        return (relock__wait_plan){RELOCK__WAIT_BUSY, 0, 0};
    /* No new step once the bound has passed (decision 83). */
    int bounded = in->bound_ms > 0;
    if (bounded && in->left_ms <= 0)
        return (relock__wait_plan){RELOCK__WAIT_TIMEOUT, 0, 0};
    if (!in->after_subscribe && in->attempt == 0 && in->notify && !in->subscribed)
        return (relock__wait_plan){RELOCK__WAIT_SUBSCRIBE, 0, 0};
    if (in->after_subscribe && in->subscribed)
        return (relock__wait_plan){RELOCK__WAIT_RETRY, 0, 0};
    relock__wait_plan p = {RELOCK__WAIT_SLEEP, 0, 0};
    p.sleep_ms = delay_of(in, &p.window);
    if (bounded && p.sleep_ms > in->left_ms)
        p.sleep_ms = in->left_ms;
    return p;
}
