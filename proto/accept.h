/*
 * accept.h — content negotiation of the streamed routes (/tokens, /generate): the Accept header's
 * media ranges and q-values (RFC 9110 §12.5.1, §12.4.2) choose NDJSON or SSE framing.
 *
 * A representation's quality is the q of the most specific range that matches it (type/subtype
 * over type/x over x/x, x = '*'); q=0 excludes it; the higher quality wins; at equal quality the
 * more specific match wins ("text/event-stream, x/x" is SSE); otherwise NDJSON, which is also the
 * answer when Accept is absent or accepts neither (no 406). Media-type parameters other than q
 * are ignored for matching; an element whose q is not a qvalue is ignored.
 */
#ifndef PROTO_ACCEPT_H
#define PROTO_ACCEPT_H

#include "ndjson.h"

/* Quality in thousandths (0..1000) that `accept` gives the media type `type` ("text/event-stream");
 * *specificity (may be NULL) is that of the deciding range: 2 type/subtype, 1 type/x, 0 x/x,
 * -1 when no range matches (quality 0). */
int proto_accept_quality(const char *accept, const char *type, int *specificity);

/* The framing of a stream for this Accept value (NULL = absent). */
proto_framing proto_negotiate_framing(const char *accept);

#endif /* PROTO_ACCEPT_H */
