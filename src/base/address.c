/* Server addresses as text, read strictly with a reason on error:
 * "host:port" (sentinel.addrs) and redis:// and unix:// URLs (design.md §11). */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"

int relock__parse_ll(const char *v, long long *out)
{
    if (!*v)
        return -1;
    errno = 0;
    char *end = NULL;
    long long n = strtoll(v, &end, 10);
    if (errno || *end)
        return -1;
    *out = n;
    return 0;
}

/* A reason about the address text[0..len), shown up to 80 bytes; -1. */
static int bad_addr(const char *text, size_t len, const char *fault, char *why, size_t whylen)
{
    return relock__reason(why, whylen, "\"%.*s\"%s", (int)(len < 80 ? len : 80), text, fault);
}

int relock__parse_addr(const char *text, size_t len, relock__addr *a, char *why, size_t whylen)
{
    memset(a, 0, sizeof *a);
    const char *end = text + len;
    const char *hs = text, *he, *colon;
    if (len > 0 && *text == '[') {
        const char *rb = memchr(text, ']', len);
        if (!rb)
            return bad_addr(text, len, ": unclosed [", why, whylen);
        hs = text + 1;
        he = rb;
        colon = rb + 1 < end && rb[1] == ':' ? rb + 1 : NULL;
        if (!colon)
            return bad_addr(text, len, " is not [host]:port", why, whylen);
    } else {
        colon = memchr(text, ':', len);
        he = colon;
        if (!colon || memchr(colon + 1, ':', (size_t)(end - colon - 1)))
            return bad_addr(text, len,
                            " is not host:port (an IPv6 host goes in brackets: [::1]:26379)",
                            why, whylen);
    }
    if (he == hs || (size_t)(he - hs) >= sizeof a->host)
        return bad_addr(text, len, ": the host is empty or too long", why, whylen);
    for (const char *p = hs; p < he; p++)
        if ((unsigned char)*p <= ' ' || *p == 0x7f || *p == '[' || *p == ']')
            return bad_addr(text, len, ": bad character in the host", why, whylen);
    const char *pp = colon + 1;
    size_t plen = (size_t)(end - pp);
    long port = plen >= 1 && plen <= 5 && pp[0] != '0' ? 0 : -1;
    for (size_t i = 0; i < plen && port >= 0; i++)
        port = (pp[i] >= '0' && pp[i] <= '9') ? port * 10 + (pp[i] - '0') : -1;
    if (port < 1 || port > 65535)
        return bad_addr(text, len, ": the port must be a number from 1 to 65535", why, whylen);
    memcpy(a->host, hs, (size_t)(he - hs));
    a->host[he - hs] = '\0';
    a->port = (int)port;
    return 0;
}

/* ------------------------------------------------------------ URLs */

/* Copies [s, e) into dst (cap bytes), percent-decoding; -1 when too long. */
static int copy_part(char *dst, size_t cap, const char *s, const char *e)
{
    size_t n = 0;
    while (s < e) {
        char ch = *s++;
        if (ch == '%' && e - s >= 2) {
            char hex[3] = {s[0], s[1], 0};
            char *end = NULL;
            long v = strtol(hex, &end, 16);
            if (*end == '\0' && v > 0) {
                ch = (char)v;
                s += 2;
            }
        }
        if (n + 1 >= cap)
            return -1;
        dst[n++] = ch;
    }
    dst[n] = '\0';
    return 0;
}

/* The credentials of a URL, [user:]password, from p to auth_end. */
static int parse_credentials(const char *p, const char *auth_end, relock__server *srv, char *why,
                             size_t whylen)
{
    const char *colon = memchr(p, ':', (size_t)(auth_end - p));
    if (colon && (copy_part(srv->username, sizeof srv->username, p, colon) != 0 ||
                  copy_part(srv->password, sizeof srv->password, colon + 1, auth_end) != 0))
        return relock__reason(why, whylen, "user name or password too long");
    /* redis://secret@host: a bare word is a password, as redis-cli reads it */
    if (!colon && copy_part(srv->password, sizeof srv->password, p, auth_end) != 0)
        return relock__reason(why, whylen, "password too long");
    return 0;
}

/* A database number, digits only, 0 to 1000000. */
static int parse_db(const char *s, relock__server *srv, char *why, size_t whylen, const char *how)
{
    long long db = -1;
    if (!*s || strspn(s, "0123456789") != strlen(s) || relock__parse_ll(s, &db) != 0)
        return relock__reason(why, whylen, "the database must be a number %s", how);
    if (db > 1000000)
        return relock__reason(why, whylen,
                              "database %.20s is out of range (a server has 16 unless its "
                              "`databases` setting says more)",
                              s);
    srv->db = (int)db;
    return 0;
}

