/* SPDX-License-Identifier: MIT */
/* canonicalize-rmsnorm, fuse-allreduce-rmsnorm and fuse-allreduce-rmsnorm-quant
 * on graphs built with the IR builder: every accepted form, the near misses
 * that must be left alone, counts on a dense tensor-parallel stack,
 * idempotence, the verifier after each pass and a golden text dump. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tpf-passes.h"

#define T 4
#define H 8

static const int64_t dims_th[2] = {T, H};
static const int64_t dims_t1[2] = {T, 1};

/* ------------------------------------------------------------------ builders */

static struct tpf_model *new_model(int64_t opset)
{
	struct tpf_model *m = tpf_model_create();
	assert_non_null(m);
	assert_int_equal(tpf_model_set_opset(m, "", opset), TPF_OK);
	assert_int_equal(tpf_model_set_opset(m, "com.microsoft", 1), TPF_OK);
	return m;
}

static struct tpf_value *input(struct tpf_graph *g, const char *name, enum tpf_dtype t)
{
	struct tpf_value *v = tpf_graph_add_input(g, name, t, 2, dims_th);
	assert_non_null(v);
	return v;
}

static struct tpf_value *scalar(struct tpf_graph *g, const char *prefix, enum tpf_dtype t,
				float x)
{
	const char *name = tpf_graph_unique_name(g, prefix);
	uint16_t h;
	uint32_t bits;
	memcpy(&bits, &x, 4);
	h = (uint16_t)(bits >> 16);
	struct tpf_value *v = t == TPF_DTYPE_BFLOAT16
				      ? tpf_graph_add_initializer(g, name, t, 0, NULL, &h, 2)
				      : tpf_graph_add_initializer(g, name, TPF_DTYPE_FLOAT, 0, NULL, &x, 4);
	assert_non_null(v);
	return v;
}

/* A [len] weight of ones. */
static struct tpf_value *weight(struct tpf_graph *g, const char *name, enum tpf_dtype t,
				int64_t len)
{
	size_t esz = t == TPF_DTYPE_FLOAT ? 4 : 2;
	unsigned char *buf = calloc((size_t)len, esz);
	for (int64_t i = 0; i < len; i++) {
		if (t == TPF_DTYPE_FLOAT) {
			float one = 1.0f;
			memcpy(buf + i * 4, &one, 4);
		} else {
			uint16_t one = 0x3f80;
			memcpy(buf + i * 2, &one, 2);
		}
	}
	struct tpf_value *v = tpf_graph_add_initializer(g, name, t, 1, &len, buf, (size_t)len * esz);
	free(buf);
	assert_non_null(v);
	return v;
}

static struct tpf_node *node(struct tpf_graph *g, const char *domain, const char *op_type,
			     const char *name, struct tpf_value *const *in, size_t n_in,
			     size_t n_out)
{
	struct tpf_node *n = tpf_graph_add_node(g, domain, op_type, name, in, n_in, n_out, NULL);
	assert_non_null(n);
	return n;
}

/* One-output node; its output gets dtype t and shape dims[rank]. */
static struct tpf_value *op_r(struct tpf_graph *g, const char *domain, const char *op_type,
			      const char *name, enum tpf_dtype t, int rank, const int64_t *dims,
			      struct tpf_value *a, struct tpf_value *b)
{
	struct tpf_value *in[2] = {a, b};
	struct tpf_node *n = node(g, domain, op_type, name, in, b ? 2 : 1, 1);
	tpf_value_set_type(n->outputs[0], t, rank, dims);
	return n->outputs[0];
}

/* The same with a rank-2 output. */
static struct tpf_value *op(struct tpf_graph *g, const char *domain, const char *op_type,
			    const char *name, enum tpf_dtype t, const int64_t *dims,
			    struct tpf_value *a, struct tpf_value *b)
{
	return op_r(g, domain, op_type, name, t, 2, dims, a, b);
}

static struct tpf_value *cast(struct tpf_graph *g, struct tpf_value *a, enum tpf_dtype to)
{
	struct tpf_value *v = op(g, "", "Cast", NULL, to, dims_th, a, NULL);
	assert_int_equal(tpf_node_set_attr_int(v->producer, "to", to), TPF_OK);
	return v;
}

static struct tpf_value *allreduce(struct tpf_graph *g, const char *name, struct tpf_value *a)
{
	return op(g, TPF_MS_DOMAIN, "AllReduce", name, a->type.dtype, dims_th, a, NULL);
}

struct chain_opts {
	enum tpf_dtype dt;  /* activation dtype */
	int cast;           /* compute in float: Cast to float and back */
	int mul_square;     /* Mul(x, x) instead of Pow(x, 2) */
	int form;           /* 0: Div(x, rms)  1: Mul(x, Reciprocal(rms))  2: Mul(Div(1, rms), x) */
	int gemma;          /* multiply by (1 + gamma) */
	int axes_attr;      /* ReduceMean axes as attribute (before opset 18) */
	int axis0;          /* reduce over axis 0 instead of the last */
	int eps_input;      /* epsilon is a graph input: not a constant */
	int mean_sub;       /* subtract the mean first: a LayerNorm look-alike */
	int64_t gamma_len;  /* 0: H */
	int gamma_float;    /* float gamma for a bf16 model, multiplied in float */
};

