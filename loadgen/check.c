/*
 * check.c — what a correct streamed answer of recurd looks like (docs/DESIGN.md §5), checked line by
 * line so that throughput is never counted on wrong answers.
 *
 * tokens:   one line per folded token {"pos","token","logprob","top":[{"token","logprob"}...]},
 *           then {"done":true,"tokens_seen":N}.
 * generate: one line per generated token {"pos","token","text","logprob"},
 *           then {"done":true,"reason":...,"tokens_seen":N}.
 *
 * Checked: status 200; chunked framing with no chunk ending mid-line; every line a JSON object;
 * the done line last and present; as many token lines as tokens folded (tokens) or as asked for
 * (generate, reason "length"); token echo (tokens) or range (generate); positions consecutive from
 * the session's tokens_seen (the constant offset pos - index is learned once per run and must never
 * change); logprobs finite and <= 0, null exactly for a session's very first token; top candidates
 * in range and sorted; the logprob of token i+1 equal to its entry in the top list of token i when
 * it is there, and not above the last candidate when it is not (across requests too, which proves
 * the session's state carried over); tokens_seen == tokens_seen before + tokens folded.
 */
#include "load.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *const lg_check_names[LG_CHK_N] = {
    "status", "framing", "json", "count", "token", "pos", "logprob", "top", "tokens_seen", "transport",
};

#define LOGPROB_MAX 1e-4  /* a log-probability is <= 0 up to rounding */
#define LOGPROB_TOL 2e-4  /* the same log-probability printed twice */

void lg_check_fail(lg_check *k, int kind, const char *fmt, ...)
{
    k->fail[kind]++;
    if (k->why[0])
        return;
    int n = snprintf(k->why, sizeof k->why, "%s: ", lg_check_names[kind]);
    if (n < 0 || (size_t)n >= sizeof k->why)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k->why + n, sizeof k->why - (size_t)n, fmt, ap);
    va_end(ap);
}

void lg_check_begin(lg_check *k, int mode, int vocab, int top_k, lg_session *s, const int32_t *sent,
                    int n_sent, int max_tokens, int64_t *pos_base)
{
    memset(k, 0, sizeof *k);
    k->mode = mode;
    k->vocab = vocab;
    k->top_k = top_k;
    k->s = s;
    k->sent = sent;
    k->n_sent = n_sent;
    k->max_tokens = max_tokens;
    k->before = s->expected;
    k->pos_base = pos_base;
    /* the prediction made by the session's previous answer (tokens mode keeps it) */
    if (mode == LG_MODE_TOKENS && s->n_top > 0) {
        k->n_top = s->n_top;
        memcpy(k->top, s->top, (size_t)s->n_top * sizeof *k->top);
        k->have_prev_top = 1;
    }
}

/* An integer-valued JSON number in [lo, hi]. */
static int get_int(const cJSON *o, const char *name, double lo, double hi, int64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsNumber(v))
        return 0;
    double x = v->valuedouble;
    if (!isfinite(x) || x != floor(x) || x < lo || x > hi)
        return 0;
    *out = (int64_t)x;
    return 1;
}

static void check_pos(lg_check *k, const cJSON *o, int i)
{
    int64_t pos;
    if (!get_int(o, "pos", 0, 9.0e15, &pos)) {
        lg_check_fail(k, LG_CHK_POS, "line %d: pos missing or not an integer", i);
        return;
    }
    int64_t base = pos - (int64_t)(k->before + (uint64_t)i);
    if (*k->pos_base == INT64_MIN) {
        if (base < -1 || base > 1)
            lg_check_fail(k, LG_CHK_POS, "line %d: pos %lld far from tokens_seen %llu", i,
                          (long long)pos, (unsigned long long)(k->before + (uint64_t)i));
        else
            *k->pos_base = base;
    } else if (base != *k->pos_base) {
        lg_check_fail(k, LG_CHK_POS, "line %d: pos %lld, expected %lld", i, (long long)pos,
                      (long long)(k->before + (uint64_t)i) + *k->pos_base);
    }
}

