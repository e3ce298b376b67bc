/*
 * Routing's pure parts, which the operation core (core.h) runs: Sentinel's
 * search (sentinel.c), Cluster's slots and redirections (cluster.c); and
 * the blocking calls' driver of one step machine and single commands
 * (pollloop.c).
 */
#ifndef RELOCK_ROUTING_H
#define RELOCK_ROUTING_H

#include "engine/fan.h"

/*
 * Runs machine m (its head zeroed but for its inputs) with step function
 * fn until it is done, and returns its status (errors on l->c->err), on
 * the one-server runner's connection l->key routes to (a quorum's first
 * server, a Sentinel's master, a Cluster node): break, inspect and the
 * owner record (src/api/), an adoption (mode.c), relock__command().
 */
relock_status relock__drive(relock_lock *l, relock__step_fn fn, void *m);
/* The connection key's machine will run on, connected, logged in and
 * probed now, its facts on c->conn (key NULL: the server the client
 * reports); or the error on c->err. */
relock_status relock__drive_ready(relock_client *c, const char *key);

/*
 * Runs one command (argv form) on the connection its second word, a key,
 * routes to.  Returns its reply (an error reply too), which the caller
 * frees with freeReplyObject(); or NULL with the error on c->err, and
 * *sent (if not NULL) telling whether the command may have reached the
 * server (then the outcome is ambiguous).
 */
redisReply *relock__command(relock_client *c, int *sent, int argc, const char **argv,
                            const size_t *argvlen);
/* st, or when st and c's error are a WRONGTYPE reply (RELOCK_EFOREIGN):
 * asks the server with TYPE which type key holds and rewrites the message
 * as "OP NAME: the key KEY on HOST:PORT holds a hash, not a lock; ...".
 * Leaves any other error, and this one when TYPE fails, as it is. */
relock_status relock__foreign_type(relock_client *c, const char *op, const char *name,
                                   const char *key, relock_status st);

/* ------------------------------------------------------------------ sentinel (sentinel.c) */

/* Whether an error reply says the server is a read-only replica (READONLY,
 * also as wrapped by a script error on older servers). */
int relock__sentinel_readonly(const redisReply *r);

/* The search through the sentinels (begin(), then next() names whom to
 * ask, answer() reads the reply to SENTINEL get-master-addr-by-name, role()
 * the master's to ROLE; end() once next() says -1). */
typedef struct relock__sentinel_search {
    int n;     /* sentinels configured */
    int first; /* asked first: the one that helped last */
    int k;     /* asked so far */
    int cur;   /* the one being asked, or -1 */
    relock_status worst;
    char tried[512]; /* what each said, for the message */
} relock__sentinel_search;

void relock__sentinel_begin(relock__sentinel_search *q, const relock__settings *s, int first);
/* The index of the next sentinel to ask, or -1 when every one was asked. */
int relock__sentinel_next(relock__sentinel_search *q);
/* The current sentinel could not be reached or did not answer (reason: a
 * connect failure's message or the connection's error). */
void relock__sentinel_unreachable(relock__sentinel_search *q, const relock__settings *s,
                                  const char *reason);
/* The current sentinel's reply: 0 with the master's address in *out, or
 * -1, noted. */
int relock__sentinel_answer(relock__sentinel_search *q, const relock__settings *s,
                            const redisReply *r, relock__addr *out);
/* Whether the role is asked with INFO replication (servers before 2.8.12)
 * rather than ROLE. */
int relock__sentinel_role_by_info(int major, int minor, int patch);
/* The master's reply to ROLE (or INFO replication): 0 a master, 1 not
 * (role filled), -1 an unexpected reply. */
int relock__sentinel_role(const redisReply *r, int by_info, char *role, size_t rolelen);
/* The master m named by the current sentinel failed with st (why: the
 * reason, without the address). */
void relock__sentinel_bad_master(relock__sentinel_search *q, const relock__settings *s,
                                 const relock__addr *m, relock_status st, const char *why);
