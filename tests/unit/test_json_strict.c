/* test_json_strict.c — proto/json_strict.c: what RFC 8259 allows is accepted, what it forbids is
 * refused (with the offset of the first bad byte), duplicate names are found after unescaping at
 * any depth and in large objects, strings carry NUL bytes, numbers read as strtod would. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_strict.h"
#include "requests.h"

static int parse(const char *s, size_t n, pj_doc *d)
{
    return pj_parse((const uint8_t *)s, n, d);
}

static int parse_z(const char *s, pj_doc *d)
{
    return parse(s, strlen(s), d);
}

Test(json_strict, accepts_rfc8259_texts)
{
    static const char *ok[] = {
        "{}", "[]", "0", "-0", "1.5e+3", "1E-2", "0.0", "\"\"", "true", "false", "null",
        " \t\r\n{ \"a\" : [ 1 , 2 , { } , [ ] , \"x\" ] } \n",
        "{\"a\":{\"b\":{\"c\":[null,true,false]}}}",
        "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0000\\u00e9\\uD83D\\uDE00\"",
        "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\x7f\"",
        "[123456789012345678901234567890, 1e400, -1e-400]",
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        pj_doc d;
        cr_assert_eq(parse_z(ok[i], &d), 0, "refused %s: %s at %zu", ok[i],
                     d.reason ? d.reason : "", d.offset);
        cr_assert_eq(d.status, PJ_VALID);
    }
}

Test(json_strict, refuses_what_rfc8259_forbids)
{
    static const struct {
        const char *s;
        size_t off;
    } bad[] = {
        {"[01]", 2},         {"[-01]", 3},       {"[1.]", 3},        {"[.5]", 1},
        {"[1e]", 3},         {"[1e+]", 4},       {"[+1]", 1},        {"[-]", 2},
        {"[0x1]", 2},        {"[NaN]", 1},       {"[Infinity]", 1},  {"[1,]", 3},
        {"{\"a\":1,}", 7},   {"{'a':1}", 1},     {"[tru]", 1},       {"[nul]", 1},
        {"\"a\tb\"", 2},     {"\"a\x01\"", 2},   {"\"a\nb\"", 2},    {"\"\\x41\"", 1},
        {"\"\\u00g0\"", 1},  {"\"\\ud800\"", 1}, {"\"\\udc00\"", 1}, {"\"\\ud800\\u0041\"", 1},
        {"\"\\ud800x\"", 1}, {"\"\xc0\xaf\"", 1}, {"\"\xed\xa0\x80\"", 1}, {"\"\xf4\x90\x80\x80\"", 1},
        {"\"\xe2\x82\"", 1}, {"\"\xff\"", 1},    {"\xef\xbb\xbf{}", 0}, {"\x0b{}", 0},
        {"\x0c{}", 0},       {"{} x", 3},        {"{}{}", 2},        {"[1] /**/", 4},
        {"", 0},             {"  ", 2},          {"{\"a\"}", 4},     {"{\"a\" 1}", 5},
        {"{1:2}", 1},        {"[1 2]", 3},       {"\"abc", 4},       {"[", 1},
        {"{\"a\":\"\\", 6},  {"\xc3\xa9", 0},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        pj_doc d;
        cr_assert_eq(parse_z(bad[i].s, &d), -1, "accepted %s", bad[i].s);
        cr_assert_eq(d.status, PJ_INVALID, "%s", bad[i].s);
        cr_assert_eq(d.offset, bad[i].off, "%s: offset %zu, want %zu (%s)", bad[i].s, d.offset,
                     bad[i].off, d.reason);
        cr_assert(d.reason && d.reason[0]);
    }
    /* a NUL byte is a control byte inside a string and not whitespace outside */
    pj_doc d;
    cr_assert_eq(parse("\"a\0b\"", 5, &d), -1);
    cr_assert_eq(d.offset, 2);
    cr_assert_eq(parse("{}\0", 3, &d), -1);
    cr_assert_eq(d.offset, 2);
}

Test(json_strict, depth_limit_is_1000_containers)
{
    size_t n = PJ_MAX_DEPTH + 1;
    char *s = malloc(2 * n + 1);
    memset(s, '[', n);
    memset(s + n, ']', n);
    pj_doc d;
    cr_assert_eq(parse(s + 1, 2 * (n - 1), &d), 0); /* exactly 1000 deep */
    cr_assert_eq(parse(s, 2 * n, &d), -1);
    cr_assert_eq(d.status, PJ_INVALID);
    cr_assert_eq(d.offset, PJ_MAX_DEPTH);
    free(s);
}

