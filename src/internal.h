/*
 * Internal declarations shared by the library's files (prefix relock__).
 * Nothing here is exported from the shared library.
 */
#ifndef RELOCK_INTERNAL_H
#define RELOCK_INTERNAL_H

#include <stdarg.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "relock.h"
#include "lease.h"

#define RELOCK__MAX_SERVERS 16
#define RELOCK__HOST_MAX 256
#define RELOCK__SECRET_MAX 256
#define RELOCK__PREFIX_MAX 256
#define RELOCK__NAME_MAX 1024
/* Tokens are 32 characters, timestamps at most 18 digits (+ ":" + token). */
#define RELOCK__VALUE_MAX 64
/* One year: a longer lease or wait is far more likely a typo than a wish. */
#define RELOCK__TTL_MAX_MS RELOCK_DURATION_MAX_MS

/* ------------------------------------------------------------------ errors */

typedef struct relock__err {
    relock_error pub;
    char msg[512];
    char server[256];
} relock__err;

void relock__err_clear(relock__err *e);
/* dst becomes a copy of src (an error kept aside, or another handle's), its
 * public fields pointing into dst's own buffers. */
void relock__err_copy(relock__err *dst, const relock__err *src);
/* The detail reported for a NULL handle (RELOCK_EINVAL). */
extern const relock_error relock__null_handle_error;
/* Records an error unless one is already recorded for this call (the first
 * error is the most precise).  Returns st, so callers can write
 * "return RELOCK__FAIL(...)". */
