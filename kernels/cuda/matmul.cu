// SPDX-License-Identifier: MIT
// MatMul and Gemm through cuBLASLt (fp32, fp16, bf16, fp64; float32
// accumulation for the narrow types, no TF32), and the FP8 E4M3 GEMM of
// dequantized operands (ai.tpfuse.MatMulFp8).  Row-major products are run
// as the column-major product of the transposes: Y^T = B^T A^T.  Per device:
// one handle, one workspace, and a cache of descriptors and algorithms per
// problem so that repeated runs (and CUDA graph capture) make no heuristic
// queries.
#include "cuda-common.cuh"
#include "op-geometry.h"

#include <cublasLt.h>
#include <string.h>

using namespace tpfc;

namespace {

constexpr size_t kWorkspace = 32u << 20;
constexpr int kMaxDevices = 16;
constexpr int kCache = 256;

struct Problem {
	int dtype, ta, tb;
	int odtype;                         // FLOAT8E4M3FN inputs: the output dtype
	int64_t m, n, k, batch, sa, sb, sc; // column-major view: X1 (m x k) * X2 (k x n)
	int64_t lda, ldb, ldc;
	int beta_nonzero;
};

struct Entry {
	Problem p;
	bool used;
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t la, lb, lc;
	cublasLtMatmulAlgo_t algo;
};

struct DeviceState {
	cublasLtHandle_t h;
	void *workspace;
	Entry cache[kCache];
	int next;
};

DeviceState *g_state[kMaxDevices];

void release_entry(Entry *e)
{
	if (!e->used)
		return;
	cublasLtMatmulDescDestroy(e->op);
	cublasLtMatrixLayoutDestroy(e->la);
	cublasLtMatrixLayoutDestroy(e->lb);
	cublasLtMatrixLayoutDestroy(e->lc);
	e->used = false;
}

enum tpf_status get_state(const struct tpf_kernel_call *c, DeviceState **out)
{
	int dev = 0;
	cudaError_t ce = cudaGetDevice(&dev);
	if (ce != cudaSuccess)
		return tpfc_cuda_fail(c, "cudaGetDevice", ce);
	if (dev < 0 || dev >= kMaxDevices)
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "device %d beyond the %d supported", dev, kMaxDevices);
	if (g_state[dev]) {
		*out = g_state[dev];
		return TPF_OK;
	}
	cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
	if (c->stream && cudaStreamIsCapturing(tpfc_stream(c), &cs) == cudaSuccess &&
	    cs != cudaStreamCaptureStatusNone)
		return tpf_kfail(c, TPF_ERR_RUNTIME, "cuBLASLt first used during graph capture (run once eagerly first)");
	DeviceState *s = (DeviceState *)calloc(1, sizeof(DeviceState));
	if (!s)
		return tpf_kfail(c, TPF_ERR_NOMEM, "out of memory");
	if (cublasLtCreate(&s->h) != CUBLAS_STATUS_SUCCESS) {
		free(s);
		return tpf_kfail(c, TPF_ERR_RUNTIME, "cublasLtCreate failed");
	}
	ce = cudaMalloc(&s->workspace, kWorkspace);
	if (ce != cudaSuccess) {
		cublasLtDestroy(s->h);
		free(s);
		return tpfc_cuda_fail(c, "cuBLASLt workspace", ce);
	}
	g_state[dev] = s;
	*out = s;
	return TPF_OK;
}

bool same_problem(const Problem &a, const Problem &b)
{
	return memcmp(&a, &b, sizeof(Problem)) == 0;
}

cudaDataType_t cuda_type(int dt)
{
	switch (dt) {
	case TPF_DTYPE_FLOAT16:
		return CUDA_R_16F;
	case TPF_DTYPE_BFLOAT16:
		return CUDA_R_16BF;
	case TPF_DTYPE_DOUBLE:
		return CUDA_R_64F;
	default:
		return CUDA_R_32F;
	}
}

