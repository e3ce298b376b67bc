/*
 * One placement of relock-bench (see relock_bench.c): start the pinned
 * redis-servers (one, plus four more for the quorum figure), measure, and
 * print every figure as a "key value" line on stdout for the top process.  Contended figures fork worker processes;
 * the memory figure runs in a fresh process (this program again, with
 * --memory), so that no heap freed by earlier figures hides the growth.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "bench.h"
#include "internal.h" /* the scripts' text: the raw loops send the very same */
#include "relock.h"
#include "testsrv.h"
#include "testutil.h"

/* The names relock derives from a lock key (src/internal.h, src/base/keys.c):
 * the raw loops use the same shapes so both sides send the same bytes. */
#define FENCE_SUFFIX " relock:fence"
#define NOTIFY_SUFFIX " relock:released"
#define FENCE_KEY(k) "{" k "}" FENCE_SUFFIX
#define CHANNEL(k) k NOTIFY_SUFFIX

#define TTL_MS 30000
#define TTL_MS_TEXT "30000"
#define MAX_CYCLES 20000000L /* per sample: far above any real rate */
#define CONT_LOCK "bench:contended"
#define CONT_COUNTER "bench:contended:counter"

/* ==================================================================== */
/* Phase side: processes to stop if we are killed.                      */

/* Servers, the memory process, contending workers, a latency waiter. */
static volatile pid_t g_pids[QUORUM_SERVERS + 2 + MAX_PROCS];

static void track(pid_t pid)
{
    for (size_t i = 0; i < sizeof g_pids / sizeof g_pids[0]; i++)
        if (g_pids[i] == 0) {
            g_pids[i] = pid;
            return;
        }
}

static void untrack(pid_t pid)
{
    for (size_t i = 0; i < sizeof g_pids / sizeof g_pids[0]; i++)
        if (g_pids[i] == pid)
            g_pids[i] = 0;
}

void bench_track(pid_t pid)
{
    track(pid);
}

void bench_untrack(pid_t pid)
{
    untrack(pid);
}

/* The servers' directories, removed if we are killed. */
static char g_srv_dir[QUORUM_SERVERS][128];

static void on_fatal_signal(int sig)
{
    /* Only async-signal-safe calls: kill what we started, by PID, wait for
     * it, and remove the server's directory. */
    for (size_t i = 0; i < sizeof g_pids / sizeof g_pids[0]; i++)
        if (g_pids[i] > 0) {
            kill(g_pids[i], SIGKILL);
            waitpid(g_pids[i], NULL, 0);
        }
    for (int i = 0; i < QUORUM_SERVERS; i++)
        if (g_srv_dir[i][0]) {
            char path[160];
            size_t n = strlen(g_srv_dir[i]);
            memcpy(path, g_srv_dir[i], n);
            memcpy(path + n, "/server.log", sizeof "/server.log");
            unlink(path);
            rmdir(g_srv_dir[i]);
        }
    signal(sig, SIG_DFL);
    raise(sig);
}

static void catch_signals(void (*handler)(int))
{
    signal(SIGTERM, handler);
    signal(SIGINT, handler);
    signal(SIGHUP, handler);
}

/* In a forked child: the default actions, and nothing of the parent's to
 * kill. */
void bench_child_signals(void)
{
    catch_signals(SIG_DFL);
    memset((void *)g_pids, 0, sizeof g_pids);
    memset(g_srv_dir, 0, sizeof g_srv_dir);
}

