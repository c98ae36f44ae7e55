/* SPDX-License-Identifier: MIT */
/*
 * Fused graphs against the unfused ones, on 2 MPI ranks with the CPU
 * backend: each case is a small rank graph (text dump), run as written
 * and again after a pipeline of passes, on inputs that differ per rank;
 * every output must agree within float32 rounding (1e-5 of max(|want|, 1)),
 * the fusion must have happened (the fused op is there, the collectives it
 * replaces are not), and the same comparison must reject the fused output
 * scaled by 1.01.  Started alone, it re-launches itself under
 * `mpirun -np 2`.
 *
 * Cases: the mixture-of-experts spellings of fuse-allreduce-rmsnorm (a
 * shared expert added after the routed experts' reduction, reduced on its
 * own, gated before or after the reduction), its LayerNorm forms and a
 * bias after the reduction (equal bit for bit), and the sharded norm fused
 * without knowing the rank (fuse-sharded-rmsnorm records the part the
 * Slice takes): the part equal to this rank's shard (the one-float
 * exchange), another rank's part, a part that straddles two shards, Q/K
 * pairs, and rank graphs that disagree (one keeps its own part, the other
 * not), which must fail on both ranks at that node.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tpf-passes.h"
#include "tpf-runtime.h"

static int failures, rank = -1;

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "rank %d: check failed at line %d: %s\n", rank, __LINE__, #cond); \
			failures++;                                                                \
		}                                                                                  \
	} while (0)

#define T 4 /* tokens */

struct fcase {
	const char *name;
	const char *passes;
	/* the graph's text for this rank (snprintf'ed into buf) */
	void (*text)(char *buf, size_t size, int rank, int world);
	const char *fused_op;  /* op_type that must be in the fused graph */
	const char *gone_op;   /* op_type that must not be (NULL: none) */
	int rank_known;        /* the passes are told this rank (else it is unknown) */
	const char *fails_with; /* the fused run must fail on every rank with this */
	int exact;             /* the fused outputs equal the unfused ones bit for bit */
};

/* ------------------------------------------------------------------ MoE graphs */

#define HEADER "ir_version 10\nopset \"\" 23\nopset \"com.microsoft\" 1\ngraph \"\" {\n"
#define W8 "[1.5, 0.5, -1.0, 2.0, 0.25, 1.0, -0.5, 0.75]"

static void moe_shared(char *buf, size_t size, int r, int w)
{
	(void)r, (void)w;
	snprintf(buf, size,
		 HEADER "  input %%0: f32[4,8] \"routed_partial\"\n"
			"  input %%1: f32[4,8] \"residual\"\n"
			"  input %%2: f32[4,8] \"shared\"\n"
			"  init %%3: f32[8] \"w\" = " W8 "\n"
			"  %%4 = com.microsoft.AllReduce(%%0) : f32[4,8]  # ar\n"
			"  %%5 = Add(%%4, %%2) : f32[4,8]  # moe_out\n"
			"  %%6 = Add(%%1, %%5) : f32[4,8]  # add\n"
			"  %%7 = RMSNormalization(%%6, %%3) : f32[4,8]  # norm\n"
			"  %%8 = Add(%%6, %%7) : f32[4,8]  # next\n"
			"  output %%8: f32[4,8] \"y\"\n"
			"  output %%7: f32[4,8] \"normed\"\n}\n");
}

