/*
 * The simulator's model of a Redis server: strings with expiry times on a
 * virtual clock, transactions (WATCH/MULTI/EXEC), scripts run in Lua 5.1
 * as Redis runs them, pub/sub counts, and a personality per server version
 * that refuses what that version lacked with its own words
 * (docs/design.md §3.4, tests/support/proxy/personality.c).
 *
 * It speaks RESP: a command goes in as its words, the reply comes out as
 * the bytes a real server would send, so hiredis (or its reader) turns it
 * into the redisReply a client reads.  Deterministic: it reads no clock
 * (the time is passed in) and draws no randomness.
 */
#ifndef SIM_MODEL_H
#define SIM_MODEL_H

#include <stddef.h>
#include <stdint.h>

#define MODEL_KEYS 48
#define MODEL_KEY_MAX 200
#define MODEL_VAL_MAX 200
#define MODEL_CONNS 64
#define MODEL_QUEUE 16
#define MODEL_WATCH 8
#define MODEL_ARGS 24
#define MODEL_SCRIPTS 32

#define MODEL_PV(a, b, c) ((unsigned)(a) * 10000u + (unsigned)(b) * 100u + (unsigned)(c))

enum {
    MODEL_NATIVE_SET_IFEQ = 1,
    MODEL_NATIVE_DELIFEQ = 2,
    MODEL_NATIVE_DELEX = 4
};

typedef struct model_personality {
    char name[32];
    unsigned version;  /* MODEL_PV */
    char info[16];     /* redis_version in INFO */
    int lua;           /* EVAL, EVALSHA, SCRIPT exist */
    unsigned native;   /* MODEL_NATIVE_* */
} model_personality;

/* 0 and *out filled for a known name (2.0, 2.2, 2.4, 2.6.0 .. 2.6.11,
 * 2.6.12, 7, nolua, valkey-8.1, valkey-9.0, redis-8.4), else -1. */
int model_personality_parse(const char *name, model_personality *out);
/* The names, for loops over every personality. */
extern const char *const model_personality_names[];

typedef struct model_buf {
    char *p;
    size_t n, cap;
} model_buf;

void model_buf_add(model_buf *b, const void *p, size_t n);
void model_buf_free(model_buf *b);

typedef struct model_key {
    int used;                 /* the slot names a key (it may not exist now) */
    char name[MODEL_KEY_MAX];
    int exists;
    char val[MODEL_VAL_MAX];
    size_t len;
    long long expire_ms;      /* server ms; 0 none (before 2.6: whole seconds) */
    uint64_t ver;             /* bumped by every change: WATCH compares it */
    int author;               /* the client whose write made the value, or -1 */
} model_key;

typedef struct model_cmd {
    int argc;
    char *argv[MODEL_ARGS];
    size_t len[MODEL_ARGS];
} model_cmd;

typedef struct model_conn {
    int open;
    int client;               /* who is on this connection (tag for writes) */
    int in_multi;
    int multi_failed;         /* 2.6.5+: an error while queueing aborts EXEC */
    model_cmd queue[MODEL_QUEUE];
    int nqueue;
    struct {
        int key;
        uint64_t ver;
    } watch[MODEL_WATCH];
    int nwatch;
    int watch_overflow;
    char sub[MODEL_KEY_MAX];  /* the channel subscribed to, or "" */
    model_buf push;           /* messages published to it, not yet read */
} model_conn;

struct model;
/* Called before a write changes (or deletes) key k: by which client, and
 * what the value was and who wrote it.  The simulator's ownership check. */
typedef void (*model_write_fn)(void *arg, struct model *m, int writer, const model_key *before,
                               const char *what);
/* Called when a client reads key k with GET (k NULL: a key never used).
 * The simulator's note of what each client last looked at. */
typedef void (*model_read_fn)(void *arg, struct model *m, int reader, const char *name,
                              const model_key *k);

typedef struct model {
    model_personality p;
    long long now_ms;         /* the server's clock, set by the caller before each command */
    model_key keys[MODEL_KEYS];
    model_conn conns[MODEL_CONNS];
    char scripts[MODEL_SCRIPTS][41]; /* the digests of the scripts it was given */
    int nscripts;
    model_write_fn on_write;
    void *on_write_arg;
    model_read_fn on_read;
    unsigned long commands;   /* executed, for statistics */
    int down;                 /* refusing connections (a restart under way) */
    /* Replicas (all alike): while up, a copy of the keys after every
     * command; WAIT counts them.  Down, the copy stays as it was. */
    int replicas;
    int replica_down;
    model_key rkeys[MODEL_KEYS];
    long long reply_delay_ms; /* set by a command whose reply the server holds back (WAIT) */
} model;

void model_init(model *m, const model_personality *p, long long now_ms);
/* Forgets every key and cached script (a restart without persistence);
 * connections are the caller's to close. */
void model_flush(model *m);
int model_conn_open(model *m, int client);
void model_conn_close(model *m, int c);
/* Runs one command on connection c; its reply's bytes are appended to out. */
void model_exec(model *m, int c, int argc, const char *const *argv, const size_t *len,
                model_buf *out);
/* The key's slot, or NULL when never used; expiry applied first. */
model_key *model_lookup(model *m, const char *name);
/* Remaining ms of a key's expiry, -1 none, -2 absent. */
long long model_pttl(model *m, const char *name);
/* The replicas' copy of a key: its value (NULL when absent there) and its
 * remaining ms as model_pttl counts them. */
const char *model_replica_get(model *m, const char *name, long long *pttl);
/* A replica goes down (its copy stays) or comes back (and catches up). */
void model_replica_set(model *m, int down);

/* Parses one RESP multibulk command at the start of buf (n bytes): returns
 * the bytes used, 0 when incomplete, -1 when malformed.  argv entries
 * point into buf. */
long model_parse_command(const char *buf, size_t n, int *argc, const char **argv, size_t *len,
                         int maxargs);

#endif
