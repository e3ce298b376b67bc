/* The fake RESP server of fuzz_replies (see fake_server.h). */
#include "fake_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

/* The library keeps one connection per client; a few more are tolerated. */
#define MAXCONN 8
/* Our requests are small (the longest is an EVAL with its script). */
#define REQ_MAX (1u << 20)
/* hiredis 0.14 refuses nesting deeper than 7; anything past this is junk. */
#define DEPTH_MAX 16

struct fz_server {
    int lfd;
    int port;
    int stop[2];
    pthread_t th;
    int running;
    /* The input being served; touched only by the server thread while it
     * runs. */
    const uint8_t *data;
    size_t size, pos;
    const char *info;
    size_t info_len;
    int raw_info;
    /* Record mode. */
    int upstream_port;
    FILE *rec;
};

typedef struct conn {
    int fd;
    int up; /* record mode: the upstream connection, else -1 */
    unsigned char *buf;
    size_t len, cap;
} conn;

/* ------------------------------------------------------------ RESP */

/* Reads the integer of a RESP header line p[1, ...) ending in CRLF.
 * Returns the line's length with its CRLF, 0 when incomplete, -1 when
 * malformed. */
static long header(const uint8_t *p, size_t n, long long *val)
{
    const uint8_t *cr = NULL;
    for (size_t i = 1; i + 1 < n; i++)
        if (p[i] == '\r' && p[i + 1] == '\n') {
            cr = p + i;
            break;
        }
    if (!cr)
        return n > 64 ? -1 : 0;
    const uint8_t *q = p + 1;
    int neg = 0;
    if (q < cr && *q == '-') {
        neg = 1;
        q++;
    }
    if (q == cr || cr - q > 18)
        return -1;
    long long v = 0;
    for (; q < cr; q++) {
        if (*q < '0' || *q > '9')
            return -1;
        v = v * 10 + (*q - '0');
    }
    *val = neg ? -v : v;
    return (long)(cr - p) + 2;
}

static long span(const uint8_t *p, size_t n, int depth)
{
    if (n == 0)
        return 0;
    if (depth > DEPTH_MAX)
        return -1;
    long long v = 0;
    long h;
    switch (p[0]) {
    case '+':
    case '-':
    case ':':
        for (size_t i = 1; i + 1 < n; i++)
            if (p[i] == '\r' && p[i + 1] == '\n')
                return (long)i + 2;
        return 0;
    case '$':
        h = header(p, n, &v);
        if (h <= 0)
            return h;
        if (v == -1)
            return h;
        if (v < -1)
            return -1;
        if ((unsigned long long)v > n || (size_t)h + (size_t)v + 2 > n)
            return 0;
        return h + (long)v + 2;
    case '*':
        h = header(p, n, &v);
        if (h <= 0)
            return h;
        if (v == -1)
            return h;
        if (v < -1)
            return -1;
        {
            size_t off = (size_t)h;
            /* Each element takes at least 3 bytes: the loop ends with the
             * input. */
            for (long long i = 0; i < v; i++) {
                long k = span(p + off, n - off, depth + 1);
                if (k <= 0)
                    return k;
                off += (size_t)k;
            }
            return (long)off;
        }
    }
    return -1;
}

long fz_resp_span(const uint8_t *p, size_t n)
{
    return span(p, n, 0);
}

/* The length of one complete request (an array of bulk strings) at the
 * start of p[0, n); 0 incomplete, -1 malformed.  *name is its first
 * argument. */
static long request_span(const uint8_t *p, size_t n, const uint8_t **name, size_t *namelen)
{
    if (n == 0)
        return 0;
    if (p[0] != '*')
        return -1;
    long long argc = 0;
    long h = header(p, n, &argc);
    if (h <= 0)
        return h;
    if (argc < 1 || argc > 1024)
        return -1;
    size_t off = (size_t)h;
    for (long long i = 0; i < argc; i++) {
        if (off >= n)
            return 0;
        if (p[off] != '$')
            return -1;
        long long len = 0;
        long hh = header(p + off, n - off, &len);
        if (hh <= 0)
            return hh;
        if (len < 0 || len > (long long)REQ_MAX)
            return -1;
        if (off + (size_t)hh + (size_t)len + 2 > n)
            return 0;
        if (i == 0) {
            *name = p + off + hh;
            *namelen = (size_t)len;
        }
        off += (size_t)hh + (size_t)len + 2;
    }
    return (long)off;
}

/* ------------------------------------------------------------ sockets */

