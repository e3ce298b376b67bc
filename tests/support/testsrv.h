/*
 * testsrv: start and stop private redis-server (and compat proxy) processes
 * for the integration tests.  Every server listens on 127.0.0.1 on a free
 * port, runs in its own temporary directory with persistence off, and is
 * stopped by its PID.
 */
#ifndef RELOCK_TESTSRV_H
#define RELOCK_TESTSRV_H

#include <sys/types.h>

typedef struct testsrv {
    pid_t pid;      /* the process we started; 0 when not running */
    int port;       /* loopback port it listens on */
    char dir[128];  /* its working directory (removed by testsrv_stop) */
} testsrv;

/* A TCP port on 127.0.0.1 that was free a moment ago. */
int testsrv_free_port(void);

/*
 * Start redis-server with "--save '' --appendonly no" on a free port and
 * wait (bounded, 10 s) until it answers PING.  extra_args: further
 * "--option value" arguments, NULL-terminated array, or NULL.
 * Returns 0 on success, -1 (with a message on stderr) on failure.
 */
int testsrv_start(testsrv *s, const char *const *extra_args);

/*
 * Start build/compat/relock-compat-proxy (path from the environment
 * variable RELOCK_PROXY, else the path CMake compiled in) in front of
 * upstream_port with the given personality and extra arguments
 * (NULL-terminated, or NULL), and wait until it answers PING.
 */
int testsrv_start_proxy(testsrv *s, int upstream_port, const char *personality,
                        const char *const *extra_args);

/*
 * Start redis-sentinel on a free port, monitoring master_name at
 * 127.0.0.1:master_port with quorum 2, down-after-milliseconds 1000 and
 * failover-timeout 5000, and wait (bounded, 10 s) until it answers PING.
 * Its configuration file (sentinel.conf, which a sentinel rewrites) lives
 * in its directory.
 */
int testsrv_start_sentinel(testsrv *s, const char *master_name, int master_port);

/* SIGTERM, then SIGKILL after 5 s; waits for the process; removes dir. */
void testsrv_stop(testsrv *s);

/* Send one command (printf-style, as redisCommand) to the server and
 * return its reply as a newly allocated string ("(nil)", integers in
 * decimal, errors as "ERR ..."), or NULL when unreachable.  free() it. */
char *testsrv_cmd(const testsrv *s, const char *fmt, ...);
/* The same for a server (or proxy) on 127.0.0.1:port started elsewhere. */
char *testsrv_cmd_port(int port, const char *fmt, ...);

#endif
