// SPDX-License-Identifier: MIT
// Index arithmetic and sequences on the GPU: Range, GatherND, ScatterND,
// OneHot, Tile, Trilu, CumSum, Size.  One thread per output element (one
// per line for CumSum, one per slice element for ScatterND, which walks the
// index tuples in order so that repeated indices reduce as the CPU
// reference does).  Scalars that only the device holds (Range's bounds,
// Trilu's k) are read there; every launch parameter travels by value, so
// the steps can be captured into a CUDA graph.
#include "cuda-common.cuh"
#include "elementwise-ops.h"
#include "op-geometry.h"

#include <string.h>

using namespace tpfc;

namespace {

constexpr int kThreads = 256;

// ------------------------------------------------------------ Range

__global__ void range_kernel(int dt, int integral, const void *start, const void *delta, void *y, int64_t n)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
		if (integral) {
			int64_t s = ld_i(dt, start, 0), d = ld_i(dt, delta, 0);
			st_i(dt, y, i, (int64_t)((uint64_t)s + (uint64_t)i * (uint64_t)d));
		} else {
			st_d(dt, y, i, ld_d(dt, start, 0) + (double)i * ld_d(dt, delta, 0));
		}
	}
}

// ------------------------------------------------------------ GatherND / ScatterND

struct NdArgs {
	int k;                     // entries per index tuple
	int b;                     // batch dims (GatherND)
	int64_t dims[kMaxRank];    // data dims b .. b+k-1
	const int64_t *ix;         // int64 index tuples
	int64_t slice;             // elements per selected slice
	int64_t per_batch;         // tuples per batch (GatherND)
	int64_t batch_span;        // slices per batch (GatherND)
	int64_t tuples;            // number of tuples
};

// Offset of the slice tuple t selects (in slices); indices out of range are
// clamped (the host checks those it knows).
__device__ __forceinline__ int64_t nd_slice(const NdArgs &a, int64_t t)
{
	int64_t off = 0;
	for (int q = 0; q < a.k; q++) {
		int64_t dim = a.dims[q], v = a.ix[t * a.k + q];
		if (v < 0)
			v += dim;
		v = v < 0 ? 0 : v >= dim ? dim - 1 : v;
		off = off * dim + v;
	}
	return off;
}

__global__ void gather_nd_kernel(NdArgs a, const void *x, void *y, int es, int64_t n)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
		int64_t t = i / a.slice, e = i - t * a.slice;
		int64_t bt = a.per_batch ? t / a.per_batch : 0;
		int64_t off = nd_slice(a, t) + bt * a.batch_span;
		tpf_copy_elem(y, i, x, off * a.slice + e, es);
	}
}

// One thread per slice element, the tuples in order: mode 0 none, 1 add,
// 2 mul, 3 max, 4 min.
__global__ void scatter_nd_kernel(NdArgs a, int dt, int mode, const void *up, void *y, int es)
{
	int integral = dt == TPF_DTYPE_BOOL || dt == TPF_DTYPE_INT8 || dt == TPF_DTYPE_UINT8 ||
		       dt == TPF_DTYPE_INT16 || dt == TPF_DTYPE_UINT16 || dt == TPF_DTYPE_INT32 ||
		       dt == TPF_DTYPE_UINT32 || dt == TPF_DTYPE_INT64 || dt == TPF_DTYPE_UINT64;
	for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < a.slice; e += (int64_t)gridDim.x * blockDim.x) {
		for (int64_t t = 0; t < a.tuples; t++) {
			int64_t o = nd_slice(a, t) * a.slice + e, u = t * a.slice + e;
			if (mode == 0) {
				tpf_copy_elem(y, o, up, u, es);
			} else if (integral) {
				int64_t p = ld_i(dt, y, o), v = ld_i(dt, up, u);
				int64_t r = mode == 1 ? (int64_t)((uint64_t)p + (uint64_t)v)
					    : mode == 2 ? (int64_t)((uint64_t)p * (uint64_t)v)
					    : mode == 3 ? (p > v ? p : v)
							: (p < v ? p : v);
				st_i(dt, y, o, r);
			} else {
				double p = ld_d(dt, y, o), v = ld_d(dt, up, u);
				double r = mode == 1 ? p + v : mode == 2 ? p * v : mode == 3 ? fmax(p, v) : fmin(p, v);
				if (isnan(p) || isnan(v))
					r = NAN;
				st_d(dt, y, o, r);
			}
		}
	}
}