static int send_all(int fd, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    while (len > 0) {
        ssize_t k = send(fd, p, len, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        len -= (size_t)k;
    }
    return 0;
}

/* Replies to pipelined requests go out in separate sends: without
 * TCP_NODELAY, Nagle's algorithm holds the second until the client's
 * delayed ACK, 40 ms later (Redis sets it too). */
static void nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static int connect_upstream(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    nodelay(fd);
    return fd;
}

/* Record mode: relays one request and its reply; -1 closes the client. */
static int relay(fz_server *s, conn *c, const uint8_t *req, size_t len)
{
    if (c->up < 0 || send_all(c->up, req, len) != 0)
        return -1;
    unsigned char *buf = NULL;
    size_t have = 0, cap = 0;
    long k = 0;
    while ((k = fz_resp_span(buf, have)) == 0) {
        if (cap - have < 4096) {
            cap = cap ? cap * 2 : 8192;
            unsigned char *nb = realloc(buf, cap);
            if (!nb)
                break;
            buf = nb;
        }
        ssize_t got = recv(c->up, buf + have, cap - have, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        have += (size_t)got;
    }
    int rc = -1;
    if (k > 0 && (size_t)k == have) {
        fwrite(buf, 1, have, s->rec);
        rc = send_all(c->fd, buf, have);
    }
    free(buf);
    return rc;
}

/* Answers one request; -1 closes the connection. */
static int answer(fz_server *s, conn *c, const uint8_t *req, size_t len, const uint8_t *name,
                  size_t namelen)
{
    if (!s->raw_info && namelen == 4 && strncasecmp((const char *)name, "INFO", 4) == 0)
        return send_all(c->fd, s->info, s->info_len);
    if (s->upstream_port)
        return relay(s, c, req, len);
    if (s->pos >= s->size)
        return -1; /* the input ran out: close */
    long k = fz_resp_span(s->data + s->pos, s->size - s->pos);
    if (k <= 0) {
        /* Not RESP (or cut short): send it all, then close, so the client
         * meets the bad bytes and then the end of the stream. */
        send_all(c->fd, s->data + s->pos, s->size - s->pos);
        s->pos = s->size;
        return -1;
    }
    int rc = send_all(c->fd, s->data + s->pos, (size_t)k);
    s->pos += (size_t)k;
    return rc;
}

/* Reads what the client sent and answers every complete request; -1 when
 * the connection is to be closed. */
static int conn_read(fz_server *s, conn *c)
{
    if (c->cap - c->len < 4096) {
        size_t ncap = c->cap ? c->cap * 2 : 8192;
        if (ncap > REQ_MAX)
            return -1;
        unsigned char *nb = realloc(c->buf, ncap);
        if (!nb)
            return -1;
        c->buf = nb;
        c->cap = ncap;
    }
    ssize_t got = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
    if (got < 0 && (errno == EINTR || errno == EAGAIN))
        return 0;
    if (got <= 0)
        return -1;
    c->len += (size_t)got;
    size_t off = 0;
    int rc = 0;
    while (rc == 0) {
        const uint8_t *name = NULL;
        size_t namelen = 0;
        long k = request_span(c->buf + off, c->len - off, &name, &namelen);
        if (k == 0)
            break;
        if (k < 0) {
            rc = -1;
            break;
        }
        rc = answer(s, c, c->buf + off, (size_t)k, name, namelen);
        off += (size_t)k;
    }
    memmove(c->buf, c->buf + off, c->len - off);
    c->len -= off;
    return rc;
}

static void conn_close(conn *c)
{
    close(c->fd);
    if (c->up >= 0)
        close(c->up);
    free(c->buf);
    memset(c, 0, sizeof *c);
    c->fd = c->up = -1;
}

static void drain_backlog(fz_server *s)
{
    for (;;) {
        int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            break;
        close(fd);
    }
}

static void *serve(void *arg)
{
    fz_server *s = arg;
    conn conns[MAXCONN];
    int n = 0;
    for (;;) {
        struct pollfd p[2 + MAXCONN];
        p[0] = (struct pollfd){s->stop[0], POLLIN, 0};
        p[1] = (struct pollfd){s->lfd, POLLIN, 0};
        for (int i = 0; i < n; i++)
            p[2 + i] = (struct pollfd){conns[i].fd, POLLIN, 0};
        int rc = poll(p, (nfds_t)(2 + n), -1);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc < 0 || p[0].revents)
            break;
        /* From the last down: a closed connection is replaced by the last
         * one, which has been handled already. */
        for (int i = n - 1; i >= 0; i--) {
            if (!p[2 + i].revents)
                continue;
            if (conn_read(s, &conns[i]) != 0) {
                conn_close(&conns[i]);
                conns[i] = conns[--n];
            }
        }
        if (p[1].revents & POLLIN) {
            int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
            if (fd >= 0 && n == MAXCONN) {
                close(fd);
            } else if (fd >= 0) {
                nodelay(fd);
                conns[n] = (conn){fd, -1, NULL, 0, 0};
                if (s->upstream_port)
                    conns[n].up = connect_upstream(s->upstream_port);
                n++;
            }
        }
    }
    for (int i = 0; i < n; i++)
        conn_close(&conns[i]);
    drain_backlog(s);
    char b;
    while (read(s->stop[0], &b, 1) < 0 && errno == EINTR)
        ;
    return NULL;
}

/* ------------------------------------------------------------ lifecycle */

fz_server *fz_server_get(void)
{
    static fz_server *the;
    if (the)
        return the;
    fz_server *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    if (s->lfd < 0 || bind(s->lfd, (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(s->lfd, 64) != 0 || getsockname(s->lfd, (struct sockaddr *)&a, &alen) != 0 ||
        pipe2(s->stop, O_CLOEXEC) != 0) {
        perror("fake server: listen on 127.0.0.1");
        if (s->lfd >= 0)
            close(s->lfd);
        free(s);
        return NULL;
    }
    s->port = ntohs(a.sin_port);
    the = s;
    return s;
}

int fz_server_port(const fz_server *s)
{
    return s->port;
}

void fz_server_record(fz_server *s, int upstream_port, FILE *rec)
{
    s->upstream_port = upstream_port;
    s->rec = rec;
}

int fz_server_begin(fz_server *s, const uint8_t *data, size_t size, const char *info,
                    size_t info_len, int raw_info)
{
    s->data = data;
    s->size = size;
    s->pos = 0;
    s->info = info;
    s->info_len = info_len;
    s->raw_info = raw_info;
    /* Connections a previous input left in the backlog are not ours. */
    drain_backlog(s);
    if (pthread_create(&s->th, NULL, serve, s) != 0)
        return -1;
    s->running = 1;
    return 0;
}

size_t fz_server_end(fz_server *s)
{
    if (!s->running)
        return 0;
    char b = 1;
    while (write(s->stop[1], &b, 1) < 0 && errno == EINTR)
        ;
    pthread_join(s->th, NULL);
    s->running = 0;
    return s->pos;
}
