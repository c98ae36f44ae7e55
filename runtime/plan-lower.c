/* SPDX-License-Identifier: MIT */
/* Lowering: every node of the schedule becomes plan constants (folded on
 * the host), views of its input's buffer, or steps (kernels of its phases
 * and communicator steps), with concrete shapes. */
#include "plan-internal.h"

#ifdef TPF_HAVE_CUDA
#include "cuda/tpf-cuda.h"
#endif

#include <string.h>

/* ------------------------------------------------------------ lowering */

/* ShardedRMSNorm's part form: whether tensor i's part [start, end) is this
 * rank's shard of width d (the kernels apply the same rule). */
static int sharded_part_own(const struct tpf_node *n, size_t i, int64_t d, int64_t rank)
{
	const struct tpf_attr *as = tpf_node_attr(n, "part_starts"), *ae = tpf_node_attr(n, "part_ends");
	if (!as || !ae || as->kind != TPF_ATTR_INTS || ae->kind != TPF_ATTR_INTS || i >= as->n || i >= ae->n)
		return 0;
	return as->ints[i] == rank * d && ae->ints[i] - as->ints[i] == d;
}

static void fill_ktensor(const struct tpf_plan *p, int idx, struct tpf_ktensor *t)
{
	if (idx < 0) {
		memset(t, 0, sizeof(*t));
		t->rank = -1;
		return;
	}
	*t = p->values[idx].t;
	t->host = p->values[idx].known || p->values[idx].host_hint ? p->values[idx].host : NULL;
	t->data = (void *)t->host;
}

static const struct tpf_kernel *pick_kernel(const struct tpf_plan *p, enum tpf_backend b,
					    const struct tpf_node *n, enum tpf_kernel_phase ph,
					    const int *ins, size_t n_in, const int *outs, size_t n_out,
					    struct tpf_diag *d)
{
	const struct tpf_kernel *any = tpf_kernel_find_any(b, n->op, ph);
	if (!any) {
		tpf_rt_node_fail(d, n, TPF_ERR_UNSUPPORTED, "no %s kernel for this op%s%s", tpf_backend_name(b),
		      ph ? " phase " : "", ph ? tpf_kernel_phase_name(ph) : "");
		return NULL;
	}
	int key_idx = any->key_input < 0 ? (n_out ? outs[0] : -1)
					 : ((size_t)any->key_input < n_in ? ins[any->key_input] : -1);
	enum tpf_dtype key = key_idx >= 0 ? p->values[key_idx].t.dtype : TPF_DTYPE_UNDEFINED;
	const struct tpf_kernel *k = tpf_kernel_find(b, n->op, ph, key);
	if (!k)
		tpf_rt_node_fail(d, n, TPF_ERR_UNSUPPORTED, "no %s kernel for dtype %s", tpf_backend_name(b),
		      tpf_dtype_name(key));
	return k;
}

/* Picks the kernel of n's phase ph for these operands and adds its step. */
static enum tpf_status add_kernel_step(struct tpf_plan *p, enum tpf_backend b, const struct tpf_node *n,
				       enum tpf_kernel_phase ph, const int *ins, size_t n_in,
				       const int *outs, size_t n_out, struct tpf_diag *d)
{
	const struct tpf_kernel *k = pick_kernel(p, b, n, ph, ins, n_in, outs, n_out, d);
	if (!k)
		return TPF_ERR_UNSUPPORTED;
	return tpf_rt_add_step(p, RT_STEP_KERNEL, n, k, ph, ins, n_in, outs, n_out) < 0 ? TPF_ERR_NOMEM
										      : TPF_OK;
}

static int add_temp(struct tpf_plan *p, const struct tpf_node *n, const char *suffix,
		    enum tpf_dtype dt, int rank, const int64_t *dims)
{
	int idx = tpf_rt_add_value(p, NULL, suffix);
	if (idx < 0)
		return -1;
	struct rt_value *r = &p->values[idx];
	r->t.dtype = dt;
	r->t.rank = rank;
	if (rank > 0)
		memcpy(r->t.dims, dims, sizeof(int64_t) * (size_t)rank);
	if (tpf_ktensor_finish(&r->t))
		return -1;
	return idx;
}

static enum tpf_status check_group(const struct tpf_plan *p, const struct tpf_node *n,
				   struct tpf_diag *d)
{
	int64_t gs = tpf_node_attr_int(n, "group_size", 0);
	if (gs > 0 && gs != p->opt.world)
		return tpf_rt_node_fail(d, n, TPF_ERR_INVALID, "group_size is %lld but the run has %d ranks",
			     (long long)gs, p->opt.world);
	return TPF_OK;
}

/* ------------------------------------------------------------ FP8 GEMMs
 * ai.tpfuse.MatMulFp8 (passes/lower.c): the product on the codes, its
 * weight [K, N] a constant that the kernels read transposed, [N, K]: the
 * plan makes that copy once per weight (shared through the session's
 * store). */

static int known_index(const struct tpf_plan *p, const struct tpf_value *v)
{
	int i = v ? tpf_rt_value_index(p, v) : -1;
	return i >= 0 && p->values[i].known && p->values[i].host ? i : -1;
}

static enum tpf_status lower_fp8_matmul(struct tpf_plan *p, const struct tpf_node *n, const int *ins,
					const int *outs, struct tpf_diag *d)
{
	int xq = ins[0], w = known_index(p, n->inputs[1]), sx = ins[2], sw = ins[3];
	if (w < 0 || p->values[w].t.rank != 2 || sx < 0 || sw < 0)
		return tpf_rt_node_fail(d, n, TPF_ERR_UNSUPPORTED, "W must be a constant [K, N] and the scales given");
	int64_t K = p->values[w].t.dims[0], N = p->values[w].t.dims[1];
	const struct tpf_ktensor *xt = &p->values[xq].t;
	if (xt->dtype != TPF_DTYPE_FLOAT8E4M3FN || xt->rank < 1 || xt->dims[xt->rank - 1] != K)
		return tpf_rt_node_fail(d, n, TPF_ERR_INVALID, "fp8 operand '%s' is not FLOAT8E4M3FN [..., %lld]",
			     n->inputs[0]->name, (long long)K);
	int64_t tdims[2] = {N, K};
	int wt = add_temp(p, n, "weight.fp8.transposed", TPF_DTYPE_FLOAT8E4M3FN, 2, tdims);
	if (wt < 0)
		return TPF_ERR_NOMEM;
	struct rt_value *t = &p->values[wt];
	const uint8_t *src = p->values[w].host;
	size_t bytes = (size_t)(N * K);
	struct tpf_const_store *cs = tpf_rt_shared_store(p, w);
	struct tpf_const_key key = {.src = src, .rows = K, .cols = N, .elem_bytes = 1, .kind = TPF_CS_FP8_TRANSPOSED};
	t->known = 1;
	t->host = tpf_const_store_derived(cs, &key);
	t->lasting = t->host != NULL;
	if (!t->host) {
		uint8_t *dst = t->host = tpf_malloc(bytes);
		if (!dst)
			return TPF_ERR_NOMEM;
		t->owns_host = 1;
		for (int64_t k0 = 0; k0 < K; k0 += 32) /* 32 x 32 tiles */
			for (int64_t n0 = 0; n0 < N; n0 += 32)
				for (int64_t k = k0; k < k0 + 32 && k < K; k++)
					for (int64_t j = n0; j < n0 + 32 && j < N; j++)
						dst[j * K + k] = src[k * N + j];
		tpf_rt_share_derived(cs, &key, t, bytes);
	}
	int fins[4] = {xq, wt, sx, sw};
	return add_kernel_step(p, p->opt.backend, n, TPF_PHASE_MAIN, fins, 4, outs, 1, d);
}

