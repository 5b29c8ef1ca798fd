/*
 * stats.c — latency samples and their percentiles, the monotonic clock.
 */
#include "load.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n);
    if (!q) {
        fprintf(stderr, "recur-load: out of memory\n");
        abort();
    }
    return q;
}

void lg_samples_add(lg_samples *s, double x)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 1024;
        s->v = xrealloc(s->v, s->cap * sizeof *s->v);
    }
    s->v[s->n++] = x;
    s->sorted = 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile: the smallest sample with at least p% of the samples <= it. */
double lg_samples_pct(lg_samples *s, double p)
{
    if (s->n == 0)
        return 0.0;
    if (!s->sorted) {
        qsort(s->v, s->n, sizeof *s->v, cmp_double);
        s->sorted = 1;
    }
    double rank = p / 100.0 * (double)s->n;
    size_t i = (size_t)rank;
    if ((double)i < rank)
        i++;
    if (i > 0)
        i--;
    if (i >= s->n)
        i = s->n - 1;
    return s->v[i];
}

double lg_samples_mean(const lg_samples *s)
{
    if (s->n == 0)
        return 0.0;
    double sum = 0;
    for (size_t i = 0; i < s->n; i++)
        sum += s->v[i];
    return sum / (double)s->n;
}

double lg_now_s(void)
{
    return (double)uv_hrtime() * 1e-9;
}
