/*
 * isa_rename.h — the names of a per-ISA object (isa.h "Per-ISA objects"). The Makefile compiles
 * each file of ISA_FILES once per path with `-include core/isa_rename.h -DRECUR_ISA_SUFFIX=s`
 * (s = base, avx2, avx512): every function those files define outside a static scope is renamed
 * name_s here, declarations, definitions and calls alike, so a path's objects call each other and
 * never another path's. The unsuffixed entry points are isa.c's (isa_entry.def). A function
 * added to ISA_FILES needs its line here (else the link fails on a duplicate definition).
 */
#ifndef RECUR_ISA_RENAME_H
#define RECUR_ISA_RENAME_H

#ifndef RECUR_ISA_SUFFIX
#error "isa_rename.h: compile with -DRECUR_ISA_SUFFIX=base|avx2|avx512 (Makefile ISA_FILES)"
#endif
#define RECUR_ISA_CAT2_(a, b) a##_##b
#define RECUR_ISA_CAT_(a, b) RECUR_ISA_CAT2_(a, b)
#define RECUR_ISA_NAME(f) RECUR_ISA_CAT_(f, RECUR_ISA_SUFFIX)

/* entry points (isa_entry.def) */
#define recur_model_prefill RECUR_ISA_NAME(recur_model_prefill)
#define recur_model_prefill_tail RECUR_ISA_NAME(recur_model_prefill_tail)
#define recur_model_step RECUR_ISA_NAME(recur_model_step)
#define recur_model_step_batch RECUR_ISA_NAME(recur_model_step_batch)
#define recur_workspace_create RECUR_ISA_NAME(recur_workspace_create)
#define recur_workspace_free RECUR_ISA_NAME(recur_workspace_free)
#define recur_delta_rule RECUR_ISA_NAME(recur_delta_rule)
#define recur__gdr_step RECUR_ISA_NAME(recur__gdr_step)
#define recur_generalized_delta RECUR_ISA_NAME(recur_generalized_delta)
#define recur_softmax_attention RECUR_ISA_NAME(recur_softmax_attention)
#define recur_softmax_attention_step RECUR_ISA_NAME(recur_softmax_attention_step)
#define recur_gla RECUR_ISA_NAME(recur_gla)
#define recur_multiscale_decays RECUR_ISA_NAME(recur_multiscale_decays)
#define recur_retention RECUR_ISA_NAME(recur_retention)
#define recur_linear_attention RECUR_ISA_NAME(recur_linear_attention)
#define recur__decay_cols RECUR_ISA_NAME(recur__decay_cols)
#define recur__decay_rows RECUR_ISA_NAME(recur__decay_rows)
#define recur__mm RECUR_ISA_NAME(recur__mm)
#define recur__mm_ahead_bind RECUR_ISA_NAME(recur__mm_ahead_bind)
#define recur__transpose RECUR_ISA_NAME(recur__transpose)
#define recur__short_conv_transpose RECUR_ISA_NAME(recur__short_conv_transpose)
#define recur__rwkv7_is_matrix RECUR_ISA_NAME(recur__rwkv7_is_matrix)
#define recur__rwkv7_scratch RECUR_ISA_NAME(recur__rwkv7_scratch)
#define recur__rwkv7_shape RECUR_ISA_NAME(recur__rwkv7_shape)
#define recur__rwkv7_state_floats RECUR_ISA_NAME(recur__rwkv7_state_floats)

/* called only from ISA_FILES */
#define gl_check_form_scale RECUR_ISA_NAME(gl_check_form_scale)
#define gl_check_log_gates RECUR_ISA_NAME(gl_check_log_gates)
#define gl_run RECUR_ISA_NAME(gl_run)
#define recur__softmax_rows RECUR_ISA_NAME(recur__softmax_rows)
#define recur__softmax_step RECUR_ISA_NAME(recur__softmax_step)
#define recur__solve_unit_lower RECUR_ISA_NAME(recur__solve_unit_lower)
#define recur__short_conv_rows RECUR_ISA_NAME(recur__short_conv_rows)
#define recur__mamba2_rows RECUR_ISA_NAME(recur__mamba2_rows)
#define recur__rwkv7_rows RECUR_ISA_NAME(recur__rwkv7_rows)

#endif /* RECUR_ISA_RENAME_H */