/* The decomposed RMSNorm chain that exporters write; returns its output. */
static struct tpf_value *chain(struct tpf_graph *g, const char *prefix, struct tpf_value *x,
			       const struct chain_opts *o)
{
	enum tpf_dtype ct = o->cast ? TPF_DTYPE_FLOAT : o->dt;
	struct tpf_value *xf = o->cast ? cast(g, x, TPF_DTYPE_FLOAT) : x;
	int64_t axis = o->axis0 ? 0 : -1;
	const int64_t *red = axis == 0 ? (const int64_t[]){1, H} : dims_t1;
	char name[64];

	if (o->mean_sub) {
		struct tpf_value *ax = tpf_graph_add_initializer(g, tpf_graph_unique_name(g, "mu_axes"),
								 TPF_DTYPE_INT64, 1, (int64_t[]){1},
								 &axis, 8);
		struct tpf_value *mu = op(g, "", "ReduceMean", NULL, ct, dims_t1, xf, ax);
		xf = op(g, "", "Sub", NULL, ct, dims_th, xf, mu);
	}
	struct tpf_value *sq = o->mul_square ? op(g, "", "Mul", NULL, ct, dims_th, xf, xf)
					     : op(g, "", "Pow", NULL, ct, dims_th, xf,
						  scalar(g, "two", TPF_DTYPE_FLOAT, 2.0f));
	struct tpf_value *mean;
	if (o->axes_attr) {
		mean = op(g, "", "ReduceMean", NULL, ct, red, sq, NULL);
		assert_int_equal(tpf_node_set_attr_ints(mean->producer, "axes", &axis, 1), TPF_OK);
	} else {
		struct tpf_value *ax = tpf_graph_add_initializer(g, tpf_graph_unique_name(g, "axes"),
								 TPF_DTYPE_INT64, 1, (int64_t[]){1},
								 &axis, 8);
		mean = op(g, "", "ReduceMean", NULL, ct, red, sq, ax);
	}
	struct tpf_value *eps;
	if (o->eps_input)
		eps = tpf_graph_add_input(g, tpf_graph_unique_name(g, "eps"), ct, 0, NULL);
	else
		eps = scalar(g, "eps", ct, 1e-6f);
	struct tpf_value *ae = op(g, "", "Add", NULL, ct, red, eps, mean);
	struct tpf_value *rms = op(g, "", "Sqrt", NULL, ct, red, ae, NULL);
	struct tpf_value *nrm;
	if (o->form == 0) {
		nrm = op(g, "", "Div", NULL, ct, dims_th, xf, rms);
	} else if (o->form == 1) {
		struct tpf_value *r = op(g, "", "Reciprocal", NULL, ct, red, rms, NULL);
		nrm = op(g, "", "Mul", NULL, ct, dims_th, xf, r);
	} else {
		struct tpf_value *r = op(g, "", "Div", NULL, ct, red, scalar(g, "one", ct, 1.0f), rms);
		nrm = op(g, "", "Mul", NULL, ct, dims_th, r, xf);
	}
	int64_t glen = o->gamma_len ? o->gamma_len : H;
	char wname[64];
	snprintf(name, sizeof(name), "%s/mul_gamma", prefix);
	snprintf(wname, sizeof(wname), "%s.weight", prefix);
	if (o->gemma || o->gamma_float) {
		/* weight offset / dtype handling in the compute dtype, cast at the end */
		struct tpf_value *w = weight(g, wname, o->gamma_float ? TPF_DTYPE_FLOAT : o->dt, glen);
		struct tpf_value *gw = w;
		if (w->type.dtype != ct) {
			gw = op_r(g, "", "Cast", NULL, ct, 1, &glen, w, NULL);
			assert_int_equal(tpf_node_set_attr_int(gw->producer, "to", ct), TPF_OK);
		}
		if (o->gemma)
			gw = op_r(g, "", "Add", NULL, ct, 1, &glen, scalar(g, "one", ct, 1.0f), gw);
		struct tpf_value *y = op(g, "", "Mul", name, ct, dims_th, nrm, gw);
		return ct == o->dt ? y : cast(g, y, o->dt);
	}
	struct tpf_value *w = weight(g, wname, o->dt, glen);
	struct tpf_value *nb = ct == o->dt ? nrm : cast(g, nrm, o->dt);
	return op(g, "", "Mul", name, o->dt, dims_th, w, nb);
}

/* ------------------------------------------------------------------ running */

static void verify_ok(const struct tpf_model *m)
{
	struct tpf_diag *d = tpf_diag_create();
	enum tpf_status st = tpf_model_verify(m, d);
	if (st)
		tpf_diag_print(d, stderr);
	assert_int_equal(st, TPF_OK);
	tpf_diag_free(d);
}

/* Runs the named passes one by one, verifying after each; returns the stats. */
static struct tpf_pass_stats *run_passes(struct tpf_model *m, const char *const *names,
					 FILE *explain)
{
	struct tpf_pass_stats *st = tpf_pass_stats_create();
	struct tpf_diag *d = tpf_diag_create();
	verify_ok(m);
	for (size_t i = 0; names[i]; i++) {
		const struct tpf_pass *p = tpf_pass_find(names[i]);
		assert_non_null(p);
		struct tpf_pass_context ctx = {.stats = st, .explain = explain, .rank = -1,
					       .world_size = -1};
		int changed = 0;
		enum tpf_status s = p->run(m, &ctx, &changed, d);
		if (s)
			tpf_diag_print(d, stderr);
		assert_int_equal(s, TPF_OK);
		verify_ok(m);
	}
	tpf_diag_free(d);
	return st;
}

static const char *const canon_only[] = {"canonicalize-rmsnorm", NULL};
static const char *const canon_fuse[] = {"canonicalize-rmsnorm", "fuse-allreduce-rmsnorm", NULL};
static const char *const all_three[] = {"canonicalize-rmsnorm", "fuse-allreduce-rmsnorm",
					"fuse-allreduce-rmsnorm-quant", NULL};
static const char *const all_and_dce[] = {"canonicalize-rmsnorm", "fuse-allreduce-rmsnorm",
					  "fuse-allreduce-rmsnorm-quant", "dce", NULL};

static size_t count_op(const struct tpf_graph *g, enum tpf_op o)
{
	size_t k = 0;
	for (const struct tpf_node *n = g->first; n; n = n->next)
		k += n->op == o;
	return k;
}

static struct tpf_node *find_op(const struct tpf_graph *g, enum tpf_op o)
{
	for (struct tpf_node *n = g->first; n; n = n->next)
		if (n->op == o)
			return n;
	return NULL;
}

static char *dump(const struct tpf_model *m)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	assert_non_null(f);
	assert_int_equal(tpf_model_print_text(m, f), TPF_OK);
	fclose(f);
	return buf;
}

static int64_t stat_of(struct tpf_pass_stats *s, const char *pass, const char *counter)
{
	return tpf_pass_stats_get(s, pass, counter);
}

/* Builds x -> chain -> output and canonicalizes; returns the RMSNorm node or NULL. */
static struct tpf_node *canon_one(struct tpf_model *m, const struct chain_opts *o, FILE *explain,
				  struct tpf_value **x_out)
{
	struct tpf_graph *g = m->graph;
	struct tpf_value *x = input(g, "x", o->dt);
	struct tpf_value *y = chain(g, "norm", x, o);
	assert_int_equal(tpf_value_rename(y, "y"), TPF_OK);
	assert_int_equal(tpf_graph_add_output(g, y), TPF_OK);
	if (x_out)
		*x_out = x;
	tpf_pass_stats_free(run_passes(m, canon_only, explain));
	return find_op(g, TPF_OP_TPF_RMS_NORM);
}

/* ------------------------------------------------------- canonicalization */

