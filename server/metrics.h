/*
 * metrics.h — GET /metrics: Prometheus text exposition of the daemon's counters and gauges
 * (counts only, never ids or content). One writer for a metric's lines, used by every file
 * that contributes metrics (metrics.c, residency.c).
 */
#ifndef SRV_METRICS_H
#define SRV_METRICS_H

#include "app.h"
#include "buf.h"

/* "# HELP name help\n# TYPE name type\n": the head of a family whose samples follow. */
void srv_metric_head(proto_buf *b, const char *name, const char *type, const char *help);
/* One sample of a labelled family: name{label="value"} v. */
void srv_metric_sample(proto_buf *b, const char *name, const char *label, const char *value,
                       unsigned long long v);
/* A family of one unlabelled sample: the head, then name v. */
void srv_metric(proto_buf *b, const char *name, const char *type, const char *help,
                unsigned long long v);

/* The whole /metrics page. */
void srv_metrics_render(srv_app *app, proto_buf *b);

#endif /* SRV_METRICS_H */
