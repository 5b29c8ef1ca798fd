/* stop_match.c — stop strings across pieces of decoded text (stop_match.h). */
#include "stop_match.h"

#include <stdint.h>
#include <string.h>

int srv_stop_init(srv_stop_match *m, const char *const *stop, const size_t *len, size_t n)
{
    if (n > SRV_STOP_MAX || (n && (!stop || !len)))
        return -1;
    for (size_t i = 0; i < n; i++)
        if (!stop[i] || len[i] == 0)
            return -1;
    memset(m, 0, sizeof *m);
    for (size_t i = 0; i < n; i++) {
        m->stop[i] = stop[i];
        m->len[i] = len[i];
    }
    m->n = n;
    proto_buf_init(&m->win);
    return 0;
}

void srv_stop_free(srv_stop_match *m)
{
    proto_buf_free(&m->win);
}

/* Longest end of w [n] that is the beginning (shorter than the whole) of a stop string. */
static size_t held_suffix(const srv_stop_match *m, const char *w, size_t n)
{
    size_t keep = 0;
    for (size_t i = 0; i < m->n; i++) {
        size_t k = m->len[i] - 1 < n ? m->len[i] - 1 : n;
        for (; k > keep; k--)
            if (memcmp(w + n - k, m->stop[i], k) == 0) {
                keep = k;
                break;
            }
    }
    return keep;
}

int srv_stop_feed(srv_stop_match *m, const char *text, size_t len, proto_buf *out)
{
    if (m->matched)
        return 1;
    if (m->n == 0) {
        proto_buf_append(out, text, len);
        return 0;
    }
    /* win = what was held (no stop string starts before it: that text left already) + text */
    proto_buf_append(&m->win, text, len);
    const char *w = m->win.data;
    size_t n = m->win.len, first = n, first_end = SIZE_MAX;
    /* the occurrence completed first (ends first; of those ending together, the longest):
     * what checking after every byte finds, so the cut never depends on how the text is cut
     * into pieces */
    for (size_t i = 0; i < m->n; i++) {
        const char *p = memmem(w, n, m->stop[i], m->len[i]);
        if (!p)
            continue;
        size_t at = (size_t)(p - w), end = at + m->len[i];
        if (end < first_end || (end == first_end && at < first)) {
            first = at;
            first_end = end;
        }
    }
    if (first < n) {
        proto_buf_append(out, w, first);
        proto_buf_clear(&m->win);
        m->matched = 1;
        return 1;
    }
    size_t keep = held_suffix(m, w, n);
    proto_buf_append(out, w, n - keep);
    memmove(m->win.data, w + n - keep, keep);
    m->win.len = keep;
    m->win.data[keep] = '\0';
    return 0;
}

void srv_stop_flush(srv_stop_match *m, proto_buf *out)
{
    if (!m->matched)
        proto_buf_append(out, m->win.data, m->win.len);
    proto_buf_clear(&m->win);
}
