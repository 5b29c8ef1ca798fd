/* idempotency.c — a session's Idempotency-Key records (idempotency.h). */
#include "idempotency.h"

#include <stdlib.h>
#include <string.h>

int srv_idem_key_valid(const char *key)
{
    size_t n = strlen(key);
    if (n == 0 || n > SRV_IDEM_KEY_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)key[i] < 0x21 || (unsigned char)key[i] > 0x7e)
            return 0;
    return 1;
}

const srv_idem *srv_idem_find(const srv_session *s, const char *key)
{
    for (int i = 0; i < s->n_idem; i++)
        if (!strcmp(s->idem[i].key, key))
            return &s->idem[i];
    return NULL;
}

void srv_idem_put(srv_session *s, const char *key, const char *record, int max)
{
    if (max < 1)
        return;
    if (s->n_idem >= max) { /* the oldest goes */
        free(s->idem[0].record);
        memmove(s->idem, s->idem + 1, (size_t)(s->n_idem - 1) * sizeof *s->idem);
        s->n_idem--;
    }
    if (s->n_idem == s->idem_cap) {
        s->idem_cap = s->idem_cap ? s->idem_cap * 2 : 4;
        s->idem = realloc(s->idem, (size_t)s->idem_cap * sizeof *s->idem);
        if (!s->idem)
            abort();
    }
    srv_idem *r = &s->idem[s->n_idem++];
    memset(r, 0, sizeof *r);
    strncpy(r->key, key, SRV_IDEM_KEY_MAX);
    r->record = strdup(record);
    if (!r->record)
        abort();
}

size_t srv_idem_mark(srv_session *s, int from, int to)
{
    size_t n = 0;
    for (int i = 0; i < s->n_idem; i++)
        if (s->idem[i].sent == from) {
            s->idem[i].sent = to;
            n++;
        }
    return n;
}

void srv_idem_each(srv_session *s, int state, void (*fn)(const srv_idem *r, void *arg), void *arg)
{
    for (int i = 0; i < s->n_idem; i++)
        if (s->idem[i].sent == state)
            fn(&s->idem[i], arg);
}

void srv_idem_clear(srv_session *s)
{
    for (int i = 0; i < s->n_idem; i++)
        free(s->idem[i].record);
    free(s->idem);
    s->idem = NULL;
    s->n_idem = s->idem_cap = 0;
}

int srv_idem_parse(const char *record, char *kind, int *status, const char **json)
{
    if (!record || !record[0] || !strchr("fgcr", record[0]))
        return -1;
    char *end;
    long st = strtol(record + 1, &end, 10);
    if (end == record + 1 || *end != ' ' || st < 200 || st > 299 || end[1] != '{')
        return -1;
    *kind = record[0];
    *status = (int)st;
    *json = end + 1;
    return 0;
}
