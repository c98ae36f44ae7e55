/* SPDX-License-Identifier: MIT */
/* Index arithmetic and sequences: Range, GatherND, ScatterND, OneHot, Tile,
 * Trilu, CumSum, Size.  Data is moved bytewise (every byte-addressable
 * dtype); CumSum and ScatterND's reductions compute in double for float
 * types and int64 for integers, rounded once when stored. */
#include "cpu-kernels.h"
#include "op-geometry.h"

#include <math.h>
#include <string.h>

static enum tpf_status need_bytes(const struct tpf_kernel_call *c, enum tpf_dtype t)
{
	if (!tpf_elem_size(t))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "dtype %s not supported (sub-byte)",
				 tpf_dtype_name(t));
	return TPF_OK;
}

/* A scalar operand (one element) as int64 / double; -1 when it is not one. */
static int scalar_int(const struct tpf_ktensor *t, int64_t *v)
{
	const void *p = t->host ? t->host : t->data;
	if (!p || t->numel != 1)
		return -1;
	*v = tpf_elem_load_int(t->dtype, p, 0);
	return 0;
}

static int scalar_f(const struct tpf_ktensor *t, double *v)
{
	const void *p = t->host ? t->host : t->data;
	if (!p || t->numel != 1)
		return -1;
	*v = tpf_elem_load(t->dtype, p, 0);
	return 0;
}

/* ------------------------------------------------------------ Range */

int64_t tpf_range_length(enum tpf_dtype dt, const void *start, const void *limit, const void *delta)
{
	if (tpf_dtype_is_integral(dt)) {
		int64_t s = tpf_elem_load_int(dt, start, 0), l = tpf_elem_load_int(dt, limit, 0);
		int64_t d = tpf_elem_load_int(dt, delta, 0);
		return tpf_range_count(s, l, d);
	}
	double s = tpf_elem_load(dt, start, 0), l = tpf_elem_load(dt, limit, 0);
	double d = tpf_elem_load(dt, delta, 0);
	if (d == 0 || !isfinite(s) || !isfinite(l) || !isfinite(d))
		return -1;
	double n = ceil((l - s) / d);
	return n < 0 ? 0 : n > 9.0e18 ? -1 : (int64_t)n;
}

TPF_CPU_KERNEL(tpf_cpu_range)
{
	struct tpf_ktensor *y = &c->out[0];
	enum tpf_dtype dt = y->dtype;
	TPF_KTRY(tpf_range_operands(c));
	if (y->rank != 1)
		return tpf_kfail(c, TPF_ERR_INVALID, "output must be 1-D");
	int64_t n = tpf_range_length(dt, c->in[0].data, c->in[1].data, c->in[2].data);
	if (n < 0)
		return tpf_kfail(c, TPF_ERR_INVALID, "delta is zero or the bounds are not finite");
	if (n != y->numel)
		return tpf_kfail(c, TPF_ERR_INVALID, "the range has %lld elements, the output %lld",
				 (long long)n, (long long)y->numel);
	if (tpf_dtype_is_integral(dt)) {
		int64_t s = tpf_elem_load_int(dt, c->in[0].data, 0), d = tpf_elem_load_int(dt, c->in[2].data, 0);
		for (int64_t i = 0; i < n; i++)
			tpf_elem_store_int(dt, y->data, i, (int64_t)((uint64_t)s + (uint64_t)i * (uint64_t)d));
	} else {
		double s = tpf_elem_load(dt, c->in[0].data, 0), d = tpf_elem_load(dt, c->in[2].data, 0);
		for (int64_t i = 0; i < n; i++)
			tpf_elem_store(dt, y->data, i, s + (double)i * d, 1);
	}
	return TPF_OK;
}

/* ------------------------------------------------------------ GatherND, ScatterND */

/* The offset (in elements of data) of the slice that index tuple j of
 * `indices` selects, for GatherND with batch_dims b (ScatterND: b = 0).
 * -1 when an index is out of range. */
static int64_t nd_offset(const struct tpf_ktensor *data, const struct tpf_ktensor *ix, int b,
			 int64_t batch, int64_t j, int64_t *bad)
{
	int64_t k = ix->dims[ix->rank - 1];
	int64_t off = batch;
	for (int64_t q = 0; q < k; q++) {
		int64_t dim = data->dims[b + q];
		int64_t v = tpf_elem_load_int(ix->dtype, ix->data, j * k + q);
		*bad = v;
		if (v < 0)
			v += dim;
		if (v < 0 || v >= dim)
			return -1;
		off = off * dim + v;
	}
	return off;
}