static void assert_canonical(const struct tpf_model *m, const struct tpf_node *n,
			     const struct tpf_value *x, int64_t stash, float offset, float eps)
{
	assert_non_null(n);
	assert_int_equal(m->graph->n_nodes, 1); /* the whole chain is gone */
	assert_ptr_equal(n->inputs[0], x);
	assert_int_equal(tpf_node_attr_int(n, "axis", 0), -1);
	assert_int_equal(tpf_node_attr_int(n, "stash_type", 0), stash);
	assert_true(tpf_node_attr_float(n, "weight_offset", -1) == offset);
	assert_true(tpf_node_attr_float(n, "epsilon", 0) == eps);
	assert_string_equal(n->origin_pass, "canonicalize-rmsnorm");
	assert_string_equal(m->graph->outputs[0]->name, "y");
	assert_int_equal(tpf_model_opset(m, "ai.tpfuse"), 1);
}

static void test_canon_llama_bf16_casts(void **state)
{
	(void)state;
	struct chain_opts o = {.dt = TPF_DTYPE_BFLOAT16, .cast = 1, .form = 1};
	struct tpf_model *m = new_model(18);
	struct tpf_value *x;
	struct tpf_node *n = canon_one(m, &o, NULL, &x);
	assert_canonical(m, n, x, TPF_DTYPE_FLOAT, 0.0f, 1e-6f);
	assert_string_equal(n->origin_pattern, "decomposed");
	assert_int_equal(n->outputs[0]->type.dtype, TPF_DTYPE_BFLOAT16);
	tpf_model_free(m);
}

static void test_canon_fp32_div_square_axes_attr(void **state)
{
	(void)state;
	struct chain_opts o = {.dt = TPF_DTYPE_FLOAT, .mul_square = 1, .form = 0, .axes_attr = 1};
	struct tpf_model *m = new_model(13);
	struct tpf_value *x;
	struct tpf_node *n = canon_one(m, &o, NULL, &x);
	assert_canonical(m, n, x, TPF_DTYPE_FLOAT, 0.0f, 1e-6f);
	tpf_model_free(m);
}

static void test_canon_bf16_no_cast_div_one(void **state)
{
	(void)state;
	struct chain_opts o = {.dt = TPF_DTYPE_BFLOAT16, .form = 2};
	struct tpf_model *m = new_model(18);
	struct tpf_value *x;
	struct tpf_node *n = canon_one(m, &o, NULL, &x);
	/* epsilon stored in bf16: 1e-6 rounded */
	assert_non_null(n);
	assert_int_equal(tpf_node_attr_int(n, "stash_type", 0), TPF_DTYPE_BFLOAT16);
	assert_int_equal(m->graph->n_nodes, 1);
	tpf_model_free(m);
}

static void test_canon_gemma(void **state)
{
	(void)state;
	struct chain_opts o = {.dt = TPF_DTYPE_BFLOAT16, .cast = 1, .form = 1, .gemma = 1};
	struct tpf_model *m = new_model(18);
	struct tpf_value *x;
	struct tpf_node *n = canon_one(m, &o, NULL, &x);
	assert_canonical(m, n, x, TPF_DTYPE_FLOAT, 1.0f, 1e-6f);
	assert_string_equal(n->origin_pattern, "decomposed-gemma");
	assert_string_equal(n->inputs[1]->name, "norm.weight"); /* the bf16 weight itself */
	tpf_model_free(m);
}

static void test_canon_float_gamma_keeps_cast(void **state)
{
	(void)state;
	/* bf16 activations, float weight, float multiply, cast to bf16 at the
	 * end: gamma (float) and the output (bf16) disagree, so the Cast root is
	 * refused and the inner float Mul becomes the norm; the input Cast stays. */
	struct chain_opts o = {.dt = TPF_DTYPE_BFLOAT16, .cast = 1, .form = 1, .gamma_float = 1};
	struct tpf_model *m = new_model(18);
	struct tpf_value *x;
	struct tpf_node *n = canon_one(m, &o, NULL, &x);
	assert_non_null(n);
	assert_int_equal(n->inputs[0]->producer->op, TPF_OP_CAST);
	assert_int_equal(n->outputs[0]->type.dtype, TPF_DTYPE_FLOAT);
	assert_int_equal(count_op(m->graph, TPF_OP_CAST), 2);
	tpf_model_free(m);
}

static void test_canon_onnx_ops(void **state)
{
	(void)state;
	struct tpf_model *m = new_model(23);
	struct tpf_graph *g = m->graph;
	struct tpf_value *x = input(g, "x", TPF_DTYPE_BFLOAT16);
	struct tpf_value *skip = input(g, "skip", TPF_DTYPE_BFLOAT16);
	struct tpf_value *w = weight(g, "w", TPF_DTYPE_BFLOAT16, H);

	/* RMSNormalization (opset 23) */
	struct tpf_value *a = op(g, "", "RMSNormalization", "rmsn", TPF_DTYPE_BFLOAT16, dims_th, x, w);
	assert_int_equal(tpf_node_set_attr_float(a->producer, "epsilon", 1e-5f), TPF_OK);
	/* SimplifiedLayerNormalization, ONNX and com.microsoft domains */
	struct tpf_value *b = op(g, "", "SimplifiedLayerNormalization", "sln", TPF_DTYPE_BFLOAT16,
				 dims_th, a, w);
	struct tpf_value *c = op(g, TPF_MS_DOMAIN, "SimplifiedLayerNormalization", "msln",
				 TPF_DTYPE_BFLOAT16, dims_th, b, w);
	/* SkipSimplifiedLayerNormalization with its residual sum used */
	struct tpf_value *in[3] = {c, skip, w};
	struct tpf_node *s = node(g, TPF_MS_DOMAIN, "SkipSimplifiedLayerNormalization", "skipln",
				  in, 3, 4);
	tpf_value_set_type(s->outputs[0], TPF_DTYPE_BFLOAT16, 2, dims_th);
	tpf_value_set_type(s->outputs[3], TPF_DTYPE_BFLOAT16, 2, dims_th);
	assert_int_equal(tpf_value_rename(s->outputs[0], "y"), TPF_OK);
	assert_int_equal(tpf_value_rename(s->outputs[3], "sum"), TPF_OK);
	assert_int_equal(tpf_graph_add_output(g, s->outputs[0]), TPF_OK);
	assert_int_equal(tpf_graph_add_output(g, s->outputs[3]), TPF_OK);

	struct tpf_pass_stats *st = run_passes(m, canon_only, NULL);
	assert_int_equal(stat_of(st, "canonicalize-rmsnorm", "rms-normalization"), 1);
	assert_int_equal(stat_of(st, "canonicalize-rmsnorm", "simplified-layer-norm"), 1);
	assert_int_equal(stat_of(st, "canonicalize-rmsnorm", "ms-simplified-layer-norm"), 1);
	assert_int_equal(stat_of(st, "canonicalize-rmsnorm", "skip-simplified-layer-norm"), 1);
	assert_int_equal(count_op(g, TPF_OP_TPF_RMS_NORM), 4);
	assert_int_equal(count_op(g, TPF_OP_ADD), 1);
	assert_int_equal(g->n_nodes, 5);
	/* the outputs keep their names; the sum is the Add, the last norm reads it */
	assert_string_equal(g->outputs[0]->name, "y");
	assert_string_equal(g->outputs[1]->name, "sum");
	assert_int_equal(g->outputs[1]->producer->op, TPF_OP_ADD);
	assert_ptr_equal(g->outputs[0]->producer->inputs[0], g->outputs[1]);
	/* SkipSimplifiedLayerNormalization's epsilon default is 1e-12 */
	assert_true(tpf_node_attr_float(g->outputs[0]->producer, "epsilon", 0) == 1e-12f);
	tpf_pass_stats_free(st);
	tpf_model_free(m);
}

