/* The configuration file, single settings and URLs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "conftext.h"
#include "internal.h"


static void test_defaults_and_example_file(void **state)
{
    (void)state;
    relock_config *cfg = relock_config_new();
    assert_int_equal(cfg->s.mode, RELOCK_MODE_AUTO);
    assert_int_equal(cfg->s.ttl_ms, 30000);
    assert_int_equal(cfg->s.wait.max_ms, -1);
    assert_int_equal(cfg->s.migration.legacy_clients, 1);
    relock__settings before = cfg->s;
    /* The commented example holds exactly the defaults. */
    assert_int_equal(relock_config_load_file(cfg, CONF_DIR "/relock.conf"), RELOCK_OK);
    /* Where the file set mode and servers is recorded, not a setting. */
    assert_true(cfg->s.mode_line > 0 && cfg->s.servers_line > 0);
    memcpy(before.src_file, cfg->s.src_file, sizeof before.src_file);
    before.mode_line = cfg->s.mode_line;
    before.servers_line = cfg->s.servers_line;
    /* ... written out, so they count as given (legacy.peer keeps them). */
    assert_int_equal(cfg->s.legacy.set,
                     RELOCK__SET_UNIT | RELOCK__SET_OFFSET | RELOCK__SET_PREFIX);
    before.legacy.set = cfg->s.legacy.set;
    assert_memory_equal(&before, &cfg->s, sizeof before);
    relock_config_free(cfg);
}

static void test_values_are_read(void **state)
{
    (void)state;
    relock_config *cfg = relock_config_new();
    char path[64];
    const char *text = "relock = {\n"
                       "  mode = \"modern\";\n"
                       "  key_prefix = \"app:\";\n"
                       "  ttl_ms = 1500;\n"
                       "  servers = ( { host = \"10.0.0.5\"; port = 7000; db = 3;\n"
                       "                username = \"u\"; password = \"p\"; } );\n"
                       "  wait = { max_ms = 0; backoff_min_ms = 5; backoff_max_ms = 50; };\n"
                       "  legacy = { clock_unit = \"ms\"; clock = \"server\"; };\n"
                       "  migration = { legacy_clients = false; quiet_window_ms = 8000000000L; };\n"
                       "};\n";
    assert_int_equal(load_text(text, cfg, path, sizeof path), RELOCK_OK);
    assert_int_equal(cfg->s.mode, RELOCK_MODE_MODERN);
    assert_string_equal(cfg->s.key_prefix, "app:");
    assert_int_equal(cfg->s.ttl_ms, 1500);
    assert_string_equal(cfg->s.servers[0].host, "10.0.0.5");
    assert_int_equal(cfg->s.servers[0].port, 7000);
    assert_int_equal(cfg->s.servers[0].db, 3);
    assert_string_equal(cfg->s.servers[0].password, "p");
    assert_int_equal(cfg->s.wait.max_ms, 0);
    assert_int_equal(cfg->s.legacy.unit_ms, 1);
    assert_int_equal(cfg->s.legacy.clock_server, 1);
    assert_int_equal(cfg->s.migration.legacy_clients, 0);
    assert_true(cfg->s.migration.quiet_window_ms == 8000000000LL);
    relock_config_free(cfg);
}

