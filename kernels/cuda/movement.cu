// SPDX-License-Identifier: MIT
// Data movement on the GPU: copies, Transpose, Slice, Split, Concat,
// Expand and the AllGather reorder as one strided-copy kernel; Gather,
// GatherElements, ScatterElements, Shape, ConstantOfShape, Pack/Unpack.
// Every parameter travels by value in the launch, so all of them can be
// captured into a CUDA graph.
#include "cuda-common.cuh"
#include "op-geometry.h"

#include <string.h>

using namespace tpfc;

namespace {

constexpr int kThreads = 256;

template <typename E, typename I>
__global__ void strided_copy_kernel(const E *src, E *dst, int64_t src_base, int64_t dst_base, I n, Strided s)
{
	for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
		I off[kMaxOps];
		offsets<I>(s, i, off);
		dst[dst_base + off[1]] = src[src_base + off[0]];
	}
}

// s.n == 2: operand 0 the source, 1 the destination, over s.dims (elements
// of es bytes).
enum tpf_status strided_copy(const struct tpf_kernel_call *c, const void *src, void *dst, int64_t src_base,
			     int64_t dst_base, Strided s, size_t es, int64_t n)
{
	if (n <= 0)
		return TPF_OK;
	s.n = 2;
	tpfc_strided_collapse(&s);
	// a contiguous block: one copy
	if (s.rank <= 1 && (s.rank == 0 || (s.strides[0][0] == 1 && s.strides[1][0] == 1))) {
		cudaError_t e = cudaMemcpyAsync((char *)dst + dst_base * (int64_t)es, (const char *)src + src_base * (int64_t)es,
						(size_t)n * es, cudaMemcpyDeviceToDevice, tpfc_stream(c));
		return e == cudaSuccess ? TPF_OK : tpfc_cuda_fail(c, "copy", e);
	}
	unsigned g = tpfc_blocks(n, kThreads);
	cudaStream_t st = tpfc_stream(c);
	bool small = n < INT32_MAX;
#define TPF_COPY(E)                                                                                               \
	do {                                                                                                      \
		if (small)                                                                                        \
			strided_copy_kernel<E, int32_t><<<g, kThreads, 0, st>>>((const E *)src, (E *)dst, src_base, \
										dst_base, (int32_t)n, s);   \
		else                                                                                              \
			strided_copy_kernel<E, int64_t><<<g, kThreads, 0, st>>>((const E *)src, (E *)dst, src_base, \
										dst_base, n, s);            \
	} while (0)
	switch (es) {
	case 1:
		TPF_COPY(uint8_t);
		break;
	case 2:
		TPF_COPY(uint16_t);
		break;
	case 4:
		TPF_COPY(uint32_t);
		break;
	case 8:
		TPF_COPY(uint64_t);
		break;
	default:
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "element size %zu not supported on cuda", es);
	}
#undef TPF_COPY
	return tpfc_launched(c, "strided copy");
}

void contiguous_strides(const int64_t *dims, int rank, int64_t *st)
{
	int64_t s = 1;
	for (int d = rank - 1; d >= 0; d--) {
		st[d] = s;
		s *= dims[d];
	}
}

Strided space_of(const struct tpf_ktensor *t)
{
	Strided s;
	memset(&s, 0, sizeof(s));
	s.rank = t->rank;
	s.n = 2;
	for (int d = 0; d < t->rank; d++)
		s.dims[d] = t->dims[d];
	return s;
}

// ------------------------------------------------------------ gathers

template <typename E>
__global__ void gather_kernel(const E *x, E *y, int di, const void *ix, int64_t outer, int64_t n, int64_t inner,
			      int64_t dim)
{
	int64_t total = outer * n * inner;
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
		int64_t in = i % inner, t = i / inner, j = t % n, o = t / n;
		int64_t k = ld_i(di, ix, j);
		if (k < 0)
			k += dim;
		k = k < 0 ? 0 : k >= dim ? dim - 1 : k; // checked on the host where known
		y[i] = x[(o * dim + k) * inner + in];
	}
}