/* The candidates for the next position: sorted by logprob, tokens in range, at most top_k. */
static void check_top(lg_check *k, const cJSON *o, int i)
{
    const cJSON *top = cJSON_GetObjectItemCaseSensitive(o, "top");
    if (!cJSON_IsArray(top)) {
        lg_check_fail(k, LG_CHK_TOP, "line %d: top missing", i);
        k->n_top = 0;
        k->have_prev_top = 0;
        return;
    }
    int n = 0;
    double prev = INFINITY;
    const cJSON *c;
    cJSON_ArrayForEach(c, top)
    {
        int64_t tok;
        const cJSON *lp = cJSON_GetObjectItemCaseSensitive(c, "logprob");
        if (!cJSON_IsObject(c) || !get_int(c, "token", 0, (double)k->vocab - 1, &tok) ||
            !cJSON_IsNumber(lp) || !isfinite(lp->valuedouble) || lp->valuedouble > LOGPROB_MAX) {
            lg_check_fail(k, LG_CHK_TOP, "line %d: candidate %d malformed", i, n);
            k->n_top = 0;
            k->have_prev_top = 0;
            return;
        }
        if (lp->valuedouble > prev + 1e-6) {
            lg_check_fail(k, LG_CHK_TOP, "line %d: candidates not sorted by logprob", i);
            k->n_top = 0;
            k->have_prev_top = 0;
            return;
        }
        prev = lp->valuedouble;
        if (n < LG_TOP_MAX) {
            k->top[n].token = (int32_t)tok;
            k->top[n].logprob = lp->valuedouble;
        }
        n++;
    }
    int want = k->top_k >= 0 ? (k->top_k < k->vocab ? k->top_k : k->vocab) : -1;
    if (want >= 0 && n != want)
        lg_check_fail(k, LG_CHK_TOP, "line %d: %d candidates, asked for %d", i, n, want);
    if (n == 0 && k->top_k != 0)
        lg_check_fail(k, LG_CHK_TOP, "line %d: no candidates", i);
    k->n_top = n < LG_TOP_MAX ? n : LG_TOP_MAX;
    k->have_prev_top = n > 0 && n <= LG_TOP_MAX;
}

/* logprob of `token` at the current line against the previous line's prediction. */
static void check_logprob_vs_top(lg_check *k, int32_t token, double lp, int i)
{
    if (!k->have_prev_top || k->n_top <= 0)
        return;
    for (int j = 0; j < k->n_top; j++) {
        if (k->top[j].token == token) {
            if (fabs(k->top[j].logprob - lp) > LOGPROB_TOL + 1e-5 * fabs(lp))
                lg_check_fail(k, LG_CHK_LOGPROB,
                              "line %d: logprob %.6g of token %d, but the previous top said %.6g", i, lp,
                              token, k->top[j].logprob);
            return;
        }
    }
    double last = k->top[k->n_top - 1].logprob;
    if (lp > last + LOGPROB_TOL + 1e-5 * fabs(lp))
        lg_check_fail(k, LG_CHK_LOGPROB,
                      "line %d: token %d has logprob %.6g above the last top candidate %.6g but is not among them",
                      i, token, lp, last);
}

static void check_token_line(lg_check *k, const cJSON *o)
{
    int i = k->lines;
    int64_t tok;
    if (!get_int(o, "token", 0, (double)k->vocab - 1, &tok)) {
        lg_check_fail(k, LG_CHK_TOKEN, "line %d: token missing or outside [0,%d)", i, k->vocab);
        tok = -1;
    }
    check_pos(k, o, i);
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(o, "logprob");
    int first_of_session = (k->before + (uint64_t)i) == 0;
    if (i == 0 && k->s->may_lack_logits && cJSON_IsNull(lp))
        first_of_session = 1; /* a session restored from a snapshot keeps no logits */

    if (k->mode == LG_MODE_TOKENS) {
        if (i < k->n_sent && tok != k->sent[i])
            lg_check_fail(k, LG_CHK_TOKEN, "line %d: token %lld, sent %d", i, (long long)tok, k->sent[i]);
        if (first_of_session) {
            if (!cJSON_IsNull(lp))
                lg_check_fail(k, LG_CHK_LOGPROB, "line %d: a session's first token must have logprob null", i);
        } else if (!cJSON_IsNumber(lp) || !isfinite(lp->valuedouble) || lp->valuedouble > LOGPROB_MAX) {
            lg_check_fail(k, LG_CHK_LOGPROB, "line %d: logprob missing, non-finite or > 0", i);
        } else if (tok >= 0) {
            check_logprob_vs_top(k, (int32_t)tok, lp->valuedouble, i);
        }
        check_top(k, o, i);
    } else {
        if (!cJSON_IsNumber(lp) || !isfinite(lp->valuedouble) || lp->valuedouble > LOGPROB_MAX)
            lg_check_fail(k, LG_CHK_LOGPROB, "line %d: logprob missing, non-finite or > 0", i);
        if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(o, "text")))
            lg_check_fail(k, LG_CHK_JSON, "line %d: text missing", i);
    }
    k->lines++;
}

