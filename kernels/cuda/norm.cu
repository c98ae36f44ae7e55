// SPDX-License-Identifier: MIT
// Normalizations on the GPU: RMSNormalization, SimplifiedLayerNormalization
// (both domains), SkipSimplifiedLayerNormalization, LayerNormalization and
// the local phases of tpfuse's fused norms.  Where the operands fit the
// vectorized add+RMSNorm kernels of tpf-cuda.h (one dtype, full gamma,
// 16-byte rows) those run; everything else runs the generic row kernel
// below, which follows the CPU reference step by step: the residual sum is
// rounded to its dtype before it is normalized, statistics in float32.
#include "cuda-common.cuh"
#include "op-geometry.h" // TPF_KTRY
#include "tpf-cuda.h"

#include <string.h>

using namespace tpfc;

namespace {

struct RowJob {
	const void *x, *residual, *bias, *gamma, *beta;
	int dx, dres, dbias, dg, dbeta;
	int64_t res_numel, bias_numel, g_numel, beta_numel;
	void *y, *sum, *inv_std, *mean_out, *y_hp, *qy;
	int dy, dsum, dinv, dmean, dhp, dq;
	const void *qscale; // device scalar
	int dqs;
	int quant; // 0 none, 1 per-tensor (fp8 ...), 2 nvfp4 blocks (qy fp4, qblock e4m3 scales),
	           // 3 fp8 groups (qy fp8, qblock float32 scales, qscale the scales' floor)
	void *qblock;
	int dqb;
	int64_t block;
	int dnorm;          // dtype the norm is rounded to before it is quantized
	int64_t rows, cols;
	float eps, offset;
	int center;
	int bias_first; // the fused norms: (x + bias) + residual, each sum rounded
	const float *ext; // sharded: reduced sums of squares
	int64_t ext_stride, ext_col, full_cols;
};

__device__ float block_reduce(float v, float *scratch)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = (blockDim.x + 31) >> 5;
	if (lane == 0)
		scratch[warp] = v;
	__syncthreads();
	if (threadIdx.x == 0) {
		float s = 0;
		for (int w = 0; w < nw; w++)
			s += scratch[w];
		scratch[32] = s;
	}
	__syncthreads();
	float r = scratch[32];
	__syncthreads();
	return r;
}

// The row element as the unfused graph sees it before normalization.
__device__ __forceinline__ float row_value(const RowJob &j, int64_t base, int64_t k, bool write_sum)
{
	float v = ld_f(j.dx, j.x, base + k);
	if (j.bias_first) {
		const int dt = j.sum ? j.dsum : j.dx;
		v = round_through(dt, v + ld_f(j.dbias, j.bias, k % j.bias_numel));
		if (j.residual)
			v = round_through(dt, v + ld_f(j.dres, j.residual, base + k));
		if (j.sum && write_sum)
			st_f(j.dsum, j.sum, base + k, v);
	} else if (j.residual || j.bias) {
		if (j.residual)
			v += ld_f(j.dres, j.residual, j.res_numel == j.rows * j.cols ? base + k : k % j.res_numel);
		if (j.bias)
			v += ld_f(j.dbias, j.bias, k % j.bias_numel);
		if (j.sum) {
			if (write_sum)
				st_f(j.dsum, j.sum, base + k, v);
			v = round_through(j.dsum, v);
		} else {
			v = round_through(j.dx, v);
		}
	} else if (j.sum && write_sum) {
		st_f(j.dsum, j.sum, base + k, v);
	}
	return v;
}

// Element k of a row's norm, rounded through the norm's dtype (what the
// quantizers of a quantizing norm read).
__device__ __forceinline__ float quant_norm_value(const RowJob &j, int64_t base, int64_t k, float mean, float inv)
{
	float g = j.offset + (j.gamma ? ld_f(j.dg, j.gamma, k % j.g_numel) : 0.f);
	return round_through(j.dnorm, (row_value(j, base, k, false) - mean) * inv * g);
}

// The largest magnitude of block b (j.block values) of a row's norm; the
// norm output, when there is one, takes the block's values.
__device__ __forceinline__ float quant_block_amax(const RowJob &j, int64_t base, int64_t b, float mean, float inv)
{
	float amax = 0;
	for (int64_t t = 0; t < j.block; t++) {
		int64_t k = b * j.block + t;
		float v = quant_norm_value(j, base, k, mean, inv);
		if (j.y)
			st_f(j.dy, j.y, base + k, v);
		amax = fmaxf(amax, fabsf(v));
	}
	return amax;
}

