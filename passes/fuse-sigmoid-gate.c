/* SPDX-License-Identifier: MIT */
/*
 * fuse-sigmoid-gate: the gated shared expert of a mixture-of-experts block,
 *
 *   Add(final, Mul(Sigmoid(gate), shared))      (Add and Mul in any operand order)
 *       => ai.tpfuse.SigmoidGateAdd(final, gate, shared)
 *
 * one elementwise op computing final + sigmoid(gate) * shared in float and
 * storing the result in the dtype of its inputs (docs/ops.md).
 *
 * Accepted shapes: final and shared have the same shape [..., H]; gate has
 * the same leading dims and a last dim of 1 (one gate value per token,
 * broadcast over the hidden dim) or H.  A broadcast the graph's symbolic
 * equality proves (a dim known to differ: of final, of shared, of gate over
 * a leading dim) is refused; dims it cannot relate (unknown, or symbols
 * that nothing ties together) are not a reason to refuse: the fused op
 * broadcasts as the unfused ops do.  Unknown ranks are refused.  final,
 * gate, shared and the result share one float dtype.
 *
 * The product Mul is an intermediate and must have no other user (checked
 * in the check, so that --explain reports it).  The
 * Sigmoid may have other users: the fused op recomputes the sigmoid from
 * `gate` and the Sigmoid node stays for those users.  That is still a win
 * (the product and the sum are never written), so it fuses.
 */
#include <string.h>

#include "pattern.h"

#define PASS_NAME "fuse-sigmoid-gate"
#define PATTERN_NAME "sigmoid-gate"

/* Two dims may be equal: the graph's symbolic equality does not answer NO.
 * An unknown dim, or two symbols nothing relates (the invented dims of a
 * TorchScript custom op's output), do not refuse the fusion: the fused op
 * broadcasts as the unfused Mul and Add would, and the kernel sees the
 * concrete shapes. */
static int is_one(const struct tpf_dim *d)
{
	return !d->param && d->value == 1;
}

static int dims_equal(const struct tpf_graph *g, const struct tpf_dim *a, const struct tpf_dim *b)
{
	enum tpf_answer eq = tpf_graph_dims_equal(g, a, b);
	if (eq == TPF_ANSWER_YES)
		return 1;
	/* a 1 against anything not known to be 1 is a broadcast as written */
	return eq == TPF_ANSWER_UNKNOWN && !is_one(a) && !is_one(b);
}

static const char *dim_text(const struct tpf_dim *d, char *buf, size_t size)
{
	if (d->param)
		snprintf(buf, size, "%s", d->param);
	else if (d->value >= 0)
		snprintf(buf, size, "%lld", (long long)d->value);
	else
		snprintf(buf, size, "?");
	return buf;
}

/* Why the first n dims of x (called `name`) and of shared are not the
 * same, ending with `rule`; NULL when they are. */
static const char *leading_dims_differ(struct tpf_match *m, const struct tpf_value *x,
                                       const char *name, const struct tpf_value *shared, int n,
                                       const char *rule)
{
	const struct tpf_graph *g = m->root->graph;
	char b1[48], b2[48];

	for (int i = 0; i < n; i++) {
		const struct tpf_dim *a = &x->type.shape.dims[i], *b = &shared->type.shape.dims[i];
		if (!dims_equal(g, a, b))
			return tpf_match_reason(m, "%s dim %d is %s, shared dim %d is %s (%s)", name, i,
			                        dim_text(a, b1, sizeof(b1)), i, dim_text(b, b2, sizeof(b2)),
			                        rule);
	}
	return NULL;
}