Test(json_strict, duplicates_after_unescaping_at_any_depth)
{
    pj_doc d;
    cr_assert_eq(parse_z("{\"a\":1,\"\\u0061\":2}", &d), -1);
    cr_assert_eq(d.status, PJ_DUPLICATE);
    cr_assert_str_eq(d.dup, "a");
    cr_assert_eq(parse_z("{\"x\":[{\"k\":1},{\"k\":2,\"j\":{\"q\":1,\"q\":2}}]}", &d), -1);
    cr_assert_eq(d.status, PJ_DUPLICATE);
    cr_assert_str_eq(d.dup, "q");
    /* same name in sibling objects, or a name and its prefix / NUL-extended form, is fine */
    cr_assert_eq(parse_z("[{\"k\":1},{\"k\":2},{\"k\":3,\"k\\u0000\":4,\"\":5,\"kk\":6}]", &d), 0);
    /* an inner object's names do not clash with the outer object's */
    cr_assert_eq(parse_z("{\"a\":{\"a\":{\"a\":1}},\"b\":2}", &d), 0);
    /* a syntax error after a duplicate wins */
    cr_assert_eq(parse_z("{\"a\":1,\"a\":2,\"b\":01}", &d), -1);
    cr_assert_eq(d.status, PJ_INVALID);
}

/* Large objects use the hash table: every position of the repeated name is found, and 100k
 * distinct names are not a duplicate. */
Test(json_strict, duplicates_in_large_objects)
{
    size_t n = 100000;
    char *s = malloc(n * 16 + 16);
    for (int dup_at = -1; dup_at < 3; dup_at++) {
        size_t o = 0;
        s[o++] = '{';
        for (size_t i = 0; i < n; i++) {
            size_t id = i;
            if (dup_at == 0 && i == n - 1) id = 0;          /* last repeats first */
            if (dup_at == 1 && i == n / 2) id = n / 2 - 1;  /* middle */
            if (dup_at == 2 && i == 1) id = 0;              /* second repeats first */
            o += (size_t)sprintf(s + o, "%s\"k%zu\":0", i ? "," : "", id);
        }
        s[o++] = '}';
        pj_doc d;
        int rc = parse(s, o, &d);
        if (dup_at < 0) {
            cr_assert_eq(rc, 0);
            cr_assert_eq(d.n_members, n);
        } else {
            cr_assert_eq(rc, -1, "dup_at %d", dup_at);
            cr_assert_eq(d.status, PJ_DUPLICATE);
        }
    }
    free(s);
}

Test(json_strict, top_level_members_recorded)
{
    pj_doc d;
    const char *s = "{ \"tokens\" : [1, 2] , \"t\\u006fp_k\":3 }";
    cr_assert_eq(parse_z(s, &d), 0);
    cr_assert_eq(d.top_type, PJ_OBJECT);
    cr_assert_eq(d.n_members, 2);
    cr_assert(pj_string_eq(d.key[0], "tokens"));
    cr_assert(pj_string_eq(d.key[1], "top_k"));
    cr_assert(!pj_string_eq(d.key[1], "top_"));
    cr_assert_eq(d.val[0].n, 6);
    cr_assert(!memcmp(d.val[0].p, "[1, 2]", 6));
    cr_assert_eq(d.val[1].n, 1);
    cr_assert_eq(parse_z("[1]", &d), 0);
    cr_assert_eq(d.top_type, PJ_ARRAY);
    cr_assert_eq(d.n_members, 0);
}

Test(json_strict, strings_carry_nul_and_unescape_to_utf8)
{
    const char *s = "\"a\\u0000b\\n\\u00e9\\ud83d\\ude00\\/\"";
    pj_doc d;
    cr_assert_eq(parse_z(s, &d), 0);
    static const uint8_t want[] = {'a', 0, 'b', '\n', 0xc3, 0xa9, 0xf0, 0x9f, 0x98, 0x80, '/'};
    cr_assert_eq(pj_string_len(d.top), sizeof want);
    uint8_t out[sizeof want];
    cr_assert_eq(pj_string_decode(d.top, out), sizeof want);
    cr_assert(!memcmp(out, want, sizeof want));
    cr_assert_eq(parse_z("\"a\\u0000\"", &d), 0);
    cr_assert(!pj_string_eq(d.top, "a"));
}

Test(json_strict, numbers_read_as_strtod)
{
    static const char *nums[] = {"0", "-0", "7", "123456789012345", "1234567890123456789",
                                 "-9007199254740993", "1.5", "1e2", "0.1", "2.5e-3", "1e400",
                                 "-1e400", "4.9e-324", "123456789012345678901234567890.5e-10"};
    for (size_t i = 0; i < sizeof nums / sizeof *nums; i++) {
        char buf[80];
        snprintf(buf, sizeof buf, "[%s]", nums[i]);
        pj_doc d;
        cr_assert_eq(parse_z(buf, &d), 0, "%s", buf);
        pj_iter it;
        pj_span el;
        pj_array_begin(d.top, &it);
        cr_assert(pj_array_next(&it, &el));
        double v, want = strtod(nums[i], NULL);
        cr_assert_eq(pj_number(el, &v), 0);
        cr_assert(!memcmp(&v, &want, sizeof v), "%s: %.17g vs %.17g", nums[i], v, want);
        cr_assert(!pj_array_next(&it, &el));
    }
}

