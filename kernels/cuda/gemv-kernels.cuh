// SPDX-License-Identifier: MIT
// Private to kernels/cuda: the small-M MatMul kernels of gemv.cu (which says
// what they do) and their launchers, instantiated one dtype a file
// (gemv-f16.cu, gemv-bf16.cu) so that nvcc compiles the two side by side;
// gemv.cu calls them through the explicit instantiation declarations at the
// end.
#ifndef TPF_GEMV_KERNELS_CUH
#define TPF_GEMV_KERNELS_CUH

#include "cuda-common.cuh"
#include "gated-act.cuh"

namespace tpfc_gemv {

using namespace tpfc;


constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxRows = 8;         // the FMA kernel
constexpr int kMaxMmaRows = 16;     // the tensor-core kernel
constexpr int kDefaultMaxRows = 16;
constexpr int kDefaultMmaMinRows = 2;

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
	asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
	    : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
	    : "l"(p), "l"(pol));
	return r;
}

// Loads of A, which the previous kernel may still be writing when a
// dependent launch starts this one: ordinary global loads (L2-cached), never
// the read-only path (__ldg, ld.global.nc): ptxas takes those for loads of
// data no one writes during the kernel and may hoist them above
// griddepcontrol.wait (seen on sm_90: the tensor-core kernel read A before
// the wait and summed what the previous product had not yet written).
__device__ __forceinline__ uint4 ld_dep128(const unsigned short *p)
{
	return __ldcg((const uint4 *)p);
}
__device__ __forceinline__ unsigned ld_dep32(const unsigned short *p)
{
	return __ldcg((const unsigned *)p);
}
__device__ __forceinline__ unsigned short ld_dep16(const unsigned short *p)
{
	return __ldcg(p);
}

