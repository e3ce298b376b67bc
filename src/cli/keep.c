/*
 * Background renewal for the commands that hold a lock while something
 * else happens (run, hold): the library's relock_keep() renews on a
 * thread and connection of its own; a loss comes back as a byte on a
 * pipe, which the command's poll() loop watches beside its signalfd.  No
 * signal is used, so none a user sends can be read as a loss.
 */
#include <errno.h>
#include <fcntl.h>
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
    return 0;
}

void cli_keep_say_lost(const cli_keeper *k, const char *what)
{
    relock_status why = k->why;
    cli_error("%s: %s", what,
              why == RELOCK_LOST ? "it was taken, deleted or expired" : relock_strerror(why));
}

void cli_keep_close(cli_keeper *k)
{
    for (int i = 0; i < 2; i++) {
        if (k->fd[i] >= 0)
            close(k->fd[i]);
        k->fd[i] = -1;
    }
}
