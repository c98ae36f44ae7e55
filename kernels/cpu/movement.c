/* SPDX-License-Identifier: MIT */
/* Data movement: copies (Reshape, Identity, Squeeze, Unsqueeze), Transpose,
 * Slice, Split, Concat, Gather, GatherElements, ScatterElements, Expand,
 * Shape, ConstantOfShape, the AllGather reorder step, Pack and Unpack.
 * Byte-addressable dtypes only, except for whole-buffer copies. */
#include "cpu-kernels.h"
#include "op-geometry.h"

#include <string.h>

static enum tpf_status need_bytes(const struct tpf_kernel_call *c, enum tpf_dtype t)
{
	if (!tpf_elem_size(t))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "dtype %s not supported (sub-byte)",
				 tpf_dtype_name(t));
	return TPF_OK;
}

TPF_CPU_KERNEL(tpf_cpu_copy)
{
	if (c->in[0].nbytes != c->out[0].nbytes)
		return tpf_kfail(c, TPF_ERR_INVALID, "output size %zu differs from input size %zu",
				 c->out[0].nbytes, c->in[0].nbytes);
	if (c->out[0].data != c->in[0].data && c->out[0].nbytes)
		memmove(c->out[0].data, c->in[0].data, c->out[0].nbytes);
	return TPF_OK;
}

TPF_CPU_KERNEL(tpf_cpu_transpose)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_ktensor *y = &c->out[0];
	int64_t xs[TPF_KERNEL_MAX_RANK];
	TPF_KTRY(need_bytes(c, x->dtype));
	TPF_KTRY(tpf_transpose_strides(c, xs));
	/* y index -> x offset */
	struct tpf_bcast it;
	it.rank = y->rank;
	it.n = 1;
	it.off[0] = 0;
	for (int d = 0; d < y->rank; d++) {
		it.dims[d] = y->dims[d];
		it.idx[d] = 0;
		it.strides[0][d] = xs[d];
	}
	size_t es = tpf_elem_size(x->dtype);
	const char *src = x->data;
	char *dst = y->data;
	for (int64_t i = 0; i < y->numel; i++, tpf_bcast_next(&it))
		memcpy(dst + (size_t)i * es, src + (size_t)it.off[0] * es, es);
	return TPF_OK;
}

int tpf_slice_resolve(const struct tpf_kernel_call *c, int64_t *start, int64_t *step,
		      int64_t *out_dims)
{
	const struct tpf_ktensor *x = &c->in[0];
	int64_t st[TPF_KERNEL_MAX_RANK], en[TPF_KERNEL_MAX_RANK], ax[TPF_KERNEL_MAX_RANK],
		sp[TPF_KERNEL_MAX_RANK];
	int n, na, ns;
	for (int d = 0; d < x->rank; d++) {
		start[d] = 0;
		step[d] = 1;
		out_dims[d] = x->dims[d];
	}
	if (c->opset >= 10 || c->n_in >= 3) {
		if (c->n_in < 3)
			return -1;
		n = tpf_kread_ints(&c->in[1], st, TPF_KERNEL_MAX_RANK);
		if (n < 0 || tpf_kread_ints(&c->in[2], en, TPF_KERNEL_MAX_RANK) != n)
			return -1;
		na = c->n_in > 3 && c->in[3].data ? tpf_kread_ints(&c->in[3], ax, TPF_KERNEL_MAX_RANK) : -2;
		ns = c->n_in > 4 && c->in[4].data ? tpf_kread_ints(&c->in[4], sp, TPF_KERNEL_MAX_RANK) : -2;
		if (na == -1 || ns == -1)
			return -1;
	} else {
		const struct tpf_attr *as = tpf_node_attr(c->node, "starts");
		const struct tpf_attr *ae = tpf_node_attr(c->node, "ends");
		const struct tpf_attr *aa = tpf_node_attr(c->node, "axes");
		if (!as || !ae || as->n != ae->n || as->n > TPF_KERNEL_MAX_RANK)
			return -1;
		n = (int)as->n;
		for (int i = 0; i < n; i++) {
			st[i] = as->ints[i];
			en[i] = ae->ints[i];
		}
		na = -2;
		if (aa) {
			if (aa->n != (size_t)n)
				return -1;
			for (int i = 0; i < n; i++)
				ax[i] = aa->ints[i];
			na = n;
		}
		ns = -2;
	}
	if ((na >= 0 && na != n) || (ns >= 0 && ns != n))
		return -1;
	for (int i = 0; i < n; i++) {
		int a = tpf_norm_axis(na >= 0 ? ax[i] : i, x->rank);
		if (a < 0)
			return -1;
		int64_t dim = x->dims[a], s = st[i], e = en[i], p = ns >= 0 ? sp[i] : 1;
		if (p == 0)
			return -1;
		if (s < 0)
			s = s < -dim ? 0 : s + dim;
		if (e < 0)
			e = e < -dim ? -1 : e + dim;
		if (p > 0) {
			if (s > dim)
				s = dim;
			if (e > dim)
				e = dim;
			if (e < 0)
				e = 0;
		} else {
			if (s > dim - 1)
				s = dim - 1;
			if (e > dim - 1)
				e = dim - 1;
		}
		int64_t len = p > 0 ? (e - s + p - 1) / p : (s - e + (-p) - 1) / (-p);
		if (len < 0)
			len = 0;
		start[a] = s;
		step[a] = p;
		out_dims[a] = len;
	}
	return 0;
}

