/* Private redis-server and proxy processes for the tests (see testsrv.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "testsrv.h"
#include "testutil.h"

#ifndef TESTSRV_PROXY_PATH
#define TESTSRV_PROXY_PATH "relock-compat-proxy"
#endif

/* ---- the targeted server ---- */

static int target_loaded;
static const char *target_bin;   /* NULL: redis-server from PATH */
static char target_ver[32];      /* "2.0.5"; empty with the default server */
static int target_num;           /* major * 10000 + minor * 100 + patch */

static int version_number(const char *v)
{
    int a = 0, b = 0, c = 0;
    if (sscanf(v, "%d.%d.%d", &a, &b, &c) < 2)
        return -1;
    return a * 10000 + b * 100 + c;
}

/* "Redis server version 2.0.5", "Redis server v=2.6.11 ...",
 * "Server v=7.2.7 ...", "Valkey server v=8.0.1 ...". */
static void version_from_binary(const char *bin, char *out, size_t len)
{
    char cmd[1200], line[256];
    out[0] = '\0';
    snprintf(cmd, sizeof cmd, "'%s' --version 2>/dev/null", bin);
    FILE *p = popen(cmd, "r");
    if (!p)
        return;
    if (fgets(line, sizeof line, p)) {
        const char *v = strstr(line, "v=");
        if (v)
            v += 2;
        else if ((v = strstr(line, "version ")) != NULL)
            v += 8;
        if (v)
            snprintf(out, len, "%.*s", (int)strcspn(v, " \r\n"), v);
    }
    pclose(p);
}

static void load_target(void)
{
    if (target_loaded)
        return;
    target_loaded = 1;
    const char *bin = getenv("RELOCK_TEST_SERVER");
    if (!bin || !*bin)
        return;
    target_bin = bin;
    const char *ver = getenv("RELOCK_TEST_SERVER_VERSION");
    if (ver && *ver)
        snprintf(target_ver, sizeof target_ver, "%s", ver);
    else
        version_from_binary(bin, target_ver, sizeof target_ver);
    target_num = version_number(target_ver);
    if (target_num < 0) {
        fprintf(stderr, "testsrv: cannot tell the version of %s: set RELOCK_TEST_SERVER_VERSION\n",
                bin);
        exit(2);
    }
}

const char *testsrv_target_version(void)
{
    load_target();
    return target_bin ? target_ver : NULL;
}

int testsrv_target_at_least(int major, int minor, int patch)
{
    load_target();
    return !target_bin || target_num >= major * 10000 + minor * 100 + patch;
}

int testsrv_mode_runs(const char *mode)
{
    if (strcmp(mode, "bridge") == 0)
        return testsrv_target_at_least(2, 6, 0);
    if (strcmp(mode, "modern") == 0)
        return testsrv_target_at_least(2, 6, 12);
    return 1;
}

int testsrv_personality_runs(const char *personality)
{
    load_target();
    if (!target_bin)
        return 1;
    if (strcmp(personality, "7") == 0)
        return target_num >= 20612;
    int p = version_number(personality);
    if (p < 0)
        return 0;
    if (p >= 20600 && p < 20612)
        return target_num >= 20600 && target_num < 20612;
    return p / 100 == target_num / 100;
}

void testsrv_note_skip(const char *what)
{
    load_target();
    fprintf(stderr, "SKIPPED: %s (not for the targeted server %s)\n", what,
            target_bin ? target_ver : "redis-server");
}

