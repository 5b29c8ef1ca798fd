/*
 * stop_match.h — stop strings on a stream of decoded text (docs/API.md, generate `stop`).
 *
 * The text of a generation arrives in pieces (one per token, from the streaming decoder); a stop
 * string may span pieces. The matcher releases text as soon as it is known not to be part of a
 * stop string and holds back the end that could still begin one. When a stop string is
 * complete, the text before it is released and the stop string and everything after it are
 * not (the rule of OpenAI's `stop` and llama.cpp's server): the released pieces concatenated
 * are the decoded text cut at the start of the first stop string to be completed, as if the
 * text were checked after every byte (the occurrence that ends first; of those ending at the
 * same byte, the longest), whatever the pieces. Without a match, the pieces released up to
 * srv_stop_flush concatenate to the whole text.
 *
 * Pure byte-string logic: no tokenizer, no threads. A piece is released only at the start of a
 * stop string or at the end of what was fed, so for valid UTF-8 text and valid UTF-8 stop
 * strings every released piece is valid UTF-8 (a stop string starts with a lead byte).
 */
#ifndef SRV_STOP_MATCH_H
#define SRV_STOP_MATCH_H

#include <stddef.h>

#include "buf.h"

#define SRV_STOP_MAX 16 /* stop strings per matcher (>= PROTO_MAX_STOP) */

typedef struct {
    const char *stop[SRV_STOP_MAX]; /* borrowed: must outlive the matcher */
    size_t len[SRV_STOP_MAX];       /* >= 1 each */
    size_t n;
    proto_buf win;                  /* held text (could begin a stop string), then the new piece */
    int matched;                    /* a stop string completed: nothing more is released */
} srv_stop_match;

/* n <= SRV_STOP_MAX strings stop[i] of len[i] >= 1 bytes (n = 0: the matcher only passes text
 * through). Returns 0, or -1 for a bad argument (nothing allocated). */
int srv_stop_init(srv_stop_match *m, const char *const *stop, const size_t *len, size_t n);
void srv_stop_free(srv_stop_match *m);

/* The next piece of text [len]: appends to out what is now released. Returns 1 when a stop
 * string is complete (now or before): the release ends at its start, later feeds append nothing. */
int srv_stop_feed(srv_stop_match *m, const char *text, size_t len, proto_buf *out);

/* The text ended without (further) match: appends what is held back (nothing after a match). */
void srv_stop_flush(srv_stop_match *m, proto_buf *out);

#endif /* SRV_STOP_MATCH_H */