/* ------------------------------------------------------------ packed weights
 * MatMul(a, w) with w a known 2-D weight [K, N] and few rows of a: the CUDA
 * backend's small-M kernel streams w in column tiles (each block one tile
 * over the whole of K), and reads those at more of the memory's bandwidth
 * when each tile is one contiguous run (2x H100, Llama-3-8B gate/up at one
 * row: 2.80 against 2.60 TB/s, docs/gpu.md).  The plan packs such a
 * weight as [ceil(N / TW), K, TW] on the host (once per weight and width)
 * and the product reads the packed copy (TPF_PHASE_MATMUL_TILED); w itself
 * goes to the device only if another step reads it.  TPF_GEMV_TILED=0
 * turns this off; TPF_GEMV_TILED=16 or 32 forces that tile width, and on
 * the CPU backend packs every such product (its kernel unpacks: tests). */
static enum tpf_status lower_main(struct tpf_plan *p, const struct tpf_node *n, const int *ins, const int *outs,
				  struct tpf_diag *d);

/* The tile width of n's packed product (MatMul, or GatedMatMul: the output
 * half the product's columns), else 0. */
static int tiled_width(const struct tpf_plan *p, const struct tpf_node *n, const int *ins, const int *outs)
{
	const int64_t per_col = n->op == TPF_OP_TPF_GATED_MATMUL ? 2 : 1;
	const long long env = tpf_env_int("TPF_GEMV_TILED", -1); /* -1: chosen below */
	int forced = env > 0 ? (int)env : 0;
	if (env == 0 || n->n_inputs != 2 || n->n_outputs != 1 || ins[0] < 0 || outs[0] < 0)
		return 0;
	int w = known_index(p, n->inputs[1]);
	if (w < 0 || p->values[w].t.rank != 2 || p->values[ins[0]].known)
		return 0;
	const struct tpf_ktensor *a = &p->values[ins[0]].t, *b = &p->values[w].t, *y = &p->values[outs[0]].t;
	int64_t K = b->dims[0], N = b->dims[1];
	if (a->rank < 1 || a->dims[a->rank - 1] != K || K < 1 || N < 1 || a->dtype != b->dtype ||
	    y->dtype != b->dtype || y->rank < 1 || y->dims[y->rank - 1] * per_col != N)
		return 0;
#ifdef TPF_HAVE_CUDA
	if (p->opt.backend == TPF_BACKEND_CUDA) {
		int tw = tpf_cuda_gemv_tile_cols(b->dtype, a->numel / K, K, N);
		return tw && forced ? forced : tw;
	}
#endif
	if (forced)
		return tpf_kernel_find(p->opt.backend, TPF_OP_MATMUL, TPF_PHASE_MATMUL_TILED, b->dtype) ? forced : 0;
	return 0;
}

/* The copy of known weight w packed in column tiles of width tw (gated:
 * by tpf_gemv_pack_gated), -1 when there is none. */
static int find_packed(const struct tpf_plan *p, int w, int tw, int gated)
{
	for (size_t i = 0; i < p->n_values; i++)
		if (p->values[i].packed_tw == tw && p->values[i].packed_src == w && p->values[i].packed_gated == gated)
			return (int)i;
	return -1;
}

/* That copy, made once; -1 when it cannot be made (out of host memory:
 * the caller keeps the row-major product). */
static int packed_weight(struct tpf_plan *p, const struct tpf_node *n, int w, int tw, int gated)
{
	int wp = w >= 0 ? find_packed(p, w, tw, gated) : -1;
	if (wp >= 0 || w < 0)
		return wp;
	const struct tpf_ktensor bt = p->values[w].t; /* add_temp may move the values array */
	const void *src = p->values[w].host;
	int64_t dims[3] = {(bt.dims[1] + tw - 1) / tw, bt.dims[0], tw};
	size_t es = bt.numel ? bt.nbytes / (size_t)bt.numel : 0;
	size_t bytes = (size_t)dims[0] * (size_t)dims[1] * (size_t)tw * es;
	struct tpf_const_store *cs = tpf_rt_shared_store(p, w);
	struct tpf_const_key key = {.src = src, .rows = bt.dims[0], .cols = bt.dims[1], .elem_bytes = (int)es,
				    .kind = gated ? TPF_CS_PACKED_GATED : TPF_CS_PACKED, .param = tw};
	void *host = tpf_const_store_derived(cs, &key);
	int made = !host;
	if (made)
		host = es ? tpf_malloc(bytes) : NULL;
	wp = host ? add_temp(p, n, gated ? "weight.tiled.gated" : "weight.tiled", bt.dtype, 3, dims) : -1;
	if (wp < 0) {
		if (made)
			tpf_free(host);
		return -1;
	}
	struct rt_value *t = &p->values[wp];
	t->host = host;
	t->owns_host = made;
	t->lasting = !made;
	t->known = 1;
	t->packed_tw = tw;
	t->packed_src = w;
	t->packed_gated = gated;
	if (!made)
		return wp;
	if (gated)
		tpf_gemv_pack_gated(src, t->host, bt.dims[0], bt.dims[1] / 2, tw, es);
	else
		tpf_gemv_pack(src, t->host, bt.dims[0], bt.dims[1], tw, es);
	tpf_rt_share_derived(cs, &key, t, bytes);
	return wp;
}

static enum tpf_status lower_tiled_matmul(struct tpf_plan *p, const struct tpf_node *n, const int *ins,
					  const int *outs, int tw, struct tpf_diag *d)
{
	int wp = packed_weight(p, n, known_index(p, n->inputs[1]), tw, 0);
	if (wp < 0)
		return lower_main(p, n, ins, outs, d);
	int tins[2] = {ins[0], wp};
	return add_kernel_step(p, p->opt.backend, n, TPF_PHASE_MATMUL_TILED, tins, 2, outs, 1, d);
}

/* ai.tpfuse.GatedMatMul(x, W) (passes/lower.c), W the known merged gate/up
 * weight [K, 2F]: when the packed product takes it (tiled_width), the
 * activation is folded into the product's epilogue (the gated-matmul-tiled
 * kernel), W packed so that each tile holds the gate and up columns of the
 * same outputs; else the product into a temporary [..., 2F], then the
 * activation on it (the two steps of the MatMul and the GatedActivation it
 * stands for). */