/* One result line for the top process. */
static void out(const char *key, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out(const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", key);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
}

static int g_nerrors;

static void out_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void out_error(const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char key[32];
    snprintf(key, sizeof key, "error%d", ++g_nerrors);
    for (char *p = msg; *p; p++)
        if (*p == '\n')
            *p = ' ';
    out(key, "%s", msg);
    fprintf(stderr, "relock-bench: %s\n", msg);
}

void bench_out(const char *key, const char *fmt, ...)
{
    char text[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    out(key, "%s", text);
}

void bench_error(const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    out_error("%s", msg);
}

/* Applies mode, the bench's command timeout and settings (name, value
 * pairs, NULL-terminated) to cfg, connects, and frees cfg. */
static relock_client *connect_cfg(relock_config *cfg, const char *mode,
                                  const char *const *settings, char *err, size_t errlen)
{
    relock_client *c = NULL;
    relock_status st = relock_config_set(cfg, "mode", mode);
    /* A figure, not a fault test: a machine busy with other work must
     * slow the bench down, not make it report lost connections. */
    if (st == RELOCK_OK)
        st = relock_config_set(cfg, "command_timeout_ms", "10000");
    for (int i = 0; st == RELOCK_OK && settings && settings[i] && settings[i + 1]; i += 2)
        st = relock_config_set(cfg, settings[i], settings[i + 1]);
    if (st != RELOCK_OK) {
        snprintf(err, errlen, "config: %s", relock_config_error(cfg)->message);
        relock_config_free(cfg);
        return NULL;
    }
    st = relock_connect(cfg, &c);
    relock_config_free(cfg);
    if (st != RELOCK_OK) {
        snprintf(err, errlen, "connect (%s): %s", mode,
                 c ? relock_client_error(c)->message : relock_strerror(st));
        relock_client_free(c);
        return NULL;
    }
    return c;
}

relock_client *bench_connect(int port, const char *mode, const char *const *settings, char *err,
                             size_t errlen)
{
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    relock_config *cfg = relock_config_new();
    if (!cfg) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (relock_config_set_url(cfg, url) != RELOCK_OK) {
        snprintf(err, errlen, "config: %s", relock_config_error(cfg)->message);
        relock_config_free(cfg);
        return NULL;
    }
    return connect_cfg(cfg, mode, settings, err, errlen);
}

static relock_client *connect_client(int port, const char *mode, int fencing, char *err,
                                     size_t errlen)
{
    const char *const settings[] = {"fencing", fencing ? "true" : "false", NULL};
    return bench_connect(port, mode, settings, err, errlen);
}

/* A modern, fenced (default) client for a quorum over the first n of
 * ports: `servers` with n entries, through a configuration file (the only
 * way to list several servers). */
relock_client *bench_connect_quorum(const int *ports, int n, char *err, size_t errlen)
{
    char path[] = "/tmp/relock-bench-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) {
        snprintf(err, errlen, "quorum configuration: %s", strerror(errno));
        return NULL;
    }
    dprintf(fd, "relock = {\n  servers = (");
    for (int i = 0; i < n; i++)
        dprintf(fd, "%s\n    { host = \"127.0.0.1\"; port = %d; }", i ? "," : "", ports[i]);
    dprintf(fd, " );\n};\n");
    close(fd);
    relock_config *cfg = relock_config_new();
    if (!cfg) {
        unlink(path);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    relock_status st = relock_config_load_file(cfg, path);
    unlink(path);
    if (st != RELOCK_OK) {
        snprintf(err, errlen, "quorum configuration: %s", relock_config_error(cfg)->message);
        relock_config_free(cfg);
        return NULL;
    }
    return connect_cfg(cfg, "modern", NULL, err, errlen);
}

/* ==================================================================== */
/* Uncontended cycles on one connection.                                */

enum fig {
    F_PING,
    F_RAW_MODERN,
    F_RL_MODERN,
    F_RAW_FENCED,
    F_RL_FENCED,
    F_RL_Q5, /* next to its baseline, F_RL_FENCED, in the rotation */
    F_RL_Q3,
    F_RAW_LEGACY,
    F_RL_LEGACY,
    F_RAW_BRIDGE,
    F_RL_BRIDGE,
    F_RAW_SETNX,
    NFIG
};

static const char *const fig_key[NFIG] = {
    "ping",       "raw_modern", "rl_modern",  "raw_fenced", "rl_fenced",
    "rl_quorum5", "rl_quorum3", "raw_legacy", "rl_legacy",  "raw_bridge",
    "rl_bridge",  "raw_setnx_del",
};

/* The relock clients: one per single-server mode (one connection each),
 * then the quorum clients (one connection per server). */
enum { RL_MODERN, RL_FENCED, RL_LEGACY, RL_BRIDGE, NRL_SINGLE, RL_Q5 = NRL_SINGLE, RL_Q3, NRL };

typedef struct bench {
    int port;
    redisContext *rc;        /* the raw loops' connection */
    relock_client *rl[NRL];  /* NULL: that figure is not measured */
    int nq;                  /* servers running: the phase's own and the extra ones */
    int qport[QUORUM_SERVERS];
    redisContext *qrc[QUORUM_SERVERS]; /* to count their commands; [0] is rc */
    char sha_del[41], sha_cas[41], sha_tsacq[41], sha_macq[41];
    uint64_t rng;
    char err[400];
} bench;

static redisReply *cmdv(bench *b, int argc, const char **argv)
{
    size_t len[16];
    for (int i = 0; i < argc; i++)
        len[i] = strlen(argv[i]);
    redisReply *r = redisCommandArgv(b->rc, argc, argv, len);
    if (!r)
        snprintf(b->err, sizeof b->err, "%s: %s", argv[0], b->rc->errstr);
    return r;
}

/* Checks a reply and frees it: 0 when it is as expected. */
static int want_status(bench *b, redisReply *r, const char *what)
{
    if (!r)
        return -1;
    int ok = r->type == REDIS_REPLY_STATUS;
    if (!ok)
        snprintf(b->err, sizeof b->err, "%s: unexpected reply type %d %s", what, r->type,
                 r->type == REDIS_REPLY_ERROR ? r->str : "");
    freeReplyObject(r);
    return ok ? 0 : -1;
}

static int want_int(bench *b, redisReply *r, long long v, const char *what)
{
    if (!r)
        return -1;
    int ok = r->type == REDIS_REPLY_INTEGER && r->integer == v;
    if (!ok)
        snprintf(b->err, sizeof b->err, "%s: expected %lld, got type %d %s", what, v, r->type,
                 r->type == REDIS_REPLY_ERROR ? r->str : "");
    freeReplyObject(r);
    return ok ? 0 : -1;
}

/* A script reply {1, n}: done; *second = n. */
static int want_done(bench *b, redisReply *r, const char *what, long long *second)
{
    if (!r)
        return -1;
    int ok = r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
             r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 1;
    if (ok && second)
        *second = r->elements > 1 && r->element[1]->type == REDIS_REPLY_INTEGER
                      ? r->element[1]->integer
                      : 0;
    if (!ok)
        snprintf(b->err, sizeof b->err, "%s: not done (reply type %d %s)", what, r->type,
                 r->type == REDIS_REPLY_ERROR ? r->str : "");
    freeReplyObject(r);
    return ok ? 0 : -1;
}

static int cyc_ping(bench *b)
{
    const char *argv[] = {"PING"};
    return want_status(b, cmdv(b, 1, argv), "PING");
}

/* Modern without fencing: SET NX PX, then compare-and-delete by EVALSHA
 * (src/algo/modern.c attempt_plain, modern_release). */
#define K_MODERN "bench:raw:modern"
static int cyc_raw_modern(bench *b)
{
    char tok[33];
    bu_token(&b->rng, tok);
    const char *set[] = {"SET", K_MODERN, tok, "NX", "PX", TTL_MS_TEXT};
    if (want_status(b, cmdv(b, 6, set), "SET NX PX") != 0)
        return -1;
    const char *del[] = {"EVALSHA", b->sha_del, "1", K_MODERN, tok, CHANNEL(K_MODERN)};
    return want_int(b, cmdv(b, 6, del), 1, "EVALSHA compare-and-delete");
}

/* Modern with fencing: the acquire script (SET NX PX + INCR), then
 * compare-and-delete (src/algo/modern.c attempt_fenced, modern_release). */
#define K_FENCED "bench:raw:fenced"
static int cyc_raw_fenced(bench *b)
{
    char tok[33];
    bu_token(&b->rng, tok);
    const char *acq[] = {"EVALSHA", b->sha_macq, "2", K_FENCED, FENCE_KEY(K_FENCED), tok,
                         TTL_MS_TEXT};
    if (want_done(b, cmdv(b, 7, acq), "EVALSHA acquire", NULL) != 0)
        return -1;
    const char *del[] = {"EVALSHA", b->sha_del, "1", K_FENCED, tok, CHANNEL(K_FENCED)};
    return want_int(b, cmdv(b, 6, del), 1, "EVALSHA compare-and-delete");
}

/* Legacy (and bridge, with a PEXPIRE and the TTL check) on a server with
 * EVAL: the SETNX script with the fence, then the compare-and-delete of
 * value and fence (compat/legacy.c attempt_eval, atomic_update/cas_eval). */
#define K_LEGACY "bench:raw:legacy"
#define K_BRIDGE "bench:raw:bridge"
static int cyc_raw_ts(bench *b, int bridge)
{
    long long now = bu_wall_ms();
    long long ts = now / 1000 + (TTL_MS + 999) / 1000 + 1; /* seconds, expiry_offset 1 */
    long long px = bridge ? ts * 1000 + 500 - now : 0;
    char v[32], pxs[32], fence[32];
    snprintf(v, sizeof v, "%lld", ts);
    snprintf(pxs, sizeof pxs, "%lld", bridge && px < 1 ? 1 : px);
    const char *key = bridge ? K_BRIDGE : K_LEGACY;
    const char *fkey = bridge ? FENCE_KEY(K_BRIDGE) : FENCE_KEY(K_LEGACY);
    const char *chan = bridge ? CHANNEL(K_BRIDGE) : CHANNEL(K_LEGACY);
    const char *acq[] = {"EVALSHA", b->sha_tsacq, "2", key, fkey, v, pxs, "0", "1"};
    long long f = 0;
    if (want_done(b, cmdv(b, 9, acq), "EVALSHA SETNX script", &f) != 0)
        return -1;
    snprintf(fence, sizeof fence, "%lld", f);
    const char *del[] = {"EVALSHA", b->sha_cas, "2", key, fkey, v, fence, bridge ? "1" : "0",
                         "", "0", "0", "0", chan};
    return want_done(b, cmdv(b, 13, del), "EVALSHA compare-and-delete", NULL);
}

/* The classic pair, for reference: what a legacy client that neither
 * fences nor checks ownership on release sends. */
#define K_SETNX "bench:raw:setnx"
static int cyc_raw_setnx(bench *b)
{
    char v[32];
    snprintf(v, sizeof v, "%lld", bu_wall_ms() / 1000 + (TTL_MS + 999) / 1000 + 1);
    const char *set[] = {"SETNX", K_SETNX, v};
    if (want_int(b, cmdv(b, 3, set), 1, "SETNX") != 0)
        return -1;
    const char *del[] = {"DEL", K_SETNX};
    return want_int(b, cmdv(b, 2, del), 1, "DEL");
}

static int cyc_relock(bench *b, int which, const char *name)
{
    relock_client *c = b->rl[which];
    relock_lock *l = NULL;
    relock_status st = relock_try_acquire(c, name, TTL_MS, &l);
    if (st != RELOCK_OK) {
        snprintf(b->err, sizeof b->err, "relock acquire %s: %s", name,
                 relock_client_error(c)->message);
        return -1;
    }
    st = relock_release(l);
    relock_lock_free(l);
    if (st != RELOCK_OK) {
        snprintf(b->err, sizeof b->err, "relock release %s: %s", name,
                 relock_client_error(c)->message);
        return -1;
    }
    return 0;
}

static int cycle(bench *b, int fig)
{
    switch (fig) {
    case F_PING:
        return cyc_ping(b);
    case F_RAW_MODERN:
        return cyc_raw_modern(b);
    case F_RL_MODERN:
        return cyc_relock(b, RL_MODERN, "bench:rl:modern");
    case F_RAW_FENCED:
        return cyc_raw_fenced(b);
    case F_RL_FENCED:
        return cyc_relock(b, RL_FENCED, "bench:rl:fenced");
    case F_RL_Q5:
        return cyc_relock(b, RL_Q5, "bench:rl:quorum5");
    case F_RL_Q3:
        return cyc_relock(b, RL_Q3, "bench:rl:quorum3");
    case F_RAW_LEGACY:
        return cyc_raw_ts(b, 0);
    case F_RL_LEGACY:
        return cyc_relock(b, RL_LEGACY, "bench:rl:legacy");
    case F_RAW_BRIDGE:
        return cyc_raw_ts(b, 1);
    case F_RL_BRIDGE:
        return cyc_relock(b, RL_BRIDGE, "bench:rl:bridge");
    case F_RAW_SETNX:
        return cyc_raw_setnx(b);
    }
    return -1;
}

/* What one figure did during a sample. */
typedef struct acc {
    long cycles;
    uint64_t ns;     /* wall time spent in its slices */
    uint64_t cpu_ns; /* this process's CPU time (user + system) in them */
} acc;

static uint64_t cpu_ns(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * 1000000000u +
           ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000u;
}

/* Runs fig for one slice of ms, adding to a; -1 on an error (b->err). */
static int run_slice(bench *b, int fig, long ms, acc *a)
{
    uint64_t c0 = cpu_ns();
    uint64_t t0 = bu_now_ns(), end = t0 + (uint64_t)ms * 1000000u, t;
    long n = 0;
    do {
        if (cycle(b, fig) != 0)
            return -1;
        n++;
        t = bu_now_ns();
    } while (t < end && n < MAX_CYCLES);
    a->cpu_ns += cpu_ns() - c0;
    a->cycles += n;
    a->ns += t - t0;
    return 0;
}

/*
 * Checks that the raw loops run relock's own scripts: on an empty script
 * cache, one relock cycle per mode makes the server cache exactly the
 * texts the library sent; the server then tells whether each of our
 * copies (by its SHA-1, computed by the server's redis.sha1hex) is among
 * them.  Then loads the copies for the raw loops.
 */
static int scripts_setup(bench *b)
{
    redisReply *r = redisCommand(b->rc, "SCRIPT FLUSH");
    if (want_status(b, r, "SCRIPT FLUSH") != 0)
        return -1;
    static const int single[] = {F_RL_MODERN, F_RL_FENCED, F_RL_LEGACY, F_RL_BRIDGE};
    for (size_t i = 0; i < sizeof single / sizeof single[0]; i++)
        if (cycle(b, single[i]) != 0)
            return -1;
    const struct {
        const char *name, *text;
    } copies[] = {
        {"compare-and-delete (DEL_IF_EQ)", relock__script_source(RELOCK__SCRIPT_DEL_IF_EQ)},
        {"compare-and-set (CAS)", relock__script_source(RELOCK__SCRIPT_CAS)},
        {"SETNX script (TS_ACQUIRE)", relock__script_source(RELOCK__SCRIPT_TS_ACQUIRE)},
        {"modern acquire (MODERN_ACQUIRE)", relock__script_source(RELOCK__SCRIPT_MODERN_ACQUIRE)},
    };
    char *shas[] = {b->sha_del, b->sha_cas, b->sha_tsacq, b->sha_macq};
    int matched = 0;
    char differ[300] = "";
    for (int i = 0; i < 4; i++) {
        r = redisCommand(b->rc, "EVAL %s 0 %s", "return redis.sha1hex(ARGV[1])", copies[i].text);
        if (!r || r->type != REDIS_REPLY_STRING || r->len != 40) {
            snprintf(b->err, sizeof b->err, "redis.sha1hex failed");
            if (r)
                freeReplyObject(r);
            return -1;
        }
        char sha[41];
        memcpy(sha, r->str, 41);
        freeReplyObject(r);
        r = redisCommand(b->rc, "SCRIPT EXISTS %s", sha);
        int exists = r && r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
                     r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 1;
        if (r)
            freeReplyObject(r);
        if (exists) {
            matched++;
        } else {
            size_t used = strlen(differ);
            snprintf(differ + used, sizeof differ - used, "%s%s", used ? ", " : "",
                     copies[i].name);
        }
        r = redisCommand(b->rc, "SCRIPT LOAD %s", copies[i].text);
        if (!r || r->type != REDIS_REPLY_STRING || r->len != 40) {
            snprintf(b->err, sizeof b->err, "SCRIPT LOAD failed");
            if (r)
                freeReplyObject(r);
            return -1;
        }
        memcpy(shas[i], r->str, 41);
        freeReplyObject(r);
    }
    out("scripts_matched", "%d", matched);
    out("scripts_total", "4");
    if (matched != 4)
        out("scripts_differ", "%s", differ);
    return 0;
}

/* A counter of a server's INFO stats ("total_commands_processed"), or
 * -1. */
static long long ctx_stat(redisContext *rc, const char *name)
{
    if (!rc)
        return -1;
    redisReply *r = redisCommand(rc, "INFO stats");
    long long n = -1;
    if (r && r->type == REDIS_REPLY_STRING) {
        const char *p = strstr(r->str, name);
        if (p && p[strlen(name)] == ':')
            n = atoll(p + strlen(name) + 1);
    }
    if (r)
        freeReplyObject(r);
    return n;
}

/* The same of the phase's own server. */
static long long server_stat(bench *b, const char *name)
{
    return ctx_stat(b->rc, name);
}

static long long total_commands(bench *b)
{
    return server_stat(b, "total_commands_processed");
}

/* How many servers a figure uses (the quorum figures: several). */
static int fig_servers(int fig)
{
    return fig == F_RL_Q5 ? QUORUM_SERVERS : fig == F_RL_Q3 ? 3 : 1;
}

/* Whether a figure is measured: the quorum figures need their servers. */
static int fig_on(const bench *b, int fig)
{
    return fig == F_RL_Q5 ? b->rl[RL_Q5] != NULL : fig == F_RL_Q3 ? b->rl[RL_Q3] != NULL : 1;
}

/* Commands run so far by all the servers fig uses (their sum), or -1. */
static long long fig_commands(bench *b, int fig)
{
    long long sum = 0;
    for (int i = 0; i < fig_servers(fig); i++) {
        long long n = ctx_stat(b->qrc[i], "total_commands_processed");
        if (n < 0)
            return -1;
        sum += n;
    }
    return sum;
}

/* A figure failed: -1 to stop, or 0 when it was a quorum figure, which
 * is then dropped (reported, not measured) while the others go on. */
static int fig_failed(bench *b, int fig, const char *when)
{
    out_error("%s%s: %s", fig_key[fig], when, b->err);
    if (fig != F_RL_Q5 && fig != F_RL_Q3)
        return -1;
    int which = fig == F_RL_Q5 ? RL_Q5 : RL_Q3;
    relock_client_free(b->rl[which]);
    b->rl[which] = NULL;
    return 0;
}

static int uncontended(bench *b)
{
    if (scripts_setup(b) != 0) {
        out_error("script setup: %s", b->err);
        return -1;
    }
    /* Warm up every loop (connections, caches, CPU frequency). */
    for (int fig = 0; fig < NFIG; fig++)
        for (int i = 0; i < 200 && fig_on(b, fig); i++)
            if (cycle(b, fig) != 0 && fig_failed(b, fig, " warm-up") != 0)
                return -1;
    /* Commands the server runs per cycle (those a script calls count too):
     * equal counts for relock and its raw loop show that relock adds no
     * round trip and no server work, whatever the noise on the machine.
     * For the quorum figures: the sum over their servers. */
    for (int fig = 0; fig < NFIG; fig++) {
        enum { N = 500 };
        if (!fig_on(b, fig))
            continue;
        long long before = fig_commands(b, fig);
        int bad = 0;
        for (int i = 0; i < N && !bad; i++)
            if (cycle(b, fig) != 0) {
                if (fig_failed(b, fig, "") != 0)
                    return -1;
                bad = 1;
            }
        long long after = fig_commands(b, fig);
        if (!bad && before >= 0 && after >= 0) {
            char key[48];
            snprintf(key, sizeof key, "%s_cmds", fig_key[fig]);
            /* less the first INFO on each server */
            out(key, "%.2f", (double)(after - before - fig_servers(fig)) / N);
        }
    }
    double samples[NFIG][MAX_REPS];
    acc total[NFIG];
    memset(total, 0, sizeof total);
    long slices = opt.sample_ms / SLICE_MS > 0 ? opt.sample_ms / SLICE_MS : 1;
    long slice_ms = opt.sample_ms / slices;
    /* The rate of every slice, for paired ratios. */
    size_t nslices = (size_t)slices * (size_t)opt.reps;
    double *slice_rate = calloc(NFIG * nslices, sizeof *slice_rate);
    if (!slice_rate) {
        out_error("out of memory");
        return -1;
    }
    /* Each sample is cut into short slices that take turns between the
     * figures, so that the load of anything else on the machine falls on
     * relock and its raw loop alike. */
    for (int rep = 0; rep < opt.reps; rep++) {
        fprintf(stderr, "relock-bench [%s]: uncontended, round %d/%d\n", opt.phase, rep + 1,
                opt.reps);
        acc a[NFIG];
        memset(a, 0, sizeof a);
        for (long k = 0; k < slices; k++) {
            /* Forwards, then backwards: neither side of a pair always
             * runs first. */
            for (int i = 0; i < NFIG; i++) {
                int fig = k % 2 ? NFIG - 1 - i : i;
                acc one = {0, 0, 0};
                if (!fig_on(b, fig))
                    continue;
                if (run_slice(b, fig, slice_ms, &one) != 0) {
                    if (fig_failed(b, fig, "") == 0)
                        continue;
                    free(slice_rate);
                    return -1;
                }
                a[fig].cycles += one.cycles;
                a[fig].ns += one.ns;
                a[fig].cpu_ns += one.cpu_ns;
                slice_rate[(size_t)fig * nslices + (size_t)rep * (size_t)slices + (size_t)k] =
                    (double)one.cycles / ((double)one.ns / 1e9);
            }
        }
        for (int fig = 0; fig < NFIG; fig++) {
            samples[fig][rep] = (double)a[fig].cycles / ((double)a[fig].ns / 1e9);
            total[fig].cycles += a[fig].cycles;
            total[fig].ns += a[fig].ns;
            total[fig].cpu_ns += a[fig].cpu_ns;
        }
    }
    for (int fig = 0; fig < NFIG; fig++) {
        char list[200] = "";
        if (!fig_on(b, fig))
            continue;
        for (int rep = 0; rep < opt.reps; rep++) {
            size_t used = strlen(list);
            snprintf(list + used, sizeof list - used, "%s%.0f", rep ? "," : "", samples[fig][rep]);
        }
        double med = bu_median(samples[fig], opt.reps);
        if (fig == F_PING) {
            out("ping_us", "%.2f", 1e6 / med);
            out("ping_rate", "%.1f", med);
        } else {
            out(fig_key[fig], "%.1f", med);
        }
        char key[48];
        snprintf(key, sizeof key, "%s_samples", fig_key[fig]);
        out(key, "%s", list);
        snprintf(key, sizeof key, "%s_cpu_us", fig_key[fig]);
        out(key, "%.2f", (double)total[fig].cpu_ns / 1000.0 / (double)total[fig].cycles);
    }
    /* Ratios of relock to its raw loop, slice by slice (the two ran next
     * to each other), and their median: robust against other load. */
    static const struct {
        const char *key;
        int fig, base;
    } pairs[] = {
        {"rl_modern_pratio", F_RL_MODERN, F_RAW_MODERN},
        {"rl_fenced_pratio", F_RL_FENCED, F_RAW_FENCED},
        {"rl_legacy_pratio", F_RL_LEGACY, F_RAW_LEGACY},
        {"rl_bridge_pratio", F_RL_BRIDGE, F_RAW_BRIDGE},
        {"rl_legacy_setnx_pratio", F_RL_LEGACY, F_RAW_SETNX},
    };
    double *ratios = calloc(nslices, sizeof *ratios);
    for (size_t p = 0; ratios && p < sizeof pairs / sizeof pairs[0]; p++) {
        for (size_t k = 0; k < nslices; k++)
            ratios[k] = slice_rate[(size_t)pairs[p].fig * nslices + k] /
                        slice_rate[(size_t)pairs[p].base * nslices + k];
        out(pairs[p].key, "%.4f", bu_median(ratios, (int)nslices));
    }
    /* Quorum: the latency with several servers over the latency with one
     * (the fenced single-server client: the same acquire and release
     * scripts), slice by slice: the inverse of the rate ratio. */
    static const struct {
        const char *key;
        int fig;
    } qpairs[] = {{"rl_quorum5_lratio", F_RL_Q5}, {"rl_quorum3_lratio", F_RL_Q3}};
    for (size_t p = 0; ratios && p < sizeof qpairs / sizeof qpairs[0]; p++) {
        if (!fig_on(b, qpairs[p].fig))
            continue;
        for (size_t k = 0; k < nslices; k++)
            ratios[k] = slice_rate[(size_t)F_RL_FENCED * nslices + k] /
                        slice_rate[(size_t)qpairs[p].fig * nslices + k];
        out(qpairs[p].key, "%.4f", bu_median(ratios, (int)nslices));
    }
    free(ratios);
    free(slice_rate);
    return 0;
}

/* ==================================================================== */
/* Contended: N processes, read-modify-write sections under one lock.  */

static void write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        p += n;
        len -= (size_t)n;
    }
}

