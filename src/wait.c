/*
 * Waiting for a lock: repeat the algorithm's single attempt, sleeping in
 * between until just after the holder's known end (PTTL or timestamp) or a
 * jittered, growing backoff, whichever is first, and never past the
 * caller's bound.
 */
#include "internal.h"

relock_status relock__wait_acquire(relock_lock *l, long wait_ms)
{
    relock_client *c = l->c;
    uint64_t start = relock__mono_ms();
    uint64_t deadline = wait_ms > 0 ? start + (uint64_t)wait_ms : 0;
    for (unsigned attempt = 0;; attempt++) {
        long hint = -1;
        relock_status st = c->algo->attempt(l, &hint);
        if (st != RELOCK_BUSY)
            return st;
        if (wait_ms == 0)
            return RELOCK__FAIL(&c->err, RELOCK_BUSY, "lock %s is held", l->name);
        long delay = relock__backoff(c->s.wait.backoff_min_ms, c->s.wait.backoff_max_ms,
                                     attempt < 30 ? attempt : 30, hint, relock__rand64(&c->rng));
        uint64_t now = relock__mono_ms();
        if (deadline) {
            if (now >= deadline)
                return RELOCK__FAIL(&c->err, RELOCK_TIMEOUT, "lock %s: still held after %ld ms",
                                    l->name, wait_ms);
            if (now + (uint64_t)delay > deadline)
                delay = (long)(deadline - now);
        }
        relock__sleep_ms(delay);
    }
}
