/* Classifying stored values: timestamp, token, or neither (DESIGN §3). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "internal.h"

static relock__value cls(const char *s)
{
    relock__value v;
    relock__classify(s, s ? strlen(s) : 0, &v);
    return v;
}

static void test_timestamps(void **state)
{
    (void)state;
    relock__value v = cls("1700000000");
    assert_int_equal(v.kind, RELOCK_VALUE_TIMESTAMP);
    assert_int_equal(v.ts, 1700000000LL);
    assert_int_equal(v.ts_digits, 10);
    assert_int_equal(v.has_suffix, 0);
    assert_int_equal(relock__ts_unit_guess(v.ts_digits), 0);

    v = cls("1700000000123");
    assert_int_equal(v.kind, RELOCK_VALUE_TIMESTAMP);
    assert_int_equal(relock__ts_unit_guess(v.ts_digits), 1);

    v = cls("1700000000:0123456789abcdef0123456789abcdef");
    assert_int_equal(v.kind, RELOCK_VALUE_TIMESTAMP);
    assert_int_equal(v.ts, 1700000000LL);
    assert_int_equal(v.has_suffix, 1);

    /* A short number is still a timestamp, but of neither unit. */
    v = cls("42");
    assert_int_equal(v.kind, RELOCK_VALUE_TIMESTAMP);
    assert_int_equal(relock__ts_unit_guess(v.ts_digits), -1);
}

static void test_tokens(void **state)
{
    (void)state;
    assert_int_equal(cls("0123456789abcdef0123456789abcdef").kind, RELOCK_VALUE_TOKEN);
    /* all digits: a (strange) timestamp, never a token */
    assert_int_equal(cls("01234567890123456789012345678901").kind, RELOCK_VALUE_UNKNOWN);
    /* upper case, wrong length, other letters */
    assert_int_equal(cls("0123456789ABCDEF0123456789ABCDEF").kind, RELOCK_VALUE_UNKNOWN);
    assert_int_equal(cls("0123456789abcdef").kind, RELOCK_VALUE_UNKNOWN);
    assert_int_equal(cls("0123456789abcdeg0123456789abcdef").kind, RELOCK_VALUE_UNKNOWN);
}

static void test_neither(void **state)
{
    (void)state;
    assert_int_equal(cls(NULL).kind, RELOCK_VALUE_NONE);
    assert_int_equal(cls("").kind, RELOCK_VALUE_UNKNOWN);
    assert_int_equal(cls("hello").kind, RELOCK_VALUE_UNKNOWN);
    assert_int_equal(cls("-1700000000").kind, RELOCK_VALUE_UNKNOWN);
    assert_int_equal(cls("1700000000:").kind, RELOCK_VALUE_UNKNOWN);
    /* After ':' only a token: anything else is not a value relock knows. */
    assert_int_equal(cls("1700000000:junk").kind, RELOCK_VALUE_UNKNOWN);
    assert_int_equal(cls("17000 00000").kind, RELOCK_VALUE_UNKNOWN);
    assert_int_equal(cls("1234567890123456789").kind, RELOCK_VALUE_UNKNOWN); /* > 18 digits */
}

static void test_token_generation(void **state)
{
    (void)state;
    for (int i = 0; i < 1000; i++) {
        char tok[33];
        assert_int_equal(relock__token(tok), 0);
        assert_int_equal(strlen(tok), 32);
        assert_int_equal(cls(tok).kind, RELOCK_VALUE_TOKEN);
    }
}

/* Side keys share the lock key's Cluster slot: Redis hashes the part
 * between the first '{' and the next '}' if it is not empty, else the key. */
static void test_side_keys(void **state)
{
    (void)state;
    char out[128];
    assert_int_equal(relock__fence_key("job", out, sizeof out), 0);
    assert_string_equal(out, "{job} relock:fence");
    assert_int_equal(relock__fence_key("a{tag}b", out, sizeof out), 0);
    assert_string_equal(out, "a{tag}b relock:fence");
    assert_int_equal(relock__owner_key("job", out, sizeof out), 0);
    assert_string_equal(out, "{job} relock:owner");
    assert_true(relock__key_slot_safe("job"));
    assert_true(relock__key_slot_safe("a{tag}b"));
    assert_true(relock__key_slot_safe("a{tag}}b"));
    assert_true(relock__key_slot_safe("x{"));
    assert_false(relock__key_slot_safe("!%}"));           /* '}' without a tag */
    assert_false(relock__key_slot_safe("prefix:{}tail")); /* an empty tag */
    assert_int_equal(relock__fence_key("job", out, 8), -1);
}

static void test_sha1(void **state)
{
    (void)state;
    char out[41];
    relock__sha1_hex("", 0, out);
    assert_string_equal(out, "da39a3ee5e6b4b0d3255bfef95601890afd80709");
    relock__sha1_hex("return 1", 8, out);
    assert_string_equal(out, "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
    const char *long_text = "The quick brown fox jumps over the lazy dog, again and again and "
                            "again, until the block boundary is well behind it.";
    relock__sha1_hex(long_text, strlen(long_text), out);
    assert_string_equal(out, "1d90d05b1705451dd4961ca7e70c90b8fe65080b");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timestamps),
        cmocka_unit_test(test_tokens),
        cmocka_unit_test(test_neither),
        cmocka_unit_test(test_token_generation),
        cmocka_unit_test(test_sha1),
        cmocka_unit_test(test_side_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
