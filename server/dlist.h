/*
 * dlist.h — the server's intrusive lists: a node carries its own link fields (named by the list's
 * user, so one object can sit on several lists), a list is a head and a tail pointer; append and
 * unlink are O(1) and allocate nothing. Used for connections (http_conn.c), sessions in recency
 * order and changed sessions (session_table.c), a session's queued ops (ops.c), held request
 * bodies (offloop.c) and pending Redis commands (redis_conn.c).
 *
 *   DLIST_APPEND(t->lru_head, t->lru_tail, s, lru_prev, lru_next);   doubly linked, at the tail
 *   DLIST_UNLINK(t->lru_head, t->lru_tail, s, lru_prev, lru_next);   its links are NULL after
 *   QUEUE_APPEND(s->q_head, s->q_tail, op, next);                    singly linked FIFO
 */
#ifndef SRV_DLIST_H
#define SRV_DLIST_H

#include <stddef.h>

#define DLIST_UNLINK(head, tail, n, prev, next)                                                    \
    do {                                                                                           \
        if ((n)->prev)                                                                             \
            (n)->prev->next = (n)->next;                                                           \
        else                                                                                       \
            (head) = (n)->next;                                                                    \
        if ((n)->next)                                                                             \
            (n)->next->prev = (n)->prev;                                                           \
        else                                                                                       \
            (tail) = (n)->prev;                                                                    \
        (n)->prev = (n)->next = NULL;                                                              \
    } while (0)

#define QUEUE_APPEND(head, tail, n, next)                                                          \
    do {                                                                                           \
        (n)->next = NULL;                                                                          \
        if (tail)                                                                                  \
            (tail)->next = (n);                                                                    \
        else                                                                                       \
            (head) = (n);                                                                          \
        (tail) = (n);                                                                              \
    } while (0)

#define DLIST_APPEND(head, tail, n, prev, next)                                                    \
    do {                                                                                           \
        (n)->prev = (tail);                                                                        \
        QUEUE_APPEND(head, tail, n, next);                                                         \
    } while (0)

#endif /* SRV_DLIST_H */
