/* The leaves every layer uses (prefix relock__, none exported): they call
 * nothing above them, and the handles are opaque here. */
#ifndef RELOCK_BASE_H
#define RELOCK_BASE_H

#include <stdarg.h>
#include <stdint.h>

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
/* Records an error unless this call has one (the first is the most
 * precise); returns st: "return RELOCK__FAIL(...)". */
relock_status relock__err_set(relock__err *e, relock_status st, const char *file, int line,
                              const char *server, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

#define RELOCK__FAIL(errp, st, ...)                                                           \
    relock__err_set((errp), (st), __FILE__, __LINE__, NULL, __VA_ARGS__)
#define RELOCK__FAIL_SRV(errp, st, srv, ...)                                                  \
    relock__err_set((errp), (st), __FILE__, __LINE__, (srv), __VA_ARGS__)
/* Writes a reason into why and returns -1: "return relock__reason(...)". */
int relock__reason(char *why, size_t whylen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

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

/* Sentinel (design.md §9.2). */
#define RELOCK__MAX_SENTINELS 8
#define RELOCK__MASTER_NAME_MAX 256

/* A "host:port" address (sentinels). */
typedef struct relock__addr {
    char host[RELOCK__HOST_MAX];
    int port;
} relock__addr;

/* legacy.peer names at most this many profiles. */
#define RELOCK__PEERS_MAX 8

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
    long long lock_delay_ms; /* modern: the key outlives the lease by this unless released */
    int owner_info;
    long owner_pid;                        /* relock_config_set_owner(); 0: getpid() */
    char owner_text[RELOCK_OWNER_MAX + 1]; /* and its text, or "" */
    struct {
        int unit_ms; /* 0: seconds, 1: milliseconds */
        long expiry_offset;
        long long skew_margin_ms;
        int gc_expire;
        int clock_server;
        int readers;      /* RELOCK__READER_* bits (lease.h): reader_clock + 1 */
        int frac_values;  /* legacy.values: 0 "integer", 1 "fractional" */
        int reader_clock; /* legacy.reader_clock: 0 "whole", 1 "fractional", 2 "both" */
        int peers[RELOCK__PEERS_MAX]; /* legacy.peer: the profiles named, by index */
        int npeers;
        unsigned set; /* RELOCK__SET_* bits: given, so legacy.peer does not override */
    } legacy;
    struct {
        int value_suffix;
    } bridge;
    struct {
        int legacy_clients;
        long long quiet_window_ms;
    } migration;
    /* Sentinel: with a master, every (re)connect asks these for its
     * address; servers[0] then gives only the credentials and db. */
    struct {
        char master[RELOCK__MASTER_NAME_MAX];
        relock__addr addrs[RELOCK__MAX_SENTINELS];
        int naddrs;
    } sentinel;
    /* Redis Cluster: slot_map 1 keeps the slots from CLUSTER SLOTS and a
     * connection per master; 0 follows each MOVED on one connection. */
    struct {
        int slot_map;
    } cluster;
    /* Where a file set mode and servers (0: not a file), for FILE:LINE in
     * a quorum's refusal of the mode. */
    char src_file[256];
    int mode_line, servers_line;
    /* relock_config_set_event_fn(): the callback and its argument. */
    relock_event_fn event_fn;
    void *event_arg;
} relock__settings;

/* A profile of legacy.peer (peers.c): how a family of classic clients
 * writes and reads. */
typedef struct relock__peer {
    const char *name;         /* as legacy.peer names it */
    const char *family;       /* the library, for messages and scan */
    int unit_ms;              /* 0 seconds, 1 milliseconds */
    int frac_values;          /* it writes, and parses, fractions */
    int frac_reader;          /* its clock: 0 whole, 1 fractional (V ends at V·u), 2 both */
    long offset;              /* units it adds to now + timeout */
    const char *key_template; /* its key, "{name}" where the lock's name goes */
    int suffix_fails;         /* its parser fails on "V:token" (bridge.value_suffix) */
} relock__peer;

int relock__peer_count(void);
const relock__peer *relock__peer_at(int i);
/* The index of the profile named name[0..len), or -1. */
int relock__peer_find(const char *name, size_t len);
/* The profiles' names, quoted and separated by commas, into out. */
void relock__peer_names(char *out, size_t len);
/* Fills the legacy settings legacy.peer implies and the configuration
 * does not give; -1 with a reason when what it gives contradicts them. */
int relock__peers_apply(relock__settings *s, char *why, size_t whylen);

/* Settings given explicitly (relock__settings.legacy.set). */
#define RELOCK__SET_UNIT 1u
#define RELOCK__SET_OFFSET 2u
#define RELOCK__SET_VALUES 4u
#define RELOCK__SET_READER 8u
#define RELOCK__SET_PREFIX 16u

struct relock_config {
    relock__settings s;
    relock__err err;
};

void relock__settings_default(relock__settings *s);
/* Parses a whole decimal integer (strtoll, nothing left); 0 on success. */
int relock__parse_ll(const char *v, long long *out);
/* Parse "host:port" (IPv6 hosts in brackets) or a redis:// or unix://
 * URL strictly; 0, or -1 with a reason in why. */
int relock__parse_addr(const char *text, size_t len, relock__addr *a, char *why, size_t whylen);
int relock__parse_url(const char *url, relock__server *srv, char *why, size_t whylen);
/* Whether the settings name a sentinel-monitored master. */
int relock__sentinel_on(const relock__settings *s);

/* ------------------------------------------------------------------ keys */

/* Appended to a lock key (or its braced form) to name its fence counter. */
#define RELOCK__FENCE_SUFFIX " relock:fence"
/* After key_prefix: when a legacy writer was last seen, and when upgraded
 * clients began to watch for them (written once); ms since the epoch. */
#define RELOCK__MARKER_NAME " relock:legacy-seen"
#define RELOCK__WATCH_NAME " relock:watching-since"
/* Appended to a lock key to name the channel its releases are told on. */
#define RELOCK__NOTIFY_SUFFIX " relock:released"
#define RELOCK__KEY_MAX (RELOCK__PREFIX_MAX + RELOCK__NAME_MAX + 32)

/* Appended likewise: the owner metadata beside a lock (owner_info); on
 * servers without WATCH (2.0), how often the lock was broken, so a holder
 * can tell it was taken again with the same timestamp. */
#define RELOCK__OWNER_SUFFIX " relock:owner"
#define RELOCK__BREAKS_SUFFIX " relock:breaks"
/* On servers without WATCH (2.0) a break raises the fence counter by this
 * much, where an attempt raises it by one: the counter's epoch (its value
 * divided by this) counts the breaks, so a holder that knows only its
 * value and fence (a handle adopted with relock_lock_adopt()) can tell
 * that its lock was broken since (compat/legacy.c). */
#define RELOCK__BREAK_EPOCH 4294967296LL
#define RELOCK__BREAK_EPOCH_WORD "4294967296" /* the same, as a command's word */
/* After the suffix for a key that is only a hash tag (keys.c). */
#define RELOCK__WHOLE_TAG_MARK ":tag"

/* Whether relock's side keys can share the lock key's Cluster slot. */
int relock__key_slot_safe(const char *key);

/* The rules of a lock name (keys.c): RELOCK_OK, or RELOCK_EINVAL said on c. */
relock_status relock__check_name(relock_client *c, const char *name);
/* The fence counter's key for a lock key; -1 when out is too small. */
int relock__fence_key(const char *lock_key, char *out, size_t len);
/* The break counter's key for a lock key (2.0); -1 when out is too small. */
int relock__breaks_key(const char *lock_key, char *out, size_t len);
/* A whole-tag key's fence counter name without the mark: 1 and written
 * into out for such a key, 0 for any other, -1 when out is too small. */
int relock__fence_key_before(const char *lock_key, char *out, size_t len);
/* The owner metadata's key for a lock key; the markers' for a prefix. */
int relock__owner_key(const char *lock_key, char *out, size_t len);
int relock__marker_key(const char *key_prefix, char *out, size_t len);
int relock__watch_key(const char *key_prefix, char *out, size_t len);
/* The channel a release of l's key is told on (design.md §7.2); "" and 0
 * when wait.notify is off. */
int relock__notify_channel(const relock_lock *l, char *out, size_t len);

/* ------------------------------------------------------------------ values */

typedef struct relock__value {
    relock_value_kind kind;
    long long ts;     /* TIMESTAMP: the integer as stored */
    int ts_digits;    /* its number of digits */
    int has_suffix;   /* TIMESTAMP followed by ":token" */
    int frac;         /* TIMESTAMP written with a fraction, "1795812032.47337" */
    long long frac_num, frac_den; /* the fraction, frac_num / frac_den (den 1: none);
                                   * beyond nine digits rounded up */
} relock__value;

/* Classifies a stored value (design.md §4.2). */
void relock__classify(const char *v, size_t len, relock__value *out);
/* The value as the lease arithmetic reads it (lease.h). */
void relock__value_stamp(const relock__value *v, relock__stamp *out);
/* For a timestamp of ndigits digits: 0 seconds, 1 milliseconds, -1 neither
 * (too short or too long for a present-day date in either unit). */
int relock__ts_unit_guess(int ndigits);
/* A stored value as a C string in dst (n bytes): cut to fit, a NUL byte
 * written as '?' ("1700000000\0junk" must not read as a timestamp). */
void relock__value_text(char *dst, size_t n, const char *v, size_t len);
/* Whether the stored value v (len bytes) is exactly the string s. */
int relock__value_is(const char *v, size_t len, const char *s);

/* ------------------------------------------------------------------ time, random */

uint64_t relock__mono_ms(void);
long long relock__wall_ms(void);
void relock__sleep_ms(long long ms);
/* 128 random bits as 32 lowercase hex characters plus NUL, never all
 * digits.  0 on success. */
int relock__token(char out[33]);
/* raw as relock__token() writes it; 1 when it holds a letter. */
int relock__token_hex(const unsigned char raw[16], char out[33]);
/* relock__token() from c's store of random bytes, its failure told in
 * c->err (RELOCK_EIO). */
relock_status relock__token_for(relock_client *c, const char *op, const char *name, char out[33]);
/* How many forks made this process (pthread_atfork(), counted in each child). */
unsigned long relock__forks(void);
uint64_t relock__rand64(uint64_t *state);
void relock__sha1_hex(const char *data, size_t len, char out[41]);

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

/* A script's text by id (scripts.c); their SHA-1 into c->sha. */
const char *relock__script_source(int id);
void relock__scripts_init(relock_client *c);

#endif
