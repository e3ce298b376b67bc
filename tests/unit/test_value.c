/* Classifying stored values: timestamp, token, or neither (design.md §4.2). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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

/* The float-second peers write fractions: a timestamp all the same,
 * ending at V·u to the ms, rounded up (never early). */
static void test_fractions(void **state)
{
    (void)state;
    relock__value v = cls("1795812032.47337");
    assert_int_equal(v.kind, RELOCK_VALUE_TIMESTAMP);
    assert_int_equal(v.ts, 1795812032LL);
    assert_int_equal(v.ts_digits, 10);
    assert_int_equal(v.frac, 1);
    assert_int_equal(v.has_suffix, 0);
    relock__stamp st;
    relock__value_stamp(&v, &st);
    assert_int_equal(relock__stamp_ms(&st, 1000, 1), 1795812032474LL);
    assert_int_equal(relock__stamp_ms(&st, 1000, 0), 1795812032473LL);
    /* Python's repr: seventeen digits; the tail only rounds up. */
    v = cls("1795812032.4733701234");
    relock__value_stamp(&v, &st);
    assert_int_equal(st.frac_den, 1000000000LL);
    assert_int_equal(st.frac_num, 473370124LL);
    v = cls("1795812032.0000000001");
    relock__value_stamp(&v, &st);
    assert_int_equal(relock__stamp_ms(&st, 1000, 1), 1795812032001LL);
    assert_int_equal(relock__stamp_ms(&st, 1000, 0), 1795812032000LL);
    v = cls("1795812032.0");
    assert_int_equal(v.frac, 1);
    relock__value_stamp(&v, &st);
    assert_int_equal(relock__stamp_ms(&st, 1000, 1), 1795812032000LL);
    /* Not fractions: no digits after the point, two points, a suffix. */
    assert_int_equal(cls("1795812032.").kind, RELOCK_VALUE_UNKNOWN);
    assert_int_equal(cls("1795812032.5.5").kind, RELOCK_VALUE_UNKNOWN);
    assert_int_equal(cls(".5").kind, RELOCK_VALUE_UNKNOWN);
    assert_int_equal(cls("1795812032.5:0123456789abcdef0123456789abcdef").kind,
                     RELOCK_VALUE_UNKNOWN);
    assert_int_equal(cls("1e9").kind, RELOCK_VALUE_UNKNOWN);
    /* Other spellings some peers' parsers accept (Ruby's to_f, Python's
     * float()) are foreign here: never taken over, which no peer's holder
     * can mind. */
    static const char *const foreign[] = {"1.7e9",        "1795812032e0", "+1795812032",
                                          " 1795812032",  "1795812032 ",  "1795812032\n",
                                          "inf",          "nan",          "-1795812032.5",
                                          "1795812032.5x", "0x6b0a4a40",  "1795812032,5"};
    for (size_t k = 0; k < sizeof foreign / sizeof foreign[0]; k++)
        if (cls(foreign[k]).kind != RELOCK_VALUE_UNKNOWN)
            fail_msg("\"%s\" read as kind %d", foreign[k], (int)cls(foreign[k]).kind);
    /* A fraction of zero, a whole clock's time as a float (redis-py 2.7),
     * has frac_num 0, which the takeover reads as an integer. */
    assert_int_equal(cls("1795812032.000").frac_num, 0);
    assert_true(cls("1795812032.0000000001").frac_num > 0);
    const char *z = "1795812032.0"; /* scan: held a second longer, as "1795812032" */
    assert_int_equal(relock_key_classify(z, strlen(z), -1, 1795812032500LL), RELOCK_KEY_LEGACY);
    assert_int_equal(relock_key_classify(z, strlen(z), -1, 1795812033000LL), RELOCK_KEY_STALE);
    /* scan's class: a fraction holds until V itself, not a second later. */
    const char *f = "1795812032.473";
    assert_int_equal(relock_key_classify(f, strlen(f), -1, 1795812032472LL), RELOCK_KEY_LEGACY);
    assert_int_equal(relock_key_classify(f, strlen(f), -1, 1795812032473LL), RELOCK_KEY_STALE);
    assert_int_equal(relock_key_classify(f, strlen(f), 5000, 1795812032473LL), RELOCK_KEY_BRIDGE);
    const char *i = "1795812032";
    assert_int_equal(relock_key_classify(i, strlen(i), -1, 1795812032999LL), RELOCK_KEY_LEGACY);
    assert_int_equal(relock_key_classify(i, strlen(i), -1, 1795812033000LL), RELOCK_KEY_STALE);
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
    /* The hex text and the letter check, against a nibble at a time: every
     * byte value at every place among digits-only bytes, and random bytes. */
    unsigned char raw[16];
    char hx[33];
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int n = 0; n < 16 * 256 + 4096; n++) {
        if (n < 16 * 256) {
            memset(raw, 0x99, sizeof raw);
            raw[n / 256] = (unsigned char)(n % 256);
        } else {
            for (int i = 0; i < 16; i++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                raw[i] = (unsigned char)(x & (n % 3 ? 0x99 : 0xff));
            }
        }
        int letters = 0;
        char want[33];
        for (int i = 0; i < 16; i++) {
            snprintf(want + 2 * i, 3, "%02x", raw[i]);
            letters += (raw[i] >> 4) > 9 || (raw[i] & 15) > 9;
        }
        assert_int_equal(relock__token_hex(raw, hx), letters > 0);
        assert_string_equal(hx, want);
    }
    for (int i = 0; i < 1000; i++) {
        char tok[33];
        assert_int_equal(relock__token(tok), 0);
        assert_int_equal(strlen(tok), 32);
        assert_int_equal(cls(tok).kind, RELOCK_VALUE_TOKEN);
    }
}