static enum tpf_status lower_gated_matmul(struct tpf_plan *p, const struct tpf_node *n, const int *ins,
					  const int *outs, struct tpf_diag *d)
{
	enum tpf_status st;
	int w = known_index(p, n->inputs[1]);
	int tw = w >= 0 ? tiled_width(p, n, ins, outs) : 0;
	int64_t N = w >= 0 ? p->values[w].t.dims[1] : 0;
	if (tw && N % 2 == 0 && (N / 2) % (tw / 2) == 0 &&
	    tpf_kernel_find(p->opt.backend, n->op, TPF_PHASE_MATMUL_TILED, p->values[w].t.dtype)) {
		int wp = packed_weight(p, n, w, tw, 1);
		if (wp >= 0) {
			int tins[2] = {ins[0], wp};
			return add_kernel_step(p, p->opt.backend, n, TPF_PHASE_MATMUL_TILED, tins, 2, outs, 1, d);
		}
	}
	struct tpf_ktensor yt = p->values[outs[0]].t; /* add_temp may move the values array */
	if (yt.rank < 1)
		return tpf_rt_node_fail(d, n, TPF_ERR_INVALID, "Y must have rank >= 1");
	yt.dims[yt.rank - 1] *= 2;
	int prod = add_temp(p, n, "product", yt.dtype, yt.rank, yt.dims);
	if (prod < 0)
		return TPF_ERR_NOMEM;
	/* the product packed as a MatMul's when the fold does not take it
	 * (F not a multiple of tw / 2) but the packed product does */
	const struct tpf_kernel *tk =
		tw ? tpf_kernel_find(p->opt.backend, TPF_OP_MATMUL, TPF_PHASE_MATMUL_TILED, p->values[w].t.dtype)
		   : NULL;
	int wp = tk ? packed_weight(p, n, w, tw, 0) : -1;
	if (wp >= 0) {
		int tins[2] = {ins[0], wp};
		if (tpf_rt_add_step(p, RT_STEP_KERNEL, n, tk, TPF_PHASE_MATMUL_TILED, tins, 2, &prod, 1) < 0)
			return TPF_ERR_NOMEM;
	} else if ((st = add_kernel_step(p, p->opt.backend, n, TPF_PHASE_PRODUCT, ins, 2, &prod, 1, d))) {
		return st;
	}
	return add_kernel_step(p, p->opt.backend, n, TPF_PHASE_MAIN, &prod, 1, outs, 1, d);
}

/* One kernel step for node n (the common lowering). */
static enum tpf_status lower_main(struct tpf_plan *p, const struct tpf_node *n, const int *ins,
				  const int *outs, struct tpf_diag *d)
{
	return add_kernel_step(p, p->opt.backend, n, TPF_PHASE_MAIN, ins, n->n_inputs, outs, n->n_outputs, d);
}

/* Makes value out a view of value in's buffer (of the buffer in views),
 * `off` bytes further in. */
static void make_view(struct tpf_plan *p, int in, int out, size_t off)
{
	const struct rt_value *x = &p->values[in];
	struct rt_value *y = &p->values[out];
	y->alias = x->alias >= 0 ? x->alias : in;
	y->alias_off = x->alias_off + off;
	p->n_views++;
}

/* A Split whose pieces are contiguous runs of its input (every dim before
 * the axis is 1: a decode step's merged projection, one token) becomes views
 * of the input's buffer at the pieces' offsets, when every offset keeps the
 * arena's alignment (kernels may use vector loads).  1 when it did. */
static int split_views(struct tpf_plan *p, const struct tpf_node *n, const int *ins, const int *outs)
{
	const struct rt_value *x = ins[0] >= 0 ? &p->values[ins[0]] : NULL;
	size_t align = p->opt.alignment ? p->opt.alignment : 256;
	if (!x || x->known || x->t.rank < 1)
		return 0;
	int ax = (int)tpf_node_attr_int(n, "axis", 0);
	if (ax < 0)
		ax += x->t.rank;
	if (ax < 0 || ax >= x->t.rank)
		return 0;
	for (int i = 0; i < ax; i++)
		if (x->t.dims[i] != 1)
			return 0;
	if (x->t.numel <= 0 || x->t.nbytes % (size_t)x->t.numel)
		return 0; /* empty, or sub-byte elements */
	size_t esz = x->t.nbytes / (size_t)x->t.numel, inner = esz, off = 0;
	for (int i = ax + 1; i < x->t.rank; i++)
		inner *= (size_t)x->t.dims[i];
	for (size_t k = 0; k < n->n_outputs; k++) {
		if (outs[k] < 0)
			return 0;
		const struct rt_value *y = &p->values[outs[k]];
		if (y->t.rank != x->t.rank || y->t.dtype != x->t.dtype || (x->alias_off + off) % align)
			return 0;
		off += (size_t)y->t.dims[ax] * inner;
	}
	if (off > x->t.nbytes)
		return 0;
	off = 0;
	for (size_t k = 0; k < n->n_outputs; k++) {
		make_view(p, ins[0], outs[k], off);
		off += (size_t)p->values[outs[k]].t.dims[ax] * inner;
	}
	return 1;
}

/* A Transpose that moves only axes of size 1 (a decode step's
 * [batch, 1, heads, d] -> [batch, heads, 1, d]) leaves every element where
 * it was: a view.  1 when it is one. */
static int transpose_view(struct tpf_plan *p, const struct tpf_node *n, const int *ins, const int *outs)
{
	if (ins[0] < 0 || outs[0] < 0)
		return 0;
	const struct rt_value *x = &p->values[ins[0]];
	int rank = x->t.rank;
	if (x->known || rank < 1 || rank > 32 || x->t.nbytes != p->values[outs[0]].t.nbytes)
		return 0;
	const struct tpf_attr *pa = tpf_node_attr(n, "perm");
	if (pa && (pa->kind != TPF_ATTR_INTS || pa->n != (size_t)rank))
		return 0;
	unsigned seen = 0;
	int last = -1;
	for (int i = 0; i < rank; i++) {
		int a = pa ? tpf_norm_axis(pa->ints[i], rank) : rank - 1 - i;
		if (a < 0 || (seen >> a) & 1u)
			return 0;
		seen |= 1u << a;
		if (x->t.dims[a] == 1)
			continue;
		if (a < last)
			return 0; /* two axes of more than one element swap */
		last = a;
	}
	make_view(p, ins[0], outs[0], 0);
	return 1;
}

/* A Slice whose output is one contiguous run of its input's bytes (the
 * last position of [1, S, H], or all of [B, 1, H]) becomes a view at the
 * run's offset, when every start of the cut axis keeps the arena's
 * alignment (its stride a multiple of it): whether it is a view then
 * depends on shapes only, never on the starts, which may differ between
 * ranks (ranks whose plans differ in steps would choose their collectives'
 * paths apart).  Its starts, ends, axes and steps must be known when the
 * plan is built.  1 when it is one. */
