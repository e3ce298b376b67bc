/* relock clients and a shared private server for the integration tests. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include <cmocka.h>

#include "testclient.h"

testsrv tu_srv;

int tu_setup_server(void **state)
{
    (void)state;
    return testsrv_start(&tu_srv, NULL);
}

int tu_teardown_server(void **state)
{
    (void)state;
    testsrv_stop(&tu_srv);
    return 0;
}

relock_client *tu_client(int port, const char *mode, const char *const *settings)
{
    relock_config *cfg = relock_config_new();
    assert_non_null(cfg);
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "mode", mode), RELOCK_OK);
    for (int i = 0; settings && settings[i] && settings[i + 1]; i += 2)
        if (relock_config_set(cfg, settings[i], settings[i + 1]) != RELOCK_OK)
            fail_msg("setting %s: %s", settings[i], relock_config_error(cfg)->message);
    relock_client *c = NULL;
    relock_status st = relock_connect(cfg, &c);
    relock_config_free(cfg);
    if (st != RELOCK_OK)
        fail_msg("connect (%s, port %d): %s", mode, port,
                 c ? relock_client_error(c)->message : "out of memory");
    return c;
}