__global__ void row_norm_kernel(RowJob j)
{
	__shared__ float scratch[33];
	for (int64_t r = blockIdx.x; r < j.rows; r += gridDim.x) {
		int64_t base = r * j.cols;
		float mean = 0, inv;
		if (j.center) {
			float s = 0;
			for (int64_t k = threadIdx.x; k < j.cols; k += blockDim.x)
				s += row_value(j, base, k, false);
			mean = block_reduce(s, scratch) / (float)j.cols;
		}
		float ss = 0;
		for (int64_t k = threadIdx.x; k < j.cols; k += blockDim.x) {
			float v = row_value(j, base, k, true) - mean;
			ss += v * v;
		}
		if (j.ext) {
			float e = j.ext[r * j.ext_stride + j.ext_col];
			inv = 1.0f / sqrtf(e / (float)j.full_cols + j.eps);
		} else {
			ss = block_reduce(ss, scratch);
			inv = 1.0f / sqrtf(ss / (float)j.cols + j.eps);
		}
		if (threadIdx.x == 0) {
			if (j.inv_std)
				st_f(j.dinv, j.inv_std, r, inv);
			if (j.mean_out)
				st_f(j.dmean, j.mean_out, r, mean);
		}
		float qs = j.qscale ? ld_f(j.dqs, j.qscale, 0) : 1.0f;
		if (j.quant == 3) {
			// fp8-group: groups of j.block along the row, one thread per
			// group; scale max(amax / 448, floor) with the floor in qscale
			for (int64_t b = threadIdx.x; b < j.cols / j.block; b += blockDim.x) {
				float sc = quant_block_amax(j, base, b, mean, inv) / 448.0f;
				if (!(sc >= qs))
					sc = qs;
				st_f(TPF_DTYPE_FLOAT, j.qblock, (base + b * j.block) / j.block, sc);
				for (int64_t k = b * j.block; k < (b + 1) * j.block; k++)
					st_f(j.dq, j.qy, base + k, quant_norm_value(j, base, k, mean, inv) / sc);
			}
			continue;
		}
		if (j.quant == 2) {
			// NVFP4: blocks of j.block along the row, one thread per block
			for (int64_t b = threadIdx.x; b < j.cols / j.block; b += blockDim.x) {
				float amax = quant_block_amax(j, base, b, mean, inv);
				int64_t bi = (base + b * j.block) / j.block;
				st_f(j.dqb, j.qblock, bi, amax / 6.0f / qs);
				float sb = ld_f(j.dqb, j.qblock, bi) * qs;
				for (int64_t t = 0; t < j.block; t += 2) {
					float v[2] = {quant_norm_value(j, base, b * j.block + t, mean, inv),
						      quant_norm_value(j, base, b * j.block + t + 1, mean, inv)};
					unsigned lo = f_to_e2m1(sb != 0 ? v[0] / sb : 0.f);
					unsigned hi = f_to_e2m1(sb != 0 ? v[1] / sb : 0.f);
					((uint8_t *)j.qy)[(base + b * j.block + t) / 2] = (uint8_t)(lo | (hi << 4));
				}
			}
			continue;
		}
		for (int64_t k = threadIdx.x; k < j.cols; k += blockDim.x) {
			float g = j.offset + (j.gamma ? ld_f(j.dg, j.gamma, k % j.g_numel) : 0.f);
			float v = (row_value(j, base, k, false) - mean) * inv * g;
			if (j.beta)
				v += ld_f(j.dbeta, j.beta, k % j.beta_numel);
			if (j.y)
				st_f(j.dy, j.y, base + k, v);
			if (j.y_hp)
				st_f(j.dhp, j.y_hp, base + k, v);
			if (j.qy)
				st_f(j.dq, j.qy, base + k, round_through(j.dnorm, v) / qs);
		}
	}
}

enum tpf_status launch_rows(const struct tpf_kernel_call *c, const RowJob &j)
{
	if (j.rows <= 0)
		return TPF_OK;
	int threads = j.cols >= 2048 ? 512 : j.cols >= 512 ? 256 : j.cols >= 128 ? 128 : 64;
	unsigned g = (unsigned)(j.rows < 65535 * 8 ? j.rows : 65535 * 8);
	row_norm_kernel<<<g, threads, 0, tpfc_stream(c)>>>(j);
	return tpfc_launched(c, "norm");
}

struct tpf_ktensor *opt_out(const struct tpf_kernel_call *c, size_t i)
{
	return i < c->n_out && c->out[i].data ? &c->out[i] : NULL;
}

const struct tpf_ktensor *opt_in(const struct tpf_kernel_call *c, size_t i)
{
	return i < c->n_in && c->in[i].data ? &c->in[i] : NULL;
}

bool fits(const struct tpf_ktensor *g, int64_t cols)
{
	return g && g->numel > 0 && cols % g->numel == 0;
}

bool vec_dtype(enum tpf_dtype t)
{
	return t == TPF_DTYPE_FLOAT || t == TPF_DTYPE_FLOAT16 || t == TPF_DTYPE_BFLOAT16;
}

bool aligned16(const void *p)
{
	return ((uintptr_t)p & 15) == 0;
}

// The vectorized kernel's limits (see check_norm_args in ar-norm.cuh).
bool fast_ok(enum tpf_dtype dt, int64_t cols)
{
	size_t es = tpf_elem_size(dt);
	return vec_dtype(dt) && cols > 0 && (cols * (int64_t)es) % 16 == 0 && cols * (int64_t)es / 16 <= 512 * 4;
}

RowJob job_init(const struct tpf_ktensor *x)
{
	RowJob j;
	memset(&j, 0, sizeof(j));
	j.x = x->data;
	j.dx = x->dtype;
	j.dnorm = x->dtype;
	return j;
}

void job_gamma(RowJob *j, const struct tpf_ktensor *g)
{
	j->gamma = g->data;
	j->dg = g->dtype;
	j->g_numel = g->numel;
}

void job_y(RowJob *j, struct tpf_ktensor *y)
{
	j->y = y->data;
	j->dy = y->dtype;
}

void job_sum(RowJob *j, struct tpf_ktensor *s)
{
	if (!s)
		return;
	j->sum = s->data;
	j->dsum = s->dtype;
}

