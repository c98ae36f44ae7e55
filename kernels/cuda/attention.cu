// SPDX-License-Identifier: MIT
// ONNX Attention (opset 23) on the GPU, the subset the CPU reference
// supports: 4-D Q [B, Hq, S, D], K/V [B, Hkv, L, D] (grouped query
// attention), optional attn_mask (bool or additive), past_key/past_value in
// front of K/V, is_causal, scale, softcap; present_key/present_value.
//
// Three kernels:
// - decode (split KV, "flash-decoding"): the query rows that share a KV head
//   (G = Hq / Hk heads times S positions, at most 16 rows) are one group; the
//   group's keys are cut into chunks of 32 and spread over `splits` blocks, so
//   a decode step's few heads still fill the GPU (as many splits as the SMs
//   hold blocks at once).  Each block reads every key and value row of its
//   chunks once for all the group's query rows; its four warps each take 8
//   keys of every chunk (four lanes a key for the scores, a lane up to 8
//   columns of every key for the values, vector loads), keep their own
//   running softmax (max, sum, output) in registers, and are merged at the
//   end; present_key/present_value are written from the rows read.  With
//   several splits a combine kernel merges the blocks' partial results from
//   the call's workspace.  Float32 throughout, one rounding of Y.
//   A prefill whose keys do not fit the row kernel's shared memory runs here
//   too, its query rows in chunks of 16.
// - decode on tensor cores: the same split and partial results for
//   bf16/fp16 with head size = value size = 64 or 128 (the common decode
//   case), the scores and the weighted values as mma.sync products
//   (attention-kernels.cuh, "tensor-core decode kernel").
// - rows (everything else: long query groups, head sizes the decode kernel
//   does not take, no workspace): one block per query row, the row's scores in
//   shared memory, float32.
// The decode kernels and their launchers are in attention-kernels.cuh,
// compiled in attention-{f32,f16,bf16}.cu, attention-{f32,f16,bf16}-r8.cu and
// attention-mma.cu; this file holds the row kernel, the decode plan and the
// entry points.
#include "attention-kernels.cuh"
#include "op-geometry.h"

#include <string.h>

using namespace tpfc;
using namespace tpfc_attention;

