// SPDX-License-Identifier: MIT
// Small-M MatMul for decode: y[rows, N] = a[rows, K] x w[K, N], bfloat16 or
// float16, rows = 1..16 (every leading dim of A folded), W row-major and
// shared by every row.  The weight is streamed from HBM once and every element
// of it is used for all rows, so the kernels are bandwidth-bound.  matmul.cu
// takes this path before cuBLASLt (see tpf_cu_gemv_try for when).  Two
// kernels: float FMAs with the rows in registers (1 row by default, up to 8),
// and tensor cores (mma.sync, 2..16 rows, K a multiple of 16), described
// in gemv-kernels.cuh, which holds both (compiled in gemv-f16.cu and
// gemv-bf16.cu; this file is the host side).  With FMAs, 8 rows already
// cost 64 instructions per 16 bytes of W, about as many as the SMs issue
// while HBM delivers them.
//
// FMA kernel layout: a block of 256 threads owns a tile of TW = 8 * CT output
// columns (CT column-threads of 8 consecutive columns, CT = 4 or 2) and the
// whole of K; the 256 / CT k-lanes of the block stride over K in chunks of 8
// rows.  Per chunk a thread reads 8 rows x 8 columns of W with 16-byte loads
// that do not allocate in L1 and are marked evict-first in L2 (W is read
// once), and 8 values of each A row with one 16-byte load (A is tiny and
// stays in L1/L2; the CT column-threads of a k-lane read the same A
// addresses); the next chunk's loads are issued before the current one is
// multiplied.  Accumulators are float, rows x 8 per thread.  The k-lanes of a
// warp are summed with shuffles, the warps through shared memory; y is
// rounded to nearest even.  Both kernels: one launch, no workspace, no host
// synchronization (capturable), launched as programmatic dependents of the
// previous kernel (cuda-common.cuh): with an invariant weight a block loads
// its first W rows before griddepcontrol.wait, everything else after it.
#include "gemv-kernels.cuh"
#include "tpf-cuda.h"

#include <limits.h>
#include <stdlib.h>

using namespace tpfc;
using namespace tpfc_gemv;

namespace {

// TPF_GEMV: unset -> rows up to kDefaultMaxRows; "0" -> off; 1..16 -> that
// many rows at most.  Read once.
int max_rows()
{
	static const int v = (int)tpf_env_int("TPF_GEMV", kDefaultMaxRows);
	return v;
}

// TPF_GEMV_COLS: 16 or 32 forces the FMA kernel's tile width (else it is
// chosen by the SM count, below).  Read once.
int forced_cols()
{
	static const int v = (int)tpf_env_int("TPF_GEMV_COLS", 0);
	return v;
}

// The FMA kernel's tile width for N columns: 32-column tiles (64-byte row
// pieces of W) where they give at least 0.7 blocks an SM, else 16-column
// tiles for twice the blocks.  (Llama-3-8B decode step at batch 1, q/k/v
// with K 4096, N 3072 as 96 blocks of 32 columns against 192 of 16: 2x
// H100 419.0-419.6 us a step against 421.5-421.9 (W row-major); 2x H200
// 327.1 against 328.9-329.2 (W in column tiles): docs/gpu.md.)
int fma_cols(int64_t N)
{
	if (forced_cols())
		return forced_cols();
	const int sms = tpfc_sm_count();
	const int64_t tiles32 = (N + 31) / 32;
	return tiles32 * 10 >= (int64_t)sms * 7 ? 32 : 16;
}

} // namespace

// Declared in tpf-cuda.h.
int tpf_cuda_gemv_tile_cols(enum tpf_dtype dt, int64_t rows, int64_t K, int64_t N)
{
	if (dt != TPF_DTYPE_BFLOAT16 && dt != TPF_DTYPE_FLOAT16)
		return 0;
	if (rows < 1 || rows > max_rows() || rows > kMaxRows || K < 256 || N < 8 || N % 8 || K > INT_MAX / 16 ||
	    N > INT_MAX / 16)
		return 0;
	const int lo = mma_min_rows();
	if (lo != 0 && rows >= lo && K % 16 == 0)
		return 0; // the tensor-core kernel's
	const int cols = fma_cols(N);
	// a large weight of few columns would stream through a few SMs:
	// cuBLASLt splits K over more
	if ((N + cols - 1) / cols * 8 < tpfc_sm_count() && K * N * 2 > (1 << 20))
		return 0;
	return cols;
}

