/*
 * histogram.h — a Prometheus histogram (docs/OPERATIONS.md "Health and metrics"): fixed upper
 * bounds, one counter per bucket and the sum of the observations, every field atomic (relaxed),
 * so a worker thread may observe while the loop thread renders /metrics, without a lock.
 * Observations are integers in a base unit (nanoseconds, tokens); `scale` base units make one
 * unit of the exposition (1e9 ns = 1 second, 1 token = 1 token).
 */
#ifndef SRV_HISTOGRAM_H
#define SRV_HISTOGRAM_H

#include <stdatomic.h>
#include <stdint.h>

#include "buf.h"

#define SRV_HIST_MAX_BUCKETS 24

typedef struct srv_hist {
    int n;                                       /* finite bounds; bucket n is +Inf */
    double scale;                                /* base units per exposed unit */
    double le[SRV_HIST_MAX_BUCKETS];             /* upper bounds in exposed units, ascending */
    uint64_t le_base[SRV_HIST_MAX_BUCKETS];      /* the same in base units (v <= le_base[i]) */
    atomic_uint_fast64_t counts[SRV_HIST_MAX_BUCKETS + 1]; /* per bucket, NOT cumulative */
    atomic_uint_fast64_t sum;                    /* of the observations, base units */
} srv_hist;

/* n <= SRV_HIST_MAX_BUCKETS ascending bounds le[] (exposed units), scale as above. */
void srv_hist_init(srv_hist *h, const double *le, int n, double scale);
/* One observation of v base units (any thread). */
void srv_hist_observe(srv_hist *h, uint64_t v);
/* Nanoseconds since `since_ns` (uv_hrtime), observed; nothing when since_ns is 0 (unknown). */
void srv_hist_observe_since(srv_hist *h, uint64_t since_ns);
/* "# HELP", "# TYPE histogram", the cumulative _bucket{le=...} lines, _sum and _count. */
void srv_hist_render(const srv_hist *h, proto_buf *b, const char *name, const char *help);

#endif /* SRV_HISTOGRAM_H */
