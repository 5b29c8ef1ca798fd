/*
 * metrics.h — GET /metrics: Prometheus text exposition of the daemon's counters and gauges
 * (counts only, never ids or content). One writer for a metric's lines, used by every file
 * that contributes metrics (metrics.c, residency.c).
 */
#ifndef SRV_METRICS_H
#define SRV_METRICS_H

#include "app.h"
#include "buf.h"

/* A family of one unlabelled sample: "# HELP", "# TYPE", then name v. */
void srv_metric(proto_buf *b, const char *name, const char *type, const char *help,
                unsigned long long v);

/* The same with a fractional value (seconds). */
void srv_metric_double(proto_buf *b, const char *name, const char *type, const char *help, double v);

/* One row of a module's table of unlabelled samples (srv_metric_rows). */
typedef struct {
    const char *name, *type, *help;
    double value;
} srv_metric_row;

/* srv_metric_double for each of rows[0..n). */
void srv_metric_rows(proto_buf *b, const srv_metric_row *rows, size_t n);

/* Set the buckets of app->hists (before the first request). */
void srv_metrics_init(srv_app *app);

/* The whole /metrics page. */
void srv_metrics_render(srv_app *app, proto_buf *b);

#endif /* SRV_METRICS_H */