struct ElemArgs {
	int rank, ax, di;
	int64_t idims[kMaxRank], xdims[kMaxRank];
	const void *ix;
	int64_t n;
};

// The offset in x (GatherElements) or y (ScatterElements) of index element
// i: its own position with the axis coordinate taken from the index, which
// is clamped into the axis.
__device__ __forceinline__ int64_t elements_offset(const ElemArgs &a, int64_t i)
{
	int64_t rem = i, off = 0, mul = 1;
	for (int d = a.rank - 1; d >= 0; d--) {
		int64_t id = rem % a.idims[d];
		rem /= a.idims[d];
		if (d == a.ax) {
			int64_t k = ld_i(a.di, a.ix, i);
			if (k < 0)
				k += a.xdims[d];
			id = k < 0 ? 0 : k >= a.xdims[d] ? a.xdims[d] - 1 : k;
		}
		off += id * mul;
		mul *= a.xdims[d];
	}
	return off;
}

// GatherElements (scatter = 0) and ScatterElements (scatter = 1, mode 0
// none, 1 add)
template <typename E>
__global__ void elements_kernel(ElemArgs a, const E *x, E *y, const E *up, int scatter, int mode)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < a.n; i += (int64_t)gridDim.x * blockDim.x) {
		int64_t off = elements_offset(a, i);
		if (!scatter)
			y[i] = x[off];
		else if (mode == 0)
			y[off] = up[i];
	}
}

template <typename E> __device__ __forceinline__ void atomic_add_elem(E *p, E v);
template <> __device__ __forceinline__ void atomic_add_elem<float>(float *p, float v)
{
	atomicAdd(p, v);
}
template <> __device__ __forceinline__ void atomic_add_elem<double>(double *p, double v)
{
	atomicAdd(p, v);
}
template <> __device__ __forceinline__ void atomic_add_elem<__half>(__half *p, __half v)
{
	atomicAdd(p, v);
}
template <> __device__ __forceinline__ void atomic_add_elem<__nv_bfloat16>(__nv_bfloat16 *p, __nv_bfloat16 v)
{
	atomicAdd(p, v);
}
template <> __device__ __forceinline__ void atomic_add_elem<int32_t>(int32_t *p, int32_t v)
{
	atomicAdd(p, v);
}
template <> __device__ __forceinline__ void atomic_add_elem<int64_t>(int64_t *p, int64_t v)
{
	atomicAdd((unsigned long long *)p, (unsigned long long)v);
}

template <typename E> __global__ void scatter_add_kernel(ElemArgs a, E *y, const E *up)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < a.n; i += (int64_t)gridDim.x * blockDim.x) {
		int64_t off = elements_offset(a, i);
		atomic_add_elem<E>(y + off, up[i]);
	}
}

// Host check of known indices: 0 ok, -1 out of range.
int check_indices(const struct tpf_ktensor *ix, int64_t dim)
{
	if (!ix->host)
		return 0;
	for (int64_t j = 0; j < ix->numel; j++) {
		int64_t k = tpf_elem_load_int(ix->dtype, ix->host, j);
		if (k < -dim || k >= dim)
			return -1;
	}
	return 0;
}

// ------------------------------------------------------------ small fills

struct Ints {
	int64_t v[kMaxRank];
	int n;
};

__global__ void ints_kernel(Ints p, int64_t *y)
{
	if (threadIdx.x < p.n)
		y[threadIdx.x] = p.v[threadIdx.x];
}

__global__ void fill_kernel(uint64_t bits, int es, void *y, int64_t n)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
		store_bits(y, i, es, bits);
}

// ------------------------------------------------------------ segments

constexpr int kSegs = 256;
struct Segs {
	const char *src[kSegs];
	char *dst[kSegs];
	int64_t len[kSegs];
};

