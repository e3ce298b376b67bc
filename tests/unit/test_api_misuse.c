/*
 * Misuse of the public API: every function of relock.h and relock_async.h,
 * given NULL for each handle (and for each pointer it must have), returns
 * RELOCK_EINVAL or the harmless value its comment names, never crashes.
 * Runs without a server: every call here must refuse before any I/O.
 *
 * Each call goes through CALL(), which notes the function's name; the last
 * test reads both headers and fails for any RELOCK_EXTERN function that no
 * test here called, so a new function cannot be forgotten.  (Calls with a
 * live client and NULL pointers are in it_api, which needs a server.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "relock.h"
#include "relock_async.h"

#ifndef RELOCK_HEADER
#error "RELOCK_HEADER: the path of include/relock/relock.h"
#endif
#ifndef RELOCK_ASYNC_HEADER
#error "RELOCK_ASYNC_HEADER: the path of include/relock/relock_async.h"
#endif

#define MAX_CALLED 256
static const char *called[MAX_CALLED];
static int ncalled;

static void note(const char *name)
{
    for (int i = 0; i < ncalled; i++)
        if (strcmp(called[i], name) == 0)
            return;
    assert_true(ncalled < MAX_CALLED);
    called[ncalled++] = name;
}

/* The call, with its function's name noted. */
#define CALL(fn, ...) (note(#fn), fn(__VA_ARGS__))
#define CALL0(fn) (note(#fn), fn())

static void null_config(void **state)
{
    (void)state;
    assert_int_equal(CALL(relock_config_load_file, NULL, "/etc/relock.conf"), RELOCK_EINVAL);
    assert_int_equal(CALL(relock_config_set_url, NULL, "redis://127.0.0.1:1"), RELOCK_EINVAL);
    assert_int_equal(CALL(relock_config_set, NULL, "ttl_ms", "1000"), RELOCK_EINVAL);
    assert_int_equal(CALL(relock_config_error, NULL)->status, RELOCK_EINVAL);
    assert_string_not_equal(CALL(relock_config_error, NULL)->message, "");
    assert_true(CALL(relock_config_ttl_ms, NULL) == -1);
    assert_true(CALL(relock_config_wait_ms, NULL) == 0);
    assert_int_equal(CALL(relock_config_mode, NULL), RELOCK_MODE_AUTO);
    assert_string_equal(CALL(relock_config_key_prefix, NULL), "");
    assert_int_equal(CALL(relock_config_set_event_fn, NULL, NULL, NULL), RELOCK_EINVAL);
    CALL(relock_config_free, NULL);

    /* A configuration, and NULL for what each call needs. */
    relock_config *cfg = CALL0(relock_config_new);
    assert_non_null(cfg);
    assert_int_equal(relock_config_load_file(cfg, NULL), RELOCK_EINVAL);
    assert_int_equal(relock_config_set_url(cfg, NULL), RELOCK_EINVAL);
    assert_int_equal(relock_config_error(cfg)->status, RELOCK_EINVAL);
    assert_int_equal(relock_config_set(cfg, NULL, "1000"), RELOCK_EINVAL);
    assert_int_equal(relock_config_set(cfg, "ttl_ms", NULL), RELOCK_EINVAL);
    /* Nothing changed. */
    assert_true(relock_config_ttl_ms(cfg) == 30000);
    relock_config_free(cfg);
}

static void null_connect(void **state)
{
    (void)state;
    relock_client *c = (relock_client *)1; /* must be overwritten */
    assert_int_equal(CALL(relock_connect, NULL, &c), RELOCK_EINVAL);
    assert_null(c);
    relock_config *cfg = relock_config_new();
    assert_non_null(cfg);
    assert_int_equal(relock_connect(cfg, NULL), RELOCK_EINVAL);
    relock_config_free(cfg);
    assert_int_equal(CALL(relock_connect_url, "redis://127.0.0.1:1", NULL), RELOCK_EINVAL);
    assert_int_equal(CALL(relock_connect_file, "/nonexistent", NULL), RELOCK_EINVAL);
    /* A NULL URL or path: a client that says why, as for any bad value. */
    c = NULL;
    assert_int_equal(relock_connect_url(NULL, &c), RELOCK_EINVAL);
    assert_int_equal(relock_client_error(c)->status, RELOCK_EINVAL);
    relock_client_free(c);
    c = NULL;
    assert_int_equal(relock_connect_file(NULL, &c), RELOCK_EINVAL);
    assert_int_equal(relock_client_error(c)->status, RELOCK_EINVAL);
    relock_client_free(c);
}

