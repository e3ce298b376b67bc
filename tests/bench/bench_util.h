/* Small helpers of relock_bench: clocks, CPU pinning, memory figures,
 * statistics, a key/value list, and JSON strings. */
#ifndef RELOCK_BENCH_UTIL_H
#define RELOCK_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* Monotonic nanoseconds (comparable between processes of one machine). */
uint64_t bu_now_ns(void);
/* Sleeps until the monotonic time t (ns). */
void bu_sleep_until_ns(uint64_t t);
/* Wall-clock milliseconds since the epoch. */
long long bu_wall_ms(void);

/* Pins the calling process to one CPU; 0 on success. */
int bu_pin_self(int cpu);
/* Pins the calling process to the CPUs in text ("0", "0,1"); 0 on success. */
int bu_pin_self_list(const char *list);
/* The CPUs pid may run on, as "0" or "0,1" (pid 0: the caller). */
void bu_cpus_of(pid_t pid, char *out, size_t len);
/* The first two CPUs the caller may run on; returns how many exist (0-2). */
int bu_first_cpus(int cpu[2]);

/* A line "Name: N kB" of /proc/self/status, in bytes; -1 when absent.
 * Uses no heap memory, so that measuring does not change the figure. */
long long bu_status_bytes(const char *name);
/* Resets VmHWM to the current RSS (clear_refs 5); 0 on success. */
int bu_reset_hwm(void);

/* A whole number text in [lo, hi] into *out; 0 on success, -1 otherwise. */
int bu_parse_long(const char *s, long lo, long hi, long *out);

/* Median of n values (n >= 1); reorders v. */
double bu_median(double *v, int n);
/* The p-th percentile (0 < p <= 100) of n values by nearest rank: the
 * smallest value with at least p % of the values at or below it (n >= 1);
 * sorts v. */
double bu_percentile(double *v, int n, double p);

/* A 32-lowercase-hex token from a xorshift state: cheap, not secure. */
void bu_token(uint64_t *state, char out[33]);

/* A list of "key value" lines as a phase prints them. */
#define BU_KV_MAX 256
typedef struct bu_kv {
    int n;
    char key[BU_KV_MAX][40];
    char val[BU_KV_MAX][400];
} bu_kv;
/* Parses text of lines "key value..." into kv (later keys win). */
void bu_kv_parse(bu_kv *kv, const char *text);
/* The value of key, or NULL. */
const char *bu_kv_get(const bu_kv *kv, const char *key);
/* The value of key as a number, or NaN. */
double bu_kv_num(const bu_kv *kv, const char *key);

/* Reads what is there from fd, waiting until the monotonic time deadline
 * (ns) at most: bytes read, 0 at end of file, -1 on timeout or error. */
int bu_read_deadline(int fd, char *buf, size_t len, uint64_t deadline);

/* Writes s as a JSON string (with quotes). */
void bu_json_str(FILE *f, const char *s);

#endif