namespace {

struct AttnArgs {
	const void *q, *k, *v, *mask, *pk, *pv;
	void *y, *prk, *prv;
	int dq, dk, dv, dm, dpk, dpv, dy, dprk, dprv;
	int64_t B, Hq, S, D, Hk, L, Dv, P, T;
	const int64_t *kvlen; // nonpad_kv_seqlen [B], or null
	int64_t mstride[4];
	float scale, softcap;
	int causal, mask_bool;
};

__device__ __forceinline__ float kv_load(const AttnArgs &a, bool is_k, int64_t b, int64_t h, int64_t j, int64_t d)
{
	int64_t dd = is_k ? a.D : a.Dv;
	if (j < a.P)
		return is_k ? ld_f(a.dpk, a.pk, ((b * a.Hk + h) * a.P + j) * dd + d)
			    : ld_f(a.dpv, a.pv, ((b * a.Hk + h) * a.P + j) * dd + d);
	return is_k ? ld_f(a.dk, a.k, ((b * a.Hk + h) * a.L + j - a.P) * dd + d)
		    : ld_f(a.dv, a.v, ((b * a.Hk + h) * a.L + j - a.P) * dd + d);
}

__global__ void attention_kernel(AttnArgs a)
{
	extern __shared__ float sc[];
	__shared__ float red[33];
	int64_t row = blockIdx.x; // (b, h, s)
	int64_t s = row % a.S, h = (row / a.S) % a.Hq, b = row / (a.S * a.Hq);
	int64_t hk = h / (a.Hq / a.Hk);
	const int64_t T = keys_of(a, b);
	float mx = -INFINITY;
	for (int64_t j = threadIdx.x; j < T; j += blockDim.x) {
		float acc = 0;
		for (int64_t d = 0; d < a.D; d++)
			acc += ld_f(a.dq, a.q, ((b * a.Hq + h) * a.S + s) * a.D + d) * kv_load(a, true, b, hk, j, d);
		acc = masked_score(a, [&](float v) { return round_through(a.dq, v); }, acc, b, h, s, j);
		sc[j] = acc;
		mx = acc > mx ? acc : mx;
	}
	// block max
	for (int o = 16; o > 0; o >>= 1)
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = (blockDim.x + 31) >> 5;
	if (lane == 0)
		red[warp] = mx;
	__syncthreads();
	if (threadIdx.x == 0) {
		float m = red[0];
		for (int w = 1; w < nw; w++)
			m = fmaxf(m, red[w]);
		red[32] = m;
	}
	__syncthreads();
	mx = red[32];
	__syncthreads();
	float sum = 0;
	for (int64_t j = threadIdx.x; j < T; j += blockDim.x) {
		float e = mx == -INFINITY ? 0.f : expf(sc[j] - mx);
		sc[j] = e;
		sum += e;
	}
	for (int o = 16; o > 0; o >>= 1)
		sum += __shfl_xor_sync(0xffffffffu, sum, o);
	if (lane == 0)
		red[warp] = sum;
	__syncthreads();
	if (threadIdx.x == 0) {
		float t = 0;
		for (int w = 0; w < nw; w++)
			t += red[w];
		red[32] = t;
	}
	__syncthreads();
	sum = red[32];
	// the probabilities rounded as a Softmax output
	for (int64_t j = threadIdx.x; j < T; j += blockDim.x)
		sc[j] = sum > 0 ? round_through(a.dq, sc[j] / sum) : 0.f;
	__syncthreads();
	for (int64_t d = threadIdx.x; d < a.Dv; d += blockDim.x) {
		float acc = 0;
		for (int64_t j = 0; j < T; j++)
			acc += sc[j] * kv_load(a, false, b, hk, j, d);
		st_f(a.dy, a.y, ((b * a.Hq + h) * a.S + s) * a.Dv + d, acc);
	}
}

__global__ void present_kernel(AttnArgs a)
{
	int64_t nk = a.B * a.Hk * a.T * a.D, nv = a.B * a.Hk * a.T * a.Dv;
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nk + nv;
	     i += (int64_t)gridDim.x * blockDim.x) {
		bool is_k = i < nk;
		int64_t r = is_k ? i : i - nk, dd = is_k ? a.D : a.Dv;
		int64_t d = r % dd, j = (r / dd) % a.T, h = (r / (dd * a.T)) % a.Hk, b = r / (dd * a.T * a.Hk);
		if (is_k && a.prk)
			st_f(a.dprk, a.prk, r, kv_load(a, true, b, h, j, d));
		if (!is_k && a.prv)
			st_f(a.dprv, a.prv, r, kv_load(a, false, b, h, j, d));
	}
}

// The row kernel keeps a row's scores in shared memory.
constexpr int64_t kRowsMaxKeys = 200 * 1024 / sizeof(float);

bool rows_kernel_fits(const struct tpf_attention_ops &o)
{
	return o.T <= kRowsMaxKeys;
}

// The decode kernel's plan for a call: 0 when it does not apply, else the
// group rows R, the splits and chunks per split, and the workspace bytes the
// splits need (0 with one split).
struct DecPlan {
	int ok, mma, chunk, splits, chunks_per_split, row_chunks;
	int64_t R, G;
	size_t ws_bytes;
};

constexpr int64_t kMmaMinRows = 4; // group rows from which decode_plan takes the tensor-core kernel

// The tensor-core kernel may take the call (TPF_DECODE_MMA=0 keeps every call
// on the float kernel): bf16/fp16, head size = value size = 64 or 128, Q
// rows 16-byte aligned (the caller checks K/V).
bool decode_mma_ok(const struct tpf_attention_ops &o)
{
	static const bool off = !tpf_env_switch("TPF_DECODE_MMA", 1);
	enum tpf_dtype t = o.q->dtype;
	return !off && (t == TPF_DTYPE_FLOAT16 || t == TPF_DTYPE_BFLOAT16) && o.D == o.Dv &&
	       (o.D == 64 || o.D == 128) && !((uintptr_t)o.q->data & 15);
}

