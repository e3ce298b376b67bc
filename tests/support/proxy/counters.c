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

/* Counts by name, and their total. */
typedef struct tally {
    struct {
        char name[64];
        long long count;
    } t[MAX_NAMES];
    size_t n;
    long long total;
} tally;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static tally refused;  /* refusals, by the proxy's names */
static tally commands; /* commands received, by name */

static void tally_add(tally *y, const char *name)
{
    size_t i;

    pthread_mutex_lock(&lock);
    y->total++;
    for (i = 0; i < y->n; i++) {
        if (strcmp(y->t[i].name, name) == 0) {
            y->t[i].count++;
            pthread_mutex_unlock(&lock);
            return;
        }
    }
    if (y->n < MAX_NAMES) {
        snprintf(y->t[y->n].name, sizeof(y->t[y->n].name), "%s", name);
        y->t[y->n].count = 1;
        y->n++;
    }
    pthread_mutex_unlock(&lock);
}

static long long tally_total(const tally *y)
{
    long long t;

    pthread_mutex_lock(&lock);
    t = y->total;
    pthread_mutex_unlock(&lock);
    return t;
}

/* The counts as an array of "NAME COUNT" strings. */
static int tally_list(const tally *y, pbuf *out)
{
    size_t i;
    int rc = 0;

    pthread_mutex_lock(&lock);
    if (resp_add_array(out, y->n) < 0)
        rc = -1;
    for (i = 0; rc == 0 && i < y->n; i++) {
        char line[96];
        int len = snprintf(line, sizeof(line), "%s %lld", y->t[i].name, y->t[i].count);

        if (len < 0 || (size_t)len >= sizeof(line) || resp_add_bulk(out, line, (size_t)len) < 0)
            rc = -1;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

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
    tally_add(&commands, name);
}

long long counters_commands_total(void)
{
    return tally_total(&commands);
}

int counters_commands_list(pbuf *out)
{
    return tally_list(&commands, out);
}

void counters_add(const char *name)
{
    tally_add(&refused, name);
}

long long counters_total(void)
{
    return tally_total(&refused);
}

int counters_list(pbuf *out)
{
    return tally_list(&refused, out);
}

void counters_reset(void)
{
    pthread_mutex_lock(&lock);
    refused.n = 0;
    refused.total = 0;
    commands.n = 0;
    commands.total = 0;
    pthread_mutex_unlock(&lock);
}
