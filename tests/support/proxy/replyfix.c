/*
 * replyfix: reply rewriting (see replyfix.h).
 */
#include "replyfix.h"

#include <stdio.h>
#include <string.h>

#include "native.h"
#include "resp.h"

static int starts_with(const char *p, size_t n, const char *prefix)
{
    size_t k = strlen(prefix);

    return n >= k && memcmp(p, prefix, k) == 0;
}

/*
 * INFO: the version line says the emulated version.  Servers before 2.6
 * had no sections: their INFO started with redis_version and had neither
 * "# Server" headers nor the blank lines between sections.
 */
static int fix_info(const personality *pp, const char *p, size_t n, pbuf *out)
{
    const char *body;
    size_t blen;
    size_t at = 0;
    int strip = pp->version < PV(2, 6, 0);
    pbuf tmp = {0};
    int rc = -1;

    if (pp->version_str[0] == '\0' || resp_bulk(p, n, &body, &blen) < 0)
        return 0;
    /* One pass per line; at strictly grows. */
    while (at < blen) {
        const char *nl = memchr(body + at, '\n', blen - at);
        size_t end = nl ? (size_t)(nl - body) : blen;
        size_t linelen = end - at;
        const char *line = body + at;

        if (linelen > 0 && line[linelen - 1] == '\r')
            linelen--;
        at = nl ? end + 1 : blen;
        if (strip && (linelen == 0 || line[0] == '#'))
            continue;
        if (starts_with(line, linelen, "redis_version:")) {
            if (pbuf_append_str(&tmp, "redis_version:") < 0 ||
                pbuf_append_str(&tmp, pp->version_str) < 0)
                goto out;
            /* Valkey names itself, and its own version, just below. */
            if (pp->server_name[0] != '\0' &&
                (pbuf_append_str(&tmp, "\r\nserver_name:") < 0 ||
                 pbuf_append_str(&tmp, pp->server_name) < 0 ||
                 pbuf_append_str(&tmp, "\r\nvalkey_version:") < 0 ||
                 pbuf_append_str(&tmp, pp->valkey_version) < 0))
                goto out;
        } else if (pbuf_append(&tmp, line, linelen) < 0) {
            goto out;
        }
        if (pbuf_append(&tmp, "\r\n", 2) < 0)
            goto out;
    }
    if (resp_add_bulk(out, pbuf_head(&tmp), pbuf_used(&tmp)) < 0)
        goto out;
    rc = 1;
out:
    pbuf_free(&tmp);
    return rc;
}

/* Redis 7: "-ERR unknown command 'foo', with args beginning with: 'a' ".
 * Old servers: "-ERR unknown command 'foo'". */
static int fix_unknown(const char *p, size_t n, pbuf *out)
{
    static const char head[] = "-ERR unknown command '";
    static const char tail[] = "', with args beginning with:";
    size_t hl = sizeof(head) - 1;
    size_t tl = sizeof(tail) - 1;
    size_t i;

    if (!starts_with(p, n, head))
        return 0;
    /* The last occurrence: a name may itself contain the tail text. */
    for (i = n >= tl ? n - tl : 0; i > hl; i--) {
        if (memcmp(p + i, tail, tl) == 0) {
            if (pbuf_append(out, p, i + 1) < 0 || pbuf_append(out, "\r\n", 2) < 0)
                return -1;
            return 1;
        }
    }
    return 0;
}

/*
 * Error texts every emulated version (all before 2.8) spelled otherwise.
 * 2.8 introduced the NOAUTH and WRONGTYPE prefixes; 6.0 brought ACLs and
 * their AUTH messages; 7.0 named the command in the SETEX message.
 */
static const struct {
    const char *modern; /* a prefix of the modern error line */
    const char *old;    /* the whole old error line, without CRLF */
} old_errors[] = {
    {"-NOAUTH ", "-ERR operation not permitted"},
    {"-WRONGPASS ", "-ERR invalid password"},
    {"-ERR AUTH <password> called without any password configured",
     "-ERR Client sent AUTH, but no password is set"},
    {"-WRONGTYPE Operation against a key holding the wrong kind of value",
     "-ERR Operation against a key holding the wrong kind of value"},
    {"-ERR invalid expire time in 'setex' command", "-ERR invalid expire time in SETEX"},
    {"-ERR invalid expire time in 'psetex' command", "-ERR invalid expire time in SETEX"},
};

static int fix_errtext(const char *p, size_t n, pbuf *out)
{
    size_t i;

    for (i = 0; i < sizeof(old_errors) / sizeof(old_errors[0]); i++) {
        if (starts_with(p, n, old_errors[i].modern)) {
            if (pbuf_append_str(out, old_errors[i].old) < 0 ||
                pbuf_append(out, "\r\n", 2) < 0)
                return -1;
            return 1;
        }
    }
    return fix_unknown(p, n, out);
}

int replyfix_apply(const personality *pp, unsigned fix, const char *p, size_t n,
                   pbuf *out)
{
    if (n == 0)
        return 0;
    if ((fix & FIX_DIGEST) && p[0] == '$')
        return native_digest_reply(p, n, out);
    if ((fix & FIX_TTL) && n == 5 && memcmp(p, ":-2\r\n", 5) == 0)
        return pbuf_append(out, ":-1\r\n", 5) < 0 ? -1 : 1;
    if ((fix & FIX_INFO) && p[0] == '$')
        return fix_info(pp, p, n, out);
    if ((fix & FIX_ERRTEXT) && p[0] == '-')
        return fix_errtext(p, n, out);
    return 0;
}

int replyfix_exec(const personality *pp, const unsigned char *fixes,
                  size_t nfixes, const char *p, size_t n, pbuf *out)
{
    long long count;
    size_t first;
    size_t at;
    size_t i;
    size_t kept = 0;
    int changed = 0;
    pbuf body = {0};
    int rc = -1;

    if (resp_aggregate(p, n, &count, &first) != '*' || count < 0 ||
        (unsigned long long)count != nfixes)
        return 0;
    at = first;
    for (i = 0; i < nfixes; i++) {
        size_t elen = resp_reply_len(p + at, n - at);
        int r;

        if (elen == 0)
            goto out; /* cannot happen for a complete reply */
        if (fixes[i] & FIX_DROP) {
            changed = 1;
        } else {
            r = replyfix_apply(pp, fixes[i], p + at, elen, &body);
            if (r < 0)
                goto out;
            if (r == 0 && pbuf_append(&body, p + at, elen) < 0)
                goto out;
            if (r == 1)
                changed = 1;
            kept++;
        }
        at += elen;
    }
    if (!changed) {
        rc = 0;
        goto out;
    }
    if (resp_add_array(out, kept) < 0 ||
        pbuf_append(out, pbuf_head(&body), pbuf_used(&body)) < 0)
        goto out;
    rc = 1;
out:
    pbuf_free(&body);
    return rc;
}
