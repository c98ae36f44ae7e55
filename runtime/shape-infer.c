/* SPDX-License-Identifier: MIT */
/* Concrete output shapes and dtypes of every op the runtime supports, from
 * the bound input shapes and, where an op's result shape depends on
 * values (Reshape, Slice, Expand, TopK's K, ...), from the host copies of
 * inputs that were known when the plan was built. */
#include "runtime-internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static enum tpf_status fail(const struct tpf_node *n, struct tpf_diag *d, enum tpf_status st,
			    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static enum tpf_status fail(const struct tpf_node *n, struct tpf_diag *d, enum tpf_status st,
			    const char *fmt, ...)
{
	char msg[512], who[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	tpf_diag_add(d, TPF_SEV_ERROR, "%s: %s", tpf_node_describe(n, who, sizeof(who)), msg);
	return st;
}

static void set_shape(struct tpf_ktensor *t, enum tpf_dtype dt, int rank, const int64_t *dims)
{
	t->dtype = dt;
	t->rank = rank;
	for (int i = 0; i < rank; i++)
		t->dims[i] = dims[i];
}

static void same_as(struct tpf_ktensor *t, const struct tpf_ktensor *x, enum tpf_dtype dt)
{
	set_shape(t, dt, x->rank, x->dims);
}

static const struct tpf_ktensor *in_opt(const struct tpf_kernel_call *c, size_t i)
{
	return i < c->n_in && c->in[i].rank >= 0 && c->in[i].dtype != TPF_DTYPE_UNDEFINED ? &c->in[i]
											  : NULL;
}

/* numpy broadcasting of several shapes into out */
static int broadcast(const struct tpf_ktensor *const *ins, size_t n, struct tpf_ktensor *out)
{
	int rank = 0;
	for (size_t k = 0; k < n; k++)
		if (ins[k]->rank > rank)
			rank = ins[k]->rank;
	out->rank = rank;
	for (int d = 0; d < rank; d++) {
		int64_t dim = 1;
		for (size_t k = 0; k < n; k++) {
			int id = d - (rank - ins[k]->rank);
			if (id < 0)
				continue;
			int64_t v = ins[k]->dims[id];
			if (v == dim || v == 1)
				continue;
			if (dim != 1)
				return -1;
			dim = v;
		}
		out->dims[d] = dim;
	}
	return 0;
}

/* Integer values of a known operand; -1 when unknown. */
static int known_ints(const struct tpf_ktensor *t, int64_t *vals, int max)
{
	return tpf_kread_ints(t, vals, max);
}

/* Axes from input i (opset >= from_opset) or the attribute "axes". */
static int read_axes(const struct tpf_node *n, const struct tpf_kernel_call *c, size_t i,
		     int64_t *axes, int *count)
{
	const struct tpf_ktensor *t = in_opt(c, i);
	*count = 0;
	if (t) {
		int k = known_ints(t, axes, TPF_KERNEL_MAX_RANK);
		if (k < 0)
			return -1;
		*count = k;
		return 0;
	}
	const struct tpf_attr *a = tpf_node_attr(n, "axes");
	if (a) {
		if (a->n > TPF_KERNEL_MAX_RANK)
			return -1;
		for (size_t k = 0; k < a->n; k++)
			axes[k] = a->ints[k];
		*count = (int)a->n;
	}
	return 0;
}

static enum tpf_dtype ir_dtype(const struct tpf_node *n, size_t i, enum tpf_dtype dflt)
{
	const struct tpf_value *v = i < n->n_outputs ? n->outputs[i] : NULL;
	if (v && v->type.kind == TPF_TYPE_TENSOR && v->type.dtype != TPF_DTYPE_UNDEFINED)
		return v->type.dtype;
	return dflt;
}

static enum tpf_status infer_reshape(const struct tpf_node *n, struct tpf_kernel_call *c,
				     struct tpf_diag *d)
{
	const struct tpf_ktensor *x = &c->in[0];
	int64_t shape[TPF_KERNEL_MAX_RANK];
	int r = c->n_in > 1 ? known_ints(&c->in[1], shape, TPF_KERNEL_MAX_RANK) : -1;
	if (r < 0)
		return fail(n, d, TPF_ERR_UNSUPPORTED,
			    "the target shape must be known when the plan is built (constant or "
			    "computed from shapes), with at most %d dims", TPF_KERNEL_MAX_RANK);
	int allowzero = (int)tpf_node_attr_int(n, "allowzero", 0);
	int infer = -1;
	int64_t prod = 1;
	for (int i = 0; i < r; i++) {
		if (shape[i] == 0 && !allowzero) {
			if (i >= x->rank)
				return fail(n, d, TPF_ERR_INVALID, "shape[%d] = 0 copies a dim the input lacks", i);
			shape[i] = x->dims[i];
		}
		if (shape[i] == -1) {
			if (infer >= 0)
				return fail(n, d, TPF_ERR_INVALID, "more than one -1 in the target shape");
			infer = i;
			continue;
		}
		if (shape[i] < 0)
			return fail(n, d, TPF_ERR_INVALID, "negative dim %lld in the target shape",
				    (long long)shape[i]);
		prod *= shape[i];
	}
	if (infer >= 0) {
		if (prod == 0 || x->numel % prod)
			return fail(n, d, TPF_ERR_INVALID, "cannot infer the -1 dim: %lld elements into %lld",
				    (long long)x->numel, (long long)prod);
		shape[infer] = x->numel / prod;
		prod *= shape[infer];
	}
	if (prod != x->numel)
		return fail(n, d, TPF_ERR_INVALID, "target shape has %lld elements, the input %lld",
			    (long long)prod, (long long)x->numel);
	set_shape(&c->out[0], x->dtype, r, shape);
	return TPF_OK;
}

static enum tpf_status infer_squeeze(const struct tpf_node *n, struct tpf_kernel_call *c,
				     struct tpf_diag *d, int unsqueeze)
{
	const struct tpf_ktensor *x = &c->in[0];
	int64_t axes[TPF_KERNEL_MAX_RANK], dims[TPF_KERNEL_MAX_RANK];
	int na;
	if (read_axes(n, c, 1, axes, &na))
		return fail(n, d, TPF_ERR_UNSUPPORTED, "axes must be known when the plan is built");
	if (unsqueeze) {
		int r = x->rank + na;
		int mark[TPF_KERNEL_MAX_RANK] = {0};
		if (r > TPF_KERNEL_MAX_RANK)
			return fail(n, d, TPF_ERR_LIMIT, "rank %d exceeds %d", r, TPF_KERNEL_MAX_RANK);
		for (int i = 0; i < na; i++) {
			int a = tpf_norm_axis(axes[i], r);
			if (a < 0 || mark[a])
				return fail(n, d, TPF_ERR_INVALID, "bad or repeated axis %lld", (long long)axes[i]);
			mark[a] = 1;
		}
		for (int i = 0, k = 0; i < r; i++)
			dims[i] = mark[i] ? 1 : x->dims[k++];
		set_shape(&c->out[0], x->dtype, r, dims);
		return TPF_OK;
	}
	int mark[TPF_KERNEL_MAX_RANK] = {0};
	for (int i = 0; i < na; i++) {
		int a = tpf_norm_axis(axes[i], x->rank);
		if (a < 0 || x->dims[a] != 1)
			return fail(n, d, TPF_ERR_INVALID, "axis %lld is not a dim of size 1", (long long)axes[i]);
		mark[a] = 1;
	}
	int r = 0;
	for (int i = 0; i < x->rank; i++)
		if (!(na ? mark[i] : x->dims[i] == 1))
			dims[r++] = x->dims[i];
	set_shape(&c->out[0], x->dtype, r, dims);
	return TPF_OK;
}

static enum tpf_status infer_reduce(const struct tpf_node *n, struct tpf_kernel_call *c,
				    struct tpf_diag *d, enum tpf_dtype out_dt)
{
	const struct tpf_ktensor *x = &c->in[0];
	int64_t axes[TPF_KERNEL_MAX_RANK], dims[TPF_KERNEL_MAX_RANK];
	int na, red[TPF_KERNEL_MAX_RANK];
	if (n->op == TPF_OP_ARGMAX) {
		axes[0] = tpf_node_attr_int(n, "axis", 0);
		na = 1;
	} else if (read_axes(n, c, 1, axes, &na)) {
		return fail(n, d, TPF_ERR_UNSUPPORTED, "axes must be known when the plan is built");
	}
	int keep = (int)tpf_node_attr_int(n, "keepdims", 1);
	int noop = na == 0 && tpf_node_attr_int(n, "noop_with_empty_axes", 0);
	for (int i = 0; i < x->rank; i++)
		red[i] = na == 0 && !noop;
	for (int i = 0; i < na; i++) {
		int a = tpf_norm_axis(axes[i], x->rank);
		if (a < 0)
			return fail(n, d, TPF_ERR_INVALID, "axis %lld out of range", (long long)axes[i]);
		red[a] = 1;
	}
	int r = 0;
	for (int i = 0; i < x->rank; i++) {
		if (!red[i])
			dims[r++] = x->dims[i];
		else if (keep)
			dims[r++] = 1;
	}
	set_shape(&c->out[0], out_dt, r, dims);
	return TPF_OK;
}

static enum tpf_status infer_matmul(const struct tpf_node *n, struct tpf_kernel_call *c,
				    struct tpf_diag *d)
{
	const struct tpf_ktensor *a = &c->in[0], *b = &c->in[1];
	if (a->rank < 1 || b->rank < 1)
		return fail(n, d, TPF_ERR_INVALID, "operands must have rank >= 1");
	int64_t K = a->dims[a->rank - 1];
	int64_t Kb = b->rank == 1 ? b->dims[0] : b->dims[b->rank - 2];
	if (K != Kb)
		return fail(n, d, TPF_ERR_INVALID, "inner dims differ: A[..., %lld] x B[%lld, ...]",
			    (long long)K, (long long)Kb);
	struct tpf_ktensor ba = {0}, bb = {0}, by = {0};
	ba.rank = a->rank > 2 ? a->rank - 2 : 0;
	bb.rank = b->rank > 2 ? b->rank - 2 : 0;
	memcpy(ba.dims, a->dims, sizeof(int64_t) * (size_t)ba.rank);
	memcpy(bb.dims, b->dims, sizeof(int64_t) * (size_t)bb.rank);
	const struct tpf_ktensor *v[2] = {&ba, &bb};
	if (broadcast(v, 2, &by))
		return fail(n, d, TPF_ERR_INVALID, "batch dims do not broadcast");
	int r = by.rank;
	if (a->rank > 1)
		by.dims[r++] = a->dims[a->rank - 2];
	if (b->rank > 1)
		by.dims[r++] = b->dims[b->rank - 1];
	if (r > TPF_KERNEL_MAX_RANK)
		return fail(n, d, TPF_ERR_LIMIT, "rank too large");
	set_shape(&c->out[0], a->dtype, r, by.dims);
	return TPF_OK;
}

static enum tpf_status infer_split(const struct tpf_node *n, struct tpf_kernel_call *c,
				   struct tpf_diag *d)
{
	const struct tpf_ktensor *x = &c->in[0];
	int ax = tpf_norm_axis(tpf_node_attr_int(n, "axis", 0), x->rank);
	if (ax < 0)
		return fail(n, d, TPF_ERR_INVALID, "axis out of range");
	size_t k = n->n_outputs;
	int64_t sizes[256];
	if (k > 256)
		return fail(n, d, TPF_ERR_LIMIT, "more than 256 outputs");
	const struct tpf_attr *sa = tpf_node_attr(n, "split");
	const struct tpf_ktensor *st = in_opt(c, 1);
	if (st) {
		if (known_ints(st, sizes, 256) != (int)k)
			return fail(n, d, TPF_ERR_INVALID, "split must be known and have one entry per output");
	} else if (sa) {
		if (sa->n != k)
			return fail(n, d, TPF_ERR_INVALID, "split has %zu entries for %zu outputs", sa->n, k);
		for (size_t i = 0; i < k; i++)
			sizes[i] = sa->ints[i];
	} else {
		int64_t dim = x->dims[ax];
		int64_t chunk = (dim + (int64_t)k - 1) / (int64_t)k;
		if (!tpf_node_attr(n, "num_outputs") && dim % (int64_t)k)
			return fail(n, d, TPF_ERR_INVALID, "dim %lld does not split into %zu equal parts",
				    (long long)dim, k);
		for (size_t i = 0; i < k; i++) {
			int64_t left = dim - chunk * (int64_t)i;
			sizes[i] = left < chunk ? (left > 0 ? left : 0) : chunk;
		}
	}
	int64_t total = 0;
	for (size_t i = 0; i < k; i++) {
		if (sizes[i] < 0)
			return fail(n, d, TPF_ERR_INVALID, "negative split size");
		total += sizes[i];
		if (n->outputs[i] || c->out[i].rank != -1) {
			same_as(&c->out[i], x, x->dtype);
			c->out[i].dims[ax] = sizes[i];
		}
	}
	if (total != x->dims[ax])
		return fail(n, d, TPF_ERR_INVALID, "split sizes add up to %lld, the dim is %lld",
			    (long long)total, (long long)x->dims[ax]);
	return TPF_OK;
}

static enum tpf_status infer_quant_fused(const struct tpf_node *n, struct tpf_kernel_call *c,
					 struct tpf_diag *d)
{
	const struct tpf_ktensor *x = &c->in[0];
	const char *quant = tpf_node_attr_string(n, "quant", "fp8");
	int fp4 = strncmp(quant, "nvfp4", 5) == 0;
	same_as(&c->out[0], x, ir_dtype(n, 0, fp4 ? TPF_DTYPE_FLOAT4E2M1 : TPF_DTYPE_FLOAT8E4M3FN));
	if (c->n_out > 1)
		same_as(&c->out[1], x, x->dtype);
	if (c->n_out > 2 && n->outputs[2]) {
		int64_t bs = tpf_node_attr_int(n, "block_size", 16);
		same_as(&c->out[2], x, ir_dtype(n, 2, TPF_DTYPE_FLOAT8E4M3FN));
		if (x->rank < 1 || bs <= 0 || x->dims[x->rank - 1] % bs)
			return fail(n, d, TPF_ERR_INVALID, "last dim is not a multiple of block_size");
		c->out[2].dims[x->rank - 1] /= bs;
	}
	if (c->n_out > 3)
		same_as(&c->out[3], x, ir_dtype(n, 3, x->dtype));
	return TPF_OK;
}

enum tpf_status tpf_rt_infer(const struct tpf_node *n, struct tpf_kernel_call *c,
			     struct tpf_diag *d)
{
	const struct tpf_ktensor *x = c->n_in ? &c->in[0] : NULL;
	struct tpf_ktensor *y = c->n_out ? &c->out[0] : NULL;
	const struct tpf_ktensor *v[8];
	int64_t dims[TPF_KERNEL_MAX_RANK];
	if (!y)
		return fail(n, d, TPF_ERR_INVALID, "no outputs");
	/* required operands present */
	const struct tpf_op_info *info = tpf_op_info(n->op);
	for (int i = 0; info && i < info->min_inputs && (size_t)i < c->n_in; i++)
		if (!in_opt(c, (size_t)i))
			return fail(n, d, TPF_ERR_INVALID, "required input %d is missing", i);
	switch (n->op) {
	case TPF_OP_ADD:
	case TPF_OP_SUB:
	case TPF_OP_MUL:
	case TPF_OP_DIV:
	case TPF_OP_POW:
	case TPF_OP_EQUAL:
	case TPF_OP_GREATER:
	case TPF_OP_LESS:
	case TPF_OP_MAX:
	case TPF_OP_MIN:
	case TPF_OP_WHERE:
	case TPF_OP_TPF_SIGMOID_GATE_ADD: {
		if (c->n_in > 8)
			return fail(n, d, TPF_ERR_LIMIT, "more than 8 operands");
		for (size_t i = 0; i < c->n_in; i++)
			v[i] = &c->in[i];
		if (broadcast(v, c->n_in, y)) {
			char buf[256] = "";
			size_t k = 0;
			for (size_t i = 0; i < c->n_in && k < sizeof(buf) - 32; i++) {
				k += (size_t)snprintf(buf + k, sizeof(buf) - k, "%s[", i ? " " : "");
				for (int j = 0; j < c->in[i].rank && k < sizeof(buf) - 32; j++)
					k += (size_t)snprintf(buf + k, sizeof(buf) - k, "%s%lld", j ? "," : "",
							      (long long)c->in[i].dims[j]);
				k += (size_t)snprintf(buf + k, sizeof(buf) - k, "]");
			}
			return fail(n, d, TPF_ERR_INVALID, "shapes %s do not broadcast", buf);
		}
		if (n->op == TPF_OP_EQUAL || n->op == TPF_OP_GREATER || n->op == TPF_OP_LESS)
			y->dtype = TPF_DTYPE_BOOL;
		else if (n->op == TPF_OP_WHERE)
			y->dtype = c->in[1].dtype;
		else
			y->dtype = c->in[0].dtype;
		return TPF_OK;
	}
	case TPF_OP_SIGMOID:
	case TPF_OP_RELU:
	case TPF_OP_SQRT:
	case TPF_OP_RECIPROCAL:
	case TPF_OP_NEG:
	case TPF_OP_EXP:
	case TPF_OP_TANH:
	case TPF_OP_ERF:
	case TPF_OP_ABS:
	case TPF_OP_SIN:
	case TPF_OP_COS:
	case TPF_OP_NOT:
	case TPF_OP_IDENTITY:
	case TPF_OP_SOFTMAX:
	case TPF_OP_MS_ALLREDUCE:
	case TPF_OP_MS_ALLTOALL:
		same_as(y, x, x->dtype);
		return TPF_OK;
	case TPF_OP_CAST: {
		int64_t to = tpf_node_attr_int(n, "to", 0);
		if (!tpf_dtype_is_valid((int)to) || to == TPF_DTYPE_STRING)
			return fail(n, d, TPF_ERR_UNSUPPORTED, "cast to dtype %lld not supported", (long long)to);
		same_as(y, x, (enum tpf_dtype)to);
		return TPF_OK;
	}
	case TPF_OP_MS_ALLGATHER: {
		int ax = tpf_norm_axis(tpf_node_attr_int(n, "axis", 0), x->rank);
		if (ax < 0)
			return fail(n, d, TPF_ERR_INVALID, "axis out of range");
		same_as(y, x, x->dtype);
		y->dims[ax] *= c->world;
		return TPF_OK;
	}
	case TPF_OP_MATMUL:
		return infer_matmul(n, c, d);
	case TPF_OP_GEMM: {
		const struct tpf_ktensor *b = &c->in[1];
		if (x->rank != 2 || b->rank != 2)
			return fail(n, d, TPF_ERR_INVALID, "A and B must be 2-D");
		int ta = (int)tpf_node_attr_int(n, "transA", 0), tb = (int)tpf_node_attr_int(n, "transB", 0);
		dims[0] = ta ? x->dims[1] : x->dims[0];
		dims[1] = tb ? b->dims[0] : b->dims[1];
		set_shape(y, x->dtype, 2, dims);
		return TPF_OK;
	}
	case TPF_OP_REDUCE_MEAN:
	case TPF_OP_REDUCE_SUM:
	case TPF_OP_REDUCE_MAX:
		return infer_reduce(n, c, d, x->dtype);
	case TPF_OP_ARGMAX:
		return infer_reduce(n, c, d, TPF_DTYPE_INT64);
	case TPF_OP_TOPK: {
		int64_t k;
		if (known_ints(&c->in[1], &k, 1) != 1)
			return fail(n, d, TPF_ERR_UNSUPPORTED, "K must be known when the plan is built");
		int ax = tpf_norm_axis(tpf_node_attr_int(n, "axis", -1), x->rank);
		if (ax < 0 || k < 0 || k > x->dims[ax])
			return fail(n, d, TPF_ERR_INVALID, "axis out of range or K=%lld larger than the dim",
				    (long long)k);
		same_as(y, x, x->dtype);
		y->dims[ax] = k;
		if (c->n_out > 1) {
			same_as(&c->out[1], x, TPF_DTYPE_INT64);
			c->out[1].dims[ax] = k;
		}
		return TPF_OK;
	}
	case TPF_OP_RMS_NORMALIZATION:
	case TPF_OP_SIMPLIFIED_LAYER_NORMALIZATION:
	case TPF_OP_MS_SIMPLIFIED_LAYER_NORMALIZATION:
	case TPF_OP_LAYER_NORMALIZATION: {
		int ax = tpf_norm_axis(tpf_node_attr_int(n, "axis", -1), x->rank);
		if (ax < 0)
			return fail(n, d, TPF_ERR_INVALID, "axis out of range");
		same_as(y, x, x->dtype);
		for (size_t i = 1; i < c->n_out; i++) {
			same_as(&c->out[i], x, TPF_DTYPE_FLOAT);
			for (int k = ax; k < x->rank; k++)
				c->out[i].dims[k] = 1;
		}
		return TPF_OK;
	}
	case TPF_OP_MS_SKIP_SIMPLIFIED_LAYER_NORMALIZATION:
		same_as(y, x, x->dtype);
		for (size_t i = 1; i < c->n_out && i < 3; i++) {
			same_as(&c->out[i], x, TPF_DTYPE_FLOAT);
			if (x->rank)
				c->out[i].dims[x->rank - 1] = 1;
		}
		if (c->n_out > 3)
			same_as(&c->out[3], x, x->dtype);
		return TPF_OK;
	case TPF_OP_TPF_RMS_NORM:
	case TPF_OP_TPF_ALLREDUCE_RMS_NORM:
		/* RMSNorm's Y has gamma's type (docs/ops.md), as in ONNX */
		same_as(y, x, ir_dtype(n, 0, n->op == TPF_OP_TPF_RMS_NORM ? c->in[1].dtype : x->dtype));
		if (c->n_out > 1)
			same_as(&c->out[1], x, ir_dtype(n, 1, x->dtype));
		return TPF_OK;
	case TPF_OP_TPF_ALLREDUCE_RMS_NORM_QUANT:
		return infer_quant_fused(n, c, d);
	case TPF_OP_TPF_SHARDED_RMS_NORM:
		if (c->n_in != 2 * c->n_out)
			return fail(n, d, TPF_ERR_INVALID, "expects n inputs and n gammas for n outputs");
		for (size_t i = 0; i < c->n_out; i++)
			same_as(&c->out[i], &c->in[i], ir_dtype(n, i, c->in[i].dtype));
		return TPF_OK;
	case TPF_OP_RESHAPE:
		return infer_reshape(n, c, d);
	case TPF_OP_SQUEEZE:
		return infer_squeeze(n, c, d, 0);
	case TPF_OP_UNSQUEEZE:
		return infer_squeeze(n, c, d, 1);
	case TPF_OP_TRANSPOSE: {
		const struct tpf_attr *pa = tpf_node_attr(n, "perm");
		if (pa && pa->n != (size_t)x->rank)
			return fail(n, d, TPF_ERR_INVALID, "perm has %zu entries for rank %d", pa->n, x->rank);
		for (int i = 0; i < x->rank; i++) {
			int p = pa ? tpf_norm_axis(pa->ints[i], x->rank) : x->rank - 1 - i;
			if (p < 0)
				return fail(n, d, TPF_ERR_INVALID, "perm entry out of range");
			dims[i] = x->dims[p];
		}
		set_shape(y, x->dtype, x->rank, dims);
		return TPF_OK;
	}
	case TPF_OP_SLICE: {
		int64_t start[TPF_KERNEL_MAX_RANK], step[TPF_KERNEL_MAX_RANK];
		if (tpf_slice_resolve(c, start, step, dims))
			return fail(n, d, TPF_ERR_UNSUPPORTED,
				    "starts/ends/axes/steps must be valid and known when the plan is built");
		set_shape(y, x->dtype, x->rank, dims);
		return TPF_OK;
	}
	case TPF_OP_SPLIT:
		return infer_split(n, c, d);
	case TPF_OP_CONCAT: {
		int ax = tpf_norm_axis(tpf_node_attr_int(n, "axis", 0), x->rank);
		if (ax < 0)
			return fail(n, d, TPF_ERR_INVALID, "axis out of range");
		same_as(y, x, x->dtype);
		y->dims[ax] = 0;
		for (size_t i = 0; i < c->n_in; i++) {
			const struct tpf_ktensor *t = &c->in[i];
			if (t->rank != x->rank || t->dtype != x->dtype)
				return fail(n, d, TPF_ERR_INVALID, "input %zu differs in rank or dtype", i);
			for (int k = 0; k < x->rank; k++)
				if (k != ax && t->dims[k] != x->dims[k])
					return fail(n, d, TPF_ERR_INVALID, "input %zu differs in dim %d (%lld vs %lld)",
						    i, k, (long long)t->dims[k], (long long)x->dims[k]);
			y->dims[ax] += t->dims[ax];
		}
		return TPF_OK;
	}
	case TPF_OP_GATHER: {
		const struct tpf_ktensor *ix = &c->in[1];
		int ax = tpf_norm_axis(tpf_node_attr_int(n, "axis", 0), x->rank);
		int r = x->rank - 1 + ix->rank;
		if (ax < 0 || r > TPF_KERNEL_MAX_RANK)
			return fail(n, d, TPF_ERR_INVALID, "axis out of range or result rank too large");
		int k = 0;
		for (int i = 0; i < ax; i++)
			dims[k++] = x->dims[i];
		for (int i = 0; i < ix->rank; i++)
			dims[k++] = ix->dims[i];
		for (int i = ax + 1; i < x->rank; i++)
			dims[k++] = x->dims[i];
		set_shape(y, x->dtype, r, dims);
		return TPF_OK;
	}
	case TPF_OP_GATHER_ELEMENTS:
		same_as(y, &c->in[1], x->dtype);
		return TPF_OK;
	case TPF_OP_SCATTER_ELEMENTS:
		same_as(y, x, x->dtype);
		return TPF_OK;
	case TPF_OP_EXPAND: {
		struct tpf_ktensor s = {0};
		s.rank = known_ints(&c->in[1], s.dims, TPF_KERNEL_MAX_RANK);
		if (s.rank < 0)
			return fail(n, d, TPF_ERR_UNSUPPORTED, "shape must be known when the plan is built");
		v[0] = x;
		v[1] = &s;
		if (broadcast(v, 2, y))
			return fail(n, d, TPF_ERR_INVALID, "input does not broadcast to the given shape");
		y->dtype = x->dtype;
		return TPF_OK;
	}
	case TPF_OP_SHAPE: {
		int64_t r = x->rank, s = tpf_node_attr_int(n, "start", 0), e = tpf_node_attr_int(n, "end", r);
		s = s < 0 ? s + r : s;
		e = e < 0 ? e + r : e;
		s = s < 0 ? 0 : s > r ? r : s;
		e = e < 0 ? 0 : e > r ? r : e;
		dims[0] = e > s ? e - s : 0;
		set_shape(y, TPF_DTYPE_INT64, 1, dims);
		return TPF_OK;
	}
	case TPF_OP_CONSTANT_OF_SHAPE: {
		int r = known_ints(x, dims, TPF_KERNEL_MAX_RANK);
		if (r < 0)
			return fail(n, d, TPF_ERR_UNSUPPORTED, "shape must be known when the plan is built");
		const struct tpf_attr *a = tpf_node_attr(n, "value");
		set_shape(y, a && a->t ? a->t->dtype : TPF_DTYPE_FLOAT, r, dims);
		return TPF_OK;
	}
	case TPF_OP_QUANTIZE_LINEAR: {
		enum tpf_dtype dt = TPF_DTYPE_UINT8;
		const struct tpf_ktensor *zp = in_opt(c, 2);
		int64_t od = tpf_node_attr_int(n, "output_dtype", 0);
		if (zp)
			dt = zp->dtype;
		else if (od > 0 && tpf_dtype_is_valid((int)od))
			dt = (enum tpf_dtype)od;
		same_as(y, x, dt);
		return TPF_OK;
	}
	case TPF_OP_DEQUANTIZE_LINEAR: {
		int64_t od = tpf_node_attr_int(n, "output_dtype", 0);
		same_as(y, x, od > 0 && tpf_dtype_is_valid((int)od) ? (enum tpf_dtype)od : c->in[1].dtype);
		return TPF_OK;
	}
	case TPF_OP_TRT_FP4_DYNAMIC_QUANTIZE: {
		int64_t bs = tpf_node_attr_int(n, "block_size", 16);
		if (x->rank < 1 || bs <= 0 || x->dims[x->rank - 1] % bs)
			return fail(n, d, TPF_ERR_INVALID, "last dim is not a multiple of block_size %lld",
				    (long long)bs);
		same_as(y, x, TPF_DTYPE_FLOAT4E2M1);
		if (c->n_out > 1) {
			same_as(&c->out[1], x, ir_dtype(n, 1, TPF_DTYPE_FLOAT8E4M3FN));
			c->out[1].dims[x->rank - 1] /= bs;
		}
		return TPF_OK;
	}
	case TPF_OP_ATTENTION: {
		const struct tpf_ktensor *k = &c->in[1], *vv = &c->in[2], *pk = in_opt(c, 4);
		if (x->rank != 4 || k->rank != 4 || vv->rank != 4)
			return fail(n, d, TPF_ERR_UNSUPPORTED, "only 4-D Q, K, V are supported");
		if (c->n_out > 3)
			return fail(n, d, TPF_ERR_UNSUPPORTED, "qk_matmul_output is not supported");
		if (in_opt(c, 6))
			return fail(n, d, TPF_ERR_UNSUPPORTED, "nonpad_kv_seqlen is not supported");
		if (tpf_node_attr_int(n, "left_window_size", -1) >= 0 ||
		    tpf_node_attr_int(n, "right_window_size", -1) >= 0)
			return fail(n, d, TPF_ERR_UNSUPPORTED, "windowed attention is not supported");
		dims[0] = x->dims[0], dims[1] = x->dims[1], dims[2] = x->dims[2], dims[3] = vv->dims[3];
		set_shape(y, x->dtype, 4, dims);
		int64_t total = k->dims[2] + (pk ? pk->dims[2] : 0);
		for (size_t i = 1; i < c->n_out && i < 3; i++) {
			same_as(&c->out[i], i == 1 ? k : vv, (i == 1 ? k : vv)->dtype);
			c->out[i].dims[2] = total;
		}
		return TPF_OK;
	}
	case TPF_OP_TPF_PACK: {
		const struct tpf_attr *a = tpf_node_attr(n, "segments");
		int64_t total = 0;
		if (!a || a->kind != TPF_ATTR_INTS || a->n % 4)
			return fail(n, d, TPF_ERR_INVALID, "missing or malformed 'segments'");
		for (size_t i = 0; i < a->n; i += 4)
			if (a->ints[i + 2] + a->ints[i + 3] > total)
				total = a->ints[i + 2] + a->ints[i + 3];
		set_shape(y, x->dtype, 1, &total);
		return TPF_OK;
	}
	case TPF_OP_TPF_UNPACK: {
		const struct tpf_attr *ra = tpf_node_attr(n, "output_ranks");
		const struct tpf_attr *da = tpf_node_attr(n, "output_dims");
		if (!ra || !da || ra->n != c->n_out)
			return fail(n, d, TPF_ERR_INVALID, "output_ranks/output_dims missing or wrong length");
		size_t at = 0;
		for (size_t i = 0; i < c->n_out; i++) {
			int64_t r = ra->ints[i];
			if (r < 0 || r > TPF_KERNEL_MAX_RANK || at + (size_t)r > da->n)
				return fail(n, d, TPF_ERR_INVALID, "output_ranks/output_dims disagree");
			set_shape(&c->out[i], x->dtype, (int)r, da->ints + at);
			at += (size_t)r;
		}
		return TPF_OK;
	}
	default:
		return fail(n, d, TPF_ERR_UNSUPPORTED, "op %s%s%s is not supported by the runtime",
			    n->domain && *n->domain ? n->domain : "", n->domain && *n->domain ? "::" : "",
			    n->op_type);
	}
}