Test(json_strict, array_cursor_walks_nested_values)
{
    const char *s = "[ 1 ,\"a]\\\"\" , [2,[3]] , {\"k\":\"}\"} , true,false,null ]";
    pj_doc d;
    cr_assert_eq(parse_z(s, &d), 0);
    pj_iter it;
    pj_span el;
    static const char *want[] = {"1", "\"a]\\\"\"", "[2,[3]]", "{\"k\":\"}\"}", "true", "false",
                                 "null"};
    pj_array_begin(d.top, &it);
    for (size_t i = 0; i < 7; i++) {
        cr_assert(pj_array_next(&it, &el), "element %zu", i);
        cr_assert_eq(el.n, strlen(want[i]), "element %zu", i);
        cr_assert(!memcmp(el.p, want[i], el.n), "element %zu", i);
    }
    cr_assert(!pj_array_next(&it, &el));
    cr_assert_eq(parse_z("[ ]", &d), 0);
    pj_array_begin(d.top, &it);
    cr_assert(!pj_array_next(&it, &el));
}

/* ---------------------------------------------------------------- through the request decoders */

static const proto_limits LIM = {.vocab_size = 256, .max_tokens_per_request = 16};

/* The error of a /tokens body the decoder must refuse (asserted). */
static proto_error tokens_refusal(const char *b)
{
    proto_tokens_req r;
    proto_error e;
    cr_assert_eq(proto_decode_tokens_req((const uint8_t *)b, strlen(b), &LIM, &r, &e), -1, "%s", b);
    return e;
}

Test(json_strict, requests_carry_nul_bytes)
{
    proto_tokens_req r;
    proto_error e;
    const char *b = "{\"text\":\"a\\u0000b\"}";
    cr_assert_eq(proto_decode_tokens_req((const uint8_t *)b, strlen(b), &LIM, &r, &e), 0);
    cr_assert_eq(r.n, 3);
    cr_assert(r.tokens[0] == 'a' && r.tokens[1] == 0 && r.tokens[2] == 'b');
    proto_tokens_req_free(&r);

    proto_generate_req g;
    b = "{\"stop\":[\" \\u0000zzz\", \"\\u0000\"]}";
    cr_assert_eq(proto_decode_generate_req((const uint8_t *)b, strlen(b), &LIM, &g, &e), 0,
                 "%s", e.message);
    cr_assert_eq(g.n_stop, 2);
    cr_assert_eq(g.stop_len[0], 5);
    cr_assert(!memcmp(g.stop[0], " \0zzz", 5));
    cr_assert_eq(g.stop_len[1], 1);
    cr_assert_eq(g.stop[1][0], 0);
    /* 64 bytes after unescaping is the limit, whatever the escaped length */
    char big[512] = "{\"stop\":\"";
    for (int i = 0; i < 64; i++)
        strcat(big, "\\u0000");
    strcat(big, "\"}");
    cr_assert_eq(proto_decode_generate_req((const uint8_t *)big, strlen(big), &LIM, &g, &e), 0);
    cr_assert_eq(g.stop_len[0], 64);
    memcpy(big + strlen(big) - 2, "x\"}", 4);
    cr_assert_eq(proto_decode_generate_req((const uint8_t *)big, strlen(big), &LIM, &g, &e), -1);
    cr_assert_str_eq(e.code, "invalid_stop");
}

Test(json_strict, requests_refuse_non_json_with_invalid_json)
{
    static const char *bad[] = {"{\"tokens\":[01,00,1.]}", "{\"text\":\"a\tb\"}",
                                "{\"text\":\"a\x01\"}", "\x0b{\"tokens\":[1]}",
                                "{\"tokens\":[1],}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        proto_error e = tokens_refusal(bad[i]);
        cr_assert_eq(e.status, 400);
        cr_assert_str_eq(e.code, "invalid_json", "%s", bad[i]);
    }
}

Test(json_strict, key_with_nul_is_unknown_field)
{
    proto_error e = tokens_refusal("{\"tokens\":[1],\"tokens\\u0000\":[2]}");
    cr_assert_str_eq(e.code, "unknown_field");
    cr_assert_str_eq(e.message, "unknown field \"tokens?\"");
}

Test(json_strict, too_many_tokens_counts_every_element)
{
    /* 17 tokens, the last one invalid: too_many_tokens wins, as before */
    proto_error e = tokens_refusal("{\"tokens\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,\"x\"]}");
    cr_assert_str_eq(e.code, "too_many_tokens");
    cr_assert_str_eq(e.message, "request has 17 tokens; max_tokens_per_request is 16");
    e = tokens_refusal("{\"tokens\":[1,2.0,3e0,\"x\"]}");
    cr_assert_str_eq(e.code, "invalid_token");
    cr_assert_str_eq(e.message, "tokens[3] is not an integer token id in [0, 256)");
}