/* Epsilon from a Constant node (what torch.onnx writes) and Skip with a bias. */
static void test_canon_constant_eps_and_skip_bias(void **state)
{
	(void)state;
	struct tpf_model *m = new_model(13);
	struct tpf_graph *g = m->graph;
	struct tpf_value *x = input(g, "x", TPF_DTYPE_FLOAT);
	struct tpf_value *sq = op(g, "", "Mul", NULL, TPF_DTYPE_FLOAT, dims_th, x, x);
	struct tpf_value *ms = op(g, "", "ReduceMean", NULL, TPF_DTYPE_FLOAT, dims_t1, sq, NULL);
	int64_t last = 1;
	assert_int_equal(tpf_node_set_attr_ints(ms->producer, "axes", &last, 1), TPF_OK);
	struct tpf_node *c = node(g, "", "Constant", "eps_const", NULL, 0, 1);
	float e = 1e-5f;
	struct tpf_tensor *t = tpf_tensor_create(g->arena, NULL, TPF_DTYPE_FLOAT, 0, NULL, &e, 4);
	assert_non_null(t);
	assert_int_equal(tpf_node_set_attr_tensor(c, "value", t), TPF_OK);
	tpf_value_set_type(c->outputs[0], TPF_DTYPE_FLOAT, 0, NULL);
	struct tpf_value *ae = op(g, "", "Add", NULL, TPF_DTYPE_FLOAT, dims_t1, ms, c->outputs[0]);
	struct tpf_value *rms = op(g, "", "Sqrt", NULL, TPF_DTYPE_FLOAT, dims_t1, ae, NULL);
	struct tpf_value *n = op(g, "", "Div", NULL, TPF_DTYPE_FLOAT, dims_th, x, rms);
	struct tpf_value *y = op(g, "", "Mul", "y", TPF_DTYPE_FLOAT, dims_th, n,
				 weight(g, "w", TPF_DTYPE_FLOAT, H));

	/* SkipSimplifiedLayerNormalization(y, skip, w, bias), only output 0 used */
	struct tpf_value *skip = input(g, "skip", TPF_DTYPE_FLOAT);
	struct tpf_value *in[4] = {y, skip, tpf_graph_find_value(g, "w"),
				   weight(g, "bias", TPF_DTYPE_FLOAT, H)};
	struct tpf_node *s = node(g, TPF_MS_DOMAIN, "SkipSimplifiedLayerNormalization", "skipln",
				  in, 4, 1);
	tpf_value_set_type(s->outputs[0], TPF_DTYPE_FLOAT, 2, dims_th);
	assert_int_equal(tpf_node_set_attr_float(s, "epsilon", 1e-6f), TPF_OK);
	assert_int_equal(tpf_graph_add_output(g, s->outputs[0]), TPF_OK);

	struct tpf_pass_stats *st = run_passes(m, canon_only, NULL);
	assert_int_equal(stat_of(st, "canonicalize-rmsnorm", "decomposed"), 1);
	assert_int_equal(stat_of(st, "canonicalize-rmsnorm", "skip-simplified-layer-norm"), 1);
	assert_int_equal(count_op(g, TPF_OP_TPF_RMS_NORM), 2);
	assert_int_equal(count_op(g, TPF_OP_ADD), 2); /* (y + skip) + bias */
	struct tpf_node *first = find_op(g, TPF_OP_TPF_RMS_NORM);
	assert_true(tpf_node_attr_float(first, "epsilon", 0) == 1e-5f);
	assert_int_equal(tpf_node_attr_int(first, "stash_type", 0), TPF_DTYPE_FLOAT);
	struct tpf_node *last_norm = g->outputs[0]->producer;
	assert_int_equal(last_norm->op, TPF_OP_TPF_RMS_NORM);
	assert_true(tpf_node_attr_float(last_norm, "epsilon", 0) == 1e-6f);
	assert_int_equal(last_norm->inputs[0]->producer->op, TPF_OP_ADD);
	tpf_pass_stats_free(st);
	tpf_model_free(m);
}

static void expect_no_canon(const struct chain_opts *o, const char *reason)
{
	struct tpf_model *m = new_model(18);
	char *buf = NULL;
	size_t len = 0;
	FILE *ex = open_memstream(&buf, &len);
	size_t before;
	struct tpf_node *n;

	struct tpf_graph *g = m->graph;
	struct tpf_value *x = input(g, "x", o->dt);
	struct tpf_value *y = chain(g, "norm", x, o);
	assert_int_equal(tpf_graph_add_output(g, y), TPF_OK);
	before = g->n_nodes;
	tpf_pass_stats_free(run_passes(m, canon_only, ex));
	fclose(ex);
	n = find_op(g, TPF_OP_TPF_RMS_NORM);
	if (n || !strstr(buf, reason)) {
		char *t = dump(m);
		fprintf(stderr, "explain output:\n%s\n%s", buf, t);
		free(t);
	}
	assert_null(n);
	assert_int_equal(g->n_nodes, before);
	assert_non_null(strstr(buf, reason));
	free(buf);
	tpf_model_free(m);
}

static void test_canon_near_misses(void **state)
{
	(void)state;
	struct chain_opts o = {.dt = TPF_DTYPE_BFLOAT16, .cast = 1, .form = 1};

	o.mean_sub = 1;
	expect_no_canon(&o, "mean-subtracted");
	o.mean_sub = 0;
	o.eps_input = 1;
	expect_no_canon(&o, "is not a constant");
	o.eps_input = 0;
	o.axis0 = 1;
	expect_no_canon(&o, "not the last axis");
	o.axis0 = 0;
	o.gamma_len = 1; /* broadcasts, but is not a weight per channel */
	expect_no_canon(&o, "dim 0 is 1, expected 8 (the last dimension)");
}