void job_residual(RowJob *j, const struct tpf_ktensor *r)
{
	if (!r)
		return;
	j->residual = r->data;
	j->dres = r->dtype;
	j->res_numel = r->numel;
}

// A job normalizing x (plus the residual res) with gamma into y, the sum
// into sum (res and sum may be NULL).
RowJob job_norm(const struct tpf_ktensor *x, const struct tpf_ktensor *gamma, const struct tpf_ktensor *res,
		struct tpf_ktensor *y, struct tpf_ktensor *sum)
{
	RowJob j = job_init(x);
	job_gamma(&j, gamma);
	job_residual(&j, res);
	job_y(&j, y);
	job_sum(&j, sum);
	return j;
}

// The job's geometry and epsilon, and where 1 / std goes (inv may be NULL).
void job_rows(RowJob *j, int64_t rows, int64_t cols, float eps, struct tpf_ktensor *inv)
{
	j->rows = rows;
	j->cols = cols;
	j->eps = eps;
	if (inv) {
		j->inv_std = inv->data;
		j->dinv = inv->dtype;
	}
}

bool all_float(const struct tpf_kernel_call *c)
{
	for (size_t i = 0; i < c->n_in; i++)
		if (c->in[i].data && !tpfc_float_ok(c->in[i].dtype))
			return false;
	for (size_t i = 0; i < c->n_out; i++)
		if (c->out[i].data && !tpfc_float_ok(c->out[i].dtype) && c->out[i].dtype != TPF_DTYPE_FLOAT4E2M1)
			return false;
	return true;
}

// x (+ residual) -> norm (+ sum) through the vectorized kernel when it fits.
bool try_fast(const struct tpf_kernel_call *c, const struct tpf_ktensor *x, const struct tpf_ktensor *gamma,
	      const struct tpf_ktensor *res, struct tpf_ktensor *y, struct tpf_ktensor *sum, int64_t rows,
	      int64_t cols, float eps, float offset, enum tpf_status *st)
{
	enum tpf_dtype dt = x->dtype;
	if (!fast_ok(dt, cols) || gamma->dtype != dt || gamma->numel != cols || y->dtype != dt)
		return false;
	if (res && (res->dtype != dt || res->numel != x->numel || !aligned16(res->data)))
		return false;
	if (sum && (sum->dtype != dt || !aligned16(sum->data)))
		return false;
	if (!res && sum)
		return false;
	if (!aligned16(x->data) || !aligned16(y->data) || !aligned16(gamma->data))
		return false;
	struct tpf_cuda_norm_args a;
	memset(&a, 0, sizeof(a));
	a.dtype = dt;
	a.rows = rows;
	a.hidden = cols;
	a.x = x->data;
	a.residual = res ? res->data : NULL;
	a.gamma = gamma->data;
	a.epsilon = eps;
	a.weight_offset = offset;
	a.norm_out = y->data;
	a.residual_out = sum ? sum->data : NULL;
	*st = tpf_cuda_add_rmsnorm(&a, c->stream, c->diag);
	return true;
}

// RMSNorm(x, gamma[, residual]), and the post-reduce phase of
// AllReduceRMSNorm(x, gamma[, residual][, bias]) and (center)
// AllReduceLayerNorm(x, gamma[, residual][, bias][, beta]): the bias is
// added before the residual, as the CPU kernel does.
enum tpf_status norm_common(const struct tpf_kernel_call *c, int center)
{
	const struct tpf_ktensor *x = &c->in[0], *gamma = &c->in[1];
	const struct tpf_ktensor *res = opt_in(c, 2), *bias = opt_in(c, 3), *beta = opt_in(c, 4);
	struct tpf_ktensor *y = &c->out[0], *sum = opt_out(c, 1);
	struct tpf_norm_attrs na;
	if (tpf_norm_attrs(c, x, &na))
		return tpf_kfail(c, TPF_ERR_INVALID, "axis out of range");
	int64_t rows = na.rows, cols = na.cols;
	float eps = na.epsilon, offset = na.weight_offset;
	if (!fits(gamma, cols) || (beta && !fits(beta, cols)) || (bias && !fits(bias, cols)))
		return tpf_kfail(c, TPF_ERR_INVALID, "gamma, beta or bias does not match the normalized size");
	if (res && res->numel != x->numel)
		return tpf_kfail(c, TPF_ERR_INVALID, "residual shape differs from x");
	if (!all_float(c))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "dtype %s not supported on cuda", tpf_dtype_name(x->dtype));
	enum tpf_status st;
	if (!center && !bias && try_fast(c, x, gamma, res, y, sum, rows, cols, eps, offset, &st))
		return st;
	RowJob j = job_norm(x, gamma, res, y, sum);
	job_rows(&j, rows, cols, eps, NULL);
	j.offset = offset;
	j.center = center;
	if (bias) {
		j.bias = bias->data;
		j.dbias = bias->dtype;
		j.bias_numel = bias->numel;
		j.bias_first = 1;
	}
	if (beta) {
		j.beta = beta->data;
		j.dbeta = beta->dtype;
		j.beta_numel = beta->numel;
	}
	return launch_rows(c, j);
}

} // namespace

