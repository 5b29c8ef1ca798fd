/*
 * redis_conn.h — one connection to Redis on the event loop (hiredis's async API through our
 * libuv adapter, redis_conn.c): commands are sent and answered on the loop thread, never
 * blocking it.
 *
 *   - The URL is redis://HOST:PORT[/DB]; HOST is resolved once at start (srv_redis_create), so a
 *     reconnect never waits on DNS.
 *   - Every command gets its callback exactly once: with the reply, or with NULL when it could
 *     not be answered (the connection dropped, or it timed out).
 *   - Timeout: commands are pending and no reply came for timeout_ms (from the later of the
 *     oldest command's send and the last reply), none waiting unread: the connection is reset
 *     (every pending callback gets NULL) and a reconnect is scheduled. Each such reset doubles the
 *     silence the next connection allows (<= 16 x timeout_ms), back to timeout_ms once every
 *     command sent has been answered.
 *   - Up: after a PING on the new connection is answered (not at the TCP connect).
 *   - Reconnect with backoff: 50 ms doubling to 2 s while Redis cannot be reached.
 *   - Latency: the time from sending to the reply of every answered command is observed in the
 *     histogram given at create (seconds).
 * Everything here runs on the loop thread.
 */
#ifndef SRV_REDIS_CONN_H
#define SRV_REDIS_CONN_H

#include <stddef.h>
#include <stdint.h>
#include <hiredis/hiredis.h>
#include <uv.h>

#include "histogram.h"

typedef struct {
    char host[256]; /* as written */
    int port;       /* 1..65535, default 6379 */
    int db;         /* 0..15 (SELECT), default 0 */
} srv_redis_url;

/* Parse redis://HOST:PORT[/DB] (PORT optional, default 6379). 0, or -1 with the rule broken in
 * err ("redis: ..."). Only the plain TCP scheme: rediss://, user:password@ and unix sockets are
 * refused by name. */
int srv_redis_url_parse(const char *url, srv_redis_url *out, char *err, size_t errlen);

typedef struct srv_redis srv_redis;

/* reply: the answer (owned by hiredis, valid during the call), or NULL when the command failed
 * (not connected, connection lost, timed out). */
typedef void srv_redis_cb(srv_redis *r, redisReply *reply, void *arg);

/* Resolve url's host (blocking, at start only) and start connecting. on_state(ctx, up) is called
 * when the connection comes up (1) or goes down (0). NULL with err when the host does not
 * resolve. */
srv_redis *srv_redis_create(uv_loop_t *loop, const srv_redis_url *url, uint64_t timeout_ms,
                            srv_hist *latency, void (*on_state)(void *ctx, int up), void *ctx,
                            char *err, size_t errlen);
/* 1 while connected. */
int srv_redis_up(const srv_redis *r);
/* Send one command (argv/lens: binary-safe arguments, copied). 0: cb will be called once; -1:
 * not connected, cb is never called. */
int srv_redis_command(srv_redis *r, srv_redis_cb *cb, void *arg, int argc, const char **argv,
                      const size_t *lens);
/* Commands sent and not answered yet. */
size_t srv_redis_pending(const srv_redis *r);
/* Reconnects so far (/metrics). */
uint64_t srv_redis_reconnects(const srv_redis *r);
/* Why it is down ("" while up). */
const char *srv_redis_last_error(const srv_redis *r);
/* Drop the connection (pending callbacks get NULL) and close the timers; done(ctx) once every
 * handle is closed. */
void srv_redis_close(srv_redis *r, void (*done)(void *ctx), void *ctx);

#endif /* SRV_REDIS_CONN_H */