int testsrv_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int answers_ping(int port)
{
    struct timeval tv = {0, 200000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    int ok = 0;
    if (c && !c->err) {
        redisSetTimeout(c, tv);
        redisReply *r = redisCommand(c, "PING");
        /* A server started with --requirepass answers, but with NOAUTH. */
        ok = r && (r->type == REDIS_REPLY_STATUS ||
                   (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOAUTH", 6) == 0));
        if (r)
            freeReplyObject(r);
    }
    if (c)
        redisFree(c);
    return ok;
}

/* Waits up to 10 s for the process to answer PING on its port. */
static int wait_ready(testsrv *s, const char *what)
{
    for (int i = 0; i < 500; i++) {
        if (answers_ping(s->port))
            return 0;
        int status;
        if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
            fprintf(stderr, "testsrv: %s exited before answering (status %d)\n", what, status);
            s->pid = 0;
            return -1;
        }
        sleep_ms(20);
    }
    fprintf(stderr, "testsrv: %s on port %d did not answer PING within 10 s\n", what, s->port);
    testsrv_stop(s);
    return -1;
}

static int make_dir(testsrv *s)
{
    snprintf(s->dir, sizeof s->dir, "/tmp/relock-test-XXXXXX");
    if (!mkdtemp(s->dir)) {
        fprintf(stderr, "testsrv: mkdtemp: %s\n", strerror(errno));
        s->dir[0] = '\0';
        return -1;
    }
    return 0;
}

/* Copies base (NULL-terminated) then extra (NULL-terminated, or NULL)
 * into argv, at most cap - 1 entries, and terminates it. */
static void join_args(const char **argv, int cap, const char *const *base,
                      const char *const *extra)
{
    int n = 0;
    for (int i = 0; base[i] && n < cap - 1; i++)
        argv[n++] = base[i];
    for (int i = 0; extra && extra[i] && n < cap - 1; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
}

/* Forks and runs argv (stdin and stdout on /dev/null, stderr kept for
 * its complaints), then waits until it answers PING on s->port. */
static int spawn_ready(testsrv *s, const char *const *argv, const char *what)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        /* A test that fails part-way (cmocka's fail_msg) skips its
         * testsrv_stop(): the server or proxy must not outlive it, or it
         * keeps the test's output pipe open and ctest waits for its
         * timeout.  SIGTERM when the test process ends. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(127);
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            dup2(devnull, 0);
            dup2(devnull, 1);
        }
        execvp(argv[0], (char *const *)argv);
        fprintf(stderr, "testsrv: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    s->pid = pid;
    return wait_ready(s, what);
}

/*
 * Servers before 2.6 read their settings from a file only: writes
 * s->dir/redis.conf from the same settings, "--option value..." as the line
 * "option value...", without "--save ''" (no save line means no saving
 * there, and an empty one is refused) and with dir before logfile (the
 * old servers open the log where they stand when they read the line).
 */
static int write_old_config(testsrv *s, const char *const *argv, char *path, size_t len)
{
    snprintf(path, len, "%s/redis.conf", s->dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "testsrv: %s: %s\n", path, strerror(errno));
        return -1;
    }
    fprintf(f, "dir %s\nlogfile %s/server.log\n", s->dir, s->dir);
    for (int i = 1; argv[i];) {
        const char *opt = argv[i] + 2;
        int j = i + 1;
        while (argv[j] && strncmp(argv[j], "--", 2) != 0)
            j++;
        int skip = strcmp(opt, "save") == 0 || strcmp(opt, "dir") == 0 ||
                   strcmp(opt, "logfile") == 0;
        if (!skip) {
            fputs(opt, f);
            for (int k = i + 1; k < j; k++)
                fprintf(f, " %s", argv[k]);
            fputc('\n', f);
        }
        i = j;
    }
    return fclose(f) == 0 ? 0 : -1;
}

static int start_server(testsrv *s, const char *bin, int old_config,
                        const char *const *extra_args);

int testsrv_start(testsrv *s, const char *const *extra_args)
{
    load_target();
    return start_server(s, target_bin ? target_bin : "redis-server",
                        target_bin && target_num < 20600, extra_args);
}

int testsrv_start_bin(testsrv *s, const char *bin, const char *const *extra_args)
{
    return start_server(s, bin, 0, extra_args);
}

static int start_server(testsrv *s, const char *bin, int old_config,
                        const char *const *extra_args)
{
    memset(s, 0, sizeof *s);
    if (make_dir(s) != 0)
        return -1;
    /* A port can be taken between our probe and the server's bind: retry. */
    for (int attempt = 0; attempt < 5; attempt++) {
        s->port = testsrv_free_port();
        char port[16];
        snprintf(port, sizeof port, "%d", s->port);
        const char *const base[] = {bin, "--port", port, "--bind", "127.0.0.1",
                                    "--save", "", "--appendonly", "no", "--dir", s->dir,
                                    "--daemonize", "no", "--logfile", "server.log", NULL};
        const char *argv[64];
        join_args(argv, 64, base, extra_args);
        char conf[192];
        if (old_config) {
            if (write_old_config(s, argv, conf, sizeof conf) != 0)
                return -1;
            argv[1] = conf;
            argv[2] = NULL;
        }
        if (spawn_ready(s, argv, "redis-server") == 0)
            return 0;
        if (s->pid)
            testsrv_stop(s);
        if (make_dir(s) != 0)
            return -1;
    }
    return -1;
}

int testsrv_start_proxy(testsrv *s, int upstream_port, const char *personality,
                        const char *const *extra_args)
{
    memset(s, 0, sizeof *s);
    const char *path = getenv("RELOCK_PROXY");
    if (!path || !*path)
        path = TESTSRV_PROXY_PATH;
    load_target();
    if (target_bin && personality) {
        /* A real server of the version: the proxy adds faults and control
         * commands, and imitates nothing. */
        if (!testsrv_personality_runs(personality)) {
            fprintf(stderr, "testsrv: personality %s does not stand for the targeted server %s\n",
                    personality, target_ver);
            return -1;
        }
        personality = "7";
    }
    char upstream[32];
    snprintf(upstream, sizeof upstream, "127.0.0.1:%d", upstream_port);
    for (int attempt = 0; attempt < 5; attempt++) {
        s->port = testsrv_free_port();
        char port[16];
        snprintf(port, sizeof port, "%d", s->port);
        const char *const base[] = {path,   "--upstream",    upstream,
                                    "--listen", port,        "--personality",
                                    personality ? personality : "7", NULL};
        const char *argv[64];
        join_args(argv, 64, base, extra_args);
        if (spawn_ready(s, argv, "relock-compat-proxy") == 0)
            return 0;
        if (s->pid)
            testsrv_stop(s);
    }
    return -1;
}

int testsrv_start_sentinel(testsrv *s, const char *master_name, int master_port)
{
    memset(s, 0, sizeof *s);
    if (make_dir(s) != 0)
        return -1;
    for (int attempt = 0; attempt < 5; attempt++) {
        s->port = testsrv_free_port();
        char conf[192];
        snprintf(conf, sizeof conf, "%s/sentinel.conf", s->dir);
        FILE *f = fopen(conf, "w");
        if (!f) {
            fprintf(stderr, "testsrv: %s: %s\n", conf, strerror(errno));
            return -1;
        }
        fprintf(f,
                "port %d\nbind 127.0.0.1\ndaemonize no\ndir %s\nlogfile %s/server.log\n"
                "sentinel monitor %s 127.0.0.1 %d 2\n"
                "sentinel down-after-milliseconds %s 1000\n"
                "sentinel failover-timeout %s 5000\n",
                s->port, s->dir, s->dir, master_name, master_port, master_name, master_name);
        fclose(f);
        const char *const argv[] = {"redis-sentinel", conf, NULL};
        if (spawn_ready(s, argv, "redis-sentinel") == 0)
            return 0;
        if (s->pid)
            testsrv_stop(s);
        if (make_dir(s) != 0)
            return -1;
    }
    return -1;
}

void testsrv_stop(testsrv *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        int status;
        int gone = 0;
        for (int i = 0; i < 250 && !gone; i++) {
            if (waitpid(s->pid, &status, WNOHANG) == s->pid)
                gone = 1;
            else
                sleep_ms(20);
        }
        if (!gone) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, &status, 0);
        }
    }
    s->pid = 0;
    if (s->dir[0]) {
        char path[256];
        snprintf(path, sizeof path, "%s/server.log", s->dir);
        unlink(path);
        snprintf(path, sizeof path, "%s/dump.rdb", s->dir);
        unlink(path);
        /* Written by redis-sentinel and by Cluster nodes. */
        snprintf(path, sizeof path, "%s/sentinel.conf", s->dir);
        unlink(path);
        snprintf(path, sizeof path, "%s/nodes.conf", s->dir);
        unlink(path);
        snprintf(path, sizeof path, "%s/redis.conf", s->dir);
        unlink(path);
        rmdir(s->dir);
        s->dir[0] = '\0';
    }
}

