/*
 * fuzz_replies: the library against a server that answers anything.
 *
 * Input:  byte 0  bits 0-2 the server version (index mod 5 into versions[]),
 *                 bit 3 also run mode "auto" first, bit 4 with
 *                 migration.legacy_clients = false;
 *         byte 1  flags F_* below (configuration variants, INFO from the
 *                 input, scan);
 *         rest    RESP replies, served in order to whatever the library asks
 *                 (fake_server.h).
 *
 * For each mode (auto when asked, then modern, legacy, bridge) a fixed
 * scenario runs on a client of its own: connect, server info, acquire with
 * wait 0, extend, release, inspect, adopt + extend + release, and scan when
 * asked.  Statuses may be anything; what must hold is the API's contract
 * (statuses from the list, handles set exactly when promised, error texts
 * present and terminated) and, under the sanitizers, no memory error, leak
 * or undefined behaviour.  Connect and command timeouts are 100 ms, so a
 * reply the library waits for in vain costs 100 ms, never a hang.
 *
 * Record mode (making seeds from a real server, see README.md):
 * RELOCK_FUZZ_UPSTREAM=PORT relays every request to 127.0.0.1:PORT, and
 * RELOCK_FUZZ_RECORD=FILE writes the two header bytes of the input and the
 * replies received to FILE: a seed that replays the same conversation.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake_server.h"
#include "fuzz_common.h"
#include "relock.h"

/* The longest value a lock holds (internal.h: RELOCK__VALUE_MAX). */
#define VALUE_MAX 64
#define LOCK_NAME "fz"

static const char *const versions[] = {"2.0.5", "2.2.15", "2.6.0", "2.6.12", "7.0.15"};
#define NVERSIONS (sizeof versions / sizeof versions[0])

enum {
    V_AUTO = 0x08,             /* also run mode "auto" */
    V_NO_LEGACY_CLIENTS = 0x10 /* ... with migration.legacy_clients = false */
};

enum {
    F_NOFENCE = 0x01,      /* fencing = false (modern: plain SET NX PX) */
    F_UNIT_MS = 0x02,      /* legacy.clock_unit = "ms" */
    F_CLOCK_SERVER = 0x04, /* legacy.clock = "server" (TIME) */
    F_SUFFIX = 0x08,       /* bridge.value_suffix = true */
    F_GC = 0x10,           /* legacy.gc_expire = true */
    F_NONOTIFY = 0x20,     /* wait.notify = false */
    F_RAW_INFO = 0x40,     /* INFO is answered from the input too */
    F_SCAN = 0x80          /* run relock_scan() as well */
};

static int strict;          /* RELOCK_FUZZ_STRICT: also check error detail == status */
static int record_port;     /* record mode: the real server's port */
static const char *record_path;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* hiredis writes with write(): a server that closed the connection
     * would otherwise end the process with SIGPIPE (the application's
     * choice; relock leaves signal dispositions alone). */
    signal(SIGPIPE, SIG_IGN);
    strict = getenv("RELOCK_FUZZ_STRICT") != NULL;
    const char *up = getenv("RELOCK_FUZZ_UPSTREAM");
    if (up) {
        record_port = atoi(up);
        record_path = getenv("RELOCK_FUZZ_RECORD");
        if (record_port <= 0 || !record_path) {
            fprintf(stderr, "fuzz_replies: RELOCK_FUZZ_UPSTREAM needs a port and "
                            "RELOCK_FUZZ_RECORD a file\n");
            exit(2);
        }
    }
    return 0;
}

/* The whole RESP reply to INFO for version v, as that version's INFO
 * starts (2.0 has no section headers). */
static size_t build_info(const char *v, char *out, size_t len)
{
    char body[512];
    int n = snprintf(body, sizeof body,
                     "%sredis_version:%s\r\nredis_git_sha1:00000000\r\nredis_mode:standalone\r\n"
                     "os:Linux 6.1.0 x86_64\r\narch_bits:64\r\nprocess_id:4242\r\n"
                     "tcp_port:6379\r\nuptime_in_seconds:100\r\n",
                     strncmp(v, "2.0.", 4) == 0 ? "" : "# Server\r\n", v);
    int m = snprintf(out, len, "$%d\r\n%s\r\n", n, body);
    return (size_t)m;
}

/*
 * hiredis 0.14 allocates an array reply's element table as soon as it reads
 * the header: "*1000000000" makes any hiredis client ask for 8 GB, which
 * libFuzzer reports as out-of-memory.  That is hiredis's behaviour, which
 * relock cannot bound with the 0.14 API (1.x has reader->maxelements), so
 * inputs announcing more than ARRAY_MAX elements anywhere are skipped.
 * relock's largest legitimate array is a KEYS reply of at most
 * RELOCK_SCAN_KEYS_FALLBACK_MAX keys.
 */
#define ARRAY_MAX 100000