// Declared in matmul.cu.  1 when the product was taken here (*st: the
// launch's status), 0 when it is not one for this kernel and cuBLASLt runs it.
// a: [rows, K] contiguous, w: [K, N] row-major, y: [rows, N]; w_invariant:
// no kernel of the step writes w (tpf_ktensor.invariant), so the kernel may
// start reading it before the previous kernel has finished.  gated: 0, or
// 1 + the activation (+ 16 with cube_as_product): W packed by
// tpf_gemv_pack_gated (w_tiled its tile width, N = 2F) and y [rows, F] the
// GatedActivation of the product.  w_tiled: 0, or
// W is packed in column tiles of that width (16 or 32; [ceil(N / w_tiled)]
// [K][w_tiled], TPF_PHASE_MATMUL_TILED), which only the FMA kernel reads:
// only for shapes tpf_cuda_gemv_tile_cols takes (the plan packs with the
// width it gives, or the one TPF_GEMV_TILED forces).
int tpf_cu_gemv_try(const struct tpf_kernel_call *c, enum tpf_dtype dt, const void *a, const void *w, void *y,
		    int64_t rows, int64_t K, int64_t N, int w_invariant, int w_tiled, int gated, enum tpf_status *st)
{
	if (w_tiled && ((w_tiled != 16 && w_tiled != 32) || !tpf_cuda_gemv_tile_cols(dt, rows, K, N)))
		return 0;
	if (gated && (!w_tiled || N % w_tiled))
		return 0;
	if (dt != TPF_DTYPE_BFLOAT16 && dt != TPF_DTYPE_FLOAT16)
		return 0;
	if (rows < 1 || rows > max_rows() || K < 256 || N < 8 || N % 8 || K > INT_MAX / 16 || N > INT_MAX / 16)
		return 0;
	if ((uintptr_t)w % 16 || (uintptr_t)a % 2 || (uintptr_t)y % 2)
		return 0;
	cudaStream_t s = tpfc_stream(c);
	// W's first rows before the wait: only launched as a dependent
	const bool wpre = w_invariant && tpfc_pdl(TPF_PDL_GEMV);
	cudaError_t e = cudaSuccess;
	if (!w_tiled && (dt == TPF_DTYPE_BFLOAT16 ? try_mma<__nv_bfloat16>(s, a, w, y, (int)rows, (int)K, (int)N, wpre, &e)
				     : try_mma<__half>(s, a, w, y, (int)rows, (int)K, (int)N, wpre, &e))) {
		*st = tpfc_launched_ex(c, e, "gemv (tensor cores)");
		return 1;
	}
	if (rows > kMaxRows)
		return 0;
	const bool avec = K % 8 == 0 && (uintptr_t)a % 16 == 0;
	const int ct = (w_tiled ? w_tiled : fma_cols(N)) / 8;
	unsigned blocks = (unsigned)((N + 8 * ct - 1) / (8 * ct));
	// a large weight of few columns would stream through a few SMs:
	// cuBLASLt splits K over more (tpf_cuda_gemv_tile_cols checks the same)
	if (!w_tiled && (int64_t)blocks * 8 < tpfc_sm_count() && K * N * 2 > (1 << 20))
		return 0;
	if (dt == TPF_DTYPE_BFLOAT16)
		e = launch<__nv_bfloat16>(ct, blocks, s, a, w, y, (int)rows, (int)K, (int)N, avec, wpre, w_tiled != 0,
					  gated);
	else
		e = launch<__half>(ct, blocks, s, a, w, y, (int)rows, (int)K, (int)N, avec, wpre, w_tiled != 0,
					  gated);
	*st = tpfc_launched_ex(c, e, "gemv");
	return 1;
}

// The matmul-tiled phase on the FMA kernel: the plan packs a known weight
// only where tpf_cuda_gemv_tile_cols takes the product's shape, so the
// kernel always takes it (the error is for a direct call with another
// shape).  gated: see tpf_cu_gemv_try.
static enum tpf_status run_tiled(const struct tpf_kernel_call *c, int gated)
{
	struct tpf_tiled_geom g;
	enum tpf_status st = tpf_tiled_geom(c, gated != 0, &g);
	if (st)
		return st;
	const struct tpf_ktensor *a = &c->in[0], *b = &c->in[1];
	if (!tpf_cu_gemv_try(c, a->dtype, a->data, b->data, c->out[0].data, g.rows, g.K, g.N, b->invariant, (int)g.tw,
			     gated, &st))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED,
				 "the small-M kernel does not take %lld rows x K %lld x N %lld with %lld-column tiles "
				 "(expected a bfloat16/float16 product it runs with FMAs)",
				 (long long)g.rows, (long long)g.K, (long long)g.N, (long long)g.tw);
	return st;
}

// MatMul with the weight packed in column tiles (TPF_PHASE_MATMUL_TILED).
extern "C" TPF_CUDA_KERNEL(tpf_cu_matmul_tiled)
{
	return run_tiled(c, 0);
}

// GatedActivation (packed) of MatMul(A, W), W the merged gate/up weight
// packed by tpf_gemv_pack_gated (TPF_PHASE_MATMUL_TILED on the
// GatedActivation node): the FMA kernel with the activation in its
// epilogue; the product is never stored.
extern "C" TPF_CUDA_KERNEL(tpf_cu_gated_matmul_tiled)
{
	struct tpf_gated_geom g;
	if (tpf_gated_attrs(c, &g))
		return TPF_ERR_INVALID;
	if (!g.packed)
		return tpf_kfail(c, TPF_ERR_INVALID, "expects a packed GatedActivation (packed = 1)");
	return run_tiled(c, 1 + (int)g.act + (g.cube_as_product ? 16 : 0));
}