__global__ void segments_kernel(Segs s)
{
	const char *src = s.src[blockIdx.y];
	char *dst = s.dst[blockIdx.y];
	int64_t len = s.len[blockIdx.y];
	int64_t first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
	if ((((uintptr_t)src | (uintptr_t)dst | (uintptr_t)len) & 15) == 0) {
		for (int64_t i = first; i < len / 16; i += stride)
			((uint4 *)dst)[i] = ((const uint4 *)src)[i];
	} else {
		for (int64_t i = first; i < len; i += stride)
			dst[i] = src[i];
	}
}

enum tpf_status run_segments(const struct tpf_kernel_call *c, int pack)
{
	const struct tpf_attr *a = tpf_node_attr(c->node, "segments");
	if (!a || a->kind != TPF_ATTR_INTS || a->n % 4)
		return tpf_kfail(c, TPF_ERR_INVALID, "missing or malformed 'segments' attribute");
	enum tpf_dtype dt = pack ? c->out[0].dtype : c->in[0].dtype;
	enum tpf_status st = tpfc_need_bytes(c, dt);
	if (st)
		return st;
	size_t es = tpf_elem_size(dt);
	Segs segs;
	int n = 0;
	int64_t maxlen = 0;
	for (size_t s = 0; s <= a->n; s += 4) {
		if (s == a->n || n == kSegs) {
			if (n) {
				int64_t bx = (maxlen + 16 * 256 - 1) / (16 * 256);
				dim3 grid((unsigned)(bx < 1 ? 1 : bx > 64 ? 64 : bx), (unsigned)n);
				segments_kernel<<<grid, 256, 0, tpfc_stream(c)>>>(segs);
				if ((st = tpfc_launched(c, pack ? "pack" : "unpack")))
					return st;
			}
			n = 0;
			maxlen = 0;
			if (s == a->n)
				break;
		}
		struct tpf_segment g = {};
		TPF_KTRY(tpf_segment_at(c, a, s, pack, &g));
		if (!g.to->data || g.len == 0)
			continue;
		TPF_KTRY(tpf_segment_check(c, &g, s, dt));
		segs.src[n] = (const char *)g.from->data + (size_t)g.src * es;
		segs.dst[n] = (char *)g.to->data + (size_t)g.dst * es;
		segs.len[n] = g.len * (int64_t)es;
		maxlen = segs.len[n] > maxlen ? segs.len[n] : maxlen;
		n++;
	}
	return TPF_OK;
}

} // namespace

extern "C" TPF_CUDA_KERNEL(tpf_cu_copy)
{
	if (c->in[0].nbytes != c->out[0].nbytes)
		return tpf_kfail(c, TPF_ERR_INVALID, "output size %zu differs from input size %zu", c->out[0].nbytes,
				 c->in[0].nbytes);
	if (c->out[0].data == c->in[0].data || !c->out[0].nbytes)
		return TPF_OK;
	cudaError_t e = cudaMemcpyAsync(c->out[0].data, c->in[0].data, c->out[0].nbytes, cudaMemcpyDeviceToDevice,
					tpfc_stream(c));
	return e == cudaSuccess ? TPF_OK : tpfc_cuda_fail(c, "copy", e);
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_transpose)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_ktensor *y = &c->out[0];
	int64_t xs[kMaxRank], ys[kMaxRank];
	TPF_KTRY(tpfc_need_bytes(c, x->dtype));
	TPF_KTRY(tpf_transpose_strides(c, xs));
	contiguous_strides(y->dims, y->rank, ys);
	Strided s = space_of(y);
	for (int d = 0; d < y->rank; d++) {
		s.strides[0][d] = xs[d];
		s.strides[1][d] = ys[d];
	}
	return strided_copy(c, x->data, y->data, 0, 0, s, tpf_elem_size(x->dtype), y->numel);
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_slice)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_ktensor *y = &c->out[0];
	if (enum tpf_status st = tpfc_need_bytes(c, x->dtype))
		return st;
	int64_t start[kMaxRank], step[kMaxRank], od[kMaxRank];
	if (tpf_slice_resolve(c, start, step, od))
		return tpf_kfail(c, TPF_ERR_INVALID, "starts/ends/axes/steps are not valid known integers");
	int64_t xs[kMaxRank], ys[kMaxRank], base = 0;
	contiguous_strides(x->dims, x->rank, xs);
	contiguous_strides(y->dims, y->rank, ys);
	Strided s = space_of(y);
	for (int d = 0; d < y->rank; d++) {
		if (od[d] != y->dims[d])
			return tpf_kfail(c, TPF_ERR_INVALID, "output shape disagrees with the slice");
		s.strides[0][d] = xs[d] * step[d];
		s.strides[1][d] = ys[d];
		base += start[d] * xs[d];
	}
	return strided_copy(c, x->data, y->data, base, 0, s, tpf_elem_size(x->dtype), y->numel);
}