/* --------------------------------------------------------------- fusion 1 */

/* A dense tensor-parallel decoder: n layers of
 *   pre-norm -> MatMul -> AllReduce -> + residual -> post-norm -> MatMul
 *   -> AllReduce -> + residual, then the final norm.
 * Layers use different RMSNorm forms. */
static void build_dense(struct tpf_model *m, int layers)
{
	struct tpf_graph *g = m->graph;
	struct tpf_value *h = input(g, "hidden", TPF_DTYPE_BFLOAT16);
	int64_t wd[2] = {H, H};
	char name[64];

	for (int l = 0; l < layers; l++) {
		struct chain_opts pre = {.dt = TPF_DTYPE_BFLOAT16, .cast = 1, .form = l % 3,
					 .mul_square = l % 2};
		struct chain_opts post = {.dt = TPF_DTYPE_BFLOAT16, .cast = 1, .form = (l + 1) % 3,
					  .gemma = l == 1};
		snprintf(name, sizeof(name), "l%d.in", l);
		struct tpf_value *n1 = chain(g, name, h, &pre);
		snprintf(name, sizeof(name), "l%d.o_proj", l);
		struct tpf_value *wo = tpf_graph_add_initializer(g, name, TPF_DTYPE_BFLOAT16, 2, wd,
								 NULL, H * H * 2);
		struct tpf_value *a = op(g, "", "MatMul", NULL, TPF_DTYPE_BFLOAT16, dims_th, n1, wo);
		snprintf(name, sizeof(name), "l%d.ar1", l);
		struct tpf_value *r = allreduce(g, name, a);
		h = op(g, "", "Add", NULL, TPF_DTYPE_BFLOAT16, dims_th, h, r);
		snprintf(name, sizeof(name), "l%d.post", l);
		struct tpf_value *n2 = chain(g, name, h, &post);
		snprintf(name, sizeof(name), "l%d.down", l);
		struct tpf_value *wdn = tpf_graph_add_initializer(g, name, TPF_DTYPE_BFLOAT16, 2, wd,
								  NULL, H * H * 2);
		struct tpf_value *b = op(g, "", "MatMul", NULL, TPF_DTYPE_BFLOAT16, dims_th, n2, wdn);
		snprintf(name, sizeof(name), "l%d.ar2", l);
		r = allreduce(g, name, b);
		h = op(g, "", "Add", NULL, TPF_DTYPE_BFLOAT16, dims_th, r, h);
	}
	struct chain_opts fin = {.dt = TPF_DTYPE_BFLOAT16, .cast = 1, .form = 1};
	struct tpf_value *y = chain(g, "final", h, &fin);
	assert_int_equal(tpf_value_rename(y, "logits_in"), TPF_OK);
	assert_int_equal(tpf_graph_add_output(g, y), TPF_OK);
}

static void test_dense_counts_and_idempotence(void **state)
{
	(void)state;
	const int layers = 4;
	struct tpf_model *m = new_model(18);
	build_dense(m, layers);
	struct tpf_pass_stats *st = run_passes(m, canon_fuse, NULL);
	struct tpf_graph *g = m->graph;

	assert_int_equal(stat_of(st, "canonicalize-rmsnorm", "decomposed") +
				 stat_of(st, "canonicalize-rmsnorm", "decomposed-gemma"),
			 2 * layers + 1);
	assert_int_equal(stat_of(st, "canonicalize-rmsnorm", "decomposed-gemma"), 1);
	assert_int_equal(stat_of(st, "fuse-allreduce-rmsnorm", "allreduce-residual-rmsnorm"),
			 2 * layers);
	assert_int_equal(count_op(g, TPF_OP_TPF_ALLREDUCE_RMS_NORM), 2 * layers);
	assert_int_equal(count_op(g, TPF_OP_MS_ALLREDUCE), 0);
	assert_int_equal(count_op(g, TPF_OP_ADD), 0);
	assert_int_equal(count_op(g, TPF_OP_TPF_RMS_NORM), 1); /* layer 0's input norm */
	assert_int_equal(count_op(g, TPF_OP_CAST), 0);
	/* every fused op but the last passes its sum on to the next residual */
	size_t with_sum = 0;
	for (struct tpf_node *n = g->first; n; n = n->next) {
		if (n->op != TPF_OP_TPF_ALLREDUCE_RMS_NORM)
			continue;
		assert_int_equal(n->n_inputs, 3);
		with_sum += n->n_outputs == 2;
	}
	assert_int_equal(with_sum, 2 * layers - 1);
	assert_string_equal(g->outputs[0]->name, "logits_in");
	assert_int_equal(g->outputs[0]->producer->op, TPF_OP_TPF_ALLREDUCE_RMS_NORM);

	/* running the passes again changes nothing */
	char *once = dump(m);
	struct tpf_pass_stats *st2 = run_passes(m, canon_fuse, NULL);
	char *twice = dump(m);
	assert_string_equal(once, twice);
	assert_int_equal(stat_of(st2, "fuse-allreduce-rmsnorm", "allreduce-residual-rmsnorm"), 0);
	free(once);
	free(twice);
	tpf_pass_stats_free(st2);
	tpf_pass_stats_free(st);
	tpf_model_free(m);
}

/* The pipeline entry point: the default pipeline reaches the same counts. */
static void test_dense_default_pipeline(void **state)
{
	(void)state;
	struct tpf_model *m = new_model(18);
	build_dense(m, 3);
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_pipeline_options o = {.passes = "default", .verify_each = 1};
	o.ctx.stats = tpf_pass_stats_create();
	o.ctx.rank = o.ctx.world_size = -1;
	enum tpf_status st = tpf_pipeline_run(m, &o, d);
	if (st)
		tpf_diag_print(d, stderr);
	assert_int_equal(st, TPF_OK);
	assert_int_equal(count_op(m->graph, TPF_OP_TPF_ALLREDUCE_RMS_NORM), 6);
	assert_int_equal(count_op(m->graph, TPF_OP_MS_ALLREDUCE), 0);
	verify_ok(m);
	tpf_pass_stats_free(o.ctx.stats);
	tpf_diag_free(d);
	tpf_model_free(m);
}

