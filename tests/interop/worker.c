/* The shared half of the interop workers (see worker.h). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "worker.h"

static void usage(const char *prog, int relock)
{
    fprintf(stderr,
            "usage: %s --port P --key K --unit s|ms %s --sections N --log FILE --counter C\n"
            "          [--die-prob X] [--seed S] [--until-ms MONO_MS] [--gap-ms MS]%s\n"
            "          [--resource-port P --hold-ms MS --tolerate --fault-file F]%s\n",
            prog, relock ? "--ttl MS --mode bridge|modern|legacy" : "--timeout T",
            relock ? " [--wait MS]" : "", relock ? " [--skew-margin MS]" : "");
    exit(2);
}

static long long num(const char *prog, const char *name, const char *s, long long lo,
                     long long hi, int relock)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "%s: --%s: bad value '%s'\n", prog, name, s);
        usage(prog, relock);
    }
    return v;
}

void wk_parse(int argc, char **argv, wk_opts *o, int relock)
{
    static const struct option longopts[] = {
        {"port", required_argument, NULL, 'p'},     {"key", required_argument, NULL, 'k'},
        {"unit", required_argument, NULL, 'u'},     {"timeout", required_argument, NULL, 't'},
        {"sections", required_argument, NULL, 'n'}, {"log", required_argument, NULL, 'l'},
        {"counter", required_argument, NULL, 'c'},  {"die-prob", required_argument, NULL, 'd'},
        {"seed", required_argument, NULL, 's'},     {"until-ms", required_argument, NULL, 'U'},
        {"mode", required_argument, NULL, 'm'},     {"ttl", required_argument, NULL, 'T'},
        {"wait", required_argument, NULL, 'w'},     {"gap-ms", required_argument, NULL, 'g'},
        {"resource-port", required_argument, NULL, 'R'},
        {"hold-ms", required_argument, NULL, 'H'},
        {"tolerate", no_argument, NULL, 'o'},
        {"fault-file", required_argument, NULL, 'F'},
        {"skew-margin", required_argument, NULL, 'M'},
        {NULL, 0, NULL, 0}};
    const char *prog = argv[0];
    memset(o, 0, sizeof *o);
    o->timeout = -1;
    o->sections = -1;
    o->wait_ms = 2000;
    o->hold_ms = -1;
    o->skew_margin_ms = -1;
    int unit_seen = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (opt) {
        case 'p':
            o->port = (int)num(prog, "port", optarg, 1, 65535, relock);
            break;
        case 'k':
            o->key = optarg;
            break;
        case 'u':
            if (strcmp(optarg, "s") != 0 && strcmp(optarg, "ms") != 0)
                usage(prog, relock);
            o->unit_ms = strcmp(optarg, "ms") == 0;
            unit_seen = 1;
            break;
        case 't':
            o->timeout = (long)num(prog, "timeout", optarg, 1, 86400000, relock);
            break;
        case 'n':
            o->sections = (long)num(prog, "sections", optarg, 0, 100000000, relock);
            break;
        case 'l':
            o->log = optarg;
            break;
        case 'c':
            o->counter = optarg;
            break;
        case 'd': {
            char *end;
            o->die_prob = strtod(optarg, &end);
            if (end == optarg || *end || !(o->die_prob >= 0.0 && o->die_prob <= 1.0))
                usage(prog, relock);
            break;
        }
        case 's':
            o->seed = (uint64_t)num(prog, "seed", optarg, 0, (long long)(~0ULL >> 1), relock);
            break;
        case 'U':
            o->until_ms = (uint64_t)num(prog, "until-ms", optarg, 1, (long long)(~0ULL >> 1),
                                        relock);
            break;
        case 'g':
            o->gap_ms = (long)num(prog, "gap-ms", optarg, 0, 60000, relock);
            break;
        case 'R':
            o->resource_port = (int)num(prog, "resource-port", optarg, 1, 65535, relock);
            break;
        case 'H':
            o->hold_ms = (long)num(prog, "hold-ms", optarg, 0, 60000, relock);
            break;
        case 'o':
            o->tolerate = 1;
            break;
        case 'F':
            o->fault_file = optarg;
            break;
        case 'M':
            if (!relock)
                usage(prog, relock);
            o->skew_margin_ms = (long)num(prog, "skew-margin", optarg, 0, 3600000, relock);
            break;
        case 'm':
            if (!relock)
                usage(prog, relock);
            o->mode = optarg;
            break;
        case 'T':
            if (!relock)
                usage(prog, relock);
            o->ttl_ms = (long)num(prog, "ttl", optarg, 1, 86400000, relock);
            break;
        case 'w':
            if (!relock)
                usage(prog, relock);
            o->wait_ms = (long)num(prog, "wait", optarg, 1, 86400000, relock);
            break;
        default:
            usage(prog, relock);
        }
    }
    if (optind != argc || !o->port || !o->key || !unit_seen || o->sections < 0 || !o->log ||
        !o->counter)
        usage(prog, relock);
    if (relock ? (!o->mode || !o->ttl_ms) : o->timeout < 0)
        usage(prog, relock);
}

uint64_t wk_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t wk_mono_ms(void)
{
    return wk_mono_ns() / 1000000u;
}

long long wk_wall(int unit_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (!unit_ms)
        return (long long)ts.tv_sec;
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void wk_sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* splitmix64: small, seedable, and good enough for jitter and dice. */
static uint64_t next_of(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t next(wk_worker *w)
{
    return next_of(&w->rng);
}

long wk_rand_between(wk_worker *w, long lo, long hi)
{
    return lo + (long)(next(w) % (uint64_t)(hi - lo + 1));
}

double wk_rand01(wk_worker *w)
{
    return (double)(next(w) >> 11) / 9007199254740992.0;
}

void wk_init(wk_worker *w, const wk_opts *o, const char *kind)
{
    memset(w, 0, sizeof *w);
    w->o = o;
    w->kind = kind;
    w->id = (long)getpid();
    /* The dice depend on the seed only (not on the pid, nor on how many
     * retries timing caused), so a scenario's deaths are the same from run
     * to run. */
    w->rng = o->seed * 0x2545f4914f6cdd1dULL + 1;
    w->dice = o->seed * 0x9e3779b97f4a7c15ULL + 7;
    w->log_fd = open(o->log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (w->log_fd < 0) {
        fprintf(stderr, "%s: open %s: %s\n", kind, o->log, strerror(errno));
        exit(3);
    }
}

void wk_log(wk_worker *w, const char *event, const char *detail)
{
    char line[160];
    int n = snprintf(line, sizeof line, "%s %llu %ld %s%s%s\n", event,
                     (unsigned long long)wk_mono_ns(), w->id, w->kind,
                     detail ? " " : "", detail ? detail : "");
    if (n <= 0 || (size_t)n >= sizeof line)
        abort();
    /* One write() per line: O_APPEND makes each line land whole, in the
     * order the writes happened. */
    ssize_t wr = write(w->log_fd, line, (size_t)n);
    if (wr != n) {
        fprintf(stderr, "%s: log write: %s\n", w->kind, wr < 0 ? strerror(errno) : "short");
        exit(3);
    }
}

int wk_section(wk_worker *w, redisContext *rc, int (*still_valid)(void *), void *ctx)
{
    wk_log(w, "enter", NULL);
    /* The die is cast for every section, so the sequence of deaths depends
     * on the seed alone. */
    int die = (double)(next_of(&w->dice) >> 11) / 9007199254740992.0 < w->o->die_prob;
    long pause_us = wk_rand_between(w, 0, 3000);
    if (die) {
        /* A real death while holding: no release, no cleanup, the key
         * stays as it is until its holder's expiry. */
        wk_sleep_us(pause_us);
        wk_log(w, "die", NULL);
        raise(SIGKILL);
        _exit(99); /* not reached */
    }
    redisReply *r = redisCommand(rc, "GET %s", w->o->counter);
    if (!r || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_NIL)) {
        fprintf(stderr, "%s: GET %s: %s\n", w->kind, w->o->counter, r ? "bad reply" : rc->errstr);
        if (r)
            freeReplyObject(r);
        return -1;
    }
    long long v = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : 0;
    freeReplyObject(r);
    wk_sleep_us(pause_us);
    r = redisCommand(rc, "SET %s %lld", w->o->counter, v + 1);
    if (!r || r->type != REDIS_REPLY_STATUS) {
        fprintf(stderr, "%s: SET %s: %s\n", w->kind, w->o->counter, r ? "bad reply" : rc->errstr);
        if (r)
            freeReplyObject(r);
        return -1;
    }
    freeReplyObject(r);
    wk_log(w, "exit", still_valid(ctx) ? NULL : "overrun");
    w->done++;
    return 0;
}

void wk_gap(wk_worker *w)
{
    if (w->o->gap_ms > 0)
        wk_sleep_us(wk_rand_between(w, 0, w->o->gap_ms * 1000));
}

redisContext *wk_try_connect(int port)
{
    struct timeval ct = {2, 0}, cmd = {5, 0};
    redisContext *rc = redisConnectWithTimeout("127.0.0.1", port, ct);
    if (!rc || rc->err) {
        fprintf(stderr, "connect 127.0.0.1:%d: %s\n", port, rc ? rc->errstr : "out of memory");
        redisFree(rc);
        return NULL;
    }
    redisSetTimeout(rc, cmd);
    return rc;
}

void wk_error(wk_worker *w, const char *what)
{
    char detail[48];
    snprintf(detail, sizeof detail, "%s", what);
    wk_log(w, "error", detail);
}

/*
 * The fenced resource: Kleppmann's storage check, atomically on a server
 * of its own (the lock server is the one the faults hit).  An operation
 * with a token smaller than the largest the resource has seen is refused;
 * otherwise the token becomes the largest seen.  Token 0 (a client that
 * has none) is never checked and moves nothing.  Every operation, accepted
 * or not, is appended to KEY:ops as
 *   "SEQ OP OK TOKEN ID SENT_NS VALUE"
 * (SEQ the resource's own order, OP R or W, OK 1 or 0, ID the log id,
 * SENT_NS the sender's monotonic clock just before sending, VALUE the
 * value after the operation), so a checker can judge every operation
 * against the sections of the shared log.
 *
 * KEYS: max value ops seq accepted refused; ARGV: op token value id sent_ns
 */
const char wk_resource_script[] =
    "local tok = tonumber(ARGV[2])\n"
    "local seq = redis.call('incr', KEYS[4])\n"
    "local ok = 1\n"
    "if tok > 0 then\n"
    "  local max = tonumber(redis.call('get', KEYS[1]) or '0')\n"
    "  if tok < max then ok = 0 else redis.call('set', KEYS[1], ARGV[2]) end\n"
    "end\n"
    "local v = tonumber(redis.call('get', KEYS[2]) or '0')\n"
    "if ok == 1 and ARGV[1] == 'W' then\n"
    "  redis.call('set', KEYS[2], ARGV[3])\n"
    "  v = tonumber(ARGV[3])\n"
    "end\n"
    "redis.call('incr', ok == 1 and KEYS[5] or KEYS[6])\n"
    "redis.call('rpush', KEYS[3], seq .. ' ' .. ARGV[1] .. ' ' .. ok .. ' ' .. ARGV[2] .. ' ' ..\n"
    "  ARGV[4] .. ' ' .. ARGV[5] .. ' ' .. string.format('%d', v))\n"
    "return {ok, v}\n";

/* One resource operation: 1 accepted, 0 refused by the fence, -1 error.
 * *value: the value after it. */
static int resource_op(wk_worker *w, redisContext *res, const char *op, long long token,
                       long long value, long long *out)
{
    const char *k = w->o->counter;
    w->ops++;
    redisReply *r = redisCommand(res, "EVAL %s 6 %s:max %s:value %s:ops %s:seq %s:accepted "
                                      "%s:refused %s %lld %lld %ld %llu",
                                 wk_resource_script, k, k, k, k, k, k, op, token, value, w->id,
                                 (unsigned long long)wk_mono_ns());
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_INTEGER) {
        fprintf(stderr, "%s: resource %s: %s\n", w->kind, op,
                r ? (r->type == REDIS_REPLY_ERROR ? r->str : "bad reply") : res->errstr);
        if (r)
            freeReplyObject(r);
        return -1;
    }
    int ok = (int)r->element[0]->integer;
    if (out)
        *out = r->element[1]->integer;
    freeReplyObject(r);
    return ok;
}

