/*
 * CMD's process group (run): who is left in it, read from /proc, since
 * relock is the parent of CMD alone and its background children pass to
 * init when CMD exits.  A zombie counts as gone: it runs nothing, and
 * whoever reaps it (init, in a container perhaps late) is not relock.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

int cli_group_others(long pgid, long except)
{
    DIR *d = opendir("/proc");
    if (!d)
        return kill((pid_t)-pgid, 0) == 0 || errno != ESRCH; /* no /proc: anyone at all */
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!isdigit((unsigned char)e->d_name[0]))
            continue;
        long pid = strtol(e->d_name, NULL, 10);
        if (pid == except)
            continue;
        char path[64], buf[512];
        snprintf(path, sizeof path, "/proc/%ld/stat", pid);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = '\0';
        /* "pid (comm) state ppid pgrp ...": comm may hold anything, so
         * the fields are read after its last ')'. */
        char *p = strrchr(buf, ')');
        char state;
        long ppid, grp;
        if (!p || sscanf(p + 1, " %c %ld %ld", &state, &ppid, &grp) != 3)
            continue;
        if (grp == pgid && state != 'Z' && state != 'X')
            n++;
    }
    closedir(d);
    return n;
}

int cli_group_wait_gone(long pgid, long long max_ms)
{
    struct timespec step = {0, 20 * 1000000L};
    for (long long waited = 0; waited <= max_ms; waited += 20) {
        if (cli_group_others(pgid, 0) == 0)
            return 0;
        nanosleep(&step, NULL);
    }
    return -1;
}