static void moe_gated_replicated(char *buf, size_t size, int r, int w)
{
	(void)r, (void)w;
	snprintf(buf, size,
		 HEADER "  input %%0: f32[4,8] \"routed_partial\"\n"
			"  input %%1: f32[4,8] \"residual\"\n"
			"  input %%2: f32[4,8] \"shared\"\n"
			"  input %%3: f32[4,1] \"gate\"\n"
			"  init %%4: f32[8] \"w\" = " W8 "\n"
			"  %%5 = com.microsoft.AllReduce(%%0) : f32[4,8]  # ar\n"
			"  %%6 = Sigmoid(%%3) : f32[4,1]  # sig\n"
			"  %%7 = Mul(%%6, %%2) : f32[4,8]  # gated\n"
			"  %%8 = Add(%%5, %%7) : f32[4,8]  # moe_out\n"
			"  %%9 = Add(%%8, %%1) : f32[4,8]  # add\n"
			"  %%10 = RMSNormalization(%%9, %%4) : f32[4,8]  # norm\n"
			"  %%11 = Add(%%9, %%10) : f32[4,8]  # next\n"
			"  output %%11: f32[4,8] \"y\"\n}\n");
}

/* vLLM's order: one AllReduce of routed + sigmoid(gate) * shared */
static void moe_gated_partial(char *buf, size_t size, int r, int w)
{
	(void)r, (void)w;
	snprintf(buf, size,
		 HEADER "  input %%0: f32[4,8] \"routed_partial\"\n"
			"  input %%1: f32[4,8] \"residual\"\n"
			"  input %%2: f32[4,8] \"shared_partial\"\n"
			"  input %%3: f32[4,1] \"gate\"\n"
			"  init %%4: f32[8] \"w\" = " W8 "\n"
			"  %%5 = Sigmoid(%%3) : f32[4,1]  # sig\n"
			"  %%6 = Mul(%%2, %%5) : f32[4,8]  # gated\n"
			"  %%7 = Add(%%0, %%6) : f32[4,8]  # moe_partial\n"
			"  %%8 = com.microsoft.AllReduce(%%7) : f32[4,8]  # ar\n"
			"  %%9 = Add(%%1, %%8) : f32[4,8]  # add\n"
			"  %%10 = RMSNormalization(%%9, %%4) : f32[4,8]  # norm\n"
			"  %%11 = Add(%%9, %%10) : f32[4,8]  # next\n"
			"  output %%11: f32[4,8] \"y\"\n}\n");
}

/* the shared expert reduced on its own: two AllReduce nodes become one */
static void moe_two_reductions(char *buf, size_t size, int r, int w)
{
	(void)r, (void)w;
	snprintf(buf, size,
		 HEADER "  input %%0: f32[4,8] \"routed_partial\"\n"
			"  input %%1: f32[4,8] \"residual\"\n"
			"  input %%2: f32[4,8] \"shared_partial\"\n"
			"  input %%3: f32[4,1] \"gate\"\n"
			"  init %%4: f32[8] \"w\" = " W8 "\n"
			"  %%5 = com.microsoft.AllReduce(%%0) : f32[4,8]  # ar\n"
			"  %%6 = Sigmoid(%%3) : f32[4,1]  # sig\n"
			"  %%7 = Mul(%%2, %%6) : f32[4,8]  # gated\n"
			"  %%8 = com.microsoft.AllReduce(%%7) : f32[4,8]  # ar_shared\n"
			"  %%9 = Add(%%5, %%8) : f32[4,8]  # moe_out\n"
			"  %%10 = Add(%%1, %%9) : f32[4,8]  # add\n"
			"  %%11 = RMSNormalization(%%10, %%4) : f32[4,8]  # norm\n"
			"  %%12 = Add(%%10, %%11) : f32[4,8]  # next\n"
			"  output %%12: f32[4,8] \"y\"\n}\n");
}

/* ------------------------------------------------------------------ sharded norms */

#define G8 "[0.5, 1.5, -0.25, 2.0, 1.0, 0.75, -1.25, 3.0]"