extern "C" TPF_CUDA_KERNEL(tpf_cu_rms_norm)
{
	const struct tpf_ktensor *x = &c->in[0], *gamma = &c->in[1];
	struct tpf_ktensor *y = &c->out[0], *inv = opt_out(c, 1);
	struct tpf_norm_attrs na;
	if (tpf_norm_attrs(c, x, &na))
		return tpf_kfail(c, TPF_ERR_INVALID, "axis out of range");
	int64_t rows = na.rows, cols = na.cols;
	float eps = na.epsilon;
	if (!fits(gamma, cols))
		return tpf_kfail(c, TPF_ERR_INVALID, "scale does not broadcast over the normalized dims");
	if (!all_float(c))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "dtype %s not supported on cuda", tpf_dtype_name(x->dtype));
	enum tpf_status st;
	if (!inv && try_fast(c, x, gamma, NULL, y, NULL, rows, cols, eps, 0.0f, &st))
		return st;
	RowJob j = job_init(x);
	job_gamma(&j, gamma);
	job_y(&j, y);
	job_rows(&j, rows, cols, eps, inv);
	return launch_rows(c, j);
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_skip_rms_norm)
{
	const struct tpf_ktensor *x = &c->in[0], *res = &c->in[1], *gamma = &c->in[2];
	const struct tpf_ktensor *bias = opt_in(c, 3);
	struct tpf_ktensor *y = &c->out[0], *mean = opt_out(c, 1), *inv = opt_out(c, 2), *sum = opt_out(c, 3);
	struct tpf_norm_attrs na;
	if (tpf_norm_attrs(c, x, &na))
		return tpf_kfail(c, TPF_ERR_INVALID, "input must have rank >= 1");
	int64_t rows = na.rows, cols = na.cols;
	float eps = na.epsilon;
	if (res->numel != x->numel && res->numel != cols)
		return tpf_kfail(c, TPF_ERR_INVALID, "skip shape does not match input");
	if (!fits(gamma, cols))
		return tpf_kfail(c, TPF_ERR_INVALID, "gamma does not match the hidden size");
	if (!all_float(c))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "dtype %s not supported on cuda", tpf_dtype_name(x->dtype));
	if (mean) {
		cudaError_t e = cudaMemsetAsync(mean->data, 0, mean->nbytes, tpfc_stream(c));
		if (e != cudaSuccess)
			return tpfc_cuda_fail(c, "memset", e);
	}
	enum tpf_status st;
	if (!bias && !inv && try_fast(c, x, gamma, res, y, sum, rows, cols, eps, 0.0f, &st))
		return st;
	RowJob j = job_norm(x, gamma, res, y, sum);
	if (bias) {
		j.bias = bias->data;
		j.dbias = bias->dtype;
		j.bias_numel = bias->numel;
	}
	job_rows(&j, rows, cols, eps, inv);
	return launch_rows(c, j);
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_layer_norm)
{
	const struct tpf_ktensor *x = &c->in[0], *gamma = &c->in[1], *beta = opt_in(c, 2);
	struct tpf_ktensor *y = &c->out[0], *mean = opt_out(c, 1), *inv = opt_out(c, 2);
	struct tpf_norm_attrs na;
	if (tpf_norm_attrs(c, x, &na))
		return tpf_kfail(c, TPF_ERR_INVALID, "axis out of range");
	int64_t rows = na.rows, cols = na.cols;
	if (!fits(gamma, cols) || (beta && !fits(beta, cols)))
		return tpf_kfail(c, TPF_ERR_INVALID, "scale or bias does not broadcast over the normalized dims");
	if (!all_float(c))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "dtype %s not supported on cuda", tpf_dtype_name(x->dtype));
	RowJob j = job_init(x);
	job_gamma(&j, gamma);
	job_y(&j, y);
	if (beta) {
		j.beta = beta->data;
		j.dbeta = beta->dtype;
		j.beta_numel = beta->numel;
	}
	if (mean) {
		j.mean_out = mean->data;
		j.dmean = mean->dtype;
	}
	j.center = 1;
	job_rows(&j, rows, cols, na.epsilon, inv);
	return launch_rows(c, j);
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_tpf_rms_norm)
{
	return norm_common(c, 0);
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_allreduce_rms_norm_post)
{
	return norm_common(c, 0);
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_allreduce_layer_norm_post)
{
	return norm_common(c, 1);
}

