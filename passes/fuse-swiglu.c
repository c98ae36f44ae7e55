/* SPDX-License-Identifier: MIT */
/*
 * fuse-swiglu: the activation and gate product of a gated MLP become one
 * ai.tpfuse.GatedActivation (docs/ops.md),
 *
 *   SiLU:       Mul(Mul(gate, Sigmoid(gate)), up)      (every operand order,
 *               Mul(gate, Mul(Sigmoid(gate), up)), Mul(Sigmoid(gate), Mul(gate, up)))
 *   GELU tanh:  Mul(0.5 * gate * (1 + Tanh(c1 * (gate + c2 * gate^3))), up)
 *               (gate^3 as Pow(gate, 3) or gate * gate * gate; the 0.5 on
 *               either side; c1 = sqrt(2/pi), c2 = 0.044715)
 *   GELU erf:   Mul(0.5 * gate * (1 + Erf(gate / sqrt(2))), up)
 *               (or gate * (1/sqrt(2)))
 *       => GatedActivation(gate, up) {activation = silu | gelu_tanh | gelu}
 *
 * When gate and up are the two equal halves of one Split along the last
 * axis (outputs 0 and 1; the merged gate/up GEMM of merge-parallel-matmuls
 * or an export's own gate_up_proj), and nothing else reads them, the fused
 * op takes the Split's input whole (packed = 1) and the Split goes.
 *
 * Refused, with a near-miss reason: a constant of the GELU formula that
 * differs, gate and up of different dtypes or provably different shapes,
 * a product of another dtype, a non-float dtype.
 */
#include <math.h>
#include <string.h>

#include "pattern.h"

#define PASS_NAME "fuse-swiglu"

struct swiglu_facts {
	struct tpf_node *split; /* packed form: the Split of gate and up */
};

/* Equal up to the constant's own precision (a bfloat16 sqrt(2/pi) is
 * 0.796875). */
static int near(double v, double want, enum tpf_dtype t)
{
	double tol = t == TPF_DTYPE_BFLOAT16 ? 4e-3 : 1e-3;
	return fabs(v - want) <= tol * fabs(want);
}

/* The constant bound to `name` is `want` (when bound). */
static const char *check_const(struct tpf_match *m, const char *name, double want)
{
	struct tpf_value *v = tpf_match_value(m, name);
	double x;

	if (!v)
		return NULL;
	if (tpf_pattern_const_scalar(v, &x))
		return tpf_match_reason(m, "constant '%s' of the activation is not a scalar", v->name);
	if (!near(x, want, tpf_pattern_dtype(v)))
		return tpf_match_reason(m, "constant '%s' is %g where the activation has %g", v->name,
		                        x, want);
	return NULL;
}

/* Every use of v is by a node of the match. */
static int only_used_in_match(const struct tpf_value *v, const struct tpf_match *m)
{
	if (v->n_output_refs)
		return 0;
	for (size_t u = 0; u < v->n_uses; u++) {
		int in = 0;
		for (size_t i = 0; i < m->n_nodes && !in; i++)
			in = v->uses[u].node == m->nodes[i];
		if (!in)
			return 0;
	}
	return 1;
}

/* gate and up as outputs 0 and 1 of a Split in equal halves along the
 * last axis: that Split, else NULL. */
static struct tpf_node *packed_split(struct tpf_value *gate, struct tpf_value *up,
                                     const struct tpf_match *m)
{
	struct tpf_node *sp = gate->producer;
	if (!sp || sp->op != TPF_OP_SPLIT || up->producer != sp || sp->n_outputs != 2 ||
	    gate->producer_index != 0 || up->producer_index != 1 || !sp->inputs[0])
		return NULL;
	int r = tpf_pattern_rank(sp->inputs[0]);
	int64_t axis = tpf_node_attr_int(sp, "axis", 0);
	if (r <= 0 || (axis != -1 && axis != r - 1))
		return NULL;
	const struct tpf_attr *sa = tpf_node_attr(sp, "split");
	int64_t sizes[2];
	size_t n = 0;
	if (sp->n_inputs > 1 && sp->inputs[1]) {
		if (tpf_pattern_const_ints(sp->inputs[1], sizes, 2, &n) || n != 2 || sizes[0] != sizes[1])
			return NULL;
	} else if (sa) {
		if (sa->kind != TPF_ATTR_INTS || sa->n != 2 || sa->ints[0] != sa->ints[1])
			return NULL;
	} else {
		/* equal parts (num_outputs = 2, or no sizes before opset 18): an
		 * odd static dim would make the parts unequal */
		int64_t last;
		if (tpf_pattern_last_dim(sp->inputs[0], &last) && last % 2)
			return NULL;
		if (!tpf_pattern_last_dim(sp->inputs[0], &last) && tpf_node_attr(sp, "num_outputs") &&
		    tpf_node_attr_int(sp, "num_outputs", 0) != 2)
			return NULL;
	}
	if (!only_used_in_match(gate, m) || !only_used_in_match(up, m))
		return NULL;
	return sp;
}

