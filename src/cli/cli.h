/* Declarations shared by the relock command's files. */
#ifndef RELOCK_CLI_H
#define RELOCK_CLI_H

#include <stddef.h>

#include "relock.h"
#include "relockx.h"

/* Exit codes (DESIGN §8). */
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
} cli_ctx;

/* Prints "relock: MSG" on stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* relock_acquire() for the commands that take a lock (acquire, hold, run):
 * in modern mode a wait starts with one attempt that does not wait, so
 * that a classic holder met is said on stderr at once rather than at the
 * end of the wait (scan.c: the migration's emergency). */
relock_status cli_acquire(relock_client *c, const char *cmd, const char *name, long long ttl_ms,
                          long long wait_ms, relock_lock **l);
/* After getopt_long() (opterr = 0) refused an option: prints the one-line
 * error, a missing value or an unknown option, for command cmd (NULL: the
 * top level), naming the option as the user wrote it. */
struct option;
void cli_bad_option(const char *cmd, const char *optstring, const struct option *longopts,
                    char *const *argv);
/* Prints the client's (or config's) last error and returns the exit code
 * for status st. */
int cli_fail(relock_client *c, relock_status st, const char *what);
int cli_exit_code(relock_status st);
/* Connects with ctx->cfg; on failure prints and returns NULL with *code. */
relock_client *cli_connect(cli_ctx *ctx, int *code);

/* Options shared by the commands; cli_parse_lockopts() returns 0 to go
 * on, or 1000 + the exit code to stop with (help printed, bad option). */
typedef struct lockopts {
    long long ttl_ms;    /* -t; 0: configured */
    long long wait_ms;   /* -w/-n; RELOCK_WAIT_DEFAULT otherwise */
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
    CLI_OWNER = 8  /* --owner TEXT */
};
int cli_parse_lockopts(int argc, char **argv, const char *optstring, const char *help,
                       unsigned accept, lockopts *o);
/* A command's exit code as lockopts map it: 1 to --exit-busy (-E), 3 to
 * --exit-lost, 2 and 4 to --exit-error. */
int cli_code(const lockopts *o, int code);
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
/* The longest --owner TEXT. */
#define CLI_OWNER_TEXT_MAX 200

/* Background renewal for run and hold (keep.c): relock_keep() with a loss
 * reported on a pipe that a poll() loop watches; no signal, no handler. */
typedef struct cli_keeper {
    int fd[2];                /* fd[0] is readable once the lock is lost */
    volatile relock_status why; /* the loss, as on_lost reported it */
} cli_keeper;
/* Starts renewal of l; 0, or the exit code (said, as cmd). */
int cli_keep_start(cli_keeper *k, relock_client *c, relock_lock *l, const char *cmd);
/* Says on stderr that the lock was lost, as cmd, with what. */
void cli_keep_say_lost(const cli_keeper *k, const char *what);
/* Closes the pipe; accepts a keeper never started. */
void cli_keep_close(cli_keeper *k);

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