// long: the group may have more than 16 rows (cut into chunks of 16): only
// where the row kernel cannot hold the scores.
DecPlan decode_plan(const struct tpf_attention_ops &o, bool long_rows)
{
	DecPlan p;
	memset(&p, 0, sizeof(p));
	static const bool off = !tpf_env_switch("TPF_DECODE_ATTENTION", 1);
	if (off)
		return p;
	enum tpf_dtype t = o.q->dtype;
	if (t != TPF_DTYPE_FLOAT && t != TPF_DTYPE_FLOAT16 && t != TPF_DTYPE_BFLOAT16)
		return p;
	const struct tpf_ktensor *same[] = {o.k, o.v, o.pk, o.pv, o.y, o.prk, o.prv};
	for (const struct tpf_ktensor *x : same)
		if (x && x->dtype != t)
			return p;
	int vn = 16 / (int)tpf_elem_size(t);
	p.G = o.Hq / o.Hk;
	p.R = p.G * o.S;
	p.row_chunks = (int)((p.R + kMaxGroupRows - 1) / kMaxGroupRows);
	// (value rows: a lane takes up to 8 columns, decode_dvl)
	if (p.R < 1 || (p.R > kMaxGroupRows && !long_rows) || p.row_chunks > 65535 || o.B * o.Hk > 65535 ||
	    o.D <= 0 || o.D % (kKeyThreads * vn) || o.D > 512 || o.Dv <= 0 || o.Dv > 256 || o.T <= 0 ||
	    o.S > INT32_MAX || o.Hq > INT32_MAX)
		return p;
	// 16-byte rows for the vector loads and stores
	const struct tpf_ktensor *vec[] = {o.k, o.pk, o.prk, o.v, o.pv, o.prv};
	for (const struct tpf_ktensor *x : vec)
		if (x && x->data && ((uintptr_t)x->data & 15))
			return p;
	// as many splits as fill the blocks the SMs hold at once (DecMinBlocks,
	// the tensor-core kernel's launch bounds)
	const int64_t rb = p.R > 8 ? 16 : p.R > 4 ? 8 : p.R;
	// The tensor-core kernel from 4 group rows (a decode step's query heads
	// a KV head): its 16-row products cost the same for 1 to 8 rows, the
	// float kernel's work grows with them.  Decode steps on 2x H100 (4
	// layers, hidden 2048, 16 query heads of 128): 8 KV heads (2 rows) the
	// float kernel 166.1 / 218.8 us at batch 1 / 8 against 177.7 / 231.9
	// (256 keys), 172.6 / 270.4 against 180.1 / 275.9 (1024 keys); 4 KV
	// heads (4 rows) the tensor cores 174.3 / 228.3 against 177.7 / 226.9
	// (256 keys), 178.3 / 240.2 against 183.7 / 252.4 (1024 keys).
	p.mma = decode_mma_ok(o) && p.R >= kMmaMinRows;
	p.chunk = p.mma ? kMmaTile : kChunk;
	const int64_t per_sm = p.mma ? 2 : rb <= 4 ? 4 : 2;
	int64_t groups = o.B * o.Hk * p.row_chunks, nchunks = (o.T + p.chunk - 1) / p.chunk;
	int64_t want = per_sm * (int64_t)tpfc_sm_count() / groups;
	if (want < 1)
		want = 1;
	if (want > nchunks)
		want = nchunks;
	if (want > kDecThreads) // the combine kernel's thread a split
		want = kDecThreads;
	int64_t cps = (nchunks + want - 1) / want;
	// the tensor-core kernel: splits of whole 16-key tiles, at least one
	// step of two warps (fewer, longer splits for the combine kernel to
	// read where the SMs have room to spare)
	// four tiles, or two steps of a warp where a step is two tiles.
	// (Llama-3-8B decode step at batch 1, 4 rows of head size 128: 2x H100
	// 418.99 us with four tiles against 421.5-421.9 with two, 427.4 with
	// one; 2x H200 326.8 against 328.9; batch 8 even: docs/gpu.md.
	// TPF_DECODE_SPLIT_TILES sets another least number.)
	static const int split_tiles = (int)tpf_env_int("TPF_DECODE_SPLIT_TILES", 0);
	const int64_t min_cps = split_tiles > 0 ? split_tiles : (int64_t)max(4, 2 * mma_tiles(p.R, o.D));
	if (p.mma && cps < min_cps)
		cps = nchunks < min_cps ? nchunks : min_cps;
	p.chunks_per_split = (int)cps;
	p.splits = (int)((nchunks + cps - 1) / cps);
	int64_t rows = o.B * o.Hq * o.S;
	p.ws_bytes = p.splits > 1 ? (size_t)p.splits * (size_t)rows * (size_t)(o.Dv + 2) * sizeof(float) : 0;
	p.ok = 1;
	return p;
}

