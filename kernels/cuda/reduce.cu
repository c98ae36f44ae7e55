// SPDX-License-Identifier: MIT
// Reductions (ReduceMean/Sum/Max over any axes), Softmax, TopK and ArgMax.
// Float types accumulate in float32 (DOUBLE in double), integers in int64.
#include "cuda-common.cuh"
#include "op-geometry.h"

#include <string.h>

using namespace tpfc;

namespace {

// ------------------------------------------------------------ reductions

// One warp per output element: `kept` maps the output index to the input
// base offset, `red` maps the reduced index to an offset from that base.
struct ReduceArgs {
	int op, dx, dy, mode; // mode 0 float, 1 double, 2 int
	const void *x;
	void *y;
	int64_t n_out, count;
	Strided kept, red;
};

template <typename A> __device__ __forceinline__ A warp_sum(A v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

template <typename A> __device__ __forceinline__ A warp_max(A v)
{
	for (int o = 16; o > 0; o >>= 1) {
		A w = __shfl_xor_sync(0xffffffffu, v, o);
		v = (isnan((double)w) || w > v) ? w : v;
	}
	return v;
}

__device__ __forceinline__ int64_t warp_sum_i(int64_t v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ int64_t warp_max_i(int64_t v)
{
	for (int o = 16; o > 0; o >>= 1) {
		int64_t w = __shfl_xor_sync(0xffffffffu, v, o);
		v = w > v ? w : v;
	}
	return v;
}

template <typename A> __device__ void reduce_one(const ReduceArgs &p, int64_t o, int64_t base, int lane)
{
	bool is_max = p.op == TPF_OP_REDUCE_MAX;
	A acc = is_max ? (A)-INFINITY : (A)0;
	for (int64_t r = lane; r < p.count; r += 32) {
		int64_t off[kMaxOps];
		offsets<int64_t>(p.red, r, off);
		A v = sizeof(A) == 8 ? (A)ld_d(p.dx, p.x, base + off[0]) : (A)ld_f(p.dx, p.x, base + off[0]);
		if (is_max)
			acc = (v > acc || isnan((double)v)) ? v : acc;
		else
			acc += v;
	}
	acc = is_max ? warp_max<A>(acc) : warp_sum<A>(acc);
	if (lane == 0) {
		if (p.op == TPF_OP_REDUCE_MEAN)
			acc = acc / (A)p.count;
		st_d(p.dy, p.y, o, (double)acc);
	}
}

__global__ void reduce_kernel(ReduceArgs p)
{
	int lane = threadIdx.x & 31;
	int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
	for (int64_t o = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32; o < p.n_out; o += warps) {
		int64_t boff[kMaxOps];
		offsets<int64_t>(p.kept, o, boff);
		int64_t base = boff[0];
		if (p.mode == 0) {
			reduce_one<float>(p, o, base, lane);
		} else if (p.mode == 1) {
			reduce_one<double>(p, o, base, lane);
		} else {
			bool is_max = p.op == TPF_OP_REDUCE_MAX;
			int64_t acc = is_max ? INT64_MIN : 0;
			for (int64_t r = lane; r < p.count; r += 32) {
				int64_t off[kMaxOps];
				offsets<int64_t>(p.red, r, off);
				int64_t v = ld_i(p.dx, p.x, base + off[0]);
				acc = is_max ? (v > acc ? v : acc) : acc + v;
			}
			acc = is_max ? warp_max_i(acc) : warp_sum_i(acc);
			if (lane == 0) {
				if (p.op == TPF_OP_REDUCE_MEAN)
					acc = p.count ? acc / p.count : 0;
				st_i(p.dy, p.y, o, acc);
			}
		}
	}
}

// ------------------------------------------------------------ softmax

__global__ void softmax_kernel(int dx, const void *x, int dy, void *y, int64_t rows, int64_t len, int64_t inner,
			       int wide)
{
	__shared__ double scratch[33];
	for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
		int64_t o = row / inner, in = row % inner;
		int64_t base = o * len * inner + in;
		// max
		double mx = -INFINITY;
		for (int64_t k = threadIdx.x; k < len; k += blockDim.x) {
			double v = ld_d(dx, x, base + k * inner);
			mx = v > mx ? v : mx;
		}
		for (int s = 16; s > 0; s >>= 1) {
			double w = __shfl_xor_sync(0xffffffffu, mx, s);
			mx = w > mx ? w : mx;
		}
		int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = (blockDim.x + 31) >> 5;
		if (lane == 0)
			scratch[warp] = mx;
		__syncthreads();
		if (threadIdx.x == 0) {
			double m = scratch[0];
			for (int w = 1; w < nw; w++)
				m = scratch[w] > m ? scratch[w] : m;
			scratch[32] = m;
		}
		__syncthreads();
		mx = scratch[32];
		__syncthreads();
		// sum
		double sum = 0;
		for (int64_t k = threadIdx.x; k < len; k += blockDim.x) {
			double v = ld_d(dx, x, base + k * inner);
			sum += wide ? exp(v - mx) : (double)expf((float)(v - mx));
		}
		if (!wide)
			sum = (double)(float)sum;
		float sf = (float)sum;
		for (int s = 16; s > 0; s >>= 1) {
			if (wide)
				sum += __shfl_xor_sync(0xffffffffu, sum, s);
			else
				sf += __shfl_xor_sync(0xffffffffu, sf, s);
		}
		if (lane == 0)
			scratch[warp] = wide ? sum : (double)sf;
		__syncthreads();
		if (threadIdx.x == 0) {
			double t = 0;
			float tf = 0;
			for (int w = 0; w < nw; w++) {
				t += scratch[w];
				tf += (float)scratch[w];
			}
			scratch[32] = wide ? t : (double)tf;
		}
		__syncthreads();
		double total = scratch[32];
		__syncthreads();
		for (int64_t k = threadIdx.x; k < len; k += blockDim.x) {
			double v = ld_d(dx, x, base + k * inner);
			if (wide)
				st_d(dy, y, base + k * inner, exp(v - mx) / total);
			else
				st_f(dy, y, base + k * inner, expf((float)(v - mx)) / (float)total);
		}
	}
}

// ------------------------------------------------------------ topk / argmax

// a comes before b in the output order
__device__ __forceinline__ bool topk_before(double a, int64_t ia, double b, int64_t ib, bool largest)
{
	bool an = isnan(a), bn = isnan(b);
	if (an != bn)
		return largest ? an : bn;
	if (!an) {
		if (a != b)
			return largest ? a > b : a < b;
	}
	return ia < ib;
}

// One warp per row: the j-th pick is the first element (in output order)
// after the (j-1)-th.
__global__ void topk_kernel(int dx, const void *x, void *vals, int64_t *idx, int es, int64_t rows, int64_t len,
			    int64_t inner, int64_t k, int largest, int integral)
{
	int lane = threadIdx.x & 31;
	int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
	for (int64_t row = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32; row < rows; row += warps) {
		int64_t o = row / inner, in = row % inner;
		double pv = 0;
		int64_t pi = -1;
		for (int64_t j = 0; j < k; j++) {
			double bv = 0;
			int64_t bi = -1;
			for (int64_t t = lane; t < len; t += 32) {
				int64_t off = (o * len + t) * inner + in;
				double v = integral ? (double)ld_i(dx, x, off) : ld_d(dx, x, off);
				if (pi >= 0 && !topk_before(pv, pi, v, t, largest))
					continue; // at or before the previous pick
				if (bi < 0 || topk_before(v, t, bv, bi, largest)) {
					bv = v;
					bi = t;
				}
			}
			for (int s = 16; s > 0; s >>= 1) {
				double ov = __shfl_xor_sync(0xffffffffu, bv, s);
				int64_t oi = __shfl_xor_sync(0xffffffffu, bi, s);
				if (oi >= 0 && (bi < 0 || topk_before(ov, oi, bv, bi, largest))) {
					bv = ov;
					bi = oi;
				}
			}
			if (lane == 0 && bi >= 0) {
				int64_t oo = (o * k + j) * inner + in, src = (o * len + bi) * inner + in;
				const char *sp = (const char *)x + src * es;
				char *dp = (char *)vals + oo * es;
				for (int b = 0; b < es; b++)
					dp[b] = sp[b];
				idx[oo] = bi;
			}
			pv = bv;
			pi = bi;
		}
	}
}

__global__ void argmax_kernel(int dx, const void *x, int64_t *y, int64_t rows, int64_t len, int64_t inner, int last)
{
	for (int64_t row = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; row < rows;
	     row += (int64_t)gridDim.x * blockDim.x) {
		int64_t o = row / inner, in = row % inner;
		double best = -INFINITY;
		int64_t bi = 0;
		for (int64_t j = 0; j < len; j++) {
			double v = ld_d(dx, x, (o * len + j) * inner + in);
			if (j == 0 || v > best || (last && v == best)) {
				best = v;
				bi = j;
			}
		}
		y[row] = bi;
	}
}

// One block a row where the reduced axis is the innermost and long (a
// vocabulary's logits): the threads stride over the row, then combine
// (value, index) pairs in shared memory; ties keep the first index (the
// last with select_last_index), as the one-thread-a-row kernel does.
constexpr int kArgRowThreads = 256;
__global__ void argmax_rows_kernel(int dx, const void *x, int64_t *y, int64_t len, int last)
{
	__shared__ double sv[kArgRowThreads];
	__shared__ int64_t si[kArgRowThreads];
	const int64_t row = blockIdx.x;
	double best = -INFINITY;
	int64_t bi = -1;
	for (int64_t j = threadIdx.x; j < len; j += kArgRowThreads) {
		double v = ld_d(dx, x, row * len + j);
		if (bi < 0 || v > best || (last && v == best)) {
			best = v;
			bi = j;
		}
	}
	sv[threadIdx.x] = best;
	si[threadIdx.x] = bi;
	__syncthreads();
	for (int w = kArgRowThreads / 2; w > 0; w >>= 1) {
		if (threadIdx.x < w) {
			double ov = sv[threadIdx.x + w];
			int64_t oi = si[threadIdx.x + w], mi = si[threadIdx.x];
			if (oi >= 0 && (mi < 0 || ov > sv[threadIdx.x] ||
					(ov == sv[threadIdx.x] && (last ? oi > mi : oi < mi)))) {
				sv[threadIdx.x] = ov;
				si[threadIdx.x] = oi;
			}
		}
		__syncthreads();
	}
	if (threadIdx.x == 0)
		y[row] = si[0] < 0 ? 0 : si[0];
}

} // namespace

extern "C" TPF_CUDA_KERNEL(tpf_cu_reduce)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_ktensor *y = &c->out[0];
	int red[TPF_KERNEL_MAX_RANK];
	if (tpf_reduce_axes(c, x->rank, red, NULL) < 0)
		return tpf_kfail(c, TPF_ERR_INVALID, "bad axes");
	if (!tpfc_float_ok(x->dtype) && !tpfc_int_ok(x->dtype))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "dtype %s not supported on cuda", tpf_dtype_name(x->dtype));
	ReduceArgs p;
	memset(&p, 0, sizeof(p));
	p.op = c->node->op;
	p.dx = x->dtype;
	p.dy = y->dtype;
	p.x = x->data;
	p.y = y->data;
	p.mode = tpf_dtype_is_integral(x->dtype) ? 2 : x->dtype == TPF_DTYPE_DOUBLE ? 1 : 0;
	p.kept.n = p.red.n = 1;
	int64_t stride[TPF_KERNEL_MAX_RANK], s = 1, n_out = 1, count = 1;
	for (int d = x->rank - 1; d >= 0; d--) {
		stride[d] = s;
		s *= x->dims[d];
	}
	for (int d = 0; d < x->rank; d++) {
		Strided *t = red[d] ? &p.red : &p.kept;
		t->dims[t->rank] = x->dims[d];
		t->strides[0][t->rank] = stride[d];
		t->rank++;
		if (red[d])
			count *= x->dims[d];
		else
			n_out *= x->dims[d];
	}
	if (n_out != y->numel)
		return tpf_kfail(c, TPF_ERR_INVALID, "output has %lld elements, expected %lld", (long long)y->numel,
				 (long long)n_out);
	tpfc_strided_collapse(&p.kept);
	tpfc_strided_collapse(&p.red);
	p.n_out = n_out;
	p.count = count;
	if (!n_out)
		return TPF_OK;
	reduce_kernel<<<tpfc_blocks(n_out * 32, 256), 256, 0, tpfc_stream(c)>>>(p);
	return tpfc_launched(c, "reduce");
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_softmax)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_ktensor *y = &c->out[0];
	int64_t outer, len, inner;
	if (!tpfc_float_ok(x->dtype) || !tpfc_float_ok(y->dtype))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "dtype %s not supported on cuda", tpf_dtype_name(x->dtype));
	if (tpf_softmax_view(c, x, &outer, &len, &inner))
		return tpf_kfail(c, TPF_ERR_INVALID, "axis out of range");
	int64_t rows = outer * inner;
	if (!rows || !len)
		return TPF_OK;
	int threads = len >= 1024 ? 256 : len >= 128 ? 128 : 32;
	unsigned g = (unsigned)(rows < 65535 * 4 ? rows : 65535 * 4);
	softmax_kernel<<<g, threads, 0, tpfc_stream(c)>>>(x->dtype, x->data, y->dtype, y->data, rows, len, inner,
							   x->dtype == TPF_DTYPE_DOUBLE);
	return tpfc_launched(c, "softmax");
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_topk)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_topk_args t;
	enum tpf_status st = tpf_topk_args(c, &t);
	if (st)
		return st;
	struct tpf_ktensor *vals = &c->out[0], *idx = &c->out[1];
	int64_t k = t.k, len = t.len;
	size_t es = tpf_elem_size(x->dtype);
	if (!es || idx->dtype != TPF_DTYPE_INT64 || (!tpfc_float_ok(x->dtype) && !tpfc_int_ok(x->dtype)))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "dtype %s not supported on cuda", tpf_dtype_name(x->dtype));
	int64_t rows = t.outer * t.inner;
	if (!rows || !k)
		return TPF_OK;
	topk_kernel<<<tpfc_blocks(rows * 32, 128), 128, 0, tpfc_stream(c)>>>(
		x->dtype, x->data, vals->data, (int64_t *)idx->data, (int)es, rows, len, t.inner, k, t.largest,
		tpf_dtype_is_integral(x->dtype));
	return tpfc_launched(c, "topk");
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_argmax)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_ktensor *y = &c->out[0];
	int ax = tpf_norm_axis(tpf_node_attr_int(c->node, "axis", 0), x->rank);
	if (ax < 0)
		return tpf_kfail(c, TPF_ERR_INVALID, "axis out of range");
	if (y->dtype != TPF_DTYPE_INT64 || (!tpfc_float_ok(x->dtype) && !tpfc_int_ok(x->dtype)))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "dtype %s not supported on cuda", tpf_dtype_name(x->dtype));
	int last = (int)tpf_node_attr_int(c->node, "select_last_index", 0);
	int64_t len = x->dims[ax];
	int64_t rows = tpf_dims_prod(x->dims, 0, ax) * tpf_dims_prod(x->dims, ax + 1, x->rank);
	if (!rows)
		return TPF_OK;
	int64_t inner = tpf_dims_prod(x->dims, ax + 1, x->rank);
	if (inner == 1 && len >= 1024 && rows <= INT32_MAX)
		argmax_rows_kernel<<<(unsigned)rows, kArgRowThreads, 0, tpfc_stream(c)>>>(
			x->dtype, x->data, (int64_t *)y->data, len, last);
	else
		argmax_kernel<<<tpfc_blocks(rows, 128), 128, 0, tpfc_stream(c)>>>(
			x->dtype, x->data, (int64_t *)y->data, rows, len, inner, last);
	return tpfc_launched(c, "argmax");
}