TPF_CPU_KERNEL(tpf_cpu_slice)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_ktensor *y = &c->out[0];
	TPF_KTRY(need_bytes(c, x->dtype));
	int64_t start[TPF_KERNEL_MAX_RANK], step[TPF_KERNEL_MAX_RANK], od[TPF_KERNEL_MAX_RANK];
	if (tpf_slice_resolve(c, start, step, od))
		return tpf_kfail(c, TPF_ERR_INVALID, "starts/ends/axes/steps are not valid known integers");
	int64_t xs[TPF_KERNEL_MAX_RANK], s = 1, base = 0;
	for (int d = x->rank - 1; d >= 0; d--) {
		xs[d] = s;
		s *= x->dims[d];
	}
	struct tpf_bcast it;
	it.rank = y->rank;
	it.n = 1;
	for (int d = 0; d < y->rank; d++) {
		if (od[d] != y->dims[d])
			return tpf_kfail(c, TPF_ERR_INVALID, "output shape disagrees with the slice");
		it.dims[d] = y->dims[d];
		it.idx[d] = 0;
		it.strides[0][d] = xs[d] * step[d];
		base += start[d] * xs[d];
	}
	it.off[0] = base;
	size_t es = tpf_elem_size(x->dtype);
	for (int64_t i = 0; i < y->numel; i++, tpf_bcast_next(&it))
		memcpy((char *)y->data + (size_t)i * es, (const char *)x->data + (size_t)it.off[0] * es, es);
	return TPF_OK;
}

/* The `axis` attribute (default 0) of t, t as [outer, dims[ax], inner], and
 * its element size *es (byte-addressable dtypes only). */
static enum tpf_status axis_view(const struct tpf_kernel_call *c, const struct tpf_ktensor *t, int *ax,
				 int64_t *outer, int64_t *inner, size_t *es)
{
	TPF_KTRY(need_bytes(c, t->dtype));
	*es = tpf_elem_size(t->dtype);
	*ax = tpf_norm_axis(tpf_node_attr_int(c->node, "axis", 0), t->rank);
	if (*ax < 0)
		return tpf_kfail(c, TPF_ERR_INVALID, "axis out of range");
	*outer = tpf_dims_prod(t->dims, 0, *ax);
	*inner = tpf_dims_prod(t->dims, *ax + 1, t->rank);
	return TPF_OK;
}

