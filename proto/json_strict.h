/*
 * json_strict.h — a strict RFC 8259 JSON validator, and a cursor over text it has validated.
 *
 * pj_parse makes one pass over the bytes with no tree and no recursion. It refuses everything
 * RFC 8259 does not allow: leading zeros ("01"), "1." / ".5" / "1e", "+1", NaN/Infinity,
 * comments, trailing commas, single quotes, raw control bytes (U+0000..U+001F) in strings,
 * unknown escapes, lone surrogates (\ud800 without a low half, a lone \udc00), bytes that are not
 * UTF-8 (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF), a BOM, whitespace other
 * than space, TAB, LF and CR between tokens, and anything after the value. Nesting deeper than
 * PJ_MAX_DEPTH arrays/objects is refused too. It also finds duplicate member names (compared
 * after unescaping: "a" and "\u0061" are the same name) at any depth; a syntax error anywhere
 * wins over a duplicate (the body is then not JSON at all).
 *
 * Strings carry every byte: "\u0000" is a NUL byte of the decoded string, never its end.
 *
 * The cursor functions (pj_value_end, pj_array_next, pj_number, pj_string_*) assume text that
 * pj_parse accepted and do no checking of their own. Nothing here allocates except pj_parse's
 * scratch for member names (freed before it returns); everything is thread-safe.
 */
#ifndef PROTO_JSON_STRICT_H
#define PROTO_JSON_STRICT_H

#include <stddef.h>
#include <stdint.h>

#define PJ_MAX_DEPTH 1000  /* nested arrays/objects; the 1001st is refused (cJSON's old limit) */
#define PJ_MAX_MEMBERS 16  /* top-level members whose key and value pj_parse records */

typedef enum { PJ_VALID = 0, PJ_INVALID = 1, PJ_DUPLICATE = 2 } pj_status;
typedef enum { PJ_OBJECT, PJ_ARRAY, PJ_STRING, PJ_NUMBER, PJ_TRUE, PJ_FALSE, PJ_NULL } pj_type;

/* The text of one value (a string's span includes its quotes). */
typedef struct {
    const uint8_t *p;
    size_t n;
} pj_span;

typedef struct {
    pj_status status;
    size_t offset;       /* PJ_INVALID: byte offset where the text stops being JSON */
    const char *reason;  /* PJ_INVALID: what was wrong there (static text) */
    char dup[40];        /* PJ_DUPLICATE: the first repeated name, unescaped, cut to 39 bytes */
    size_t dup_len;      /* its full unescaped length */
    pj_span top;         /* the whole value */
    pj_type top_type;
    size_t n_members;    /* top-level object: how many members */
    pj_span key[PJ_MAX_MEMBERS]; /* ... and the first PJ_MAX_MEMBERS of them, in order */
    pj_span val[PJ_MAX_MEMBERS];
} pj_doc;

/* Validate s[0..n) as one JSON text. Returns 0 (status PJ_VALID, top and members filled) or -1
 * (status PJ_INVALID with offset/reason, or PJ_DUPLICATE with dup). */
int pj_parse(const uint8_t *s, size_t n, pj_doc *d);

/* ---- cursor over validated text ---- */
pj_type pj_type_of(pj_span v);
/* One past the last byte of the value starting at p. */
const uint8_t *pj_value_end(const uint8_t *p);

typedef struct {
    const uint8_t *p, *end;
    int first;
} pj_iter;
void pj_array_begin(pj_span array, pj_iter *it);
/* 1 and *elem set, or 0 at the end of the array. */
int pj_array_next(pj_iter *it, pj_span *elem);

void pj_object_begin(pj_span object, pj_iter *it);
/* 1 and *key (the name's string token) and *val set, or 0 at the end of the object. */
int pj_object_next(pj_iter *it, pj_span *key, pj_span *val);

/* A number's value as strtod would give it (exact for integers up to 2^53, ±inf beyond
 * DBL_MAX). Returns 0, or -1 when v is not a number. */
int pj_number(pj_span v, double *out);
/* A string's unescaped length in bytes. */
size_t pj_string_len(pj_span str);
/* Unescape str into out (room for pj_string_len(str) bytes); returns that length. */
size_t pj_string_decode(pj_span str, uint8_t *out);
/* The unescaped string, malloc'd (caller frees), NUL-terminated after its *len bytes (which may
 * hold NUL bytes themselves). */
char *pj_string_dup(pj_span str, size_t *len);
/* 1 when the string unescapes to exactly the NUL-terminated lit (a NUL inside str never
 * matches the end of lit). */
int pj_string_eq(pj_span str, const char *lit);

#endif /* PROTO_JSON_STRICT_H */