TPF_CPU_KERNEL(tpf_cpu_gather_nd)
{
	const struct tpf_ktensor *x = &c->in[0], *ix = &c->in[1];
	struct tpf_ktensor *y = &c->out[0];
	TPF_KTRY(need_bytes(c, x->dtype));
	int64_t b = tpf_node_attr_int(c->node, "batch_dims", 0);
	if (ix->rank < 1 || b < 0 || b >= ix->rank || b >= x->rank)
		return tpf_kfail(c, TPF_ERR_INVALID, "batch_dims %lld does not fit indices of rank %d",
				 (long long)b, ix->rank);
	int64_t k = ix->dims[ix->rank - 1];
	if (k < 0 || b + k > x->rank)
		return tpf_kfail(c, TPF_ERR_INVALID, "index tuples of %lld entries exceed data of rank %d",
				 (long long)k, x->rank);
	for (int d = 0; d < b; d++)
		if (ix->dims[d] != x->dims[d])
			return tpf_kfail(c, TPF_ERR_INVALID, "batch dim %d is %lld in data but %lld in indices", d,
					 (long long)x->dims[d], (long long)ix->dims[d]);
	int64_t batches = tpf_dims_prod(x->dims, 0, (int)b);
	int64_t per_batch = tpf_dims_prod(ix->dims, (int)b, ix->rank - 1); /* tuples per batch */
	int64_t slice = tpf_dims_prod(x->dims, (int)(b + k), x->rank);
	int64_t batch_span = tpf_dims_prod(x->dims, (int)b, (int)(b + k)); /* slices per batch */
	if (batches * per_batch * slice != y->numel)
		return tpf_kfail(c, TPF_ERR_INVALID, "output size disagrees with the indices");
	size_t es = tpf_elem_size(x->dtype);
	for (int64_t bt = 0; bt < batches; bt++)
		for (int64_t j = 0; j < per_batch; j++) {
			int64_t t = bt * per_batch + j, bad = 0;
			int64_t off = nd_offset(x, ix, (int)b, 0, t, &bad);
			if (off < 0)
				return tpf_kfail(c, TPF_ERR_INVALID, "index %lld out of range", (long long)bad);
			off += bt * batch_span;
			memcpy((char *)y->data + (size_t)(t * slice) * es,
			       (const char *)x->data + (size_t)(off * slice) * es, (size_t)slice * es);
		}
	return TPF_OK;
}

TPF_CPU_KERNEL(tpf_cpu_scatter_nd)
{
	const struct tpf_ktensor *x = &c->in[0], *ix = &c->in[1], *up = &c->in[2];
	struct tpf_ktensor *y = &c->out[0];
	TPF_KTRY(need_bytes(c, x->dtype));
	const char *red;
	int mode = tpf_scatter_reduction(c, &red);
	if (mode < 0)
		return tpf_kfail(c, TPF_ERR_INVALID, "reduction '%s' is not none, add, mul, max or min", red);
	if (ix->rank < 1 || up->dtype != x->dtype || y->nbytes != x->nbytes)
		return tpf_kfail(c, TPF_ERR_INVALID, "operands disagree (indices rank, updates dtype)");
	int64_t k = ix->dims[ix->rank - 1];
	if (k < 0 || k > x->rank)
		return tpf_kfail(c, TPF_ERR_INVALID, "index tuples of %lld entries exceed data of rank %d",
				 (long long)k, x->rank);
	int64_t tuples = tpf_dims_prod(ix->dims, 0, ix->rank - 1);
	int64_t slice = tpf_dims_prod(x->dims, (int)k, x->rank);
	if (up->numel != tuples * slice)
		return tpf_kfail(c, TPF_ERR_INVALID, "updates hold %lld elements, expected %lld",
				 (long long)up->numel, (long long)(tuples * slice));
	size_t es = tpf_elem_size(x->dtype);
	if (y->data != x->data && x->nbytes)
		memmove(y->data, x->data, x->nbytes);
	int integral = tpf_dtype_is_integral(x->dtype);
	for (int64_t t = 0; t < tuples; t++) {
		int64_t bad = 0, off = nd_offset(x, ix, 0, 0, t, &bad);
		if (off < 0)
			return tpf_kfail(c, TPF_ERR_INVALID, "index %lld out of range", (long long)bad);
		if (mode == 0) {
			memcpy((char *)y->data + (size_t)(off * slice) * es,
			       (const char *)up->data + (size_t)(t * slice) * es, (size_t)slice * es);
			continue;
		}
		for (int64_t e = 0; e < slice; e++) {
			int64_t o = off * slice + e, u = t * slice + e;
			if (integral) {
				int64_t a = tpf_elem_load_int(x->dtype, y->data, o);
				int64_t v = tpf_elem_load_int(x->dtype, up->data, u);
				int64_t r = mode == 1 ? (int64_t)((uint64_t)a + (uint64_t)v)
					    : mode == 2 ? (int64_t)((uint64_t)a * (uint64_t)v)
					    : mode == 3 ? (a > v ? a : v)
							: (a < v ? a : v);
				tpf_elem_store_int(x->dtype, y->data, o, r);
			} else {
				double a = tpf_elem_load(x->dtype, y->data, o), v = tpf_elem_load(x->dtype, up->data, u);
				double r = mode == 1 ? a + v : mode == 2 ? a * v : mode == 3 ? fmax(a, v) : fmin(a, v);
				if (isnan(a) || isnan(v))
					r = NAN;
				tpf_elem_store(x->dtype, y->data, o, r, 1);
			}
		}
	}
	return TPF_OK;
}

