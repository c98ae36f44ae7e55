/* SPDX-License-Identifier: MIT */
/*
 * Allocation-failure injection.  For N = 1, 2, ... every operation runs with
 * tpf_alloc_fail_after(N) (the N-th allocation from now and every later one
 * fail) until it runs without reaching its N-th allocation.  Each failing run
 * must return an error status (never crash) and leave everything freeable;
 * under the sanitizer build (scripts/test-sanitizers.sh) LeakSanitizer checks
 * that nothing leaks.
 *
 * Operations: import from memory (models with subgraphs, functions and
 * initializers, from the committed seed corpus), verification, shape
 * inference, the "default" pipeline on a model that fuses (built with the
 * builder API: AllReduce -> Add -> RMSNormalization), export, the builder
 * itself, and lowering to a plan.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tpf-passes.h"
#include "tpf-runtime.h"

/* far above what any operation here needs; reaching it means a loop that
 * never stops allocating */
#define MAX_STEPS 200000

struct bytes {
	void *data;
	size_t size;
};

/* Corpus files with subgraphs (If/Loop/Scan with captures), local functions,
 * every attribute kind and a real tensor-parallel layer with initializers. */
static const char *const model_files[] = {
	"fixture_control_flow.onnx",
	"fixture_functions.onnx",
	"fixture_attributes.onnx",
	"example_dense.rank0.onnx",
};
#define N_MODELS (sizeof(model_files) / sizeof(model_files[0]))

static struct bytes models[N_MODELS];

static struct bytes read_corpus_file(const char *name)
{
	const char *root = getenv("TPF_SOURCE_ROOT");
	char path[4096];
	struct bytes b = {0};
	FILE *f;
	long n;

	snprintf(path, sizeof(path), "%s/tests/fuzz/corpus/model/%s", root ? root : ".", name);
	f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "cannot open %s (set TPF_SOURCE_ROOT)\n", path);
		return b;
	}
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	if (n > 0) {
		b.data = malloc((size_t)n);
		if (b.data && fread(b.data, 1, (size_t)n, f) == (size_t)n)
			b.size = (size_t)n;
	}
	fclose(f);
	return b;
}