/* Copies blocks along an axis: outer x (len_k * inner) pieces. */
TPF_CPU_KERNEL(tpf_cpu_split)
{
	const struct tpf_ktensor *x = &c->in[0];
	int ax;
	int64_t outer, inner;
	size_t es;
	TPF_KTRY(axis_view(c, x, &ax, &outer, &inner, &es));
	int64_t total = 0;
	for (size_t k = 0; k < c->n_out; k++)
		total += c->out[k].data ? c->out[k].dims[ax] : 0;
	if (total > x->dims[ax])
		return tpf_kfail(c, TPF_ERR_INVALID, "outputs exceed the split axis");
	int64_t pos = 0;
	for (size_t k = 0; k < c->n_out; k++) {
		struct tpf_ktensor *y = &c->out[k];
		if (!y->data)
			continue;
		int64_t len = y->dims[ax];
		for (int64_t o = 0; o < outer; o++)
			memcpy((char *)y->data + (size_t)(o * len * inner) * es,
			       (const char *)x->data + (size_t)((o * x->dims[ax] + pos) * inner) * es,
			       (size_t)(len * inner) * es);
		pos += len;
	}
	return TPF_OK;
}

TPF_CPU_KERNEL(tpf_cpu_concat)
{
	struct tpf_ktensor *y = &c->out[0];
	int ax;
	int64_t outer, inner;
	size_t es;
	TPF_KTRY(axis_view(c, y, &ax, &outer, &inner, &es));
	int64_t pos = 0;
	for (size_t k = 0; k < c->n_in; k++) {
		const struct tpf_ktensor *x = &c->in[k];
		if (x->rank != y->rank || x->dtype != y->dtype)
			return tpf_kfail(c, TPF_ERR_INVALID, "input %zu rank or dtype differs", k);
		int64_t len = x->dims[ax];
		if (pos + len > y->dims[ax])
			return tpf_kfail(c, TPF_ERR_INVALID, "inputs exceed the output along the axis");
		for (int64_t o = 0; o < outer && len; o++)
			memcpy((char *)y->data + (size_t)((o * y->dims[ax] + pos) * inner) * es,
			       (const char *)x->data + (size_t)(o * len * inner) * es, (size_t)(len * inner) * es);
		pos += len;
	}
	return TPF_OK;
}

TPF_CPU_KERNEL(tpf_cpu_gather)
{
	const struct tpf_ktensor *x = &c->in[0], *ix = &c->in[1];
	struct tpf_ktensor *y = &c->out[0];
	int ax;
	int64_t outer, inner;
	size_t es;
	TPF_KTRY(axis_view(c, x, &ax, &outer, &inner, &es));
	int64_t dim = x->dims[ax], n = ix->numel;
	if (outer * n * inner != y->numel)
		return tpf_kfail(c, TPF_ERR_INVALID, "output size disagrees with the indices");
	for (int64_t j = 0; j < n; j++) {
		int64_t k = tpf_elem_load_int(ix->dtype, ix->data, j);
		if (k < 0)
			k += dim;
		if (k < 0 || k >= dim)
			return tpf_kfail(c, TPF_ERR_INVALID, "index %lld out of range [-%lld, %lld)",
					 (long long)tpf_elem_load_int(ix->dtype, ix->data, j), (long long)dim,
					 (long long)dim);
		for (int64_t o = 0; o < outer; o++)
			memcpy((char *)y->data + (size_t)((o * n + j) * inner) * es,
			       (const char *)x->data + (size_t)((o * dim + k) * inner) * es, (size_t)inner * es);
	}
	return TPF_OK;
}

/* Offsets of element i of a tensor of `dims` in row-major strides. */
static void unravel(int64_t i, const int64_t *dims, int rank, int64_t *idx)
{
	for (int d = rank - 1; d >= 0; d--) {
		int64_t dim = dims[d] ? dims[d] : 1;
		idx[d] = i % dim;
		i /= dim;
	}
}

static int64_t ravel(const int64_t *idx, const int64_t *dims, int rank)
{
	int64_t o = 0;
	for (int d = 0; d < rank; d++)
		o = o * dims[d] + idx[d];
	return o;
}

/* GatherElements / ScatterElements: the position in x (in[0]) that
 * element i of the indices (in[1]) addresses along ax, in idx. */
static enum tpf_status element_index(const struct tpf_kernel_call *c, int ax, int64_t i, int64_t *idx)
{
	const struct tpf_ktensor *x = &c->in[0], *ix = &c->in[1];
	unravel(i, ix->dims, ix->rank, idx);
	int64_t k = tpf_elem_load_int(ix->dtype, ix->data, i);
	if (k < 0)
		k += x->dims[ax];
	if (k < 0 || k >= x->dims[ax])
		return tpf_kfail(c, TPF_ERR_INVALID, "index out of range");
	idx[ax] = k;
	for (int d = 0; d < x->rank; d++)
		if (idx[d] >= x->dims[d])
			return tpf_kfail(c, TPF_ERR_INVALID, "indices shape exceeds data shape");
	return TPF_OK;
}