/* A client's tokens come from its store of random bytes: none twice in
 * one process, and a forked child, which copied the store, draws tokens
 * its parent does not (the store is refilled when the fork count moved). */
static void test_client_tokens(void **state)
{
    (void)state;
    relock_client *c = calloc(1, sizeof *c);
    assert_non_null(c);
    enum { N = 200 };
    static char seen[N][33];
    for (int i = 0; i < N; i++) {
        assert_int_equal(relock__token_for(c, "acquire", "t", seen[i]), RELOCK_OK);
        assert_int_equal(cls(seen[i]).kind, RELOCK_VALUE_TOKEN);
        for (int j = 0; j < i; j++)
            assert_string_not_equal(seen[i], seen[j]);
    }
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char tok[33] = "";
        relock__token_for(c, "acquire", "t", tok);
        _exit(write(fd[1], tok, sizeof tok) == (ssize_t)sizeof tok ? 0 : 1);
    }
    char theirs[33] = "", ours[33];
    assert_int_equal(read(fd[0], theirs, sizeof theirs), (ssize_t)sizeof theirs);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(relock__token_for(c, "acquire", "t", ours), RELOCK_OK);
    assert_int_equal(strlen(theirs), 32);
    assert_string_not_equal(theirs, ours);
    close(fd[0]);
    close(fd[1]);
    free(c);
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
    /* "{a}" is the braced form of "a": its side keys carry a mark. */
    assert_int_equal(relock__fence_key("{a}", out, sizeof out), 0);
    assert_string_equal(out, "{a} relock:fence:tag");
    assert_int_equal(relock__owner_key("{a}", out, sizeof out), 0);
    assert_string_equal(out, "{a} relock:owner:tag");
    assert_int_equal(relock__fence_key_before("{a}", out, sizeof out), 1);
    assert_string_equal(out, "{a} relock:fence");
    assert_int_equal(relock__fence_key_before("a", out, sizeof out), 0);
    assert_int_equal(relock__fence_key_before("{a}x", out, sizeof out), 0);
    /* Every buffer size, from too small to enough: the names are joined
     * as snprintf() would, cut short and terminated, -1 when cut. */
    for (size_t len = 1; len <= 32; len++) {
        char want[128], got[128];
        static const char *const keys[] = {"job", "a{tag}b", "{a}"};
        for (int k = 0; k < 3; k++) {
            memset(got, 'x', sizeof got);
            int n = k == 0   ? snprintf(want, len, "{%s} relock:fence", keys[k])
                    : k == 1 ? snprintf(want, len, "%s relock:fence", keys[k])
                             : snprintf(want, len, "%s relock:fence:tag", keys[k]);
            assert_int_equal(relock__fence_key(keys[k], got, len), (size_t)n >= len ? -1 : 0);
            assert_string_equal(got, want);
            assert_int_equal(got[len], 'x'); /* nothing written past len */
        }
        memset(got, 'x', sizeof got);
        int n = snprintf(want, len, "%s relock:legacy-seen", "pre:");
        assert_int_equal(relock__marker_key("pre:", got, len), (size_t)n >= len ? -1 : 0);
        assert_string_equal(got, want);
        n = snprintf(want, len, "%s relock:watching-since", "");
        assert_int_equal(relock__watch_key("", got, len), (size_t)n >= len ? -1 : 0);
        assert_string_equal(got, want);
    }
}