static int slice_view(struct tpf_plan *p, const struct tpf_node *n, const int *ins, const int *outs)
{
	if (ins[0] < 0 || outs[0] < 0 || n->n_inputs > 5)
		return 0;
	const struct rt_value *x = &p->values[ins[0]];
	size_t align = p->opt.alignment ? p->opt.alignment : 256;
	if (x->known || x->t.rank < 1 || x->t.numel <= 0 || x->t.nbytes % (size_t)x->t.numel)
		return 0; /* empty, or sub-byte elements */
	struct tpf_ktensor in[5];
	for (size_t i = 0; i < n->n_inputs; i++) {
		fill_ktensor(p, ins[i], &in[i]);
		if (i && ins[i] >= 0 && !p->values[ins[i]].known)
			return 0;
	}
	struct tpf_kernel_call c = {.node = n, .opset = p->opset, .in = in, .n_in = n->n_inputs,
				    .rank = p->opt.rank, .world = p->opt.world};
	int64_t start[TPF_KERNEL_MAX_RANK], step[TPF_KERNEL_MAX_RANK], od[TPF_KERNEL_MAX_RANK];
	if (tpf_slice_resolve(&c, start, step, od))
		return 0;
	const struct rt_value *y = &p->values[outs[0]];
	if (y->t.rank != x->t.rank)
		return 0;
	/* inner axes whole (in order), then one axis cut to a run, then outer
	 * axes of one element */
	int k = x->t.rank - 1;
	for (; k >= 0 && od[k] == x->t.dims[k] && (step[k] == 1 || od[k] <= 1); k--)
		if (od[k] != y->t.dims[k])
			return 0;
	if (k >= 0 && step[k] != 1 && od[k] > 1)
		return 0;
	for (int i = k - 1; i >= 0; i--)
		if (od[i] != 1)
			return 0;
	size_t esz = x->t.nbytes / (size_t)x->t.numel, stride = esz, off = 0;
	for (int i = x->t.rank - 1; i >= 0; i--) {
		if (od[i] != y->t.dims[i])
			return 0;
		if (i == k && stride % align)
			return 0; /* some start of the cut axis is not aligned */
		off += (size_t)start[i] * stride;
		stride *= (size_t)x->t.dims[i];
	}
	if (x->alias_off % align || off + y->t.nbytes > x->t.nbytes)
		return 0;
	make_view(p, ins[0], outs[0], off);
	return 1;
}

/* Every use of v but by `self` reads its shape only. */
static int only_shape_readers(const struct tpf_value *v, const struct tpf_node *self)
{
	for (size_t u = 0; u < v->n_uses; u++)
		if (v->uses[u].node != self && (!v->uses[u].node || v->uses[u].node->op != TPF_OP_SHAPE))
			return 0;
	return !tpf_value_is_graph_output(v);
}

/* A TensorScatter whose cache is a graph input read by this node alone
 * (Shape nodes aside) updates it in place: the output is the input's
 * buffer (a session keeping the input between runs keeps the update). */
static void scatter_in_place(struct tpf_plan *p, const struct tpf_node *n, const int *ins, const int *outs)
{
	if (ins[0] >= 0 && outs[0] >= 0 && p->values[ins[0]].is_input && p->values[ins[0]].alias < 0 &&
	    !p->values[ins[0]].known && only_shape_readers(n->inputs[0], n) &&
	    p->values[ins[0]].t.nbytes == p->values[outs[0]].t.nbytes) {
		make_view(p, ins[0], outs[0], 0); /* the input is no view itself */
		p->values[ins[0]].written = 1;
	}
}

/* The ops whose outputs may be views of their input's buffer (no step):
 * 1 when n's are. */
static int views_of_input(struct tpf_plan *p, const struct tpf_node *n, const int *ins, const int *outs)
{
	switch (n->op) {
	case TPF_OP_RESHAPE:
	case TPF_OP_SQUEEZE:
	case TPF_OP_UNSQUEEZE:
	case TPF_OP_FLATTEN:
	case TPF_OP_IDENTITY:
		/* the same bytes under another shape */
		if (ins[0] >= 0 && outs[0] >= 0 && !p->values[ins[0]].known &&
		    p->values[ins[0]].t.nbytes == p->values[outs[0]].t.nbytes) {
			make_view(p, ins[0], outs[0], 0);
			return 1;
		}
		return 0;
	case TPF_OP_SPLIT:
		return split_views(p, n, ins, outs);
	case TPF_OP_TRANSPOSE:
		return transpose_view(p, n, ins, outs);
	case TPF_OP_SLICE:
		return slice_view(p, n, ins, outs);
	default:
		return 0;
	}
}