// in: a (reduced), gamma, scale, [residual]; out: y (quantized), [sum],
// [block scales], [norm]
extern "C" TPF_CUDA_KERNEL(tpf_cu_allreduce_rms_norm_quant_post)
{
	if (c->n_in < 3 || c->n_out < 1)
		return tpf_kfail(c, TPF_ERR_INVALID, "expects a, gamma, scale[, residual]");
	const struct tpf_ktensor *x = &c->in[0], *gamma = &c->in[1], *scale = &c->in[2], *res = opt_in(c, 3);
	struct tpf_ktensor *q = &c->out[0], *sum = opt_out(c, 1), *qb = opt_out(c, 2), *norm = opt_out(c, 3);
	struct tpf_norm_attrs na;
	if (tpf_norm_attrs(c, x, &na) || !fits(gamma, na.cols))
		return tpf_kfail(c, TPF_ERR_INVALID, "axis or gamma does not fit x");
	int64_t rows = na.rows, cols = na.cols;
	if (!all_float(c))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "dtype %s not supported on cuda", tpf_dtype_name(x->dtype));
	RowJob j = job_init(x);
	job_gamma(&j, gamma);
	job_residual(&j, res);
	job_sum(&j, sum);
	if (norm)
		job_y(&j, norm);
	j.dnorm = norm ? norm->dtype : x->dtype;
	job_rows(&j, rows, cols, na.epsilon, NULL);
	j.offset = na.weight_offset;
	j.qscale = scale->data;
	j.dqs = scale->dtype;
	j.qy = q->data;
	j.dq = q->dtype;
	if (na.quant == TPF_NORM_QUANT_NVFP4) {
		int64_t block = na.block_size;
		if (!qb || block <= 0 || block % 2 || cols % block || q->dtype != TPF_DTYPE_FLOAT4E2M1 ||
		    qb->numel * block != x->numel)
			return tpf_kfail(c, TPF_ERR_INVALID, "nvfp4 needs the block scale output and rows of whole blocks");
		j.quant = 2;
		j.block = block;
		j.qblock = qb->data;
		j.dqb = qb->dtype;
	} else if (na.quant == TPF_NORM_QUANT_FP8_GROUP) {
		int64_t g = na.block_size;
		if (!qb || g <= 0 || cols % g || q->dtype != TPF_DTYPE_FLOAT8E4M3FN || qb->dtype != TPF_DTYPE_FLOAT ||
		    qb->numel * g != x->numel || scale->numel != 1)
			return tpf_kfail(c, TPF_ERR_INVALID,
					 "fp8-group needs float32 group scales, float8e4m3fn codes and rows of whole groups");
		j.quant = 3;
		j.block = g;
		j.qblock = qb->data;
		j.dqb = qb->dtype;
	} else if (na.quant == TPF_NORM_QUANT_FP8) {
		if (scale->numel != 1)
			return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "cuda: only a per-tensor fp8 scale is supported");
		j.quant = 1;
	} else {
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "quant '%s' not supported on cuda", na.quant_name);
	}
	return launch_rows(c, j);
}

namespace {

// The weight a rank normalizes its shard with: gamma_i, or in the part form
// the full weight from the part's start.  false when it does not fit.
bool sharded_gamma(const struct tpf_kernel_call *c, size_t p, size_t n, int64_t w, const void **data,
		   int64_t *numel)
{
	const struct tpf_ktensor *g = &c->in[n + p];
	int64_t s, e;
	*data = g->data;
	*numel = g->numel;
	if (tpf_sharded_part(c, p, &s, &e))
		return fits(g, w);
	if (g->numel != tpf_sharded_full_dim(c, p, w) || e - s != w || s < 0 || e > g->numel)
		return false;
	*data = (const char *)g->data + s * (int64_t)tpf_elem_size(g->dtype);
	*numel = w;
	return true;
}

bool sharded_fast(const struct tpf_kernel_call *c, size_t n, struct tpf_cuda_sharded_args *a)
{
	memset(a, 0, sizeof(*a));
	if (n < 1 || n > TPF_CUDA_SHARDED_MAX)
		return false;
	enum tpf_dtype dt = c->in[0].dtype;
	if (!vec_dtype(dt))
		return false;
	a->dtype = dt;
	a->n = (int)n;
	a->weight_offset = tpf_node_attr_float(c->node, "weight_offset", 0.0f);
	for (size_t p = 0; p < n; p++) {
		const struct tpf_ktensor *x = &c->in[p], *g = &c->in[n + p];
		int64_t w = x->rank ? x->dims[x->rank - 1] : 1;
		int64_t rows = w ? x->numel / w : 0;
		const void *gd;
		int64_t gn;
		if (p == 0)
			a->rows = rows;
		if (!sharded_gamma(c, p, n, w, &gd, &gn))
			return false;
		if (x->dtype != dt || g->dtype != dt || gn != w || rows != a->rows || !fast_ok(dt, w) ||
		    !aligned16(x->data) || !aligned16(gd))
			return false;
		a->x[p] = x->data;
		a->gamma[p] = gd;
		a->width[p] = w;
		a->full_dim[p] = tpf_sharded_full_dim(c, p, w);
		a->epsilon[p] = tpf_sharded_epsilon(c, p);
	}
	return true;
}

__global__ void sumsq_kernel(int dx, const void *x, float *s, int64_t rows, int64_t cols, int64_t n, int64_t p)
{
	__shared__ float scratch[33];
	for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
		float ss = 0;
		for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) {
			float v = ld_f(dx, x, r * cols + k);
			ss += v * v;
		}
		ss = block_reduce(ss, scratch);
		if (threadIdx.x == 0)
			s[r * n + p] = ss;
	}
}

__global__ void set_float_kernel(float *p, float v)
{
	*p = v;
}

// The part form's agreement on the device (reading it back would wait for
// the device): ranks that disagree about the parts would call different
// collectives next, so a wrong count stops the device work.
__global__ void check_float_kernel(const float *p, float want)
{
	if (*p != want)
		__trap();
}

// The part form on a rank whose part is another's: g is x gathered rank
// after rank ([W, rows, d]), s the reduced sums; y gets [start, start + w).
__global__ void sharded_gathered_kernel(int dg, const void *g, int dgam, const void *gamma, int dy, void *y,
					const float *s, int64_t rows, int64_t d, int64_t full, int64_t start,
					int64_t w, int64_t n, int64_t p, float eps, float offset)
{
	for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
		float inv = 1.0f / sqrtf(s[r * n + p] / (float)full + eps);
		for (int64_t k = threadIdx.x; k < w; k += blockDim.x) {
			int64_t col = start + k, src = (col / d) * rows * d + r * d + col % d;
			float v = ld_f(dg, g, src) * inv * (offset + ld_f(dgam, gamma, col));
			st_f(dy, y, r * w + k, v);
		}
	}
}

} // namespace

