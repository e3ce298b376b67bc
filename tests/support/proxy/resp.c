/*
 * resp: protocol framing, command parsing and encoders (see resp.h).
 */
#include "resp.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Redis refuses longer inline requests and more arguments than this with
 * the same messages; the proxy does too, before forwarding anything. */
#define INLINE_MAX ((size_t)64 * 1024)
#define MULTIBULK_MAX (1024LL * 1024)

/* An aggregate announcing more elements than any sane reply has. */
#define AGGREGATE_MAX (1LL << 32)

/* Offset of the CR of the first CRLF at or after p[from], or -1 when there
 * is none yet. */
static long long find_crlf(const char *p, size_t n, size_t from)
{
    const char *cr;
    size_t at = from;

    while (at < n) { /* bounded: at strictly grows */
        cr = memchr(p + at, '\r', n - at);
        if (cr == NULL)
            return -1;
        at = (size_t)(cr - p);
        if (at + 1 >= n)
            return -1;
        if (p[at + 1] == '\n')
            return (long long)at;
        at++;
    }
    return -1;
}

/* Strict decimal: optional '-', 1..18 digits, nothing else. */
static int parse_ll(const char *s, size_t n, long long *out)
{
    long long v = 0;
    size_t i = 0;
    int neg = 0;

    if (n > 0 && s[0] == '-') {
        neg = 1;
        i = 1;
    }
    if (i == n || n - i > 18)
        return -1;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = neg ? -v : v;
    return 0;
}

void resp_scan_reset(resp_scan *s)
{
    s->pos = 0;
    s->need = 0;
}

int resp_scan_reply(resp_scan *s, const char *p, size_t n, size_t *len)
{
    if (s->need == 0 && s->pos == 0)
        s->need = 1;
    /* Each pass consumes at least one whole element (3+ bytes), so the
     * loop ends within n/3 passes. */
    while (s->need > 0) {
        long long crlf;
        long long v;
        size_t body;
        char type;

        if (s->pos >= n)
            return 0;
        crlf = find_crlf(p, n, s->pos);
        if (crlf < 0)
            return n - s->pos > PROXY_MAX_MSG ? -1 : 0;
        type = p[s->pos];
        body = (size_t)crlf + 2;
        switch (type) {
        case '+': case '-': case ':': case '_': case ',': case '#': case '(':
            s->pos = body;
            s->need--;
            break;
        case '$': case '!': case '=':
            if (parse_ll(p + s->pos + 1, (size_t)crlf - s->pos - 1, &v) < 0)
                return -1;
            if (v == -1 && type == '$') {
                s->pos = body;
                s->need--;
                break;
            }
            if (v < 0 || (unsigned long long)v > PROXY_MAX_MSG)
                return -1;
            if (n - body < (size_t)v + 2)
                return 0;
            if (p[body + (size_t)v] != '\r' || p[body + (size_t)v + 1] != '\n')
                return -1;
            s->pos = body + (size_t)v + 2;
            s->need--;
            break;
        case '*': case '~': case '>': case '%': case '|':
            if (parse_ll(p + s->pos + 1, (size_t)crlf - s->pos - 1, &v) < 0)
                return -1;
            if (v == -1 && (type == '*' || type == '%' || type == '~')) {
                s->pos = body;
                s->need--;
                break;
            }
            if (v < 0 || v > AGGREGATE_MAX)
                return -1;
            if (type == '%')
                v *= 2;
            s->pos = body;
            if (type == '|') {
                /* An attribute map precedes the value it describes: the
                 * value still counts as the element being walked. */
                s->need += 2 * v;
            } else {
                s->need += v - 1;
            }
            break;
        default:
            return -1;
        }
        if (s->need > (1LL << 40))
            return -1;
    }
    *len = s->pos;
    resp_scan_reset(s);
    return 1;
}

size_t resp_reply_len(const char *p, size_t n)
{
    resp_scan s;
    size_t len = 0;

    resp_scan_reset(&s);
    if (resp_scan_reply(&s, p, n, &len) != 1)
        return 0;
    return len;
}