/* AllGather -> RMSNorm -> Slice [start, end) of the gathered 8 (x [4, 4]). */
static void sharded_slice(char *buf, size_t size, int64_t start, int64_t end)
{
	snprintf(buf, size,
		 HEADER "  input %%0: f32[4,4] \"x\"\n"
			"  init %%1: f32[8] \"gamma\" = " G8 "\n"
			"  init %%2: i64[1] \"starts\" = [%lld]\n"
			"  init %%3: i64[1] \"ends\" = [%lld]\n"
			"  init %%4: i64[1] \"axes\" = [-1]\n"
			"  %%5 = com.microsoft.AllGather(%%0) {axis=-1, group_size=2} : f32[4,8]  # ag\n"
			"  %%6 = RMSNormalization(%%5, %%1) {epsilon=1e-06} : f32[4,8]  # norm\n"
			"  %%7 = Slice(%%6, %%2, %%3, %%4) : f32[4,%lld]  # slice\n"
			"  output %%7: f32[4,%lld] \"y\"\n}\n",
		 (long long)start, (long long)end, (long long)(end - start), (long long)(end - start));
}

static void sharded_own(char *buf, size_t size, int r, int w)
{
	(void)w;
	sharded_slice(buf, size, 4 * r, 4 * r + 4);
}

static void sharded_other(char *buf, size_t size, int r, int w)
{
	sharded_slice(buf, size, 4 * ((r + 1) % w), 4 * ((r + 1) % w) + 4);
}

/* rank 0 keeps its own part, rank 1 rank 0's too: the ranks disagree */
static void sharded_mixed(char *buf, size_t size, int r, int w)
{
	(void)r, (void)w;
	sharded_slice(buf, size, 0, 4);
}

static void sharded_straddle(char *buf, size_t size, int r, int w)
{
	(void)r, (void)w;
	sharded_slice(buf, size, 2, 7);
}

/* Q (full 8, Slice) and K (full 4, Split) of one layer; `own`: each rank
 * keeps its own parts, else the other rank's. */
static void sharded_qk(char *buf, size_t size, int r, int w, int own)
{
	int q = own ? r : (r + 1) % w;
	snprintf(buf, size,
		 HEADER "  input %%0: f32[4,6] \"h\"\n"
			"  init %%1: i64[2] \"qk_sizes\" = [4, 2]\n"
			"  init %%2: f32[8] \"q_gamma\" = " G8 "\n"
			"  init %%3: i64[1] \"q_starts\" = [%d]\n"
			"  init %%4: i64[1] \"q_ends\" = [%d]\n"
			"  init %%5: i64[1] \"q_axes\" = [-1]\n"
			"  init %%6: f32[4] \"k_gamma\" = [2.0, -1.0, 0.5, 1.25]\n"
			"  %%7, %%8 = Split(%%0, %%1) {axis=1} : (f32[4,4], f32[4,2])  # qk_split\n"
			"  %%9 = com.microsoft.AllGather(%%7) {axis=-1, group_size=2} : f32[4,8]  # q_ag\n"
			"  %%10 = RMSNormalization(%%9, %%2) {epsilon=1e-06} : f32[4,8]  # q_norm\n"
			"  %%11 = Slice(%%10, %%3, %%4, %%5) : f32[4,4]  # q_slice\n"
			"  %%12 = com.microsoft.AllGather(%%8) {axis=-1, group_size=2} : f32[4,4]  # k_ag\n"
			"  %%13 = RMSNormalization(%%12, %%6) {epsilon=1e-06} : f32[4,4]  # k_norm\n"
			"  %%14, %%15 = Split(%%13) {axis=-1, num_outputs=2} : (f32[4,2], f32[4,2])  # k_split\n"
			"  output %%11: f32[4,4] \"yq\"\n"
			"  output %%%d: f32[4,2] \"yk\"\n}\n",
		 4 * q, 4 * q + 4, q ? 15 : 14);
}

static void sharded_qk_own(char *buf, size_t size, int r, int w)
{
	sharded_qk(buf, size, r, w, 1);
}

static void sharded_qk_other(char *buf, size_t size, int r, int w)
{
	sharded_qk(buf, size, r, w, 0);
}

/* ------------------------------------------------- LayerNorm and bias graphs */