static void test_fuse_without_residual(void **state)
{
	(void)state;
	/* AllReduce -> RMSNorm, and the reduced value is also the residual of a
	 * later Add: residual_out (the reduced value) serves it. */
	struct tpf_model *m = new_model(23);
	struct tpf_graph *g = m->graph;
	struct tpf_value *p = input(g, "partial", TPF_DTYPE_BFLOAT16);
	struct tpf_value *w = weight(g, "w", TPF_DTYPE_BFLOAT16, H);
	struct tpf_value *r = allreduce(g, "ar", p);
	struct tpf_value *y = op(g, "", "RMSNormalization", "norm", TPF_DTYPE_BFLOAT16, dims_th, r, w);
	struct tpf_value *z = op(g, "", "Add", "res", TPF_DTYPE_BFLOAT16, dims_th, r, y);
	assert_int_equal(tpf_graph_add_output(g, z), TPF_OK);
	struct tpf_pass_stats *st = run_passes(m, canon_fuse, NULL);
	assert_int_equal(stat_of(st, "fuse-allreduce-rmsnorm", "allreduce-rmsnorm"), 1);
	struct tpf_node *f = find_op(g, TPF_OP_TPF_ALLREDUCE_RMS_NORM);
	assert_non_null(f);
	assert_int_equal(f->n_inputs, 2);
	assert_int_equal(f->n_outputs, 2);
	struct tpf_node *add = z->producer;
	assert_ptr_equal(add->inputs[0], f->outputs[1]);
	assert_ptr_equal(add->inputs[1], f->outputs[0]);
	assert_int_equal(count_op(g, TPF_OP_MS_ALLREDUCE), 0);
	tpf_pass_stats_free(st);
	tpf_model_free(m);
}

/* AllReduce -> Add -> norm variants that must not fuse. */
static void expect_no_fusion(struct tpf_model *m, const char *reason)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *ex = open_memstream(&buf, &len);
	struct tpf_pass_stats *st = run_passes(m, canon_fuse, ex);
	fclose(ex);
	if (count_op(m->graph, TPF_OP_TPF_ALLREDUCE_RMS_NORM) || !strstr(buf, reason))
		fprintf(stderr, "explain output:\n%s", buf);
	assert_int_equal(count_op(m->graph, TPF_OP_TPF_ALLREDUCE_RMS_NORM), 0);
	assert_int_equal(count_op(m->graph, TPF_OP_MS_ALLREDUCE), 1);
	assert_non_null(strstr(buf, reason));
	free(buf);
	tpf_pass_stats_free(st);
	tpf_model_free(m);
}

static struct tpf_value *ar_add(struct tpf_graph *g, enum tpf_dtype t)
{
	struct tpf_value *p = input(g, "partial", t), *res = input(g, "residual", t);
	return op(g, "", "Add", "add", t, dims_th, allreduce(g, "ar", p), res);
}

static void test_fuse_near_misses(void **state)
{
	(void)state;
	struct tpf_model *m;
	struct tpf_graph *g;
	struct tpf_value *s, *y;

	/* bf16 activations with a float gamma (the mixed-dtype miscompile) */
	m = new_model(23);
	g = m->graph;
	s = ar_add(g, TPF_DTYPE_BFLOAT16);
	y = op(g, "", "RMSNormalization", "norm", TPF_DTYPE_FLOAT, dims_th, s,
	       weight(g, "w", TPF_DTYPE_FLOAT, H));
	assert_int_equal(tpf_graph_add_output(g, y), TPF_OK);
	expect_no_fusion(m, "norm input dtype bf16 differs from gamma dtype");

	/* a norm over the last two axes */
	m = new_model(23);
	g = m->graph;
	s = ar_add(g, TPF_DTYPE_BFLOAT16);
	struct tpf_value *w2 = weight(g, "w", TPF_DTYPE_BFLOAT16, T * H);
	tpf_value_set_type(w2, TPF_DTYPE_BFLOAT16, 2, dims_th);
	w2->init->rank = 2;
	w2->init->dims = w2->type.shape.dims ? (int64_t[]){T, H} : NULL;
	y = op(g, "", "RMSNormalization", "norm", TPF_DTYPE_BFLOAT16, dims_th, s, w2);
	assert_int_equal(tpf_node_set_attr_int(y->producer, "axis", 0), TPF_OK);
	assert_int_equal(tpf_graph_add_output(g, y), TPF_OK);
	expect_no_fusion(m, "not the last axis");

	/* the bare reduced value has another user */
	m = new_model(23);
	g = m->graph;
	s = ar_add(g, TPF_DTYPE_BFLOAT16);
	y = op(g, "", "RMSNormalization", "norm", TPF_DTYPE_BFLOAT16, dims_th, s,
	       weight(g, "w", TPF_DTYPE_BFLOAT16, H));
	assert_int_equal(tpf_graph_add_output(g, y), TPF_OK);
	assert_int_equal(tpf_graph_add_output(g, s->producer->inputs[0]), TPF_OK);
	expect_no_fusion(m, "has 2 uses");

	/* a mean-subtracting look-alike: stays decomposed, nothing to fuse */
	m = new_model(18);
	g = m->graph;
	s = ar_add(g, TPF_DTYPE_BFLOAT16);
	struct chain_opts o = {.dt = TPF_DTYPE_BFLOAT16, .cast = 1, .form = 0, .mean_sub = 1};
	y = chain(g, "ln", s, &o);
	assert_int_equal(tpf_graph_add_output(g, y), TPF_OK);
	expect_no_fusion(m, "mean-subtracted");
}

/* ------------------------------------------------------------------ fusion 2 */

/* partial -> AllReduce -> + residual -> RMSNorm -> quantizer(s); returns the norm output. */
static struct tpf_value *quant_base(struct tpf_model *m)
{
	struct tpf_graph *g = m->graph;
	struct tpf_value *s = ar_add(g, TPF_DTYPE_BFLOAT16);
	struct tpf_value *y = op(g, "", "RMSNormalization", "norm", TPF_DTYPE_BFLOAT16, dims_th, s,
				 weight(g, "w", TPF_DTYPE_BFLOAT16, H));
	assert_int_equal(tpf_graph_add_output(g, s), TPF_OK); /* the residual stream goes on */
	return y;
}

static struct tpf_value *fp8_quant(struct tpf_graph *g, const char *name, struct tpf_value *y,
				   float scale, enum tpf_dtype zp_t)
{
	struct tpf_value *sc = scalar(g, "scale", TPF_DTYPE_FLOAT, scale);
	uint8_t zero = 0;
	struct tpf_value *zp = tpf_graph_add_initializer(g, tpf_graph_unique_name(g, "zp"), zp_t, 0,
							 NULL, &zero, 1);
	struct tpf_value *in[3] = {y, sc, zp};
	struct tpf_node *q = node(g, "", "QuantizeLinear", name, in, 3, 1);
	tpf_value_set_type(q->outputs[0], zp_t, 2, dims_th);
	return q->outputs[0];
}