static void worker_report(int fd, int idx, long count, const char *err)
{
    char line[400];
    int n = snprintf(line, sizeof line, "%d %ld %llu %s\n", idx, count,
                     (unsigned long long)bu_now_ns(), err);
    if (n > 0 && (size_t)n < PIPE_BUF)
        write_all(fd, line, (size_t)n);
    else
        write_all(fd, "-1 0 0 report too long\n", 23);
}

/* A worker process: never returns. */
static void worker(int idx, int port, int ready_fd, int go_fd, int res_fd, long ms)
{
    char err[300] = "";
    long count = 0;
    relock_client *c = connect_client(port, "modern", 1, err, sizeof err);
    struct timeval tv = {10, 0};
    redisContext *rc = redisConnectWithTimeout("127.0.0.1", port, tv);
    int ok = c && rc && !rc->err;
    if (ok)
        redisSetTimeout(rc, tv);
    else if (!err[0])
        snprintf(err, sizeof err, "counter connection: %s", rc ? rc->errstr : "no memory");
    write_all(ready_fd, ok ? "r" : "e", 1);
    uint64_t start = 0;
    if (!ok || read(go_fd, &start, sizeof start) != (ssize_t)sizeof start) {
        worker_report(res_fd, idx, 0, err[0] ? err : "no start signal");
        _exit(1);
    }
    bu_sleep_until_ns(start);
    uint64_t end = start + (uint64_t)ms * 1000000u;
    while (count < MAX_CYCLES) {
        uint64_t now = bu_now_ns();
        if (now >= end)
            break;
        long wait = (long)((end - now + 999999u) / 1000000u);
        relock_lock *l = NULL;
        relock_status st = relock_acquire(c, CONT_LOCK, TTL_MS, wait, &l);
        if (st == RELOCK_TIMEOUT)
            break; /* the sample's time is up */
        if (st != RELOCK_OK) {
            snprintf(err, sizeof err, "acquire: %s", relock_client_error(c)->message);
            break;
        }
        /* The section: GET, +1, SET, as the lost-update experiment. */
        redisReply *r = redisCommand(rc, "GET %s", CONT_COUNTER);
        long long v = r && r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
        int good = r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_NIL);
        if (r)
            freeReplyObject(r);
        if (good) {
            r = redisCommand(rc, "SET %s %lld", CONT_COUNTER, v + 1);
            good = r && r->type == REDIS_REPLY_STATUS;
            if (r)
                freeReplyObject(r);
        }
        st = relock_release(l);
        relock_lock_free(l);
        if (!good) {
            snprintf(err, sizeof err, "counter GET/SET failed");
            break;
        }
        if (st != RELOCK_OK) {
            snprintf(err, sizeof err, "release: %s", relock_client_error(c)->message);
            break;
        }
        count++;
    }
    worker_report(res_fd, idx, count, err);
    _exit(err[0] ? 1 : 0);
}