enum tpf_status prepare(const struct tpf_kernel_call *c, DeviceState *s, const Problem &p, Entry **out)
{
	for (int i = 0; i < kCache; i++)
		if (s->cache[i].used && same_problem(s->cache[i].p, p)) {
			*out = &s->cache[i];
			return TPF_OK;
		}
	Entry *e = &s->cache[s->next];
	s->next = (s->next + 1) % kCache;
	release_entry(e);
	memset(e, 0, sizeof(*e));
	e->p = p;
	bool fp8 = p.dtype == TPF_DTYPE_FLOAT8E4M3FN;
	cudaDataType_t t = fp8 ? CUDA_R_8F_E4M3 : cuda_type(p.dtype);
	cudaDataType_t tc = fp8 ? cuda_type(p.odtype) : t;
	bool dbl = p.dtype == TPF_DTYPE_DOUBLE;
	cublasComputeType_t ct = dbl ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
	cudaDataType_t st = dbl ? CUDA_R_64F : CUDA_R_32F;
	cublasOperation_t opa = p.ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = p.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
	bool ok = cublasLtMatmulDescCreate(&e->op, ct, st) == CUBLAS_STATUS_SUCCESS;
	if (!ok)
		return tpf_kfail(c, TPF_ERR_RUNTIME, "cublasLtMatmulDescCreate failed");
	cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa));
	cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb));
	// stored shapes of X1 (m x k, or k x m when transposed) and X2
	uint64_t ar = p.ta ? p.k : p.m, ac = p.ta ? p.m : p.k;
	uint64_t br = p.tb ? p.n : p.k, bc = p.tb ? p.k : p.n;
	ok = cublasLtMatrixLayoutCreate(&e->la, t, ar, ac, p.lda) == CUBLAS_STATUS_SUCCESS &&
	     cublasLtMatrixLayoutCreate(&e->lb, t, br, bc, p.ldb) == CUBLAS_STATUS_SUCCESS &&
	     cublasLtMatrixLayoutCreate(&e->lc, tc, p.m, p.n, p.ldc) == CUBLAS_STATUS_SUCCESS;
	if (!ok) {
		cublasLtMatmulDescDestroy(e->op);
		return tpf_kfail(c, TPF_ERR_RUNTIME, "cublasLtMatrixLayoutCreate failed");
	}
	e->used = true;
	if (p.batch > 1) {
		int32_t bcount = (int32_t)p.batch;
		int64_t sa = p.sa, sb = p.sb, sc = p.sc;
		cublasLtMatrixLayoutSetAttribute(e->la, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bcount, sizeof(bcount));
		cublasLtMatrixLayoutSetAttribute(e->la, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sa, sizeof(sa));
		cublasLtMatrixLayoutSetAttribute(e->lb, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bcount, sizeof(bcount));
		cublasLtMatrixLayoutSetAttribute(e->lb, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sb, sizeof(sb));
		cublasLtMatrixLayoutSetAttribute(e->lc, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bcount, sizeof(bcount));
		cublasLtMatrixLayoutSetAttribute(e->lc, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sc, sizeof(sc));
	}
	cublasLtMatmulPreference_t pref;
	cublasLtMatmulPreferenceCreate(&pref);
	size_t ws = kWorkspace;
	cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
	cublasLtMatmulHeuristicResult_t res;
	int found = 0;
	cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(s->h, e->op, e->la, e->lb, e->lc, e->lc, pref, 1, &res,
							   &found);
	cublasLtMatmulPreferenceDestroy(pref);
	if (hs != CUBLAS_STATUS_SUCCESS || found == 0) {
		release_entry(e);
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED,
				 "cuBLASLt has no algorithm for %s m=%lld n=%lld k=%lld batch=%lld (status %d)",
				 tpf_dtype_name((enum tpf_dtype)p.dtype), (long long)p.m, (long long)p.n, (long long)p.k,
				 (long long)p.batch, (int)hs);
	}
	e->algo = res.algo;
	*out = e;
	return TPF_OK;
}

enum tpf_status run_problem(const struct tpf_kernel_call *c, const Problem &p, const void *x1, const void *x2,
			    void *y, double alpha, double beta)
{
	DeviceState *s = NULL;
	Entry *e = NULL;
	enum tpf_status st = get_state(c, &s);
	if (st)
		return st;
	if ((st = prepare(c, s, p, &e)))
		return st;
	float af = (float)alpha, bf = (float)beta;
	const void *pa = &af, *pb = &bf;
	if (p.dtype == TPF_DTYPE_DOUBLE) {
		pa = &alpha;
		pb = &beta;
	}
	cublasStatus_t cs = cublasLtMatmul(s->h, e->op, pa, x1, e->la, x2, e->lb, pb, y, e->lc, y, e->lc, &e->algo,
					   s->workspace, kWorkspace, tpfc_stream(c));
	if (cs != CUBLAS_STATUS_SUCCESS)
		return tpf_kfail(c, TPF_ERR_RUNTIME, "cublasLtMatmul failed (status %d)", (int)cs);
	return TPF_OK;
}