relock_status relock__err_set(relock__err *e, relock_status st, const char *file, int line,
                              const char *server, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

#define RELOCK__FAIL(errp, st, ...)                                                           \
    relock__err_set((errp), (st), __FILE__, __LINE__, NULL, __VA_ARGS__)
#define RELOCK__FAIL_SRV(errp, st, srv, ...)                                                  \
    relock__err_set((errp), (st), __FILE__, __LINE__, (srv), __VA_ARGS__)

/* ------------------------------------------------------------------ settings */

typedef struct relock__server {
    char host[RELOCK__HOST_MAX]; /* with port 0: a unix socket's path */
    int port;
    int db;
    char username[RELOCK__SECRET_MAX];
    char password[RELOCK__SECRET_MAX];
} relock__server;

/* A server's address in messages: "host:port", or a unix socket's path
 * alone (%.0d prints nothing for port 0). */
#define RELOCK__ADDR_FMT "%s%s%.0d"
#define RELOCK__ADDR(srv) (srv)->host, (srv)->port ? ":" : "", (srv)->port

/* Sentinel (DESIGN §6): at most this many sentinel addresses. */
#define RELOCK__MAX_SENTINELS 8
#define RELOCK__MASTER_NAME_MAX 256

/* A "host:port" address (sentinels). */
typedef struct relock__addr {
    char host[RELOCK__HOST_MAX];
    int port;
} relock__addr;

typedef struct relock__settings {
    relock_mode mode;
    char key_prefix[RELOCK__PREFIX_MAX];
    long long ttl_ms;
    relock__server servers[RELOCK__MAX_SERVERS];
    int nservers;
    long long connect_timeout_ms;
    long long command_timeout_ms;
    struct {
        long long max_ms; /* -1 forever */
        long long backoff_min_ms;
        long long backoff_max_ms;
        int notify;
    } wait;
    int fencing;
    /* WAIT (or WAITAOF) after each acquire and extend (durable.c). */
    struct {
        long replicas; /* 0: off */
        int aof;
        long long timeout_ms;
    } durability;
    /* Modern mode: the key outlives the lease by this much unless released. */
    long long lock_delay_ms;
    int owner_info;
    long owner_pid;                        /* relock_config_set_owner(); 0: getpid() */
    char owner_text[RELOCK_OWNER_MAX + 1]; /* and its text, or "" */
    struct {
        int unit_ms; /* 0: seconds, 1: milliseconds */
        long expiry_offset;
        long long skew_margin_ms;
        int gc_expire;
        int clock_server;
    } legacy;
    struct {
        int value_suffix;
    } bridge;
    struct {
        int legacy_clients;
        long long quiet_window_ms;
    } migration;
    /* Sentinel: when master is not empty, every (re)connect asks these
     * sentinels for the master's address; servers[0] then gives only the
     * credentials and db. */
    struct {
        char master[RELOCK__MASTER_NAME_MAX];
        relock__addr addrs[RELOCK__MAX_SENTINELS];
        int naddrs;
    } sentinel;
    /* Redis Cluster: slot_map 1 keeps a map of the slots learned with
     * CLUSTER SLOTS and a connection per master (cluster.c); 0 follows
     * each MOVED with the client's one connection. */
    struct {
        int slot_map;
    } cluster;
} relock__settings;

struct relock_config {
    relock__settings s;
    relock__err err;
};

void relock__settings_default(relock__settings *s);
/* Parses "host:port" (IPv6 hosts in brackets) strictly into a; on error
 * writes a reason into why.  0 on success. */
int relock__parse_addr(const char *text, size_t len, relock__addr *a, char *why, size_t whylen);
/* Parses a redis:// URL into srv; on error writes a reason into why. */
int relock__parse_url(const char *url, relock__server *srv, char *why, size_t whylen);

/* ------------------------------------------------------------------ keys */

/* Appended to a lock key (or its braced form) to name its fence counter. */
#define RELOCK__FENCE_SUFFIX " relock:fence"
/* After key_prefix: the marker recording when a legacy writer was last
 * seen (milliseconds since the epoch, as a decimal string). */
#define RELOCK__MARKER_NAME " relock:legacy-seen"
/* Appended to a lock key to name the channel its releases are told on. */
#define RELOCK__NOTIFY_SUFFIX " relock:released"
#define RELOCK__KEY_MAX (RELOCK__PREFIX_MAX + RELOCK__NAME_MAX + 32)

/* Appended likewise to name the owner metadata beside a lock (owner_info). */
#define RELOCK__OWNER_SUFFIX " relock:owner"
/* Appended likewise, on servers without WATCH (2.0) only: how often the
 * lock was broken (break.c), which a holder compares to tell that its lock
 * was broken and taken again, even with the same timestamp. */
#define RELOCK__BREAKS_SUFFIX " relock:breaks"
/* Appended after either suffix for a key that is nothing but a hash tag,
 * "{a}": without it, its side keys would be those of "a" (keys.c). */
#define RELOCK__WHOLE_TAG_MARK ":tag"

/* Whether relock's side keys can share the lock key's Cluster slot: the
 * key has a hash tag, or holds no '}' (else a braced copy would hash a
 * different part of it). */
int relock__key_slot_safe(const char *key);

/* The fence counter's key for a lock key; -1 when out is too small. */
/* The rules of a lock name (keys.c): RELOCK_OK, or RELOCK_EINVAL said on c. */
relock_status relock__check_name(relock_client *c, const char *name);
int relock__fence_key(const char *lock_key, char *out, size_t len);
/* The break counter's key for a lock key (2.0); -1 when out is too small. */
int relock__breaks_key(const char *lock_key, char *out, size_t len);
/* A whole-tag key's earlier fence counter name (before the mark): 1 and
 * written into out for such a key, 0 for any other, -1 when out is too
 * small. */
int relock__fence_key_before(const char *lock_key, char *out, size_t len);
/* Raises a whole-tag key's fence counter to its earlier one (keys.c). */
relock_status relock__fence_seed(relock_lock *l);
/* The owner metadata's key for a lock key. */
int relock__owner_key(const char *lock_key, char *out, size_t len);

/* owner.c: with owner_info, write (after acquire and extend) or delete
 * (before release) the holder's host, pid and start time beside the lock,
 * with the lease as its TTL, only while the lock key still holds l's value
 * (and fence): a stale handle never touches another holder's record.
 * Informational: failures are ignored. */
void relock__owner_note(relock_lock *l, int held);
/* Checks an owner pid and text (relock_config_set_owner()): RELOCK_OK, or
 * RELOCK_EINVAL recorded in e. */
relock_status relock__owner_check(relock__err *e, long pid, const char *text);
/* The legacy-writer marker's key for a key prefix. */
int relock__marker_key(const char *key_prefix, char *out, size_t len);

/* ------------------------------------------------------------------ values */

typedef struct relock__value {
    relock_value_kind kind;
    long long ts;     /* TIMESTAMP: the integer as stored */
    int ts_digits;    /* its number of digits */
    int has_suffix;   /* TIMESTAMP followed by ":token" */
} relock__value;

/* Classifies a stored value (DESIGN §3 "Classifying a value"). */
void relock__classify(const char *v, size_t len, relock__value *out);
/* For a timestamp of ndigits digits: 0 seconds, 1 milliseconds, -1 neither
 * (too short or too long for a present-day date in either unit). */
int relock__ts_unit_guess(int ndigits);

/* ------------------------------------------------------------------ time, random */

uint64_t relock__mono_ms(void);
long long relock__wall_ms(void);
void relock__sleep_ms(long long ms);
/* 128 random bits as 32 lowercase hex characters plus NUL, never all
 * digits.  0 on success. */
int relock__token(char out[33]);
uint64_t relock__rand64(uint64_t *state);
void relock__sha1_hex(const char *data, size_t len, char out[41]);

/* ------------------------------------------------------------------ connections */

typedef struct relock__conn {
    redisContext *ctx;
    const relock__server *srv;
    /* What the probe learned; valid while ctx is. */
    char version[32];
    int major, minor, patch;
    unsigned caps;
    /* legacy.clock = "server": the server's clock as an offset from our
     * monotonic clock (lease.h). */
    relock__clock_est clock;
    uint64_t last_used; /* monotonic ms of the last command */
    /* Inside WATCH ... EXEC or MULTI ... EXEC (relock__txn_begin): the
     * connection is never replaced, reconnected or redirected; losing it
     * fails every command until relock__txn_end (DESIGN §9). */
    int in_txn;
} relock__conn;

/* ------------------------------------------------------------------ scripts */

enum relock__script_id {
    RELOCK__SCRIPT_DEL_IF_EQ = 0,
    RELOCK__SCRIPT_PEXPIRE_IF_EQ,
    RELOCK__SCRIPT_CAS,
    RELOCK__SCRIPT_TS_ACQUIRE,
    RELOCK__SCRIPT_MODERN_ACQUIRE,
    RELOCK__SCRIPT_MODERN_TAKEOVER,
    RELOCK__SCRIPT_BREAK_IF_EQ,
    RELOCK__SCRIPT_FENCE_RAISE,
    RELOCK__SCRIPT_FENCE_CARRY,
    RELOCK__SCRIPT_OWNER_IF_HELD,
    RELOCK__NSCRIPTS
};

/* ------------------------------------------------------------------ client and lock */

struct relock__algo;

/* The connection a write went out on, for relock__durable_wait(). */
typedef struct relock__wmark {
    redisContext *ctx;
    unsigned long connects;
} relock__wmark;

struct relock_client {
    relock__settings s;
    relock__conn conn;
    relock_mode mode;
    char mode_reason[256];
    const struct relock__algo *algo;
    char sha[RELOCK__NSCRIPTS][41];
    uint64_t rng;
    uint64_t legacy_noted_at; /* monotonic ms of the last marker write */
    redisContext *sub;        /* subscriber connection while waiting, or NULL */
    struct relock__qserver *q; /* quorum: one entry per server, or NULL */
    /* Courtesy after releasing a lock others wait for (lock.c). */
    uint64_t yield_key; /* hash of that lock's key */
    uint64_t yield_until; /* monotonic ms */
    relock__err err;
    /* The server the connection goes to when it is not servers[0]: the
     * master a sentinel named, or the Cluster node a MOVED named.  Its
     * credentials and db are servers[0]'s. */
    relock__server node;
    int sentinel_first; /* the sentinel to ask first: the last that helped */
    /* Redis Cluster's slot map and connection pool, made at the first
     * MOVED when cluster.slot_map is on (cluster.c), or NULL. */
    struct relock__cluster *cl;
    /* Counted for tests and the benchmark: MOVED replies followed, and
     * connections opened (connect, log in, probe). */
    unsigned long moved;
    unsigned long connects;
    /* Run on every connection just opened and logged in (connect.c): the
     * server probe, relock__probe, installed by relock_connect(); routing
     * sits below the drivers the probe runs on, so it calls up only
     * through this. */
    relock_status (*on_connect)(relock_client *c);
    /* relock_scan_node(): the server a scan walks, "host:port". */
    char scan_node[RELOCK__HOST_MAX + 8];
    /* relock_client_replicas_acked(): -1 when the last call sent no WAIT. */
    int replicas_acked;
};

/*
 * What a lock asks of its keeper (background renewal, src/api/renew.c).
 * renew.c sits above the blocking API (its thread calls relock_extend), so
 * lock.c and owner.c do not call it: relock_keep() installs these
 * operations beside l->keeper, and they are called only while l->keeper
 * is set.
 */
typedef struct relock__keep_ops {
    /* Stops the renewal; RELOCK_LOST if the lock was lost meanwhile. */
    relock_status (*end)(relock_lock *l);
    /* The validity of the kept lock, from the renewal thread's view. */
    uint64_t (*valid_until)(const relock_lock *l);
    /* A new owner pid and text for the renewals, and in value the value
     * the last renewal wrote: RELOCK_LOST when the renewals found the
     * lock lost. */
    relock_status (*set_owner)(relock_lock *l, long pid, const char *text,
                               char value[RELOCK__VALUE_MAX]);
    /* After set_owner returned RELOCK_OK, no renewal starts until the
     * owner's record write is done and this is called. */
    void (*owner_done)(relock_lock *l);
} relock__keep_ops;

struct relock_lock {
    relock_client *c;
    /* The three strings live in the same allocation, after the struct:
     * a process holding many locks pays for what their names need. */
    char *name;
    char *key;
    char *fence_key;
    char value[RELOCK__VALUE_MAX];
    long long fence;
    long long ttl_ms;
    uint64_t valid_until; /* monotonic ms; 0 when unknown (adopted) */
    int lost;
    /* Legacy and bridge: how often a legacy GETSET loser's write was found
     * in the key and acted on (DESIGN §3 "GETSET losers"). */
    int loser_writes;
    /* 2.0: the lock's break counter read in the transaction that won it;
     * breaks_known 0 when not read (adopted, or another server). */
    long long breaks;
    int breaks_known;
    int acquired; /* won by this handle (or its keeper's shadow), not adopted */
    /* Set by a busy attempt that met a holder who never announces its
     * release (a legacy value without TTL): the waiter polls it often
     * near its end (src/engine/waitplan.c). */
    int legacy_holder;
    /* An acquire attempt of this handle found the lock held: on 2.0 its
     * next attempts read the key before they write (compat/legacy.c). */
    int looked;
    /* Set by a release: how many waiters its notice reached. */
    int waiters;
    struct relock__keeper *keeper; /* background renewal, or NULL */
    const struct relock__keep_ops *keep_ops; /* with keeper: its operations */
    /* A lock of an asynchronous client (async.c): its operation in flight
     * and its renewal; NULL for the blocking API's locks. */
    struct relock__alock *al;
    /* With al: what relock_lock_free() calls first, installed by the
     * asynchronous client (so the blocking API never calls up into it);
     * 1 when an operation in flight frees the lock when it ends. */
    int (*al_free)(relock_lock *l);
    /* The connection the last attempt or extend wrote on (durable.c). */
    struct relock__wmark wmark;
    /* Owner metadata (owner.c): the pid the record names (0: getpid()),
     * when the lock was won (wall seconds; 0: adopted, the time of each
     * write), and the text (malloc'd, or NULL for none). */
    long owner_pid;
    long long owner_since;
    char *owner_text;
};

/* Fairness after a release that woke waiters (lock.c): the releaser stays
 * away from that lock for a moment.  relock__yield_note() after such a
 * release; relock__yield_ms(): how long an acquire of l waits first. */
void relock__yield_note(relock_lock *l);
long long relock__yield_ms(const relock_lock *l);
/* A new lock handle for NAME (checked as relock_acquire() checks it). */
relock_status relock__lock_new(relock_client *c, const char *name, long long ttl_ms,
                               relock_lock **out);

typedef struct relock__algo {
    const char *name;
    /* One attempt.  RELOCK_BUSY with *hint_ms = the holder's remaining
     * time in ms when known, else -1. */
    relock_status (*attempt)(relock_lock *l, long *hint_ms);
    relock_status (*release)(relock_lock *l);
    relock_status (*extend)(relock_lock *l, long long ttl_ms);
    /* Optional: fills what a lock adopted from its value can know (its
     * validity, from a timestamp). */
    void (*adopt)(relock_lock *l);
} relock__algo;

extern const relock__algo relock__algo_modern;
extern const relock__algo relock__algo_quorum;

/* Several servers (quorum.c): checks the mode and prepares the servers. */
relock_status relock__quorum_setup(relock_client *c);
void relock__quorum_free(relock_client *c);
/* A script's text by id (scripts.c). */
const char *relock__script_source(int id);

/* Records, at most once a second per client, that a value only a legacy
 * client can have written was met (the marker `relock scan` reads).
 * Failures are ignored: the marker informs, it never decides. */
void relock__note_legacy_writer(relock_client *c);

/* The fleet's clock in ms (clock.c): the local wall clock, or with
 * legacy.clock = "server" the server's TIME, estimated from time to time as
 * an offset from the monotonic clock, so that a step of the local wall
 * clock changes no decision.  May send TIME. */
relock_status relock__fleet_ms(relock_client *c, long long *now);

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
void relock__conn_close(relock__conn *conn);
/* Whether ctx, idle since *last_used (which becomes now), was closed or
 * written to by the server meanwhile: then it is not to be reused. */
int relock__ctx_stale(redisContext *ctx, uint64_t *last_used);
/* Connects c's connection to srv (which must outlive it), logs in and
 * probes; on failure the connection stays closed. */
relock_status relock__conn_open(relock_client *c, const relock__server *srv);
/* A fresh blocking context to host:port with the given timeouts, or NULL
 * with the status in *st and "connect to HOST:PORT: reason" in why. */
redisContext *relock__connect_ctx(const char *host, int port, long long connect_ms,
                                  long long command_ms, relock_status *st, char *why,
                                  size_t whylen);
/* Sends AUTH and SELECT as srv says on ctx. */
relock_status relock__conn_login(relock_client *c, redisContext *ctx, const relock__server *srv);
/* Sends the formatted command cmd (len bytes) on c's open connection and
 * reads its reply (transport.c); on failure records it, closes the
 * connection and returns NULL with *sent = 1. */
redisReply *relock__conn_send(relock_client *c, int *sent, const char *name, const char *cmd,
                              size_t len);

/* ------------------------------------------------------------------ sentinel (sentinel.c) */

/* Whether the settings name a sentinel-monitored master (config.c). */
int relock__sentinel_on(const relock__settings *s);
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
/* Probes the server version into conn (DESIGN §2). */
relock_status relock__probe(relock_client *c);

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

/* Computes the scripts' SHA-1 into c->sha. */
void relock__scripts_init(relock_client *c);

/* Runs a script by EVALSHA, falling back to EVAL on NOSCRIPT. */
redisReply *relock__eval(relock_client *c, int *sent, int id, int nkeys, int nargs,
                         const char **args);

/* Records RELOCK_EPROTO for a reply of an unexpected type or an error
 * reply, naming the command. */
relock_status relock__bad_reply(relock_client *c, const char *file, int line, const char *what,
                                const redisReply *r);
#define RELOCK__BAD_REPLY(c, what, r) relock__bad_reply((c), __FILE__, __LINE__, (what), (r))
/* When c's error is a WRONGTYPE reply (RELOCK_EFOREIGN): asks the server
 * with TYPE which type key holds, on this error path only, and rewrites
 * the message as "WHAT: the key KEY on HOST:PORT holds a hash, not a lock;
 * ...".  Leaves any other error, and this one when TYPE fails, as it is.
 * Returns c's status. */
relock_status relock__foreign_type(relock_client *c, const char *what, const char *key);

/* The pub/sub channel on which a release of l's key is announced to
 * waiters (DESIGN §5).  Writes "" and returns 0 when wait.notify is off. */
int relock__notify_channel(const relock_lock *l, char *out, size_t len);

/* The generic waiting loop over c->algo->attempt. */
relock_status relock__wait_acquire(relock_lock *l, long long wait_ms);

/* Mode selection from configuration and probe (DESIGN §3 auto). */
relock_status relock__select_mode(relock_client *c);

/* ------------------------------------------------------------------ durability (durable.c) */

/* Whether durability (WAIT after acquire and extend) is on. */
int relock__durable_on(const relock_client *c);
/* Checks the durability and lock_delay_ms settings against the mode and
 * the connected server: RELOCK_EUNSUPPORTED with the reason on c. */
relock_status relock__durable_check(relock_client *c);
/* Before an operation whose write is to be waited for: makes the
 * connection ready (an idle one replaced now, not between the write and
 * the WAIT) and marks it. */
void relock__durable_mark(relock_client *c, relock__wmark *m);
/*
 * After l's write of op ("acquire", "extend") succeeded: WAIT (or
 * WAITAOF) on the connection marked, so that the count covers the write.
 * RELOCK_OK when durability.replicas acknowledged within timeout_ms;
 * RELOCK_EDURABILITY with the count in the message and in
 * c->replicas_acked when fewer did, or when the connection changed since
 * the mark (the count could not cover the write); RELOCK_EUNSUPPORTED when
 * the server lacks the command; RELOCK_EIO when the connection failed.
 */
relock_status relock__durable_wait(relock_lock *l, const char *op, const relock__wmark *m);

#endif
