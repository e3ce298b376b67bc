/* Classifying what a lock key holds (design.md §4.2): a decimal expiry
 * timestamp, maybe followed by ":token" or by a fraction (docs/legacy.md),
 * a 32-character lowercase hex token (modern values), or neither. */
#include <string.h>

#include "base.h"

static int is_token(const char *v, size_t len)
{
    if (len != 32)
        return 0;
    int letters = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = v[i];
        if (ch >= 'a' && ch <= 'f')
            letters++;
        else if (ch < '0' || ch > '9')
            return 0;
    }
    return letters > 0;
}

void relock__classify(const char *v, size_t len, relock__value *out)
{
    *out = (relock__value){.kind = v ? RELOCK_VALUE_UNKNOWN : RELOCK_VALUE_NONE};
    if (!v)
        return;
    size_t digits = 0;
    while (digits < len && v[digits] >= '0' && v[digits] <= '9')
        digits++;
    /* 18 digits still fit a long long; no present-day time needs more.
     * A suffix is ":" and a token (bridge.value_suffix). */
    int suffix_ok = digits < len && v[digits] == ':' && is_token(v + digits + 1, len - digits - 1);
    /* Or a fraction: the float-second peers write "1795812032.47337". */
    size_t fdigits = 0;
    if (digits < len && v[digits] == '.')
        while (digits + 1 + fdigits < len && v[digits + 1 + fdigits] >= '0' &&
               v[digits + 1 + fdigits] <= '9')
            fdigits++;
    int frac_ok = fdigits > 0 && fdigits <= 18 && digits + 1 + fdigits == len;
    if (digits > 0 && digits <= 18 && (digits == len || suffix_ok || frac_ok)) {
        long long ts = 0;
        for (size_t i = 0; i < digits; i++)
            ts = ts * 10 + (v[i] - '0');
        *out = (relock__value){.kind = RELOCK_VALUE_TIMESTAMP, .ts = ts, .ts_digits = (int)digits,
                               .has_suffix = suffix_ok, .frac_den = 1};
        if (frac_ok) {
            /* Nine digits are a nanosecond of a second: the rest only
             * rounds the fraction up (never down, which would end the
             * value early). */
            const char *f = v + digits + 1;
            out->frac = 1;
            for (size_t i = 0; i < fdigits && i < 9; i++) {
                out->frac_num = out->frac_num * 10 + (f[i] - '0');
                out->frac_den *= 10;
            }
            for (size_t i = 9; i < fdigits; i++)
                if (f[i] != '0') {
                    out->frac_num++;
                    break;
                }
        }
        return;
    }
    if (is_token(v, len))
        out->kind = RELOCK_VALUE_TOKEN;
}

int relock__ts_unit_guess(int ndigits)
{
    /* Seconds since the epoch have had 10 digits since 2001 and keep them
     * until 2286; milliseconds have 13 over the same span. */
    return ndigits == 10 ? 0 : ndigits == 13 ? 1 : -1;
}

void relock__value_stamp(const relock__value *v, relock__stamp *out)
{
    *out = (relock__stamp){v->ts, v->frac, v->frac_num, v->frac_den > 0 ? v->frac_den : 1};
}

void relock__value_text(char *dst, size_t n, const char *v, size_t len)
{
    if (!n)
        return;
    size_t k = len < n - 1 ? len : n - 1;
    for (size_t i = 0; i < k; i++)
        dst[i] = v[i] ? v[i] : '?';
    dst[k] = '\0';
}

int relock__value_is(const char *v, size_t len, const char *s)
{
    return strlen(s) == len && memcmp(v, s, len) == 0;
}
