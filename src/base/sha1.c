/* SHA-1, for the scripts' EVALSHA (scripts.c); not for a secure hash. */
#include <stdint.h>
#include <string.h>

#include "base.h"

static uint32_t rol(uint32_t x, int n)
{
    return (x << n) | (x >> (32 - n));
}

static void block(uint32_t h[5], const unsigned char *p)
{
    uint32_t w[80];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
    for (int i = 16; i < 80; i++)
        w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    static const uint32_t k[4] = {0x5a827999u, 0x6ed9eba1u, 0x8f1bbcdcu, 0xca62c1d6u};
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; i++) {
        uint32_t f = i < 20   ? (b & c) | (~b & d)
                     : i < 40 ? b ^ c ^ d
                     : i < 60 ? (b & c) | (b & d) | (c & d)
                              : b ^ c ^ d;
        uint32_t t = rol(a, 5) + f + e + k[i / 20] + w[i];
        e = d;
        d = c;
        c = rol(b, 30);
        b = a;
        a = t;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
}

void relock__sha1_hex(const char *data, size_t len, char out[41])
{
    uint32_t h[5] = {0x67452301u, 0xefcdab89u, 0x98badcfeu, 0x10325476u, 0xc3d2e1f0u};
    const unsigned char *p = (const unsigned char *)data;
    size_t left = len;
    while (left >= 64) {
        block(h, p);
        p += 64;
        left -= 64;
    }
    unsigned char tail[128] = {0};
    memcpy(tail, p, left);
    tail[left] = 0x80;
    size_t tlen = left + 1 + 8 <= 64 ? 64 : 128;
    uint64_t bits = (uint64_t)len * 8u;
    for (int i = 0; i < 8; i++)
        tail[tlen - 1 - (size_t)i] = (unsigned char)(bits >> (8 * i));
    block(h, tail);
    if (tlen == 128)
        block(h, tail + 64);
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 20; i++) {
        unsigned char byte = (unsigned char)(h[i / 4] >> (24 - 8 * (i % 4)));
        out[2 * i] = hex[byte >> 4];
        out[2 * i + 1] = hex[byte & 15];
    }
    out[40] = '\0';
}