#define B8 "[0.125, -0.25, 0.5, 0.0, -1.0, 0.375, 0.25, -0.125]"

/* AllReduce -> [Add(bias)] -> [Add(residual)] -> NORM (LayerNormalization
 * with B, or RMSNormalization); the sum feeds the next residual add, and
 * is an output too. */
static void norm_graph(char *buf, size_t size, int bias, int residual, int layer)
{
	int at = 5; /* the value the norm reads */
	char adds[512] = "";
	size_t k = 0;
	if (bias) {
		k += (size_t)snprintf(adds + k, sizeof(adds) - k,
				      "  %%6 = Add(%%5, %%3) : f32[4,8]  # o_proj\n");
		at = 6;
	}
	if (residual) {
		snprintf(adds + k, sizeof(adds) - k, "  %%7 = Add(%%1, %%%d) : f32[4,8]  # add\n", at);
		at = 7;
	}
	snprintf(buf, size,
		 HEADER "  input %%0: f32[4,8] \"partial\"\n"
		 "  input %%1: f32[4,8] \"residual\"\n"
		 "  init %%2: f32[8] \"w\" = " W8 "\n"
		 "  init %%3: f32[8] \"o_proj.bias\" = " B8 "\n"
		 "  init %%4: f32[8] \"ln.bias\" = " B8 "\n"
		 "  %%5 = com.microsoft.AllReduce(%%0) : f32[4,8]  # ar\n"
		 "%s"
		 "  %%8 = %s(%%%d, %%2%s) {epsilon=1e-05} : f32[4,8]  # norm\n"
		 "  %%9 = Add(%%%d, %%8) : f32[4,8]  # next\n"
		 "  %%10 = Add(%%9, %%1) : f32[4,8]  # keeps the residual input used\n"
		 "  output %%10: f32[4,8] \"y\"\n"
		 "  output %%8: f32[4,8] \"normed\"\n}\n",
		 adds, layer ? "LayerNormalization" : "RMSNormalization", at, layer ? ", %4" : "", at);
}

static void ln_residual(char *buf, size_t size, int r, int w)
{
	(void)r, (void)w;
	norm_graph(buf, size, 0, 1, 1);
}

static void ln_plain(char *buf, size_t size, int r, int w)
{
	(void)r, (void)w;
	norm_graph(buf, size, 0, 0, 1);
}

static void ln_bias_residual(char *buf, size_t size, int r, int w)
{
	(void)r, (void)w;
	norm_graph(buf, size, 1, 1, 1);
}

static void rms_bias_residual(char *buf, size_t size, int r, int w)
{
	(void)r, (void)w;
	norm_graph(buf, size, 1, 1, 0);
}

static void rms_bias(char *buf, size_t size, int r, int w)
{
	(void)r, (void)w;
	norm_graph(buf, size, 1, 0, 0);
}

/* A LayerNorm as exports decompose it, after the residual add: with its
 * bias added after gamma, or (beta 0) followed by an addend that is no bias
 * (the residual input again), which stays after the norm.
 * canonicalize-rmsnorm makes it a LayerNormalization */
static void ln_decomposed_graph(char *buf, size_t size, int beta)
{
	snprintf(buf, size,
		 HEADER "  input %%0: f32[4,8] \"partial\"\n"
			"  input %%1: f32[4,8] \"residual\"\n"
			"  init %%2: f32[8] \"w\" = " W8 "\n"
			"  init %%3: i64[1] \"axes\" = [-1]\n"
			"  init %%4: f32[] \"two\" = 2.0\n"
			"  init %%5: f32[] \"eps\" = 1e-05\n"
			"  init %%6: f32[8] \"ln.bias\" = " B8 "\n"
			"  %%7 = com.microsoft.AllReduce(%%0) : f32[4,8]  # ar\n"
			"  %%8 = Add(%%7, %%1) : f32[4,8]  # add\n"
			"  %%9 = ReduceMean(%%8, %%3) : f32[4,1]\n"
			"  %%10 = Sub(%%8, %%9) : f32[4,8]\n"
			"  %%11 = Pow(%%10, %%4) : f32[4,8]\n"
			"  %%12 = ReduceMean(%%11, %%3) : f32[4,1]\n"
			"  %%13 = Add(%%12, %%5) : f32[4,1]\n"
			"  %%14 = Sqrt(%%13) : f32[4,1]\n"
			"  %%15 = Div(%%10, %%14) : f32[4,8]\n"
			"  %%16 = Mul(%%2, %%15) : f32[4,8]  # norm\n"
			"  %%17 = Add(%%16, %s) : f32[4,8]  # norm_bias\n"
			"  %%18 = Add(%%8, %%17) : f32[4,8]  # next\n"
			"  output %%18: f32[4,8] \"y\"\n}\n",
		 beta ? "%6" : "%1");
}

