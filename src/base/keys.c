/*
 * Names of the keys relock keeps beside lock keys, and the rules of lock
 * names.  Lock names never contain a space (relock__check_name()), nor does
 * key_prefix (config.c), so every key below, which has one, lives where no
 * lock can collide with it, and `relock scan` can skip them.
 *
 * A side key shares its lock key's Cluster slot: a key with a hash tag
 * keeps it, one without is wrapped in braces.  A key that is only a tag,
 * "{a}", is the braced form of the key inside it ("a"), so its side keys
 * carry RELOCK__WHOLE_TAG_MARK after the suffix: distinct lock keys never
 * share a side key.
 */
#include <stdlib.h>
#include <string.h>

#include "handle.h"

/* Joins the n strings of part into out as snprintf(out, len, "%s%s...")
 * would (0, or -1 when cut short), without parsing a format on every
 * lock call. */
static int join(char *out, size_t len, int n, const char *const *part)
{
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        size_t l = strlen(part[i]);
        if (at + l >= len) {
            if (len > at)
                memcpy(out + at, part[i], len - 1 - at);
            if (len > 0)
                out[len - 1] = '\0';
            return -1;
        }
        memcpy(out + at, part[i], l);
        at += l;
    }
    if (len > 0)
        out[at] = '\0';
    return 0;
}

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

/* Whether key is "{X}" with no other '}': the braced form relock gives an
 * untagged key X (which never holds a '}', see relock__key_slot_safe). */
static int whole_tag(const char *key)
{
    size_t n = strlen(key);
    return n >= 3 && key[0] == '{' && strchr(key, '}') == key + n - 1;
}

/* A key beside lock_key, in its Cluster slot, ending with suffix; with
 * as_before, the name it had before whole-tag keys got their mark. */
static int side_key(const char *lock_key, const char *suffix, int as_before, char *out,
                    size_t len)
{
    const char *mark = whole_tag(lock_key) && !as_before ? RELOCK__WHOLE_TAG_MARK : "";
    if (has_hash_tag(lock_key)) {
        const char *part[] = {lock_key, suffix, mark};
        return join(out, len, 3, part);
    }
    const char *part[] = {"{", lock_key, "}", suffix};
    return join(out, len, 4, part);
}

/* A space or control character is almost always a mistake and unprintable
 * in messages; above all, no lock key may be one of relock's own. */
relock_status relock__check_name(relock_client *c, const char *name)
{
    if (!name || !*name)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "lock name: empty");
    size_t len = strlen(name);
    if (len > RELOCK__NAME_MAX)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "lock name: %zu bytes, at most %d", len,
                            RELOCK__NAME_MAX);
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (ch <= ' ' || ch == 0x7f)
            return RELOCK__FAIL(&c->err, RELOCK_EINVAL,
                                "lock name: contains a space or control character at byte %zu",
                                i);
    }
    return RELOCK_OK;
}

/* The side keys of base.h, each named by its suffix. */
#define SIDE_KEY(fn, suffix)                                                                   \
    int fn(const char *lock_key, char *out, size_t len)                                        \
    {                                                                                          \
        return side_key(lock_key, suffix, 0, out, len);                                        \
    }
SIDE_KEY(relock__fence_key, RELOCK__FENCE_SUFFIX)
SIDE_KEY(relock__breaks_key, RELOCK__BREAKS_SUFFIX)
SIDE_KEY(relock__owner_key, RELOCK__OWNER_SUFFIX)

int relock__fence_key_before(const char *lock_key, char *out, size_t len)
{
    if (!whole_tag(lock_key))
        return 0;
    return side_key(lock_key, RELOCK__FENCE_SUFFIX, 1, out, len) == 0 ? 1 : -1;
}

/* The markers of base.h, each named after key_prefix. */
#define PREFIX_KEY(fn, name)                                                                   \
    int fn(const char *key_prefix, char *out, size_t len)                                      \
    {                                                                                          \
        const char *part[] = {key_prefix, name};                                               \
        return join(out, len, 2, part);                                                        \
    }
PREFIX_KEY(relock__marker_key, RELOCK__MARKER_NAME)
PREFIX_KEY(relock__watch_key, RELOCK__WATCH_NAME)

int relock__notify_channel(const relock_lock *l, char *out, size_t len)
{
    const char *part[] = {l->key, RELOCK__NOTIFY_SUFFIX};
    if (!l->c->s.wait.notify || join(out, len, 2, part) != 0) {
        out[0] = '\0';
        return 0;
    }
    return 1;
}