typedef struct cres {
    double rate;             /* sections per second, all workers */
    long long conns;         /* connections the server accepted meanwhile */
    long long cmds;          /* commands it ran meanwhile (script calls included) */
    long counts[MAX_PROCS];
    long total;
    long long counter;       /* the counter's final value */
    int exact;               /* counter == total */
} cres;

static int contended_once(bench *b, int nproc, cres *res, char *err, size_t errlen)
{
    memset(res, 0, sizeof *res);
    redisReply *r = redisCommand(b->rc, "DEL %s %s", CONT_COUNTER, CONT_LOCK);
    if (r)
        freeReplyObject(r);
    int ready[2], go[2], result[2];
    if (pipe(ready) != 0 || pipe(go) != 0 || pipe(result) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pids[MAX_PROCS] = {0};
    for (int i = 0; i < nproc; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            snprintf(err, errlen, "fork: %s", strerror(errno));
            break;
        }
        if (pid == 0) {
            catch_signals(SIG_DFL);
            memset((void *)g_pids, 0, sizeof g_pids);
            close(ready[0]);
            close(go[1]);
            close(result[0]);
            worker(i, b->port, ready[1], go[0], result[1], opt.sample_ms);
        }
        pids[i] = pid;
        track(pid);
    }
    close(ready[1]);
    close(go[0]);
    close(result[1]);
    int rc = pids[nproc - 1] ? 0 : -1;
    long long conns0 = -1, cmds0 = -1;
    /* All connected (bounded), then one common start time. */
    uint64_t deadline = bu_now_ns() + 10000000000u;
    for (int got = 0; rc == 0 && got < nproc;) {
        char ch[MAX_PROCS];
        int n = bu_read_deadline(ready[0], ch, (size_t)(nproc - got), deadline);
        if (n <= 0) {
            snprintf(err, errlen, "workers did not get ready within 10 s");
            rc = -1;
            break;
        }
        for (int i = 0; i < n; i++)
            if (ch[i] != 'r')
                rc = -1;
        got += n;
    }
    if (rc == 0) {
        conns0 = server_stat(b, "total_connections_received");
        cmds0 = total_commands(b);
    }
    uint64_t start = bu_now_ns() + 20000000u;
    for (int i = 0; i < nproc; i++)
        write_all(go[1], &start, sizeof start); /* a worker that failed ignores it */
    close(go[1]);
    char text[4096] = "";
    size_t used = 0;
    int lines = 0;
    deadline = start + (uint64_t)opt.sample_ms * 1000000u + 20000000000u;
    while (lines < nproc && used < sizeof text - 1) {
        int n = bu_read_deadline(result[0], text + used, sizeof text - 1 - used, deadline);
        if (n <= 0)
            break;
        for (int i = 0; i < n; i++)
            lines += text[used + (size_t)i] == '\n';
        used += (size_t)n;
        text[used] = '\0';
    }
    close(ready[0]);
    close(result[0]);
    for (int i = 0; i < nproc; i++)
        if (pids[i] > 0) {
            tu_wait_child(pids[i], 5000);
            untrack(pids[i]);
        }
    if (lines < nproc && rc == 0) {
        snprintf(err, errlen, "only %d of %d workers reported in time", lines, nproc);
        rc = -1;
    }
    uint64_t last = start;
    for (char *line = text; *line;) {
        int idx;
        long count;
        unsigned long long at;
        int consumed = 0;
        if (sscanf(line, "%d %ld %llu %n", &idx, &count, &at, &consumed) >= 3 && idx >= 0 &&
            idx < nproc) {
            res->counts[idx] = count;
            res->total += count;
            if (at > last)
                last = at;
            char *eol = strchr(line, '\n');
            if (eol && line + consumed < eol) {
                snprintf(err, errlen, "worker %d: %.*s", idx, (int)(eol - line - consumed),
                         line + consumed);
                rc = -1;
            }
        }
        char *eol = strchr(line, '\n');
        line = eol ? eol + 1 : line + strlen(line);
    }
    long long conns1 = server_stat(b, "total_connections_received");
    long long cmds1 = total_commands(b);
    res->conns = conns0 >= 0 && conns1 >= 0 ? conns1 - conns0 : -1;
    res->cmds = cmds0 >= 0 && cmds1 >= 0 ? cmds1 - cmds0 - 1 : -1;
    r = redisCommand(b->rc, "GET %s", CONT_COUNTER);
    res->counter = r && r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
    if (r)
        freeReplyObject(r);
    res->exact = res->counter == res->total;
    res->rate = last > start ? (double)res->total / ((double)(last - start) / 1e9) : 0;
    return rc;
}

