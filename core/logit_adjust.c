/* logit_adjust.c — OpenAI's presence / frequency penalties and logit bias on a logits vector
 * before sampling (recur.h "logit adjustment"). */
#include "recur.h"

/* For every distinct generated token j with count c_j >= 1, and every biased token:
 *   logits[j] <- logits[j] - c_j * frequency - [c_j > 0] * presence + bias[j]
 * (OpenAI's "mu[j] - c[j] * alpha_frequency - float(c[j] > 0) * alpha_presence", with
 * logit_bias added to the same logits). Tokens neither generated nor biased are untouched. */
int recur_logit_adjust(float *logits, int vocab, const recur_logit_adjust_params *p,
                       const int32_t *ids, const uint32_t *counts, size_t n)
{
    if (!logits || !p || vocab <= 0 || (n && (!ids || !counts)) || (p->n_bias && (!p->bias_ids || !p->bias)))
        return RECUR_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            return RECUR_ETOKEN;
    for (size_t i = 0; i < p->n_bias; i++)
        if (p->bias_ids[i] < 0 || p->bias_ids[i] >= vocab)
            return RECUR_ETOKEN;
    for (size_t i = 0; i < n; i++)
        if (counts[i] > 0)
            logits[ids[i]] -= (float)counts[i] * p->frequency + p->presence;
    for (size_t i = 0; i < p->n_bias; i++)
        logits[p->bias_ids[i]] += p->bias[i];
    return 0;
}