extern "C" TPF_CUDA_KERNEL(tpf_cu_sharded_sumsq)
{
	size_t n = c->n_in / 2;
	struct tpf_ktensor *s = &c->out[0];
	if (n == 0 || c->n_in % 2 || s->dtype != TPF_DTYPE_FLOAT)
		return tpf_kfail(c, TPF_ERR_INVALID, "expects n inputs, n gammas and a float32 sum buffer");
	if (!all_float(c))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "dtype %s not supported on cuda", tpf_dtype_name(c->in[0].dtype));
	int64_t rows = -1;
	for (size_t p = 0; p < n; p++) {
		int64_t cols;
		enum tpf_status st = tpf_sharded_tokens(c, p, &rows, &cols);
		if (st)
			return st;
	}
	int64_t parts = tpf_node_attr(c->node, "part_starts") != NULL;
	if (s->numel != rows * (int64_t)n + parts)
		return tpf_kfail(c, TPF_ERR_INVALID, "sum buffer has the wrong size");
	if (parts) {
		// one more float: 1 on a rank whose parts are its own shards
		set_float_kernel<<<1, 1, 0, tpfc_stream(c)>>>((float *)s->data + rows * (int64_t)n,
							     tpf_sharded_parts_own(c, n) ? 1.0f : 0.0f);
		enum tpf_status st = tpfc_launched(c, "sumsq flag");
		if (st)
			return st;
	}
	if (rows == 0)
		return TPF_OK;
	struct tpf_cuda_sharded_args a;
	if (sharded_fast(c, n, &a))
		return tpf_cuda_sharded_sumsq(&a, (float *)s->data, c->stream, c->diag);
	for (size_t p = 0; p < n; p++) {
		const struct tpf_ktensor *x = &c->in[p];
		int64_t cols = x->rank ? x->dims[x->rank - 1] : 1;
		unsigned g = (unsigned)(rows < 65535 * 8 ? rows : 65535 * 8);
		sumsq_kernel<<<g, cols >= 512 ? 256 : 64, 0, tpfc_stream(c)>>>(x->dtype, x->data, (float *)s->data, rows,
									      cols, (int64_t)n, (int64_t)p);
		TPF_KTRY(tpfc_launched(c, "sumsq"));
	}
	return TPF_OK;
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_sharded_normalize)
{
	size_t n = (c->n_in - 1) / 2;
	const struct tpf_ktensor *s = &c->in[c->n_in - 1];
	if (n == 0 || c->n_in != 2 * n + 1 || c->n_out < n || s->dtype != TPF_DTYPE_FLOAT)
		return tpf_kfail(c, TPF_ERR_INVALID, "expects n inputs, n gammas and the reduced sums");
	if (!all_float(c))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "dtype %s not supported on cuda", tpf_dtype_name(c->in[0].dtype));
	struct tpf_cuda_sharded_args a;
	bool fast = sharded_fast(c, n, &a);
	for (size_t p = 0; fast && p < n; p++) {
		if (c->out[p].dtype != a.dtype || !aligned16(c->out[p].data) || c->out[p].numel != c->in[p].numel)
			fast = false;
		a.out[p] = c->out[p].data;
	}
	int64_t parts = tpf_node_attr(c->node, "part_starts") != NULL;
	// the part form comes here only on a rank whose parts are its own (the
	// plan's rule); every rank must have taken its own part (the count in
	// the sums' last float), checked on the device
	if (parts && !tpf_sharded_parts_own(c, n))
		return tpf_kfail(c, TPF_ERR_INVALID, "rank %d's parts are not its own shards; the part "
			         "form's other path gathers them", c->rank);
	if (parts && s->numel > 0) {
		check_float_kernel<<<1, 1, 0, tpfc_stream(c)>>>((const float *)s->data + s->numel - 1,
							       (float)(c->world > 0 ? c->world : 1));
		enum tpf_status st = tpfc_launched(c, "part agreement");
		if (st)
			return st;
	}
	if (fast)
		return a.rows ? tpf_cuda_sharded_normalize(&a, (const float *)s->data, c->stream, c->diag) : TPF_OK;
	for (size_t p = 0; p < n; p++) {
		const struct tpf_ktensor *x = &c->in[p], *g = &c->in[n + p];
		int64_t w = x->rank ? x->dims[x->rank - 1] : 1;
		const void *gd;
		int64_t gn;
		if (!sharded_gamma(c, p, n, w, &gd, &gn))
			return tpf_kfail(c, TPF_ERR_INVALID, "gamma does not fit input %zu", p);
		RowJob j = job_init(x);
		job_gamma(&j, g);
		j.gamma = gd;
		j.g_numel = gn;
		job_y(&j, &c->out[p]);
		j.cols = x->rank ? x->dims[x->rank - 1] : 1;
		j.rows = j.cols ? x->numel / j.cols : 0;
		j.eps = tpf_sharded_epsilon(c, p);
		j.offset = tpf_node_attr_float(c->node, "weight_offset", 0.0f);
		j.ext = (const float *)s->data;
		j.ext_stride = (int64_t)n;
		j.ext_col = (int64_t)p;
		j.full_cols = tpf_sharded_full_dim(c, p, j.cols);
		if (s->numel != j.rows * (int64_t)n + parts)
			return tpf_kfail(c, TPF_ERR_INVALID, "the sums do not fit input %zu", p);
		TPF_KTRY(launch_rows(c, j));
	}
	return TPF_OK;
}