enum tpf_status run_decode(const struct tpf_kernel_call *c, const struct tpf_attention_ops &o, const DecPlan &p,
			   const AttnArgs &ra)
{
	DecArgs a;
	memset(&a, 0, sizeof(a));
	a.q = o.q->data, a.k = o.k->data, a.v = o.v->data;
	a.pk = o.pk ? o.pk->data : nullptr, a.pv = o.pv ? o.pv->data : nullptr;
	a.y = o.y->data;
	a.prk = o.prk ? o.prk->data : nullptr, a.prv = o.prv ? o.prv->data : nullptr;
	a.mask = ra.mask, a.dm = ra.dm, a.mask_bool = ra.mask_bool;
	for (int d = 0; d < 4; d++)
		a.mstride[d] = ra.mstride[d];
	a.B = o.B, a.Hq = o.Hq, a.S = o.S, a.D = o.D, a.Hk = o.Hk, a.L = o.L, a.Dv = o.Dv, a.P = o.P, a.T = o.T;
	a.kvlen = o.kvlen ? (const int64_t *)o.kvlen->data : nullptr;
	a.G = p.G, a.R = p.R;
	a.splits = p.splits, a.chunks_per_split = p.chunks_per_split, a.row_chunks = p.row_chunks;
	a.part = (float *)c->workspace;
	a.scale = ra.scale, a.softcap = ra.softcap, a.causal = ra.causal;
	// launched as a dependent, the tensor-core kernel loads its first
	// step's past K/V before the wait where no kernel of the step writes
	// them, nor the sequences' key counts
	a.kv_pre = p.mma && tpfc_pdl(TPF_PDL_ATTENTION) && (!o.pk || o.pk->invariant) &&
		   (!o.pv || o.pv->invariant) && (!o.kvlen || o.kvlen->invariant);
	if (p.mma)
		return o.q->dtype == TPF_DTYPE_FLOAT16 ? launch_mma<__half>(c, a) : launch_mma<__nv_bfloat16>(c, a);
	switch (o.q->dtype) {
	case TPF_DTYPE_FLOAT:
		return launch_decode<float>(c, a);
	case TPF_DTYPE_FLOAT16:
		return launch_decode<__half>(c, a);
	default:
		return launch_decode<__nv_bfloat16>(c, a);
	}
}

} // namespace

// attention-prefill.cu: 1 when it ran the call (*st its status).
extern "C" int tpf_cu_attention_prefill(const struct tpf_kernel_call *c, const struct tpf_attention_ops *o,
					enum tpf_status *st);