/* What the rounds of one process count gathered. */
typedef struct cstat {
    double rates[MAX_REPS];
    int rounds, failed, all_exact;
    double min_share;
    char shares[300], counts[300];
    long long conns, cmds, sections;
} cstat;

static void contended(bench *b)
{
    enum { NK = 3 };
    static const int nprocs[NK] = {1, 2, 4};
    cstat st[NK];
    memset(st, 0, sizeof st);
    for (int k = 0; k < NK; k++) {
        st[k].all_exact = 1;
        st[k].min_share = 1;
    }
    /* Rounds, each process count once per round (alternating the order),
     * so that a ratio to the 1-process rate compares neighbours in time. */
    for (int rep = 0; rep < opt.reps; rep++) {
        for (int j = 0; j < NK; j++) {
            int k = rep % 2 ? NK - 1 - j : j;
            int n = nprocs[k];
            cstat *c = &st[k];
            if (c->failed)
                continue;
            fprintf(stderr, "relock-bench [%s]: contended, %d process%s, round %d/%d\n",
                    opt.phase, n, n > 1 ? "es" : "", rep + 1, opt.reps);
            cres res;
            char err[400] = "";
            if (contended_once(b, n, &res, err, sizeof err) != 0) {
                out_error("contended %d: %s", n, err);
                c->failed = 1;
                continue;
            }
            c->rates[c->rounds++] = res.rate;
            c->all_exact &= res.exact;
            c->conns += res.conns;
            c->cmds += res.cmds;
            c->sections += res.total;
            size_t su = strlen(c->shares), cu = strlen(c->counts);
            snprintf(c->shares + su, sizeof c->shares - su, "%s", rep ? "; " : "");
            snprintf(c->counts + cu, sizeof c->counts - cu, "%s%ld=%lld", rep ? "; " : "",
                     res.total, res.counter);
            for (int i = 0; i < n; i++) {
                double share = res.total ? (double)res.counts[i] / (double)res.total : 0;
                if (share < c->min_share)
                    c->min_share = share;
                su = strlen(c->shares);
                snprintf(c->shares + su, sizeof c->shares - su, "%s%.0f", i ? "/" : "",
                         share * 100);
            }
        }
    }
    for (int k = 0; k < NK; k++) {
        int n = nprocs[k];
        cstat *c = &st[k];
        if (c->failed)
            continue;
        char key[32];
        if (k > 0 && !st[0].failed) {
            /* Paired with the 1-process rate of the same round. */
            double ratios[MAX_REPS];
            for (int i = 0; i < c->rounds; i++)
                ratios[i] = c->rates[i] / st[0].rates[i];
            snprintf(key, sizeof key, "cont%d_pratio", n);
            out(key, "%.4f", bu_median(ratios, c->rounds));
        }
        char list[200] = "";
        for (int i = 0; i < c->rounds; i++) {
            size_t used = strlen(list);
            snprintf(list + used, sizeof list - used, "%s%.0f", i ? "," : "", c->rates[i]);
        }
        snprintf(key, sizeof key, "cont%d_samples", n);
        out(key, "%s", list);
        snprintf(key, sizeof key, "cont%d", n);
        out(key, "%.1f", bu_median(c->rates, c->rounds));
        snprintf(key, sizeof key, "cont%d_exact", n);
        out(key, "%d", c->all_exact);
        snprintf(key, sizeof key, "cont%d_counts", n);
        out(key, "%s", c->counts); /* sections=counter, per round */
        snprintf(key, sizeof key, "cont%d_shares", n);
        out(key, "%s", c->shares); /* percent per worker, per round */
        snprintf(key, sizeof key, "cont%d_minshare", n);
        out(key, "%.4f", c->min_share);
        if (c->sections > 0) {
            snprintf(key, sizeof key, "cont%d_conns", n);
            out(key, "%.3f", (double)c->conns / (double)c->sections);
            snprintf(key, sizeof key, "cont%d_cmds", n);
            out(key, "%.2f", (double)c->cmds / (double)c->sections);
        }
    }
}