namespace {

// Concat's and Split's common case, in whole 16-byte chunks: `outer`
// blocks; piece k (blockIdx.y) copies n[k] chunks of every block from
// src[k] (blocks src_stride[k] chunks apart) to dst[k] (dst_stride[k]
// apart), one vector load and store a chunk.  Concat: a piece an input,
// landing at an offset of the output's blocks; Split: a piece an output,
// taken from an offset of the input's.
constexpr int kPieces = 8;
struct Blocks16 {
	const uint4 *src[kPieces];
	uint4 *dst[kPieces];
	int64_t n[kPieces], src_stride[kPieces], dst_stride[kPieces];
	int64_t outer;
};

__global__ void copy_blocks16(Blocks16 b)
{
	pdl_trigger(); // the next kernel (the decode attention) may start: it waits
	pdl_wait();
	const int k = blockIdx.y;
	const int64_t n = b.n[k], total = b.outer * n;
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
		int64_t o = i / n, j = i - o * n;
		b.dst[k][o * b.dst_stride[k] + j] = b.src[k][o * b.src_stride[k] + j];
	}
}

// Launches copy_blocks16 for pieces 0..np-1 (most: the largest outer * n).
enum tpf_status launch_blocks16(const struct tpf_kernel_call *c, const Blocks16 &b, int np, int64_t most,
				const char *what)
{
	dim3 grid(tpfc_blocks(most, 256), (unsigned)np);
	return tpfc_launched_ex(
		c, tpfc_launch_pdl(tpfc_pdl(TPF_PDL_COPY), copy_blocks16, grid, dim3(256), 0, tpfc_stream(c), b), what);
}

bool is16(int64_t v)
{
	return v % 16 == 0;
}

// Split in one launch when every piece is whole 16-byte chunks (1; *st the
// launch's status), else 0.
int split_fast(const struct tpf_kernel_call *c, int ax, enum tpf_status *st)
{
	const struct tpf_ktensor *x = &c->in[0];
	if (c->n_out > kPieces || !is16((int64_t)(uintptr_t)x->data))
		return 0;
	const int64_t es = (int64_t)tpf_elem_size(x->dtype);
	const int64_t outer = tpf_dims_prod(x->dims, 0, ax), inner = tpf_dims_prod(x->dims, ax + 1, x->rank);
	const int64_t row = x->dims[ax] * inner * es; // bytes of one input block
	if (!is16(row) || outer <= 0)
		return 0;
	Blocks16 b;
	memset(&b, 0, sizeof(b));
	b.outer = outer;
	int np = 0;
	int64_t pos = 0, most = 0;
	for (size_t k = 0; k < c->n_out; k++) {
		const struct tpf_ktensor *y = &c->out[k];
		for (int d = 0; d < x->rank; d++)
			if (d != ax && y->dims[d] != x->dims[d])
				return 0;
		const int64_t bytes = y->dims[ax] * inner * es, at = pos * inner * es;
		pos += y->dims[ax];
		if (!y->data || bytes == 0)
			continue;
		if (!is16(bytes) || !is16(at) || !is16((int64_t)(uintptr_t)y->data))
			return 0;
		b.src[np] = (const uint4 *)x->data + at / 16;
		b.dst[np] = (uint4 *)y->data;
		b.n[np] = b.dst_stride[np] = bytes / 16;
		b.src_stride[np] = row / 16;
		most = outer * b.n[np] > most ? outer * b.n[np] : most;
		np++;
	}
	*st = np ? launch_blocks16(c, b, np, most, "split") : TPF_OK;
	return 1;
}

} // namespace

