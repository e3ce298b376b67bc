/*
 * Redis Cluster (design.md §9.3): follow the redirections of the node that
 * does not serve a key's slot.  conn.c calls these for every command and
 * script, so every algorithm works on a cluster as long as each command's
 * keys share one slot, which keys.c guarantees for a lock key and its
 * fence counter.
 *
 *   MOVED slot host:port   the slot lives there now: the client's one
 *                          connection moves to that node (connect, log in,
 *                          probe) and the command is sent again;
 *   ASK slot host:port     the slot is migrating and the key is already on
 *                          the node importing it: ASKING and the command
 *                          go there once, on a connection of their own,
 *                          and the client stays where it was;
 *   TRYAGAIN               a script's keys are split by a migration in
 *                          progress for a moment: the same node, again.
 *
 * None of them means the command ran, so following them never makes an
 * outcome ambiguous.
 *
 * With cluster.slot_map on (the default), the first MOVED makes a slot map
 * (CLUSTER SLOTS) and a small pool of connections, one per master in use:
 * each operation then starts on its key's master (relock__cluster_route,
 * called by the entry points before anything is sent, so never inside
 * WATCH or MULTI), and a client that alternates between locks on several
 * masters neither reconnects nor meets MOVED.  A MOVED updates its slot at
 * once and the whole map at most once a second; a master that cannot be
 * reached marks the map stale, and the next route reads it again, which
 * after a failover names the promoted replica.  ASK and TRYAGAIN never
 * change the map (the migration is not finished).  With the map off, MOVED
 * moves the client's one connection, as it always did.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "routing.h"

/* ------------------------------------------------------------------ pure parts
 *
 * Reading CLUSTER SLOTS: no I/O here.  The blocking client (conn.c,
 * below) and the asynchronous one (src/core/routing.c) read replies alike
 * (redirections, and what a reply asks of them: route.c). */

enum relock__redir_kind relock__cluster_redirect(relock_client *c, const redisReply *r,
                                                 relock__redirect *out)
{
    return relock__redirect_parse(c->conn.srv ? c->conn.srv->host : "", r, out);
}

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

/* ------------------------------------------------------------------ the blocking client */

void relock__cluster_move(relock_client *c, const relock__redirect *to)
{
    const relock__server *from = c->conn.srv;
    relock__conn_close(&c->conn);
    /* Credentials and db stay those of the configured server. */
    if (from != &c->node)
        c->node = *from;
    memcpy(c->node.host, to->host, sizeof c->node.host);
    c->node.port = to->port;
    c->conn.srv = &c->node;
}

redisReply *relock__cluster_ask(relock_client *c, int *sent, const relock__redirect *to,
                                const char *name, const char *cmd, size_t len)
{
    *sent = 0;
    relock__server srv = *c->conn.srv; /* credentials and db */
    memcpy(srv.host, to->host, sizeof srv.host);
    srv.port = to->port;
    char why[RELOCK__HOST_MAX + 160];
    relock_status st;
    redisContext *ctx = relock__connect_ctx(srv.host, srv.port, c->s.connect_timeout_ms,
                                            c->s.command_timeout_ms, &st, why, sizeof why);
    if (!ctx) {
        RELOCK__FAIL(&c->err, st, "%s (ASK redirection for %s)", why, name);
        memset(&srv, 0, sizeof srv); /* it holds the password */
        return NULL;
    }
    redisReply *r = NULL;
    if (relock__conn_login(c, ctx, &srv) == RELOCK_OK) {
        void *asking = NULL, *reply = NULL;
        if (redisAppendCommand(ctx, "ASKING") != REDIS_OK ||
            redisAppendFormattedCommand(ctx, cmd, len) != REDIS_OK ||
            redisGetReply(ctx, &asking) != REDIS_OK || !asking ||
            redisGetReply(ctx, &reply) != REDIS_OK || !reply) {
            *sent = 1;
            RELOCK__FAIL(&c->err, RELOCK_EIO, "%s on " RELOCK__ADDR_FMT " (ASK redirection): %s",
                         name, RELOCK__ADDR(&srv),
                         ctx->errstr[0] ? ctx->errstr : "connection lost");
        } else {
            r = reply;
        }
        if (asking)
            freeReplyObject(asking);
    }
    redisFree(ctx);
    memset(&srv, 0, sizeof srv);
    return r;
}

