/* utf8.c — well-formed UTF-8 (utf8.h). */
#include "utf8.h"

int proto_utf8_lead_len(unsigned c)
{
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        return 2;
    if (c >= 0xE0 && c <= 0xEF)
        return 3;
    if (c >= 0xF0 && c <= 0xF4)
        return 4;
    return 0;
}

int proto_utf8_cont_ok(unsigned lead, int i, unsigned c)
{
    if ((c & 0xC0) != 0x80)
        return 0;
    if (i == 1) { /* the second byte excludes overlongs, surrogates and > U+10FFFF */
        if (lead == 0xE0 && c < 0xA0)
            return 0;
        if (lead == 0xED && c > 0x9F)
            return 0;
        if (lead == 0xF0 && c < 0x90)
            return 0;
        if (lead == 0xF4 && c > 0x8F)
            return 0;
    }
    return 1;
}

size_t proto_utf8_seq(const uint8_t *s, size_t n)
{
    int len = proto_utf8_lead_len(s[0]);
    if (len == 0 || n < (size_t)len)
        return 0;
    for (int i = 1; i < len; i++)
        if (!proto_utf8_cont_ok(s[0], i, s[i]))
            return 0;
    return (size_t)len;
}