int resp_aggregate(const char *p, size_t n, long long *count, size_t *first)
{
    long long crlf;

    if (n < 4)
        return -1;
    if (p[0] != '*' && p[0] != '>' && p[0] != '~')
        return -1;
    crlf = find_crlf(p, n, 0);
    if (crlf < 0 || parse_ll(p + 1, (size_t)crlf - 1, count) < 0)
        return -1;
    *first = (size_t)crlf + 2;
    return p[0];
}

int resp_bulk(const char *p, size_t n, const char **s, size_t *slen)
{
    long long crlf;
    long long v;

    if (n < 4 || p[0] != '$')
        return -1;
    crlf = find_crlf(p, n, 0);
    if (crlf < 0 || parse_ll(p + 1, (size_t)crlf - 1, &v) < 0 || v < 0)
        return -1;
    if ((size_t)crlf + 2 + (size_t)v + 2 > n)
        return -1;
    *s = p + crlf + 2;
    *slen = (size_t)v;
    return 0;
}

int resp_integer(const char *p, size_t n, long long *v)
{
    long long crlf;

    if (n < 4 || p[0] != ':')
        return -1;
    crlf = find_crlf(p, n, 0);
    if (crlf < 0)
        return -1;
    return parse_ll(p + 1, (size_t)crlf - 1, v);
}

/* ---- client commands ---- */

void cmd_parser_init(cmd_parser *cp)
{
    memset(cp, 0, sizeof(*cp));
    cp->expect = -1;
}

void cmd_parser_free(cmd_parser *cp)
{
    free(cp->offs);
    free(cp->lens);
    free(cp->argv);
    pbuf_free(&cp->inline_args);
    cmd_parser_init(cp);
}

static void parser_restart(cmd_parser *cp)
{
    cp->expect = -1;
    cp->pos = 0;
    cp->nargs = 0;
}

static int ensure_argv(cmd_parser *cp, size_t n)
{
    proxy_arg *nv;
    size_t ncap;

    if (n <= cp->argv_cap)
        return 0;
    ncap = cp->argv_cap ? cp->argv_cap : 16;
    while (ncap < n) /* bounded by MULTIBULK_MAX */
        ncap *= 2;
    nv = realloc(cp->argv, ncap * sizeof(*nv));
    if (nv == NULL)
        return -1;
    cp->argv = nv;
    cp->argv_cap = ncap;
    return 0;
}

static int ensure_offs(cmd_parser *cp, size_t n)
{
    size_t *no;
    size_t *nl;
    size_t ncap;

    if (n <= cp->cap)
        return 0;
    ncap = cp->cap ? cp->cap : 16;
    while (ncap < n) /* bounded by MULTIBULK_MAX */
        ncap *= 2;
    no = realloc(cp->offs, ncap * sizeof(*no));
    if (no == NULL)
        return -1;
    cp->offs = no;
    nl = realloc(cp->lens, ncap * sizeof(*nl));
    if (nl == NULL)
        return -1;
    cp->lens = nl;
    cp->cap = ncap;
    return 0;
}

static void set_err(char *err, size_t errlen, const char *msg)
{
    snprintf(err, errlen, "%s", msg);
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
           c == '\f';
}