static char *reply_text(const redisReply *r)
{
    char *out = NULL;
    size_t cap = 0;
    switch (r->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
        out = strndup(r->str, r->len);
        break;
    case REDIS_REPLY_ERROR:
        out = strndup(r->str, r->len);
        break;
    case REDIS_REPLY_INTEGER:
        cap = 32;
        out = malloc(cap);
        if (out)
            snprintf(out, cap, "%lld", r->integer);
        break;
    case REDIS_REPLY_NIL:
        out = strdup("(nil)");
        break;
    case REDIS_REPLY_ARRAY: {
        /* Elements joined by spaces: enough for the tests' checks. */
        size_t len = 0;
        out = calloc(1, 1);
        for (size_t i = 0; out && i < r->elements; i++) {
            char *e = reply_text(r->element[i]);
            if (!e)
                break;
            size_t el = strlen(e);
            char *grown = realloc(out, len + el + 2);
            if (!grown) {
                free(e);
                break;
            }
            out = grown;
            if (len)
                out[len++] = ' ';
            memcpy(out + len, e, el + 1);
            len += el;
            free(e);
        }
        break;
    }
    }
    return out;
}

static char *vcmd(int port, const char *fmt, va_list ap)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!c || c->err) {
        if (c)
            redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    redisReply *r = redisvCommand(c, fmt, ap);
    char *out = r ? reply_text(r) : NULL;
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return out;
}

char *testsrv_cmd(const testsrv *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *out = vcmd(s->port, fmt, ap);
    va_end(ap);
    return out;
}

char *testsrv_cmd_port(int port, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *out = vcmd(port, fmt, ap);
    va_end(ap);
    return out;
}

int testsrv_await(const testsrv *s, long ms, const char *want, const char *fmt,
                  const char *arg)
{
    uint64_t end = tu_now_ms() + (uint64_t)ms;
    do {
        char *v = testsrv_cmd(s, fmt, arg);
        int ok = v && strstr(v, want);
        free(v);
        if (ok)
            return 0;
        tu_sleep_ms(50);
    } while (tu_now_ms() < end);
    return -1;
}
