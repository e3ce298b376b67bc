/*
 * The sentinel settings (docs/configuration.md "Sentinel"): read from the
 * file and by relock_config_set(), checked as strictly as the rest, with
 * FILE:LINE in every message of the file.
 */
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


static void test_file(void **state)
{
    (void)state;
    relock_config *cfg = relock_config_new();
    char path[64];
    const char *text = "relock = {\n"
                       "  servers = ( { password = \"pw\"; db = 2; } );\n"
                       "  sentinel = {\n"
                       "    master = \"mymaster\";\n"
                       "    addrs = ( \"127.0.0.1:26379\", \"[::1]:26380\", \"s3.example:1\" );\n"
                       "  };\n"
                       "};\n";
    if (load_text(text, cfg, path, sizeof path) != RELOCK_OK)
        fail_msg("%s", relock_config_error(cfg)->message);
    assert_string_equal(cfg->s.sentinel.master, "mymaster");
    assert_int_equal(cfg->s.sentinel.naddrs, 3);
    assert_string_equal(cfg->s.sentinel.addrs[0].host, "127.0.0.1");
    assert_int_equal(cfg->s.sentinel.addrs[0].port, 26379);
    assert_string_equal(cfg->s.sentinel.addrs[1].host, "::1");
    assert_int_equal(cfg->s.sentinel.addrs[1].port, 26380);
    assert_string_equal(cfg->s.sentinel.addrs[2].host, "s3.example");
    assert_int_equal(cfg->s.sentinel.addrs[2].port, 1);
    assert_string_equal(cfg->s.servers[0].password, "pw");
    /* An array works as well as a list. */
    text = "relock = { sentinel = { master = \"m\"; addrs = [ \"h:1\", \"h:2\" ]; }; };\n";
    assert_int_equal(load_text(text, cfg, path, sizeof path), RELOCK_OK);
    assert_int_equal(cfg->s.sentinel.naddrs, 2);
    assert_int_equal(cfg->s.sentinel.addrs[1].port, 2);
    relock_config_free(cfg);
}

static void test_file_errors(void **state)
{
    (void)state;
    refused("relock = {\n  sentinel = {\n    master = \"m\";\n    adrs = ( \"h:1\" );\n  };\n};\n", 4,
            "unknown setting \"sentinel.adrs\"");
    refused("relock = {\n  sentinel = {\n    master = \"m\";\n    addrs = (\n      \"h:1\",\n"
            "      \"h\" );\n  };\n};\n",
            6, "sentinel.addrs: \"h\" is not host:port");
    refused("relock = {\n  sentinel = { master = \"m\";\n"
            "    addrs = ( \"a:1\", \"a:2\", \"a:3\", \"a:4\", \"a:5\", \"a:6\", \"a:7\", \"a:8\", "
            "\"a:9\" ); };\n};\n",
            3, "sentinel.addrs must list 1 to 8 addresses, not 9");
    refused("relock = {\n  sentinel = { master = \"m\"; addrs = (); };\n};\n", 2,
            "must list 1 to 8 addresses, not 0");
    refused("relock = {\n  sentinel = { master = \"m\"; addrs = \"h:1\"; };\n};\n", 2,
            "sentinel.addrs must be a list");
    refused("relock = {\n  sentinel = { master = \"m\"; addrs = ( 26379 ); };\n};\n", 2,
            "each entry must be a string");
    refused("relock = {\n  sentinel = { master = \"m\"; addrs = ( \"h:0\" ); };\n};\n", 2,
            "\"h:0\": the port must be a number from 1 to 65535");
    refused("relock = {\n  sentinel = { master = \"m\"; addrs = ( \"::1:26379\" ); };\n};\n", 2,
            "an IPv6 host goes in brackets");
    refused("relock = {\n  sentinel = { master = \"my master\"; addrs = ( \"h:1\" ); };\n};\n", 2,
            "sentinel.master may not contain spaces");
    refused("relock = {\n  sentinel = { master = 1; addrs = ( \"h:1\" ); };\n};\n", 2,
            "sentinel.master must be a string");
    refused("relock = {\n  mode = \"modern\";\n  sentinel = { master = \"m\"; };\n};\n", 3,
            "sentinel needs both master and addrs");
    refused("relock = {\n  sentinel = { addrs = ( \"h:1\" ); };\n};\n", 2,
            "sentinel needs both master and addrs");
    refused("relock = {\n  servers = ( { port = 1; }, { port = 2; }, { port = 3; } );\n"
            "  sentinel = { master = \"m\"; addrs = ( \"h:1\" ); };\n};\n",
            3, "sentinel cannot be combined with several servers (3 listed)");
    refused("relock = {\n  sentinel = 5;\n};\n", 2, "sentinel must be a group");
}

static void addr_ok(const char *text, const char *host, int port)
{
    relock__addr a;
    char why[160];
    if (relock__parse_addr(text, strlen(text), &a, why, sizeof why) != 0)
        fail_msg("%s: %s", text, why);
    assert_string_equal(a.host, host);
    assert_int_equal(a.port, port);
}