static void ln_decomposed(char *buf, size_t size, int r, int w)
{
	(void)r, (void)w;
	ln_decomposed_graph(buf, size, 0);
}

static void ln_decomposed_bias(char *buf, size_t size, int r, int w)
{
	(void)r, (void)w;
	ln_decomposed_graph(buf, size, 1);
}

#define NORM_PASSES "canonicalize-rmsnorm,fuse-allreduce-rmsnorm"

#define SHARDED_PASSES "canonicalize-rmsnorm,fuse-sharded-rmsnorm"

#define MOE_PASSES "canonicalize-rmsnorm,fuse-allreduce-rmsnorm,fuse-sigmoid-gate"

static const struct fcase cases[] = {
	{"moe-shared-after-reduction", MOE_PASSES, moe_shared, "AllReduceRMSNorm", "AllReduce", 0},
	{"moe-gated-shared-after-reduction", MOE_PASSES, moe_gated_replicated, "SigmoidGateAdd",
	 "AllReduce", 0},
	{"moe-gated-partial-sums", MOE_PASSES, moe_gated_partial, "SigmoidGateAdd", "AllReduce", 0},
	{"moe-two-reductions", MOE_PASSES, moe_two_reductions, "AllReduceRMSNorm", "AllReduce", 0},
	/* LayerNorm models, and a bias after the reduction (gpt-oss's o_proj):
	 * the CPU kernel computes what the unfused graph does, bit for bit */
	{"layernorm-residual", NORM_PASSES, ln_residual, "AllReduceLayerNorm", "AllReduce", 0, NULL, 1},
	{"layernorm", NORM_PASSES, ln_plain, "AllReduceLayerNorm", "AllReduce", 0, NULL, 1},
	{"layernorm-bias-residual", NORM_PASSES, ln_bias_residual, "AllReduceLayerNorm", "AllReduce", 0,
	 NULL, 1},
	{"rmsnorm-bias-residual", NORM_PASSES, rms_bias_residual, "AllReduceRMSNorm", "AllReduce", 0,
	 NULL, 1},
	{"rmsnorm-bias", NORM_PASSES, rms_bias, "AllReduceRMSNorm", "AllReduce", 0, NULL, 1},
	{"layernorm-decomposed", NORM_PASSES, ln_decomposed, "AllReduceLayerNorm", "ReduceMean", 0},
	{"layernorm-decomposed-bias", NORM_PASSES, ln_decomposed_bias, "AllReduceLayerNorm", "ReduceMean", 0},
	/* the rank unknown to the passes: the part form */
	{"sharded-own-part", SHARDED_PASSES, sharded_own, "ShardedRMSNorm", "AllGather", 0},
	{"sharded-other-part", SHARDED_PASSES, sharded_other, "ShardedRMSNorm", "AllGather", 0},
	{"sharded-straddling-part", SHARDED_PASSES, sharded_straddle, "ShardedRMSNorm", "AllGather", 0},
	{"sharded-qk-own-parts", SHARDED_PASSES, sharded_qk_own, "ShardedRMSNorm", "AllGather", 0},
	{"sharded-qk-other-parts", SHARDED_PASSES, sharded_qk_other, "ShardedRMSNorm", "AllGather", 0},
	/* rank graphs that disagree: every rank stops at the same node, after
	 * the same exchange (no rank waits in a gather the others skip) */
	{"sharded-ranks-disagree", SHARDED_PASSES, sharded_mixed, "ShardedRMSNorm", "AllGather", 0,
	 "the ranks disagree about the parts: 1 of 2 take their own shard"},
	/* the rank known: own part, gamma sliced at compile time */
	{"sharded-own-part-rank-known", SHARDED_PASSES, sharded_own, "ShardedRMSNorm", "AllGather", 1},
};

