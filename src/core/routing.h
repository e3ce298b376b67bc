/*
 * Routing: which server a command goes to and running it there (conn.c),
 * opening one server's connection (connect.c), Sentinel (sentinel.c),
 * Cluster (cluster.c); and the helpers that send single commands through
 * it: scripts by EVALSHA (run.c), the legacy-writer marker (marker.c).
 */
#ifndef RELOCK_ROUTING_H
#define RELOCK_ROUTING_H

#include "drive.h"
#include "transport.h"

/* Connects (or reconnects) c's connection and probes the server. */
relock_status relock__conn_ensure(relock_client *c);
/*
 * A transaction (WATCH ... EXEC, MULTI ... EXEC) is about to start on c's
 * connection: connects now if needed, and from here until
 * relock__txn_end() no command reconnects, follows a redirection or
 * replaces the connection: a connection lost in between fails each later
 * command with RELOCK_EIO, since a new connection would carry neither the
 * WATCH nor the queued commands, and the rest of the sequence would run
 * unconditionally.
 */
relock_status relock__txn_begin(relock_client *c);
void relock__txn_end(relock_client *c);
/* Outside a transaction: drops c's connection if it went stale while idle
 * and connects it if needed (with a Cluster slot map, once more to a new
 * master when the map read again names one). */
relock_status relock__conn_ready(relock_client *c);

/* Connects c's connection to srv (which must outlive it), logs in and
 * probes; on failure the connection stays closed. */
relock_status relock__conn_open(relock_client *c, const relock__server *srv);
/* A connection of the operation core (pollloop.c) could not be made
 * ready: why (its setup's error) becomes c's, recorded here. */
relock_status relock__connect_failed(relock_client *c, const relock__err *why,
                                     const relock__server *srv);

/*
 * Runs one command (argv form).  On success returns a reply the caller
 * frees with freeReplyObject().  On failure returns NULL and records
 * RELOCK_EIO in c->err; *sent (if not NULL) tells whether the command may
 * have reached the server (then the outcome is ambiguous).  Error replies
 * are returned as replies: check with relock__reply_error().
 */
redisReply *relock__command(relock_client *c, int *sent, int argc, const char **argv,
                            const size_t *argvlen);
/* relock__command() on the client's own connection, whatever the client
 * (one server runs the other over the operation core): scan's walk, which
 * reads that connection's Cluster pool and pipelines on it. */
redisReply *relock__conn_command(relock_client *c, int *sent, int argc, const char **argv,
                                 const size_t *argvlen);
/*
 * Runs n formatted commands (cmd[i], len[i] bytes; name[i] for messages)
 * on c's connection as relock__command runs one: with n > 1 written
 * together and their replies read after, a redirection or Sentinel's
 * READONLY followed for the command it answers (and the later ones sent
 * again after it).  Returns how many replies, in order, are in rep (the
 * caller frees them); fewer than n on failure, with RELOCK_EIO (or the
 * connect error) recorded in c->err and *sent telling whether the first
 * unanswered command may have reached the server.  The engine's blocking
 * driver sends every batch here (src/core/drive.c).
 */
int relock__conn_pipeline(relock_client *c, int n, char *const *cmd, const size_t *len,
                          const char *const *name, redisReply **rep, int *sent);
/* When c's error is a WRONGTYPE reply (RELOCK_EFOREIGN): asks the server
 * with TYPE which type key holds, on this error path only, and rewrites
 * the message as "WHAT: the key KEY on HOST:PORT holds a hash, not a lock;
 * ...".  Leaves any other error, and this one when TYPE fails, as it is.
 * Returns c's status. */
relock_status relock__foreign_type(relock_client *c, const char *what, const char *key);


/* Records, at most once a second per client, that a value only a legacy
 * client can have written was met (the marker `relock scan` reads).
 * Failures are ignored: the marker informs, it never decides. */
void relock__note_legacy_writer(relock_client *c);
/* Records, once per client and only if nobody did before, that upgraded
 * clients watch for legacy writers from now on (the watch marker). */
void relock__note_watching(relock_client *c);

/* ------------------------------------------------------------------ sentinel (sentinel.c) */

/* Asks the sentinels in turn for the master's address, connects there and
 * checks it is a master; RELOCK_EIO naming the master and the sentinels
 * tried when none gives a usable one. */