static enum tpf_status lower_node(struct tpf_plan *p, const struct tpf_node *n, const int *ins,
				  const int *outs, struct tpf_diag *d)
{
	enum tpf_backend b = p->opt.backend;
	enum tpf_status st;
	size_t n_in = n->n_inputs, n_out = n->n_outputs;
	int tmp_ins[64];

	if (tpf_op_has_trait(n->op, TPF_OP_TRAIT_COLLECTIVE) && (st = check_group(p, n, d)))
		return st;
	if (views_of_input(p, n, ins, outs))
		return TPF_OK;
	switch (n->op) {
	case TPF_OP_TENSOR_SCATTER:
		scatter_in_place(p, n, ins, outs);
		return lower_main(p, n, ins, outs, d);
	case TPF_OP_MS_ALLREDUCE:
		return tpf_rt_add_step(p, RT_STEP_ALLREDUCE, n, NULL, TPF_PHASE_MAIN, ins, 1, outs, 1) < 0
			       ? TPF_ERR_NOMEM
			       : TPF_OK;
	case TPF_OP_MS_ALLTOALL: {
		const struct rt_value *x = &p->values[ins[0]];
		if (x->t.rank < 1 || x->t.dims[0] % p->opt.world)
			return tpf_rt_node_fail(d, n, TPF_ERR_INVALID, "dim 0 (%lld) does not split into %d ranks",
				     x->t.rank ? (long long)x->t.dims[0] : 0LL, p->opt.world);
		return tpf_rt_add_step(p, RT_STEP_ALLTOALL, n, NULL, TPF_PHASE_MAIN, ins, 1, outs, 1) < 0
			       ? TPF_ERR_NOMEM
			       : TPF_OK;
	}
	case TPF_OP_MS_ALLGATHER: {
		const struct rt_value *y = &p->values[outs[0]];
		int ax = tpf_norm_axis(tpf_node_attr_int(n, "axis", 0), y->t.rank);
		if (ax < 0)
			return tpf_rt_node_fail(d, n, TPF_ERR_INVALID, "axis out of range");
		if (tpf_dims_prod(y->t.dims, 0, ax) == 1 || p->opt.world == 1)
			return tpf_rt_add_step(p, RT_STEP_ALLGATHER, n, NULL, TPF_PHASE_MAIN, ins, 1, outs, 1) < 0
				       ? TPF_ERR_NOMEM
				       : TPF_OK;
		int64_t flat = y->t.numel;
		int tmp = add_temp(p, n, "gathered", y->t.dtype, 1, &flat);
		if (tmp < 0)
			return TPF_ERR_NOMEM;
		if (tpf_rt_add_step(p, RT_STEP_ALLGATHER, n, NULL, TPF_PHASE_MAIN, ins, 1, &tmp, 1) < 0)
			return TPF_ERR_NOMEM;
		return add_kernel_step(p, b, n, TPF_PHASE_GATHER_REORDER, &tmp, 1, outs, 1, d);
	}
	case TPF_OP_TPF_ALLREDUCE_RMS_NORM:
	case TPF_OP_TPF_ALLREDUCE_LAYER_NORM:
	case TPF_OP_TPF_ALLREDUCE_RMS_NORM_QUANT: {
		/* copied: add_temp may move the values array */
		struct tpf_ktensor xt = p->values[ins[0]].t;
		if (n_in > 64)
			return tpf_rt_node_fail(d, n, TPF_ERR_LIMIT, "too many inputs");
		int tmp = add_temp(p, n, "reduced", xt.dtype, xt.rank, xt.dims);
		if (tmp < 0)
			return TPF_ERR_NOMEM;
		if (tpf_rt_add_step(p, RT_STEP_ALLREDUCE, n, NULL, TPF_PHASE_MAIN, ins, 1, &tmp, 1) < 0)
			return TPF_ERR_NOMEM;
		memcpy(tmp_ins, ins, n_in * sizeof(int));
		tmp_ins[0] = tmp;
		return add_kernel_step(p, b, n, TPF_PHASE_POST_REDUCE, tmp_ins, n_in, outs, n_out, d);
	}
	case TPF_OP_TPF_SHARDED_RMS_NORM: {
		if (n_in < 2 || n_in % 2 || n_in > 62)
			return tpf_rt_node_fail(d, n, TPF_ERR_UNSUPPORTED, "expects n inputs and n gammas, got %zu inputs", n_in);
		const struct rt_value *x = &p->values[ins[0]];
		int64_t cols = x->t.rank ? x->t.dims[x->t.rank - 1] : 1;
		int64_t dims[2] = {cols ? x->t.numel / cols : 0, (int64_t)(n_in / 2)};
		/* the part form (docs/ops.md) exchanges one more float, the ranks
		 * whose parts are their own shards; the others gather below */
		int parts = tpf_node_attr(n, "part_starts") != NULL, own = 1;
		int64_t flat = dims[0] * dims[1] + 1;
		for (size_t i = 0; parts && i < n_in / 2; i++) {
			const struct rt_value *xi = &p->values[ins[i]];
			int64_t d = xi->t.rank ? xi->t.dims[xi->t.rank - 1] : 1;
			int64_t rk = p->opt.rank > 0 ? p->opt.rank : 0;
			own &= sharded_part_own(n, i, d, rk);
		}
		int part = parts ? add_temp(p, n, "sumsq", TPF_DTYPE_FLOAT, 1, &flat)
				 : add_temp(p, n, "sumsq", TPF_DTYPE_FLOAT, 2, dims);
		if (part < 0)
			return TPF_ERR_NOMEM;
		if ((st = add_kernel_step(p, b, n, TPF_PHASE_SUMSQ, ins, n_in, &part, 1, d)))
			return st;
		int sum = parts ? add_temp(p, n, "sumsq.reduced", TPF_DTYPE_FLOAT, 1, &flat)
				: add_temp(p, n, "sumsq.reduced", TPF_DTYPE_FLOAT, 2, dims);
		if (sum < 0)
			return TPF_ERR_NOMEM;
		if (tpf_rt_add_step(p, RT_STEP_ALLREDUCE, n, NULL, TPF_PHASE_MAIN, &part, 1, &sum, 1) < 0)
			return TPF_ERR_NOMEM;
		if (!own) {
			/* another part: first the kernel checks that no rank took
			 * the exchange alone (the ranks' collectives would part
			 * ways), then each input is gathered (rank after rank) and
			 * the part normalized from the gathered values */
			int none = -1;
			if ((st = add_kernel_step(p, b, n, TPF_PHASE_MAIN, &sum, 1, &none, 0, d)))
				return st;
			for (size_t i = 0; i < n_in / 2; i++) {
				int64_t all = p->values[ins[i]].t.numel * (p->opt.world > 0 ? p->opt.world : 1);
				int g = add_temp(p, n, "gathered", p->values[ins[i]].t.dtype, 1, &all);
				if (g < 0)
					return TPF_ERR_NOMEM;
				if (tpf_rt_add_step(p, RT_STEP_ALLGATHER, n, NULL, TPF_PHASE_MAIN, &ins[i], 1, &g, 1) < 0)
					return TPF_ERR_NOMEM;
				tmp_ins[i] = g;
			}
			memcpy(tmp_ins + n_in / 2, ins + n_in / 2, (n_in / 2) * sizeof(int));
			tmp_ins[n_in] = sum;
			return add_kernel_step(p, b, n, TPF_PHASE_MAIN, tmp_ins, n_in + 1, outs, n_out, d);
		}
		memcpy(tmp_ins, ins, n_in * sizeof(int));
		tmp_ins[n_in] = sum;
		return add_kernel_step(p, b, n, TPF_PHASE_NORMALIZE, tmp_ins, n_in + 1, outs, n_out, d);
	}
	case TPF_OP_TPF_GATED_MATMUL:
		return lower_gated_matmul(p, n, ins, outs, d);
	case TPF_OP_TPF_MATMUL_FP8:
		return lower_fp8_matmul(p, n, ins, outs, d);
	case TPF_OP_MATMUL: {
		int tw = tiled_width(p, n, ins, outs);
		return tw ? lower_tiled_matmul(p, n, ins, outs, tw, d) : lower_main(p, n, ins, outs, d);
	}
	default:
		return lower_main(p, n, ins, outs, d);
	}
}

/* Runs phase ph of a node on the host now (n_in operands): its outputs
 * become plan constants. */
static enum tpf_status fold_phase(struct tpf_plan *p, const struct tpf_node *n, enum tpf_kernel_phase ph,
				  struct tpf_ktensor *in, size_t n_in, struct tpf_ktensor *out, const int *outs,
				  struct tpf_diag *d)
{
	const struct tpf_kernel *k = NULL;
	const struct tpf_kernel *any = tpf_kernel_find_any(TPF_BACKEND_CPU, n->op, ph);
	if (any) {
		enum tpf_dtype key = any->key_input < 0 ? out[0].dtype
				     : (size_t)any->key_input < n_in ? in[any->key_input].dtype
								     : TPF_DTYPE_UNDEFINED;
		k = tpf_kernel_find(TPF_BACKEND_CPU, n->op, ph, key);
	}
	if (!k)
		return TPF_ERR_UNSUPPORTED; /* not foldable: lowered as a step instead */
	for (size_t i = 0; i < n->n_outputs; i++) {
		if (outs[i] < 0)
			continue;
		struct rt_value *r = &p->values[outs[i]];
		r->host = tpf_calloc(r->t.nbytes ? r->t.nbytes : 1, 1);
		if (!r->host)
			return TPF_ERR_NOMEM;
		r->owns_host = 1;
		out[i].data = r->host;
		out[i].host = r->host;
	}
	struct tpf_kernel_call c = {.node = n, .opset = p->opset, .in = in, .n_in = n_in,
				    .out = out, .n_out = n->n_outputs, .rank = p->opt.rank,
				    .world = p->opt.world, .diag = d};
	enum tpf_status st = k->run(&c);
	if (st)
		return st;
	for (size_t i = 0; i < n->n_outputs; i++)
		if (outs[i] >= 0)
			p->values[outs[i]].known = 1;
	p->n_folded++;
	return TPF_OK;
}