extern "C" TPF_CUDA_KERNEL(tpf_cu_split)
{
	const struct tpf_ktensor *x = &c->in[0];
	enum tpf_status st = tpfc_need_bytes(c, x->dtype);
	if (st)
		return st;
	int ax = tpf_norm_axis(tpf_node_attr_int(c->node, "axis", 0), x->rank);
	if (ax < 0)
		return tpf_kfail(c, TPF_ERR_INVALID, "axis out of range");
	int64_t total = 0;
	for (size_t k = 0; k < c->n_out; k++)
		total += c->out[k].data ? c->out[k].dims[ax] : 0;
	if (total > x->dims[ax])
		return tpf_kfail(c, TPF_ERR_INVALID, "outputs exceed the split axis");
	for (size_t k = 0; k < c->n_out; k++)
		if (c->out[k].data && c->out[k].rank != x->rank)
			return tpf_kfail(c, TPF_ERR_INVALID, "output %zu rank differs from the input's", k);
	if (split_fast(c, ax, &st))
		return st;
	int64_t xs[kMaxRank], ys[kMaxRank], pos = 0;
	contiguous_strides(x->dims, x->rank, xs);
	for (size_t k = 0; k < c->n_out; k++) {
		struct tpf_ktensor *y = &c->out[k];
		if (!y->data)
			continue;
		contiguous_strides(y->dims, y->rank, ys);
		Strided s = space_of(y);
		for (int d = 0; d < y->rank; d++) {
			s.strides[0][d] = xs[d];
			s.strides[1][d] = ys[d];
		}
		if ((st = strided_copy(c, x->data, y->data, pos * xs[ax], 0, s, tpf_elem_size(x->dtype), y->numel)))
			return st;
		pos += y->dims[ax];
	}
	return TPF_OK;
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_concat)
{
	struct tpf_ktensor *y = &c->out[0];
	enum tpf_status st = tpfc_need_bytes(c, y->dtype);
	if (st)
		return st;
	int ax = tpf_norm_axis(tpf_node_attr_int(c->node, "axis", 0), y->rank);
	if (ax < 0)
		return tpf_kfail(c, TPF_ERR_INVALID, "axis out of range");
	int64_t xs[kMaxRank], ys[kMaxRank], pos = 0;
	contiguous_strides(y->dims, y->rank, ys);
	for (size_t k = 0; k < c->n_in; k++) {
		const struct tpf_ktensor *x = &c->in[k];
		if (x->rank != y->rank || x->dtype != y->dtype)
			return tpf_kfail(c, TPF_ERR_INVALID, "input %zu rank or dtype differs", k);
		if (pos + x->dims[ax] > y->dims[ax])
			return tpf_kfail(c, TPF_ERR_INVALID, "inputs exceed the output along the axis");
		size_t es = tpf_elem_size(y->dtype);
		int64_t outer = tpf_dims_prod(y->dims, 0, ax), inner = tpf_dims_prod(y->dims, ax + 1, y->rank);
		int64_t in_b = x->dims[ax] * inner * (int64_t)es, out_b = y->dims[ax] * inner * (int64_t)es;
		int64_t off_b = pos * inner * (int64_t)es;
		if (is16(in_b) && is16(out_b) && is16(off_b) && is16((int64_t)(uintptr_t)x->data) &&
		    is16((int64_t)(uintptr_t)y->data)) {
			if (x->numel) {
				Blocks16 b;
				memset(&b, 0, sizeof(b));
				b.src[0] = (const uint4 *)x->data;
				b.dst[0] = (uint4 *)y->data + off_b / 16;
				b.n[0] = b.src_stride[0] = in_b / 16;
				b.dst_stride[0] = out_b / 16;
				b.outer = outer;
				if ((st = launch_blocks16(c, b, 1, outer * (in_b / 16), "concat")))
					return st;
			}
			pos += x->dims[ax];
			continue;
		}
		contiguous_strides(x->dims, x->rank, xs);
		Strided s = space_of(x);
		for (int d = 0; d < x->rank; d++) {
			s.strides[0][d] = xs[d];
			s.strides[1][d] = ys[d];
		}
		if ((st = strided_copy(c, x->data, y->data, 0, pos * ys[ax], s, tpf_elem_size(y->dtype), x->numel)))
			return st;
		pos += x->dims[ax];
	}
	return TPF_OK;
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_expand)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_ktensor *y = &c->out[0];
	if (enum tpf_status st = tpfc_need_bytes(c, x->dtype))
		return st;
	const struct tpf_ktensor *ins[2] = {x, y};
	Strided s;
	if (tpfc_strided_bcast(&s, y, ins, 2))
		return tpf_kfail(c, TPF_ERR_INVALID, "input does not broadcast to the output shape");
	return strided_copy(c, x->data, y->data, 0, 0, s, tpf_elem_size(x->dtype), y->numel);
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_gather_reorder)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_ktensor *y = &c->out[0];
	if (enum tpf_status st = tpfc_need_bytes(c, y->dtype))
		return st;
	int ax = tpf_norm_axis(tpf_node_attr_int(c->node, "axis", 0), y->rank);
	if (ax < 0 || c->world < 1 || y->dims[ax] % c->world || x->nbytes != y->nbytes)
		return tpf_kfail(c, TPF_ERR_INVALID, "gathered shape does not split into %d chunks", c->world);
	int64_t outer = tpf_dims_prod(y->dims, 0, ax);
	int64_t piece = y->dims[ax] / c->world * tpf_dims_prod(y->dims, ax + 1, y->rank);
	Strided s;
	memset(&s, 0, sizeof(s));
	s.rank = 3;
	s.n = 2;
	s.dims[0] = c->world;
	s.dims[1] = outer;
	s.dims[2] = piece;
	s.strides[0][0] = outer * piece; // source: rank-major chunks
	s.strides[0][1] = piece;
	s.strides[0][2] = 1;
	s.strides[1][0] = piece; // destination: (o * world + r) * piece
	s.strides[1][1] = (int64_t)c->world * piece;
	s.strides[1][2] = 1;
	return strided_copy(c, x->data, y->data, 0, 0, s, tpf_elem_size(y->dtype), y->numel);
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_gather)
{
	const struct tpf_ktensor *x = &c->in[0], *ix = &c->in[1];
	struct tpf_ktensor *y = &c->out[0];
	if (enum tpf_status st = tpfc_need_bytes(c, x->dtype))
		return st;
	int ax = tpf_norm_axis(tpf_node_attr_int(c->node, "axis", 0), x->rank);
	if (ax < 0)
		return tpf_kfail(c, TPF_ERR_INVALID, "axis out of range");
	if (!tpfc_int_ok(ix->dtype))
		return tpf_kfail(c, TPF_ERR_INVALID, "indices must be integers");
	int64_t outer = tpf_dims_prod(x->dims, 0, ax), inner = tpf_dims_prod(x->dims, ax + 1, x->rank);
	int64_t dim = x->dims[ax], n = ix->numel;
	if (outer * n * inner != y->numel)
		return tpf_kfail(c, TPF_ERR_INVALID, "output size disagrees with the indices");
	if (check_indices(ix, dim))
		return tpf_kfail(c, TPF_ERR_INVALID, "index out of range [-%lld, %lld)", (long long)dim, (long long)dim);
	if (!y->numel)
		return TPF_OK;
	if (!dim)
		return tpf_kfail(c, TPF_ERR_INVALID, "gather from an empty axis");
	unsigned g = tpfc_blocks(y->numel, kThreads);
	cudaStream_t s = tpfc_stream(c);
	by_elem_size(tpf_elem_size(x->dtype), [&](auto e) {
		typedef decltype(e) E;
		gather_kernel<E><<<g, kThreads, 0, s>>>((const E *)x->data, (E *)y->data, ix->dtype, ix->data, outer, n,
							inner, dim);
	});
	return tpfc_launched(c, "gather");
}