static int huge_array(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '*')
            continue;
        unsigned long long v = 0;
        for (size_t j = i + 1; j < n && p[j] >= '0' && p[j] <= '9' && v <= ARRAY_MAX; j++)
            v = v * 10 + (p[j] - '0');
        if (v > ARRAY_MAX)
            return 1;
    }
    return 0;
}

/* ------------------------------------------------------------ checks */

static void check_status(relock_client *c, relock_status st, const char *what)
{
    FZ_CHECK_MSG(strcmp(relock_status_name(st), "RELOCK_UNKNOWN") != 0, "%s returned %d", what,
                 (int)st);
    FZ_CHECK(relock_strerror(st) != NULL);
    if (!c)
        return;
    const relock_error *e = relock_client_error(c);
    FZ_CHECK(e && e->message && e->server && e->file);
    FZ_CHECK(strlen(e->message) < 512 && strlen(e->server) < 256);
    if (strict && st != RELOCK_OK)
        FZ_CHECK_MSG(e->status == st, "%s returned %s but the error detail says %s: %s", what,
                     relock_status_name(st), relock_status_name(e->status), e->message);
}

/* ttl_ms > 0: a lock this client acquired (and perhaps extended) with that
 * ttl, whose validity cannot exceed it.  0: an adopted lock, whose
 * validity the value and the (server's) clock tell. */
static void check_lock(const relock_lock *l, long long ttl_ms)
{
    const char *v = relock_lock_value(l);
    FZ_CHECK(v && *v && strlen(v) < VALUE_MAX);
    FZ_CHECK(strcmp(relock_lock_name(l), LOCK_NAME) == 0);
    long long valid = relock_lock_validity_ms(l);
    FZ_CHECK_MSG(valid >= 0 && (ttl_ms == 0 || valid <= ttl_ms),
                 "validity %lld ms for a ttl of %lld ms", valid, ttl_ms);
}

/* Inspection: *out is set exactly on success, and the value's length
 * is the one the accessor tells. */
static void check_inspect(relock_status st, const relock_inspect_info *ii)
{
    FZ_CHECK((st == RELOCK_OK) == (ii != NULL));
    relock_value_kind k = relock_inspect_info_kind(ii);
    FZ_CHECK(k >= RELOCK_VALUE_NONE && k <= RELOCK_VALUE_UNKNOWN);
    size_t len = 0;
    const char *v = relock_inspect_info_value(ii, &len);
    FZ_CHECK(v && v[len] == '\0');
    FZ_CHECK(relock_inspect_info_owner(ii) != NULL);
    int unit = relock_inspect_info_ts_unit_ms(ii);
    FZ_CHECK(unit == 0 || unit == 1);
}

static void check_scan(relock_status st, const relock_scan_result *r)
{
    FZ_CHECK(r != NULL || st == RELOCK_ENOMEM);
    relock_scan_verdict verdict = relock_scan_result_verdict(r);
    FZ_CHECK(verdict >= RELOCK_SCAN_STAY_BRIDGE && verdict <= RELOCK_SCAN_NO_EVIDENCE);
    size_t len = 0;
    const char *ex = relock_scan_result_legacy_example(r, &len);
    FZ_CHECK(ex && ex[len] == '\0');
    FZ_CHECK(relock_scan_result_marker_key(r) && relock_scan_result_match(r) &&
             relock_scan_result_verdict_text(r));
    int unreadable = relock_scan_result_marker_unreadable(r);
    FZ_CHECK(unreadable == 0 || unreadable == 1);
    int complete = relock_scan_result_complete(r);
    if (st != RELOCK_OK) {
        FZ_CHECK(complete == 0);
        return;
    }
    long long sum = 0;
    for (int k = RELOCK_SCAN_LEGACY; k <= RELOCK_SCAN_GONE; k++)
        sum += relock_scan_result_count(r, (relock_scan_counter)k);
    long long examined = relock_scan_result_count(r, RELOCK_SCAN_EXAMINED);
    FZ_CHECK_MSG(examined == sum, "scan examined %lld keys but classed %lld", examined, sum);
    /* A verdict of "safe" needs a complete walk without a live legacy lock. */
    if (verdict == RELOCK_SCAN_MODERN_SAFE || verdict == RELOCK_SCAN_MODERN_SAFE_UNSEEN)
        FZ_CHECK(complete && relock_scan_result_count(r, RELOCK_SCAN_LEGACY) == 0);
}

/* ------------------------------------------------------------ the scenario */

static void set(relock_config *cfg, const char *name, const char *value)
{
    relock_status st = relock_config_set(cfg, name, value);
    FZ_CHECK_MSG(st == RELOCK_OK, "config %s = %s: %s", name, value,
                 relock_config_error(cfg)->message);
}