static enum tpf_status fold_node(struct tpf_plan *p, const struct tpf_node *n, struct tpf_ktensor *in,
				 struct tpf_ktensor *out, const int *outs, struct tpf_diag *d)
{
	return fold_phase(p, n, TPF_PHASE_MAIN, in, n->n_inputs, out, outs, d);
}

/* A GatedMatMul of known operands: the product folded into a plan
 * constant [..., 2F], then the activation of it (its two kernels). */
static enum tpf_status fold_gated_matmul(struct tpf_plan *p, const struct tpf_node *n, struct tpf_ktensor *in,
					 struct tpf_ktensor *out, const int *outs, struct tpf_diag *d)
{
	struct tpf_ktensor t = out[0];
	if (outs[0] < 0 || t.rank < 1)
		return TPF_ERR_UNSUPPORTED;
	t.dims[t.rank - 1] *= 2;
	int prod = add_temp(p, n, "product", t.dtype, t.rank, t.dims);
	if (prod < 0)
		return TPF_ERR_NOMEM;
	t = p->values[prod].t;
	enum tpf_status st = fold_phase(p, n, TPF_PHASE_PRODUCT, in, 2, &t, &prod, d);
	if (st)
		return st;
	return fold_phase(p, n, TPF_PHASE_MAIN, &t, 1, out, outs, d);
}

/* Moves the entries of `from` into `to` (errors that are not about
 * unsupported ops) and clears `from`. */
static void move_diag(struct tpf_diag *from, struct tpf_diag *to)
{
	for (size_t i = 0; from && i < from->count; i++)
		tpf_diag_add(to, from->entries[i].severity, "%s", from->entries[i].text);
	tpf_diag_clear(from);
}

static const char *last_message(const struct tpf_diag *d)
{
	return d && d->count ? d->entries[d->count - 1].text : "";
}

/* Shapes of a node's outputs.  The op's record computes them (integer
 * values known here included); Range of floats and OneHot's float depth
 * are the two shapes that depend on float values, which records do not
 * see: they are computed here from the host copies. */
static enum tpf_status infer_node(const struct tpf_plan *p, const struct tpf_node *n, struct tpf_kernel_call *c,
				  struct tpf_diag *d)
{
	if (n->op == TPF_OP_RANGE && c->n_in == 3 && c->n_out == 1 && !tpf_dtype_is_integral(c->in[0].dtype) &&
	    c->in[0].host && c->in[1].host && c->in[2].host) {
		for (int k = 0; k < 3; k++)
			if (c->in[k].numel != 1 || c->in[k].dtype != c->in[0].dtype)
				return tpf_rt_node_fail(d, n, TPF_ERR_INVALID, "start, limit and delta must be scalars of one dtype");
		int64_t len = tpf_range_length(c->in[0].dtype, c->in[0].host, c->in[1].host, c->in[2].host);
		if (len < 0)
			return tpf_rt_node_fail(d, n, TPF_ERR_INVALID, "delta is 0, a bound is not finite or the range is too long");
		c->out[0].dtype = c->in[0].dtype;
		c->out[0].rank = 1;
		c->out[0].dims[0] = len;
		return TPF_OK;
	}
	if (n->op == TPF_OP_ONE_HOT && c->n_in == 3 && c->in[1].host && c->in[1].numel == 1 &&
	    !tpf_dtype_is_integral(c->in[1].dtype)) {
		/* the depth as an int64 scalar (ONNX casts it) */
		struct tpf_ktensor in[3] = {c->in[0], c->in[1], c->in[2]};
		double dv = tpf_elem_load(c->in[1].dtype, c->in[1].host, 0);
		int64_t depth = dv >= 1 && dv < 9.0e18 ? (int64_t)dv : 0;
		in[1].dtype = TPF_DTYPE_INT64;
		in[1].rank = 0;
		in[1].host = in[1].data = &depth;
		tpf_ktensor_finish(&in[1]);
		struct tpf_kernel_call c2 = *c;
		c2.in = in;
		return tpf_rt_infer(n, &c2, d);
	}
	(void)p;
	return tpf_rt_infer(n, c, d);
}

static int same_outputs(const struct tpf_ktensor *a, const struct tpf_ktensor *b, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (a[i].dtype != b[i].dtype || a[i].rank != b[i].rank)
			return 0;
		for (int k = 0; k < a[i].rank && k < TPF_KERNEL_MAX_RANK; k++)
			if (a[i].dims[k] != b[i].dims[k])
				return 0;
	}
	return 1;
}

/* Marks the hinted inputs (small graph inputs whose values were given to
 * the shape function) whose values this node's shapes or kernel depend
 * on: inference again without each must give the same shapes. */
static enum tpf_status mark_value_deps(struct tpf_plan *p, const struct tpf_node *n, struct tpf_ktensor *in,
				       const int *ins, const struct tpf_ktensor *out)
{
	struct tpf_ktensor *alt = NULL;
	struct tpf_diag *scratch = NULL;
	enum tpf_status st = TPF_OK;
	for (size_t i = 0; i < n->n_inputs; i++) {
		struct rt_value *r = ins[i] >= 0 ? &p->values[ins[i]] : NULL;
		if (!r || !r->host_hint || r->known || r->value_dep)
			continue;
		if (tpf_op_host_input(n->op, i)) {
			/* a kernel reads it: it stays with the plan even where the
			 * output shapes do not change with it */
			r->value_dep = 1;
			continue;
		}
		if (!alt && !(alt = tpf_calloc(n->n_outputs + 1, sizeof(*alt)))) {
			st = TPF_ERR_NOMEM;
			break;
		}
		if (!scratch && !(scratch = tpf_diag_create())) {
			st = TPF_ERR_NOMEM;
			break;
		}
		for (size_t o = 0; o < n->n_outputs; o++) {
			memset(&alt[o], 0, sizeof(alt[o]));
			alt[o].rank = -1;
		}
		struct tpf_ktensor saved = in[i];
		in[i].host = NULL;
		in[i].data = NULL;
		struct tpf_kernel_call c = {.node = n, .opset = p->opset, .in = in, .n_in = n->n_inputs, .out = alt,
					    .n_out = n->n_outputs, .rank = p->opt.rank, .world = p->opt.world,
					    .diag = scratch};
		enum tpf_status ist = infer_node(p, n, &c, scratch);
		in[i] = saved;
		tpf_diag_clear(scratch);
		/* omitted outputs keep rank -1 in both */
		if (ist || !same_outputs(alt, out, n->n_outputs))
			r->value_dep = 1;
	}
	tpf_free(alt);
	tpf_diag_free(scratch);
	return st;
}

