/* SPDX-License-Identifier: MIT */
/* canonicalize-rmsnorm on every combination of the decomposed RMSNorm
 * spellings exporters write, built with the IR builder: each becomes one
 * ai.tpfuse.RMSNorm with the right settings.  The single forms, the norm
 * ops, the near misses and the fusions after canonicalization are text
 * tests (tests/passes/canonicalize-rmsnorm-*.tpf, fuse-allreduce-*.tpf). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "test-util.h"

#define T 4
#define H 8

static const int64_t dims_th[2] = {T, H};
static const int64_t dims_t1[2] = {T, 1};

/* ------------------------------------------------------------------ builders */

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

struct chain_opts {
	enum tpf_dtype dt;  /* activation dtype */
	int cast;           /* compute in float: Cast to float and back */
	int mul_square;     /* Mul(x, x) instead of Pow(x, 2) */
	int form;           /* 0: Div(x, rms)  1: Mul(x, Reciprocal(rms))  2: Mul(Div(1, rms), x) */
	int gemma;          /* multiply by (1 + gamma) */
	int axes_attr;      /* ReduceMean axes as attribute (before opset 18) */
};

/* The decomposed RMSNorm chain that exporters write; returns its output. */
static struct tpf_value *chain(struct tpf_graph *g, const char *prefix, struct tpf_value *x,
			       const struct chain_opts *o)
{
	enum tpf_dtype ct = o->cast ? TPF_DTYPE_FLOAT : o->dt;
	struct tpf_value *xf = o->cast ? cast(g, x, TPF_DTYPE_FLOAT) : x;
	int64_t axis = -1, glen = H;
	const int64_t *red = dims_t1;
	char name[64], wname[64];

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
	struct tpf_value *eps = scalar(g, "eps", ct, 1e-6f);
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
	snprintf(name, sizeof(name), "%s/mul_gamma", prefix);
	snprintf(wname, sizeof(wname), "%s.weight", prefix);
	if (o->gemma) {
		/* (1 + gamma) in the compute dtype, cast at the end */
		struct tpf_value *w = weight(g, wname, o->dt, glen);
		struct tpf_value *gw = w;
		if (w->type.dtype != ct) {
			gw = op_r(g, "", "Cast", NULL, ct, 1, &glen, w, NULL);
			assert_int_equal(tpf_node_set_attr_int(gw->producer, "to", ct), TPF_OK);
		}
		gw = op_r(g, "", "Add", NULL, ct, 1, &glen, scalar(g, "one", ct, 1.0f), gw);
		struct tpf_value *y = op(g, "", "Mul", name, ct, dims_th, nrm, gw);
		return ct == o->dt ? y : cast(g, y, o->dt);
	}
	struct tpf_value *w = weight(g, wname, o->dt, glen);
	struct tpf_value *nb = ct == o->dt ? nrm : cast(g, nrm, o->dt);
	return op(g, "", "Mul", name, o->dt, dims_th, w, nb);
}

/* ------------------------------------------------------------------ sweep */

/* Every combination of compute dtype, Casts, square form, normalization
 * form, axes spelling and Gemma's offset canonicalizes to one RMSNorm that
 * reads x and the weight. */
static void test_canon_every_spelling(void **state)
{
	(void)state;
	int count = 0;

	for (int bits = 0; bits < 48; bits++) {
		struct chain_opts o = {
			.dt = bits & 1 ? TPF_DTYPE_BFLOAT16 : TPF_DTYPE_FLOAT,
			.mul_square = (bits >> 1) & 1,
			.axes_attr = (bits >> 2) & 1,
			.gemma = (bits >> 3) & 1,
			.form = bits >> 4,
		};
		for (int cast = 0; cast <= (o.dt == TPF_DTYPE_BFLOAT16); cast++) {
			o.cast = cast;
			struct tpf_model *m = new_model(o.axes_attr ? 13 : 18);
			struct tpf_graph *g = m->graph;
			struct tpf_value *x = input(g, "x", o.dt);
			struct tpf_value *y = chain(g, "norm", x, &o);
			assert_int_equal(tpf_value_rename(y, "y"), TPF_OK);
			assert_int_equal(tpf_graph_add_output(g, y), TPF_OK);
			verify_ok(m);

			struct tpf_pipeline_options po = {.passes = "canonicalize-rmsnorm",
							  .verify_each = 1};
			struct tpf_diag *d = tpf_diag_create();
			po.ctx.stats = tpf_pass_stats_create();
			po.ctx.rank = po.ctx.world_size = -1;
			enum tpf_status st = tpf_pipeline_run(m, &po, d);
			if (st)
				tpf_diag_print(d, stderr);
			assert_int_equal(st, TPF_OK);

			struct tpf_node *n = find_op(g, TPF_OP_TPF_RMS_NORM);
			if (!n || g->n_nodes != 1) {
				char *t = dump_text(m);
				fprintf(stderr, "combination %d (cast %d) left:\n%s", bits, cast, t);
				free(t);
			}
			assert_non_null(n);
			assert_int_equal(g->n_nodes, 1);
			assert_ptr_equal(n->inputs[0], x);
			assert_string_equal(n->inputs[1]->name, "norm.weight");
			assert_int_equal(tpf_node_attr_int(n, "axis", 0), -1);
			assert_int_equal(tpf_node_attr_int(n, "stash_type", 0),
					 cast ? TPF_DTYPE_FLOAT : o.dt);
			assert_true(tpf_node_attr_float(n, "weight_offset", -1) == (o.gemma ? 1.0f : 0.0f));
			assert_string_equal(n->origin_pattern, o.gemma ? "decomposed-gemma" : "decomposed");
			assert_ptr_equal(g->outputs[0], n->outputs[0]);
			assert_string_equal(n->outputs[0]->name, "y");
			assert_int_equal(n->outputs[0]->type.dtype, o.dt);
			assert_int_equal(tpf_pass_stats_get(po.ctx.stats, "canonicalize-rmsnorm",
							    o.gemma ? "decomposed-gemma" : "decomposed"),
					 1);
			tpf_pass_stats_free(po.ctx.stats);
			tpf_diag_free(d);
			tpf_model_free(m);
			count++;
		}
	}
	assert_int_equal(count, 72);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_canon_every_spelling),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