bool gemm_dtype_ok(enum tpf_dtype t)
{
	return t == TPF_DTYPE_FLOAT || t == TPF_DTYPE_FLOAT16 || t == TPF_DTYPE_BFLOAT16 || t == TPF_DTYPE_DOUBLE;
}

// Broadcast copy of C into Y (dtype conversion included).
template <typename I>
__global__ void bcast_copy_kernel(int dx, const void *x, int dy, void *y, I n, Strided s, double scale)
{
	for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
		I off[kMaxOps];
		offsets<I>(s, i, off);
		st_d(dy, y, i, scale * ld_d(dx, x, off[0]));
	}
}

} // namespace

// gemv.cu: the small-M path of MatMul (bf16/fp16, W [K, N] shared by at most
// a few rows of A, TPF_GEMV).  1 when it took the product (*st: its launch
// status), 0 when the product is not one for it.  w_invariant: no kernel of
// the step writes w (it may be read before the previous kernel finishes).
int tpf_cu_gemv_try(const struct tpf_kernel_call *c, enum tpf_dtype dt, const void *a, const void *w, void *y,
		    int64_t rows, int64_t K, int64_t N, int w_invariant, int w_tiled, int gated,
		    enum tpf_status *st);

extern "C" void tpf_cuda_kernels_release(void)
{
	int cur = 0;
	cudaGetDevice(&cur);
	for (int d = 0; d < kMaxDevices; d++) {
		DeviceState *s = g_state[d];
		if (!s)
			continue;
		cudaSetDevice(d);
		for (int i = 0; i < kCache; i++)
			release_entry(&s->cache[i]);
		cudaFree(s->workspace);
		cublasLtDestroy(s->h);
		free(s);
		g_state[d] = NULL;
	}
	cudaSetDevice(cur);
}