// ------------------------------------------------------------ OneHot, Tile, Trilu

__global__ void one_hot_kernel(int di, const void *ix, const void *vals, void *y, int es, int64_t depth,
			       int64_t inner, int64_t n)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
		int64_t in = i % inner, t = i / inner, d = t % depth, o = t / depth;
		double v = ld_d(di, ix, o * inner + in);
		int64_t k = isnan(v) ? -1 - depth : (int64_t)(v < -9.0e18 ? -9.0e18 : v > 9.0e18 ? 9.0e18 : v);
		if (k < 0)
			k += depth;
		tpf_copy_elem(y, i, vals, k == d ? 1 : 0, es);
	}
}

struct TileArgs {
	int rank;
	int64_t xdims[kMaxRank], ydims[kMaxRank];
};

__global__ void tile_kernel(TileArgs a, const void *x, void *y, int es, int64_t n)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
		int64_t rem = i, off = 0, mul = 1;
		for (int d = a.rank - 1; d >= 0; d--) {
			int64_t id = rem % a.ydims[d];
			rem /= a.ydims[d];
			off += (id % a.xdims[d]) * mul;
			mul *= a.xdims[d];
		}
		tpf_copy_elem(y, i, x, off, es);
	}
}

__global__ void trilu_kernel(const void *x, void *y, int es, int dk, const void *kp, int upper, int64_t rows,
			     int64_t cols, int64_t n)
{
	int64_t k = kp ? ld_i(dk, kp, 0) : 0;
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
		int64_t col = i % cols, row = (i / cols) % rows;
		bool keep = upper ? col - row >= k : col - row <= k;
		if (keep)
			tpf_copy_elem(y, i, x, i, es);
		else
			store_bits(y, i, es, 0);
	}
}

// ------------------------------------------------------------ CumSum

// One thread per line (outer x inner); float32 sums (double for DOUBLE,
// int64 for integers), as the CPU reference.
__global__ void cumsum_kernel(int dt, const void *x, void *y, struct tpf_cumsum_geom g)
{
	int integral = dt != TPF_DTYPE_FLOAT && dt != TPF_DTYPE_FLOAT16 && dt != TPF_DTYPE_BFLOAT16 &&
		       dt != TPF_DTYPE_DOUBLE;
	for (int64_t l = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; l < g.outer * g.inner;
	     l += (int64_t)gridDim.x * blockDim.x) {
		struct tpf_cumsum_acc acc = {0, 0, 0};
		for (int64_t s = 0; s < g.len; s++) {
			int64_t i = tpf_cumsum_index(&g, l, s);
			if (integral)
				st_i(dt, y, i, tpf_cumsum_add_i(&acc, ld_i(dt, x, i), g.excl));
			else if (dt == TPF_DTYPE_DOUBLE)
				st_d(dt, y, i, tpf_cumsum_add_f(&acc, ld_d(dt, x, i), g.excl, 1));
			else
				st_f(dt, y, i, (float)tpf_cumsum_add_f(&acc, ld_d(dt, x, i), g.excl, 0));
		}
	}
}

__global__ void size_kernel(int64_t v, int64_t *y)
{
	if (threadIdx.x == 0 && blockIdx.x == 0)
		*y = v;
}

// Host check of known int64 index tuples against dims (q-th entry against
// dims[q]): 0 ok, else the offending index stored in *bad.
int check_tuples(const struct tpf_ktensor *ix, const int64_t *dims, int k, int64_t *bad)
{
	if (!ix->host || k <= 0)
		return 0;
	for (int64_t j = 0; j < ix->numel; j++) {
		int64_t v = ((const int64_t *)ix->host)[j], dim = dims[j % k];
		if (v < -dim || v >= dim) {
			*bad = v;
			return -1;
		}
	}
	return 0;
}

} // namespace

