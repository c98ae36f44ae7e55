// SPDX-License-Identifier: MIT
// CUDA kernels of the decode fusions: ai.tpfuse.GatedActivation (the SiLU
// or GELU gate times up of a gated MLP, two inputs or one packed [.., 2N])
// and ONNX RotaryEmbedding (opset 23).  They round where the CPU reference
// (kernels/cpu/fused-decode.c) rounds: the activation to T before the
// product, each rotary product and sum to T.  Operands are read through
// fused-decode-host.h on both backends.
#include "cuda-common.cuh"
#include "fused-decode-host.h"
#include "gated-act.cuh"

namespace {

constexpr int kThreads = 256;

using tpfc::Cvt;
using tpfc::pdl_trigger;
using tpfc::pdl_wait;
using tpfc::gated_act;
using tpfc::gated_round;

// Vectorized: 16-byte chunks of gate, up and Y (n and both base pointers a
// multiple of the chunk).  Row r's gate starts at gate + r * stride, its
// up at up + r * stride.
template <typename T, int A>
__global__ void gated_vec_kernel(const T *gate, const T *up, T *y, int64_t rows, int64_t n, int64_t stride,
				 bool cube)
{
	constexpr int N = 16 / sizeof(T);
	const int64_t cpr = n / N, total = rows * cpr;
	pdl_trigger(); // the down projection's GEMV may start loading its weight
	pdl_wait();
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
	     i += (int64_t)gridDim.x * blockDim.x) {
		const int64_t r = i / cpr, c0 = (i % cpr) * N;
		uint4 gu = *reinterpret_cast<const uint4 *>(gate + r * stride + c0);
		uint4 uu = *reinterpret_cast<const uint4 *>(up + r * stride + c0);
		uint4 ou;
		const T *g = reinterpret_cast<const T *>(&gu);
		const T *u = reinterpret_cast<const T *>(&uu);
		T *o = reinterpret_cast<T *>(&ou);
#pragma unroll
		for (int k = 0; k < N; k++)
			o[k] = Cvt<T>::out(gated_act<T, A>(Cvt<T>::in(g[k]), cube) * Cvt<T>::in(u[k]));
		*reinterpret_cast<uint4 *>(y + r * n + c0) = ou;
	}
}

template <typename T, int A>
__global__ void gated_scalar_kernel(const T *gate, const T *up, T *y, int64_t rows, int64_t n, int64_t stride,
				    bool cube)
{
	const int64_t total = rows * n;
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
	     i += (int64_t)gridDim.x * blockDim.x) {
		const int64_t r = i / n, j = i % n;
		y[i] = Cvt<T>::out(gated_act<T, A>(Cvt<T>::in(gate[r * stride + j]), cube) *
				      Cvt<T>::in(up[r * stride + j]));
	}
}

// The launch's status (cudaLaunchKernelEx's, or the last error).
template <typename T, int A>
cudaError_t launch_gated(const void *gate, const void *up, void *y, int64_t rows, int64_t n, int64_t stride,
			 bool cube, cudaStream_t st)
{
	constexpr int N = 16 / sizeof(T);
	const bool vec = n % N == 0 && stride % N == 0 &&
			 (((uintptr_t)gate | (uintptr_t)up | (uintptr_t)y) % 16) == 0;
	if (vec)
		return tpfc_launch_pdl(tpfc_pdl(TPF_PDL_GATED), gated_vec_kernel<T, A>,
				       dim3(tpfc_blocks(rows * n / N, kThreads)), dim3(kThreads), 0, st, (const T *)gate,
				       (const T *)up, (T *)y, rows, n, stride, cube);
	gated_scalar_kernel<T, A><<<tpfc_blocks(rows * n, kThreads), kThreads, 0, st>>>(
		(const T *)gate, (const T *)up, (T *)y, rows, n, stride, cube);
	return cudaSuccess;
}

template <typename T>
cudaError_t launch_gated_act(enum tpf_gated_act a, const void *gate, const void *up, void *y, int64_t rows,
			     int64_t n, int64_t stride, bool cube, cudaStream_t st)
{
	switch (a) {
	case TPF_GATED_GELU:
		return launch_gated<T, TPF_GATED_GELU>(gate, up, y, rows, n, stride, cube, st);
	case TPF_GATED_GELU_TANH:
		return launch_gated<T, TPF_GATED_GELU_TANH>(gate, up, y, rows, n, stride, cube, st);
	default:
		return launch_gated<T, TPF_GATED_SILU>(gate, up, y, rows, n, stride, cube, st);
	}
}

