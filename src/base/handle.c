/* What is done with a handle's data alone, for every layer above; calls
 * nothing above src/base/ (the callback and the handle's hooks are
 * pointers). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "handle.h"

/* How long a releaser that woke waiters stays away from that lock: a few
 * round trips, enough for a woken waiter to take it. */
#define YIELD_MS 2

static uint64_t key_hash(const char *key)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *key; key++)
        h = (h ^ (unsigned char)*key) * 1099511628211ull;
    return h;
}

void relock__yield_note(relock_lock *l)
{
    l->c->yield_key = key_hash(l->key);
    l->c->yield_until = relock__mono_ms() + YIELD_MS;
}

long long relock__yield_ms(const relock_lock *l)
{
    uint64_t now = relock__mono_ms();
    if (l->c->yield_until > now && l->c->yield_key == key_hash(l->key))
        return (long long)(l->c->yield_until - now);
    return 0;
}

void relock__event(const relock_client *c, relock_event_kind kind, const relock_lock *l,
                   relock_status st, long long waited_ms)
{
    if (!c || !c->s.event_fn)
        return;
    uint64_t now = relock__mono_ms();
    relock_event ev = {.kind = kind, .name = l->name, .status = st, .waited_ms = waited_ms,
                       .held_ms = l->acquired_at ? (long long)(now - l->acquired_at) : -1};
    if (kind == RELOCK_EVENT_ACQUIRED || kind == RELOCK_EVENT_RENEWED ||
        kind == RELOCK_EVENT_RENEW_FAILED)
        ev.validity_ms = l->valid_until > now ? (long long)(l->valid_until - now) : 0;
    c->s.event_fn(&ev, c->s.event_arg);
}

void relock__owner_info(const relock_lock *l, char *info, size_t n)
{
    char host[65] = "?", started[32] = "?";
    if (gethostname(host, sizeof host - 1) != 0)
        snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = '\0';
    time_t at = l->owner_since ? (time_t)l->owner_since : time(NULL);
    struct tm tm;
    if (gmtime_r(&at, &tm))
        strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", &tm);
    long pid = l->owner_pid ? l->owner_pid : (long)getpid();
    const char *text = l->owner_text ? l->owner_text : "";
    snprintf(info, n, "host=%s pid=%ld at=%s%s%s", host, pid, started, text[0] ? " " : "", text);
}

void relock__lock_destroy(relock_lock *l)
{
    if (l->al && l->al_free(l))
        return;
    if (l->keeper)
        l->keep_ops->end(l);
    free(l->owner_text);
    free(l->unsure_value);
    memset(l, 0xa5, sizeof *l); /* makes a use after free show */
    free(l);
}