namespace {

// bt: b is stored with its last two axes swapped ([..., N, K]), read
// transposed by cuBLASLt (ai.tpfuse.MatMulTransB).
enum tpf_status matmul(const struct tpf_kernel_call *c, bool bt)
{
	const struct tpf_ktensor *a = &c->in[0], *b = &c->in[1];
	struct tpf_ktensor *y = &c->out[0];
	if (a->rank < 1 || b->rank < 1 || (bt && b->rank < 2))
		return tpf_kfail(c, TPF_ERR_INVALID, "operands must have rank >= 1 (a transposed one >= 2)");
	if (a->dtype != b->dtype || a->dtype != y->dtype || !gemm_dtype_ok(a->dtype))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "MatMul of %s x %s -> %s not supported on cuda",
				 tpf_dtype_name(a->dtype), tpf_dtype_name(b->dtype), tpf_dtype_name(y->dtype));
	int64_t M = a->rank == 1 ? 1 : a->dims[a->rank - 2];
	int64_t K = a->dims[a->rank - 1];
	int64_t Kb = b->rank == 1 ? b->dims[0] : b->dims[b->rank - (bt ? 1 : 2)];
	int64_t N = b->rank == 1 ? 1 : b->dims[b->rank - (bt ? 2 : 1)];
	if (K != Kb)
		return tpf_kfail(c, TPF_ERR_INVALID, "inner dimensions differ (%lld vs %lld)", (long long)K,
				 (long long)Kb);
	int ra = a->rank > 2 ? a->rank - 2 : 0, rb = b->rank > 2 ? b->rank - 2 : 0;
	int ry = ra > rb ? ra : rb;
	int64_t bdims[TPF_KERNEL_MAX_RANK], batches = 1, batch_a = 1, batch_b = 1;
	for (int i = 0; i < ry; i++) {
		int ia = i - (ry - ra), ib = i - (ry - rb);
		int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
		if (da != db && da != 1 && db != 1)
			return tpf_kfail(c, TPF_ERR_INVALID, "batch dimensions do not broadcast");
		bdims[i] = da == 1 ? db : da;
		batches *= bdims[i];
		batch_a *= da;
		batch_b *= db;
	}
	if (batches * M * N != y->numel)
		return tpf_kfail(c, TPF_ERR_INVALID, "output has %lld elements, expected %lld", (long long)y->numel,
				 (long long)(batches * M * N));
	if (y->numel == 0)
		return TPF_OK;
	if (K == 0) {
		cudaError_t e = cudaMemsetAsync(y->data, 0, y->nbytes, tpfc_stream(c));
		return e == cudaSuccess ? TPF_OK : tpfc_cuda_fail(c, "memset", e);
	}
	if (!bt && b->rank == 2) {
		// W shared by every batch: A's rows (leading dims folded) times W
		enum tpf_status gs = TPF_OK;
		if (tpf_cu_gemv_try(c, a->dtype, a->data, b->data, y->data, batches * M, K, N, b->invariant, 0, 0, &gs))
			return gs;
	}
	Problem p;
	memset(&p, 0, sizeof(p));
	p.dtype = a->dtype;
	p.m = N; // column-major: X1 = B^T (N x K), X2 = A^T (K x M)
	p.k = K;
	p.lda = N;
	if (bt) { // stored [N, K] row-major: a K x N column-major matrix, transposed
		p.ta = 1;
		p.lda = K;
	}
	p.ldb = K;
	p.ldc = N;
	p.batch = 1;
	if (batch_b == 1) {
		// B shared by every batch: one GEMM with the batches folded into M
		p.n = batches * M;
		if (batch_a != batches) {
			// A broadcast over batch dims B lacks: run per batch below
			p.n = M;
		} else {
			return run_problem(c, p, b->data, a->data, y->data, 1.0, 0.0);
		}
	} else {
		p.n = M;
	}
	size_t es = tpf_elem_size(a->dtype);
	if ((batch_a == batches || batch_a == 1) && (batch_b == batches || batch_b == 1)) {
		p.batch = batches;
		p.sa = batch_b == 1 ? 0 : K * N;
		p.sb = batch_a == 1 ? 0 : M * K;
		p.sc = M * N;
		return run_problem(c, p, b->data, a->data, y->data, 1.0, 0.0);
	}
	// mixed broadcasting: one GEMM per output batch
	p.batch = 1;
	int64_t idx[TPF_KERNEL_MAX_RANK] = {0};
	for (int64_t bi = 0; bi < batches; bi++) {
		int64_t oa = 0, ob = 0;
		for (int i = 0; i < ry; i++) {
			int ia = i - (ry - ra), ib = i - (ry - rb);
			int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
			oa = oa * da + (da == 1 ? 0 : idx[i]);
			ob = ob * db + (db == 1 ? 0 : idx[i]);
		}
		enum tpf_status st = run_problem(c, p, (const char *)b->data + (size_t)(ob * K * N) * es,
						 (const char *)a->data + (size_t)(oa * M * K) * es,
						 (char *)y->data + (size_t)(bi * M * N) * es, 1.0, 0.0);
		if (st)
			return st;
		for (int i = ry - 1; i >= 0; i--) {
			if (++idx[i] < bdims[i])
				break;
			idx[i] = 0;
		}
	}
	return TPF_OK;
}

} // namespace