/* ==================================================================== */
/* Memory: a fresh process (so that no heap freed by earlier figures can
 * hide the growth) holds MEM_LOCKS locks.                              */

int bench_run_memory(int port)
{
    char err[300] = "";
    g_nerrors = 50; /* error keys of their own, beside the phase's */
    relock_client *c = connect_client(port, "modern", 1, err, sizeof err);
    if (!c) {
        out_error("memory: %s", err);
        return 1;
    }
    relock_lock **locks = calloc(MEM_LOCKS, sizeof *locks);
    if (!locks) {
        out_error("memory: out of memory");
        return 1;
    }
    memset(locks, 0xff, MEM_LOCKS * sizeof *locks); /* touch: not counted below */
    memset(locks, 0, MEM_LOCKS * sizeof *locks);
    /* Warm up: the connection's buffers, the first reply objects. */
    for (int i = 0; i < 3; i++) {
        relock_lock *l = NULL;
        if (relock_try_acquire(c, "bench:mem:warm", TTL_MS, &l) != RELOCK_OK ||
            relock_release(l) != RELOCK_OK) {
            out_error("memory warm-up: %s", relock_client_error(c)->message);
            return 1;
        }
        relock_lock_free(l);
    }
    int reset = bu_reset_hwm() == 0;
    long long rss0 = bu_status_bytes("VmRSS");
    long long hwm0 = bu_status_bytes("VmHWM");
    char name[32];
    size_t key_len = 0, value_len = 0;
    int held = 0;
    for (int i = 0; i < MEM_LOCKS; i++) {
        snprintf(name, sizeof name, "bench:mem:%05d", i);
        if (relock_try_acquire(c, name, 120000, &locks[i]) != RELOCK_OK) {
            out_error("memory: acquire %s: %s", name, relock_client_error(c)->message);
            break;
        }
        held++;
        key_len = strlen(name); /* key_prefix is empty: the key is the name */
        value_len = strlen(relock_lock_value(locks[i]));
    }
    long long hwm1 = bu_status_bytes("VmHWM");
    long long rss1 = bu_status_bytes("VmRSS");
    for (int i = 0; i < held; i++) {
        if (relock_release(locks[i]) != RELOCK_OK)
            out_error("memory: release: %s", relock_client_error(c)->message);
        relock_lock_free(locks[i]);
    }
    free(locks);
    relock_client_free(c);
    if (held != MEM_LOCKS || rss0 < 0 || hwm1 < 0)
        return 1;
    long long growth = hwm1 - rss0;
    double per = (double)growth / MEM_LOCKS;
    out("mem_locks", "%d", MEM_LOCKS);
    out("mem_rss_before", "%lld", rss0);
    out("mem_hwm_before", "%lld", hwm0);
    out("mem_hwm_after", "%lld", hwm1);
    out("mem_rss_after", "%lld", rss1);
    out("mem_hwm_reset", "%d", reset);
    out("mem_per_lock", "%.1f", per);
    out("mem_key_len", "%zu", key_len);
    out("mem_value_len", "%zu", value_len);
    out("mem_beyond", "%.1f", per - (double)(key_len + value_len));
    return 0;
}

