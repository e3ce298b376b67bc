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

/*
 * The server the tests target.  By default redis-server from PATH, taken
 * as a modern server.  RELOCK_TEST_SERVER names another server binary (a
 * real redis-server or valkey-server of any release, docs/matrix.md) and
 * RELOCK_TEST_SERVER_VERSION its version ("2.0.5"; when unset, read from
 * the binary's --version).  Servers before 2.6 take no command-line
 * options: testsrv_start writes them a configuration file instead.
 */
/* The targeted version, "2.0.5"; NULL when the default server is used. */
const char *testsrv_target_version(void);
/* 1 when the targeted server is at least major.minor.patch (always 1 for
 * the default server). */
int testsrv_target_at_least(int major, int minor, int patch);
/* 1 when tests of this relock mode ("legacy", "bridge", "modern") can run
 * against the targeted server: legacy everywhere, bridge from 2.6.0,
 * modern from 2.6.12. */
int testsrv_mode_runs(const char *mode);
/*
 * 1 when checks written for the proxy personality ("2.0", "2.2", "2.4",
 * "2.6.0" ... "2.6.11", "7") run: always with the default server (the
 * proxy imitates the version); with a targeted server, only when the
 * personality stands for its release line ("2.0" for 2.0.x, "2.6.N" for
 * 2.6.0 to 2.6.11, "7" for 2.6.12 and later), and then
 * testsrv_start_proxy starts the proxy as personality 7, which imitates
 * nothing: the old replies are the real server's own.
 */
int testsrv_personality_runs(const char *personality);
/* Prints "SKIPPED: <what> (not for the targeted server V)" on stderr. */
void testsrv_note_skip(const char *what);

/* A TCP port on 127.0.0.1 that was free a moment ago. */
int testsrv_free_port(void);

/*
 * Start redis-server with "--save '' --appendonly no" on a free port and
 * wait (bounded, 10 s) until it answers PING.  extra_args: further
 * "--option value" arguments, NULL-terminated array, or NULL.  With a
 * targeted server (RELOCK_TEST_SERVER), that binary with the same settings,
 * before 2.6 as a configuration file ("--option value" becomes the line
 * "option value", and "--save ''" is left out).
 * Returns 0 on success, -1 (with a message on stderr) on failure.
 */
int testsrv_start(testsrv *s, const char *const *extra_args);

/* testsrv_start() with the server binary bin (a name looked up on PATH, or
 * a path), whatever RELOCK_TEST_SERVER says; for servers of 2.6 and later,
 * which take options on the command line. */
int testsrv_start_bin(testsrv *s, const char *bin, const char *const *extra_args);

/*
 * Start build/tests/support/proxy/relock-compat-proxy (path from the environment
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
/* Waits up to ms (asking every 50 ms) until s's reply to the command (fmt
 * with arg, as testsrv_cmd renders it) contains want; 0 when it did, -1
 * when it did not. */
int testsrv_await(const testsrv *s, long ms, const char *want, const char *fmt,
                  const char *arg);
/* The same for a server (or proxy) on 127.0.0.1:port started elsewhere. */
char *testsrv_cmd_port(int port, const char *fmt, ...);

#endif