/* relock_config_set_owner(): bad input is refused and changes nothing. */
static void owner_text(void **state)
{
    (void)state;
    assert_int_equal(CALL(relock_config_set_owner, NULL, 0, "x"), RELOCK_EINVAL);
    assert_int_equal(CALL(relock_lock_set_owner, NULL, 0, "x"), RELOCK_EINVAL);
    relock_config *cfg = relock_config_new();
    assert_non_null(cfg);
    assert_int_equal(relock_config_set_owner(cfg, 0, NULL), RELOCK_EINVAL);
    assert_int_equal(relock_config_error(cfg)->status, RELOCK_EINVAL);
    assert_int_equal(relock_config_set_owner(cfg, -1, "x"), RELOCK_EINVAL);
    char text[RELOCK_OWNER_MAX + 2];
    memset(text, 'a', sizeof text - 1);
    text[sizeof text - 1] = '\0'; /* one byte too long */
    assert_int_equal(relock_config_set_owner(cfg, 0, text), RELOCK_EINVAL);
    assert_non_null(strstr(relock_config_error(cfg)->message, "at most 256"));
    text[RELOCK_OWNER_MAX] = '\0'; /* exactly the limit */
    assert_int_equal(relock_config_set_owner(cfg, 0, text), RELOCK_OK);
    assert_int_equal(relock_config_set_owner(cfg, 42, "line\nbreak"), RELOCK_EINVAL);
    assert_non_null(strstr(relock_config_error(cfg)->message, "control character at byte 4"));
    assert_int_equal(relock_config_set_owner(cfg, 42, "cmd=deploy.sh --all"), RELOCK_OK);
    assert_int_equal(relock_config_set_owner(cfg, 0, ""), RELOCK_OK);
    relock_config_free(cfg);
}

static void null_client(void **state)
{
    (void)state;
    relock_lock *l = (relock_lock *)1;
    assert_int_equal(CALL(relock_acquire, NULL, "a", 1000, 0, &l), RELOCK_EINVAL);
    assert_null(l);
    l = (relock_lock *)1;
    assert_int_equal(CALL(relock_try_acquire, NULL, "a", 1000, &l), RELOCK_EINVAL);
    assert_null(l);
    l = (relock_lock *)1;
    assert_int_equal(CALL(relock_lock_adopt, NULL, "a", "v", 1, 1000, &l), RELOCK_EINVAL);
    assert_null(l);
    assert_int_equal(relock_acquire(NULL, "a", 1000, 0, NULL), RELOCK_EINVAL);
    assert_int_equal(relock_try_acquire(NULL, NULL, 1000, NULL), RELOCK_EINVAL);
    assert_int_equal(relock_lock_adopt(NULL, NULL, NULL, 0, 0, NULL), RELOCK_EINVAL);
    relock_inspect_info *info = (relock_inspect_info *)1;
    assert_int_equal(CALL(relock_inspect, NULL, "a", &info), RELOCK_EINVAL);
    assert_null(info);
    assert_int_equal(relock_inspect(NULL, NULL, NULL), RELOCK_EINVAL);
    assert_int_equal(CALL(relock_break, NULL, "a", NULL), RELOCK_EINVAL);
    assert_int_equal(CALL(relock_break_fenced, NULL, "a", "v", 1), RELOCK_EINVAL);
    relock_server_info *si = (relock_server_info *)1;
    assert_int_equal(CALL(relock_client_server, NULL, &si), RELOCK_EINVAL);
    assert_null(si);
    assert_int_equal(relock_client_server(NULL, NULL), RELOCK_EINVAL);
    CALL(relock_server_info_free, NULL);
    assert_string_equal(CALL(relock_server_info_version, NULL), "");
    assert_int_equal(CALL(relock_server_info_major, NULL), 0);
    assert_int_equal(CALL(relock_server_info_minor, NULL), 0);
    assert_int_equal(CALL(relock_server_info_patch, NULL), 0);
    assert_int_equal(CALL(relock_server_info_caps, NULL), 0);
    assert_string_equal(CALL(relock_server_info_host, NULL), "");
    assert_int_equal(CALL(relock_server_info_port, NULL), 0);
    static volatile sig_atomic_t never;
    assert_int_equal(CALL(relock_client_cancel_on, NULL, &never), RELOCK_EINVAL);
    assert_int_equal(relock_client_cancel_on(NULL, NULL), RELOCK_EINVAL);
    relock_paths *paths = (relock_paths *)1;
    assert_int_equal(CALL(relock_client_paths, NULL, &paths), RELOCK_EINVAL);
    assert_null(paths);
    assert_int_equal(relock_client_paths(NULL, NULL), RELOCK_EINVAL);
    CALL(relock_paths_free, NULL);
    assert_string_equal(CALL(relock_paths_get, NULL, RELOCK_PATH_RELEASE), "");
    assert_int_equal(CALL(relock_client_error, NULL)->status, RELOCK_EINVAL);
    assert_int_equal(CALL(relock_client_mode, NULL), RELOCK_MODE_AUTO);
    assert_string_equal(CALL(relock_client_mode_reason, NULL), "");
    assert_int_equal(CALL(relock_client_replicas_acked, NULL), -1);
    assert_string_equal(CALL(relock_scan_node, NULL), "");
    CALL(relock_client_free, NULL);
}

