/*
 * fuzz_keys: the names of the keys relock keeps beside a lock key
 * (keys.c), for any lock key a valid name and prefix can make.
 *
 * design.md §6.3: fence counters live "in a key namespace no lock name can
 * collide with" and "in the lock key's Cluster slot".  Checked:
 * relock__fence_key() fits or says it does not, the fence and owner keys
 * contain a space (which no lock key can), and Redis Cluster hashes them to
 * the same slot as the lock key (keyHashSlot() of Redis's cluster.c,
 * reproduced below).  An input with a newline holds two lock keys: when
 * they differ, so do their fence keys and their owner keys ("a" and "{a}"
 * once shared both).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* CRC16-CCITT (XMODEM), as Redis Cluster uses it. */
static unsigned crc16(const char *buf, size_t len)
{
    unsigned crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (unsigned)(unsigned char)buf[i] << 8;
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? ((crc << 1) ^ 0x1021) : (crc << 1);
        crc &= 0xffff;
    }
    return crc;
}

/* Redis's keyHashSlot(): hash only what is between the first '{' and the
 * first '}' after it, if that is not empty. */
static unsigned key_slot(const char *key, size_t len)
{
    size_t s, e;
    for (s = 0; s < len; s++)
        if (key[s] == '{')
            break;
    if (s == len)
        return crc16(key, len) & 0x3fff;
    for (e = s + 1; e < len; e++)
        if (key[e] == '}')
            break;
    if (e == len || e == s + 1)
        return crc16(key, len) & 0x3fff;
    return crc16(key + s + 1, e - s - 1) & 0x3fff;
}

/* A lock key lock.c can build: prefix and name refuse spaces and control
 * characters. */
static int valid_key(const char *k)
{
    if (!*k)
        return 0;
    for (; *k; k++)
        if ((unsigned char)*k <= ' ' || *k == 0x7f)
            return 0;
    return 1;
}

/* The checks on one lock key; 0 when it is not one lock.c accepts. */
static int check_key(const char *key, char fence[RELOCK__KEY_MAX], char owner[RELOCK__KEY_MAX])
{
    if (!valid_key(key))
        return 0;
    /* Keys whose side keys could not share their slot are refused by
     * lock.c (relock__key_slot_safe); the claim is for the others, and the
     * refusal must catch every key the claim would fail for. */
    if (!relock__key_slot_safe(key))
        return 0;
    size_t klen = strlen(key);

    FZ_CHECK(relock__fence_key(key, fence, RELOCK__KEY_MAX) == 0);
    FZ_CHECK(relock__owner_key(key, owner, RELOCK__KEY_MAX) == 0);
    FZ_CHECK(strchr(fence, ' ') != NULL && strchr(owner, ' ') != NULL);
    FZ_CHECK(strcmp(fence, key) != 0 && strcmp(owner, key) != 0 && strcmp(fence, owner) != 0);
    unsigned ks = key_slot(key, klen), fs = key_slot(fence, strlen(fence)),
             os = key_slot(owner, strlen(owner));
    FZ_CHECK_MSG(ks == fs, "lock key \"%.80s\" is in slot %u, its fence key \"%.100s\" in %u",
                 key, ks, fence, fs);
    FZ_CHECK_MSG(ks == os, "lock key \"%.80s\" is in slot %u, its owner key \"%.100s\" in %u",
                 key, ks, owner, os);
    /* The counter a whole-tag key is raised from is in its slot too. */
    char before[RELOCK__KEY_MAX];
    int moved = relock__fence_key_before(key, before, sizeof before);
    FZ_CHECK(moved == 0 || moved == 1);
    if (moved)
        FZ_CHECK(key_slot(before, strlen(before)) == ks && strcmp(before, fence) != 0);

    /* Too small a buffer is refused, and nothing is written past it. */
    size_t small = strlen(fence);
    char *tight = malloc(small);
    FZ_CHECK(tight);
    FZ_CHECK(relock__fence_key(key, tight, small) == -1);
    free(tight);
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char in[2 * (RELOCK__PREFIX_MAX + RELOCK__NAME_MAX) + 2];
    if (size >= sizeof in)
        return 0;
    memcpy(in, data, size);
    in[size] = '\0';
    char *second = memchr(in, '\n', size);
    if (second)
        *second++ = '\0';
    if (strlen(in) > RELOCK__PREFIX_MAX + RELOCK__NAME_MAX ||
        (second && strlen(second) > RELOCK__PREFIX_MAX + RELOCK__NAME_MAX))
        return 0;
    char f1[RELOCK__KEY_MAX], o1[RELOCK__KEY_MAX], f2[RELOCK__KEY_MAX], o2[RELOCK__KEY_MAX];
    int ok1 = check_key(in, f1, o1);
    if (!second || !check_key(second, f2, o2) || !ok1 || strcmp(in, second) == 0)
        return 0;
    FZ_CHECK_MSG(strcmp(f1, f2) != 0, "lock keys \"%.80s\" and \"%.80s\" share fence key \"%.100s\"",
                 in, second, f1);
    FZ_CHECK_MSG(strcmp(o1, o2) != 0, "lock keys \"%.80s\" and \"%.80s\" share owner key \"%.100s\"",
                 in, second, o1);
    return 0;
}