static void addr_bad(const char *text, const char *part)
{
    relock__addr a;
    char why[160] = "";
    assert_int_equal(relock__parse_addr(text, strlen(text), &a, why, sizeof why), -1);
    if (!strstr(why, part))
        fail_msg("reason \"%s\" lacks \"%s\"", why, part);
}

static void test_addrs(void **state)
{
    (void)state;
    addr_ok("127.0.0.1:26379", "127.0.0.1", 26379);
    addr_ok("sentinel-1.example.com:65535", "sentinel-1.example.com", 65535);
    addr_ok("[fe80::1]:1", "fe80::1", 1);
    addr_bad("", "is not host:port");
    addr_bad("host", "is not host:port");
    addr_bad(":26379", "the host is empty");
    addr_bad("h:", "the port must be");
    addr_bad("h:0", "the port must be");
    addr_bad("h:026379", "the port must be");
    addr_bad("h:65536", "the port must be");
    addr_bad("h:123456", "the port must be");
    addr_bad("h:+1", "the port must be");
    addr_bad("h:1 ", "the port must be");
    addr_bad(" h:1", "bad character");
    addr_bad("h:1:2", "brackets");
    addr_bad("[::1]", "is not [host]:port");
    addr_bad("[::1]x:1", "is not [host]:port");
    addr_bad("[::1:1", "unclosed");
    addr_bad("[]:1", "the host is empty");
}

static void test_set_by_name(void **state)
{
    (void)state;
    relock_config *cfg = relock_config_new();
    assert_int_equal(relock_config_set(cfg, "sentinel.master", "m"), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "sentinel.addrs", "a:1,[::1]:2,c:3"), RELOCK_OK);
    assert_int_equal(cfg->s.sentinel.naddrs, 3);
    assert_string_equal(cfg->s.sentinel.addrs[1].host, "::1");
    assert_int_equal(cfg->s.sentinel.addrs[2].port, 3);
    /* Refused values change nothing. */
    assert_int_equal(relock_config_set(cfg, "sentinel.addrs", "a:1,,c:3"), RELOCK_ECONFIG);
    assert_string_equal(relock_config_error(cfg)->message,
                        "config: sentinel.addrs: \"\" is not host:port (an IPv6 host goes in "
                        "brackets: [::1]:26379)");
    assert_int_equal(relock_config_set(cfg, "sentinel.addrs", "a:1, c:3"), RELOCK_ECONFIG);
    assert_int_equal(relock_config_set(cfg, "sentinel.addrs", "a:1,b:2,c:3,d:4,e:5,f:6,g:7,h:8,i:9"),
                     RELOCK_ECONFIG);
    assert_string_equal(relock_config_error(cfg)->message,
                        "config: sentinel.addrs lists more than 8 addresses");
    assert_int_equal(cfg->s.sentinel.naddrs, 3);
    assert_int_equal(relock_config_set(cfg, "sentinel", "x"), RELOCK_ECONFIG);
    assert_int_equal(relock_config_set(cfg, "sentinel.nosuch", "x"), RELOCK_ECONFIG);
    assert_int_equal(relock_config_set(cfg, "sentinel.addrs", "a:1,b:2,c:3,d:4,e:5,f:6,g:7,h:8"),
                     RELOCK_OK);
    assert_int_equal(cfg->s.sentinel.naddrs, 8);
    assert_int_equal(relock_config_set(cfg, "sentinel.addrs", ""), RELOCK_OK);
    assert_int_equal(cfg->s.sentinel.naddrs, 0);
    relock_config_free(cfg);

    /* Not with a quorum, whichever comes first. */
    cfg = relock_config_new();
    char path[64];
    assert_int_equal(load_text("relock = { servers = ( { port = 1; }, { port = 2; } ); };\n", cfg,
                               path, sizeof path),
                     RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "sentinel.master", "m"), RELOCK_ECONFIG);
    assert_string_equal(relock_config_error(cfg)->message,
                        "config: sentinel cannot be combined with several servers (2 listed): "
                        "list one or none");
    assert_string_equal(cfg->s.sentinel.master, "");
    relock_config_free(cfg);
}

/* Connecting with half a sentinel configuration is refused clearly. */
static void test_connect_incomplete(void **state)
{
    (void)state;
    relock_config *cfg = relock_config_new();
    assert_int_equal(relock_config_set(cfg, "sentinel.master", "m"), RELOCK_OK);
    relock_client *c = NULL;
    assert_int_equal(relock_connect(cfg, &c), RELOCK_ECONFIG);
    assert_string_equal(relock_client_error(c)->message,
                        "sentinel.master is \"m\" but sentinel.addrs lists no sentinel");
    relock_client_free(c);
    relock_config_free(cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file),
        cmocka_unit_test(test_file_errors),
        cmocka_unit_test(test_addrs),
        cmocka_unit_test(test_set_by_name),
        cmocka_unit_test(test_connect_incomplete),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