static void null_scan(void **state)
{
    (void)state;
    relock_scan_result *res = (relock_scan_result *)1;
    assert_int_equal(CALL(relock_scan, NULL, NULL, &res), RELOCK_EINVAL);
    assert_null(res);
    res = (relock_scan_result *)1;
    assert_int_equal(CALL(relock_scan_keys, NULL, NULL, NULL, NULL, &res), RELOCK_EINVAL);
    assert_null(res);
    assert_int_equal(relock_scan(NULL, NULL, NULL), RELOCK_EINVAL);
    assert_int_equal(relock_scan_keys(NULL, NULL, NULL, NULL, NULL), RELOCK_EINVAL);
}

static void null_lock(void **state)
{
    (void)state;
    assert_int_equal(CALL(relock_release, NULL), RELOCK_EINVAL);
    assert_int_equal(CALL(relock_extend, NULL, 1000), RELOCK_EINVAL);
    assert_int_equal(CALL(relock_keep, NULL, NULL, NULL), RELOCK_EINVAL);
    assert_int_equal(CALL(relock_keep_stop, NULL), RELOCK_EINVAL);
    assert_string_equal(CALL(relock_lock_name, NULL), "");
    assert_string_equal(CALL(relock_lock_value, NULL), "");
    assert_true(CALL(relock_lock_fence, NULL) == 0);
    assert_true(CALL(relock_lock_validity_ms, NULL) == 0);
    CALL(relock_lock_free, NULL);
}

/* The accessors of the result objects: the values of "nothing found". */
static void null_results(void **state)
{
    (void)state;
    size_t len = 7;
    assert_int_equal(CALL(relock_inspect_info_kind, NULL), RELOCK_VALUE_NONE);
    assert_string_equal(CALL(relock_inspect_info_value, NULL, &len), "");
    assert_int_equal(len, 0);
    assert_string_equal(relock_inspect_info_value(NULL, NULL), "");
    assert_true(CALL(relock_inspect_info_pttl_ms, NULL) == -2);
    assert_true(CALL(relock_inspect_info_ts_ms, NULL) == 0);
    assert_int_equal(CALL(relock_inspect_info_ts_unit_ms, NULL), 0);
    assert_true(CALL(relock_inspect_info_fence, NULL) == 0);
    assert_string_equal(CALL(relock_inspect_info_owner, NULL), "");
    assert_string_equal(CALL(relock_inspect_info_key, NULL), "");
    assert_int_equal(CALL(relock_inspect_info_waiters, NULL), -1);
    CALL(relock_inspect_info_free, NULL);

    for (int k = RELOCK_SCAN_EXAMINED; k <= RELOCK_SCAN_GONE + 1; k++)
        assert_true(CALL(relock_scan_result_count, NULL, (relock_scan_counter)k) == 0);
    len = 7;
    assert_string_equal(CALL(relock_scan_result_legacy_example, NULL, &len), "");
    assert_int_equal(len, 0);
    assert_string_equal(relock_scan_result_legacy_example(NULL, NULL), "");
    assert_string_equal(CALL(relock_scan_result_marker_key, NULL), "");
    assert_true(CALL(relock_scan_result_legacy_seen_ms, NULL) == -1);
    assert_int_equal(CALL(relock_scan_result_marker_unreadable, NULL), 0);
    assert_string_equal(CALL(relock_scan_result_match, NULL), "");
    assert_int_equal(CALL(relock_scan_result_keys_fallback, NULL), 0);
    assert_int_equal(CALL(relock_scan_result_complete, NULL), 0);
    assert_true(CALL(relock_scan_result_now_ms, NULL) == -1);
    assert_true(CALL(relock_scan_result_quiet_window_ms, NULL) == 0);
    assert_int_equal(CALL(relock_scan_result_verdict, NULL), RELOCK_SCAN_INCOMPLETE);
    assert_string_equal(CALL(relock_scan_result_verdict_text, NULL), "");
    assert_int_equal(CALL(relock_scan_result_cluster_masters, NULL), 0);
    assert_int_equal(CALL(relock_scan_result_watching_since_ms, NULL), -1);
    assert_int_equal(CALL(relock_scan_result_signature, NULL, RELOCK_SIG_TS_S), 0);
    assert_string_equal(CALL(relock_scan_result_families, NULL), "");
    CALL(relock_scan_result_free, NULL);
}