/* ------------------------------------------------------------------ harness */

static size_t count_ops(const struct tpf_graph *g, const char *op_type)
{
	size_t k = 0;
	for (const struct tpf_node *n = g->first; n; n = n->next)
		k += strcmp(n->op_type, op_type) == 0;
	return k;
}

/* Deterministic inputs that differ per rank and per input. */
static void fill(float *x, size_t n, int r, size_t which)
{
	for (size_t i = 0; i < n; i++)
		x[i] = (float)sin(0.37 * (double)i + 1.3 * r + 0.7 * (double)which) *
		       (1.0f + 0.25f * (float)which);
}

struct outputs {
	size_t n;
	float *data[8];
	size_t numel[8];
};

static int run_model(const struct tpf_model *m, struct tpf_comm *c, struct outputs *o,
		     struct tpf_diag *d)
{
	const struct tpf_graph *g = m->graph;
	struct tpf_host_tensor in[8];
	float *bufs[8] = {0};
	size_t n_in = 0;
	int rc = -1;

	for (size_t i = 0; i < g->n_inputs && i < 8; i++) {
		const struct tpf_value *v = g->inputs[i];
		if (v->kind == TPF_VALUE_INITIALIZER)
			continue;
		const struct tpf_shape *s = &v->type.shape;
		size_t numel = 1;
		memset(&in[n_in], 0, sizeof(in[n_in]));
		in[n_in].name = v->name;
		in[n_in].dtype = TPF_DTYPE_FLOAT;
		in[n_in].rank = s->rank;
		for (int k = 0; k < s->rank; k++) {
			in[n_in].dims[k] = s->dims[k].value;
			numel *= (size_t)s->dims[k].value;
		}
		bufs[n_in] = malloc(numel * sizeof(float));
		fill(bufs[n_in], numel, rank, i);
		in[n_in].data = bufs[n_in];
		n_in++;
	}
	struct tpf_session *s = NULL;
	const struct tpf_host_tensor *out = NULL;
	size_t n_out = 0;
	if (tpf_session_create(m, &(struct tpf_session_options){.comm = c}, &s, d) ||
	    tpf_session_run(s, in, n_in, &out, &n_out, d))
		goto done;
	o->n = n_out < 8 ? n_out : 8;
	for (size_t i = 0; i < o->n; i++) {
		size_t bytes = 0;
		tpf_host_tensor_bytes(&out[i], &bytes);
		o->numel[i] = bytes / sizeof(float);
		o->data[i] = malloc(bytes ? bytes : 1);
		memcpy(o->data[i], out[i].data, bytes);
	}
	rc = 0;
done:
	tpf_session_free(s);
	for (size_t i = 0; i < n_in; i++)
		free(bufs[i]);
	return rc;
}

static void outputs_free(struct outputs *o)
{
	for (size_t i = 0; i < o->n; i++)
		free(o->data[i]);
	memset(o, 0, sizeof(*o));
}

/* Largest |got - want| / max(|want|, 1) over an output, times `scale` on got. */
static double max_err(const float *got, const float *want, size_t n, double scale)
{
	double e = 0;
	for (size_t i = 0; i < n; i++) {
		double w = want[i], err = fabs(got[i] * scale - w) / (fabs(w) > 1 ? fabs(w) : 1);
		if (!(err <= e))
			e = err;
	}
	return e;
}

