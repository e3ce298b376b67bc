/*
 * counters: refusal counters behind one mutex (see counters.h).
 *
 * Names only ever come from the proxy's own tables (command, option and
 * subcommand names), so a small fixed table is enough; should it ever
 * fill, the total still counts.
 */
#include "counters.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "resp.h"

#define MAX_NAMES 512

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char name[64];
    long long count;
} table[MAX_NAMES];
static size_t nnames;
static long long total;
/* Commands received, by name. */
static struct {
    char name[64];
    long long count;
} cmds[MAX_NAMES];
static size_t ncmds;
static long long cmds_total;

void counters_command(const proxy_arg *a)
{
    char name[64];
    size_t n = a->n < sizeof(name) - 1 ? a->n : sizeof(name) - 1;
    size_t i;

    for (i = 0; i < n; i++) {
        char ch = a->p[i];

        if (ch == '\r' || ch == '\n' || ch == '\0' || ch == ' ')
            ch = '_';
        name[i] = (char)(ch >= 'a' && ch <= 'z' ? ch - 'a' + 'A' : ch);
    }
    name[n] = '\0';
    pthread_mutex_lock(&lock);
    cmds_total++;
    for (i = 0; i < ncmds; i++) {
        if (strcmp(cmds[i].name, name) == 0) {
            cmds[i].count++;
            pthread_mutex_unlock(&lock);
            return;
        }
    }
    if (ncmds < MAX_NAMES) {
        memcpy(cmds[ncmds].name, name, n + 1);
        cmds[ncmds].count = 1;
        ncmds++;
    }
    pthread_mutex_unlock(&lock);
}

long long counters_commands_total(void)
{
    long long t;

    pthread_mutex_lock(&lock);
    t = cmds_total;
    pthread_mutex_unlock(&lock);
    return t;
}

int counters_commands_list(pbuf *out)
{
    size_t i;
    int rc = 0;

    pthread_mutex_lock(&lock);
    if (resp_add_array(out, ncmds) < 0)
        rc = -1;
    for (i = 0; rc == 0 && i < ncmds; i++) {
        char line[96];
        int len = snprintf(line, sizeof(line), "%s %lld", cmds[i].name, cmds[i].count);

        if (len < 0 || (size_t)len >= sizeof(line) || resp_add_bulk(out, line, (size_t)len) < 0)
            rc = -1;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

void counters_add(const char *name)
{
    size_t i;

    pthread_mutex_lock(&lock);
    total++;
    for (i = 0; i < nnames; i++) {
        if (strcmp(table[i].name, name) == 0) {
            table[i].count++;
            pthread_mutex_unlock(&lock);
            return;
        }
    }
    if (nnames < MAX_NAMES) {
        snprintf(table[nnames].name, sizeof(table[nnames].name), "%s", name);
        table[nnames].count = 1;
        nnames++;
    }
    pthread_mutex_unlock(&lock);
}

long long counters_total(void)
{
    long long t;

    pthread_mutex_lock(&lock);
    t = total;
    pthread_mutex_unlock(&lock);
    return t;
}

int counters_list(pbuf *out)
{
    size_t i;
    int rc = 0;

    pthread_mutex_lock(&lock);
    if (resp_add_array(out, nnames) < 0)
        rc = -1;
    for (i = 0; rc == 0 && i < nnames; i++) {
        char line[96];
        int len = snprintf(line, sizeof(line), "%s %lld", table[i].name,
                           table[i].count);

        if (len < 0 || (size_t)len >= sizeof(line) ||
            resp_add_bulk(out, line, (size_t)len) < 0)
            rc = -1;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

void counters_reset(void)
{
    pthread_mutex_lock(&lock);
    nnames = 0;
    total = 0;
    ncmds = 0;
    cmds_total = 0;
    pthread_mutex_unlock(&lock);
}