static const char *check_common(struct tpf_match *m)
{
	struct tpf_value *gate = tpf_match_value(m, "gate"), *up = tpf_match_value(m, "up");
	struct tpf_value *out = m->root->outputs[0];
	struct swiglu_facts *f = (struct swiglu_facts *)m->facts;
	const char *why;

	if (!gate || !up)
		return "incomplete match";
	if ((why = check_const(m, "half", 0.5)) || (why = check_const(m, "one", 1.0)) ||
	    (why = check_const(m, "three", 3.0)) ||
	    (why = check_const(m, "c1", 0.79788456080286536)) ||
	    (why = check_const(m, "c2", 0.044715)) ||
	    (why = check_const(m, "sqrt2", 1.4142135623730951)) ||
	    (why = check_const(m, "rsqrt2", 0.70710678118654752)))
		return why;
	enum tpf_dtype tg = tpf_pattern_dtype(gate), tu = tpf_pattern_dtype(up),
	               to = tpf_pattern_dtype(out);
	if (tg == TPF_DTYPE_UNDEFINED || tu == TPF_DTYPE_UNDEFINED)
		return "the dtype of gate or up is unknown";
	if (tg != tu)
		return tpf_match_reason(m, "gate is %s, up is %s", tpf_dtype_name(tg),
		                        tpf_dtype_name(tu));
	if (to != TPF_DTYPE_UNDEFINED && to != tg)
		return tpf_match_reason(m, "the product is %s, the inputs %s", tpf_dtype_name(to),
		                        tpf_dtype_name(tg));
	if (tg != TPF_DTYPE_FLOAT && tg != TPF_DTYPE_FLOAT16 && tg != TPF_DTYPE_BFLOAT16 &&
	    tg != TPF_DTYPE_DOUBLE)
		return tpf_match_reason(m, "dtype %s is not a 16-, 32- or 64-bit float type",
		                        tpf_dtype_name(tg));
	if (tpf_pattern_shapes_differ(gate, up))
		return tpf_match_reason(m, "gate '%s' and up '%s' may differ in shape (a broadcast)",
		                        gate->name, up->name);
	f->split = packed_split(gate, up, m);
	return NULL;
}

static const char *check_silu(const struct tpf_pattern_context *pc, struct tpf_match *m)
{
	(void)pc;
	/* the inner product may have other users in the match structure
	 * (MULTI_USE); checked here so that --explain reports it */
	static const char *const inner[] = {"silu", "sig_up", "gate_up"};
	for (size_t i = 0; i < sizeof(inner) / sizeof(inner[0]); i++) {
		struct tpf_node *n = tpf_match_node(m, inner[i]);
		size_t uses = n ? tpf_value_use_count(n->outputs[0]) : 1;
		if (uses != 1)
			return tpf_match_reason(m, "'%s' (%s) has %zu uses: it is needed besides the "
			                        "gated product",
			                        n->outputs[0]->name, inner[i], uses);
	}
	return check_common(m);
}

static enum tpf_status rewrite(struct tpf_rewriter *rw, struct tpf_match *m, const char *act)
{
	struct swiglu_facts *f = (struct swiglu_facts *)m->facts;
	struct tpf_value *in[2] = {tpf_match_value(m, "gate"), tpf_match_value(m, "up")};
	struct tpf_value *out = m->root->outputs[0];
	struct tpf_node *sp = f->split;
	enum tpf_status st;