/* Records the search's failure (the master and every sentinel asked). */
relock_status relock__sentinel_end(const relock__sentinel_search *q, const relock__settings *s,
                                   relock__err *err);
/* A sentinel's connect and command timeout: the configured one, capped. */
long long relock__sentinel_timeout(long long configured_ms);
/* The reason in a "connect to HOST:PORT: reason" message, for messages
 * that name the address themselves. */
const char *relock__sentinel_reason(const char *msg);
/* Records command name's READONLY reply from srv (a demoted master): the
 * message says a failover is under way. */
relock_status relock__sentinel_readonly_fail(relock__err *err, const relock__settings *s,
                                             const char *name, const relock__server *srv,
                                             const char *reply);

/* ------------------------------------------------------------------ cluster (cluster.c) */

/* Redis Cluster's hash slots. */
#define RELOCK__CLUSTER_NSLOTS 16384
/* Redirections followed for one command, at most. */
#define RELOCK__CLUSTER_MAX_REDIRECTS 5

enum relock__redir_kind {
    RELOCK__REDIR_NONE = 0,
    RELOCK__REDIR_MOVED,   /* the slot lives elsewhere now: move there */
    RELOCK__REDIR_ASK,     /* the slot is migrating: ask there, once */
    RELOCK__REDIR_TRYAGAIN /* a multi-key command met a half-migrated slot */
};

typedef struct relock__redirect {
    enum relock__redir_kind kind;
    char host[RELOCK__HOST_MAX];
    int port;
    int slot; /* MOVED and ASK: the slot named */
} relock__redirect;

/* The Cluster hash slot of a key (CRC16 of the key, or of its hash tag,
 * modulo 16384), as Redis computes it. */
unsigned relock__cluster_slot(const char *key, size_t len);
/* For tests and the benchmark: the blocking calls' masters in the slot
 * map, open connections and full reads of the map made. */
void relock__cluster_counts(const relock_client *c, int *masters, int *open,
                            unsigned long *refreshes);

/* Reads a MOVED, ASK or TRYAGAIN error reply into out (an empty host in
 * the reply means cur_host, the host of the connection that said it). */
enum relock__redir_kind relock__redirect_parse(const char *cur_host, const redisReply *r,
                                               relock__redirect *out);

/* What a reply asks of the client that sent the command (pure). */
enum relock__route {
    RELOCK__ROUTE_REPLY = 0, /* nothing: the reply is the command's */
    RELOCK__ROUTE_READONLY,  /* Sentinel: the master was demoted; drop the
                                connection, fail (relock__sentinel_readonly_fail) */
    RELOCK__ROUTE_TOO_MANY,  /* redirected too often: fail (relock__route_too_many) */
    RELOCK__ROUTE_MOVED,     /* send it again to next's node, which serves the slot now */
    RELOCK__ROUTE_ASK,       /* send ASKING and it once to next's node */
    RELOCK__ROUTE_TRYAGAIN   /* send it again to the same node after relock__route_tryagain_ms */
};
/* Decides for reply r to a command sent after hops redirections on a
 * connection to cur_host; *next is the redirection's target. */
enum relock__route relock__route_reply(const relock__settings *s, int in_txn, int hops,
                                       const char *cur_host, const redisReply *r,
                                       relock__redirect *next);
/* Records RELOCK__ROUTE_TOO_MANY's error for command name. */
relock_status relock__route_too_many(relock__err *err, const char *name, int hops,
                                     const char *reply);
/* The pause before TRYAGAIN's next send: 10, 20, 40, ... ms. */
long relock__route_tryagain_ms(int hops);
/* Calls fn for each usable range of a CLUSTER SLOTS reply (the master of
 * slots from..to; an empty address in the reply is via_host); -1 when r is
 * no array. */
int relock__cluster_slots_parse(const redisReply *r, const char *via_host,
                                void (*fn)(void *arg, int from, int to, const char *host,
                                           int port),
                                void *arg);

#endif
