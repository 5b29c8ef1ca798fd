/* accept.c — Accept header negotiation for the streamed routes (accept.h). */
#include "accept.h"

#include <stddef.h>
#include <string.h>
#include <strings.h>

static int is_ows(char c) { return c == ' ' || c == '\t'; }

static const char *skip_ows(const char *p)
{
    while (is_ows(*p))
        p++;
    return p;
}

/* qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] ), [p, e) OWS-trimmed by the caller.
 * Thousandths, or -1 when it is not a qvalue. */
static int parse_qvalue(const char *p, const char *e)
{
    if (p >= e || (*p != '0' && *p != '1'))
        return -1;
    int q = (*p - '0') * 1000, scale = 100;
    p++;
    if (p < e) {
        if (*p != '.')
            return -1;
        p++;
        int digits = 0;
        for (; p < e; p++, digits++) {
            if (*p < '0' || *p > '9' || digits == 3)
                return -1;
            q += (*p - '0') * scale;
            scale /= 10;
        }
    }
    return q > 1000 ? -1 : q;
}

/* One element of the list, [p, e): "type/subtype *( OWS ; OWS name=value )". Fills the range's
 * type and subtype spans and its q (default 1000). 0, or -1 when the element is not a media
 * range or its q is not a qvalue (the element is then ignored). */
typedef struct {
    const char *type, *sub;
    size_t type_len, sub_len;
    int q;
} range;

static int parse_range(const char *p, const char *e, range *r)
{
    p = skip_ows(p);
    while (e > p && is_ows(e[-1]))
        e--;
    const char *semi = p;
    while (semi < e && *semi != ';')
        semi++;
    const char *te = semi;
    while (te > p && is_ows(te[-1]))
        te--;
    const char *slash = memchr(p, '/', (size_t)(te - p));
    if (!slash || slash == p || slash + 1 == te)
        return -1;
    r->type = p;
    r->type_len = (size_t)(slash - p);
    r->sub = slash + 1;
    r->sub_len = (size_t)(te - slash - 1);
    r->q = 1000;
    if (r->type_len == 1 && *p == '*' && !(r->sub_len == 1 && *r->sub == '*'))
        return -1; /* "x/subtype" is not a media range */
    /* parameters: the first "q" one is the weight; the others are ignored */
    const char *s = semi;
    while (s < e) {
        s = skip_ows(s + 1); /* past ';' */
        const char *pe = s;
        int quoted = 0;
        while (pe < e && (quoted || *pe != ';')) {
            if (*pe == '"')
                quoted = !quoted;
            else if (*pe == '\\' && quoted && pe + 1 < e)
                pe++;
            pe++;
        }
        const char *eq = memchr(s, '=', (size_t)(pe - s));
        if (eq && eq - s == 1 && (*s == 'q' || *s == 'Q')) {
            const char *v = skip_ows(eq + 1), *ve = pe;
            while (ve > v && is_ows(ve[-1]))
                ve--;
            r->q = parse_qvalue(v, ve);
            return r->q < 0 ? -1 : 0; /* what follows q are accept-ext: ignored */
        }
        s = pe;
    }
    return 0;
}

static int span_is(const char *s, size_t n, const char *want, size_t wn)
{
    return n == wn && strncasecmp(s, want, n) == 0;
}

int proto_accept_quality(const char *accept, const char *type, int *specificity)
{
    const char *slash = strchr(type, '/');
    size_t tl = slash ? (size_t)(slash - type) : strlen(type);
    const char *sub = slash ? slash + 1 : "";
    size_t sl = strlen(sub);
    int best_spec = -1, best_q = 0;
    const char *p = accept ? accept : "";
    while (*p) {
        /* the element ends at a ',' outside a quoted string */
        const char *e = p;
        int quoted = 0;
        while (*e && (quoted || *e != ',')) {
            if (*e == '"')
                quoted = !quoted;
            else if (*e == '\\' && quoted && e[1])
                e++;
            e++;
        }
        range r;
        if (parse_range(p, e, &r) == 0) {
            int spec = -1;
            if (span_is(r.type, r.type_len, "*", 1))
                spec = 0;
            else if (span_is(r.type, r.type_len, type, tl))
                spec = span_is(r.sub, r.sub_len, "*", 1) ? 1 : span_is(r.sub, r.sub_len, sub, sl) ? 2 : -1;
            if (spec > best_spec || (spec == best_spec && spec >= 0 && r.q > best_q)) {
                best_spec = spec;
                best_q = r.q;
            }
        }
        p = *e ? e + 1 : e;
    }
    if (specificity)
        *specificity = best_spec;
    return best_spec >= 0 ? best_q : 0;
}

proto_framing proto_negotiate_framing(const char *accept)
{
    if (!accept)
        return PROTO_FRAME_NDJSON;
    int spec_sse, spec_nd;
    int q_sse = proto_accept_quality(accept, "text/event-stream", &spec_sse);
    int q_nd = proto_accept_quality(accept, "application/x-ndjson", &spec_nd);
    if (q_sse > q_nd || (q_sse == q_nd && q_sse > 0 && spec_sse > spec_nd))
        return PROTO_FRAME_SSE;
    return PROTO_FRAME_NDJSON;
}