relock_status relock__sentinel_connect(relock_client *c);
/* Whether an error reply says the server is a read-only replica (READONLY,
 * also as wrapped by a script error on older servers). */
int relock__sentinel_readonly(const redisReply *r);

/* The search through the sentinels as pure steps (no I/O), run by the
 * blocking client above and by the asynchronous client over their own
 * connections: begin, then for each sentinel next() says whom to ask;
 * its reply to SENTINEL get-master-addr-by-name goes to answer() (or its
 * failure to unreachable()); the master named is connected, logged in and
 * probed, and its reply to ROLE (INFO replication before 2.8.12) read by
 * role(); a master that fails goes to bad_master(); when next() says -1,
 * end() records the error naming the master and every sentinel asked. */
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
/* The current sentinel could not be reached or did not answer (reason, as
 * a connect failure's message or the connection's error). */
void relock__sentinel_unreachable(relock__sentinel_search *q, const relock__settings *s,
                                  const char *reason);
/* The current sentinel's reply: 0 with the master's address in *out, or
 * -1 with what was wrong noted. */
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
/* Records the search's failure on err and returns its status. */
relock_status relock__sentinel_end(const relock__sentinel_search *q, const relock__settings *s,
                                   relock__err *err);
/* A sentinel's connect and command timeout: the configured one, at most
 * 500 ms (sentinels answer from memory). */
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
/*
 * Before an operation on key begins (never inside a transaction): with a
 * slot map, makes c's connection the one to the master serving key's slot,
 * parking the one in use, and connects it (the algorithms look at the
 * server's capabilities before they send).  Without a map, or when the
 * slot is unknown, nothing changes and redirections teach the way.
 * RELOCK_EIO when the master cannot be reached, naming it.
 */
relock_status relock__cluster_route(relock_client *c, const char *key);
/* Its first half (cluster.c): with a slot map, outside a transaction,
 * makes the master of key's slot c's connection (when known) and returns
 * 1: the connection is then to be readied (conn.c); 0: nothing to do. */
int relock__cluster_pick(relock_client *c, const char *key);
/* MOVED with the slot map on: records the slot's new master (and, at most
 * once a second, reads the whole map again), then routes c there.  0 when
 * done; -1 when the map could not be made (out of memory): the caller
 * moves the one connection as without a map. */
int relock__cluster_moved(relock_client *c, const relock__redirect *to);
/* A connection to srv could not be opened: when srv is a master of the
 * map, the map is marked for a refresh. */
void relock__cluster_unreachable(relock_client *c, const relock__server *srv);
/* After a failed connect, outside a transaction: refreshes a stale map
 * and, when the current operation's slot now has another master, routes
 * c there.  1 when the connection changed (worth one more try). */
int relock__cluster_reroute(relock_client *c);
/* Whether srv is a master of c's slot map; then *slot_out (if not NULL)
 * is the current operation's slot, or -1. */
int relock__cluster_is_node(const relock_client *c, const relock__server *srv, int *slot_out);
/* Closes the pool's connections and frees the map. */
void relock__cluster_free(relock_client *c);
/* For tests and the benchmark: masters in the slot map, open connections
 * (the blocking calls' core connections, pollloop.c), full reads of the
 * map made; zeros before the first call. */
void relock__cluster_counts(const relock_client *c, int *masters, int *open,
                            unsigned long *refreshes);

/* Pure (no I/O), shared by the blocking and the asynchronous client:
 * reads a MOVED, ASK or TRYAGAIN error reply into out (an empty host in the
 * reply means cur_host, the host of the connection that said it). */
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
/* Decides for reply r to a command sent after hops redirections, on a
 * connection to cur_host, inside a transaction or not; *next is the
 * redirection's target. */
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

/* Reads a MOVED, ASK or TRYAGAIN error reply into out (an empty host in
 * the reply means the host of the current connection). */
enum relock__redir_kind relock__cluster_redirect(relock_client *c, const redisReply *r,
                                                 relock__redirect *out);
/* MOVED: points c's connection at the node named (closing it; the next
 * command connects there). */
void relock__cluster_move(relock_client *c, const relock__redirect *to);
/* ASK: sends ASKING and the formatted command cmd (len bytes) to the node
 * named on a connection of its own, closed afterwards.  As
 * relock__command. */
redisReply *relock__cluster_ask(relock_client *c, int *sent, const relock__redirect *to,
                                const char *name, const char *cmd, size_t len);

#endif