static void memory(const char *self, int port)
{
    fprintf(stderr, "relock-bench [%s]: memory, %d held locks\n", opt.phase, MEM_LOCKS);
    char portarg[16];
    snprintf(portarg, sizeof portarg, "%d", port);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        out_error("memory: fork: %s", strerror(errno));
        return;
    }
    if (pid == 0) {
        catch_signals(SIG_DFL);
        /* stdout is the pipe to the top process: the child reports itself. */
        execl(self, self, "--memory", portarg, (char *)NULL);
        fprintf(stderr, "relock-bench: cannot run %s: %s\n", self, strerror(errno));
        _exit(127);
    }
    track(pid);
    int status = tu_wait_child(pid, 60000);
    untrack(pid);
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        out_error("memory: the measuring process failed (status %d)", status);
}

/* ==================================================================== */
/* Quorum: several servers.                                             */

/* The quorum clients over the phase's server and the extra ones (all
 * started on the server's core), and a connection to each server to count
 * its commands. */
static void quorum_setup(bench *b, pid_t first, const testsrv *extra, int nextra)
{
    struct timeval tv = {10, 0};
    b->qport[0] = b->port;
    b->qrc[0] = b->rc;
    b->nq = 1;
    for (int i = 0; i < nextra && b->nq < QUORUM_SERVERS; i++) {
        redisContext *rc = redisConnectWithTimeout("127.0.0.1", extra[i].port, tv);
        if (!rc || rc->err) {
            if (rc)
                redisFree(rc);
            break;
        }
        redisSetTimeout(rc, tv);
        b->qport[b->nq] = extra[i].port;
        b->qrc[b->nq++] = rc;
    }
    if (b->nq < QUORUM_SERVERS) {
        out_error("quorum: only %d of %d servers could be started and reached", b->nq,
                  QUORUM_SERVERS);
        return;
    }
    /* The CPUs of every server, as placed: "1/1/1/1/1". */
    char cpus[QUORUM_SERVERS * 64] = "";
    for (int i = 0; i < QUORUM_SERVERS; i++) {
        char one[64];
        bu_cpus_of(i == 0 ? first : extra[i - 1].pid, one, sizeof one);
        size_t used = strlen(cpus);
        snprintf(cpus + used, sizeof cpus - used, "%s%s", i ? "/" : "", one);
    }
    out("quorum_server_cpus", "%s", cpus);
    static const struct {
        int which, n;
    } qs[] = {{RL_Q5, QUORUM_SERVERS}, {RL_Q3, 3}};
    for (size_t k = 0; k < sizeof qs / sizeof qs[0]; k++) {
        char err[400] = "";
        b->rl[qs[k].which] = bench_connect_quorum(b->qport, qs[k].n, err, sizeof err);
        if (!b->rl[qs[k].which]) {
            out_error("quorum over %d servers: %s", qs[k].n, err);
            continue;
        }
        char key[32];
        snprintf(key, sizeof key, "quorum%d_mode", qs[k].n);
        out(key, "%s", relock_client_mode_reason(b->rl[qs[k].which]));
    }
}

