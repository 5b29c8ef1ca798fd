/* histogram.c — Prometheus histograms with atomic buckets (histogram.h). */
#include <math.h>
#include <uv.h>

#include "histogram.h"

void srv_hist_init(srv_hist *h, const double *le, int n, double scale)
{
    if (n > SRV_HIST_MAX_BUCKETS)
        n = SRV_HIST_MAX_BUCKETS;
    h->n = n;
    h->scale = scale;
    for (int i = 0; i < n; i++) {
        h->le[i] = le[i];
        h->le_base[i] = (uint64_t)llround(le[i] * scale);
    }
    for (int i = 0; i <= n; i++)
        atomic_init(&h->counts[i], 0);
    atomic_init(&h->sum, 0);
}

void srv_hist_observe(srv_hist *h, uint64_t v)
{
    int i = 0;
    while (i < h->n && v > h->le_base[i])
        i++;
    atomic_fetch_add_explicit(&h->counts[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum, v, memory_order_relaxed);
}

void srv_hist_observe_since(srv_hist *h, uint64_t since_ns)
{
    uint64_t now = uv_hrtime();
    if (since_ns)
        srv_hist_observe(h, now > since_ns ? now - since_ns : 0);
}

void srv_hist_render(const srv_hist *h, proto_buf *b, const char *name, const char *help)
{
    proto_buf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i <= h->n; i++) {
        cum += atomic_load_explicit(&h->counts[i], memory_order_relaxed);
        if (i < h->n)
            proto_buf_printf(b, "%s_bucket{le=\"%.15g\"} %llu\n", name, h->le[i], (unsigned long long)cum);
        else
            proto_buf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    }
    double sum = (double)atomic_load_explicit(&h->sum, memory_order_relaxed) / h->scale;
    proto_buf_printf(b, "%s_sum %.15g\n%s_count %llu\n", name, sum, name, (unsigned long long)cum);
}