/* The fault the runner left for this worker's next section, claimed
 * atomically (rename), or "" when none. */
static void claim_fault(const wk_worker *w, char *what, size_t len)
{
    what[0] = '\0';
    if (!w->o->fault_file)
        return;
    char taken[512];
    snprintf(taken, sizeof taken, "%s.%ld", w->o->fault_file, (long)getpid());
    if (rename(w->o->fault_file, taken) != 0)
        return;
    int fd = open(taken, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, what, len - 1);
        what[n > 0 ? n : 0] = '\0';
        close(fd);
    }
    unlink(taken);
}

int wk_section_fenced(wk_worker *w, redisContext *res, long long token, uint64_t lease_end_ns,
                      int (*still_valid)(void *), void *ctx)
{
    char lease[32];
    snprintf(lease, sizeof lease, "%llu", (unsigned long long)lease_end_ns);
    wk_log(w, "enter", lease);
    long long v = 0;
    int ok = resource_op(w, res, "R", token, 0, &v);
    if (ok < 0)
        return -1;
    /* After the read, so that the fence has seen this holder's token: the
     * runner's faults strike a holder that is using the resource. */
    char fault[16];
    claim_fault(w, fault, sizeof fault);
    /* Under `relock run`, CMD has a process group of its own: a fault that
     * stands for the host (a crash, a pause) strikes relock's group too,
     * the worker's, which the runner watches and continues. */
    pid_t runner_group = 0;
    if (strncmp(w->kind, "run-", 4) == 0) {
        pid_t g = getpgid(getppid());
        if (g > 0 && g != getpgrp())
            runner_group = g;
    }
    if (strncmp(fault, "die", 3) == 0) {
        wk_log(w, "die", NULL);
        /* Relock (and its renewal) dies with the section, as in a crash of
         * the host. */
        if (runner_group)
            kill(-runner_group, SIGKILL);
        kill(0, SIGKILL);
        raise(SIGKILL);
        _exit(99); /* not reached */
    }
    if (strncmp(fault, "stop", 4) == 0) {
        wk_log(w, "pause", NULL);
        /* The runner sees the stop and sends SIGCONT past the lease to the
         * worker's group; relock run passes it on to this one. */
        if (runner_group)
            kill(-runner_group, SIGSTOP);
        kill(0, SIGSTOP);
    }
    long hold_us = w->o->hold_ms >= 0 ? wk_rand_between(w, 0, w->o->hold_ms * 1000)
                                      : wk_rand_between(w, 0, 3000);
    wk_sleep_us(hold_us);
    if (ok == 1 && resource_op(w, res, "W", token, v + 1, NULL) < 0)
        return -1;
    wk_log(w, "exit", still_valid(ctx) ? NULL : "overrun");
    w->done++;
    return 0;
}

redisContext *wk_connect(int port)
{
    struct timeval ct = {2, 0}, cmd = {5, 0};
    redisContext *rc = redisConnectWithTimeout("127.0.0.1", port, ct);
    if (!rc || rc->err) {
        fprintf(stderr, "connect 127.0.0.1:%d: %s\n", port, rc ? rc->errstr : "out of memory");
        exit(3);
    }
    redisSetTimeout(rc, cmd);
    return rc;
}