// The part form on a rank whose part is not its own: gathered inputs, full
// weights, the reduced sums (kernels/cpu/norm.c, tpf_cpu_sharded_gathered).
extern "C" TPF_CUDA_KERNEL(tpf_cu_sharded_gathered)
{
	size_t n = (c->n_in - 1) / 2;
	const struct tpf_ktensor *s = &c->in[c->n_in - 1];
	int world = c->world > 0 ? c->world : 1;
	if (c->n_in == 1 && s->dtype == TPF_DTYPE_FLOAT) {
		// before the gathers: no rank took its own part
		if (s->numel > 0) {
			check_float_kernel<<<1, 1, 0, tpfc_stream(c)>>>((const float *)s->data + s->numel - 1, 0.0f);
			return tpfc_launched(c, "part agreement");
		}
		return TPF_OK;
	}
	if (n == 0 || c->n_in != 2 * n + 1 || c->n_out < n || s->dtype != TPF_DTYPE_FLOAT)
		return tpf_kfail(c, TPF_ERR_INVALID, "expects n gathered inputs, n gammas and the reduced sums");
	if (!all_float(c))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "dtype %s not supported on cuda", tpf_dtype_name(c->in[0].dtype));
	float offset = tpf_node_attr_float(c->node, "weight_offset", 0.0f);
	for (size_t p = 0; p < n; p++) {
		const struct tpf_ktensor *g = &c->in[p], *gamma = &c->in[n + p];
		struct tpf_ktensor *y = &c->out[p];
		struct tpf_sharded_gathered gp;
		enum tpf_status gst = tpf_sharded_gathered_part(c, p, world, &gp);
		if (gst)
			return gst;
		int64_t start = gp.start, end = gp.end, w = gp.w, rows = gp.rows, d = gp.d, full = gp.full;
		if (w <= 0 || start < 0 || end > full || g->numel != (int64_t)world * rows * d || gamma->numel != full ||
		    s->numel != rows * (int64_t)n + 1 || tpf_sharded_full_dim(c, p, d) != full)
			return tpf_kfail(c, TPF_ERR_INVALID,
					 "part [%lld, %lld) of tensor %zu does not fit its gathered input, weight or sums",
					 (long long)start, (long long)end, p);
		if (rows == 0)
			continue;
		unsigned blocks = (unsigned)(rows < 65535 * 8 ? rows : 65535 * 8);
		sharded_gathered_kernel<<<blocks, w >= 512 ? 256 : 64, 0, tpfc_stream(c)>>>(
		    g->dtype, g->data, gamma->dtype, gamma->data, y->dtype, y->data, (const float *)s->data, rows, d,
		    full, start, w, (int64_t)n, (int64_t)p, tpf_sharded_epsilon(c, p), offset);
		TPF_KTRY(tpfc_launched(c, "sharded gathered norm"));
	}
	return TPF_OK;
}

// ---------------------------------------------------------------- one-shot paths of a plan
// The runtime hands a fused collective's calls here to run them through peer
// memory instead of NCCL + kernel.  With no context they only decide, from
// dtypes, shapes, attributes and alignment (the same on every rank of a plan).

namespace {

enum tpf_status decline()
{
	return TPF_ERR_UNSUPPORTED;
}

// A group of g values spans a power of two of 16-byte chunks, at most a
// warp's lanes (the peer kernels combine a group's maxima by shuffles).
bool group_span_ok(int64_t g, enum tpf_dtype dt)
{
	int64_t per = 16 / (int64_t)tpf_elem_size(dt), span = per > 0 ? g / per : 0;
	return per > 0 && g % per == 0 && span >= 1 && span <= 32 && !(span & (span - 1));
}

bool dt_out_ok(const struct tpf_ktensor *t, enum tpf_dtype dt, int64_t numel)
{
	return t->dtype == dt && t->numel == numel && aligned16(t->data);
}

} // namespace