/* ------------------------------------------------------------------ slot map */

/* Masters the map can name at a time (an entry no slot names is reused);
 * slots of further masters stay unknown and are reached through MOVED with
 * the connection in use. */
#define MAX_NODES 64
/* Open connections a client keeps, the one in use included: a client that
 * works with more masters than this closes the least recently used. */
#define POOL_MAX 8
/* A MOVED reads the whole map again at most this often; in between it
 * updates its own slot only. */
#define REFRESH_MIN_MS 1000
/* Fresh connections tried to read the map when none is open. */
#define REFRESH_CONNECTS 3

typedef struct cnode {
    relock__server srv; /* address; credentials and db of servers[0] */
    relock__conn conn;  /* parked while another connection is in use */
} cnode;

struct relock__cluster {
    uint8_t slot[RELOCK__CLUSTER_NSLOTS]; /* 1 + index into nodes; 0 unknown */
    cnode nodes[MAX_NODES];
    int nnodes;
    int stale;           /* a master was unreachable: read the map again */
    int learned;         /* the map was read at least once */
    uint64_t refreshed_at; /* monotonic ms of the last full read */
    int route_slot;      /* the current operation's slot, or -1 */
    unsigned long refreshes;
};

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

static int map_on(const relock_client *c)
{
    return c->s.cluster.slot_map && !c->q && !relock__sentinel_on(&c->s);
}

static cnode *node_of(const relock_client *c, const relock__server *srv)
{
    const struct relock__cluster *cl = c->cl;
    /* Compared as integers: srv may point anywhere (servers[0], c->node). */
    uintptr_t p = (uintptr_t)srv;
    if (!cl || p < (uintptr_t)&cl->nodes[0].srv || p > (uintptr_t)&cl->nodes[MAX_NODES - 1].srv)
        return NULL;
    return (cnode *)((const char *)srv - offsetof(cnode, srv));
}

int relock__cluster_is_node(const relock_client *c, const relock__server *srv, int *slot_out)
{
    if (!node_of(c, srv))
        return 0;
    if (slot_out)
        *slot_out = c->cl->route_slot;
    return 1;
}

/* The entry for host:port, added (with servers[0]'s credentials and db)
 * when new; NULL when the table is full. */
static cnode *node_for(relock_client *c, const char *host, int port)
{
    struct relock__cluster *cl = c->cl;
    for (int i = 0; i < cl->nnodes; i++)
        if (cl->nodes[i].srv.port == port && strcmp(cl->nodes[i].srv.host, host) == 0)
            return &cl->nodes[i];
    if (strlen(host) >= RELOCK__HOST_MAX)
        return NULL;
    cnode *n = NULL;
    if (cl->nnodes < MAX_NODES) {
        n = &cl->nodes[cl->nnodes++];
    } else {
        /* Full (masters come and go over a long life): reuse an entry that
         * no slot names, that is not in use and has nothing parked. */
        uint8_t named[MAX_NODES + 1] = {0};
        for (int s = 0; s < RELOCK__CLUSTER_NSLOTS; s++)
            named[cl->slot[s]] = 1;
        for (int i = 0; i < MAX_NODES && !n; i++)
            if (!named[i + 1] && !cl->nodes[i].conn.ctx && c->conn.srv != &cl->nodes[i].srv)
                n = &cl->nodes[i];
        if (!n)
            return NULL;
    }
    memset(n, 0, sizeof *n);
    n->srv = c->s.servers[0];
    snprintf(n->srv.host, sizeof n->srv.host, "%s", host);
    n->srv.port = port;
    n->conn.srv = &n->srv;
    return n;
}

