/*
 * utf8.h — the one definition of well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates,
 * nothing above U+10FFFF) for every check in proto/ and server/: request JSON strings, JSON
 * output, generated text and HTTP error bodies.
 */
#ifndef PROTO_UTF8_H
#define PROTO_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Length of the sequence a lead byte starts (1 for ASCII), or 0 when c cannot start one. */
int proto_utf8_lead_len(unsigned c);
/* 1 when c may stand at index i (1..3) of a sequence whose lead byte is lead. */
int proto_utf8_cont_ok(unsigned lead, int i, unsigned c);
/* Length of the well-formed sequence at s (at most n bytes, n >= 1), or 0 when it is not one. */
size_t proto_utf8_seq(const uint8_t *s, size_t n);

#endif /* PROTO_UTF8_H */