namespace {

enum tpf_status elements_setup(const struct tpf_kernel_call *c, ElemArgs *a)
{
	const struct tpf_ktensor *x = &c->in[0], *ix = &c->in[1];
	memset(a, 0, sizeof(*a));
	int ax = tpf_norm_axis(tpf_node_attr_int(c->node, "axis", 0), x->rank);
	if (ax < 0 || ix->rank != x->rank)
		return tpf_kfail(c, TPF_ERR_INVALID, "axis out of range or rank mismatch");
	if (!tpfc_int_ok(ix->dtype))
		return tpf_kfail(c, TPF_ERR_INVALID, "indices must be integers");
	for (int d = 0; d < x->rank; d++) {
		if (d != ax && ix->dims[d] > x->dims[d])
			return tpf_kfail(c, TPF_ERR_INVALID, "indices shape exceeds data shape");
		a->idims[d] = ix->dims[d];
		a->xdims[d] = x->dims[d];
	}
	if (check_indices(ix, x->dims[ax]))
		return tpf_kfail(c, TPF_ERR_INVALID, "index out of range");
	if (ix->numel && !x->dims[ax])
		return tpf_kfail(c, TPF_ERR_INVALID, "index into an empty axis");
	a->rank = x->rank;
	a->ax = ax;
	a->di = ix->dtype;
	a->ix = ix->data;
	a->n = ix->numel;
	return TPF_OK;
}

template <typename E>
void launch_elements(const struct tpf_kernel_call *c, const ElemArgs &a, int scatter, int mode)
{
	unsigned g = tpfc_blocks(a.n, kThreads);
	const E *x = (const E *)c->in[0].data;
	E *y = (E *)c->out[0].data;
	const E *up = scatter ? (const E *)c->in[2].data : NULL;
	elements_kernel<E><<<g, kThreads, 0, tpfc_stream(c)>>>(a, x, y, up, scatter, mode);
}

} // namespace