/* ------------------------------------------------------------ OneHot */

/* The cache copied to the output unless it is the output (written in
 * place), then each sequence's update rows at its write index. */
TPF_CPU_KERNEL(tpf_cpu_tensor_scatter)
{
	const struct tpf_ktensor *x = &c->in[0], *up = &c->in[1], *y = &c->out[0];
	const int64_t *wi = c->n_in > 2 && c->in[2].data ? c->in[2].data : NULL;
	struct tpf_tscatter_geom g;
	TPF_KTRY(tpf_tensor_scatter_geometry(c, &g));
	for (int64_t b = 0; b < g.B; b++) {
		int64_t w = wi ? wi[b] : 0;
		if (w < 0 || (!g.circular && w + g.S > g.L))
			return tpf_kfail(c, TPF_ERR_INVALID, "write index %lld of sequence %lld: %lld positions do not "
					 "fit a cache of %lld", (long long)w, (long long)b, (long long)g.S,
					 (long long)g.L);
	}
	if (y->data != x->data && x->nbytes)
		memmove(y->data, x->data, x->nbytes);
	size_t row = (size_t)g.inner * g.es;
	for (int64_t b = 0; b < g.B; b++)
		for (int64_t m = 0; m < g.mid; m++)
			for (int64_t s = 0; s < g.S; s++) {
				int64_t w = (wi ? wi[b] : 0) + s;
				if (g.circular && g.L)
					w %= g.L;
				memcpy((char *)y->data + (size_t)((b * g.mid + m) * g.L + w) * row,
				       (const char *)up->data + (size_t)((b * g.mid + m) * g.S + s) * row, row);
			}
	return TPF_OK;
}

TPF_CPU_KERNEL(tpf_cpu_one_hot)
{
	const struct tpf_ktensor *ix = &c->in[0], *dp = &c->in[1], *val = &c->in[2];
	struct tpf_ktensor *y = &c->out[0];
	TPF_KTRY(need_bytes(c, y->dtype));
	double depth_f;
	if (scalar_f(dp, &depth_f) || !(depth_f >= 1) || depth_f > 9.0e18)
		return tpf_kfail(c, TPF_ERR_INVALID, "depth must be one positive number");
	int64_t depth = (int64_t)depth_f;
	if (val->numel != 2 || val->dtype != y->dtype)
		return tpf_kfail(c, TPF_ERR_INVALID, "values must be [off, on] of the output's dtype");
	int ax = tpf_norm_axis(tpf_node_attr_int(c->node, "axis", -1), ix->rank + 1);
	if (ax < 0 || y->rank != ix->rank + 1 || y->dims[ax] != depth)
		return tpf_kfail(c, TPF_ERR_INVALID, "axis out of range or output shape disagrees");
	size_t es = tpf_elem_size(y->dtype);
	const char *off = val->data, *on = (const char *)val->data + es;
	int64_t outer = tpf_dims_prod(ix->dims, 0, ax), inner = tpf_dims_prod(ix->dims, ax, ix->rank);
	for (int64_t o = 0; o < outer; o++)
		for (int64_t d = 0; d < depth; d++)
			for (int64_t in = 0; in < inner; in++) {
				int64_t i = o * inner + in;
				double v = tpf_elem_load(ix->dtype, ix->data, i);
				int64_t k = isnan(v) ? -1 - depth : (int64_t)(v < -9.0e18 ? -9.0e18 : v > 9.0e18 ? 9.0e18 : v);
				if (k < 0)
					k += depth;
				memcpy((char *)y->data + (size_t)((o * depth + d) * inner + in) * es, k == d ? on : off, es);
			}
	return TPF_OK;
}