/* Functions without a handle: values outside their enums still give a
 * string (or the documented NULL), NULL input a harmless class. */
static void no_handle(void **state)
{
    (void)state;
    assert_non_null(CALL(relock_strerror, (relock_status)-1));
    assert_non_null(relock_strerror((relock_status)9999));
    assert_string_equal(CALL(relock_event_name, (relock_event_kind)0), "unknown");
    assert_non_null(CALL(relock_status_name, (relock_status)9999));
    assert_non_null(CALL0(relock_version));
    assert_non_null(CALL(relock_mode_name, (relock_mode)9999));
    assert_non_null(CALL(relock_scan_verdict_name, (relock_scan_verdict)9999));
    assert_non_null(CALL(relock_key_class_name, (relock_key_class)9999));
    assert_string_equal(CALL(relock_key_signature_name, (relock_key_signature)9999), "other");
    assert_null(CALL(relock_cap_name, 0u));
    assert_null(relock_cap_name(0x80000000u));
    assert_int_equal(CALL(relock_key_classify, NULL, 5, -1, 0), RELOCK_KEY_UNKNOWN);
}

static int fake_watch(void *data, relock_async_socket *s, int fd, int events, void **sockp)
{
    (void)data, (void)s, (void)fd, (void)events, (void)sockp;
    return -1;
}

static void *fake_timer_start(void *data, long long ms, void (*fn)(void *arg), void *arg)
{
    (void)data, (void)ms, (void)fn, (void)arg;
    return NULL;
}

static void fake_timer_stop(void *data, void *timer)
{
    (void)data, (void)timer;
}

/* The asynchronous client (relock_async.h): NULL handles and pointers. */
static void null_async(void **state)
{
    (void)state;
    relock_async *a = (relock_async *)1;
    assert_int_equal(CALL(relock_async_new, NULL, NULL, &a), RELOCK_EINVAL);
    assert_null(a);
    assert_int_equal(relock_async_new(NULL, NULL, NULL), RELOCK_EINVAL);
    /* A loop interface without its size, smaller than version 2's (0.3's
     * was), or of another version: refused before anything connects. */
    relock_config *cfg = relock_config_new();
    assert_non_null(cfg);
    relock_async_loop lp;
    memset(&lp, 0, sizeof lp);
    lp.version = RELOCK_ASYNC_LOOP_VERSION;
    lp.watch = fake_watch;
    lp.timer_start = fake_timer_start;
    lp.timer_stop = fake_timer_stop;
    a = (relock_async *)1;
    assert_int_equal(relock_async_new(cfg, &lp, &a), RELOCK_EINVAL);
    assert_null(a);
    lp.size = RELOCK_ASYNC_LOOP_SIZE_2 - 1;
    assert_int_equal(relock_async_new(cfg, &lp, &a), RELOCK_EINVAL);
    lp.size = sizeof lp;
    lp.version = 1;
    assert_int_equal(relock_async_new(cfg, &lp, &a), RELOCK_EINVAL);
    assert_null(a);
    relock_config_free(cfg);
    CALL(relock_async_free, NULL);
    assert_int_equal(CALL(relock_async_error, NULL)->status, RELOCK_EINVAL);
    assert_int_equal(CALL(relock_async_mode, NULL), RELOCK_MODE_AUTO);
    assert_string_equal(CALL(relock_async_mode_reason, NULL), "");
    assert_int_equal(CALL(relock_async_acquire, NULL, "a", 1000, 0, NULL, NULL, NULL),
                     RELOCK_EINVAL);
    assert_int_equal(CALL(relock_async_try_acquire, NULL, "a", 1000, NULL, NULL, NULL),
                     RELOCK_EINVAL);
    assert_int_equal(CALL(relock_async_cancel, NULL), RELOCK_EINVAL);
    assert_int_equal(CALL(relock_async_release, NULL, NULL, NULL), RELOCK_EINVAL);
    assert_int_equal(CALL(relock_async_extend, NULL, 1000, NULL, NULL), RELOCK_EINVAL);
    assert_int_equal(CALL(relock_async_keep, NULL, NULL, NULL), RELOCK_EINVAL);
    assert_int_equal(CALL(relock_async_keep_stop, NULL), RELOCK_EINVAL);
    assert_int_equal(CALL(relock_async_scan, NULL, NULL, NULL, NULL, NULL, NULL), RELOCK_EINVAL);
    assert_int_equal(CALL(relock_async_pending, NULL), 0);
    assert_int_equal(CALL(relock_async_replicas_acked, NULL), -1);
    CALL(relock_async_socket_action, NULL, RELOCK_IO_READ | RELOCK_IO_WRITE);
}