static void test_quant_fp8(void **state)
{
	(void)state;
	struct tpf_model *m = new_model(23);
	struct tpf_graph *g = m->graph;
	struct tpf_value *y = quant_base(m);
	struct tpf_value *q1 = fp8_quant(g, "q1", y, 0.5f, TPF_DTYPE_FLOAT8E4M3FN);
	struct tpf_value *q2 = fp8_quant(g, "q2", y, 0.5f, TPF_DTYPE_FLOAT8E4M3FN); /* same scale */
	assert_int_equal(tpf_value_rename(q1, "q1_out"), TPF_OK);
	assert_int_equal(tpf_graph_add_output(g, q1), TPF_OK);
	assert_int_equal(tpf_graph_add_output(g, q2), TPF_OK);
	struct tpf_pass_stats *st = run_passes(m, all_three, NULL);
	assert_int_equal(stat_of(st, "fuse-allreduce-rmsnorm-quant", "fp8"), 1);
	struct tpf_node *f = find_op(g, TPF_OP_TPF_ALLREDUCE_RMS_NORM_QUANT);
	assert_non_null(f);
	assert_int_equal(g->n_nodes, 1);
	assert_int_equal(f->n_inputs, 4);
	assert_int_equal(f->n_outputs, 2); /* no high-precision norm needed */
	assert_string_equal(tpf_node_attr_string(f, "quant", ""), "fp8");
	assert_ptr_equal(g->outputs[1], f->outputs[0]);
	assert_ptr_equal(g->outputs[2], f->outputs[0]);
	assert_string_equal(f->outputs[0]->name, "q1_out");
	assert_int_equal(f->outputs[0]->type.dtype, TPF_DTYPE_FLOAT8E4M3FN);
	assert_ptr_equal(g->outputs[0], f->outputs[1]); /* residual sum */
	tpf_pass_stats_free(st);
	tpf_model_free(m);
}

static void test_quant_fp8_norm_kept(void **state)
{
	(void)state;
	struct tpf_model *m = new_model(23);
	struct tpf_graph *g = m->graph;
	struct tpf_value *y = quant_base(m);
	struct tpf_value *q = fp8_quant(g, "q", y, 0.5f, TPF_DTYPE_FLOAT8E4M3FN);
	struct tpf_value *q_other = fp8_quant(g, "q_other", y, 0.25f, TPF_DTYPE_FLOAT8E4M3FN);
	assert_int_equal(tpf_graph_add_output(g, q), TPF_OK);
	assert_int_equal(tpf_graph_add_output(g, q_other), TPF_OK);
	assert_int_equal(tpf_graph_add_output(g, y), TPF_OK); /* someone reads the bf16 norm */
	struct tpf_pass_stats *st = run_passes(m, all_three, NULL);
	struct tpf_node *f = find_op(g, TPF_OP_TPF_ALLREDUCE_RMS_NORM_QUANT);
	assert_non_null(f);
	assert_int_equal(f->n_outputs, 4);
	assert_null(f->outputs[2]); /* no block scales for fp8 */
	assert_non_null(f->outputs[3]);
	/* the quantizer with the other scale now reads the kept norm */
	(void)q;
	(void)q_other;
	struct tpf_node *left = find_op(g, TPF_OP_QUANTIZE_LINEAR);
	assert_non_null(left);
	assert_int_equal(count_op(g, TPF_OP_QUANTIZE_LINEAR), 1);
	assert_ptr_equal(left->inputs[0], f->outputs[3]);
	assert_ptr_equal(g->outputs[3], f->outputs[3]);
	tpf_pass_stats_free(st);
	tpf_model_free(m);
}

static void test_quant_nvfp4(void **state)
{
	(void)state;
	/* trt::TRT_FP4DynamicQuantize */
	struct tpf_model *m = new_model(23);
	struct tpf_graph *g = m->graph;
	struct tpf_value *y = quant_base(m);
	struct tpf_value *in[2] = {y, scalar(g, "gscale", TPF_DTYPE_FLOAT, 0.01f)};
	struct tpf_node *q = node(g, "trt", "TRT_FP4DynamicQuantize", "fp4q", in, 2, 2);
	assert_int_equal(tpf_node_set_attr_int(q, "block_size", 16), TPF_OK);
	assert_int_equal(tpf_node_set_attr_int(q, "axis", -1), TPF_OK);
	tpf_value_set_type(q->outputs[0], TPF_DTYPE_FLOAT4E2M1, 2, dims_th);
	tpf_value_set_type(q->outputs[1], TPF_DTYPE_FLOAT8E4M3FN, 2, (int64_t[]){T, 1});
	assert_int_equal(tpf_graph_add_output(g, q->outputs[0]), TPF_OK);
	assert_int_equal(tpf_graph_add_output(g, q->outputs[1]), TPF_OK);
	struct tpf_pass_stats *st = run_passes(m, all_three, NULL);
	assert_int_equal(stat_of(st, "fuse-allreduce-rmsnorm-quant", "nvfp4"), 1);
	struct tpf_node *f = find_op(g, TPF_OP_TPF_ALLREDUCE_RMS_NORM_QUANT);
	assert_non_null(f);
	assert_int_equal(f->n_outputs, 3);
	assert_string_equal(tpf_node_attr_string(f, "quant", ""), "nvfp4");
	assert_ptr_equal(g->outputs[1], f->outputs[0]);
	assert_ptr_equal(g->outputs[2], f->outputs[2]);
	tpf_pass_stats_free(st);
	tpf_model_free(m);

	/* blocked QuantizeLinear to FLOAT4E2M1 with constant block scales */
	m = new_model(23);
	g = m->graph;
	y = quant_base(m);
	int64_t sd[2] = {T, 1};
	float scales[T] = {1, 1, 1, 1};
	struct tpf_value *bs = tpf_graph_add_initializer(g, "bscale", TPF_DTYPE_FLOAT, 2, sd, scales,
							 sizeof(scales));
	uint8_t zeros[T] = {0};
	struct tpf_value *zp = tpf_graph_add_initializer(g, "zp4", TPF_DTYPE_FLOAT4E2M1, 2, sd, zeros,
							 (T + 1) / 2);
	struct tpf_value *qin[3] = {y, bs, zp};
	q = node(g, "", "QuantizeLinear", "q4", qin, 3, 1);
	assert_int_equal(tpf_node_set_attr_int(q, "block_size", 16), TPF_OK);
	assert_int_equal(tpf_node_set_attr_int(q, "axis", 1), TPF_OK);
	tpf_value_set_type(q->outputs[0], TPF_DTYPE_FLOAT4E2M1, 2, dims_th);
	assert_int_equal(tpf_graph_add_output(g, q->outputs[0]), TPF_OK);
	st = run_passes(m, all_three, NULL);
	assert_int_equal(stat_of(st, "fuse-allreduce-rmsnorm-quant", "nvfp4-block"), 1);
	f = find_op(g, TPF_OP_TPF_ALLREDUCE_RMS_NORM_QUANT);
	assert_non_null(f);
	assert_string_equal(tpf_node_attr_string(f, "quant", ""), "nvfp4-block");
	assert_int_equal(tpf_node_attr_int(f, "block_size", 0), 16);
	tpf_pass_stats_free(st);
	tpf_model_free(m);
}