static void test_errors_carry_line(void **state)
{
    (void)state;
    refused("relock = {\n  mode = \"fast\";\n};\n", 2, "mode must be one of");
    refused("relock = {\n  ttl_ms = 100;\n  tll_ms = 5;\n};\n", 3, "unknown setting \"tll_ms\"");
    refused("relock = {\n\n  wait = { max_ms = -5; };\n};\n", 3, "wait.max_ms must be between");
    refused("relock = {\n  ttl_ms = \"30s\";\n};\n", 2, "ttl_ms must be an integer");
    refused("relock = {\n  fencing = 1;\n};\n", 2, "fencing must be true or false");
    refused("relock = {\n  legacy = { clock_unit = \"us\"; };\n};\n", 2, "clock_unit");
    refused("relock = {\n  servers = ( { host = \"a\"; port = 70000; } );\n};\n", 2,
            "port must be an integer from 1 to 65535");
    refused("relock = {\n  servers = ( { host = \"a\"; prot = 1; } );\n};\n", 2,
            "unknown setting \"servers.prot\"");
    refused("relock = {\n  ttl_ms = 0;\n};\n", 2, "ttl_ms must be between 1");
    refused("relock = {\n  mode = \"modern\";\n  ttl_ms = ;\n};\n", 3, "syntax error");
    refused("relok = {\n  mode = \"modern\";\n};\n", 1, "unknown setting \"relok\"");
    refused("relock = {\n  wait = { backoff_min_ms = 500; };\n};\n", 2,
            "exceeds wait.backoff_max_ms");
    refused("relock = {\n  servers = ();\n};\n", 2, "servers must list 1 to");
    refused("relock = {\n  wait = 5;\n};\n", 2, "wait must be a group");
    /* A command-line duration in the file: say what the file expects. */
    refused("relock = {\n  ttl_ms = 30s;\n};\n", 2,
            "ttl_ms takes whole milliseconds (ttl_ms = 30000)");
    refused("relock = {\n  wait = { max_ms = 1.5 m; };\n};\n", 2, "max_ms takes whole milliseconds");
    refused("relock = {\n  ttl_ms = \"30s\";\n};\n", 2, "whole milliseconds, such as 30000");
}

/* A path that is no file is refused with a message; before, a directory
 * made libconfig's scanner end the whole process. */
static void test_not_a_file(void **state)
{
    (void)state;
    relock_config *cfg = relock_config_new();
    assert_int_equal(relock_config_load_file(cfg, "/tmp"), RELOCK_ECONFIG);
    assert_non_null(strstr(relock_config_error(cfg)->message,
                           "/tmp: not a configuration file (a directory)"));
    assert_int_equal(relock_config_load_file(cfg, "/dev/null"), RELOCK_ECONFIG);
    assert_non_null(strstr(relock_config_error(cfg)->message, "not a regular file"));
    relock_config_free(cfg);
}

static void test_missing_file(void **state)
{
    (void)state;
    relock_config *cfg = relock_config_new();
    assert_int_equal(relock_config_load_file(cfg, "/nonexistent/relock.conf"), RELOCK_ECONFIG);
    assert_non_null(strstr(relock_config_error(cfg)->message,
                           "/nonexistent/relock.conf: cannot open"));
    relock_config_free(cfg);
}

static void test_set_by_name(void **state)
{
    (void)state;
    relock_config *cfg = relock_config_new();
    assert_int_equal(relock_config_set(cfg, "mode", "legacy"), RELOCK_OK);
    assert_int_equal(relock_config_mode(cfg), RELOCK_MODE_LEGACY);
    assert_int_equal(relock_config_set(cfg, "wait.max_ms", "250"), RELOCK_OK);
    assert_int_equal(relock_config_wait_ms(cfg), 250);
    assert_int_equal(relock_config_set(cfg, "fencing", "false"), RELOCK_OK);
    assert_int_equal(cfg->s.fencing, 0);
    assert_int_equal(relock_config_set(cfg, "mode", "quick"), RELOCK_ECONFIG);
    assert_non_null(strstr(relock_config_error(cfg)->message, "\"quick\""));
    assert_int_equal(relock_config_set(cfg, "ttl_ms", "12x"), RELOCK_ECONFIG);
    assert_int_equal(relock_config_set(cfg, "nosuch", "1"), RELOCK_ECONFIG);
    assert_non_null(strstr(relock_config_error(cfg)->message, "unknown setting"));
    relock_config_free(cfg);
}