extern "C" TPF_CUDA_KERNEL(tpf_cu_range)
{
	struct tpf_ktensor *y = &c->out[0];
	enum tpf_dtype dt = y->dtype;
	TPF_KTRY(tpf_range_operands(c));
	if (y->rank != 1 || !(tpfc_float_ok(dt) || tpfc_int_ok(dt)))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "a 1-D output of dtype %s not supported on cuda",
				 tpf_dtype_name(dt));
	if (c->in[0].host && c->in[1].host && c->in[2].host) {
		int64_t n = tpf_range_length(dt, c->in[0].host, c->in[1].host, c->in[2].host);
		if (n != y->numel)
			return tpf_kfail(c, TPF_ERR_INVALID, "the range has %lld elements, the output %lld", (long long)n,
					 (long long)y->numel);
	}
	if (!y->numel)
		return TPF_OK;
	return tpfc_launch(c, "range", y->numel, kThreads, range_kernel, dt, tpf_dtype_is_integral(dt), c->in[0].data,
			   c->in[2].data, y->data, y->numel);
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_gather_nd)
{
	const struct tpf_ktensor *x = &c->in[0], *ix = &c->in[1];
	struct tpf_ktensor *y = &c->out[0];
	if (enum tpf_status st = tpfc_need_bytes(c, x->dtype))
		return st;
	int64_t b = tpf_node_attr_int(c->node, "batch_dims", 0);
	if (ix->dtype != TPF_DTYPE_INT64 || ix->rank < 1 || b < 0 || b >= ix->rank || b >= x->rank)
		return tpf_kfail(c, TPF_ERR_INVALID, "int64 indices of rank > batch_dims %lld expected", (long long)b);
	int64_t k = ix->dims[ix->rank - 1];
	if (k < 0 || b + k > x->rank)
		return tpf_kfail(c, TPF_ERR_INVALID, "index tuples of %lld entries exceed data of rank %d", (long long)k,
				 x->rank);
	for (int d = 0; d < b; d++)
		if (ix->dims[d] != x->dims[d])
			return tpf_kfail(c, TPF_ERR_INVALID, "batch dim %d is %lld in data but %lld in indices", d,
					 (long long)x->dims[d], (long long)ix->dims[d]);
	NdArgs a;
	memset(&a, 0, sizeof(a));
	a.k = (int)k;
	a.b = (int)b;
	for (int q = 0; q < k; q++)
		a.dims[q] = x->dims[b + q];
	a.ix = (const int64_t *)ix->data;
	a.slice = tpf_dims_prod(x->dims, (int)(b + k), x->rank);
	a.per_batch = tpf_dims_prod(ix->dims, (int)b, ix->rank - 1);
	a.batch_span = tpf_dims_prod(x->dims, (int)b, (int)(b + k));
	a.tuples = tpf_dims_prod(ix->dims, 0, ix->rank - 1);
	if (a.tuples * a.slice != y->numel)
		return tpf_kfail(c, TPF_ERR_INVALID, "output size disagrees with the indices");
	int64_t bad = 0;
	if (check_tuples(ix, a.dims, a.k, &bad))
		return tpf_kfail(c, TPF_ERR_INVALID, "index %lld out of range", (long long)bad);
	if (!y->numel)
		return TPF_OK;
	for (int q = 0; q < k; q++)
		if (!a.dims[q])
			return tpf_kfail(c, TPF_ERR_INVALID, "gather from an empty axis");
	return tpfc_launch(c, "gather nd", y->numel, kThreads, gather_nd_kernel, a, x->data, y->data,
			   (int)tpf_elem_size(x->dtype), y->numel);
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_scatter_nd)
{
	const struct tpf_ktensor *x = &c->in[0], *ix = &c->in[1], *up = &c->in[2];
	struct tpf_ktensor *y = &c->out[0];
	if (enum tpf_status st = tpfc_need_bytes(c, x->dtype))
		return st;
	const char *red;
	int mode = tpf_scatter_reduction(c, &red);
	if (mode < 0)
		return tpf_kfail(c, TPF_ERR_INVALID, "reduction '%s' is not none, add, mul, max or min", red);
	if (mode && !(tpfc_float_ok(x->dtype) || tpfc_int_ok(x->dtype)))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "reduction of %s not supported on cuda", tpf_dtype_name(x->dtype));
	if (ix->dtype != TPF_DTYPE_INT64 || ix->rank < 1 || up->dtype != x->dtype || y->nbytes != x->nbytes)
		return tpf_kfail(c, TPF_ERR_INVALID, "operands disagree (int64 indices, updates dtype)");
	int64_t k = ix->dims[ix->rank - 1];
	if (k < 0 || k > x->rank)
		return tpf_kfail(c, TPF_ERR_INVALID, "index tuples of %lld entries exceed data of rank %d", (long long)k,
				 x->rank);
	NdArgs a;
	memset(&a, 0, sizeof(a));
	a.k = (int)k;
	for (int q = 0; q < k; q++)
		a.dims[q] = x->dims[q];
	a.ix = (const int64_t *)ix->data;
	a.slice = tpf_dims_prod(x->dims, (int)k, x->rank);
	a.tuples = tpf_dims_prod(ix->dims, 0, ix->rank - 1);
	if (up->numel != a.tuples * a.slice)
		return tpf_kfail(c, TPF_ERR_INVALID, "updates hold %lld elements, expected %lld", (long long)up->numel,
				 (long long)(a.tuples * a.slice));
	int64_t bad = 0;
	if (check_tuples(ix, a.dims, a.k, &bad))
		return tpf_kfail(c, TPF_ERR_INVALID, "index %lld out of range", (long long)bad);
	if (enum tpf_status st = tpfc_copy_input(c, x, y))
		return st;
	if (!a.tuples || !a.slice)
		return TPF_OK;
	for (int q = 0; q < k; q++)
		if (!a.dims[q])
			return tpf_kfail(c, TPF_ERR_INVALID, "scatter into an empty axis");
	return tpfc_launch(c, "scatter nd", a.slice, kThreads, scatter_nd_kernel, a, x->dtype, mode, up->data, y->data,
			   (int)tpf_elem_size(x->dtype));
}

