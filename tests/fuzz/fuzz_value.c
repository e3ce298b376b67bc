/*
 * fuzz_value: classifying what a lock key holds (relock__classify) and
 * guessing a timestamp's unit from its digits (relock__ts_unit_guess).
 *
 * The input is the stored value, passed with its length and without a
 * terminating NUL, as hiredis hands values over (the sanitizer catches a
 * read past the end).  The result is checked against a reference written
 * from design.md §4.2 and internal.h: a decimal integer of 1 to 18 digits,
 * optionally followed by ':' and at least one more byte, is a timestamp;
 * otherwise 32 lowercase hex characters with at least one letter are a
 * token; anything else is unknown.
 */
#include <stdint.h>
#include <string.h>

#include "fuzz_common.h"
#include "internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int is_digit(uint8_t ch)
{
    return ch >= '0' && ch <= '9';
}

/* 32 lowercase hex characters, at least one a letter. */
static int is_token(const uint8_t *p, size_t n)
{
    int letters = 0;
    if (n != 32)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] >= 'a' && p[i] <= 'f')
            letters++;
        else if (!is_digit(p[i]))
            return 0;
    }
    return letters > 0;
}

static void check_unit_guess(int nd)
{
    int u = relock__ts_unit_guess(nd);
    FZ_CHECK_MSG(u == (nd == 10 ? 0 : nd == 13 ? 1 : -1), "%d digits -> %d", nd, u);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    relock__value v;
    memset(&v, 0x5a, sizeof v);
    relock__classify((const char *)data, size, &v);

    size_t digits = 0;
    while (digits < size && is_digit(data[digits]))
        digits++;
    /* A timestamp's suffix, if any, is ':' and a token (design.md §4.2). */
    int suffix = digits < size && data[digits] == ':' && is_token(data + digits + 1, size - digits - 1);
    /* Or a fraction: '.' and 1 to 18 digits to the end (float-second peers). */
    size_t fdigits = 0;
    if (digits < size && data[digits] == '.')
        while (digits + 1 + fdigits < size && is_digit(data[digits + 1 + fdigits]))
            fdigits++;
    int frac = fdigits >= 1 && fdigits <= 18 && digits + 1 + fdigits == size;
    int ts = digits >= 1 && digits <= 18 && (digits == size || suffix || frac);
    int token = is_token(data, size);

    if (ts) {
        FZ_CHECK_MSG(v.kind == RELOCK_VALUE_TIMESTAMP, "kind %d", (int)v.kind);
        long long want = 0;
        for (size_t i = 0; i < digits; i++)
            want = want * 10 + (data[i] - '0');
        FZ_CHECK(v.ts == want && v.ts >= 0);
        FZ_CHECK(v.ts_digits == (int)digits);
        FZ_CHECK(v.has_suffix == suffix);
        FZ_CHECK(v.frac == frac);
        /* The fraction never ends a value early: num / den <= 1, and 0
         * exactly when every digit is 0. */
        FZ_CHECK(v.frac_den >= 1 && v.frac_num >= 0 && v.frac_num <= v.frac_den);
        check_unit_guess(v.ts_digits);
    } else if (token) {
        FZ_CHECK_MSG(v.kind == RELOCK_VALUE_TOKEN, "kind %d", (int)v.kind);
    } else {
        FZ_CHECK_MSG(v.kind == RELOCK_VALUE_UNKNOWN, "kind %d", (int)v.kind);
    }

    /* A token is never mistaken for a timestamp, whatever its digits. */
    if (v.kind == RELOCK_VALUE_TOKEN)
        FZ_CHECK(size == 32 && digits < 32);

    /* NULL is "absent". */
    relock__classify(NULL, 0, &v);
    FZ_CHECK(v.kind == RELOCK_VALUE_NONE);

    /* The unit guess for any int the input spells (negative ones too). */
    if (size >= 4) {
        int32_t nd;
        memcpy(&nd, data, sizeof nd);
        check_unit_guess(nd);
    }
    return 0;
}