extern "C" TPF_CUDA_KERNEL(tpf_cu_matmul)
{
	return matmul(c, false);
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_matmul_bt)
{
	return matmul(c, true);
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_gemm)
{
	const struct tpf_ktensor *a = &c->in[0], *b = &c->in[1];
	const struct tpf_ktensor *cc = c->n_in > 2 && c->in[2].data ? &c->in[2] : NULL;
	struct tpf_ktensor *y = &c->out[0];
	struct tpf_gemm_attrs g;
	enum tpf_status gs = tpf_gemm_attrs(c, &g);
	if (gs)
		return gs;
	if (a->dtype != b->dtype || a->dtype != y->dtype || !gemm_dtype_ok(a->dtype))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "Gemm of %s x %s -> %s not supported on cuda",
				 tpf_dtype_name(a->dtype), tpf_dtype_name(b->dtype), tpf_dtype_name(y->dtype));
	int ta = g.trans_a, tb = g.trans_b;
	double alpha = g.alpha, beta = g.beta;
	int64_t M = g.m, K = g.k, N = g.n;
	if (y->numel == 0)
		return TPF_OK;
	cudaStream_t st = tpfc_stream(c);
	bool use_c = cc && beta != 0.0;
	if (use_c) {
		const struct tpf_ktensor *ins[1] = {cc};
		Strided s;
		if (tpfc_strided_bcast(&s, y, ins, 1) || !tpfc_float_ok(cc->dtype))
			return tpf_kfail(c, TPF_ERR_INVALID, "C does not broadcast to (M, N)");
		bcast_copy_kernel<int64_t><<<tpfc_blocks(y->numel, 256), 256, 0, st>>>(cc->dtype, cc->data, y->dtype,
										       y->data, y->numel, s,
										       K == 0 ? beta : 1.0);
		enum tpf_status ls = tpfc_launched(c, "gemm C");
		if (ls)
			return ls;
	}
	if (K == 0) {
		if (use_c)
			return TPF_OK; // beta * C, written above
		cudaError_t e = cudaMemsetAsync(y->data, 0, y->nbytes, st);
		return e == cudaSuccess ? TPF_OK : tpfc_cuda_fail(c, "memset", e);
	}
	Problem p;
	memset(&p, 0, sizeof(p));
	p.dtype = a->dtype;
	p.m = N;
	p.n = M;
	p.k = K;
	p.batch = 1;
	p.ta = tb; // X1 = op(B)^T from B's storage
	p.tb = ta; // X2 = op(A)^T from A's storage
	p.lda = tb ? K : N;
	p.ldb = ta ? M : K;
	p.ldc = N;
	p.beta_nonzero = use_c;
	return run_problem(c, p, b->data, a->data, y->data, alpha, use_c ? beta : 0.0);
}

// MatMul on FP8 E4M3 codes (ai.tpfuse.MatMulFp8, see kernels.def): in xq
// [..., K], wt [N, K] (the weight transposed when the plan was built:
// cuBLASLt's FP8 kernels take both operands K-major), x_scale, w_scale;
// out y [..., N].  Column-major: Y^T (N x M) = wt (stored K x N, transposed)
// * xq^T (K x M); the scales fold into alpha.
extern "C" TPF_CUDA_KERNEL(tpf_cu_matmul_fp8)
{
	int64_t M = 0, N = 0, K = 0;
	enum tpf_status st = tpf_fp8_gemm_dims(c, &M, &N, &K);
	if (st)
		return st;
	const struct tpf_ktensor *x = &c->in[0], *w = &c->in[1], *sx = &c->in[2], *sw = &c->in[3];
	struct tpf_ktensor *y = &c->out[0];
	if (K % 16 || N % 16)
		return tpf_kfail(c, TPF_ERR_INVALID, "fp8 gemm: K %lld / N %lld must be multiples of 16", (long long)K,
				 (long long)N);
	if (y->numel != M * N || (y->dtype != TPF_DTYPE_FLOAT && y->dtype != TPF_DTYPE_FLOAT16 &&
				  y->dtype != TPF_DTYPE_BFLOAT16))
		return tpf_kfail(c, TPF_ERR_INVALID, "fp8 gemm: output must be [..., %lld] of float, float16 or bfloat16",
				 (long long)N);
	if (!sx->host || !sw->host || sx->numel != 1 || sw->numel != 1)
		return tpf_kfail(c, TPF_ERR_INVALID, "fp8 gemm: the scales must be known scalars");
	if (M == 0)
		return TPF_OK;
	double alpha = tpf_elem_load(sx->dtype, sx->host, 0) * tpf_elem_load(sw->dtype, sw->host, 0);
	Problem p;
	memset(&p, 0, sizeof(p));
	p.dtype = TPF_DTYPE_FLOAT8E4M3FN;
	p.odtype = y->dtype;
	p.ta = 1;
	p.m = N;
	p.n = M;
	p.k = K;
	p.lda = K;
	p.ldb = K;
	p.ldc = N;
	p.batch = 1;
	return run_problem(c, p, w->data, x->data, y->data, alpha, 0.0);
}