static int setup(void **state)
{
	for (size_t i = 0; i < N_MODELS; i++) {
		models[i] = read_corpus_file(model_files[i]);
		if (!models[i].size)
			return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	for (size_t i = 0; i < N_MODELS; i++)
		free(models[i].data);
	return 0;
}

/* ------------------------------------------------------------------ the driver */

/* What every operation works on. */
struct work {
	const struct bytes *src;
	struct tpf_model *m;
	struct tpf_diag *d;
	void *out;
	size_t out_size;
	struct tpf_plan *plan;
};

/* An operation in three parts: `prepare` and `cleanup` run without
 * injection; only `run` runs with it.  `run` must leave the work freeable by
 * `cleanup` whatever it returns. */
struct op {
	const char *what;
	struct work *(*prepare)(void *arg);
	enum tpf_status (*run)(struct work *w);
	void (*cleanup)(struct work *w);
	void *arg;
	enum tpf_status want;  /* the status of an injected failure, or TPF_OK: any error */
};

/*
 * Runs `op` with the N-th allocation failing for N = 1, 2, ... until a run
 * makes fewer than N allocations (the injection never fired).  Every run in
 * which it fired must fail, with op->want when that is set.  A run that
 * reports OK although an allocation failed is accepted only when the failure
 * was absorbed by design: a diagnostic message that could not be stored
 * (counted in the diagnostic's `dropped`).  Returns the number of failing runs.
 */
static uint64_t sweep(const struct op *op)
{
	uint64_t swallowed = 0;

	for (uint64_t n = 1; n <= MAX_STEPS; n++) {
		struct work *w = op->prepare(op->arg);
		assert_non_null(w);
		size_t dropped = w->d->dropped;
		tpf_alloc_fail_after(n);
		enum tpf_status st = op->run(w);
		uint64_t made = tpf_alloc_count();
		tpf_alloc_fail_after(0);
		int absorbed = w->d->dropped > dropped;
		op->cleanup(w);

		if (made < n) {
			if (st != TPF_OK)
				fail_msg("%s: fails (%s) without an injected failure", op->what,
					 tpf_status_name(st));
			printf("%s: %llu runs with a failed allocation, %llu absorbed\n", op->what,
			       (unsigned long long)(n - 1), (unsigned long long)swallowed);
			return n - 1;
		}
		if (st == TPF_OK) {
			if (!absorbed)
				fail_msg("%s: allocation %llu failed but the call returned OK",
					 op->what, (unsigned long long)n);
			swallowed++;
			continue;
		}
		if ((unsigned)st >= TPF_STATUS_COUNT)
			fail_msg("%s: allocation %llu: bad status %d", op->what,
				 (unsigned long long)n, (int)st);
		if (op->want != TPF_OK && st != op->want)
			fail_msg("%s: allocation %llu failed: status %s, expected %s", op->what,
				 (unsigned long long)n, tpf_status_name(st),
				 tpf_status_name(op->want));
	}
	fail_msg("%s: still allocating after %d steps", op->what, MAX_STEPS);
	return 0;
}

static struct work *work_new(const struct bytes *src)
{
	struct work *w = calloc(1, sizeof(*w));

	assert_non_null(w);
	w->src = src;
	w->d = tpf_diag_create();
	assert_non_null(w->d);
	return w;
}

static void work_free(struct work *w)
{
	tpf_plan_free(w->plan);
	tpf_free(w->out);
	tpf_model_free(w->m);
	tpf_diag_free(w->d);
	free(w);
}

static void load_clean(struct work *w)
{
	assert_int_equal(tpf_model_load_memory(w->src->data, w->src->size, NULL, NULL, &w->m, w->d),
			 TPF_OK);
}

/* ------------------------------------------------------------------ import */

static struct work *prep_bytes(void *arg)
{
	return work_new(arg);
}

static enum tpf_status run_import(struct work *w)
{
	enum tpf_status st = tpf_model_load_memory(w->src->data, w->src->size, NULL, NULL, &w->m,
						   w->d);

	if (st != TPF_OK && w->m)
		fail_msg("import failed (%s) but returned a model", tpf_status_name(st));
	if (st != TPF_OK && w->d->error_count == 0 && w->d->dropped == 0)
		fail_msg("import failed (%s) without a message", tpf_status_name(st));
	return st;
}

static void test_import(void **state)
{
	for (size_t i = 0; i < N_MODELS; i++) {
		char what[128];
		snprintf(what, sizeof(what), "import %s", model_files[i]);
		struct op op = {what, prep_bytes, run_import, work_free, &models[i], TPF_ERR_NOMEM};
		assert_true(sweep(&op) > 0);
	}
}

/* ------------------------------------------------------------------ verify, infer, export */

static struct work *prep_loaded(void *arg)
{
	struct work *w = work_new(arg);

	load_clean(w);
	return w;
}

static struct work *prep_inferred(void *arg)
{
	struct work *w = work_new(arg);

	load_clean(w);
	assert_int_equal(tpf_model_infer_shapes(w->m, w->d), TPF_OK);
	return w;
}

static enum tpf_status run_verify(struct work *w)
{
	return tpf_model_verify(w->m, w->d);
}

static enum tpf_status run_infer(struct work *w)
{
	return tpf_model_infer_shapes(w->m, w->d);
}

static enum tpf_status run_export(struct work *w)
{
	enum tpf_status st = tpf_model_save_memory(w->m, &w->out, &w->out_size, w->d);

	if (st != TPF_OK && w->out)
		fail_msg("export failed (%s) but returned a buffer", tpf_status_name(st));
	return st;
}

static enum tpf_status run_print(struct work *w)
{
	FILE *sink = fopen("/dev/null", "w");
	enum tpf_status st;

	if (!sink)
		return TPF_ERR_IO;
	st = tpf_model_print_text(w->m, sink);
	if (st == TPF_OK)
		st = tpf_model_print_dot(w->m, sink);
	fclose(sink);
	return st;
}

static void sweep_each_model(const char *verb, struct work *(*prep)(void *),
			     enum tpf_status (*run)(struct work *), enum tpf_status want)
{
	for (size_t i = 0; i < N_MODELS; i++) {
		char what[128];
		snprintf(what, sizeof(what), "%s %s", verb, model_files[i]);
		struct op op = {what, prep, run, work_free, &models[i], want};
		sweep(&op);
	}
}

static void test_verify(void **state)
{
	sweep_each_model("verify", prep_loaded, run_verify, TPF_ERR_NOMEM);
}

/* A chain of Neg nodes whose outputs have no types yet: inference must
 * store a shape per value and so grow the graph's arena. */
static struct work *prep_untyped_chain(void *arg)
{
	static const int64_t dims[3] = {2, 3, 5};
	struct work *w = work_new(NULL);
	struct tpf_value *v;

	w->m = tpf_model_create();
	assert_non_null(w->m);
	assert_int_equal(tpf_model_set_opset(w->m, "", 23), TPF_OK);
	v = tpf_graph_add_input(w->m->graph, "x", TPF_DTYPE_FLOAT, 3, dims);
	assert_non_null(v);
	for (int i = 0; i < 4000; i++) {
		struct tpf_node *n = tpf_graph_add_node(w->m->graph, "", "Neg", NULL, &v, 1, 1, NULL);
		assert_non_null(n);
		v = n->outputs[0];
	}
	assert_int_equal(tpf_graph_add_output(w->m->graph, v), TPF_OK);
	return w;
}

static void test_infer(void **state)
{
	sweep_each_model("infer", prep_loaded, run_infer, TPF_ERR_NOMEM);
	struct op op = {"infer untyped chain", prep_untyped_chain, run_infer, work_free, NULL,
			TPF_ERR_NOMEM};
	assert_true(sweep(&op) > 0);
}

static void test_export(void **state)
{
	sweep_each_model("export", prep_inferred, run_export, TPF_ERR_NOMEM);
}

static void test_print(void **state)
{
	sweep_each_model("print", prep_inferred, run_print, TPF_OK);
}

/* ------------------------------------------------------------------ builder and pipeline */

#define TOKENS 2
#define HIDDEN 8

/* AllReduce -> Add(residual) -> RMSNormalization, rank 0 of 2.  Returns
 * NULL when an allocation fails (only under injection). */
static struct tpf_model *build_fusable(void)
{
	static const int64_t dims[2] = {TOKENS, HIDDEN};
	const int64_t gdim = HIDDEN;
	float gamma[HIDDEN];
	struct tpf_model *m = tpf_model_create();
	struct tpf_graph *g;
	struct tpf_value *x, *res, *w;
	struct tpf_node *ar, *add, *norm;

	for (int i = 0; i < HIDDEN; i++)
		gamma[i] = 1.0f + (float)i / 8;
	if (!m)
		return NULL;
	g = m->graph;
	if (tpf_model_set_opset(m, "", 23) || tpf_model_set_opset(m, TPF_MS_DOMAIN, 1) ||
	    tpf_model_set_metadata(m, "tp_world_size", "2") ||
	    tpf_model_set_metadata(m, "tp_rank", "0"))
		goto out_fail;
	x = tpf_graph_add_input(g, "x", TPF_DTYPE_FLOAT, 2, dims);
	res = tpf_graph_add_input(g, "residual", TPF_DTYPE_FLOAT, 2, dims);
	w = tpf_graph_add_initializer(g, "gamma", TPF_DTYPE_FLOAT, 1, &gdim, gamma, sizeof(gamma));
	if (!x || !res || !w)
		goto out_fail;
	ar = tpf_graph_add_node(g, TPF_MS_DOMAIN, "AllReduce", "ar", &x, 1, 1, NULL);
	if (!ar)
		goto out_fail;
	struct tpf_value *add_in[2] = {ar->outputs[0], res};
	add = tpf_graph_add_node(g, "", "Add", "add", add_in, 2, 1, (const char *const[]){"sum"});
	if (!add)
		goto out_fail;
	struct tpf_value *norm_in[2] = {add->outputs[0], w};
	norm = tpf_graph_add_node(g, "", "RMSNormalization", "norm", norm_in, 2, 1,
				  (const char *const[]){"y"});
	if (!norm || tpf_node_set_attr_float(norm, "epsilon", 1e-6f) ||
	    tpf_node_set_attr_int(norm, "axis", -1) ||
	    tpf_graph_add_output(g, norm->outputs[0]) || tpf_graph_add_output(g, add->outputs[0]))
		goto out_fail;
	return m;

out_fail:
	tpf_model_free(m);
	return NULL;
}

static size_t count_op(const struct tpf_model *m, enum tpf_op op)
{
	size_t n = 0;
	for (const struct tpf_node *nd = m->graph->first; nd; nd = nd->next)
		n += nd->op == op;
	return n;
}

static struct work *prep_nothing(void *arg)
{
	return work_new(NULL);
}

static enum tpf_status run_build(struct work *w)
{

	w->m = build_fusable();
	return w->m ? TPF_OK : TPF_ERR_NOMEM;
}

static void test_builder(void **state)
{
	struct op op = {"build", prep_nothing, run_build, work_free, NULL, TPF_ERR_NOMEM};
	assert_true(sweep(&op) > 0);
}

static struct work *prep_fusable(void *arg)
{
	struct work *w = work_new(NULL);

	w->m = build_fusable();
	assert_non_null(w->m);
	assert_int_equal(tpf_model_verify(w->m, w->d), TPF_OK);
	assert_int_equal(tpf_model_infer_shapes(w->m, w->d), TPF_OK);
	return w;
}

static enum tpf_status run_pipeline(struct work *w)
{
	struct tpf_pipeline_options po = {.passes = "default"};

	po.ctx.rank = -1;
	return tpf_pipeline_run(w->m, &po, w->d);
}

/* After a failed pipeline the model must still be valid (a pass that fails
 * leaves the model valid or unchanged); after a clean run it is fused. */
static void check_pipeline_result(struct work *w, enum tpf_status st)
{
	struct tpf_diag *d = tpf_diag_create();

	assert_non_null(d);
	if (tpf_model_verify(w->m, d) != TPF_OK) {
		tpf_diag_print(d, stderr);
		fail_msg("the pipeline returned %s and left a model that does not verify",
			 tpf_status_name(st));
	}
	if (st == TPF_OK) {
		assert_int_equal(count_op(w->m, TPF_OP_TPF_ALLREDUCE_RMS_NORM), 1);
		assert_int_equal(count_op(w->m, TPF_OP_MS_ALLREDUCE), 0);
	}
	tpf_diag_free(d);
}

static void test_pipeline(void **state)
{
	struct op op = {"default pipeline", prep_fusable, run_pipeline, work_free, NULL,
			TPF_ERR_NOMEM};
	uint64_t steps = sweep(&op);
	assert_true(steps > 0);

	/* the same runs again, now checking the model each one leaves */
	for (uint64_t n = 1; n <= steps + 1; n++) {
		struct work *w = prep_fusable(NULL);
		tpf_alloc_fail_after(n);
		enum tpf_status st = run_pipeline(w);
		tpf_alloc_fail_after(0);
		check_pipeline_result(w, st);
		work_free(w);
	}
}

/* ------------------------------------------------------------------ planning */

static struct work *prep_plan(void *arg)
{
	struct work *w = work_new(NULL);

	w->m = build_fusable();
	assert_non_null(w->m);
	assert_int_equal(tpf_model_infer_shapes(w->m, w->d), TPF_OK);
	return w;
}

static float plan_x[TOKENS * HIDDEN], plan_res[TOKENS * HIDDEN];

static enum tpf_status run_plan(struct work *w)
{
	struct tpf_host_tensor in[2] = {
		{.name = "x", .dtype = TPF_DTYPE_FLOAT, .rank = 2, .dims = {TOKENS, HIDDEN},
		 .data = plan_x},
		{.name = "residual", .dtype = TPF_DTYPE_FLOAT, .rank = 2, .dims = {TOKENS, HIDDEN},
		 .data = plan_res},
	};
	struct tpf_plan_options po = {.backend = TPF_BACKEND_CPU, .rank = 0, .world = 1};
	enum tpf_status st = tpf_plan_build(w->m, in, 2, &po, &w->plan, w->d);

	if (st != TPF_OK && w->plan)
		fail_msg("plan building failed (%s) but returned a plan", tpf_status_name(st));
	return st;
}

static void test_plan(void **state)
{
	/* lowering must work without injection: a planner that fails here is a
	 * broken planner, not a reason to drop the sweep */
	struct work *w = prep_plan(NULL);
	enum tpf_status st = run_plan(w);
	if (st != TPF_OK) {
		tpf_diag_print(w->d, stderr);
		work_free(w);
		fail_msg("planning the fusable model failed without injected failures (%s)",
			 tpf_status_name(st));
	}
	assert_non_null(w->plan);
	work_free(w);
	struct op op = {"plan", prep_plan, run_plan, work_free, NULL, TPF_ERR_NOMEM};
	assert_true(sweep(&op) > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_import),   cmocka_unit_test(test_verify),
		cmocka_unit_test(test_infer),    cmocka_unit_test(test_export),
		cmocka_unit_test(test_print),    cmocka_unit_test(test_builder),
		cmocka_unit_test(test_pipeline), cmocka_unit_test(test_plan),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
