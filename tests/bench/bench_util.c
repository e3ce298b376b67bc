/* Helpers of relock_bench (see bench_util.h). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"

uint64_t bu_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void bu_sleep_until_ns(uint64_t t)
{
    struct timespec ts = {(time_t)(t / 1000000000u), (long)(t % 1000000000u)};
    /* Bounded: each EINTR resumes towards the same absolute time. */
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

long long bu_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int bu_pin_self(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof set, &set);
}

int bu_pin_self_list(const char *list)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    const char *p = list;
    while (*p) {
        char *end;
        long cpu = strtol(p, &end, 10);
        if (end == p || cpu < 0 || cpu >= CPU_SETSIZE)
            return -1;
        CPU_SET((int)cpu, &set);
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return -1;
    }
    return sched_setaffinity(0, sizeof set, &set);
}

void bu_cpus_of(pid_t pid, char *out, size_t len)
{
    cpu_set_t set;
    out[0] = '\0';
    if (sched_getaffinity(pid, sizeof set, &set) != 0) {
        snprintf(out, len, "?");
        return;
    }
    size_t used = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE && used + 8 < len; cpu++) {
        if (!CPU_ISSET(cpu, &set))
            continue;
        int n = snprintf(out + used, len - used, "%s%d", used ? "," : "", cpu);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

int bu_first_cpus(int cpu[2])
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return 0;
    int n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
        if (CPU_ISSET(c, &set))
            cpu[n++] = c;
    return n;
}

long long bu_status_bytes(const char *name)
{
    char buf[8192];
    int fd = open("/proc/self/status", O_RDONLY);
    if (fd < 0)
        return -1;
    size_t got = 0;
    ssize_t n;
    while (got < sizeof buf - 1 && (n = read(fd, buf + got, sizeof buf - 1 - got)) > 0)
        got += (size_t)n;
    close(fd);
    buf[got] = '\0';
    size_t nl = strlen(name);
    for (char *line = buf; line && *line;) {
        if (strncmp(line, name, nl) == 0 && line[nl] == ':')
            return strtoll(line + nl + 1, NULL, 10) * 1024;
        line = strchr(line, '\n');
        if (line)
            line++;
    }
    return -1;
}

int bu_reset_hwm(void)
{
    int fd = open("/proc/self/clear_refs", O_WRONLY);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, "5", 1);
    close(fd);
    return n == 1 ? 0 : -1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bu_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double bu_percentile(double *v, int n, double p)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    int rank = (int)ceil(p / 100.0 * (double)n); /* 1-based */
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return v[rank - 1];
}

static uint64_t next64(uint64_t *s)
{
    uint64_t x = *s ? *s : 0x9e3779b97f4a7c15ull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}

void bu_token(uint64_t *state, char out[33])
{
    static const char hex[] = "0123456789abcdef";
    uint64_t a = next64(state), b = next64(state);
    for (int i = 0; i < 16; i++) {
        out[i] = hex[(a >> (4 * i)) & 15];
        out[16 + i] = hex[(b >> (4 * i)) & 15];
    }
    out[0] = 'a'; /* never all digits, as relock's tokens */
    out[32] = '\0';
}

void bu_kv_parse(bu_kv *kv, const char *text)
{
    const char *p = text;
    while (*p) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        const char *sp = memchr(p, ' ', len);
        if (sp && kv->n < BU_KV_MAX) {
            size_t kl = (size_t)(sp - p);
            char key[40];
            snprintf(key, sizeof key, "%.*s", (int)(kl < 39 ? kl : 39), p);
            int slot = kv->n;
            for (int i = 0; i < kv->n; i++)
                if (strcmp(kv->key[i], key) == 0)
                    slot = i;
            if (slot == kv->n)
                kv->n++;
            snprintf(kv->key[slot], sizeof kv->key[slot], "%s", key);
            size_t vl = len - kl - 1;
            snprintf(kv->val[slot], sizeof kv->val[slot], "%.*s", (int)(vl < 399 ? vl : 399),
                     sp + 1);
        }
        p = eol ? eol + 1 : p + len;
    }
}

const char *bu_kv_get(const bu_kv *kv, const char *key)
{
    for (int i = 0; i < kv->n; i++)
        if (strcmp(kv->key[i], key) == 0)
            return kv->val[i];
    return NULL;
}

double bu_kv_num(const bu_kv *kv, const char *key)
{
    const char *v = bu_kv_get(kv, key);
    if (!v)
        return NAN;
    char *end;
    double d = strtod(v, &end);
    return end == v ? NAN : d;
}

void bu_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

int bu_read_deadline(int fd, char *buf, size_t len, uint64_t deadline)
{
    for (;;) {
        uint64_t now = bu_now_ns();
        if (now >= deadline)
            return -1;
        struct pollfd p = {fd, POLLIN, 0};
        int n = poll(&p, 1, (int)((deadline - now) / 1000000u) + 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        ssize_t got = read(fd, buf, len);
        if (got < 0 && errno == EINTR)
            continue;
        return (int)got;
    }
}

int bu_parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}