/* servers as text: URLs separated by commas, all or nothing. */
static void test_servers_as_text(void **state)
{
    (void)state;
    relock_config *cfg = relock_config_new();
    assert_int_equal(relock_config_set(cfg, "servers",
                                       "redis://a:7001, redis://u:p%2Cw@b:7002/3,unix:///x.sock"),
                     RELOCK_OK);
    assert_int_equal(cfg->s.nservers, 3);
    assert_string_equal(cfg->s.servers[0].host, "a");
    assert_int_equal(cfg->s.servers[0].port, 7001);
    assert_string_equal(cfg->s.servers[1].username, "u");
    assert_string_equal(cfg->s.servers[1].password, "p,w");
    assert_int_equal(cfg->s.servers[1].db, 3);
    assert_string_equal(cfg->s.servers[2].host, "/x.sock");
    assert_int_equal(cfg->s.servers[2].port, 0);

    /* A bad entry is named by its place, without its password, and
     * changes nothing. */
    assert_int_equal(relock_config_set(cfg, "servers", "redis://c:1,redis://:hunter2@d:0"),
                     RELOCK_ECONFIG);
    const char *m = relock_config_error(cfg)->message;
    assert_non_null(strstr(m, "servers: entry 2: the port must be a number"));
    assert_null(strstr(m, "hunter2"));
    assert_int_equal(cfg->s.nservers, 3);
    assert_string_equal(cfg->s.servers[0].host, "a");
    assert_int_equal(relock_config_set(cfg, "servers", "redis://c:1,,redis://d:2"), RELOCK_ECONFIG);
    assert_non_null(strstr(relock_config_error(cfg)->message, "entry 2 is empty"));
    assert_int_equal(relock_config_set(cfg, "servers", ""), RELOCK_ECONFIG);
    assert_non_null(strstr(relock_config_error(cfg)->message, "entry 1 is empty"));
    char many[17 * 16 + 1] = "";
    for (int i = 0; i < 17; i++)
        strcat(many, i ? ",redis://h:1" : "redis://h:1");
    assert_int_equal(relock_config_set(cfg, "servers", many), RELOCK_ECONFIG);
    assert_non_null(strstr(relock_config_error(cfg)->message, "more than 16 servers"));

    /* One server, as -u gives it; Sentinel does not mix with several. */
    assert_int_equal(relock_config_set(cfg, "servers", "redis://e:7005"), RELOCK_OK);
    assert_int_equal(cfg->s.nservers, 1);
    assert_int_equal(relock_config_set(cfg, "sentinel.master", "m"), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "servers", "redis://e:1,redis://f:2"), RELOCK_ECONFIG);
    assert_non_null(strstr(relock_config_error(cfg)->message, "sentinel cannot be combined"));
    assert_int_equal(cfg->s.nservers, 1);
    relock_config_free(cfg);
}

static void url_ok(const char *url, const char *host, int port, int db, const char *user,
                   const char *pass)
{
    relock__server srv;
    char why[160];
    assert_int_equal(relock__parse_url(url, &srv, why, sizeof why), 0);
    assert_string_equal(srv.host, host);
    assert_int_equal(srv.port, port);
    assert_int_equal(srv.db, db);
    assert_string_equal(srv.username, user);
    assert_string_equal(srv.password, pass);
}

static void url_bad(const char *url, const char *part)
{
    relock__server srv;
    char why[160] = "";
    assert_int_equal(relock__parse_url(url, &srv, why, sizeof why), -1);
    if (!strstr(why, part))
        fail_msg("reason \"%s\" lacks \"%s\"", why, part);
}