/* The key operand's dtype of a node whose inputs have no shapes (a node
 * after one the runtime cannot run): the graph's. */
static void check_poisoned_node(struct tpf_plan *p, const struct tpf_node *n, struct tpf_unsupported *u)
{
	enum tpf_kernel_phase ph[2];
	size_t np = tpf_rt_node_phases(n, ph);
	for (size_t k = 0; k < np; k++)
		tpf_rt_check_kernel(u, p->opt.backend, n, ph[k]);
}

/* lower_graph's operand arrays, grown for the widest node, its list of
 * what the backend cannot run and its scratch diagnostic. */
struct lower_state {
	struct tpf_ktensor *in, *out;
	int *ins, *outs;
	size_t cap;
	struct tpf_unsupported *u;
	struct tpf_diag *scratch;
};

static int grow_operands(struct lower_state *ls, size_t need)
{
	if (need <= ls->cap)
		return 0;
	tpf_free(ls->in);
	tpf_free(ls->out);
	tpf_free(ls->ins);
	tpf_free(ls->outs);
	ls->cap = need * 2;
	ls->in = tpf_calloc(ls->cap, sizeof(*ls->in));
	ls->out = tpf_calloc(ls->cap, sizeof(*ls->out));
	ls->ins = tpf_calloc(ls->cap, sizeof(int));
	ls->outs = tpf_calloc(ls->cap, sizeof(int));
	return ls->in && ls->out && ls->ins && ls->outs ? 0 : -1;
}

/* n's outputs have no shapes: later readers are listed, not run. */
static void poison_outputs(struct tpf_plan *p, const struct tpf_node *n, const int *outs)
{
	for (size_t i = 0; i < n->n_outputs; i++)
		if (outs[i] >= 0)
			p->values[outs[i]].poisoned = 1;
}

/* n's outputs as new plan values, its inputs as those bound already;
 * *poisoned when an input has no shape. */
static enum tpf_status bind_operands(struct tpf_plan *p, const struct tpf_node *n, struct lower_state *ls,
				     int *poisoned, struct tpf_diag *d)
{
	*poisoned = 0;
	for (size_t i = 0; i < n->n_outputs; i++) {
		ls->outs[i] = -1;
		if (!n->outputs[i])
			continue;
		ls->outs[i] = tpf_rt_add_value(p, n->outputs[i], NULL);
		if (ls->outs[i] < 0)
			return TPF_ERR_NOMEM;
	}
	for (size_t i = 0; i < n->n_inputs; i++) {
		ls->ins[i] = -1;
		if (!n->inputs[i])
			continue;
		ls->ins[i] = tpf_rt_value_index(p, n->inputs[i]);
		if (ls->ins[i] < 0)
			return tpf_rt_node_fail(d, n, TPF_ERR_INVALID, "input '%s' is not defined", n->inputs[i]->name);
		*poisoned |= p->values[ls->ins[i]].poisoned;
	}
	return TPF_OK;
}

/* A node the runtime does not run, or one after such a node: listed. */
static void list_unrunnable(struct tpf_plan *p, const struct tpf_node *n, struct lower_state *ls)
{
	if (!tpf_rt_runnable_op(n)) {
		const struct tpf_value *v = n->n_inputs ? n->inputs[0] : NULL;
		int vi = v ? tpf_rt_value_index(p, v) : -1;
		enum tpf_dtype dt = vi >= 0 && !p->values[vi].poisoned ? p->values[vi].t.dtype
				    : v ? tpf_value_dtype(v) : TPF_DTYPE_UNDEFINED;
		tpf_unsupported_add(ls->u, n, dt,
				    n->n_implicit && n->op != TPF_OP_UNKNOWN
					    ? "nodes with subgraphs are not supported by the runtime"
					    : "not supported by the runtime");
	} else {
		check_poisoned_node(p, n, ls->u);
	}
	poison_outputs(p, n, ls->outs);
}

/* A Constant: its tensor is a plan constant (the model's bytes). */
static enum tpf_status lower_constant(struct tpf_plan *p, const struct tpf_node *n, struct lower_state *ls,
				      struct tpf_diag *d)
{
	const struct tpf_tensor *t = n->n_outputs ? tpf_value_constant(n->outputs[0]) : NULL;
	if (!t || t->dtype == TPF_DTYPE_STRING || (!t->data && t->nbytes) || t->rank > TPF_KERNEL_MAX_RANK ||
	    ls->outs[0] < 0) {
		tpf_unsupported_add(ls->u, n, t ? t->dtype : TPF_DTYPE_UNDEFINED,
				    "this form of Constant is not supported");
		poison_outputs(p, n, ls->outs);
		return TPF_OK;
	}
	struct rt_value *r = &p->values[ls->outs[0]];
	r->t.dtype = t->dtype;
	r->t.rank = t->rank;
	if (t->rank > 0)
		memcpy(r->t.dims, t->dims, sizeof(int64_t) * (size_t)t->rank);
	if (tpf_ktensor_finish(&r->t) || r->t.nbytes != t->nbytes)
		return tpf_rt_node_fail(d, n, TPF_ERR_INVALID, "value has %zu bytes for its shape", t->nbytes);
	r->known = 1;
	r->host = (void *)t->data;
	/* a 'value' tensor, or the one tpf_value_constant made once for
	 * value_float and the like */
	r->lasting = 1; /* the Constant's tensor is the model's */
	p->n_folded++;
	return TPF_OK;
}

/* The input operands as kernel tensors (host copies where known);
 * *all_known when every input is known.  0 when an input is a string
 * tensor (listed, n's outputs poisoned). */
static int fill_inputs(struct tpf_plan *p, const struct tpf_node *n, struct lower_state *ls, int *all_known)
{
	*all_known = 1;
	for (size_t i = 0; i < n->n_inputs; i++) {
		if (ls->ins[i] < 0) {
			fill_ktensor(p, -1, &ls->in[i]);
			continue;
		}
		if (p->values[ls->ins[i]].t.dtype == TPF_DTYPE_UNDEFINED) {
			tpf_unsupported_add(ls->u, n, TPF_DTYPE_STRING, "string tensors are not supported");
			poison_outputs(p, n, ls->outs);
			return 0;
		}
		fill_ktensor(p, ls->ins[i], &ls->in[i]);
		*all_known &= p->values[ls->ins[i]].known;
	}
	return 1;
}

/* The output shapes of n into its plan values (*out_elems: their
 * elements); *listed when n cannot run (a form or a value-dependent shape
 * the runtime refuses: listed with the others, later nodes are checked
 * too). */