static void test_quant_near_misses(void **state)
{
	(void)state;
	const char *reasons[] = {"quantizes to i8, not f8e4m3fn",
				 "is not a scalar (per-channel or blocked)"};
	for (int k = 0; k < 2; k++) {
		struct tpf_model *m = new_model(23);
		struct tpf_graph *g = m->graph;
		struct tpf_value *y = quant_base(m), *q;
		if (k == 0) {
			q = fp8_quant(g, "q", y, 0.5f, TPF_DTYPE_INT8);
		} else {
			float sc[H] = {1, 1, 1, 1, 1, 1, 1, 1};
			int64_t hd = H;
			struct tpf_value *s = tpf_graph_add_initializer(g, "sc", TPF_DTYPE_FLOAT, 1,
									&hd, sc, sizeof(sc));
			struct tpf_value *in[2] = {y, s};
			struct tpf_node *n = node(g, "", "QuantizeLinear", "q", in, 2, 1);
			assert_int_equal(tpf_node_set_attr_int(n, "output_dtype",
							       TPF_DTYPE_FLOAT8E4M3FN),
					 TPF_OK);
			tpf_value_set_type(n->outputs[0], TPF_DTYPE_FLOAT8E4M3FN, 2, dims_th);
			q = n->outputs[0];
		}
		assert_int_equal(tpf_graph_add_output(g, q), TPF_OK);
		char *buf = NULL;
		size_t len = 0;
		FILE *ex = open_memstream(&buf, &len);
		struct tpf_pass_stats *st = run_passes(m, all_three, ex);
		fclose(ex);
		if (!strstr(buf, reasons[k]))
			fprintf(stderr, "explain output:\n%s", buf);
		assert_int_equal(count_op(g, TPF_OP_TPF_ALLREDUCE_RMS_NORM_QUANT), 0);
		assert_int_equal(count_op(g, TPF_OP_TPF_ALLREDUCE_RMS_NORM), 1);
		assert_non_null(strstr(buf, reasons[k]));
		free(buf);
		tpf_pass_stats_free(st);
		tpf_model_free(m);
	}
}

/* ------------------------------------------------------------------ golden */

/* One dense layer after the three passes and dce. */
static const char golden[] =
	"ir_version 10\n"
	"opset \"\" 18\n"
	"opset \"ai.tpfuse\" 1\n"
	"opset \"com.microsoft\" 1\n"
	"graph \"\" {\n"
	"  input %0: bf16[4,8] \"hidden\"\n"
	"  init %1: bf16[8] \"l0.in.weight\" = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]\n"
	"  init %2: bf16[8,8] \"l0.o_proj\" (128 bytes)\n"
	"  init %3: bf16[8] \"l0.post.weight\" = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]\n"
	"  init %4: bf16[8,8] \"l0.down\" (128 bytes)\n"
	"  init %5: bf16[8] \"final.weight\" = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]\n"
	"  %6 = ai.tpfuse.RMSNorm(%0, %1) {axis=-1, epsilon=1e-06, stash_type=1, weight_offset=0.0} : bf16[4,8]  # l0.in/mul_gamma/RMSNorm [canonicalize-rmsnorm/decomposed]\n"
	"  %7 = MatMul(%6, %2) : bf16[4,8]  # -> _t_8\n"
	"  %8, %9 = ai.tpfuse.AllReduceRMSNorm(%7, %3, %0) {axis=-1, epsilon=1e-06, stash_type=1, weight_offset=0.0} : (bf16[4,8], bf16[4,8])  # l0.post/mul_gamma/AllReduceRMSNorm [fuse-allreduce-rmsnorm/allreduce-residual-rmsnorm]\n"
	"  %10 = MatMul(%8, %4) : bf16[4,8]  # -> _t_23\n"
	"  %11 = ai.tpfuse.AllReduceRMSNorm(%10, %5, %9) {axis=-1, epsilon=1e-06, stash_type=1, weight_offset=0.0} : bf16[4,8]  # final/mul_gamma/AllReduceRMSNorm [fuse-allreduce-rmsnorm/allreduce-residual-rmsnorm]\n"
	"  output %11: bf16[4,8] \"logits_in\"\n"
	"}\n";

static void test_golden_dump(void **state)
{
	(void)state;
	struct tpf_model *m = new_model(18);
	build_dense(m, 1);
	tpf_pass_stats_free(run_passes(m, all_and_dce, NULL));
	char *text = dump(m);
	if (strcmp(text, golden) != 0)
		fprintf(stderr, "---- dump ----\n%s---- end ----\n", text);
	assert_string_equal(text, golden);
	free(text);
	tpf_model_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_canon_llama_bf16_casts),
		cmocka_unit_test(test_canon_fp32_div_square_axes_attr),
		cmocka_unit_test(test_canon_bf16_no_cast_div_one),
		cmocka_unit_test(test_canon_gemma),
		cmocka_unit_test(test_canon_float_gamma_keeps_cast),
		cmocka_unit_test(test_canon_onnx_ops),
		cmocka_unit_test(test_canon_constant_eps_and_skip_bias),
		cmocka_unit_test(test_canon_near_misses),
		cmocka_unit_test(test_dense_counts_and_idempotence),
		cmocka_unit_test(test_dense_default_pipeline),
		cmocka_unit_test(test_fuse_without_residual),
		cmocka_unit_test(test_fuse_near_misses),
		cmocka_unit_test(test_quant_fp8),
		cmocka_unit_test(test_quant_fp8_norm_kept),
		cmocka_unit_test(test_quant_nvfp4),
		cmocka_unit_test(test_quant_near_misses),
		cmocka_unit_test(test_golden_dump),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