TPF_CPU_KERNEL(tpf_cpu_gather_elements)
{
	const struct tpf_ktensor *x = &c->in[0], *ix = &c->in[1];
	struct tpf_ktensor *y = &c->out[0];
	TPF_KTRY(need_bytes(c, x->dtype));
	int ax = tpf_norm_axis(tpf_node_attr_int(c->node, "axis", 0), x->rank);
	if (ax < 0 || ix->rank != x->rank)
		return tpf_kfail(c, TPF_ERR_INVALID, "axis out of range or rank mismatch");
	size_t es = tpf_elem_size(x->dtype);
	int64_t idx[TPF_KERNEL_MAX_RANK];
	for (int64_t i = 0; i < ix->numel; i++) {
		TPF_KTRY(element_index(c, ax, i, idx));
		memcpy((char *)y->data + (size_t)i * es,
		       (const char *)x->data + (size_t)ravel(idx, x->dims, x->rank) * es, es);
	}
	return TPF_OK;
}

TPF_CPU_KERNEL(tpf_cpu_scatter_elements)
{
	const struct tpf_ktensor *x = &c->in[0], *ix = &c->in[1], *up = &c->in[2];
	struct tpf_ktensor *y = &c->out[0];
	TPF_KTRY(need_bytes(c, x->dtype));
	int ax = tpf_norm_axis(tpf_node_attr_int(c->node, "axis", 0), x->rank);
	if (ax < 0 || ix->rank != x->rank || up->numel != ix->numel)
		return tpf_kfail(c, TPF_ERR_INVALID, "axis out of range or operand shapes disagree");
	const char *red;
	int mode = tpf_scatter_reduction(c, &red);
	if (mode < 0)
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "reduction '%s' not supported", red);
	size_t es = tpf_elem_size(x->dtype);
	if (y->data != x->data)
		memmove(y->data, x->data, x->nbytes);
	int64_t idx[TPF_KERNEL_MAX_RANK];
	int integral = tpf_dtype_is_integral(x->dtype);
	for (int64_t i = 0; i < ix->numel; i++) {
		TPF_KTRY(element_index(c, ax, i, idx));
		int64_t o = ravel(idx, x->dims, x->rank);
		if (mode == 0) {
			memcpy((char *)y->data + (size_t)o * es, (const char *)up->data + (size_t)i * es, es);
		} else if (integral) {
			int64_t a = tpf_elem_load_int(y->dtype, y->data, o), b = tpf_elem_load_int(up->dtype, up->data, i);
			int64_t r = mode == 1 ? a + b : mode == 2 ? a * b : mode == 3 ? (a > b ? a : b) : (a < b ? a : b);
			tpf_elem_store_int(y->dtype, y->data, o, r);
		} else {
			double a = tpf_elem_load(y->dtype, y->data, o), b = tpf_elem_load(up->dtype, up->data, i);
			double r = mode == 1 ? a + b : mode == 2 ? a * b : mode == 3 ? (a > b ? a : b) : (a < b ? a : b);
			tpf_elem_store(y->dtype, y->data, o, r, 1);
		}
	}
	return TPF_OK;
}

TPF_CPU_KERNEL(tpf_cpu_expand)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_ktensor *y = &c->out[0];
	TPF_KTRY(need_bytes(c, x->dtype));
	const struct tpf_ktensor *ins[1] = {x};
	struct tpf_bcast it;
	if (tpf_bcast_init(&it, y, ins, 1))
		return tpf_kfail(c, TPF_ERR_INVALID, "input does not broadcast to the output shape");
	size_t es = tpf_elem_size(x->dtype);
	for (int64_t i = 0; i < y->numel; i++, tpf_bcast_next(&it))
		memcpy((char *)y->data + (size_t)i * es, (const char *)x->data + (size_t)it.off[0] * es, es);
	return TPF_OK;
}

