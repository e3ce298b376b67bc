/* The torture runner's servers: redis-servers that restart on their own
 * port and directory, and the compat proxy (see torture.h). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "testsrv.h"
#include "torture.h"

uint64_t t_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t t_now_ms(void)
{
    return t_now_ns() / 1000000u;
}

void t_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !t_interrupted)
        ;
}

static redisContext *connect_short(int port, long ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!c || c->err) {
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    return c;
}

/* PONG, not -LOADING: the server has read its AOF. */
static int answers_ping(int port)
{
    redisContext *c = connect_short(port, 200);
    if (!c)
        return 0;
    redisReply *r = redisCommand(c, "PING");
    int ok = r && r->type == REDIS_REPLY_STATUS;
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return ok;
}

/* Stops pid: SIGTERM (SIGKILL at once when hard), SIGKILL after 5 s. */
static void stop_pid(pid_t pid, int hard)
{
    if (pid <= 0)
        return;
    kill(pid, hard ? SIGKILL : SIGTERM);
    for (int i = 0; i < 500; i++) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid || (r < 0 && errno == ECHILD))
            return;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);
}

static int spawn_server(tsrv *s)
{
    char port[16];
    snprintf(port, sizeof port, "%d", s->port);
    const char *argv[] = {"redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
                          "--appendonly", s->aof ? "yes" : "no", "--appendfsync",
                          s->aof ? "always" : "everysec", "--dir", s->dir, "--daemonize", "no",
                          "--logfile", "server.log", NULL};
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        /* A runner that dies (ctest's timeout) takes its servers along. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            dup2(devnull, 0);
            dup2(devnull, 1);
        }
        execvp(argv[0], (char *const *)argv);
        fprintf(stderr, "torture: cannot run redis-server: %s\n", strerror(errno));
        _exit(127);
    }
    s->pid = pid;
    for (int i = 0; i < 500; i++) {
        if (answers_ping(s->port))
            return 0;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            s->pid = 0;
            return -1;
        }
        t_sleep_ms(20);
    }
    fprintf(stderr, "torture: redis-server on port %d did not answer within 10 s\n", s->port);
    stop_pid(pid, 1);
    s->pid = 0;
    return -1;
}

int tsrv_start(tsrv *s, const char *dir, int aof)
{
    s->pid = 0;
    s->aof = aof;
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    /* A port can be taken between the probe and the bind: try again. */
    for (int attempt = 0; attempt < 5; attempt++) {
        s->port = testsrv_free_port();
        if (s->port > 0 && spawn_server(s) == 0)
            return 0;
    }
    fprintf(stderr, "torture: cannot start redis-server in %s\n", dir);
    return -1;
}

int tsrv_restart(tsrv *s)
{
    stop_pid(s->pid, 1);
    s->pid = 0;
    /* The port was ours a moment ago; Redis binds with SO_REUSEADDR. */
    for (int attempt = 0; attempt < 5; attempt++) {
        if (spawn_server(s) == 0)
            return 0;
        t_sleep_ms(100);
    }
    fprintf(stderr, "torture: redis-server did not come back on port %d\n", s->port);
    return -1;
}

void tsrv_stop(tsrv *s)
{
    stop_pid(s->pid, 0);
    s->pid = 0;
}

int tproxy_start(tproxy *p, const char *bin, int upstream, const char *errfile)
{
    p->pid = 0;
    p->port = 0;
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    char up[32];
    snprintf(up, sizeof up, "127.0.0.1:%d", upstream);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        int err = open(errfile, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (err >= 0)
            dup2(err, 2);
        execl(bin, bin, "--upstream", up, "--listen", "0", "--personality", "7", (char *)NULL);
        fprintf(stderr, "torture: cannot run %s: %s\n", bin, strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    p->pid = pid;
    /* It prints "port N" once it listens. */
    char buf[64];
    size_t len = 0;
    uint64_t end = t_now_ms() + 10000;
    while (len < sizeof buf - 1 && !memchr(buf, '\n', len) && t_now_ms() < end) {
        struct pollfd pf = {fds[0], POLLIN, 0};
        if (poll(&pf, 1, 100) <= 0)
            continue;
        ssize_t n = read(fds[0], buf + len, sizeof buf - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    close(fds[0]);
    buf[len] = '\0';
    if (sscanf(buf, "port %d", &p->port) != 1 || !answers_ping(p->port)) {
        fprintf(stderr, "torture: the proxy did not start (%s)\n", bin);
        tproxy_stop(p);
        return -1;
    }
    return 0;
}

void tproxy_stop(tproxy *p)
{
    stop_pid(p->pid, 0);
    p->pid = 0;
}

long t_dump_list(int port, const char *key, const char *path)
{
    redisContext *c = connect_short(port, 5000);
    if (!c)
        return -1;
    FILE *f = fopen(path, "w");
    if (!f) {
        redisFree(c);
        return -1;
    }
    long count = 0;
    /* In chunks, at most a million chunks: far more than any run writes. */
    for (long from = 0; from < 1000000L * 10000L; from += 10000) {
        redisReply *r = redisCommand(c, "LRANGE %s %ld %ld", key, from, from + 9999);
        if (!r || r->type != REDIS_REPLY_ARRAY) {
            count = -1;
            if (r)
                freeReplyObject(r);
            break;
        }
        for (size_t i = 0; i < r->elements; i++) {
            if (r->element[i]->type == REDIS_REPLY_STRING) {
                fprintf(f, "%.*s\n", (int)r->element[i]->len, r->element[i]->str);
                count++;
            }
        }
        size_t got = r->elements;
        freeReplyObject(r);
        if (got < 10000)
            break;
    }
    if (fclose(f) != 0)
        count = -1;
    redisFree(c);
    return count;
}