static int hex_val(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/*
 * Split an inline line as Redis's sdssplitargs does: blanks separate
 * arguments; "double quotes" take \n \r \t \b \a \\ \" and \xHH escapes;
 * 'single quotes' take \'; a closing quote must be followed by a blank or
 * the end.  Arguments are copied, unescaped, into cp->inline_args, and
 * their (offset, length) into offs/lens.  Returns 0 or -1 (unbalanced).
 */
static int split_inline(cmd_parser *cp, const char *line, size_t n)
{
    size_t i = 0;
    pbuf *out = &cp->inline_args;

    pbuf_clear(out);
    cp->nargs = 0;
    while (i < n) { /* every pass consumes at least one byte */
        int inq = 0;
        int insq = 0;
        int done = 0;
        size_t start;

        while (i < n && is_space(line[i]))
            i++;
        if (i >= n)
            break;
        start = pbuf_used(out);
        while (!done) { /* every pass consumes at least one byte */
            char c = i < n ? line[i] : '\0';
            char ch;
            int at_end = i >= n;

            if (inq) {
                if (at_end)
                    return -1;
                if (c == '\\' && i + 3 < n && line[i + 1] == 'x' &&
                    hex_val(line[i + 2]) >= 0 && hex_val(line[i + 3]) >= 0) {
                    ch = (char)(hex_val(line[i + 2]) * 16 + hex_val(line[i + 3]));
                    if (pbuf_append(out, &ch, 1) < 0)
                        return -1;
                    i += 3;
                } else if (c == '\\' && i + 1 < n) {
                    i++;
                    switch (line[i]) {
                    case 'n': ch = '\n'; break;
                    case 'r': ch = '\r'; break;
                    case 't': ch = '\t'; break;
                    case 'b': ch = '\b'; break;
                    case 'a': ch = '\a'; break;
                    default: ch = line[i]; break;
                    }
                    if (pbuf_append(out, &ch, 1) < 0)
                        return -1;
                } else if (c == '"') {
                    if (i + 1 < n && !is_space(line[i + 1]))
                        return -1;
                    done = 1;
                } else if (pbuf_append(out, &c, 1) < 0) {
                    return -1;
                }
            } else if (insq) {
                if (at_end)
                    return -1;
                if (c == '\\' && i + 1 < n && line[i + 1] == '\'') {
                    i++;
                    if (pbuf_append(out, "'", 1) < 0)
                        return -1;
                } else if (c == '\'') {
                    if (i + 1 < n && !is_space(line[i + 1]))
                        return -1;
                    done = 1;
                } else if (pbuf_append(out, &c, 1) < 0) {
                    return -1;
                }
            } else if (at_end || is_space(c)) {
                done = 1;
            } else if (c == '"') {
                inq = 1;
            } else if (c == '\'') {
                insq = 1;
            } else if (pbuf_append(out, &c, 1) < 0) {
                return -1;
            }
            if (i < n)
                i++;
        }
        if (ensure_offs(cp, cp->nargs + 1) < 0)
            return -1;
        cp->offs[cp->nargs] = start;
        cp->lens[cp->nargs] = pbuf_used(out) - start;
        cp->nargs++;
    }
    return 0;
}

static int parse_inline(cmd_parser *cp, const char *p, size_t n,
                        size_t *consumed, proxy_arg **argv, size_t *argc,
                        char *err, size_t errlen)
{
    const char *nl = memchr(p, '\n', n);
    size_t linelen;
    size_t i;

    if (nl == NULL) {
        if (n > INLINE_MAX) {
            set_err(err, errlen, "Protocol error: too big inline request");
            return -1;
        }
        return 0;
    }
    linelen = (size_t)(nl - p);
    *consumed = linelen + 1;
    if (linelen > 0 && p[linelen - 1] == '\r')
        linelen--;
    if (split_inline(cp, p, linelen) < 0) {
        set_err(err, errlen, "Protocol error: unbalanced quotes in request");
        return -1;
    }
    if (ensure_argv(cp, cp->nargs + 1) < 0) {
        set_err(err, errlen, "Protocol error: out of memory");
        return -1;
    }
    for (i = 0; i < cp->nargs; i++) {
        cp->argv[i].p = pbuf_head(&cp->inline_args) + cp->offs[i];
        cp->argv[i].n = cp->lens[i];
    }
    *argv = cp->argv;
    *argc = cp->nargs;
    cp->nargs = 0;
    return 1;
}

int cmd_parse(cmd_parser *cp, const char *p, size_t n, size_t *consumed,
              proxy_arg **argv, size_t *argc, int *is_inline,
              char *err, size_t errlen)
{
    size_t i;

    if (n == 0)
        return 0;
    if (cp->expect < 0 && p[0] != '*') {
        *is_inline = 1;
        return parse_inline(cp, p, n, consumed, argv, argc, err, errlen);
    }
    *is_inline = 0;
    if (cp->expect < 0) {
        long long crlf = find_crlf(p, n, 0);
        long long v;

        if (crlf < 0) {
            if (n > INLINE_MAX) {
                set_err(err, errlen, "Protocol error: too big mbulk count string");
                return -1;
            }
            return 0;
        }
        if (parse_ll(p + 1, (size_t)crlf - 1, &v) < 0 || v > MULTIBULK_MAX) {
            set_err(err, errlen, "Protocol error: invalid multibulk length");
            return -1;
        }
        cp->pos = (size_t)crlf + 2;
        cp->nargs = 0;
        if (v <= 0) {
            /* "*0" and "*-1" are empty commands: Redis skips them. */
            *consumed = cp->pos;
            *argc = 0;
            *argv = cp->argv;
            parser_restart(cp);
            return 1;
        }
        cp->expect = v;
        if (ensure_offs(cp, (size_t)v) < 0) {
            set_err(err, errlen, "Protocol error: out of memory");
            return -1;
        }
    }
    /* Each pass takes one whole bulk string. */
    while (cp->nargs < (size_t)cp->expect) {
        long long crlf;
        long long v;
        size_t body;

        if (cp->pos >= n)
            return 0;
        crlf = find_crlf(p, n, cp->pos);
        if (crlf < 0) {
            if (n - cp->pos > INLINE_MAX) {
                set_err(err, errlen, "Protocol error: too big bulk count string");
                return -1;
            }
            return 0;
        }
        if (p[cp->pos] != '$') {
            snprintf(err, errlen, "Protocol error: expected '$', got '%c'",
                     p[cp->pos]);
            return -1;
        }
        if (parse_ll(p + cp->pos + 1, (size_t)crlf - cp->pos - 1, &v) < 0 ||
            v < 0 || (unsigned long long)v > PROXY_MAX_MSG) {
            set_err(err, errlen, "Protocol error: invalid bulk length");
            return -1;
        }
        body = (size_t)crlf + 2;
        if (n - body < (size_t)v + 2)
            return 0;
        if (p[body + (size_t)v] != '\r' || p[body + (size_t)v + 1] != '\n') {
            set_err(err, errlen, "Protocol error: bulk string not terminated by CRLF");
            return -1;
        }
        cp->offs[cp->nargs] = body;
        cp->lens[cp->nargs] = (size_t)v;
        cp->nargs++;
        cp->pos = body + (size_t)v + 2;
    }
    if (ensure_argv(cp, cp->nargs) < 0) {
        set_err(err, errlen, "Protocol error: out of memory");
        return -1;
    }
    for (i = 0; i < cp->nargs; i++) {
        cp->argv[i].p = p + cp->offs[i];
        cp->argv[i].n = cp->lens[i];
    }
    *argv = cp->argv;
    *argc = cp->nargs;
    *consumed = cp->pos;
    parser_restart(cp);
    return 1;
}

/* ---- encoders ---- */

static int add_header(pbuf *b, char type, long long v)
{
    char tmp[32];
    int len = snprintf(tmp, sizeof(tmp), "%c%lld\r\n", type, v);

    if (len < 0 || (size_t)len >= sizeof(tmp))
        return -1;
    return pbuf_append(b, tmp, (size_t)len);
}

int resp_add_array(pbuf *b, size_t n)
{
    return add_header(b, '*', (long long)n);
}

int resp_add_bulk(pbuf *b, const char *p, size_t n)
{
    if (add_header(b, '$', (long long)n) < 0 || pbuf_append(b, p, n) < 0)
        return -1;
    return pbuf_append(b, "\r\n", 2);
}

int resp_add_int(pbuf *b, long long v)
{
    return add_header(b, ':', v);
}

int resp_add_error(pbuf *b, const char *msg)
{
    if (pbuf_append(b, "-", 1) < 0 || pbuf_append_str(b, msg) < 0)
        return -1;
    return pbuf_append(b, "\r\n", 2);
}

int resp_add_status(pbuf *b, const char *msg)
{
    if (pbuf_append(b, "+", 1) < 0 || pbuf_append_str(b, msg) < 0)
        return -1;
    return pbuf_append(b, "\r\n", 2);
}

int resp_add_command(pbuf *b, const proxy_arg *argv, size_t argc)
{
    size_t i;

    if (resp_add_array(b, argc) < 0)
        return -1;
    for (i = 0; i < argc; i++) {
        if (resp_add_bulk(b, argv[i].p, argv[i].n) < 0)
            return -1;
    }
    return 0;
}

int arg_is(const proxy_arg *a, const char *s)
{
    size_t n = strlen(s);

    return a->n == n && strncasecmp(a->p, s, n) == 0;
}
