// SPDX-License-Identifier: MIT
// Small-M MatMul for decode: y[rows, N] = a[rows, K] x w[K, N], bfloat16 or
// float16, rows = 1..8 (every leading dim of A folded), W row-major and
// shared by every row.  The weight is streamed from HBM once and every element
// of it is used for all rows, so the kernel is a bandwidth-bound GEMV with
// rows kept in registers.  matmul.cu takes this path before cuBLASLt (see
// tpf_cu_gemv_try for when).  Not for 16 rows: 16 float32 FMAs per weight
// element at HBM speed would need about three quarters of the FP32 issue
// rate of an H100, and 16 x 8 accumulators a thread spill.
//
// Layout: a block of 256 threads owns a tile of TW = 8 * CT output columns
// (CT column-threads of 8 consecutive columns, CT = 4 or 2) and the whole of
// K; the 256 / CT k-lanes of the block stride over K in chunks of 8 rows.
// Per chunk a thread reads 8 rows x 8 columns of W with 16-byte loads that do
// not allocate in L1 and are marked evict-first in L2 (W is read once), and 8
// values of each A row with one 16-byte load (A is tiny and stays in L1/L2;
// the CT column-threads of a k-lane read the same A addresses); the next
// chunk's loads are issued before the current one is multiplied.
// Accumulators are float, rows x 8 per thread.  The k-lanes of a warp are summed with
// shuffles, the warps through shared memory; y is rounded to nearest even.
// One launch, no workspace, no host synchronization: capturable.
#include "cuda-common.cuh"

#include <limits.h>
#include <stdlib.h>

using namespace tpfc;

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxRows = 8;
constexpr int kDefaultMaxRows = 8;

// ---------------------------------------------------------------- element bits

template <typename T> struct Bits;

template <> struct Bits<__nv_bfloat16> {
	// low / high element of a packed pair as float
	static __device__ __forceinline__ float lo(uint32_t v)
	{
		return __uint_as_float(v << 16);
	}
	static __device__ __forceinline__ float hi(uint32_t v)
	{
		return __uint_as_float(v & 0xffff0000u);
	}
	static __device__ __forceinline__ unsigned short from_float(float v)
	{
		return __bfloat16_as_ushort(__float2bfloat16_rn(v));
	}
};

template <> struct Bits<__half> {
	static __device__ __forceinline__ float lo(uint32_t v)
	{
		return __half2float(__ushort_as_half((unsigned short)(v & 0xffffu)));
	}
	static __device__ __forceinline__ float hi(uint32_t v)
	{
		return __half2float(__ushort_as_half((unsigned short)(v >> 16)));
	}
	static __device__ __forceinline__ unsigned short from_float(float v)
	{
		return __half_as_ushort(__float2half_rn(v));
	}
};

template <typename T> __device__ __forceinline__ void unpack8(const uint4 &u, float f[8])
{
	f[0] = Bits<T>::lo(u.x);
	f[1] = Bits<T>::hi(u.x);
	f[2] = Bits<T>::lo(u.y);
	f[3] = Bits<T>::hi(u.y);
	f[4] = Bits<T>::lo(u.z);
	f[5] = Bits<T>::hi(u.z);
	f[6] = Bits<T>::lo(u.w);
	f[7] = Bits<T>::hi(u.w);
}

// element j (0..7) of a packed 8-vector
template <typename T> __device__ __forceinline__ float elem8(const uint4 &u, int j)
{
	uint32_t v = j < 2 ? u.x : j < 4 ? u.y : j < 6 ? u.z : u.w;
	return (j & 1) ? Bits<T>::hi(v) : Bits<T>::lo(v);
}

// ---------------------------------------------------------------- loads

__device__ __forceinline__ uint64_t evict_first_policy()
{
	uint64_t pol;
	asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
	return pol;
}

// 16 bytes of the streamed weight: read-only path, no L1 allocation,
// evict-first in L2.
__device__ __forceinline__ uint4 ld_stream(const void *p, uint64_t pol)
{
	uint4 r;
	asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
	    : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
	    : "l"(p), "l"(pol));
	return r;
}

// 8 elements of A from p (16-byte aligned when vec), only those below n
// (the others 0) when !full.
template <bool full, bool vec>
__device__ __forceinline__ uint4 ld_a8(const unsigned short *p, int n)
{
	if constexpr (full && vec) {
		return __ldg((const uint4 *)p);
	} else {
		uint32_t h[8];
#pragma unroll
		for (int j = 0; j < 8; j++)
			h[j] = (full || j < n) ? (uint32_t)__ldg(p + j) : 0u;
		return make_uint4(h[0] | h[1] << 16, h[2] | h[3] << 16, h[4] | h[5] << 16, h[6] | h[7] << 16);
	}
}

// ---------------------------------------------------------------- kernel

// One chunk of 8 rows of W (8 columns) and of A (every row) in registers.
template <int M> struct Chunk {
	uint4 w[8];
	uint4 a[M];
};