TPF_CPU_KERNEL(tpf_cpu_shape)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_ktensor *y = &c->out[0];
	/* dims [start, end) clamped as a Slice of the rank */
	int64_t s, n = tpf_slice_span(x->rank, tpf_node_attr_int(c->node, "start", 0),
				      tpf_node_attr_int(c->node, "end", x->rank), 1, &s);
	if (y->numel != n)
		return tpf_kfail(c, TPF_ERR_INVALID, "output size disagrees with start/end");
	for (int64_t i = 0; i < n; i++)
		((int64_t *)y->data)[i] = x->dims[s + i];
	return TPF_OK;
}

TPF_CPU_KERNEL(tpf_cpu_constant_of_shape)
{
	struct tpf_ktensor *y = &c->out[0];
	const struct tpf_attr *a = tpf_node_attr(c->node, "value");
	TPF_KTRY(need_bytes(c, y->dtype));
	size_t es = tpf_elem_size(y->dtype);
	if (!a || !a->t || !a->t->data) {
		memset(y->data, 0, y->nbytes);
		return TPF_OK;
	}
	if (a->t->dtype != y->dtype || a->t->nbytes < es)
		return tpf_kfail(c, TPF_ERR_INVALID, "value attribute disagrees with the output dtype");
	for (int64_t i = 0; i < y->numel; i++)
		memcpy((char *)y->data + (size_t)i * es, a->t->data, es);
	return TPF_OK;
}

/* AllGather along axis ax: in[0] holds world chunks, each the local tensor
 * (out dims with dims[ax] / world), one after another. */
TPF_CPU_KERNEL(tpf_cpu_gather_reorder)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_ktensor *y = &c->out[0];
	TPF_KTRY(need_bytes(c, y->dtype));
	int ax = tpf_norm_axis(tpf_node_attr_int(c->node, "axis", 0), y->rank);
	if (ax < 0 || c->world < 1 || y->dims[ax] % c->world || x->nbytes != y->nbytes)
		return tpf_kfail(c, TPF_ERR_INVALID, "gathered shape does not split into %d chunks", c->world);
	size_t es = tpf_elem_size(y->dtype);
	int64_t outer = tpf_dims_prod(y->dims, 0, ax);
	int64_t piece = y->dims[ax] / c->world * tpf_dims_prod(y->dims, ax + 1, y->rank);
	for (int r = 0; r < c->world; r++)
		for (int64_t o = 0; o < outer; o++)
			memcpy((char *)y->data + (size_t)((o * c->world + r) * piece) * es,
			       (const char *)x->data + (size_t)((r * outer + o) * piece) * es, (size_t)piece * es);
	return TPF_OK;
}

/* ai.tpfuse.Pack(x_0..x_k-1) -> P and Unpack(R) -> y_0..y_k-1: copies of
 * `segments` = (operand, source offset, destination offset, length) quads,
 * in elements. */
static enum tpf_status run_segments(const struct tpf_kernel_call *c, int pack)
{
	const struct tpf_attr *a = tpf_node_attr(c->node, "segments");
	if (!a || a->kind != TPF_ATTR_INTS || a->n % 4)
		return tpf_kfail(c, TPF_ERR_INVALID, "missing or malformed 'segments' attribute");
	enum tpf_dtype dt = pack ? c->out[0].dtype : c->in[0].dtype;
	TPF_KTRY(need_bytes(c, dt));
	size_t es = tpf_elem_size(dt);
	for (size_t s = 0; s < a->n; s += 4) {
		struct tpf_segment g = {0};
		TPF_KTRY(tpf_segment_at(c, a, s, pack, &g));
		if (!g.to->data)
			continue;
		TPF_KTRY(tpf_segment_check(c, &g, s, dt));
		memcpy((char *)g.to->data + (size_t)g.dst * es, (const char *)g.from->data + (size_t)g.src * es,
		       (size_t)g.len * es);
	}
	return TPF_OK;
}

TPF_CPU_KERNEL(tpf_cpu_pack)
{
	return run_segments(c, 1);
}

TPF_CPU_KERNEL(tpf_cpu_unpack)
{
	return run_segments(c, 0);
}
