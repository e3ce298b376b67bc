/* Declarations shared by the relock command's files. */
#ifndef RELOCK_CLI_H
#define RELOCK_CLI_H

#include <stddef.h>
#include <stdio.h>

#include "relock.h"
#include "relockx.h"

/* Exit codes (design.md §12.3, docs/cli.md). */
enum {
    EXIT_ACQUIRE_FAILED = 1, /* changed by -E */
    EXIT_USAGE = 2,
    EXIT_LOST = 3,
    EXIT_SERVER = 4
};



/* What every command gets: the configuration after -c/-u/-m. */
typedef struct cli_ctx {
    relock_config *cfg;
    const char *prog;
    /* The configuration's sources, as given (NULL: none), for a relock
     * that run's guardian starts to release after relock died. */
    const char *file, *url, *mode;
} cli_ctx;

/* Prints "relock: MSG" on stderr; with --json the first such message is
 * kept for cli_json_finish(). */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* cli_error(), saying nothing on stderr when quiet (-q): the message is
 * kept for --json all the same, whose object a script always gets. */
void cli_quiet_error(int quiet, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* --json: 0 not given; 1 results and errors as JSON on stdout; 2 on
 * stderr (run, whose stdout is CMD's). */
extern int cli_json;
/* With --json and a failing exit code: prints the kept error as one JSON
 * object, {"error":{"message":…,"status":…,"exit_code":N}}. */
void cli_json_finish(int code);
/* Writes s as the body of a JSON string (no quotes) on f. */
void cli_json_str(FILE *f, const char *s);
/* One relock_acquire() for the commands that take a lock (cli_acquire()):
 * in modern mode a wait starts with one attempt that does not wait, so
 * that a classic holder met is said on stderr at once rather than at the
 * end of the wait (scan.c: the migration's emergency). */
relock_status cli_acquire_once(relock_client *c, const char *cmd, const char *name,
                               long long ttl_ms, long long wait_ms, relock_lock **l);
/* After getopt_long() (opterr = 0) refused an option: prints the one-line
 * error, a missing value or an unknown option, for command cmd (NULL: the
 * top level), naming the option as the user wrote it. */
struct option;
void cli_bad_option(const char *cmd, const char *optstring, const struct option *longopts,
                    char *const *argv);
/* Prints the client's (or config's) last error and returns the exit code
 * for status st. */
int cli_fail(relock_client *c, relock_status st, const char *what);
/* cli_fail(), with the stderr line left out when quiet (-q). */
int cli_quiet_fail(int quiet, relock_client *c, relock_status st, const char *what);
int cli_exit_code(relock_status st);
/* Connects with ctx->cfg; on failure prints and returns NULL with *code. */
relock_client *cli_connect(cli_ctx *ctx, int *code);

/* Options shared by the commands; cli_parse_lockopts() returns 0 to go
 * on, or 1000 + the exit code to stop with (help printed, bad option). */
typedef struct lockopts {
    long long ttl_ms;    /* -t, --ttl; 0: configured */
    long long wait_ms;   /* -w/-n; RELOCK_WAIT_DEFAULT otherwise */
    long long kill_after_ms; /* -k, --kill-after (run); -1: not given */
    int kill_rest;      /* --kill-rest (run): end what CMD left in its group */
    int no_stdin;       /* --no-stdin (hold): only a signal ends the hold */
    long notify_pid;    /* --notify PID (hold); 0: none; -1: hold's parent */
    int notify_sig;     /* --notify-signal SIG (hold; default SIGTERM) */
    const char *on_lost; /* --on-lost 'COMMAND' (hold), or NULL */
    long after_group;   /* --after-group PGID (release); 0: none */
    int by_key;         /* --key (inspect, break): the argument is the Redis key */
    int exit_busy;  /* -E, --exit-busy */
    int exit_lost;  /* --exit-lost */
    int exit_error; /* --exit-error: relock's own failures (2 and 4) */
    int json;       /* --json */
    int quiet;      /* -q: nothing said for "not acquired" */
    int verbose;    /* -v: who holds it, how long relock waited */
    const char *owner; /* --owner TEXT, or NULL */
} lockopts;
/* What a command accepts besides its optstring (refused otherwise, with a
 * message, rather than accepted and ignored). */
enum {
    CLI_JSON = 1,
    CLI_TALK = 2,  /* -q, -v */
    CLI_EXITS = 4, /* --exit-* */
    CLI_OWNER = 8, /* --owner TEXT */
    CLI_RUN = 16,  /* -k, --kill-after; --kill-rest */
    CLI_HOLD = 32, /* --no-stdin, --notify, --notify-signal, --on-lost */
    CLI_AFTER = 64, /* --after-group PGID (release) */
    CLI_KEY = 128   /* --key: NAME is given as its Redis key */
};
int cli_parse_lockopts(int argc, char **argv, const char *optstring, const char *help,
                       unsigned accept, lockopts *o);
/* The lock name for the argument arg: arg itself, or with --key (by_key)
 * the Redis key arg less key_prefix; NULL (said, as cmd) when arg does not
 * begin with key_prefix. */
const char *cli_name_of(cli_ctx *ctx, const char *cmd, const char *arg, int by_key);
/* A command's exit code as lockopts map it: 1 to --exit-busy (-E), 3 to
 * --exit-lost, 2 and 4 to --exit-error. */
int cli_code(const lockopts *o, int code);
/* After an acquire of ttl_ms that took took_ms: a lease too short to be of
 * use (no validity left) is released and refused with the reason.  0, or
 * EXIT_USAGE (said, as cmd). */
/* The shortest lease run and hold renew: a renewal every third of it is a
 * round trip on a second connection, which a loaded host can take tens
 * of milliseconds to make. */
#define CLI_RENEWED_TTL_MIN 100
/* run and hold, before acquiring: a lease under CLI_RENEWED_TTL_MIN is
 * refused with the reason; 0, or EXIT_USAGE (said, as cmd). */
int cli_renewed_ttl_refused(const char *cmd, long long ttl_ms);
int cli_lease_too_short(relock_client *c, relock_lock *l, long long ttl_ms, long long took_ms,
                        const char *cmd, int renewed);
/* relock_acquire() for the commands: with several servers (a quorum), an
 * attempt that too few servers answered (RELOCK_EIO) is made again until
 * a bounded wait (wait_ms, or the configured one) runs out, as a held lock
 * would be waited for; an unbounded wait fails at once, as on one server,
 * so that servers all down are said. */
relock_status cli_acquire(cli_ctx *ctx, relock_client *c, const char *cmd, const char *name,
                          long long ttl_ms, long long wait_ms, relock_lock **l);
/* -v: says on stderr who holds NAME (value, fence, when its key ends,
 * owner), from a look at the key. */
void cli_say_holder(relock_client *c, const char *cmd, const char *name);
/* -v on a terminal: a line on stderr, rewritten each second after the
 * first, saying how long the wait for NAME has lasted, who holds it and
 * when the holder's lease ends (src/cli/progress.c).  NULL when there is
 * nothing to show (no -v, stderr no terminal); stop accepts NULL, clears
 * the line and may take up to one command timeout. */
typedef struct cli_progress cli_progress;
cli_progress *cli_progress_start(cli_ctx *ctx, const char *cmd, const char *name, int verbose);
void cli_progress_stop(cli_progress *p);

/* Who holds the lock (owner.c): the owner metadata a command writes.
 * OWNER_CALLER: the calling process holds it (acquire, extend): the record
 * names relock's parent, its command line or --owner TEXT.  OWNER_SELF:
 * relock holds it for its caller (hold).  OWNER_CMD: relock holds it for
 * the command it runs (run; cli_owner_cmd() names the command once
 * started).  Sets ctx->cfg before connecting; returns 0, or the exit code
 * (said). */
enum cli_owner_kind { OWNER_CALLER, OWNER_SELF, OWNER_CMD };
int cli_owner_setup(cli_ctx *ctx, const char *cmd, const lockopts *o, enum cli_owner_kind kind,
                    char *const *argv);
/* run: names the started command's pid in the record of l (best effort). */
void cli_owner_cmd(relock_lock *l, const lockopts *o, long pid, char *const *argv);
/* extend: the record of l keeps the holder's first acquisition time,
 * first=FIRST, before what cli_owner_setup() set (extend rewrites at=). */
void cli_owner_first(relock_lock *l, const char *first);
/* The longest --owner TEXT. */
#define CLI_OWNER_TEXT_MAX 200

/* Background renewal for run and hold (keep.c): relock_keep() with a loss
 * reported on a pipe that a poll() loop watches; no signal, no handler.
 * The loop also watches the clock: the lock counts as lost when the
 * validity relock computed has run out without a renewal, whatever the
 * renewal thread is still waiting for (a stalled server answers nothing,
 * and each try may take a command timeout). */
typedef struct cli_keeper {
    int fd[2];                /* fd[0] is readable once the lock is lost */
    volatile relock_status why; /* the loss, as on_lost reported it */
    relock_lock *l;           /* the kept lock */
    relock_client *c;         /* its client */
    int overdue;              /* the validity ran out before a renewal succeeded */
} cli_keeper;
/* Starts renewal of l; 0, or the exit code (said, as cmd). */
int cli_keep_start(cli_keeper *k, relock_client *c, relock_lock *l, const char *cmd);
/* The poll() timeout until the validity ends (at most a minute, to look
 * again), or -1 for a keeper never started. */
int cli_keep_timeout(const cli_keeper *k);
/* Whether the lock is lost: reported by the renewal, or its validity ran
 * out (then k->overdue is set). */
int cli_keep_lost(cli_keeper *k, int reported);
/* -v: renewals that fail are said as they happen (the library's events),
 * as cmd; before connecting. */
void cli_keep_verbose(cli_ctx *ctx, const char *cmd);
/* -v after a loss: what NAME's key holds now (value, fence, owner), or
 * that it is absent. */
void cli_keep_say_key(relock_client *c, const char *cmd, const char *name);
/* Says on stderr that the lock was lost, as cmd, with what. */
void cli_keep_say_lost(const cli_keeper *k, const char *what);
/* Frees the lock and client after a loss: when the renewal thread may be
 * waiting on a silent server (overdue), they are left to the process's
 * exit rather than waiting a command timeout or more for the thread. */
void cli_keep_free(cli_keeper *k, relock_lock *l, relock_client *c);
/* Closes the pipe; accepts a keeper never started. */
void cli_keep_close(cli_keeper *k);

/* CMD's process group (group.c): how many processes other than except
 * are alive in group pgid (zombies do not count). */
int cli_group_others(long pgid, long except);
/* Waits up to max_ms for group pgid to be gone; 0 when it is, else -1. */
int cli_group_wait_gone(long pgid, long long max_ms);

int cmd_acquire(cli_ctx *ctx, int argc, char **argv);
int cmd_release(cli_ctx *ctx, int argc, char **argv);
int cmd_extend(cli_ctx *ctx, int argc, char **argv);
int cmd_inspect(cli_ctx *ctx, int argc, char **argv);
int cmd_probe(cli_ctx *ctx, int argc, char **argv);
int cmd_run(cli_ctx *ctx, int argc, char **argv);
int cmd_scan(cli_ctx *ctx, int argc, char **argv);
int cmd_break(cli_ctx *ctx, int argc, char **argv);
int cmd_hold(cli_ctx *ctx, int argc, char **argv);

/* Per-command help texts, printed by --help. */
extern const char help_acquire[], help_release[], help_extend[], help_inspect[], help_probe[],
    help_run[];
extern const char help_scan[];
extern const char help_break[];
extern const char help_hold[];

#endif