/* The connection in use becomes a master's entry's when it goes to that
 * master's address (the configured node, or a MOVED's), so that the
 * first route does not open a second one. */
static void adopt_active(relock_client *c)
{
    if (node_of(c, c->conn.srv) || !c->conn.srv)
        return;
    struct relock__cluster *cl = c->cl;
    for (int i = 0; i < cl->nnodes; i++)
        if (cl->nodes[i].srv.port == c->conn.srv->port &&
            strcmp(cl->nodes[i].srv.host, c->conn.srv->host) == 0) {
            c->conn.srv = &cl->nodes[i].srv;
            return;
        }
}

/* One range of CLUSTER SLOTS into the map (relock__cluster_slots_parse). */
static void map_range(void *arg, int from, int to, const char *host, int port)
{
    relock_client *c = arg;
    struct relock__cluster *cl = c->cl;
    cnode *n = node_for(c, host, port);
    if (!n)
        return;
    uint8_t idx = (uint8_t)(n - cl->nodes + 1);
    memset(&cl->slot[from], idx, (size_t)(to - from + 1));
}

/* Reads CLUSTER SLOTS on ctx (a connection to via) into the map; 0 on
 * success.  Slots the reply does not name become unknown. */
static int read_slots(relock_client *c, redisContext *ctx, const relock__server *via)
{
    struct relock__cluster *cl = c->cl;
    redisReply *r = redisCommand(ctx, "CLUSTER SLOTS");
    if (!r)
        return -1;
    if (r->type != REDIS_REPLY_ARRAY) {
        freeReplyObject(r);
        return -1;
    }
    memset(cl->slot, 0, sizeof cl->slot);
    relock__cluster_slots_parse(r, via->host, map_range, c);
    freeReplyObject(r);
    cl->learned = 1;
    cl->stale = 0;
    cl->refreshed_at = relock__mono_ms();
    cl->refreshes++;
    adopt_active(c);
    return 0;
}

/* Reads the map again from any master that answers: the connection in
 * use, then the parked ones, then a few fresh connections (the configured
 * node first).  The client's error stays as it was: a failed refresh only
 * leaves the map as it is. */
static int refresh(relock_client *c)
{
    struct relock__cluster *cl = c->cl;
    if (c->conn.in_txn)
        return -1;
    if (c->conn.ctx && read_slots(c, c->conn.ctx, c->conn.srv) == 0)
        return 0;
    if (c->conn.ctx && c->conn.ctx->err)
        relock__conn_close(&c->conn);
    for (int i = 0; i < cl->nnodes; i++) {
        relock__conn *p = &cl->nodes[i].conn;
        if (!p->ctx)
            continue;
        if (read_slots(c, p->ctx, &cl->nodes[i].srv) == 0)
            return 0;
        relock__conn_close(p);
    }
    int tries = 0;
    for (int i = -1; i < cl->nnodes && tries < REFRESH_CONNECTS; i++) {
        relock__server srv = i < 0 ? c->s.servers[0] : cl->nodes[i].srv;
        if (i >= 0 && srv.port == c->s.servers[0].port &&
            strcmp(srv.host, c->s.servers[0].host) == 0)
            continue;
        tries++;
        char why[RELOCK__HOST_MAX + 160];
        relock_status st;
        redisContext *ctx = relock__connect_ctx(srv.host, srv.port, c->s.connect_timeout_ms,
                                                c->s.command_timeout_ms, &st, why, sizeof why);
        if (!ctx) {
            memset(&srv, 0, sizeof srv); /* it holds the password */
            continue;
        }
        relock__err saved = c->err;
        int ok = relock__conn_login(c, ctx, &srv) == RELOCK_OK && read_slots(c, ctx, &srv) == 0;
        relock__err_copy(&c->err, &saved);
        redisFree(ctx);
        memset(&srv, 0, sizeof srv);
        if (ok)
            return 0;
    }
    return -1;
}

/* Makes n's connection the one in use, parking the one in use in its own
 * entry (or closing it, when it goes to no master of the map).  At most
 * POOL_MAX connections stay open: the least recently used parked one is
 * closed.  Parked connections are checked before reuse like any idle one
 * (conn.c). */
