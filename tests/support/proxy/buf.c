/*
 * buf: growable byte buffer (see buf.h).
 */
#include "buf.h"

#include <stdlib.h>
#include <string.h>

/* A little slack above the largest message so that one whole message plus
 * the start of the next fits. */
#define PBUF_LIMIT (PROXY_MAX_MSG + (size_t)1024 * 1024)

size_t pbuf_used(const pbuf *b)
{
    return b->len - b->off;
}

const char *pbuf_head(const pbuf *b)
{
    return b->data ? b->data + b->off : "";
}

/* Move the unread bytes to the front when more than half the allocation is
 * already consumed, so a long-lived connection does not keep growing. */
static void compact(pbuf *b)
{
    if (b->off == 0)
        return;
    if (b->off == b->len) {
        b->off = 0;
        b->len = 0;
        return;
    }
    if (b->off < b->cap / 2)
        return;
    memmove(b->data, b->data + b->off, b->len - b->off);
    b->len -= b->off;
    b->off = 0;
}

char *pbuf_reserve(pbuf *b, size_t n)
{
    size_t want;
    size_t ncap;
    char *p;

    compact(b);
    if (n > PBUF_LIMIT || pbuf_used(b) > PBUF_LIMIT - n)
        return NULL;
    if (b->cap - b->len >= n)
        return b->data + b->len;
    /* Compact fully before growing: growing is the expensive path. */
    if (b->off > 0) {
        memmove(b->data, b->data + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
        if (b->cap - b->len >= n)
            return b->data + b->len;
    }
    want = b->len + n;
    ncap = b->cap ? b->cap : 4096;
    while (ncap < want) /* bounded: doubles up to PBUF_LIMIT at most */
        ncap *= 2;
    p = realloc(b->data, ncap);
    if (p == NULL)
        return NULL;
    b->data = p;
    b->cap = ncap;
    return b->data + b->len;
}

void pbuf_commit(pbuf *b, size_t n)
{
    b->len += n;
}

int pbuf_append(pbuf *b, const void *p, size_t n)
{
    char *dst;

    if (n == 0)
        return 0;
    dst = pbuf_reserve(b, n);
    if (dst == NULL)
        return -1;
    memcpy(dst, p, n);
    b->len += n;
    return 0;
}

int pbuf_append_str(pbuf *b, const char *s)
{
    return pbuf_append(b, s, strlen(s));
}

void pbuf_consume(pbuf *b, size_t n)
{
    b->off += n;
    if (b->off >= b->len) {
        b->off = 0;
        b->len = 0;
    }
}

void pbuf_clear(pbuf *b)
{
    b->off = 0;
    b->len = 0;
}

void pbuf_free(pbuf *b)
{
    free(b->data);
    b->data = NULL;
    b->off = 0;
    b->len = 0;
    b->cap = 0;
}
