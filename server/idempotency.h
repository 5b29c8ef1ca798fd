/*
 * idempotency.h — Idempotency-Key records (docs/API.md "Idempotency-Key"): a fold, generation,
 * checkpoint or rollback sent with the header leaves a record of its result; the same key on
 * the same session again (a client's retry, on any node with the Redis tier) is answered from the
 * record and changes nothing.
 *
 * A record is "<kind><status> <json>": kind f fold, g generate, c checkpoint, r rollback; status
 * the HTTP status it answered; json the body (a stream's: its final line; a generation's final
 * line also carries the generated "tokens"). A session keeps its last
 * max_idempotency_keys_per_session records in memory (oldest dropped first); with the Redis tier
 * they are committed with the state (redis_tier.h), so a retry on another node finds them too.
 * Loop thread only.
 */
#ifndef SRV_IDEMPOTENCY_H
#define SRV_IDEMPOTENCY_H

#include <stddef.h>

#include "session_table.h"

#define SRV_IDEM_KEY_MAX 128

/* 1 when key is 1..SRV_IDEM_KEY_MAX bytes of visible ASCII (0x21..0x7e). */
int srv_idem_key_valid(const char *key);

/* One record of a session. sent: 0 not in Redis yet, 1 in a commit in flight, 2 committed. */
typedef struct srv_idem {
    char key[SRV_IDEM_KEY_MAX + 1];
    char *record; /* owned */
    int sent;
} srv_idem;

/* The session's record for key, or NULL. */
const srv_idem *srv_idem_find(const srv_session *s, const char *key);
/* Keep a record (copied) for key, dropping the oldest past max. */
void srv_idem_put(srv_session *s, const char *key, const char *record, int max);
/* Every record of s whose sent == from gets sent = to; returns how many. */
size_t srv_idem_mark(srv_session *s, int from, int to);
/* Call fn for each record with sent == state (oldest first). */
void srv_idem_each(srv_session *s, int state, void (*fn)(const srv_idem *r, void *arg), void *arg);
/* Free every record (session teardown). */
void srv_idem_clear(srv_session *s);

/* The kind letter of a record (its first byte), its status and its JSON body. 0, or -1 when the
 * record is malformed (a foreign value in Redis). */
int srv_idem_parse(const char *record, char *kind, int *status, const char **json);

#endif /* SRV_IDEMPOTENCY_H */