// One thread per (batch, seq, head, pair) of the rotated part, and one per
// element of the unrotated tail.  A position id outside the caches gives
// NaN in its pairs (the kernel cannot report without a sync; the CPU
// reference names the id).
template <typename T>
__global__ void rotary_kernel(const T *x, const T *cosc, const T *sinc, const int64_t *pos, T *y,
			      struct tpf_rotary_geom g)
{
	const int64_t half = g.rot / 2, tail = g.head - g.rot;
	const int64_t per_head = half + tail;
	const int64_t total = g.batch * g.seq * g.heads * per_head;
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
	     i += (int64_t)gridDim.x * blockDim.x) {
		int64_t k = i % per_head, t = i / per_head;
		const int64_t h = t % g.heads;
		t /= g.heads;
		const int64_t s = t % g.seq, b = t / g.seq;
		const int64_t base = b * g.sb + s * g.ss + h * g.sh;
		if (k >= half) {
			const int64_t d = g.rot + (k - half);
			y[base + d] = x[base + d];
			continue;
		}
		int64_t row;
		bool ok = true;
		if (pos) {
			row = pos[(g.pos_batch == 1 ? 0 : b) * g.seq + s];
			ok = row >= 0 && row < g.cache_rows;
		} else {
			row = (g.cache_batch == 1 ? 0 : b) * g.seq + s;
		}
		const int64_t i1 = g.interleaved ? 2 * k : k, i2 = g.interleaved ? 2 * k + 1 : k + half;
		if (!ok) {
			y[base + i1] = Cvt<T>::out(nanf(""));
			y[base + i2] = Cvt<T>::out(nanf(""));
			continue;
		}
		const float c = Cvt<T>::in(cosc[row * half + k]), sn = Cvt<T>::in(sinc[row * half + k]);
		const float x1 = Cvt<T>::in(x[base + i1]), x2 = Cvt<T>::in(x[base + i2]);
		y[base + i1] = Cvt<T>::out(gated_round<T>(c * x1) - gated_round<T>(sn * x2));
		y[base + i2] = Cvt<T>::out(gated_round<T>(sn * x1) + gated_round<T>(c * x2));
	}
}

template <typename T>
void launch_rotary(const struct tpf_kernel_call *c, const struct tpf_rotary_geom &g)
{
	const int64_t per_head = g.rot / 2 + (g.head - g.rot);
	const int64_t total = g.batch * g.seq * g.heads * per_head;
	rotary_kernel<T><<<tpfc_blocks(total, kThreads), kThreads, 0, tpfc_stream(c)>>>(
		(const T *)c->in[0].data, (const T *)c->in[1].data, (const T *)c->in[2].data,
		g.has_pos ? (const int64_t *)c->in[3].data : nullptr, (T *)c->out[0].data, g);
}

} // namespace

extern "C" TPF_CUDA_KERNEL(tpf_cu_gated_activation)
{
	struct tpf_gated_geom g;
	if (tpf_gated_geom(c, &g))
		return TPF_ERR_INVALID;
	struct tpf_ktensor *y = &c->out[0];
	if (!y->numel)
		return TPF_OK;
	const char *gate = (const char *)c->in[0].data;
	size_t esz = tpf_elem_size(y->dtype);
	const void *up = g.packed ? (const void *)(gate + (size_t)g.n * esz) : c->in[1].data;
	cudaStream_t st = tpfc_stream(c);
	const bool cube = g.cube_as_product != 0;
	cudaError_t e;
	switch (y->dtype) {
	case TPF_DTYPE_FLOAT:
		e = launch_gated_act<float>(g.act, gate, up, y->data, g.rows, g.n, g.stride, cube, st);
		break;
	case TPF_DTYPE_FLOAT16:
		e = launch_gated_act<__half>(g.act, gate, up, y->data, g.rows, g.n, g.stride, cube, st);
		break;
	case TPF_DTYPE_BFLOAT16:
		e = launch_gated_act<__nv_bfloat16>(g.act, gate, up, y->data, g.rows, g.n, g.stride, cube, st);
		break;
	default:
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "dtype %s not supported on cuda", tpf_dtype_name(y->dtype));
	}
	return tpfc_launched_ex(c, e, "gated activation");
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_rotary_embedding)
{
	struct tpf_rotary_geom g;
	if (tpf_rotary_geom(c, &g))
		return TPF_ERR_INVALID;
	if (!c->out[0].numel)
		return TPF_OK;
	switch (c->in[0].dtype) {
	case TPF_DTYPE_FLOAT:
		launch_rotary<float>(c, g);
		break;
	case TPF_DTYPE_FLOAT16:
		launch_rotary<__half>(c, g);
		break;
	case TPF_DTYPE_BFLOAT16:
		launch_rotary<__nv_bfloat16>(c, g);
		break;
	default:
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "dtype %s not supported on cuda",
				 tpf_dtype_name(c->in[0].dtype));
	}
	return tpfc_launched(c, "rotary embedding");
}