/* Every RELOCK_EXTERN function of relock.h and relock_async.h: the name
 * before the first "(" of each declaration (as
 * tests/install/test_symbols.sh reads it). */
static int header_functions_of(const char *path, char names[][64], int max)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char text[1 << 17];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    assert_true(n > 0 && n < sizeof text - 1);
    text[n] = '\0';
    int count = 0;
    const char *mark = "RELOCK_EXTERN";
    /* Skip the macro's own definition lines. */
    for (char *p = strstr(text, mark); p; p = strstr(p + 1, mark)) {
        char *line = p;
        while (line > text && line[-1] != '\n')
            line--;
        if (*line == '#')
            continue;
        char *paren = strchr(p, '(');
        char *semi = strchr(p, ';');
        if (!paren || (semi && semi < paren))
            continue;
        char *end = paren;
        while (end > p && (end[-1] == ' ' || end[-1] == '\n'))
            end--;
        char *start = end;
        while (start > p && (start[-1] == '_' || (start[-1] >= 'a' && start[-1] <= 'z') ||
                             (start[-1] >= '0' && start[-1] <= '9')))
            start--;
        size_t len = (size_t)(end - start);
        assert_true(len > 0 && len < 64 && count < max);
        memcpy(names[count], start, len);
        names[count][len] = '\0';
        count++;
    }
    return count;
}

static int header_functions(char names[][64], int max)
{
    int n = header_functions_of(RELOCK_HEADER, names, max);
    return n + header_functions_of(RELOCK_ASYNC_HEADER, names + n, max - n);
}

static void every_function_called(void **state)
{
    (void)state;
    static char names[MAX_CALLED][64];
    int n = header_functions(names, MAX_CALLED);
    assert_true(n >= 60);
    int missing = 0;
    for (int i = 0; i < n; i++) {
        int found = 0;
        for (int j = 0; j < ncalled && !found; j++)
            found = strcmp(names[i], called[j]) == 0;
        if (!found) {
            fprintf(stderr, "not called with NULL here: %s\n", names[i]);
            missing++;
        }
    }
    /* And nothing called that the header does not declare. */
    for (int j = 0; j < ncalled; j++) {
        int found = 0;
        for (int i = 0; i < n && !found; i++)
            found = strcmp(names[i], called[j]) == 0;
        if (!found) {
            fprintf(stderr, "called but not in the headers: %s\n", called[j]);
            missing++;
        }
    }
    printf("api_misuse: %d functions in relock.h and relock_async.h, %d called with NULL\n", n,
           ncalled);
    assert_int_equal(missing, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(null_config),
        cmocka_unit_test(null_connect),
        cmocka_unit_test(owner_text),
        cmocka_unit_test(null_client),
        cmocka_unit_test(null_scan),
        cmocka_unit_test(null_lock),
        cmocka_unit_test(null_results),
        cmocka_unit_test(no_handle),
        cmocka_unit_test(null_async),
        /* Last: it judges the calls of all the others. */
        cmocka_unit_test(every_function_called),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