static void test_urls(void **state)
{
    (void)state;
    url_ok("redis://user:pass@host:6380/2", "host", 6380, 2, "user", "pass");
    url_ok("redis://localhost", "localhost", 6379, 0, "", "");
    url_ok("redis://127.0.0.1:7000", "127.0.0.1", 7000, 0, "", "");
    url_ok("redis://:secret@h/1", "h", 6379, 1, "", "secret");
    url_ok("redis://secret@h", "h", 6379, 0, "", "secret");
    url_ok("redis://u:p%40ss@h:1", "h", 1, 0, "u", "p@ss");
    url_ok("redis://[::1]:6390/", "::1", 6390, 0, "", "");
    url_bad("http://h", "must start with redis:// or unix://");
    url_bad("rediss://h", "TLS");
    url_bad("redis://h:0", "port must be a number from 1 to 65535");
    url_bad("redis://h:65536", "port");
    url_bad("redis://h:12ab", "port");
    url_bad("redis://h:", "port");
    url_bad("redis://h:-1", "port");
    url_bad("redis://", "no host");
    url_bad("redis://h/x", "database");
    url_bad("redis://[::1", "unclosed");
    url_bad("redis://h/99999999", "database 99999999 is out of range");
    url_bad("redis://h:6379?timeout=1", "query parameters (?...) are not supported");
    url_bad("redis://u:p@h/2?db=3", "query parameters");
    url_ok("redis://:a?b#c@h/1", "h", 6379, 1, "", "a?b#c"); /* in a password: a byte like any */

    /* unix sockets: the path as host, port 0. */
    url_ok("unix:///run/redis/redis.sock", "/run/redis/redis.sock", 0, 0, "", "");
    url_ok("unix:///tmp/r.sock?db=3", "/tmp/r.sock", 0, 3, "", "");
    url_ok("unix://:secret@/tmp/r.sock", "/tmp/r.sock", 0, 0, "", "secret");
    url_ok("unix://app:p%40ss@/tmp/r.sock?db=1", "/tmp/r.sock", 0, 1, "app", "p@ss");
    url_ok("unix://:a@/b@/tmp/r.sock", "/tmp/r.sock", 0, 0, "", "a@/b"); /* the last "@/" */
    url_bad("unix://", "absolute path");
    url_bad("unix://tmp/r.sock", "absolute path");
    url_bad("unix:///", "no socket path");
    url_bad("unix:///tmp/r.sock?timeout=1", "only ?db=N");
    url_bad("unix:///tmp/r.sock?db=", "database must be a number");
    url_bad("unix:///tmp/r.sock?db=x", "database must be a number");
    url_bad("unix:///tmp/r.sock?db=99999999", "out of range");
    char longpath[200] = "unix:///";
    memset(longpath + 8, 'p', 120);
    url_bad(longpath, "at most 107 bytes");

    /* The password never appears in the message of a bad URL. */
    relock_config *cfg = relock_config_new();
    assert_int_equal(relock_config_set_url(cfg, "redis://u:hunter2@h:99999"), RELOCK_ECONFIG);
    assert_null(strstr(relock_config_error(cfg)->message, "hunter2"));
    relock_config_free(cfg);
}

static void test_durability_and_lock_delay(void **state)
{
    (void)state;
    relock_config *cfg = relock_config_new();
    assert_int_equal(cfg->s.durability.replicas, 0);
    assert_int_equal(cfg->s.durability.aof, 0);
    assert_int_equal(cfg->s.durability.timeout_ms, 1000);
    assert_int_equal(cfg->s.lock_delay_ms, 0);
    char path[64];
    const char *text = "relock = {\n"
                       "  durability = { replicas = 2; aof = true; timeout_ms = 250; };\n"
                       "  lock_delay_ms = 1500;\n"
                       "};\n";
    assert_int_equal(load_text(text, cfg, path, sizeof path), RELOCK_OK);
    assert_int_equal(cfg->s.durability.replicas, 2);
    assert_int_equal(cfg->s.durability.aof, 1);
    assert_int_equal(cfg->s.durability.timeout_ms, 250);
    assert_int_equal(cfg->s.lock_delay_ms, 1500);
    assert_int_equal(relock_config_set(cfg, "durability.replicas", "-1"), RELOCK_ECONFIG);
    assert_int_equal(relock_config_set(cfg, "durability.replicas", "1001"), RELOCK_ECONFIG);
    assert_int_equal(relock_config_set(cfg, "durability.timeout_ms", "0"), RELOCK_ECONFIG);
    assert_int_equal(relock_config_set(cfg, "durability.aof", "maybe"), RELOCK_ECONFIG);
    assert_int_equal(relock_config_set(cfg, "lock_delay_ms", "-1"), RELOCK_ECONFIG);
    assert_int_equal(relock_config_set(cfg, "durability.replicas", "1"), RELOCK_OK);
    assert_int_equal(cfg->s.durability.replicas, 1);
    relock_config_free(cfg);
    refused("relock = {\n  durability = { replicas = 1; quorum = 2; };\n};\n", 2,
            "durability.quorum");
}

