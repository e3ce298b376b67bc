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
    pthread_mutex_unlock(&lock);
}