// Loads the chunk at row k (nothing, zeros, unless ok): whole when full,
// else rows below K only.  wk: W's row k at the thread's columns; ak: A's
// column k; aoff: the offsets of A's rows.
template <int M, bool full, bool avec>
__device__ __forceinline__ void load_chunk(Chunk<M> &ch, const unsigned short *ak, const unsigned short *wk,
					   const int (&aoff)[M], int K, int N, int k, bool ok, uint64_t pol)
{
#pragma unroll
	for (int j = 0; j < 8; j++) {
		ch.w[j] = ok && (full || k + j < K) ? ld_stream(wk, pol) : make_uint4(0, 0, 0, 0);
		wk += N;
	}
#pragma unroll
	for (int m = 0; m < M; m++)
		ch.a[m] = ok ? ld_a8<full, avec>(ak + aoff[m], K - k) : make_uint4(0, 0, 0, 0);
}

template <typename T, int M> __device__ __forceinline__ void mul_chunk(float (&acc)[M][8], const Chunk<M> &ch)
{
#pragma unroll
	for (int j = 0; j < 8; j++) {
		float wf[8];
		unpack8<T>(ch.w[j], wf);
#pragma unroll
		for (int m = 0; m < M; m++) {
			float x = elem8<T>(ch.a[m], j);
#pragma unroll
			for (int c = 0; c < 8; c++)
				acc[m][c] = fmaf(x, wf[c], acc[m][c]);
		}
	}
}

// Two blocks per SM where the registers allow it (rows <= 2: two chunks in
// flight, about 100 registers), else one.
template <int M> struct MinBlocks {
	static constexpr int value = M <= 2 ? 2 : 1;
};

template <typename T, int M, int CT, bool avec>
__global__ void __launch_bounds__(kThreads, MinBlocks<M>::value)
	gemv_kernel(const unsigned short *__restrict__ a, const unsigned short *__restrict__ w,
		    unsigned short *__restrict__ y, int rows, int K, int N)
{
	constexpr int KL = kThreads / CT; // k-lanes
	constexpr int TW = 8 * CT;        // columns of the tile
	__shared__ float red[kWarps][M][TW];

	const int tid = threadIdx.x, ct = tid % CT, kl = tid / CT;
	const int col = blockIdx.x * TW + ct * 8; // N % 8 == 0: all 8 columns or none
	float acc[M][8];
#pragma unroll
	for (int m = 0; m < M; m++)
#pragma unroll
		for (int c = 0; c < 8; c++)
			acc[m][c] = 0.f;

	if (col < N) {
		const uint64_t pol = evict_first_policy();
		const int kfull = K & ~7; // rows in whole chunks
		const int step = KL * 8;
		const size_t wstep = (size_t)step * N;
		// rows past `rows` (M rounded up) read row rows - 1; never stored
		int aoff[M];
#pragma unroll
		for (int m = 0; m < M; m++)
			aoff[m] = (m < rows ? m : rows - 1) * K;
		// double buffered: the next chunk's loads are in flight while
		// this one is multiplied
		Chunk<M> c0, c1;
		int k = kl * 8;
		const unsigned short *wk = w + col + (size_t)k * N;
		load_chunk<M, true, avec>(c0, a + k, wk, aoff, K, N, k, k < kfull, pol);
		while (k < kfull) {
			load_chunk<M, true, avec>(c1, a + k + step, wk + wstep, aoff, K, N, k + step, k + step < kfull,
						  pol);
			mul_chunk<T, M>(acc, c0);
			k += step;
			wk += wstep;
			if (k >= kfull)
				break;
			load_chunk<M, true, avec>(c0, a + k + step, wk + wstep, aoff, K, N, k + step, k + step < kfull,
						  pol);
			mul_chunk<T, M>(acc, c1);
			k += step;
			wk += wstep;
		}
		// the partial chunk (K % 8 rows): the k-lane next in turn
		if (kfull < K && kl == (kfull / 8) % KL) {
			load_chunk<M, false, false>(c0, a + kfull, w + col + (size_t)kfull * N, aoff, K, N, kfull, true,
						    pol);
			mul_chunk<T, M>(acc, c0);
		}
	}

	// k-lanes of a warp (lanes ct, ct + CT, ...): butterfly over the lane bits above CT
#pragma unroll
	for (int m = 0; m < M; m++)
#pragma unroll
		for (int c = 0; c < 8; c++) {
			float v = acc[m][c];
#pragma unroll
			for (int o = CT; o < 32; o <<= 1)
				v += __shfl_xor_sync(0xffffffffu, v, o);
			acc[m][c] = v;
		}
	const int lane = tid & 31, warp = tid >> 5;
	if (lane < CT) // ct == lane
#pragma unroll
		for (int m = 0; m < M; m++)
#pragma unroll
			for (int c = 0; c < 8; c++)
				red[warp][m][lane * 8 + c] = acc[m][c];
	__syncthreads();
	for (int o = tid; o < M * TW; o += kThreads) {
		int m = o / TW, cc = o % TW;
		int oc = blockIdx.x * TW + cc;
		if (m >= rows || oc >= N)
			continue;
		float s = 0.f;
#pragma unroll
		for (int wi = 0; wi < kWarps; wi++)
			s += red[wi][m][cc];
		y[(size_t)m * N + oc] = Bits<T>::from_float(s);
	}
}