static void switch_to(relock_client *c, cnode *n)
{
    struct relock__cluster *cl = c->cl;
    if (c->conn.srv == &n->srv)
        return;
    cnode *cur = node_of(c, c->conn.srv);
    if (cur) {
        cur->conn = c->conn;
        cur->conn.in_txn = 0;
    } else {
        relock__conn_close(&c->conn);
    }
    c->conn = n->conn;
    c->conn.srv = &n->srv;
    memset(&n->conn, 0, sizeof n->conn);
    n->conn.srv = &n->srv;
    for (;;) {
        int open = c->conn.ctx ? 1 : 0;
        cnode *oldest = NULL;
        for (int i = 0; i < cl->nnodes; i++) {
            relock__conn *p = &cl->nodes[i].conn;
            if (&cl->nodes[i] == n || !p->ctx)
                continue;
            open++;
            if (!oldest || p->last_used < oldest->conn.last_used)
                oldest = &cl->nodes[i];
        }
        if (open <= POOL_MAX || !oldest)
            return;
        relock__conn_close(&oldest->conn);
    }
}

static struct relock__cluster *map_new(relock_client *c)
{
    if (!c->cl) {
        c->cl = calloc(1, sizeof *c->cl);
        if (c->cl)
            c->cl->route_slot = -1;
    }
    return c->cl;
}

int relock__cluster_pick(relock_client *c, const char *key)
{
    struct relock__cluster *cl = c->cl;
    if (!cl || !map_on(c) || c->conn.in_txn)
        return 0;
    cl->route_slot = (int)relock__cluster_slot(key, strlen(key));
    if (cl->stale)
        refresh(c);
    int idx = cl->slot[cl->route_slot];
    if (idx)
        switch_to(c, &cl->nodes[idx - 1]);
    return 1;
}

int relock__cluster_moved(relock_client *c, const relock__redirect *to)
{
    if (!map_on(c) || !map_new(c))
        return -1;
    struct relock__cluster *cl = c->cl;
    /* The node that said MOVED is a master with a current view: read the
     * whole map from it when that is cheap (first time, or not within the
     * last second); the MOVED itself is newer still, so it is applied
     * after. */
    if (!cl->learned || cl->stale || relock__mono_ms() - cl->refreshed_at >= REFRESH_MIN_MS)
        refresh(c);
    cl->route_slot = to->slot;
    cnode *n = node_for(c, to->host, to->port);
    if (!n) {
        /* More masters than the map can name: this slot stays unknown, and
         * the connection in use moves as without a map. */
        cl->slot[to->slot] = 0;
        return -1;
    }
    cl->slot[to->slot] = (uint8_t)(n - cl->nodes + 1);
    switch_to(c, n);
    return 0;
}

void relock__cluster_unreachable(relock_client *c, const relock__server *srv)
{
    if (node_of(c, srv))
        c->cl->stale = 1;
}

int relock__cluster_reroute(relock_client *c)
{
    struct relock__cluster *cl = c->cl;
    if (!cl || !cl->stale || c->conn.in_txn || cl->route_slot < 0)
        return 0;
    const relock__server *before = c->conn.srv;
    if (refresh(c) != 0)
        return 0;
    int idx = cl->slot[cl->route_slot];
    if (!idx || &cl->nodes[idx - 1].srv == before)
        return 0;
    switch_to(c, &cl->nodes[idx - 1]);
    return 1;
}

void relock__cluster_free(relock_client *c)
{
    struct relock__cluster *cl = c->cl;
    if (!cl)
        return;
    if (node_of(c, c->conn.srv)) {
        relock__conn_close(&c->conn);
        c->conn.srv = &c->s.servers[0];
    }
    for (int i = 0; i < cl->nnodes; i++)
        relock__conn_close(&cl->nodes[i].conn);
    memset(cl, 0, sizeof *cl); /* the entries hold passwords */
    free(cl);
    c->cl = NULL;
}