/* legacy.peer: a profile fills in what the configuration leaves out. */
static void test_peer_profiles(void **state)
{
    (void)state;
    relock_config *cfg = relock_config_new();
    char path[64];
    assert_int_equal(load_text("relock = {\n  legacy = { peer = \"redis-mutex\"; };\n};\n", cfg,
                               path, sizeof path),
                     RELOCK_OK);
    assert_int_equal(cfg->s.legacy.unit_ms, 0);
    assert_int_equal(cfg->s.legacy.expiry_offset, 0);
    assert_int_equal(cfg->s.legacy.frac_values, 1);
    assert_int_equal(cfg->s.legacy.readers, RELOCK__READER_FRAC);
    assert_string_equal(cfg->s.key_prefix, "RedisMutex:");
    relock_config_free(cfg);

    /* A list: one unit, fractions only if every peer parses them, both
     * kinds of clock, the larger offset; explicit settings stay. */
    cfg = relock_config_new();
    assert_int_equal(load_text("relock = {\n  key_prefix = \"app:\";\n"
                               "  legacy = { peer = [ \"resque-lock-timeout\", \"redis-objects\" ];\n"
                               "             skew_margin_ms = 10; };\n};\n",
                               cfg, path, sizeof path),
                     RELOCK_OK);
    assert_int_equal(cfg->s.legacy.npeers, 2);
    assert_int_equal(cfg->s.legacy.frac_values, 0);
    assert_int_equal(cfg->s.legacy.readers, RELOCK__READER_WHOLE | RELOCK__READER_FRAC);
    assert_int_equal(cfg->s.legacy.expiry_offset, 1);
    assert_string_equal(cfg->s.key_prefix, "app:");
    relock_config_free(cfg);

    /* Milliseconds, whole readers; an explicit offset wins. */
    cfg = relock_config_new();
    assert_int_equal(load_text("relock = {\n  legacy = { expiry_offset = 5; peer = \"jedis-lock\"; "
                               "};\n};\n",
                               cfg, path, sizeof path),
                     RELOCK_OK);
    assert_int_equal(cfg->s.legacy.unit_ms, 1);
    assert_int_equal(cfg->s.legacy.expiry_offset, 5);
    assert_int_equal(cfg->s.legacy.readers, RELOCK__READER_WHOLE);
    assert_int_equal(cfg->s.legacy.frac_values, 0);
    assert_string_equal(cfg->s.key_prefix, "");
    relock_config_free(cfg);

    /* Explicit settings for a fleet no profile names. */
    cfg = relock_config_new();
    assert_int_equal(load_text("relock = {\n  legacy = { values = \"fractional\"; "
                               "reader_clock = \"fractional\"; expiry_offset = 0; };\n};\n",
                               cfg, path, sizeof path),
                     RELOCK_OK);
    assert_int_equal(cfg->s.legacy.readers, RELOCK__READER_FRAC);
    assert_int_equal(cfg->s.legacy.frac_values, 1);
    relock_config_free(cfg);

    /* By name, as text. */
    cfg = relock_config_new();
    /* ServiceStack holds V while V > now in ms (`lockExpireTime >
     * DateTime.UtcNow.ToUnixTimeMs()`): it takes V over at V·u. */
    assert_int_equal(relock_config_set(cfg, "legacy.peer", "servicestack"), RELOCK_OK);
    assert_int_equal(cfg->s.legacy.readers, RELOCK__READER_FRAC);
    assert_int_equal(relock_config_set(cfg, "legacy.peer", "redis-lock-js"), RELOCK_OK);
    assert_int_equal(cfg->s.legacy.unit_ms, 1);
    assert_int_equal(cfg->s.legacy.readers, RELOCK__READER_FRAC);
    assert_string_equal(cfg->s.key_prefix, "lock.");
    assert_int_equal(relock_config_set(cfg, "legacy.peer", "redis-py-2, redis-mutex"), RELOCK_OK);
    assert_int_equal(cfg->s.legacy.unit_ms, 0);
    assert_int_equal(cfg->s.legacy.npeers, 2);
    /* redis-py 2.7 compares with int(time.time()), later 2.x releases
     * with time.time(): both kinds of clock. */
    assert_int_equal(cfg->s.legacy.readers, RELOCK__READER_WHOLE | RELOCK__READER_FRAC);
    /* Their keys differ: no common prefix, not the one lock. implied. */
    assert_string_equal(cfg->s.key_prefix, "");
    assert_int_equal(relock_config_set(cfg, "legacy.peer", "redis-mutex,jedis-lock"),
                     RELOCK_ECONFIG);
    assert_non_null(strstr(relock_config_error(cfg)->message, "must share a unit"));
    assert_int_equal(cfg->s.legacy.npeers, 2); /* unchanged */
    assert_int_equal(relock_config_set(cfg, "legacy.peer", "redis-mutx"), RELOCK_ECONFIG);
    assert_non_null(strstr(relock_config_error(cfg)->message, "no profile \"redis-mutx\""));
    relock_config_free(cfg);
}