/* ==================================================================== */

/* Starts a redis-server (or a proxy in front of upstream) forked from the
 * server's core (every thread it starts inherits that affinity), then
 * returns to the client's CPUs; 0 on success. */
int bench_start_pinned(testsrv *srv, const char *client_cpus, int upstream)
{
    if (opt.server_cpu >= 0 && bu_pin_self(opt.server_cpu) != 0) {
        out_error("cannot pin to cpu %d: %s", opt.server_cpu, strerror(errno));
        return -1;
    }
    int started = upstream > 0 ? testsrv_start_proxy(srv, upstream, "7", NULL)
                               : testsrv_start(srv, NULL);
    if (bu_pin_self_list(client_cpus) != 0) {
        out_error("cannot return to cpus %s: %s", client_cpus, strerror(errno));
        if (started == 0)
            testsrv_stop(srv);
        return -1;
    }
    if (started != 0) {
        out_error("cannot start %s", upstream > 0 ? "relock-compat-proxy" : "redis-server");
        return -1;
    }
    return 0;
}

int bench_run_phase(void)
{
    catch_signals(on_fatal_signal);
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) {
        out_error("cannot find my own executable: %s", strerror(errno));
        return 1;
    }
    self[sl] = '\0';
    char client_cpus[128], server_cpus[128];
    bu_cpus_of(0, client_cpus, sizeof client_cpus);
    testsrv srv;
    if (bench_start_pinned(&srv, client_cpus, 0) != 0)
        return 1;
    memcpy(g_srv_dir[0], srv.dir, sizeof g_srv_dir[0]);
    track(srv.pid);
    /* The quorum figure's other servers, on the same core as the first. */
    testsrv extra[QUORUM_SERVERS - 1];
    int nextra = 0;
    while (nextra < QUORUM_SERVERS - 1 &&
           bench_start_pinned(&extra[nextra], client_cpus, 0) == 0) {
        memcpy(g_srv_dir[nextra + 1], extra[nextra].dir, sizeof g_srv_dir[0]);
        track(extra[nextra].pid);
        nextra++;
    }
    bu_cpus_of(srv.pid, server_cpus, sizeof server_cpus);
    bu_cpus_of(0, client_cpus, sizeof client_cpus);
    out("client_cpus", "%s", client_cpus);
    out("server_cpus", "%s", server_cpus);

    bench b;
    memset(&b, 0, sizeof b);
    b.port = srv.port;
    b.rng = bu_now_ns() | 1;
    struct timeval tv = {10, 0};
    b.rc = redisConnectWithTimeout("127.0.0.1", srv.port, tv);
    int rc = 0;
    if (!b.rc || b.rc->err) {
        out_error("cannot connect to the server");
        rc = 1;
    } else {
        redisSetTimeout(b.rc, tv);
        redisReply *r = redisCommand(b.rc, "INFO server");
        const char *v = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "redis_version:") : NULL;
        if (v)
            out("redis_version", "%.*s", (int)strcspn(v + 14, "\r\n"), v + 14);
        if (r)
            freeReplyObject(r);
    }
    static const char *const modes[NRL_SINGLE] = {"modern", "modern", "legacy", "bridge"};
    for (int i = 0; rc == 0 && i < NRL_SINGLE; i++) {
        b.rl[i] = connect_client(srv.port, modes[i], i != RL_MODERN, b.err, sizeof b.err);
        if (!b.rl[i]) {
            out_error("%s", b.err);
            rc = 1;
        }
    }
    if (rc == 0 && opt.only && strcmp(opt.only, "wait") == 0) {
        bench_waitload(srv.port);
    } else if (rc == 0 && opt.only) {
        /* --only throughput: the uncontended figures, in the same rotation
         * (the quorum clients included) as a full run's */
        quorum_setup(&b, srv.pid, extra, nextra);
        if (uncontended(&b) != 0)
            rc = 1;
    } else if (rc == 0) {
        quorum_setup(&b, srv.pid, extra, nextra);
        if (uncontended(&b) != 0)
            rc = 1;
        contended(&b);
        memory(self, srv.port);
        bench_latency(srv.port);
        bench_waitload(srv.port);
        bench_network(b.qport, b.nq, client_cpus);
        bench_native(srv.port, client_cpus);
        bench_cluster(client_cpus);
    }
    for (int i = 0; i < NRL; i++)
        relock_client_free(b.rl[i]);
    for (int i = 1; i < b.nq; i++)
        redisFree(b.qrc[i]);
    if (b.rc)
        redisFree(b.rc);
    for (int i = nextra - 1; i >= 0; i--) {
        untrack(extra[i].pid);
        g_srv_dir[i + 1][0] = '\0';
        testsrv_stop(&extra[i]);
    }
    untrack(srv.pid);
    g_srv_dir[0][0] = '\0';
    testsrv_stop(&srv);
    return rc;
}