/* ------------------------------------------------------------ Tile */

TPF_CPU_KERNEL(tpf_cpu_tile)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_ktensor *y = &c->out[0];
	TPF_KTRY(need_bytes(c, x->dtype));
	if (y->rank != x->rank)
		return tpf_kfail(c, TPF_ERR_INVALID, "output rank differs from the input's");
	for (int d = 0; d < x->rank; d++)
		if (x->dims[d] ? y->dims[d] % x->dims[d] : y->dims[d])
			return tpf_kfail(c, TPF_ERR_INVALID, "output dim %d is not a multiple of the input's", d);
	size_t es = tpf_elem_size(x->dtype);
	int64_t idx[TPF_KERNEL_MAX_RANK];
	for (int d = 0; d < y->rank; d++)
		idx[d] = 0;
	for (int64_t i = 0; i < y->numel; i++) {
		int64_t o = 0;
		for (int d = 0; d < x->rank; d++)
			o = o * x->dims[d] + idx[d] % x->dims[d];
		memcpy((char *)y->data + (size_t)i * es, (const char *)x->data + (size_t)o * es, es);
		for (int d = y->rank - 1; d >= 0; d--) {
			if (++idx[d] < y->dims[d])
				break;
			idx[d] = 0;
		}
	}
	return TPF_OK;
}

/* ------------------------------------------------------------ Trilu */

TPF_CPU_KERNEL(tpf_cpu_trilu)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_ktensor *y = &c->out[0];
	int64_t k = 0;
	TPF_KTRY(need_bytes(c, x->dtype));
	if (c->n_in > 1 && c->in[1].rank >= 0 && (c->in[1].data || c->in[1].host) && scalar_int(&c->in[1], &k))
		return tpf_kfail(c, TPF_ERR_INVALID, "k must be one integer");
	if (x->rank < 2 || x->nbytes != y->nbytes)
		return tpf_kfail(c, TPF_ERR_INVALID, "input must have rank 2 or more");
	int upper = tpf_node_attr_int(c->node, "upper", 1) != 0;
	int64_t rows = x->dims[x->rank - 2], cols = x->dims[x->rank - 1];
	size_t es = tpf_elem_size(x->dtype);
	for (int64_t i = 0; i < x->numel; i++) {
		int64_t col = i % cols, row = cols ? (i / cols) % rows : 0;
		int keep = upper ? col - row >= k : col - row <= k;
		char *dst = (char *)y->data + (size_t)i * es;
		if (keep)
			memmove(dst, (const char *)x->data + (size_t)i * es, es);
		else
			memset(dst, 0, es);
	}
	return TPF_OK;
}

/* ------------------------------------------------------------ CumSum */

TPF_CPU_KERNEL(tpf_cpu_cumsum)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_ktensor *y = &c->out[0];
	struct tpf_cumsum_geom g = {0};
	int64_t axis;
	if (c->n_in < 2 || scalar_int(&c->in[1], &axis) || !tpf_dtype_is_integral(c->in[1].dtype))
		return tpf_kfail(c, TPF_ERR_INVALID, "axis must be one int32 or int64 value");
	TPF_KTRY(tpf_cumsum_geometry(c, axis, &g));
	/* float32 sums (double for DOUBLE), as the CUDA kernel */
	int integral = tpf_dtype_is_integral(x->dtype), dbl = x->dtype == TPF_DTYPE_DOUBLE;
	for (int64_t l = 0; l < g.outer * g.inner; l++) {
		struct tpf_cumsum_acc acc = {0, 0, 0};
		for (int64_t s = 0; s < g.len; s++) {
			int64_t i = tpf_cumsum_index(&g, l, s);
			if (integral) {
				int64_t v = tpf_elem_load_int(x->dtype, x->data, i);
				tpf_elem_store_int(y->dtype, y->data, i, tpf_cumsum_add_i(&acc, v, g.excl));
			} else {
				double v = tpf_elem_load(x->dtype, x->data, i);
				tpf_elem_store(y->dtype, y->data, i, tpf_cumsum_add_f(&acc, v, g.excl, dbl), 1);
			}
		}
	}
	return TPF_OK;
}

/* ------------------------------------------------------------ Size */

TPF_CPU_KERNEL(tpf_cpu_size)
{
	struct tpf_ktensor *y = &c->out[0];
	if (y->numel != 1 || y->dtype != TPF_DTYPE_INT64)
		return tpf_kfail(c, TPF_ERR_INVALID, "output must be one int64");
	*(int64_t *)y->data = c->in[0].numel;
	return TPF_OK;
}
