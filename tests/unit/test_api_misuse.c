/*
 * Misuse of the public API: NULL handles and NULL output pointers get
 * RELOCK_EINVAL (or a harmless value from the accessors), never a crash.
 * Runs without a server: every call here must refuse before any I/O.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "relock.h"

static void null_config(void **state)
{
    (void)state;
    relock_client *c = (relock_client *)1; /* must be overwritten */
    assert_int_equal(relock_config_load_file(NULL, "/etc/relock.conf"), RELOCK_EINVAL);
    assert_int_equal(relock_config_set_url(NULL, "redis://127.0.0.1:1"), RELOCK_EINVAL);
    assert_int_equal(relock_config_set(NULL, "ttl_ms", "1000"), RELOCK_EINVAL);
    assert_int_equal(relock_config_error(NULL)->status, RELOCK_EINVAL);
    assert_string_not_equal(relock_config_error(NULL)->message, "");
    assert_int_equal(relock_config_ttl_ms(NULL), -1);
    assert_int_equal(relock_config_mode(NULL), RELOCK_MODE_AUTO);
    relock_config_free(NULL);
    assert_int_equal(relock_connect(NULL, &c), RELOCK_EINVAL);
    assert_null(c);
    relock_config *cfg = relock_config_new();
    assert_non_null(cfg);
    assert_int_equal(relock_connect(cfg, NULL), RELOCK_EINVAL);
    assert_int_equal(relock_config_set_url(cfg, NULL), RELOCK_EINVAL);
    assert_int_equal(relock_config_error(cfg)->status, RELOCK_EINVAL);
    relock_config_free(cfg);
    assert_int_equal(relock_connect_url("redis://127.0.0.1:1", NULL), RELOCK_EINVAL);
    assert_int_equal(relock_connect_file("/nonexistent", NULL), RELOCK_EINVAL);
}

/* relock_config_set_owner(): bad input is refused and changes nothing. */
static void owner_text(void **state)
{
    (void)state;
    assert_int_equal(relock_config_set_owner(NULL, 0, "x"), RELOCK_EINVAL);
    assert_int_equal(relock_lock_set_owner(NULL, 0, "x"), RELOCK_EINVAL);
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
    assert_int_equal(relock_acquire(NULL, "a", 1000, 0, &l), RELOCK_EINVAL);
    assert_null(l);
    l = (relock_lock *)1;
    assert_int_equal(relock_try_acquire(NULL, "a", 1000, &l), RELOCK_EINVAL);
    assert_null(l);
    l = (relock_lock *)1;
    assert_int_equal(relock_lock_adopt(NULL, "a", "v", 1, 1000, &l), RELOCK_EINVAL);
    assert_null(l);
    assert_int_equal(relock_acquire(NULL, "a", 1000, 0, NULL), RELOCK_EINVAL);
    relock_inspect_info *info = (relock_inspect_info *)1;
    assert_int_equal(relock_inspect(NULL, "a", &info), RELOCK_EINVAL);
    assert_null(info);
    assert_int_equal(relock_break(NULL, "a", NULL), RELOCK_EINVAL);
    relock_server_info si;
    assert_int_equal(relock_client_server(NULL, &si), RELOCK_EINVAL);
    assert_int_equal(relock_client_error(NULL)->status, RELOCK_EINVAL);
    assert_int_equal(relock_client_mode(NULL), RELOCK_MODE_AUTO);
    assert_string_equal(relock_client_mode_reason(NULL), "");
    relock_client_free(NULL);
}

static void null_scan(void **state)
{
    (void)state;
    relock_scan_result *res = (relock_scan_result *)1;
    assert_int_equal(relock_scan(NULL, NULL, &res), RELOCK_EINVAL);
    assert_null(res);
}

static void null_lock(void **state)
{
    (void)state;
    assert_int_equal(relock_release(NULL), RELOCK_EINVAL);
    assert_int_equal(relock_extend(NULL, 1000), RELOCK_EINVAL);
    assert_int_equal(relock_keep(NULL, NULL, NULL), RELOCK_EINVAL);
    assert_int_equal(relock_keep_stop(NULL), RELOCK_EINVAL);
    assert_string_equal(relock_lock_name(NULL), "");
    assert_string_equal(relock_lock_value(NULL), "");
    assert_int_equal(relock_lock_fence(NULL), 0);
    assert_int_equal(relock_lock_validity_ms(NULL), 0);
    relock_lock_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(null_config),
        cmocka_unit_test(owner_text),
        cmocka_unit_test(null_client),
        cmocka_unit_test(null_scan),
        cmocka_unit_test(null_lock),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
