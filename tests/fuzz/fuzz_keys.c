/*
 * fuzz_keys: the names of the keys relock keeps beside a lock key
 * (keys.c), for any lock key a valid name and prefix can make.
 *
 * DESIGN §4: fence counters live "in a key namespace of their own that no
 * lock name can collide with, in the lock key's Cluster slot".  Checked:
 * relock__fence_key() fits or says it does not, the fence key contains a
 * space (which no lock key can), and Redis Cluster hashes it to the same
 * slot as the lock key (keyHashSlot() of Redis's cluster.c, reproduced
 * below).
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > RELOCK__PREFIX_MAX + RELOCK__NAME_MAX)
        return 0;
    char key[RELOCK__PREFIX_MAX + RELOCK__NAME_MAX + 1];
    memcpy(key, data, size);
    key[size] = '\0';
    if (!valid_key(key))
        return 0;
    /* Keys whose side keys could not share their slot are refused by
     * lock.c (relock__key_slot_safe); the claim is for the others, and the
     * refusal must catch every key the claim would fail for. */
    if (!relock__key_slot_safe(key))
        return 0;
    size_t klen = strlen(key);

    char fence[RELOCK__KEY_MAX];
    FZ_CHECK(relock__fence_key(key, fence, sizeof fence) == 0);
    FZ_CHECK(strchr(fence, ' ') != NULL);
    FZ_CHECK(strcmp(fence, key) != 0);
    unsigned ks = key_slot(key, klen), fs = key_slot(fence, strlen(fence));
    FZ_CHECK_MSG(ks == fs, "lock key \"%.80s\" is in slot %u, its fence key \"%.100s\" in %u",
                 key, ks, fence, fs);

    /* Too small a buffer is refused, and nothing is written past it. */
    size_t small = strlen(fence);
    char *tight = malloc(small);
    FZ_CHECK(tight);
    FZ_CHECK(relock__fence_key(key, tight, small) == -1);
    free(tight);
    return 0;
}
