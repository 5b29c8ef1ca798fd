/* test_sse.c — SSE (issue 10 item 17): Accept negotiation of the streamed routes (proto/accept.c):
 * media ranges, q-values (q=0 excludes, the highest q wins), specificity (type/subtype over
 * type/x over x/x, also as the tie-break), malformed elements ignored. */
#include <criterion/criterion.h>

#include <string.h>

#include "accept.h"
#include "buf.h"

#define SSE PROTO_FRAME_SSE
#define ND PROTO_FRAME_NDJSON

Test(accept, framing)
{
    static const struct {
        const char *accept;
        proto_framing want;
    } cases[] = {
        {NULL, ND},
        {"", ND},
        {"*/*", ND},
        {"application/x-ndjson", ND},
        {"text/event-stream", SSE},
        {"TEXT/Event-Stream", SSE},
        {"text/event-stream, */*", SSE},             /* the EventSource-like list */
        {"*/*, text/event-stream", SSE},
        {"text/event-stream;q=0.5, */*", ND},        /* any type gives NDJSON q=1 > 0.5 */
        {"text/event-stream;q=0.5, application/*;q=0.4", SSE},
        {"application/x-ndjson, text/event-stream", ND}, /* equal: NDJSON, the default */
        {"text/event-stream;q=0", ND},               /* excluded */
        {"text/event-stream;q=0, */*", ND},
        {"application/x-ndjson;q=0, */*", SSE},      /* NDJSON excluded, SSE through */
        {"text/*", SSE},
        {"text/*;q=0.9, application/x-ndjson;q=0.8", SSE},
        {"text/*, text/event-stream;q=0", ND},      /* the more specific range decides */
        {"text/html, application/json", ND},        /* neither: NDJSON, no 406 */
        {"text/event-stream; charset=utf-8", SSE},   /* parameters ignored */
        {"text/event-stream;foo=\"a,b;q=0\";q=1, application/x-ndjson;q=0.9", SSE},
        {"text/event-stream;q=2, application/x-ndjson;q=0.1", ND}, /* q=2 is no qvalue: ignored */
        {"text/event-stream;q=0.1234", ND},        /* 4 decimals: ignored */
        {"text/event-stream ; q=1.000", SSE},
        {"text/event-stream;q=1.001", ND},
        {" , ,text/event-stream,,", SSE},
        {"*/event-stream", ND},                      /* not a media range */
        {"text/event-stream;level=1;q=0.7, application/x-ndjson;q=0.6", SSE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_expect_eq(proto_negotiate_framing(cases[i].accept), cases[i].want, "Accept: %s",
                     cases[i].accept ? cases[i].accept : "(absent)");
}

Test(accept, quality_and_specificity)
{
    int spec;
    cr_expect_eq(proto_accept_quality("text/*;q=0.3, */*;q=0.1", "text/event-stream", &spec), 300);
    cr_expect_eq(spec, 1);
    cr_expect_eq(proto_accept_quality("*/*;q=0.25", "application/x-ndjson", &spec), 250);
    cr_expect_eq(spec, 0);
    cr_expect_eq(proto_accept_quality("text/event-stream;q=0.999", "text/event-stream", &spec), 999);
    cr_expect_eq(spec, 2);
    cr_expect_eq(proto_accept_quality("text/html", "text/event-stream", &spec), 0);
    cr_expect_eq(spec, -1);
    cr_expect_eq(proto_accept_quality("text/event-stream;q=0.5, text/event-stream;q=0.8",
                                      "text/event-stream", NULL), 800);
}

/* Every SSE event has an id (a token's pos, "done" for the last one); NDJSON has none; and
 * proto_frame_next cuts a buffer of several events (or lines) at their ends, one per chunk. */
Test(sse, event_ids_and_cutting)
{
    proto_buf b;
    proto_buf_init(&b);
    int32_t ids[1] = {7};
    float lps[1] = {-0.5f};
    proto_fold_line(&b, PROTO_FRAME_SSE, 41, 65, 1, -1.0f, ids, lps, 1);
    proto_gen_line(&b, PROTO_FRAME_SSE, 42, 10, "\n", 1, -0.25f);
    proto_fold_done(&b, PROTO_FRAME_SSE, 43, NULL);
    cr_assert_str_eq(b.data,
                     "id: 41\ndata: {\"pos\":41,\"token\":65,\"logprob\":-1,\"top\":[{\"token\":7,\"logprob\":-0.5}]}\n\n"
                     "id: 42\ndata: {\"pos\":42,\"token\":10,\"text\":\"\\n\",\"logprob\":-0.25}\n\n"
                     "id: done\ndata: {\"done\":true,\"tokens_seen\":43}\n\ndata: [DONE]\n\n");
    const char *p = b.data, *end = b.data + b.len;
    const char *want[] = {"id: 41\n", "id: 42\n", "id: done\n", "data: [DONE]\n\n"};
    for (int i = 0; i < 4; i++) {
        const char *next = proto_frame_next(p, end, PROTO_FRAME_SSE);
        cr_assert(!strncmp(p, want[i], strlen(want[i])), "event %d: %.*s", i, (int)(next - p), p);
        cr_assert(next - p >= 2 && next[-1] == '\n' && next[-2] == '\n');
        p = next;
    }
    cr_assert_eq(p, end);
    proto_buf_clear(&b);
    proto_gen_line(&b, PROTO_FRAME_NDJSON, 4, 66, "B", 1, -0.25f);
    proto_gen_done(&b, PROTO_FRAME_NDJSON, "length", NULL, 0, 5, NULL);
    cr_assert(strstr(b.data, "id:") == NULL);
    const char *n1 = proto_frame_next(b.data, b.data + b.len, PROTO_FRAME_NDJSON);
    cr_assert_str_eq(n1, "{\"done\":true,\"reason\":\"length\",\"tokens_seen\":5}\n");
    proto_buf_free(&b);
}