void lg_check_line(lg_check *k, const char *line, size_t len)
{
    if (k->done) {
        lg_check_fail(k, LG_CHK_FRAMING, "a line after the done line");
        return;
    }
    cJSON *o = cJSON_ParseWithLength(line, len);
    if (!o || !cJSON_IsObject(o)) {
        lg_check_fail(k, LG_CHK_JSON, "line %d is not a JSON object: %.60s", k->lines, line);
        cJSON_Delete(o);
        return;
    }
    if (cJSON_GetObjectItemCaseSensitive(o, "error")) {
        lg_check_fail(k, LG_CHK_JSON, "error inside the stream: %.100s", line);
    } else if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "done"))) {
        int64_t seen;
        k->done = 1;
        if (!get_int(o, "tokens_seen", 0, 9.0e15, &seen))
            lg_check_fail(k, LG_CHK_TOKENS_SEEN, "done line without an integer tokens_seen");
        else
            k->tokens_seen = (uint64_t)seen;
        if (k->mode == LG_MODE_GENERATE) {
            const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "reason");
            if (!cJSON_IsString(r))
                lg_check_fail(k, LG_CHK_JSON, "done line without a reason");
            else if (strcmp(r->valuestring, "length") == 0) {
                if (k->lines != k->max_tokens)
                    lg_check_fail(k, LG_CHK_COUNT, "reason length after %d of %d tokens", k->lines,
                                  k->max_tokens);
            } else if (strcmp(r->valuestring, "stop") != 0) {
                lg_check_fail(k, LG_CHK_JSON, "unexpected reason \"%.20s\"", r->valuestring);
            }
        }
    } else {
        check_token_line(k, o);
    }
    cJSON_Delete(o);
}

int lg_check_end(lg_check *k, int status, int chunked, int chunk_split_lines)
{
    if (status != 200) {
        lg_check_fail(k, LG_CHK_STATUS, "status %d", status);
    } else {
        if (!chunked)
            lg_check_fail(k, LG_CHK_FRAMING, "stream without Transfer-Encoding: chunked");
        if (chunk_split_lines)
            lg_check_fail(k, LG_CHK_FRAMING, "%d chunk(s) ended in the middle of a line", chunk_split_lines);
        if (!k->done)
            lg_check_fail(k, LG_CHK_FRAMING, "no done line");
        uint64_t folded = (uint64_t)k->lines;
        if (k->mode == LG_MODE_TOKENS && k->lines != k->n_sent)
            lg_check_fail(k, LG_CHK_COUNT, "%d token lines for %d tokens sent", k->lines, k->n_sent);
        if (k->mode == LG_MODE_GENERATE && k->lines > k->max_tokens)
            lg_check_fail(k, LG_CHK_COUNT, "%d tokens generated, max_tokens %d", k->lines, k->max_tokens);
        if (k->mode == LG_MODE_TOKENS)
            folded = (uint64_t)k->n_sent;
        if (k->done && k->tokens_seen != k->before + folded)
            lg_check_fail(k, LG_CHK_TOKENS_SEEN, "tokens_seen %llu, expected %llu + %llu",
                          (unsigned long long)k->tokens_seen, (unsigned long long)k->before,
                          (unsigned long long)folded);
    }
    int n = 0;
    for (int i = 0; i < LG_CHK_N; i++)
        n += k->fail[i];
    return n;
}
