/*
 * Names of the keys relock keeps beside lock keys.
 *
 * Lock names never contain a space (lock.c refuses them) and key_prefix may
 * not either (config.c), so every key below, which contains one, lives in a
 * namespace no lock can collide with, and `relock scan` can skip them.
 *
 * A fence key shares its lock key's Redis Cluster slot: a lock key with a
 * hash tag keeps it, and one without is wrapped in braces so that only it
 * is hashed.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* Whether key has a Cluster hash tag: a '{' followed later by a '}' with
 * at least one byte between them. */
static int has_hash_tag(const char *key)
{
    const char *open = strchr(key, '{');
    if (!open)
        return 0;
    const char *close = strchr(open + 1, '}');
    return close && close > open + 1;
}

int relock__key_slot_safe(const char *key)
{
    /* Braces around a key without a tag hash exactly the key, unless the
     * key itself holds a '}' (the tag would end there). */
    return has_hash_tag(key) || !strchr(key, '}');
}

/* A key beside lock_key, in its Cluster slot, ending with suffix. */
static int side_key(const char *lock_key, const char *suffix, char *out, size_t len)
{
    int n = has_hash_tag(lock_key) ? snprintf(out, len, "%s%s", lock_key, suffix)
                                   : snprintf(out, len, "{%s}%s", lock_key, suffix);
    return (n < 0 || (size_t)n >= len) ? -1 : 0;
}

int relock__fence_key(const char *lock_key, char *out, size_t len)
{
    return side_key(lock_key, RELOCK__FENCE_SUFFIX, out, len);
}

int relock__owner_key(const char *lock_key, char *out, size_t len)
{
    return side_key(lock_key, RELOCK__OWNER_SUFFIX, out, len);
}

int relock__marker_key(const char *key_prefix, char *out, size_t len)
{
    int n = snprintf(out, len, "%s" RELOCK__MARKER_NAME, key_prefix);
    return (n < 0 || (size_t)n >= len) ? -1 : 0;
}

int relock__notify_channel(const relock_lock *l, char *out, size_t len)
{
    if (!l->c->s.wait.notify) {
        out[0] = '\0';
        return 0;
    }
    int n = snprintf(out, len, "%s" RELOCK__NOTIFY_SUFFIX, l->key);
    if (n < 0 || (size_t)n >= len) {
        out[0] = '\0';
        return 0;
    }
    return 1;
}
