/*
 * The compile driver: verify, infer shapes, verify with the inferred types,
 * run the pass pipeline, lower for a target, verify the result, each step
 * as struct tpf_compile_options asks (tpf-passes.h).  The command, the
 * Python extension and `tpfuse run` / `tpfuse plan` all compile through
 * here; their different rules are the options' policy fields.
 */
#include <stdio.h>
#include <string.h>

#include "tpf-passes.h"

/* Copies the messages of `from` of at least severity `min` into `to`. */
static void keep_messages(const struct tpf_diag *from, enum tpf_severity min, struct tpf_diag *to)
{
	for (size_t i = 0; i < from->count; i++)
		if (from->entries[i].severity >= min)
			tpf_diag_add(to, from->entries[i].severity, "%s", from->entries[i].text);
}

/* Shape inference under policy p.  A lenient inference records nothing:
 * a failed one has said only what it could not infer, which the runtime
 * finds out again with concrete shapes. */
static enum tpf_status infer(struct tpf_model *m, enum tpf_infer_policy p, struct tpf_diag *d)
{
	switch (p) {
	case TPF_INFER_NONE:
		return TPF_OK;
	case TPF_INFER_STRICT:
		return tpf_model_infer_shapes(m, d);
	case TPF_INFER_LENIENT:
		tpf_model_infer_shapes(m, NULL);
		return TPF_OK;
	}
	return tpf_diag_fail(d, TPF_ERR_INVALID, "compile: unknown inference policy %d", (int)p);
}

/* Whether target names a backend with a lowering pipeline (lower-cpu,
 * lower-cuda: passes/lower.c). */
static int lowering_known(const char *target)
{
	return strcmp(target, "cpu") == 0 || strcmp(target, "cuda") == 0;
}

/* The target's lowering pipeline, "lower-TARGET", with the optimization
 * pipeline's context. */
static enum tpf_status lower(struct tpf_model *m, const struct tpf_compile_options *o,
			     struct tpf_diag *d)
{
	struct tpf_pipeline_options lo = o->pipeline;
	char name[64];

	if ((size_t)snprintf(name, sizeof(name), "lower-%s", o->target) >= sizeof(name) ||
	    !lowering_known(o->target))
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED,
				     "target '%s': no lowering pipeline '%s' is registered", o->target,
				     name);
	return tpf_lower_for_backend(m, o->target, &lo.ctx, d);
}

/* The steps, each recording into d; *failed names the one that failed. */
static enum tpf_status compile_steps(struct tpf_model *m, const struct tpf_compile_options *o,
				     enum tpf_compile_stage *failed, struct tpf_diag *d)
{
	enum tpf_status st = TPF_OK;

	*failed = TPF_COMPILE_INPUT;
	if (o->verify_before && (st = tpf_model_verify(m, d)))
		return st;
	if ((st = infer(m, o->infer, d)))
		return st;
	if (o->verify_inferred && (st = tpf_model_verify(m, d)))
		return st;
	*failed = TPF_COMPILE_PIPELINE;
	if (o->optimize && (st = tpf_pipeline_run(m, &o->pipeline, d)))
		return st;
	*failed = TPF_COMPILE_LOWER;
	if (o->target && (st = lower(m, o, d)))
		return st;
	*failed = TPF_COMPILE_OUTPUT;
	if (o->verify_after) {
		st = tpf_model_verify(m, d);
		if (!st)
			st = tpf_model_infer_shapes(m, d);
		if (st)
			return st;
	}
	*failed = TPF_COMPILE_DONE;
	return TPF_OK;
}

enum tpf_status tpf_compile(struct tpf_model *m, const struct tpf_compile_options *o,
			    struct tpf_diag *d)
{
	static const struct tpf_compile_options none = {0};
	enum tpf_compile_stage stage, *failed;
	struct tpf_diag *steps = d;
	enum tpf_status st;

	if (!o)
		o = &none;
	failed = o->failed ? o->failed : &stage;
	*failed = TPF_COMPILE_INPUT;
	if (!m || !m->graph)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "compile: no model given");
	/* messages below min_severity are recorded apart and not kept */
	if (o->min_severity > TPF_SEV_NOTE && d) {
		steps = tpf_diag_create();
		if (!steps)
			return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	}
	st = compile_steps(m, o, failed, steps);
	if (steps != d) {
		keep_messages(steps, o->min_severity, d);
		tpf_diag_free(steps);
	}
	return st;
}