/* A value to adopt: what the mode would have written 30 s from now. */
static void adopt_value(relock_mode m, unsigned flags, char *out, size_t len)
{
    if (m == RELOCK_MODE_MODERN) {
        snprintf(out, len, "0123456789abcdef0123456789abcdef");
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (flags & F_UNIT_MS)
        snprintf(out, len, "%lld", (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + 30001);
    else
        snprintf(out, len, "%lld", (long long)ts.tv_sec + 31);
}

static void scenario(int port, relock_mode mode, unsigned vbyte, unsigned flags)
{
    relock_config *cfg = relock_config_new();
    FZ_CHECK(cfg);
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    FZ_CHECK(relock_config_set_url(cfg, url) == RELOCK_OK);
    set(cfg, "mode", relock_mode_name(mode));
    set(cfg, "connect_timeout_ms", "100");
    set(cfg, "command_timeout_ms", "100");
    if (flags & F_NOFENCE)
        set(cfg, "fencing", "false");
    if (flags & F_UNIT_MS)
        set(cfg, "legacy.clock_unit", "ms");
    if (flags & F_CLOCK_SERVER)
        set(cfg, "legacy.clock", "server");
    if (flags & F_SUFFIX)
        set(cfg, "bridge.value_suffix", "true");
    if (flags & F_GC)
        set(cfg, "legacy.gc_expire", "true");
    if (flags & F_NONOTIFY)
        set(cfg, "wait.notify", "false");
    if (vbyte & V_NO_LEGACY_CLIENTS)
        set(cfg, "migration.legacy_clients", "false");
    long long ttl = relock_config_ttl_ms(cfg);

    relock_client *c = NULL;
    relock_status st = relock_connect(cfg, &c);
    relock_config_free(cfg);
    FZ_CHECK(c != NULL);
    check_status(c, st, "connect");
    relock_mode used = relock_client_mode(c);
    if (st == RELOCK_OK) {
        FZ_CHECK(mode == RELOCK_MODE_AUTO ? used != RELOCK_MODE_AUTO : used == mode);
        FZ_CHECK(relock_client_mode_reason(c) && *relock_client_mode_reason(c));
    }

    relock_server_info *si = NULL;
    st = relock_client_server(c, &si);
    check_status(c, st, "server info");
    FZ_CHECK((st == RELOCK_OK) == (si != NULL));
    if (st == RELOCK_OK)
        FZ_CHECK(strlen(relock_server_info_version(si)) < 32);
    relock_server_info_free(si);

    relock_lock *l = NULL;
    st = relock_acquire(c, LOCK_NAME, 0, 0, &l);
    check_status(c, st, "acquire");
    FZ_CHECK((st == RELOCK_OK) == (l != NULL));
    if (l) {
        check_lock(l, ttl);
        st = relock_extend(l, 0);
        check_status(c, st, "extend");
        check_lock(l, ttl);
        st = relock_release(l);
        check_status(c, st, "release");
        FZ_CHECK(relock_lock_validity_ms(l) == 0 || (st != RELOCK_OK && st != RELOCK_LOST));
        relock_lock_free(l);
        l = NULL;
    }

    relock_inspect_info *ii = NULL;
    st = relock_inspect(c, LOCK_NAME, &ii);
    check_status(c, st, "inspect");
    check_inspect(st, ii);
    relock_inspect_info_free(ii);

    char value[VALUE_MAX];
    adopt_value(used, flags, value, sizeof value);
    st = relock_lock_adopt(c, LOCK_NAME, value, 7, 0, &l);
    check_status(c, st, "adopt");
    FZ_CHECK((st == RELOCK_OK) == (l != NULL));
    if (l) {
        st = relock_extend(l, 0);
        check_status(c, st, "extend (adopted)");
        check_lock(l, st == RELOCK_OK ? ttl : 0);
        st = relock_release(l);
        check_status(c, st, "release (adopted)");
        relock_lock_free(l);
    }

    if (flags & F_SCAN) {
        relock_scan_result *sr = NULL;
        st = relock_scan(c, NULL, &sr);
        check_status(c, st, "scan");
        check_scan(st, sr);
        relock_scan_result_free(sr);
    }
    relock_client_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2 || huge_array(data, size))
        return 0;
    fz_server *srv = fz_server_get();
    FZ_CHECK(srv != NULL);
    unsigned vbyte = data[0], flags = data[1];
    char info[768];
    size_t info_len = build_info(versions[(vbyte & 7) % NVERSIONS], info, sizeof info);

    FILE *rec = NULL;
    if (record_port) {
        rec = fopen(record_path, "wb");
        FZ_CHECK(rec != NULL);
        fwrite(data, 1, 2, rec);
        fz_server_record(srv, record_port, rec);
        size = 2; /* the replies come from the real server */
    }
    FZ_CHECK(fz_server_begin(srv, data + 2, size - 2, info, info_len, (flags & F_RAW_INFO) != 0) ==
             0);
    int port = fz_server_port(srv);
    if (vbyte & V_AUTO)
        scenario(port, RELOCK_MODE_AUTO, vbyte, flags);
    scenario(port, RELOCK_MODE_MODERN, vbyte, flags);
    scenario(port, RELOCK_MODE_LEGACY, vbyte, flags);
    scenario(port, RELOCK_MODE_BRIDGE, vbyte, flags);
    fz_server_end(srv);
    if (rec) {
        fz_server_record(srv, 0, NULL);
        fclose(rec);
    }
    return 0;
}