	if (sp)
		in[0] = sp->inputs[0];
	struct tpf_node *n =
	    tpf_rewriter_create(rw, TPF_OP_TPF_GATED_ACTIVATION, in, sp ? 1 : 2, 1, NULL);
	if (!n)
		return TPF_ERR_NOMEM;
	if ((st = tpf_node_set_attr_string(n, "activation", act)))
		return st;
	if (sp && (st = tpf_node_set_attr_int(n, "packed", 1)))
		return st;
	/* x^3 written as x * (x * x): the kernel rounds the square as the
	 * chain did */
	struct tpf_node *cube = tpf_match_node(m, "cube");
	if (cube && cube->op == TPF_OP_MUL && (st = tpf_node_set_attr_int(n, "cube_as_product", 1)))
		return st;
	if (out->type.kind != TPF_TYPE_NONE)
		st = tpf_value_copy_type(n->outputs[0], &out->type);
	else
		st = tpf_value_copy_type(n->outputs[0], &tpf_match_value(m, "up")->type);
	if (st)
		return st;
	if ((st = tpf_rewriter_replace(rw, out, n->outputs[0])))
		return st;
	if ((st = tpf_rewriter_erase_dead(rw, m)))
		return st;
	return sp ? tpf_rewriter_erase_if_dead(rw, sp) : TPF_OK;
}

static enum tpf_status rewrite_silu(struct tpf_rewriter *rw, struct tpf_match *m)
{
	return rewrite(rw, m, "silu");
}

static enum tpf_status rewrite_gelu_tanh(struct tpf_rewriter *rw, struct tpf_match *m)
{
	return rewrite(rw, m, "gelu_tanh");
}

static enum tpf_status rewrite_gelu(struct tpf_rewriter *rw, struct tpf_match *m)
{
	return rewrite(rw, m, "gelu");
}

#define SIG TPF_PAT_OP(SIGMOID, "sigmoid", 0, NULL, TPF_PAT_ANY("gate"))

/* (gate * Sigmoid(gate)) * up */
static const struct tpf_pattern pat_silu = {
    .name = "swiglu",
    .root = TPF_PAT_OP(MUL, "prod", TPF_PNODE_COMMUTE, NULL,
                       TPF_PAT_OP(MUL, "silu", TPF_PNODE_COMMUTE | TPF_PNODE_MULTI_USE, NULL, TPF_PAT_ANY("gate"), SIG),
                       TPF_PAT_ANY("up")),
    .check = check_silu,
    .rewrite = rewrite_silu,
    .explain_min_nodes = 3,
};

/* gate * (Sigmoid(gate) * up) */
static const struct tpf_pattern pat_silu_gate_last = {
    .name = "swiglu",
    .root = TPF_PAT_OP(MUL, "prod", TPF_PNODE_COMMUTE, NULL, TPF_PAT_ANY("gate"),
                       TPF_PAT_OP(MUL, "sig_up", TPF_PNODE_COMMUTE | TPF_PNODE_MULTI_USE, NULL, SIG,
                                  TPF_PAT_ANY("up"))),
    .check = check_silu,
    .rewrite = rewrite_silu,
    .explain_min_nodes = 3,
};

/* Sigmoid(gate) * (gate * up) */
static const struct tpf_pattern pat_silu_sigmoid_last = {
    .name = "swiglu",
    .root = TPF_PAT_OP(MUL, "prod", TPF_PNODE_COMMUTE, NULL, SIG,
                       TPF_PAT_OP(MUL, "gate_up", TPF_PNODE_COMMUTE | TPF_PNODE_MULTI_USE, NULL, TPF_PAT_ANY("gate"),
                                  TPF_PAT_ANY("up"))),
    .check = check_silu,
    .rewrite = rewrite_silu,
    .explain_min_nodes = 3,
};

/* ---- GELU, tanh approximation */

#define GATE TPF_PAT_ANY("gate")
#define CUBE                                                                                       \
	TPF_PAT_ALT(TPF_PAT_OP(POW, "cube", 0, NULL, GATE, TPF_PAT_CONST("three")),                \
	            TPF_PAT_OP(MUL, "cube", TPF_PNODE_COMMUTE, NULL, GATE,                         \
	                       TPF_PAT_OP(MUL, "square", 0, NULL, GATE, GATE)))