// 8 elements of A from p (16-byte aligned when vec), only those below n
// (the others 0) when !full.
template <bool full, bool vec>
__device__ __forceinline__ uint4 ld_a8(const unsigned short *p, int n)
{
	if constexpr (full && vec) {
		return ld_dep128(p);
	} else {
		uint32_t h[8];
#pragma unroll
		for (int j = 0; j < 8; j++)
			h[j] = (full || j < n) ? (uint32_t)ld_dep16(p + j) : 0u;
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
template <int M, bool full>
__device__ __forceinline__ void load_chunk_w(Chunk<M> &ch, const unsigned short *wk, int K, int N, int k, bool ok,
					     uint64_t pol)
{
#pragma unroll
	for (int j = 0; j < 8; j++) {
		ch.w[j] = ok && (full || k + j < K) ? ld_stream(wk, pol) : make_uint4(0, 0, 0, 0);
		wk += N;
	}
}

template <int M, bool full, bool avec>
__device__ __forceinline__ void load_chunk_a(Chunk<M> &ch, const unsigned short *ak, const int (&aoff)[M], int K,
					     int k, bool ok)
{
#pragma unroll
	for (int m = 0; m < M; m++)
		ch.a[m] = ok ? ld_a8<full, avec>(ak + aoff[m], K - k) : make_uint4(0, 0, 0, 0);
}

template <int M, bool full, bool avec>
__device__ __forceinline__ void load_chunk(Chunk<M> &ch, const unsigned short *ak, const unsigned short *wk,
					   const int (&aoff)[M], int K, int N, int k, bool ok, uint64_t pol)
{
	load_chunk_w<M, full>(ch, wk, K, N, k, ok, pol);
	load_chunk_a<M, full, avec>(ch, ak, aoff, K, k, ok);
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
		    unsigned short *__restrict__ y, int rows, int K, int N, int wpre, int tiled,
		    int gated)
{
	constexpr int KL = kThreads / CT; // k-lanes
	constexpr int TW = 8 * CT;        // columns of the tile
	__shared__ float red[kWarps][M][TW];
	__shared__ float tot[M][TW]; // gated: the tile's sums, gate then up

	pdl_trigger();
	const int tid = threadIdx.x, ct = tid % CT, kl = tid / CT;
	const int col = blockIdx.x * TW + ct * 8; // N % 8 == 0: all 8 columns or none
	float acc[M][8];
#pragma unroll
	for (int m = 0; m < M; m++)
#pragma unroll
		for (int c = 0; c < 8; c++)
			acc[m][c] = 0.f;

	const uint64_t pol = evict_first_policy();
	const int kfull = K & ~7; // rows in whole chunks
	const int step = KL * 8;
	// W row-major ([K, N]), or tiled: [ceil(N / TW)][K][TW], this block's
	// columns one contiguous run of K rows (tpf_gemv_pack)
	const int ldw = tiled ? TW : N;
	const unsigned short *wt = tiled ? w + (size_t)blockIdx.x * K * TW + ct * 8 : w + col;
	const size_t wstep = (size_t)step * ldw;
	// double buffered: the next chunk's loads are in flight while this one
	// is multiplied
	Chunk<M> c0, c1;
	int k = kl * 8;
	const unsigned short *wk = wt + (size_t)k * ldw;
	// W's first chunk before the previous kernel has finished (wpre: W
	// invariant); A (its output, perhaps) only after
	if (wpre && col < N)
		load_chunk_w<M, true>(c0, wk, K, ldw, k, k < kfull, pol);
	pdl_wait();
	if (col < N) {
		// rows past `rows` (M rounded up) read row rows - 1; never stored
		int aoff[M];
#pragma unroll
		for (int m = 0; m < M; m++)
			aoff[m] = (m < rows ? m : rows - 1) * K;
		if (!wpre)
			load_chunk_w<M, true>(c0, wk, K, ldw, k, k < kfull, pol);
		load_chunk_a<M, true, avec>(c0, a + k, aoff, K, k, k < kfull);
		while (k < kfull) {
			load_chunk<M, true, avec>(c1, a + k + step, wk + wstep, aoff, K, ldw, k + step, k + step < kfull,
						  pol);
			mul_chunk<T, M>(acc, c0);
			k += step;
			wk += wstep;
			if (k >= kfull)
				break;
			load_chunk<M, true, avec>(c0, a + k + step, wk + wstep, aoff, K, ldw, k + step, k + step < kfull,
						  pol);
			mul_chunk<T, M>(acc, c1);
			k += step;
			wk += wstep;
		}
		// the partial chunk (K % 8 rows): the k-lane next in turn
		if (kfull < K && kl == (kfull / 8) % KL) {
			load_chunk<M, false, false>(c0, a + kfull, wt + (size_t)kfull * ldw, aoff, K, ldw, kfull, true,
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
		if (gated)
			tot[m][cc] = s;
		else
			y[(size_t)m * N + oc] = Bits<T>::from_float(s);
	}
	if (!gated)
		return;
	// GatedActivation folded in (W packed by tpf_gemv_pack_gated): the
	// tile's first half are gate sums, the second the up sums of the same
	// outputs; each rounded to T as the product's output would be, then
	// the activation as the gated-activation kernel computes it.  Y is
	// [rows, N / 2].
	__syncthreads();
	const int h = TW / 2, F = N / 2, act = (gated - 1) & 15;
	const bool cube = gated >> 4;
	for (int o = tid; o < M * h; o += kThreads) {
		const int m = o / h, cc = o % h, oc = blockIdx.x * h + cc;
		if (m >= rows || oc >= F)
			continue;
		const float g = gated_round<T>(tot[m][cc]), u = gated_round<T>(tot[m][cc + h]);
		y[(size_t)m * F + oc] = Bits<T>::from_float(gated_act_rt<T>(act, g, cube) * u);
	}
}

// ---------------------------------------------------------------- tensor-core kernel
//
// For 2..16 rows the float FMAs above (rows x 8 per 16 bytes of W) become
// the limit; mma.sync m16n8k16 (bf16/fp16 in, float32 accumulators) does
// 16 x 8 x 16 products an instruction.  The operands come straight from
// global memory into registers, no shared-memory staging:
// - A = the rows of `a` (padded to 16 with zeros), the mma's row-major
//   operand: lane (g, t) (g = lane / 4, t = lane % 4) holds a[g][k0 + 2t,
//   k0 + 2t + 1], a[g][k0 + 8 + 2t, ...] and the same of row g + 8.
// - B = 16 rows x 8 columns of W, "column-major" pairs (two consecutive k of
//   one column in a register).  W is row-major (N contiguous), so lane
//   (g, t) loads the four W rows k0 + 2t, k0 + 2t + 1, k0 + 8 + 2t,
//   k0 + 9 + 2t at its 2 * NR columns n0 = base + 2 * NR * g ... (NR 32-bit
//   words, one 16- or 8-byte load a row) and pairs rows k and k + 1 of one
//   column with a byte permute.  Word r of the loads gives columns 2r and
//   2r + 1, i.e. tile 2r and 2r + 1: tile j's column c is base + 2 * NR * c
//   + j, every lane of a quad reading the same columns and the quad's four
//   lanes the k pairs of the mma.
// A warp covers 16 * NR columns over its share of K (in 16-row steps, loads
// kStages steps ahead); the KW warps of a block split K and are summed in a
// fixed order through shared memory, so results do not depend on timing.

constexpr int kStages = 3;

template <int NR> struct MmaStage {
	uint32_t w[4][NR]; // W rows k0 + 2t, + 1, k0 + 8 + 2t, + 1 at the lane's columns
	uint32_t x[4];     // the A fragment
};

template <int NR> __device__ __forceinline__ void ld_w(uint32_t (&r)[NR], const unsigned short *p, uint64_t pol)
{
	if constexpr (NR == 4) {
		uint4 v = ld_stream(p, pol);
		r[0] = v.x, r[1] = v.y, r[2] = v.z, r[3] = v.w;
	} else {
		asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;"
		    : "=r"(r[0]), "=r"(r[1])
		    : "l"(p), "l"(pol));
	}
}

// Step k0's loads of W; ok false: zeros (a step past the warp's share).
template <int NR>
__device__ __forceinline__ void mma_load_w(MmaStage<NR> &st, const unsigned short *w, int N, int n0, bool col_ok,
					   int k0, bool ok, uint64_t pol)
{
	const int t = threadIdx.x & 3;
	const int kr[4] = {k0 + 2 * t, k0 + 2 * t + 1, k0 + 8 + 2 * t, k0 + 9 + 2 * t};
#pragma unroll
	for (int i = 0; i < 4; i++) {
		if (ok && col_ok)
			ld_w<NR>(st.w[i], w + (size_t)kr[i] * N + n0, pol);
		else
#pragma unroll
			for (int r = 0; r < NR; r++)
				st.w[i][r] = 0u;
	}
}

// Step k0's loads of A (the mma's A fragment).
template <int NR, bool BIG>
__device__ __forceinline__ void mma_load_x(MmaStage<NR> &st, const unsigned short *a, int rows, int K, int k0, bool ok)
{
	const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	const int ka = k0 + 2 * t, kc = k0 + 8 + 2 * t;
	st.x[0] = ok && g < rows ? ld_dep32((a + (size_t)g * K + ka)) : 0u;
	st.x[2] = ok && g < rows ? ld_dep32((a + (size_t)g * K + kc)) : 0u;
	if constexpr (BIG) {
		st.x[1] = ok && g + 8 < rows ? ld_dep32((a + (size_t)(g + 8) * K + ka)) : 0u;
		st.x[3] = ok && g + 8 < rows ? ld_dep32((a + (size_t)(g + 8) * K + kc)) : 0u;
	} else {
		st.x[1] = st.x[3] = 0u;
	}
}

// Step k0's loads, W and A.
template <int NR, bool BIG>
__device__ __forceinline__ void mma_load(MmaStage<NR> &st, const unsigned short *a, const unsigned short *w, int rows,
					 int K, int N, int n0, bool col_ok, int k0, bool ok, uint64_t pol)
{
	mma_load_w<NR>(st, w, N, n0, col_ok, k0, ok, pol);
	mma_load_x<NR, BIG>(st, a, rows, K, k0, ok);
}

template <typename T, int NR> __device__ __forceinline__ void mma_step(float (&acc)[2 * NR][4], const MmaStage<NR> &st)
{
#pragma unroll
	for (int r = 0; r < NR; r++) {
		// column 2r (low halves) and 2r + 1 (high halves) of rows k, k + 1
		uint32_t lo0 = __byte_perm(st.w[0][r], st.w[1][r], 0x5410);
		uint32_t hi0 = __byte_perm(st.w[0][r], st.w[1][r], 0x7632);
		uint32_t lo1 = __byte_perm(st.w[2][r], st.w[3][r], 0x5410);
		uint32_t hi1 = __byte_perm(st.w[2][r], st.w[3][r], 0x7632);
		mma16816<T>(acc[2 * r], st.x, lo0, lo1);
		mma16816<T>(acc[2 * r + 1], st.x, hi0, hi1);
	}
}

template <typename T, int NR, int KW, bool BIG>
__global__ void __launch_bounds__(KW * 32, KW == 8 ? 2 : 1)
	gemv_mma_kernel(const unsigned short *__restrict__ a, const unsigned short *__restrict__ w,
			unsigned short *__restrict__ y, int rows, int K, int N, int wpre)
{
	constexpr int CW = 16 * NR; // columns of the block
	constexpr int RM = BIG ? 16 : 8;
	__shared__ float red[KW][RM][CW];
	pdl_trigger();
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
	const int base = blockIdx.x * CW, n0 = base + 2 * NR * g;
	const bool col_ok = n0 < N; // N % (2 * NR) == 0: all of the lane's columns or none
	const int steps = K / 16, s0 = (int)((long long)steps * warp / KW), s1 = (int)((long long)steps * (warp + 1) / KW);
	float acc[2 * NR][4];
#pragma unroll
	for (int j = 0; j < 2 * NR; j++)
#pragma unroll
		for (int e = 0; e < 4; e++)
			acc[j][e] = 0.f;
	const uint64_t pol = evict_first_policy();
	MmaStage<NR> st[kStages];
	// the first stages' W before the previous kernel has finished (wpre: W
	// invariant); A (its output, perhaps) only after
	if (wpre)
#pragma unroll
		for (int i = 0; i < kStages; i++)
			mma_load_w<NR>(st[i], w, N, n0, col_ok, (s0 + i) * 16, s0 + i < s1, pol);
	pdl_wait();
#pragma unroll
	for (int i = 0; i < kStages; i++) {
		if (!wpre)
			mma_load_w<NR>(st[i], w, N, n0, col_ok, (s0 + i) * 16, s0 + i < s1, pol);
		mma_load_x<NR, BIG>(st[i], a, rows, K, (s0 + i) * 16, s0 + i < s1);
	}
	for (int s = s0; s < s1; s += kStages) {
#pragma unroll
		for (int i = 0; i < kStages; i++) {
			if (s + i < s1)
				mma_step<T, NR>(acc, st[i]);
			mma_load<NR, BIG>(st[i], a, w, rows, K, N, n0, col_ok, (s + i + kStages) * 16,
					  s + i + kStages < s1, pol);
		}
	}
	// tile j, fragment column c = 2t (+1): output column base + 2 * NR * c + j
#pragma unroll
	for (int j = 0; j < 2 * NR; j++) {
		red[warp][g][2 * NR * (2 * t) + j] = acc[j][0];
		red[warp][g][2 * NR * (2 * t + 1) + j] = acc[j][1];
		if constexpr (BIG) {
			red[warp][g + 8][2 * NR * (2 * t) + j] = acc[j][2];
			red[warp][g + 8][2 * NR * (2 * t + 1) + j] = acc[j][3];
		}
	}
	__syncthreads();
	for (int o = tid; o < RM * CW; o += KW * 32) {
		int m = o / CW, cc = o % CW;
		if (m >= rows || base + cc >= N)
			continue;
		float sum = 0.f;
#pragma unroll
		for (int wi = 0; wi < KW; wi++)
			sum += red[wi][m][cc];
		y[(size_t)m * N + base + cc] = Bits<T>::from_float(sum);
	}
}

// ---------------------------------------------------------------- launchers

// TPF_GEMV_MMA: the fewest rows the tensor-core kernel takes (fewer go to
// the FMA kernel); "0" -> never (the FMA kernel up to 8 rows, cuBLASLt
// beyond).  Read once.
inline int mma_min_rows()
{
	static const int v = (int)tpf_env_int("TPF_GEMV_MMA", kDefaultMmaMinRows);
	return v;
}

template <typename T, int M>
cudaError_t launch_m(int ct, unsigned blocks, cudaStream_t st, const void *a, const void *w, void *y, int rows, int K,
		     int N, bool avec, bool wpre, bool tiled, int gated)
{
	const unsigned short *pa = (const unsigned short *)a, *pw = (const unsigned short *)w;
	unsigned short *py = (unsigned short *)y;
	const dim3 g(blocks), b(kThreads);
	const bool pdl = tpfc_pdl(TPF_PDL_GEMV);
	const int ti = tiled;
	if (ct == 4 && avec)
		return tpfc_launch_pdl(pdl, gemv_kernel<T, M, 4, true>, g, b, 0, st, pa, pw, py, rows, K, N, wpre, ti,
				       gated);
	if (ct == 4)
		return tpfc_launch_pdl(pdl, gemv_kernel<T, M, 4, false>, g, b, 0, st, pa, pw, py, rows, K, N, wpre, ti,
				       gated);
	if (avec)
		return tpfc_launch_pdl(pdl, gemv_kernel<T, M, 2, true>, g, b, 0, st, pa, pw, py, rows, K, N, wpre, ti,
				       gated);
	return tpfc_launch_pdl(pdl, gemv_kernel<T, M, 2, false>, g, b, 0, st, pa, pw, py, rows, K, N, wpre, ti,
				       gated);
}

template <typename T, int NR, int KW>
cudaError_t launch_mma(unsigned blocks, cudaStream_t st, const void *a, const void *w, void *y, int rows, int K, int N,
		       bool wpre)
{
	const unsigned short *pa = (const unsigned short *)a, *pw = (const unsigned short *)w;
	unsigned short *py = (unsigned short *)y;
	const dim3 g(blocks), b(KW * 32);
	const bool pdl = tpfc_pdl(TPF_PDL_GEMV);
	if (rows > 8)
		return tpfc_launch_pdl(pdl, gemv_mma_kernel<T, NR, KW, true>, g, b, 0, st, pa, pw, py, rows, K, N, wpre);
	return tpfc_launch_pdl(pdl, gemv_mma_kernel<T, NR, KW, false>, g, b, 0, st, pa, pw, py, rows, K, N, wpre);
}

// The tensor-core kernel when it applies (1, *e the launch's status), else
// 0.  64-column blocks of 8 warps where they fill the SMs, else 32-column
// blocks of 16 warps.
template <typename T>
int try_mma(cudaStream_t st, const void *a, const void *w, void *y, int rows, int K, int N, bool wpre,
	    cudaError_t *e)
{
	const int lo = mma_min_rows();
	if (lo == 0 || rows < lo || rows > kMaxMmaRows || K % 16 || N % 8 || (uintptr_t)a % 4 || (uintptr_t)w % 16)
		return 0;
	const int sms = tpfc_sm_count();
	const bool wide = (N + 63) / 64 >= sms;
	const unsigned blocks = (unsigned)(wide ? (N + 63) / 64 : (N + 31) / 32);
	// a large weight of few columns would stream through a few SMs:
	// cuBLASLt splits K over more
	if ((int64_t)blocks * 4 < sms && (int64_t)K * N * 2 > (1 << 20))
		return 0;
	if (wide)
		*e = launch_mma<T, 4, 8>(blocks, st, a, w, y, rows, K, N, wpre);
	else
		*e = launch_mma<T, 2, 16>(blocks, st, a, w, y, rows, K, N, wpre);
	return 1;
}

template <typename T>
cudaError_t launch(int ct, unsigned blocks, cudaStream_t st, const void *a, const void *w, void *y, int rows, int K,
		   int N, bool avec, bool wpre, bool tiled, int gated)
{
	if (rows <= 1)
		return launch_m<T, 1>(ct, blocks, st, a, w, y, rows, K, N, avec, wpre, tiled, gated);
	if (rows <= 2)
		return launch_m<T, 2>(ct, blocks, st, a, w, y, rows, K, N, avec, wpre, tiled, gated);
	if (rows <= 4)
		return launch_m<T, 4>(ct, blocks, st, a, w, y, rows, K, N, avec, wpre, tiled, gated);
	return launch_m<T, 8>(ct, blocks, st, a, w, y, rows, K, N, avec, wpre, tiled, gated);
}

// The launchers gemv.cu calls, instantiated in gemv-f16.cu and gemv-bf16.cu.
extern template int try_mma<__half>(cudaStream_t, const void *, const void *, void *, int, int, int, bool,
				    cudaError_t *);
extern template int try_mma<__nv_bfloat16>(cudaStream_t, const void *, const void *, void *, int, int, int, bool,
					   cudaError_t *);
extern template cudaError_t launch<__half>(int, unsigned, cudaStream_t, const void *, const void *, void *, int, int,
					   int, bool, bool, bool, int);
extern template cudaError_t launch<__nv_bfloat16>(int, unsigned, cudaStream_t, const void *, const void *, void *, int,
						  int, int, bool, bool, bool, int);

} // namespace tpfc_gemv

#endif
