/*
 * Redis Cluster (design.md §9.3), the pure parts: the hash slot of a key
 * and reading CLUSTER SLOTS.  The operation core (src/core/routing.c)
 * follows the redirections and keeps the slot map and a connection per
 * master in use.
 */
#include <stddef.h>
#include <string.h>

#include "routing.h"

int relock__cluster_slots_parse(const redisReply *r, const char *via_host,
                                void (*fn)(void *arg, int from, int to, const char *host,
                                           int port),
                                void *arg)
{
    if (!r || r->type != REDIS_REPLY_ARRAY)
        return -1;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER ||
            e->element[2]->type != REDIS_REPLY_ARRAY || e->element[2]->elements < 2)
            continue;
        const redisReply *m = e->element[2];
        if (m->element[0]->type != REDIS_REPLY_STRING || m->element[1]->type != REDIS_REPLY_INTEGER)
            continue;
        long long from = e->element[0]->integer, to = e->element[1]->integer;
        int port = (int)m->element[1]->integer;
        /* An empty address: the node asked ("?" is an unknown hostname). */
        const char *host = m->element[0]->len ? m->element[0]->str : via_host;
        if (from < 0 || to >= RELOCK__CLUSTER_NSLOTS || from > to || port < 1 || port > 65535 ||
            strcmp(host, "?") == 0 || strlen(host) >= RELOCK__HOST_MAX)
            continue;
        fn(arg, (int)from, (int)to, host, port);
    }
    return 0;
}

/* CRC16-CCITT (XMODEM), the checksum Redis Cluster hashes keys with. */
static unsigned crc16(const char *buf, size_t len)
{
    unsigned crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (unsigned)(unsigned char)buf[i] << 8;
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    }
    return crc;
}

unsigned relock__cluster_slot(const char *key, size_t len)
{
    /* A hash tag: from the first '{' to the first '}' after it, when at
     * least one byte lies between; then only that part is hashed. */
    const char *open = memchr(key, '{', len);
    if (open) {
        size_t from = (size_t)(open - key) + 1;
        const char *close = memchr(key + from, '}', len - from);
        if (close && close > key + from)
            return crc16(key + from, (size_t)(close - (key + from))) & (RELOCK__CLUSTER_NSLOTS - 1);
    }
    return crc16(key, len) & (RELOCK__CLUSTER_NSLOTS - 1);
}