// ---------------------------------------------------------------- host

// TPF_GEMV: unset -> rows up to kDefaultMaxRows; "0" -> off; 1..8 -> that
// many rows at most.  Read once.
int max_rows()
{
	static const int v = [] {
		const char *e = getenv("TPF_GEMV");
		if (!e || !*e)
			return kDefaultMaxRows;
		char *end = NULL;
		long n = strtol(e, &end, 10);
		if (end == e || *end || n < 0)
			return kDefaultMaxRows;
		return (int)(n > kMaxRows ? kMaxRows : n);
	}();
	return v;
}

int sm_count()
{
	constexpr int kDev = 16;
	static int cache[kDev];
	int dev = 0;
	if (cudaGetDevice(&dev) != cudaSuccess)
		return 132;
	if (dev >= 0 && dev < kDev && cache[dev] > 0)
		return cache[dev];
	int n = 0;
	if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0)
		n = 132;
	if (dev >= 0 && dev < kDev)
		cache[dev] = n;
	return n;
}

template <typename T, int M>
void launch_m(int ct, unsigned blocks, cudaStream_t st, const void *a, const void *w, void *y, int rows, int K, int N,
	      bool avec)
{
	const unsigned short *pa = (const unsigned short *)a, *pw = (const unsigned short *)w;
	unsigned short *py = (unsigned short *)y;
	if (ct == 4 && avec)
		gemv_kernel<T, M, 4, true><<<blocks, kThreads, 0, st>>>(pa, pw, py, rows, K, N);
	else if (ct == 4)
		gemv_kernel<T, M, 4, false><<<blocks, kThreads, 0, st>>>(pa, pw, py, rows, K, N);
	else if (avec)
		gemv_kernel<T, M, 2, true><<<blocks, kThreads, 0, st>>>(pa, pw, py, rows, K, N);
	else
		gemv_kernel<T, M, 2, false><<<blocks, kThreads, 0, st>>>(pa, pw, py, rows, K, N);
}

template <typename T>
void launch(int ct, unsigned blocks, cudaStream_t st, const void *a, const void *w, void *y, int rows, int K, int N,
	    bool avec)
{
	if (rows <= 1)
		launch_m<T, 1>(ct, blocks, st, a, w, y, rows, K, N, avec);
	else if (rows <= 2)
		launch_m<T, 2>(ct, blocks, st, a, w, y, rows, K, N, avec);
	else if (rows <= 4)
		launch_m<T, 4>(ct, blocks, st, a, w, y, rows, K, N, avec);
	else
		launch_m<T, 8>(ct, blocks, st, a, w, y, rows, K, N, avec);
}

} // namespace

// Declared in matmul.cu.  1 when the product was taken here (*st: the
// launch's status), 0 when it is not one for this kernel and cuBLASLt runs it.
// a: [rows, K] contiguous, w: [K, N] row-major, y: [rows, N].
int tpf_cu_gemv_try(const struct tpf_kernel_call *c, enum tpf_dtype dt, const void *a, const void *w, void *y,
		    int64_t rows, int64_t K, int64_t N, enum tpf_status *st)
{
	if (dt != TPF_DTYPE_BFLOAT16 && dt != TPF_DTYPE_FLOAT16)
		return 0;
	if (rows < 1 || rows > max_rows() || K < 256 || N < 8 || N % 8 || K > INT_MAX / 16 || N > INT_MAX / 16)
		return 0;
	if ((uintptr_t)w % 16 || (uintptr_t)a % 2 || (uintptr_t)y % 2)
		return 0;
	const bool avec = K % 8 == 0 && (uintptr_t)a % 16 == 0;
	// 32-column tiles (64-byte row pieces of W) when they fill the SMs,
	// else 16-column tiles for twice the blocks
	const int sms = sm_count();
	int64_t tiles32 = (N + 31) / 32;
	int ct = tiles32 * 10 >= (int64_t)sms * 9 ? 4 : 2;
	unsigned blocks = (unsigned)((N + 8 * ct - 1) / (8 * ct));
	// a large weight of few columns would stream through a few SMs:
	// cuBLASLt splits K over more
	if ((int64_t)blocks * 8 < sms && K * N * 2 > (1 << 20))
		return 0;
	cudaStream_t s = tpfc_stream(c);
	if (dt == TPF_DTYPE_BFLOAT16)
		launch<__nv_bfloat16>(ct, blocks, s, a, w, y, (int)rows, (int)K, (int)N, avec);
	else
		launch<__half>(ct, blocks, s, a, w, y, (int)rows, (int)K, (int)N, avec);
	*st = tpfc_launched(c, "gemv");
	return 1;
}