static enum tpf_status infer_outputs(struct tpf_plan *p, const struct tpf_node *n, struct lower_state *ls,
				     int *listed, size_t *out_elems, struct tpf_diag *d)
{
	struct tpf_ktensor *out = ls->out;
	*listed = 0;
	for (size_t i = 0; i < n->n_outputs; i++) {
		memset(&out[i], 0, sizeof(out[i]));
		out[i].rank = -1;
	}
	struct tpf_kernel_call c = {.node = n, .opset = p->opset, .in = ls->in, .n_in = n->n_inputs,
				    .out = out, .n_out = n->n_outputs, .rank = p->opt.rank,
				    .world = p->opt.world, .diag = ls->scratch};
	enum tpf_status st = infer_node(p, n, &c, ls->scratch);
	if (st == TPF_ERR_UNSUPPORTED) {
		const struct tpf_value *v = n->n_inputs ? n->inputs[0] : NULL;
		tpf_unsupported_add(ls->u, n,
				    v && ls->ins[0] >= 0 ? p->values[ls->ins[0]].t.dtype : TPF_DTYPE_UNDEFINED,
				    last_message(ls->scratch));
		tpf_diag_clear(ls->scratch);
		poison_outputs(p, n, ls->outs);
		*listed = 1;
		return TPF_OK;
	}
	if (st) {
		move_diag(ls->scratch, d);
		return st;
	}
	*out_elems = 0;
	for (size_t i = 0; i < n->n_outputs; i++) {
		int o = ls->outs[i];
		if (o < 0)
			continue;
		if (out[i].rank < 0 || out[i].rank > TPF_KERNEL_MAX_RANK || tpf_ktensor_finish(&out[i]))
			return tpf_rt_node_fail(d, n, TPF_ERR_LIMIT, "output %zu has no valid shape (overflow or rank)", i);
		p->values[o].t = out[i];
		p->values[o].t.data = NULL;
		p->values[o].t.host = NULL;
		*out_elems += (size_t)out[i].numel;
	}
	return mark_value_deps(p, n, ls->in, ls->ins, out);
}

/* n folded on the host when its inputs are known (and its outputs small),
 * else its steps. */
static enum tpf_status fold_or_lower(struct tpf_plan *p, const struct tpf_node *n, struct lower_state *ls,
				     int all_known, size_t out_elems, struct tpf_diag *d)
{
	enum tpf_status st;
	size_t fold_max = p->opt.fold_max_elements ? p->opt.fold_max_elements : 65536;
	int gated = n->op == TPF_OP_TPF_GATED_MATMUL; /* the product's elements count */
	/* (MatMulFp8's kernels read the weight transposed: lower_fp8_matmul) */
	if ((all_known || n->op == TPF_OP_SHAPE || n->op == TPF_OP_SIZE) &&
	    !tpf_op_has_trait(n->op, TPF_OP_TRAIT_COLLECTIVE) && n->op != TPF_OP_TPF_MATMUL_FP8 &&
	    (gated ? 2 : 1) * out_elems <= fold_max) {
		st = gated ? fold_gated_matmul(p, n, ls->in, ls->out, ls->outs, ls->scratch)
			   : fold_node(p, n, ls->in, ls->out, ls->outs, ls->scratch);
		if (st == TPF_OK)
			return TPF_OK;
		if (st != TPF_ERR_UNSUPPORTED) {
			move_diag(ls->scratch, d);
			return st;
		}
		tpf_diag_clear(ls->scratch);
	}
	st = lower_node(p, n, ls->ins, ls->outs, ls->scratch);
	if (st == TPF_ERR_UNSUPPORTED) {
		/* no kernel: listed; the outputs have shapes, planning goes on */
		enum tpf_kernel_phase ph[2];
		const struct tpf_kernel *any;
		enum tpf_dtype dt = TPF_DTYPE_UNDEFINED;
		if (tpf_rt_node_phases(n, ph) && (any = tpf_kernel_find_any(p->opt.backend, n->op, ph[0]))) {
			int k = any->key_input < 0 ? ls->outs[0]
				: (size_t)any->key_input < n->n_inputs ? ls->ins[any->key_input] : -1;
			dt = k >= 0 ? p->values[k].t.dtype : TPF_DTYPE_UNDEFINED;
		} else if (n->n_inputs && ls->ins[0] >= 0) {
			dt = p->values[ls->ins[0]].t.dtype;
		}
		tpf_unsupported_add(ls->u, n, dt, last_message(ls->scratch));
		tpf_diag_clear(ls->scratch);
		return TPF_OK;
	}
	move_diag(ls->scratch, d); /* the error, or notes if any */
	return st;
}

static enum tpf_status lower_one(struct tpf_plan *p, const struct tpf_node *n, struct lower_state *ls,
				 struct tpf_diag *d)
{
	enum tpf_status st;
	int poisoned, all_known, listed;
	size_t out_elems = 0;
	if (grow_operands(ls, (n->n_inputs > n->n_outputs ? n->n_inputs : n->n_outputs) + 2))
		return TPF_ERR_NOMEM;
	if ((st = bind_operands(p, n, ls, &poisoned, d)))
		return st;
	if (!tpf_rt_runnable_op(n) || poisoned) {
		list_unrunnable(p, n, ls);
		return TPF_OK;
	}
	if (n->op == TPF_OP_CONSTANT)
		return lower_constant(p, n, ls, d);
	if (!fill_inputs(p, n, ls, &all_known))
		return TPF_OK;
	if ((st = infer_outputs(p, n, ls, &listed, &out_elems, d)) || listed)
		return st;
	return fold_or_lower(p, n, ls, all_known, out_elems, d);
}

enum tpf_status tpf_rt_lower_graph(struct tpf_plan *p, const struct tpf_node **order, size_t n_order,
				   struct tpf_diag *d)
{
	enum tpf_status st = TPF_OK;
	struct lower_state ls = {.u = tpf_unsupported_create(), .scratch = tpf_diag_create()};
	if (!ls.u || !ls.scratch)
		st = TPF_ERR_NOMEM;
	for (size_t oi = 0; oi < n_order && !st; oi++)
		st = lower_one(p, order[oi], &ls, d);
	if (!st)
		st = tpf_unsupported_report(ls.u, p->opt.backend, d);
	if (!st) {
		/* hints that no shape or kernel depends on are not plan constants:
		 * kernels never read them (they change from run to run) */
		for (size_t i = 0; i < p->n_values; i++) {
			struct rt_value *r = &p->values[i];
			if (r->host_hint && !r->value_dep)
				r->host_hint = 0;
		}
	}
	if (st == TPF_ERR_NOMEM && d && !d->error_count)
		tpf_diag_fail(d, st, "out of memory while building the plan");
	tpf_unsupported_free(ls.u);
	tpf_diag_free(ls.scratch);
	tpf_free(ls.in);
	tpf_free(ls.out);
	tpf_free(ls.ins);
	tpf_free(ls.outs);
	return st;
}