static void run_case(const struct fcase *fc, struct tpf_comm *c, int world)
{
	char *text = malloc(1 << 16);
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_model *m = NULL;
	struct outputs want = {0}, got = {0};

	fc->text(text, 1 << 16, rank, world);
	if (tpf_model_parse_text(text, strlen(text), fc->name, &m, d)) {
		tpf_diag_print(d, stderr);
		CHECK(!"the case parses");
		goto out;
	}
	if (run_model(m, c, &want, d)) {
		tpf_diag_print(d, stderr);
		CHECK(!"the unfused graph runs");
		goto out;
	}
	struct tpf_pipeline_options po = {.passes = fc->passes, .verify_each = 1};
	po.ctx.rank = fc->rank_known ? rank : -1;
	po.ctx.world_size = fc->rank_known ? world : 0;
	if (tpf_pipeline_run(m, &po, d)) {
		tpf_diag_print(d, stderr);
		CHECK(!"the pipeline runs");
		goto out;
	}
	if (!count_ops(m->graph, fc->fused_op) || (fc->gone_op && count_ops(m->graph, fc->gone_op))) {
		fprintf(stderr, "rank %d: %s: %s missing or %s left after %s\n", rank, fc->name,
			fc->fused_op, fc->gone_op ? fc->gone_op : "-", fc->passes);
		failures++;
		goto out;
	}
	if (fc->fails_with) {
		struct tpf_diag *fd = tpf_diag_create();
		int rc = run_model(m, c, &got, fd), said = 0;
		for (size_t i = 0; i < fd->count; i++)
			said |= strstr(fd->entries[i].text, fc->fails_with) != NULL;
		if (rc == 0 || !said) {
			tpf_diag_print(fd, stderr);
			fprintf(stderr, "rank %d: %s: expected a failure saying '%s'\n", rank, fc->name,
				fc->fails_with);
			failures++;
		} else {
			printf("rank %d: %s: ok (fails as it must)\n", rank, fc->name);
		}
		tpf_diag_free(fd);
		goto out;
	}
	if (run_model(m, c, &got, d)) {
		tpf_diag_print(d, stderr);
		CHECK(!"the fused graph runs");
		goto out;
	}
	CHECK(got.n == want.n);
	for (size_t i = 0; i < got.n && i < want.n; i++) {
		CHECK(got.numel[i] == want.numel[i]);
		if (got.numel[i] != want.numel[i])
			continue;
		double e = max_err(got.data[i], want.data[i], got.numel[i], 1.0);
		double e_bad = max_err(got.data[i], want.data[i], got.numel[i], 1.01);
		if (!(e <= (fc->exact ? 0.0 : 1e-5)) || !(e_bad > 1e-5)) {
			fprintf(stderr, "rank %d: %s: output %zu: error %.3g (scaled by 1.01: %.3g)\n",
				rank, fc->name, i, e, e_bad);
			failures++;
		}
	}
	printf("rank %d: %s: ok\n", rank, fc->name);
out:
	outputs_free(&want);
	outputs_free(&got);
	tpf_model_free(m);
	tpf_diag_free(d);
	free(text);
}

int main(int argc, char **argv)
{
	if (!tpf_comm_launched_by_mpi()) {
		char *args[] = {"mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", argv[0], NULL};
		execvp("mpirun", args);
		printf("mpirun not found: skipped\n");
		return 77;
	}
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_comm *c = NULL;
	if (tpf_comm_create_mpi(&(struct tpf_comm_options){.timeout_s = 60}, &c, d)) {
		tpf_diag_print(d, stderr);
		return 1;
	}
	rank = c->rank;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		run_case(&cases[i], c, c->world);
	tpf_comm_free(c);
	tpf_diag_free(d);
	return failures ? 1 : 0;
}