/* CRC16-CCITT (XMODEM) and keyHashSlot() of Redis Cluster. */
static unsigned crc16(const char *buf, size_t len)
{
    unsigned crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (unsigned)(unsigned char)buf[i] << 8;
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? ((crc << 1) ^ 0x1021) : (crc << 1);
        crc &= 0xffff;
    }
    return crc;
}

static unsigned key_slot(const char *key)
{
    const char *open = strchr(key, '{');
    const char *close = open ? strchr(open + 1, '}') : NULL;
    if (!close || close == open + 1)
        return crc16(key, strlen(key)) & 0x3fff;
    return crc16(open + 1, (size_t)(close - open - 1)) & 0x3fff;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every lock key of up to 6 characters from {, }, a and : that lock.c
 * accepts: side keys are pairwise distinct (fence and owner alike) and in
 * their lock key's slot (decision 82; "a" and "{a}" once shared). */
static void test_side_keys_distinct(void **state)
{
    (void)state;
    static const char alpha[] = "{}a:";
    enum { MAXLEN = 6, MAXKEYS = 4 * 4 * 4 * 4 * 4 * 4 * 2 };
    char **fences = calloc(MAXKEYS, sizeof *fences), **owners = calloc(MAXKEYS, sizeof *owners);
    assert_non_null(fences);
    assert_non_null(owners);
    size_t n = 0;
    for (int len = 1; len <= MAXLEN; len++) {
        unsigned total = 1;
        for (int i = 0; i < len; i++)
            total *= 4;
        for (unsigned code = 0; code < total; code++) {
            char key[MAXLEN + 1];
            unsigned x = code;
            for (int i = 0; i < len; i++, x /= 4)
                key[i] = alpha[x % 4];
            key[len] = '\0';
            if (!relock__key_slot_safe(key))
                continue;
            char f[64], o[64];
            assert_int_equal(relock__fence_key(key, f, sizeof f), 0);
            assert_int_equal(relock__owner_key(key, o, sizeof o), 0);
            if (key_slot(f) != key_slot(key) || key_slot(o) != key_slot(key))
                fail_msg("side keys of \"%s\" leave its slot: \"%s\", \"%s\"", key, f, o);
            assert_true(n < MAXKEYS);
            fences[n] = strdup(f);
            owners[n] = strdup(o);
            assert_non_null(fences[n]);
            assert_non_null(owners[n]);
            n++;
        }
    }
    qsort(fences, n, sizeof *fences, cmp_str);
    qsort(owners, n, sizeof *owners, cmp_str);
    for (size_t i = 1; i < n; i++) {
        if (strcmp(fences[i - 1], fences[i]) == 0)
            fail_msg("two lock keys share fence key \"%s\"", fences[i]);
        if (strcmp(owners[i - 1], owners[i]) == 0)
            fail_msg("two lock keys share owner key \"%s\"", owners[i]);
    }
    for (size_t i = 0; i < n; i++) {
        free(fences[i]);
        free(owners[i]);
    }
    free(fences);
    free(owners);
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
        cmocka_unit_test(test_fractions),
        cmocka_unit_test(test_timestamps),
        cmocka_unit_test(test_tokens),
        cmocka_unit_test(test_neither),
        cmocka_unit_test(test_token_generation),
        cmocka_unit_test(test_client_tokens),
        cmocka_unit_test(test_sha1),
        cmocka_unit_test(test_side_keys),
        cmocka_unit_test(test_side_keys_distinct),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