extern "C" TPF_CUDA_KERNEL(tpf_cu_gather_elements)
{
	const struct tpf_ktensor *x = &c->in[0];
	enum tpf_status st = tpfc_need_bytes(c, x->dtype);
	ElemArgs a;
	if (st || (st = elements_setup(c, &a)))
		return st;
	if (!a.n)
		return TPF_OK;
	by_elem_size(tpf_elem_size(x->dtype), [&](auto e) { launch_elements<decltype(e)>(c, a, 0, 0); });
	return tpfc_launched(c, "gather elements");
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_scatter_elements)
{
	const struct tpf_ktensor *x = &c->in[0], *up = &c->in[2];
	struct tpf_ktensor *y = &c->out[0];
	enum tpf_status st = tpfc_need_bytes(c, x->dtype);
	ElemArgs a;
	if (st || (st = elements_setup(c, &a)))
		return st;
	if (up->numel != c->in[1].numel || up->dtype != x->dtype)
		return tpf_kfail(c, TPF_ERR_INVALID, "updates disagree with the indices");
	const char *red;
	int mode = tpf_scatter_reduction(c, &red);
	int add = mode == TPF_SCATTER_ADD;
	if (!add && mode != TPF_SCATTER_NONE)
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "reduction '%s' not supported on cuda", red);
	if ((st = tpfc_copy_input(c, x, y)))
		return st;
	if (!a.n)
		return TPF_OK;
	unsigned g = tpfc_blocks(a.n, kThreads);
	cudaStream_t s = tpfc_stream(c);
	if (add) {
		switch (x->dtype) {
		case TPF_DTYPE_FLOAT:
			scatter_add_kernel<float><<<g, kThreads, 0, s>>>(a, (float *)y->data, (const float *)up->data);
			break;
		case TPF_DTYPE_DOUBLE:
			scatter_add_kernel<double><<<g, kThreads, 0, s>>>(a, (double *)y->data, (const double *)up->data);
			break;
		case TPF_DTYPE_FLOAT16:
			scatter_add_kernel<__half><<<g, kThreads, 0, s>>>(a, (__half *)y->data, (const __half *)up->data);
			break;
		case TPF_DTYPE_BFLOAT16:
			scatter_add_kernel<__nv_bfloat16><<<g, kThreads, 0, s>>>(a, (__nv_bfloat16 *)y->data,
										 (const __nv_bfloat16 *)up->data);
			break;
		case TPF_DTYPE_INT32:
			scatter_add_kernel<int32_t><<<g, kThreads, 0, s>>>(a, (int32_t *)y->data, (const int32_t *)up->data);
			break;
		case TPF_DTYPE_INT64:
			scatter_add_kernel<int64_t><<<g, kThreads, 0, s>>>(a, (int64_t *)y->data, (const int64_t *)up->data);
			break;
		default:
			return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "reduction 'add' of %s not supported on cuda",
					 tpf_dtype_name(x->dtype));
		}
		return tpfc_launched(c, "scatter elements");
	}
	by_elem_size(tpf_elem_size(x->dtype), [&](auto e) { launch_elements<decltype(e)>(c, a, 1, 0); });
	return tpfc_launched(c, "scatter elements");
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_shape)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_ktensor *y = &c->out[0];
	int64_t s, n = tpf_slice_span(x->rank, tpf_node_attr_int(c->node, "start", 0),
				      tpf_node_attr_int(c->node, "end", x->rank), 1, &s);
	if (y->numel != n || y->dtype != TPF_DTYPE_INT64)
		return tpf_kfail(c, TPF_ERR_INVALID, "output size disagrees with start/end");
	if (!n)
		return TPF_OK;
	Ints p;
	memset(&p, 0, sizeof(p));
	p.n = (int)n;
	for (int64_t i = 0; i < n; i++)
		p.v[i] = x->dims[s + i];
	ints_kernel<<<1, 32, 0, tpfc_stream(c)>>>(p, (int64_t *)y->data);
	return tpfc_launched(c, "shape");
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_constant_of_shape)
{
	struct tpf_ktensor *y = &c->out[0];
	const struct tpf_attr *a = tpf_node_attr(c->node, "value");
	if (enum tpf_status st = tpfc_need_bytes(c, y->dtype))
		return st;
	size_t es = tpf_elem_size(y->dtype);
	uint64_t bits = 0;
	if (a && a->t && a->t->data) {
		if (a->t->dtype != y->dtype || a->t->nbytes < es)
			return tpf_kfail(c, TPF_ERR_INVALID, "value attribute disagrees with the output dtype");
		memcpy(&bits, a->t->data, es);
	}
	if (!y->numel)
		return TPF_OK;
	return tpfc_launch(c, "constant of shape", y->numel, kThreads, fill_kernel, bits, (int)es, y->data, y->numel);
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_pack)
{
	return run_segments(c, 1);
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_unpack)
{
	return run_segments(c, 0);
}