static const char *check_gate(const struct tpf_pattern_context *pc, struct tpf_match *m)
{
	(void)pc;
	struct tpf_value *final = tpf_match_value(m, "final"), *gate = tpf_match_value(m, "gate");
	struct tpf_value *shared = tpf_match_value(m, "shared");
	struct tpf_value *out = m->root->outputs[0];
	struct tpf_node *mul = tpf_match_node(m, "mul");
	const struct tpf_graph *g = m->root->graph;
	char b1[48], b2[48];
	const char *why;

	if (tpf_match_node(m, "tanh"))
		return "the gate goes through Tanh, not Sigmoid";
	if (!final || !gate || !shared || !mul)
		return "incomplete match";
	/* checked here rather than by the matcher so that --explain reports it */
	size_t uses = tpf_value_use_count(mul->outputs[0]);
	if (uses != 1)
		return tpf_match_reason(m,
		                        "the product '%s' has %zu uses: it is needed besides the "
		                        "sum",
		                        mul->outputs[0]->name, uses);

	/* one float dtype throughout */
	enum tpf_dtype t_f = tpf_pattern_dtype(final), t_g = tpf_pattern_dtype(gate);
	enum tpf_dtype t_s = tpf_pattern_dtype(shared), t_o = tpf_pattern_dtype(out);
	if (t_f == TPF_DTYPE_UNDEFINED || t_g == TPF_DTYPE_UNDEFINED || t_s == TPF_DTYPE_UNDEFINED)
		return "the dtype of final, gate or shared is unknown";
	if (t_f != t_s || t_g != t_s)
		return tpf_match_reason(m, "mixed dtypes: final %s, gate %s, shared %s",
		                        tpf_dtype_name(t_f), tpf_dtype_name(t_g),
		                        tpf_dtype_name(t_s));
	if (t_o != TPF_DTYPE_UNDEFINED && t_o != t_s)
		return tpf_match_reason(m, "the result dtype %s differs from the inputs' %s",
		                        tpf_dtype_name(t_o), tpf_dtype_name(t_s));
	if (!tpf_dtype_is_float(t_s) || tpf_dtype_bits(t_s) < 16)
		return tpf_match_reason(m, "dtype %s is not a 16-, 32- or 64-bit float type",
		                        tpf_dtype_name(t_s));

	/* shapes: final == shared, gate [..., 1] or [..., H] */
	int r_f = tpf_pattern_rank(final), r_g = tpf_pattern_rank(gate),
	    r_s = tpf_pattern_rank(shared);
	if (r_f < 0 || r_g < 0 || r_s < 0)
		return "the shape of final, gate or shared is unknown";
	if (r_s < 1)
		return "shared is a scalar";
	if (r_f != r_s)
		return tpf_match_reason(m, "final has rank %d, shared rank %d (broadcast of final)",
		                        r_f, r_s);
	if ((why = leading_dims_differ(m, final, "final", shared, r_s,
	                               "final and shared must have one shape")))
		return why;
	if (r_g != r_s)
		return tpf_match_reason(m, "gate has rank %d, shared rank %d", r_g, r_s);
	if ((why = leading_dims_differ(m, gate, "gate", shared, r_s - 1,
	                               "gate may broadcast only over the last dim")))
		return why;
	const struct tpf_dim *gl = &gate->type.shape.dims[r_s - 1];
	const struct tpf_dim *sl = &shared->type.shape.dims[r_s - 1];
	if (!is_one(gl) && !dims_equal(g, gl, sl))
		return tpf_match_reason(m, "gate's last dim is %s; expected 1 or %s",
		                        dim_text(gl, b1, sizeof(b1)), dim_text(sl, b2, sizeof(b2)));
	return NULL;
}

static enum tpf_status rewrite_gate(struct tpf_rewriter *rw, struct tpf_match *m)
{
	struct tpf_value *in[3] = {tpf_match_value(m, "final"), tpf_match_value(m, "gate"),
	                           tpf_match_value(m, "shared")};
	struct tpf_value *out = m->root->outputs[0];
	enum tpf_status st;

	struct tpf_node *f = tpf_rewriter_create(rw, TPF_OP_TPF_SIGMOID_GATE_ADD, in, 3, 1, NULL);
	if (!f)
		return TPF_ERR_NOMEM;
	if (out->type.kind == TPF_TYPE_NONE &&
	    (st = tpf_value_copy_type(f->outputs[0], &in[2]->type)))
		return st;
	if ((st = tpf_rewriter_replace(rw, out, f->outputs[0])))
		return st;
	/* the Sigmoid survives when it has other users */
	return tpf_rewriter_erase_dead(rw, m);
}

static const struct tpf_pattern pat_gate = {
    .name = PATTERN_NAME,
    .root = TPF_PAT_OP(ADD, "add", TPF_PNODE_COMMUTE, NULL, TPF_PAT_ANY("final"),
                       TPF_PAT_OP(MUL, "mul", TPF_PNODE_COMMUTE | TPF_PNODE_MULTI_USE, NULL,
                                  TPF_PAT_ALT(TPF_PAT_OP(SIGMOID, "sigmoid", TPF_PNODE_MULTI_USE,
                                                         NULL, TPF_PAT_ANY("gate")),
                                              /* a look-alike, matched to be reported */
                                              TPF_PAT_OP(TANH, "tanh", TPF_PNODE_MULTI_USE, NULL,
                                                         TPF_PAT_ANY("gate"))),
                                  TPF_PAT_ANY("shared"))),
    .check = check_gate,
    .rewrite = rewrite_gate,
    /* Add(x, Mul(a, b)) without an activation is too common to report */
    .explain_min_nodes = 3,
};

/* The pass's counter is the pattern's name. */
static const struct tpf_pattern *const patterns[] = {&pat_gate, NULL};

static enum tpf_status run(struct tpf_model *m, struct tpf_pass_context *ctx, int *changed,
                           struct tpf_diag *d)
{
	return tpf_pattern_run(m, &tpf_pass_fuse_sigmoid_gate, ctx, changed, d);
}

const struct tpf_pass tpf_pass_fuse_sigmoid_gate = {
    .name = PASS_NAME,
    .summary = "final + Sigmoid(gate) * shared into ai.tpfuse.SigmoidGateAdd",
    .run = run,
    .patterns = patterns,
};
