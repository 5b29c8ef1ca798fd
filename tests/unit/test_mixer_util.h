/* test_mixer_util.h — buffers and error measures the mixer unit tests share (Criterion). */
#ifndef TEST_MIXER_UTIL_H
#define TEST_MIXER_UTIL_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

/* n zeroed floats / doubles (at least one), or the test fails */
static inline float *fbuf(size_t n)
{
    float *p = calloc(n ? n : 1, sizeof(float));
    cr_assert_not_null(p);
    return p;
}

static inline double *dbuf(size_t n)
{
    double *p = calloc(n ? n : 1, sizeof(double));
    cr_assert_not_null(p);
    return p;
}

/* ||a - ref|| / ||ref|| (absolute RMS if ref is all zero) */
static inline double rel_rms(const float *a, const double *ref, size_t n)
{
    double e = 0.0, r = 0.0;
    for (size_t i = 0; i < n; i++) {
        e += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]);
        r += ref[i] * ref[i];
    }
    return r > 0.0 ? sqrt(e / r) : sqrt(e / (double)(n ? n : 1));
}

/* the same against a float reference */
static inline double rel_rms_ff(const float *a, const float *b, size_t n)
{
    double e = 0.0, r = 0.0;
    for (size_t i = 0; i < n; i++) {
        e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return r > 0.0 ? sqrt(e / r) : sqrt(e / (double)(n ? n : 1));
}

#endif /* TEST_MIXER_UTIL_H */
