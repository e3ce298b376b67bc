/*
 * Routing: which server a command goes to and running it there (conn.c),
 * opening one server's connection (connect.c), Sentinel (sentinel.c),
 * Cluster (cluster.c); and the helpers that send single commands through
 * it: scripts by EVALSHA (scripts.c), the fleet's clock (clock.c), the
 * legacy-writer marker (marker.c).
 */
#ifndef RELOCK_ROUTING_H
#define RELOCK_ROUTING_H

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

/*
 * Runs one command (argv form).  On success returns a reply the caller
 * frees with freeReplyObject().  On failure returns NULL and records
 * RELOCK_EIO in c->err; *sent (if not NULL) tells whether the command may
 * have reached the server (then the outcome is ambiguous).  Error replies
 * are returned as replies: check with relock__reply_error().
 */
redisReply *relock__command(relock_client *c, int *sent, int argc, const char **argv,
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
 * driver sends every batch here (src/engine/drive.c).
 */
int relock__conn_pipeline(relock_client *c, int n, char *const *cmd, const size_t *len,
                          const char *const *name, redisReply **rep, int *sent);
/* printf-like convenience over relock__command for fixed-form commands. */
redisReply *relock__commandf(relock_client *c, int *sent, const char *fmt, ...);
redisReply *relock__vcommandf(relock_client *c, int *sent, const char *fmt, va_list ap);

/* Runs a script by EVALSHA, falling back to EVAL on NOSCRIPT. */
redisReply *relock__eval(relock_client *c, int *sent, int id, int nkeys, int nargs,
                         const char **args);

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

/* ------------------------------------------------------------------ sentinel (sentinel.c) */

/* Asks the sentinels in turn for the master's address, connects there and
 * checks it is a master; RELOCK_EIO naming the master and the sentinels
 * tried when none gives a usable one. */
relock_status relock__sentinel_connect(relock_client *c);
/* Whether an error reply says the server is a read-only replica (READONLY,
 * also as wrapped by a script error on older servers). */
int relock__sentinel_readonly(const redisReply *r);

/* ------------------------------------------------------------------ cluster (cluster.c) */

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
/* For walks of every master (scan.c): when c's server is a Cluster node
 * (3.0 or later), reads the slot map afresh, whatever cluster.slot_map
 * says, and returns how many masters serve slots; 0 when it is no cluster
 * node or the map cannot be read (the walk then covers c's server only). */
int relock__cluster_masters(relock_client *c);
/* Makes master i of the map (0 <= i < relock__cluster_masters(), in slot
 * order) c's connection and connects it. */
relock_status relock__cluster_use(relock_client *c, int i);
/* Its first half (cluster.c): makes master i c's connection; 0, or -1
 * with the error recorded. */
int relock__cluster_pick_master(relock_client *c, int i);
/* For tests and the benchmark: masters in the map, open connections in
 * the pool (the active one included), full refreshes made. */
void relock__cluster_counts(const relock_client *c, int *masters, int *open,
                            unsigned long *refreshes);

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
