/*
 * buf: a growable byte buffer with a read offset and a hard size limit.
 *
 * Every byte the proxy holds for a connection (client input, upstream
 * input, bytes waiting to be sent) lives in one of these.  The limit keeps
 * a client that never reads, or a reply that never ends, from eating the
 * machine: appending past it fails instead of growing.
 */
#ifndef RELOCK_PROXY_BUF_H
#define RELOCK_PROXY_BUF_H

#include <stddef.h>

/* The largest single command or reply the proxy will hold (64 MiB).  Redis
 * itself accepts bulk strings up to 512 MiB; tests never come near this. */
#define PROXY_MAX_MSG ((size_t)64 * 1024 * 1024)

typedef struct pbuf {
    char *data;   /* allocation; NULL while empty */
    size_t off;   /* first unread byte */
    size_t len;   /* end of the bytes held (data + off .. data + len) */
    size_t cap;   /* size of the allocation */
} pbuf;

/* Bytes held and not yet consumed. */
size_t pbuf_used(const pbuf *b);

/* Pointer to the first unconsumed byte (valid until the next append). */
const char *pbuf_head(const pbuf *b);

/* Append n bytes.  Returns 0, or -1 when out of memory or when the buffer
 * would exceed PROXY_MAX_MSG + 1 MiB of unconsumed bytes (nothing is
 * appended then). */
int pbuf_append(pbuf *b, const void *p, size_t n);

/* Append a NUL-terminated string. */
int pbuf_append_str(pbuf *b, const char *s);

/* Make room for at least n more bytes at the end and return where they
 * go (the caller then calls pbuf_commit with what it wrote), or NULL. */
char *pbuf_reserve(pbuf *b, size_t n);
void pbuf_commit(pbuf *b, size_t n);

/* Drop n bytes from the front (n <= pbuf_used). */
void pbuf_consume(pbuf *b, size_t n);

/* Forget the contents, keep the allocation. */
void pbuf_clear(pbuf *b);

/* Release the allocation; the buffer is empty and reusable afterwards. */
void pbuf_free(pbuf *b);

#endif