static void test_peer_errors_carry_line(void **state)
{
    (void)state;
    refused("relock = {\n  legacy = {\n    peer = \"redis-mutx\";\n  };\n};\n", 3,
            "no profile \"redis-mutx\" (known: \"classic\"");
    refused("relock = {\n  legacy = {\n    peer = [ \"redis-mutex\",\n      \"jedis-lock\" ];\n"
            "  };\n};\n",
            3, "\"redis-mutex\" writes seconds and \"jedis-lock\" milliseconds");
    refused("relock = {\n  legacy = {\n    peer = ( \"redis-mutex\",\n      5 );\n  };\n};\n", 4,
            "each entry must be a profile's name");
    refused("relock = {\n  legacy = {\n    clock_unit = \"ms\";\n    peer = \"redis-mutex\";\n"
            "  };\n};\n",
            4, "legacy.clock_unit = \"ms\" contradicts legacy.peer \"redis-mutex\"");
    refused("relock = {\n  legacy = {\n    reader_clock = \"whole\";\n    peer = \"redis-py-2\";\n"
            "  };\n};\n",
            4, "leaves out a peer of legacy.peer, whose clock compares fractions (use \"both\")");
    refused("relock = {\n  legacy = {\n    values = \"fractional\";\n    peer = \"resque-lock-timeout\";\n"
            "  };\n};\n",
            4, "parses whole numbers only");
    refused("relock = {\n  legacy = {\n    values = \"fractional\";\n    clock_unit = \"ms\";\n"
            "  };\n};\n",
            2, "needs legacy.clock_unit = \"s\"");
    refused("relock = {\n  legacy = { values = \"fractional\"; };\n  bridge = { value_suffix = true; };\n};\n",
            2, "bridge.value_suffix cannot be combined");
    /* A suffixed value "V:token" throws in Long.parseLong (jedis-lock) and
     * in Python's float() (redis-py < 2.10). */
    refused("relock = {\n  legacy = {\n    peer = \"jedis-lock\";\n  };\n"
            "  bridge = { value_suffix = true; };\n};\n",
            3, "bridge.value_suffix: \"jedis-lock\" parses");
    refused("relock = {\n  legacy = {\n    values = \"integer\";\n    peer = \"redis-py-2\";\n"
            "  };\n  bridge = { value_suffix = true; };\n};\n",
            4, "bridge.value_suffix: \"redis-py-2\" parses");
    refused("relock = {\n  legacy = { reader_clock = \"fuzzy\"; };\n};\n", 2,
            "legacy.reader_clock must be one of \"whole\", \"fractional\", \"both\"");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_peer_profiles),
        cmocka_unit_test(test_peer_errors_carry_line),
        cmocka_unit_test(test_defaults_and_example_file),
        cmocka_unit_test(test_values_are_read),
        cmocka_unit_test(test_errors_carry_line),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_not_a_file),
        cmocka_unit_test(test_set_by_name),
        cmocka_unit_test(test_urls),
        cmocka_unit_test(test_servers_as_text),
        cmocka_unit_test(test_durability_and_lock_delay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