extern "C" enum tpf_status tpf_cuda_oneshot_arnorm(struct tpf_cuda_arnorm *ctx, const struct tpf_kernel_call *c,
						   const void *partial, enum tpf_cuda_ar_path path,
						   struct tpf_cuda_oneshot_need *need)
{
	bool quant = c->node->op == TPF_OP_TPF_ALLREDUCE_RMS_NORM_QUANT;
	if (c->n_in < (quant ? 3u : 2u) || c->n_out < 1)
		return decline();
	// AllReduceLayerNorm and a bias after the reduction run through the
	// communicator and the post-reduce kernel
	if (c->node->op == TPF_OP_TPF_ALLREDUCE_LAYER_NORM || (!quant && opt_in(c, 3)))
		return decline();
	const struct tpf_ktensor *x = &c->in[0], *gamma = &c->in[1], *res = opt_in(c, quant ? 3 : 2);
	enum tpf_dtype dt = x->dtype;
	if (x->rank < 1)
		return decline();
	int64_t cols = x->dims[x->rank - 1];
	struct tpf_norm_attrs na;
	if (tpf_norm_attrs(c, x, &na) || na.axis != x->rank - 1 || !fast_ok(dt, cols) || gamma->dtype != dt ||
	    gamma->numel != cols || !aligned16(partial) || !aligned16(gamma->data))
		return decline();
	if (res && !dt_out_ok(res, dt, x->numel))
		return decline();
	struct tpf_cuda_norm_args a;
	memset(&a, 0, sizeof(a));
	a.dtype = dt;
	a.rows = x->numel / cols;
	a.hidden = cols;
	a.x = partial;
	a.residual = res ? res->data : NULL;
	a.gamma = gamma->data;
	a.epsilon = na.epsilon;
	a.weight_offset = na.weight_offset;
	a.path = path;
	const struct tpf_ktensor *sum = opt_out(c, 1);
	if (sum && !dt_out_ok(sum, dt, x->numel))
		return decline();
	a.residual_out = sum ? sum->data : NULL;
	if (!quant) {
		if (!dt_out_ok(&c->out[0], dt, x->numel))
			return decline();
		a.norm_out = c->out[0].data;
	} else {
		const struct tpf_ktensor *scale = &c->in[2], *q = &c->out[0], *qb = opt_out(c, 2), *norm = opt_out(c, 3);
		if (scale->numel != 1 || !scale->host || !tpfc_float_ok(scale->dtype) || q->numel != x->numel ||
		    !aligned16(q->data))
			return decline();
		if (norm && !dt_out_ok(norm, dt, x->numel))
			return decline();
		double s = tpf_elem_load(scale->dtype, scale->host, 0);
		if (!(s > 0) || s > 3.0e38)
			return decline();
		if (na.quant == TPF_NORM_QUANT_FP8 && !qb && q->dtype == TPF_DTYPE_FLOAT8E4M3FN) {
			a.fp8_out = q->data;
			a.fp8_scale = (float)s;
		} else if (na.quant == TPF_NORM_QUANT_FP8_GROUP && qb && q->dtype == TPF_DTYPE_FLOAT8E4M3FN &&
			   qb->dtype == TPF_DTYPE_FLOAT && na.block_size > 0 && cols % na.block_size == 0 &&
			   qb->numel * na.block_size == x->numel && group_span_ok(na.block_size, dt)) {
			a.group_out = q->data;
			a.group_scales = qb->data;
			a.group_floor = (float)s;
			a.group = na.block_size;
		} else if (na.quant == TPF_NORM_QUANT_NVFP4 && na.block_size == 16 && cols % 16 == 0 && qb &&
			   q->dtype == TPF_DTYPE_FLOAT4E2M1 && qb->dtype == TPF_DTYPE_FLOAT8E4M3FN &&
			   qb->numel * 16 == x->numel) {
			a.fp4_out = q->data;
			a.fp4_scales = qb->data;
			a.fp4_global = (float)s;
		} else {
			return decline();
		}
		a.norm_out = norm ? norm->data : NULL;
	}
	if (!ctx) {
		need->dtype = dt;
		need->elems = (size_t)x->numel;
		need->hidden = cols;
		return TPF_OK;
	}
	return tpf_cuda_arnorm_run(ctx, &a, c->stream, c->diag);
}

extern "C" enum tpf_status tpf_cuda_oneshot_allreduce(struct tpf_cuda_arnorm *ctx, const struct tpf_ktensor *x,
						      struct tpf_ktensor *y, enum tpf_cuda_ar_path path, void *stream,
						      struct tpf_diag *d, struct tpf_cuda_oneshot_need *need)
{
	enum tpf_dtype dt = x->dtype;
	if (!vec_dtype(dt) || x->numel <= 0 || !dt_out_ok(y, dt, x->numel) || !aligned16(x->data))
		return decline();
	// An element-wise sum: any row width works; the widest power of two
	// (up to 4096) that divides the tensor into 16-byte chunks.
	int64_t per16 = 16 / (int64_t)tpf_elem_size(dt), w = 0;
	for (int64_t h = 4096; h >= per16; h /= 2)
		if (x->numel % h == 0) {
			w = h;
			break;
		}
	if (!w)
		return decline();
	if (!ctx) {
		need->dtype = dt;
		need->elems = (size_t)x->numel;
		need->hidden = x->rank ? x->dims[x->rank - 1] : x->numel;
		return TPF_OK;
	}
	struct tpf_cuda_norm_args a;
	memset(&a, 0, sizeof(a));
	a.dtype = dt;
	a.rows = x->numel / w;
	a.hidden = w;
	a.x = x->data;
	a.residual_out = y->data;
	a.path = path;
	return tpf_cuda_arnorm_run(ctx, &a, stream, d);
}

extern "C" enum tpf_status tpf_cuda_oneshot_sharded(struct tpf_cuda_arnorm *ctx, const struct tpf_kernel_call *sumsq,
						    const struct tpf_kernel_call *norm,
						    struct tpf_cuda_oneshot_need *need)
{
	size_t n = sumsq->n_in / 2;
	struct tpf_cuda_sharded_args a;
	if (n == 0 || sumsq->n_in % 2 || norm->n_in != 2 * n + 1 || norm->n_out < n || !sharded_fast(norm, n, &a))
		return decline();
	for (size_t p = 0; p < n; p++) {
		if (!dt_out_ok(&norm->out[p], a.dtype, norm->in[p].numel))
			return decline();
		a.out[p] = norm->out[p].data;
	}
	if (!ctx) {
		need->dtype = TPF_DTYPE_FLOAT;
		need->elems = (size_t)a.rows * n;
		need->hidden = (int64_t)n;
		return TPF_OK;
	}
	return tpf_cuda_sharded_rmsnorm_run(ctx, &a, norm->stream, norm->diag);
}