#define TANH_ONE                                                                                   \
	TPF_PAT_OP(                                                                                \
	    ADD, "one_plus", TPF_PNODE_COMMUTE, NULL,                                              \
	    TPF_PAT_OP(TANH, "tanh", 0, NULL,                                                      \
	               TPF_PAT_OP(MUL, "scaled", TPF_PNODE_COMMUTE, NULL, TPF_PAT_CONST("c1"),     \
	                          TPF_PAT_OP(ADD, "inner", TPF_PNODE_COMMUTE, NULL, GATE,          \
	                                     TPF_PAT_OP(MUL, "cubic", TPF_PNODE_COMMUTE, NULL,     \
	                                                TPF_PAT_CONST("c2"), CUBE)))),             \
	    TPF_PAT_CONST("one"))
#define ERF_ONE                                                                                    \
	TPF_PAT_OP(ADD, "one_plus", TPF_PNODE_COMMUTE, NULL,                                       \
	           TPF_PAT_OP(ERF, "erf", 0, NULL,                                                 \
	                      TPF_PAT_ALT(TPF_PAT_OP(DIV, "scaled", 0, NULL, GATE,                 \
	                                             TPF_PAT_CONST("sqrt2")),                      \
	                                  TPF_PAT_OP(MUL, "scaled", TPF_PNODE_COMMUTE, NULL, GATE, \
	                                             TPF_PAT_CONST("rsqrt2")))),                   \
	           TPF_PAT_CONST("one"))
/* 0.5 * gate * ONE_PLUS in the groupings exporters write */
#define GELU_OF(ONE_PLUS)                                                                          \
	TPF_PAT_ALT(TPF_PAT_OP(MUL, "gelu", TPF_PNODE_COMMUTE, NULL, GATE,                         \
	                       TPF_PAT_OP(MUL, "halved", TPF_PNODE_COMMUTE, NULL,                  \
	                                  TPF_PAT_CONST("half"), ONE_PLUS)),                       \
	            TPF_PAT_OP(MUL, "gelu", TPF_PNODE_COMMUTE, NULL, TPF_PAT_CONST("half"),        \
	                       TPF_PAT_OP(MUL, "x_times", TPF_PNODE_COMMUTE, NULL, GATE,           \
	                                  ONE_PLUS)),                                              \
	            TPF_PAT_OP(MUL, "gelu", TPF_PNODE_COMMUTE, NULL,                               \
	                       TPF_PAT_OP(MUL, "half_x", TPF_PNODE_COMMUTE, NULL, GATE,            \
	                                  TPF_PAT_CONST("half")),                                  \
	                       ONE_PLUS))

static const struct tpf_pattern pat_gelu_tanh = {
    .name = "geglu-tanh",
    .root = TPF_PAT_OP(MUL, "prod", TPF_PNODE_COMMUTE, NULL, GELU_OF(TANH_ONE), TPF_PAT_ANY("up")),
    .check = check_silu,
    .rewrite = rewrite_gelu_tanh,
    .explain_min_nodes = 5,
};

static const struct tpf_pattern pat_gelu_erf = {
    .name = "geglu",
    .root = TPF_PAT_OP(MUL, "prod", TPF_PNODE_COMMUTE, NULL, GELU_OF(ERF_ONE), TPF_PAT_ANY("up")),
    .check = check_silu,
    .rewrite = rewrite_gelu,
    .explain_min_nodes = 5,
};

static const struct tpf_pattern *const patterns[] = {
    &pat_gelu_tanh, &pat_gelu_erf, &pat_silu, &pat_silu_gate_last, &pat_silu_sigmoid_last, NULL,
};

static enum tpf_status run(struct tpf_model *m, struct tpf_pass_context *ctx, int *changed,
                           struct tpf_diag *d)
{
	return tpf_pattern_run(m, &tpf_pass_fuse_swiglu, ctx, changed, d);
}

const struct tpf_pass tpf_pass_fuse_swiglu = {
    .name = PASS_NAME,
    .summary = "SiLU(gate) * up and GELU(gate) * up into ai.tpfuse.GatedActivation",
    .run = run,
    .patterns = patterns,
};