// Workspace of a call: the decode kernel's partial results when it splits.
extern "C" size_t tpf_cu_attention_workspace(const struct tpf_kernel_call *c)
{
	struct tpf_attention_ops o;
	struct tpf_kernel_call quiet = *c;
	quiet.diag = NULL; // a call the kernel will refuse needs none, and says so when it runs
	if (c->n_in < 3 || c->n_out < 1 || tpf_attention_operands(&quiet, &o))
		return 0;
	DecPlan p = decode_plan(o, !rows_kernel_fits(o));
	return p.ok ? p.ws_bytes : 0;
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_attention)
{
	AttnArgs a;
	struct tpf_attention_ops o;
	enum tpf_status chk = tpf_attention_operands(c, &o);
	if (chk)
		return chk;
	const struct tpf_ktensor *q = o.q, *k = o.k, *v = o.v, *mask = o.mask, *pk = o.pk, *pv = o.pv;
	memset(&a, 0, sizeof(a));
	a.B = o.B, a.Hq = o.Hq, a.S = o.S, a.D = o.D, a.Hk = o.Hk, a.L = o.L, a.Dv = o.Dv, a.P = o.P, a.T = o.T;
	a.kvlen = o.kvlen ? (const int64_t *)o.kvlen->data : nullptr;
	// every operand but the mask and nonpad_kv_seqlen (int64) is a float
	for (size_t i = 0; i < c->n_in; i++)
		if (c->in[i].data && i != 3 && &c->in[i] != o.kvlen && !tpfc_float_ok(c->in[i].dtype))
			return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "dtype %s not supported on cuda",
					 tpf_dtype_name(c->in[i].dtype));

	struct tpf_attention_attrs at;
	tpf_attention_attrs(c, a.D, &at);
	a.scale = at.scale;
	a.causal = at.causal;
	a.softcap = at.softcap;
	if (mask) {
		if (tpf_attention_mask_strides(&o, a.mstride))
			return tpf_kfail(c, TPF_ERR_INVALID, "attn_mask does not broadcast to [B, H, S, T]");
		a.mask = mask->data;
		a.dm = mask->dtype;
		a.mask_bool = mask->dtype == TPF_DTYPE_BOOL;
		if (!a.mask_bool && !tpfc_float_ok(mask->dtype))
			return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "mask dtype %s not supported", tpf_dtype_name(mask->dtype));
	}
	a.q = q->data, a.k = k->data, a.v = v->data;
	a.dq = q->dtype, a.dk = k->dtype, a.dv = v->dtype;
	if (pk) {
		a.pk = pk->data, a.pv = pv->data;
		a.dpk = pk->dtype, a.dpv = pv->dtype;
	}
	a.y = o.y->data;
	a.dy = o.y->dtype;
	if (o.prk) {
		a.prk = o.prk->data;
		a.dprk = o.prk->dtype;
	}
	if (o.prv) {
		a.prv = o.prv->data;
		a.dprv = o.prv->dtype;
	}
	cudaStream_t st = tpfc_stream(c);
	int64_t rows = a.B * a.Hq * a.S;
	if (rows == 0 || a.Dv == 0 || a.T == 0)
		goto rows_kernel;
	{
		enum tpf_status pst;
		if (tpf_cu_attention_prefill(c, &o, &pst)) { // a prompt on the tiled kernel
			if (pst)
				return pst;
			goto presents;
		}
		DecPlan dp = decode_plan(o, !rows_kernel_fits(o));
		if (dp.ok) {
			if (dp.splits > 1 && (!c->workspace || c->workspace_bytes < dp.ws_bytes)) {
				// no room for partial results: one block per KV head walks every chunk
				int64_t nchunks = (a.T + dp.chunk - 1) / dp.chunk;
				dp.splits = 1;
				dp.chunks_per_split = (int)nchunks;
			}
			return run_decode(c, o, dp, a);
		}
	}
rows_kernel:
	if (rows > 0 && a.Dv > 0 && !rows_kernel_fits(o))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED,
				 "%lld keys exceed the row kernel's shared-memory scores, and the split kernel "
				 "needs Q/K/V of one float dtype, a head size that is a multiple of %d elements "
				 "(at most 512), a value size of at most 256 and at most 65535 batch x KV heads",
				 (long long)a.T, 4 * 16 / (int)tpf_elem_size(q->dtype));
	if (rows > 0 && a.Dv > 0) {
		size_t shmem = (size_t)(a.T > 0 ? a.T : 1) * sizeof(float);
		if (shmem > 48 * 1024)
			cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shmem);
		if (rows > INT32_MAX)
			return tpf_kfail(c, TPF_ERR_LIMIT, "too many query rows");
		attention_kernel<<<(unsigned)rows, 128, shmem, st>>>(a);
		enum tpf_status e = tpfc_launched(c, "attention");
		if (e)
			return e;
	}
presents:
	if (o.prk || o.prv) {
		int64_t n = a.B * a.Hk * a.T * (a.D + a.Dv);
		if (n > 0) {
			present_kernel<<<tpfc_blocks(n, 256), 256, 0, st>>>(a);
			return tpfc_launched(c, "attention present");
		}
	}
	return TPF_OK;
}