/*
 * unix://[[user:]password@]/path/to/redis.sock[?db=N]: the server's unix
 * socket, kept as a host that is an absolute path and port 0.  The path
 * begins at the last "@/" when credentials come first (a password may hold
 * any byte), and runs to a "?".
 */
static int parse_unix_url(const char *p, relock__server *srv, char *why, size_t whylen)
{
    const char *path = p;
    if (*p != '/') {
        const char *at = NULL;
        for (const char *q = strstr(p, "@/"); q; q = strstr(q + 1, "@/"))
            at = q;
        if (!at)
            return relock__reason(why, whylen, "a unix URL names the socket's absolute path: "
                                               "unix:///run/redis/redis.sock");
        if (parse_credentials(p, at, srv, why, whylen) != 0)
            return -1;
        path = at + 1;
    }
    const char *query = strchr(path, '?');
    const char *pend = query ? query : path + strlen(path);
    if (pend - path < 2)
        return relock__reason(why, whylen, "the unix URL names no socket path");
    /* sun_path holds 108 bytes with its terminating NUL. */
    if (pend - path > 107 || copy_part(srv->host, sizeof srv->host, path, pend) != 0)
        return relock__reason(why, whylen, "the socket path is too long (a unix socket's path "
                                           "has at most 107 bytes)");
    srv->port = 0;
    if (query) {
        if (strncmp(query + 1, "db=", 3) != 0)
            return relock__reason(why, whylen, "a unix URL takes only ?db=N after the path");
        if (parse_db(query + 4, srv, why, whylen, "after ?db=") != 0)
            return -1;
    }
    return 0;
}

int relock__parse_url(const char *url, relock__server *srv, char *why, size_t whylen)
{
    static const char scheme[] = "redis://";
    static const char unix_scheme[] = "unix://";
    *srv = (relock__server){.port = 6379};
    if (url && strncmp(url, unix_scheme, sizeof unix_scheme - 1) == 0)
        return parse_unix_url(url + sizeof unix_scheme - 1, srv, why, whylen);
    if (url && strncmp(url, "rediss://", 9) == 0)
        return relock__reason(why, whylen, "rediss:// (TLS) is not available in this build: a "
                                           "local TLS tunnel (stunnel, spiped) reached by "
                                           "redis:// or unix:// serves instead");
    if (!url || strncmp(url, scheme, sizeof scheme - 1) != 0)
        return relock__reason(why, whylen, "the URL must start with redis:// or unix://");
    const char *p = url + sizeof scheme - 1;
    const char *end = p + strlen(p);
    /* After the credentials, which may hold any byte. */
    const char *at = strrchr(p, '@');
    const char *rest = at ? at + 1 : p;
    if (strchr(rest, '?') || strchr(rest, '#'))
        return relock__reason(why, whylen, "query parameters (?...) are not supported: set "
                                           "timeouts and other options in the configuration "
                                           "file");
    const char *slash = strchr(p, '/');
    const char *auth_end = NULL;
    for (const char *q = p; q < (slash ? slash : end); q++)
        if (*q == '@')
            auth_end = q; /* the last '@' before the path ends the credentials */
    if (auth_end) {
        if (parse_credentials(p, auth_end, srv, why, whylen) != 0)
            return -1;
        p = auth_end + 1;
    }
    const char *hostend = slash ? slash : end;
    const char *hs = p, *he;
    const char *portp = NULL;
    if (*p == '[') {
        const char *rb = memchr(p, ']', (size_t)(hostend - p));
        if (!rb)
            return relock__reason(why, whylen, "unclosed [ in the host");
        hs = p + 1;
        he = rb;
        if (rb + 1 < hostend) {
            if (rb[1] != ':')
                return relock__reason(why, whylen, "junk after ] in the host");
            portp = rb + 2;
        }
    } else {
        const char *colon = memchr(p, ':', (size_t)(hostend - p));
        he = colon ? colon : hostend;
        portp = colon ? colon + 1 : NULL;
    }
    if (he == hs)
        return relock__reason(why, whylen, "the URL names no host");
    if (copy_part(srv->host, sizeof srv->host, hs, he) != 0)
        return relock__reason(why, whylen, "host name too long");
    if (portp) {
        /* Digits up to hostend, where a '/' or the end stops them. */
        size_t len = (size_t)(hostend - portp);
        long long v = len > 0 && len < 16 && strspn(portp, "0123456789") == len
                          ? strtoll(portp, NULL, 10)
                          : -1;
        if (v < 1 || v > 65535)
            return relock__reason(why, whylen, "the port must be a number from 1 to 65535");
        srv->port = (int)v;
    }
    if (slash && slash[1] && parse_db(slash + 1, srv, why, whylen, "after the /") != 0)
        return -1;
    return 0;
}
