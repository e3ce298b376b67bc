/*
 * resp: the bits of the Redis protocol the proxy needs.
 *
 *  - framing of server replies (RESP2 and the RESP3 types a Redis 7 server
 *    can send after HELLO 3), resumable, without building reply objects:
 *    the proxy relays bytes and only needs to know where a reply ends;
 *  - parsing of client commands, both multibulk arrays and the inline form
 *    (quoting rules as Redis's sdssplitargs), resumable;
 *  - small encoders for the replies the proxy makes itself.
 */
#ifndef RELOCK_PROXY_RESP_H
#define RELOCK_PROXY_RESP_H

#include <stddef.h>

#include "buf.h"

/* ---- reply framing ---- */

typedef struct resp_scan {
    size_t pos;     /* bytes of the current reply already walked */
    long long need; /* elements still to walk; 0 before a reply starts */
} resp_scan;

void resp_scan_reset(resp_scan *s);

/*
 * Find the end of the reply that starts at p (n bytes available).  Resumes
 * where the previous call for the same reply stopped, so the bytes must
 * stay the same between calls (more may be appended).  Returns 1 and sets
 * *len when the whole reply is there (and resets s), 0 when more bytes are
 * needed, -1 on a protocol violation.
 */
int resp_scan_reply(resp_scan *s, const char *p, size_t n, size_t *len);

/* Length of the complete reply at p, or 0 when p..p+n holds no complete,
 * well-formed reply (one-shot form of resp_scan_reply). */
size_t resp_reply_len(const char *p, size_t n);

/* For a complete reply: the type byte, and for an aggregate the element
 * count and the offset of the first element (count is -1 for a null). */
int resp_aggregate(const char *p, size_t n, long long *count, size_t *first);

/* For a complete bulk-string reply ($): the payload.  Returns 0, or -1
 * when the reply is not a non-null bulk string. */
int resp_bulk(const char *p, size_t n, const char **s, size_t *slen);

/* For a complete integer reply (:): its value.  Returns 0 or -1. */
int resp_integer(const char *p, size_t n, long long *v);

/* ---- client commands ---- */

typedef struct proxy_arg {
    const char *p;
    size_t n;
} proxy_arg;

typedef struct cmd_parser {
    /* resumable multibulk state; offsets are relative to the start of the
     * command, so the input buffer may move between calls */
    long long expect; /* arguments announced by *N; -1 while not started */
    size_t pos;       /* bytes of the command walked so far */
    size_t nargs;     /* arguments found so far */
    size_t *offs;     /* their payload offsets ... */
    size_t *lens;     /* ... and lengths */
    size_t cap;       /* capacity of offs/lens */
    /* result */
    proxy_arg *argv;
    size_t argv_cap;
    pbuf inline_args; /* unescaped inline arguments live here */
} cmd_parser;

void cmd_parser_init(cmd_parser *cp);
void cmd_parser_free(cmd_parser *cp);

/*
 * Parse the next command at p (n bytes).  Returns 1 when a command is
 * complete: *consumed bytes form it, *argv and *argc describe its arguments
 * (valid until the next call or until those input bytes are dropped; argc
 * is 0 for an empty command, which Redis ignores), *is_inline says which
 * form it had.  Returns 0 when more bytes are needed, -1 on a protocol
 * error with Redis's own message ("Protocol error: ...") in err.
 */
int cmd_parse(cmd_parser *cp, const char *p, size_t n, size_t *consumed,
              proxy_arg **argv, size_t *argc, int *is_inline,
              char *err, size_t errlen);

/* ---- encoders (return 0, or -1 when the buffer is full) ---- */

int resp_add_array(pbuf *b, size_t n);
int resp_add_bulk(pbuf *b, const char *p, size_t n);
int resp_add_int(pbuf *b, long long v);
/* "-" + msg + CRLF; msg must hold no CR or LF */
int resp_add_error(pbuf *b, const char *msg);
int resp_add_status(pbuf *b, const char *msg);
/* A whole command as a multibulk array. */
int resp_add_command(pbuf *b, const proxy_arg *argv, size_t argc);

/* Case-insensitive comparison of an argument with a C string. */
int arg_is(const proxy_arg *a, const char *s);

#endif
