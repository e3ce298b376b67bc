/*
 * Background renewal for the commands that hold a lock while something
 * else happens (run, hold): the library's relock_keep() renews on a
 * thread and connection of its own; a loss comes back as a byte on a
 * pipe, which the command's poll() loop watches beside its signalfd.  No
 * signal is used, so none a user sends can be read as a loss.
 *
 * The deadline is the command's own: the poll() loop wakes when the
 * validity relock computed ends (relock_lock_validity_ms() follows the
 * renewals) and counts the lock lost then, renewal thread or not.  A
 * server that stalls answers no renewal, and the thread may spend a
 * command timeout on each try and more on a reconnect, so waiting for it
 * to give up would leave CMD running after another client could take the
 * lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static void on_lost(relock_lock *l, relock_status why, void *arg)
{
    (void)l;
    cli_keeper *k = arg;
    k->why = why;
    ssize_t n = write(k->fd[1], "x", 1);
    (void)n; /* non-blocking: a full pipe already says it */
}

int cli_keep_start(cli_keeper *k, relock_client *c, relock_lock *l, const char *cmd)
{
    k->why = RELOCK_LOST;
    k->fd[0] = k->fd[1] = -1;
    k->l = NULL;
    k->c = c;
    k->overdue = 0;
    if (pipe2(k->fd, O_CLOEXEC | O_NONBLOCK) < 0) {
        k->fd[0] = k->fd[1] = -1;
        cli_error("%s: %s", cmd, strerror(errno));
        return EXIT_SERVER;
    }
    relock_status st = relock_keep(l, on_lost, k);
    if (st != RELOCK_OK) {
        char what[64];
        snprintf(what, sizeof what, "%s: renewal", cmd);
        return cli_fail(c, st, what);
    }
    k->l = l;
    return 0;
}

int cli_keep_timeout(const cli_keeper *k)
{
    if (!k->l)
        return -1;
    long long ms = relock_lock_validity_ms(k->l);
    return ms > 60000 ? 60000 : (int)ms;
}

int cli_keep_lost(cli_keeper *k, int reported)
{
    if (reported)
        return 1;
    if (k->l && relock_lock_validity_ms(k->l) <= 0) {
        k->overdue = 1;
        return 1;
    }
    return 0;
}

void cli_keep_say_lost(const cli_keeper *k, const char *what)
{
    relock_status why = k->why;
    if (k->overdue)
        cli_error("%s: its validity ran out before a renewal succeeded", what);
    else
        cli_error("%s: %s", what,
                  why == RELOCK_LOST ? "it was taken, deleted or expired" : relock_strerror(why));
}

/* -v: the renewal thread's events, said as they happen (stderr is
 * written whole per call, so lines do not mix with the main thread's). */
static void on_event(const relock_event *ev, void *arg)
{
    const char *cmd = arg;
    if (ev->kind == RELOCK_EVENT_RENEW_FAILED)
        fprintf(stderr,
                "relock: %s: renewal of %s failed: %s; %lld ms of validity left, trying again\n",
                cmd, ev->name, relock_strerror(ev->status), ev->validity_ms);
}

void cli_keep_verbose(cli_ctx *ctx, const char *cmd)
{
    relock_config_set_event_fn(ctx->cfg, on_event, (void *)cmd);
}

void cli_keep_say_key(relock_client *c, const char *cmd, const char *name)
{
    relock_inspect_info *in = NULL;
    relock_status st = relock_inspect(c, name, &in);
    if (st != RELOCK_OK)
        cli_error("%s: cannot read what %s's key holds: %s", cmd, name, relock_strerror(st));
    else if (relock_inspect_info_kind(in) == RELOCK_VALUE_NONE)
        cli_error("%s: %s's key is absent (deleted or expired); fence %lld", cmd, name,
                  relock_inspect_info_fence(in));
    else
        cli_say_holder(c, cmd, name);
    relock_inspect_info_free(in);
}

/* What an overdue loss leaves to the process's exit, kept reachable. */
static relock_lock *left_lock;
static relock_client *left_client;

void cli_keep_free(cli_keeper *k, relock_lock *l, relock_client *c)
{
    if (k->overdue) {
        left_lock = l;
        left_client = c;
        return;
    }
    relock_lock_free(l); /* stops the renewal before its pipe closes */
    relock_client_free(c);
}

void cli_keep_close(cli_keeper *k)
{
    if (k->overdue)
        return; /* the renewal thread may still write to it */
    for (int i = 0; i < 2; i++) {
        if (k->fd[i] >= 0)
            close(k->fd[i]);
        k->fd[i] = -1;
    }
}