// TensorScatter: one thread per byte group of the update's rows, 4 bytes
// at a time where the row allows it.  A write index the cache cannot hold
// (linear mode) drops that sequence's rows: the device cannot report it,
// and a graph replay must not fault.
__global__ void tensor_scatter_kernel(const char *up, char *y, const int64_t *wi, int64_t mid, int64_t L,
				      int64_t S, int64_t row, int circular, int64_t n)
{
	const bool words = row % 4 == 0;
	const int64_t unit = words ? 4 : 1, per = row / unit;
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n / unit;
	     i += (int64_t)gridDim.x * blockDim.x) {
		int64_t e = i % per, r = i / per, s = r % S, bm = r / S, b = bm / mid;
		int64_t w = (wi ? wi[b] : 0) + s;
		if (circular)
			w = L ? w % L : 0;
		if (w < 0 || w >= L)
			continue;
		int64_t dst = (bm * L + w) * row + e * unit, src = r * row + e * unit;
		if (words)
			*(uint32_t *)(y + dst) = *(const uint32_t *)(up + src);
		else
			y[dst] = up[src];
	}
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_tensor_scatter)
{
	const struct tpf_ktensor *x = &c->in[0], *up = &c->in[1];
	struct tpf_ktensor *y = &c->out[0];
	const int64_t *wi = c->n_in > 2 && c->in[2].data ? (const int64_t *)c->in[2].data : nullptr;
	struct tpf_tscatter_geom g;
	if (enum tpf_status st = tpf_tensor_scatter_geometry(c, &g))
		return st;
	if (enum tpf_status st = tpfc_copy_input(c, x, y))
		return st;
	int64_t row = g.inner * (int64_t)g.es, n = g.B * g.mid * g.S * row;
	if (!n)
		return TPF_OK;
	return tpfc_launch(c, "tensor scatter", row % 4 ? n : n / 4, kThreads, tensor_scatter_kernel,
			   (const char *)up->data, (char *)y->data, wi, g.mid, g.L, g.S, row, g.circular, n);
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_one_hot)
{
	const struct tpf_ktensor *ix = &c->in[0], *val = &c->in[2];
	struct tpf_ktensor *y = &c->out[0];
	if (enum tpf_status st = tpfc_need_bytes(c, y->dtype))
		return st;
	if (!(tpfc_float_ok(ix->dtype) || tpfc_int_ok(ix->dtype)))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "indices of dtype %s not supported on cuda",
				 tpf_dtype_name(ix->dtype));
	if (val->numel != 2 || val->dtype != y->dtype)
		return tpf_kfail(c, TPF_ERR_INVALID, "values must be [off, on] of the output's dtype");
	int ax = tpf_norm_axis(tpf_node_attr_int(c->node, "axis", -1), ix->rank + 1);
	if (ax < 0 || y->rank != ix->rank + 1)
		return tpf_kfail(c, TPF_ERR_INVALID, "axis out of range or output shape disagrees");
	int64_t depth = y->dims[ax], inner = tpf_dims_prod(ix->dims, ax, ix->rank);
	if (!y->numel)
		return TPF_OK;
	return tpfc_launch(c, "one hot", y->numel, kThreads, one_hot_kernel, ix->dtype, ix->data, val->data, y->data,
			   (int)tpf_elem_size(y->dtype), depth, inner, y->numel);
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_tile)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_ktensor *y = &c->out[0];
	if (enum tpf_status st = tpfc_need_bytes(c, x->dtype))
		return st;
	if (y->rank != x->rank)
		return tpf_kfail(c, TPF_ERR_INVALID, "output rank differs from the input's");
	TileArgs a;
	memset(&a, 0, sizeof(a));
	a.rank = x->rank;
	for (int d = 0; d < x->rank; d++) {
		if (x->dims[d] ? y->dims[d] % x->dims[d] : y->dims[d])
			return tpf_kfail(c, TPF_ERR_INVALID, "output dim %d is not a multiple of the input's", d);
		a.xdims[d] = x->dims[d];
		a.ydims[d] = y->dims[d];
	}
	if (!y->numel)
		return TPF_OK;
	return tpfc_launch(c, "tile", y->numel, kThreads, tile_kernel, a, x->data, y->data,
			   (int)tpf_elem_size(x->dtype), y->numel);
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_trilu)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_ktensor *y = &c->out[0];
	if (enum tpf_status st = tpfc_need_bytes(c, x->dtype))
		return st;
	if (x->rank < 2 || x->nbytes != y->nbytes)
		return tpf_kfail(c, TPF_ERR_INVALID, "input must have rank 2 or more");
	const struct tpf_ktensor *k = c->n_in > 1 && c->in[1].rank >= 0 && c->in[1].data ? &c->in[1] : NULL;
	if (k && (k->numel != 1 || !tpf_dtype_is_integral(k->dtype)))
		return tpf_kfail(c, TPF_ERR_INVALID, "k must be one integer");
	if (!x->numel)
		return TPF_OK;
	int upper = tpf_node_attr_int(c->node, "upper", 1) != 0;
	return tpfc_launch(c, "trilu", x->numel, kThreads, trilu_kernel, x->data, y->data, (int)tpf_elem_size(x->dtype),
			   k ? k->dtype : 0, k ? k->data : NULL, upper, x->dims[x->rank - 2], x->dims[x->rank - 1],
			   x->numel);
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_cumsum)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_ktensor *y = &c->out[0];
	if (c->n_in < 2 || c->in[1].numel != 1 || !tpf_dtype_is_integral(c->in[1].dtype))
		return tpf_kfail(c, TPF_ERR_INVALID, "axis must be one int32 or int64 value");
	if (!c->in[1].host)
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "axis must be known when the plan is built on cuda");
	struct tpf_cumsum_geom g = {};
	TPF_KTRY(tpf_cumsum_geometry(c, tpf_elem_load_int(c->in[1].dtype, c->in[1].host, 0), &g));
	if (!(tpfc_float_ok(x->dtype) || tpfc_int_ok(x->dtype)))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "dtype %s not supported on cuda", tpf_dtype_name(x->dtype));
	if (!x->numel)
		return TPF_OK;
	return tpfc_launch(c, "cumsum", g.outer * g.inner, kThreads, cumsum_kernel, x->dtype, x->data, y->data, g);
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_size)
{
	struct tpf_ktensor *y = &c->out[0];
	if (y->numel != 1 || y->dtype != TPF_DTYPE_INT64)
		return tpf_kfail(c, TPF_ERR_INVALID, "output must be one int64");
	size_kernel<<<1, 32, 0, tpfc_stream(c)>>>(c->in[0].numel, (int64_t *)y->data);
	return tpfc_launched(c, "size");
}
