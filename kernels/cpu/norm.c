/* SPDX-License-Identifier: MIT */
/* Normalizations: RMSNormalization, SimplifiedLayerNormalization (ONNX and
 * com.microsoft), SkipSimplifiedLayerNormalization, LayerNormalization, and
 * the local parts of tpfuse's fused norms.  Statistics are computed in
 * float32; a residual sum is rounded to the activation dtype before it is
 * normalized, exactly as the unfused Add -> norm chain does. */
#include "cpu-kernels.h"
#include "op-geometry.h" /* TPF_KTRY */

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One normalization problem: rows x cols, optional residual/bias addends. */
struct rms_job {
	const struct tpf_ktensor *x, *residual, *bias, *gamma;
	struct tpf_ktensor *y, *sum, *inv_std;
	int64_t rows, cols;
	float eps;
	float gamma_offset;
	int center; /* LayerNormalization: subtract the mean */
	int bias_first; /* the fused norms: (x + bias) + residual, each sum rounded */
	const struct tpf_ktensor *beta;
	struct tpf_ktensor *mean_out;
	/* ShardedRMSNorm normalize: the sum of squares per row comes from here
	 * (float32 [rows * stride], this problem at column `col`) over full_cols. */
	const float *ext_sumsq;
	int64_t ext_stride, ext_col, full_cols;
	int64_t gamma_start; /* ShardedRMSNorm's part form: gamma is the full weight */
	/* Quantized output: y is quantized with scale (per tensor) into qy */
	const struct tpf_ktensor *qscale;
	struct tpf_ktensor *qy;
	struct tpf_ktensor *y_hp; /* high-precision norm output (may be NULL) */
};

static int gamma_fits(const struct tpf_ktensor *g, int64_t cols)
{
	return g && g->numel > 0 && cols % g->numel == 0;
}

/* v rounded to the dtype the unfused graph keeps a sum of the reduced value
 * in: the residual sum's, else x's. */
static float sum_round(const struct rms_job *j, float v)
{
	uint8_t tmp[16] = {0};
	enum tpf_dtype dt = j->sum ? j->sum->dtype : j->x->dtype;
	tpf_elem_store(dt, tmp, 0, v, 1);
	return (float)tpf_elem_load(dt, tmp, 0);
}

static enum tpf_status rms_run(const struct tpf_kernel_call *c, const struct rms_job *j)
{
	float *row = tpf_calloc(j->cols > 0 ? (size_t)j->cols : 1, sizeof(float));
	if (!row)
		return tpf_kfail(c, TPF_ERR_NOMEM, "out of memory");
	float qscale = j->qscale ? (float)tpf_elem_load(j->qscale->dtype, j->qscale->data, 0) : 1.0f;
	for (int64_t r = 0; r < j->rows; r++) {
		int64_t base = r * j->cols;
		for (int64_t k = 0; k < j->cols; k++) {
			float v = (float)tpf_elem_load(j->x->dtype, j->x->data, base + k);
			if (j->bias_first) {
				v = sum_round(j, v + (float)tpf_elem_load(j->bias->dtype, j->bias->data,
									   k % j->bias->numel));
				if (j->residual)
					v = sum_round(j, v + (float)tpf_elem_load(j->residual->dtype,
										   j->residual->data, base + k));
				if (j->sum)
					tpf_elem_store(j->sum->dtype, j->sum->data, base + k, v, 1);
			} else if (j->residual || j->bias) {
				if (j->residual)
					v += (float)tpf_elem_load(j->residual->dtype, j->residual->data,
								  j->residual->numel == j->x->numel ? base + k : k);
				if (j->bias)
					v += (float)tpf_elem_load(j->bias->dtype, j->bias->data, k % j->bias->numel);
				/* the unfused graph materializes the sum in the activation dtype */
				if (j->sum) {
					tpf_elem_store(j->sum->dtype, j->sum->data, base + k, v, 1);
					v = (float)tpf_elem_load(j->sum->dtype, j->sum->data, base + k);
				} else {
					double t = 0;
					enum tpf_dtype dt = j->x->dtype;
					uint8_t tmp[16] = {0};
					tpf_elem_store(dt, tmp, 0, v, 1);
					t = tpf_elem_load(dt, tmp, 0);
					v = (float)t;
				}
			} else if (j->sum) {
				tpf_elem_store(j->sum->dtype, j->sum->data, base + k, v, 1);
			}
			row[k] = v;
		}
		float mean = 0, inv;
		if (j->center) {
			float s = 0;
			for (int64_t k = 0; k < j->cols; k++)
				s += row[k];
			mean = s / (float)j->cols;
		}
		if (j->ext_sumsq) {
			float ss = j->ext_sumsq[r * j->ext_stride + j->ext_col];
			inv = 1.0f / sqrtf(ss / (float)j->full_cols + j->eps);
		} else {
			float ss = 0;
			for (int64_t k = 0; k < j->cols; k++) {
				float d = row[k] - mean;
				ss += d * d;
			}
			inv = 1.0f / sqrtf(ss / (float)j->cols + j->eps);
		}
		if (j->inv_std)
			tpf_elem_store(j->inv_std->dtype, j->inv_std->data, r, inv, 1);
		if (j->mean_out)
			tpf_elem_store(j->mean_out->dtype, j->mean_out->data, r, mean, 1);
		for (int64_t k = 0; k < j->cols; k++) {
			float g = j->gamma_offset;
			if (j->gamma)
				g += (float)tpf_elem_load(j->gamma->dtype, j->gamma->data,
							  (j->gamma_start + k) % j->gamma->numel);
			float v = (row[k] - mean) * inv * g;
			if (j->beta)
				v += (float)tpf_elem_load(j->beta->dtype, j->beta->data, k % j->beta->numel);
			if (j->y)
				tpf_elem_store(j->y->dtype, j->y->data, base + k, v, 1);
			if (j->y_hp)
				tpf_elem_store(j->y_hp->dtype, j->y_hp->data, base + k, v, 1);
			if (j->qy) {
				/* the quantizer reads the norm in the activation dtype */
				uint8_t tmp[16] = {0};
				tpf_elem_store(j->x->dtype, tmp, 0, v, 1);
				float hv = (float)tpf_elem_load(j->x->dtype, tmp, 0);
				tpf_elem_store(j->qy->dtype, j->qy->data, base + k, hv / qscale, 1);
			}
		}
	}
	tpf_free(row);
	return TPF_OK;
}

/* rows, cols, epsilon and weight_offset of j from the node (kernel-host.h) */
static int norm_setup(const struct tpf_kernel_call *c, struct rms_job *j, struct tpf_norm_attrs *a)
{
	if (tpf_norm_attrs(c, j->x, a))
		return -1;
	j->rows = a->rows;
	j->cols = a->cols;
	j->eps = a->epsilon;
	j->gamma_offset = a->weight_offset;
	return 0;
}

static struct tpf_ktensor *opt_out(const struct tpf_kernel_call *c, size_t i)
{
	return i < c->n_out && c->out[i].data ? &c->out[i] : NULL;
}

static const struct tpf_ktensor *opt_in(const struct tpf_kernel_call *c, size_t i)
{
	return i < c->n_in && c->in[i].data ? &c->in[i] : NULL;
}

/* The job of a norm kernel that reads x = in[0] and gamma = in[gamma] and
 * writes y = out[0]. */
static struct rms_job norm_job(const struct tpf_kernel_call *c, size_t gamma)
{
	struct rms_job j = {0};
	j.x = &c->in[0];
	j.gamma = &c->in[gamma];
	j.y = &c->out[0];
	return j;
}

/* norm_setup, then gamma (and beta, when given) must fit the normalized
 * size; the messages say which did not. */
static enum tpf_status norm_check(const struct tpf_kernel_call *c, struct rms_job *j,
				  struct tpf_norm_attrs *na, const char *axis_msg, const char *gamma_msg)
{
	if (norm_setup(c, j, na))
		return tpf_kfail(c, TPF_ERR_INVALID, "%s", axis_msg);
	if (!gamma_fits(j->gamma, j->cols) || (j->beta && !gamma_fits(j->beta, j->cols)))
		return tpf_kfail(c, TPF_ERR_INVALID, "%s", gamma_msg);
	return TPF_OK;
}

/* RMSNormalization, SimplifiedLayerNormalization (both domains) */
TPF_CPU_KERNEL(tpf_cpu_rms_norm)
{
	struct rms_job j = norm_job(c, 1);
	struct tpf_norm_attrs na;
	j.inv_std = opt_out(c, 1);
	TPF_KTRY(norm_check(c, &j, &na, "axis out of range",
			    "scale does not broadcast over the normalized dims"));
	return rms_run(c, &j);
}

/* com.microsoft SkipSimplifiedLayerNormalization(input, skip, gamma[, bias])
 * -> output, mean (unused), inv_std_var, input_skip_bias_sum */
TPF_CPU_KERNEL(tpf_cpu_skip_rms_norm)
{
	struct rms_job j = norm_job(c, 2);
	j.residual = &c->in[1];
	j.bias = opt_in(c, 3);
	j.inv_std = opt_out(c, 2);
	j.sum = opt_out(c, 3);
	struct tpf_norm_attrs na;
	if (norm_setup(c, &j, &na))
		return tpf_kfail(c, TPF_ERR_INVALID, "input must have rank >= 1");
	if (j.residual->numel != j.x->numel && j.residual->numel != j.cols)
		return tpf_kfail(c, TPF_ERR_INVALID, "skip shape does not match input");
	if (!gamma_fits(j.gamma, j.cols))
		return tpf_kfail(c, TPF_ERR_INVALID, "gamma does not match the hidden size");
	if (opt_out(c, 1))
		memset(c->out[1].data, 0, c->out[1].nbytes);
	return rms_run(c, &j);
}

TPF_CPU_KERNEL(tpf_cpu_layer_norm)
{
	struct rms_job j = norm_job(c, 1);
	j.beta = opt_in(c, 2);
	j.mean_out = opt_out(c, 1);
	j.inv_std = opt_out(c, 2);
	j.center = 1;
	struct tpf_norm_attrs na;
	TPF_KTRY(norm_check(c, &j, &na, "axis out of range",
			    "scale or bias does not broadcast over the normalized dims"));
	return rms_run(c, &j);
}

/* ai.tpfuse RMSNorm(x, gamma[, residual]) -> norm[, x + residual] and the
 * post-reduce phase of AllReduceRMSNorm(x, gamma[, residual][, bias]) and
 * AllReduceLayerNorm(x, gamma[, residual][, bias][, beta]), whose operand 0
 * is already summed: the bias is added before the residual, as the
 * unfused Add(Add(AllReduce(a), bias), residual) does. */
static enum tpf_status tpf_norm_common(const struct tpf_kernel_call *c, int center)
{
	struct rms_job j = norm_job(c, 1);
	j.residual = opt_in(c, 2);
	j.bias = opt_in(c, 3);
	j.bias_first = j.bias != NULL;
	j.beta = opt_in(c, 4);
	j.center = center;
	j.sum = opt_out(c, 1);
	struct tpf_norm_attrs na;
	TPF_KTRY(norm_check(c, &j, &na, "axis out of range",
			    "gamma or beta does not match the normalized size"));
	if (j.residual && j.residual->numel != j.x->numel)
		return tpf_kfail(c, TPF_ERR_INVALID, "residual shape differs from x");
	if (j.bias && !gamma_fits(j.bias, j.cols))
		return tpf_kfail(c, TPF_ERR_INVALID, "bias does not match the normalized size");
	return rms_run(c, &j);
}

TPF_CPU_KERNEL(tpf_cpu_tpf_rms_norm)
{
	return tpf_norm_common(c, 0);
}

TPF_CPU_KERNEL(tpf_cpu_allreduce_rms_norm_post)
{
	return tpf_norm_common(c, 0);
}

TPF_CPU_KERNEL(tpf_cpu_allreduce_layer_norm_post)
{
	return tpf_norm_common(c, 1);
}

/* quant "fp8-group" (docs/ops.md): per group of g values along the last
 * axis, the float32 scale max(amax / 448, floor) (floor: the scale input)
 * and the E4M3 codes of norm / scale, saturated. */
static enum tpf_status fp8_group_quantize(const struct tpf_kernel_call *c, const struct tpf_ktensor *norm,
					  int64_t g)
{
	const struct tpf_ktensor *floor_t = &c->in[2];
	struct tpf_ktensor *y = &c->out[0], *ys = opt_out(c, 2);
	if (!ys || ys->dtype != TPF_DTYPE_FLOAT || y->dtype != TPF_DTYPE_FLOAT8E4M3FN || g <= 0 ||
	    norm->numel % g || ys->numel * g != norm->numel || y->numel != norm->numel || floor_t->numel != 1)
		return tpf_kfail(c, TPF_ERR_INVALID,
				 "fp8-group needs float32 group scales (one per %lld values), float8e4m3fn codes "
				 "and a one-element scale floor",
				 (long long)g);
	double floor_v = tpf_elem_load(floor_t->dtype, floor_t->data, 0);
	for (int64_t b = 0; b < ys->numel; b++) {
		double amax = 0;
		for (int64_t i = 0; i < g; i++)
			amax = fmax(amax, fabs(tpf_elem_load(norm->dtype, norm->data, b * g + i)));
		float s = (float)(amax / 448.0);
		if (!(s >= (float)floor_v))
			s = (float)floor_v;
		((float *)ys->data)[b] = s;
		for (int64_t i = 0; i < g; i++)
			tpf_elem_store(y->dtype, y->data, b * g + i,
				       (double)((float)tpf_elem_load(norm->dtype, norm->data, b * g + i) / s), 1);
	}
	return TPF_OK;
}

/* AllReduceRMSNormQuant post-reduce phase:
 *   in:  a (reduced), gamma, scale, [residual]
 *   out: y (quantized), [residual sum], [y block scales], [norm]
 * The norm is rounded to its own dtype (output 3's, else a's) before it is
 * quantized, as the unfused graph does. */
TPF_CPU_KERNEL(tpf_cpu_allreduce_rms_norm_quant_post)
{
	enum tpf_status st;
	struct rms_job j = {0};
	struct tpf_ktensor norm = {0};
	if (c->n_in < 3 || c->n_out < 1)
		return tpf_kfail(c, TPF_ERR_INVALID, "expects a, gamma, scale[, residual]");
	struct tpf_norm_attrs na;
	struct tpf_ktensor *norm_out = opt_out(c, 3);
	norm = c->in[0];
	norm.dtype = norm_out ? norm_out->dtype : c->in[0].dtype;
	if (tpf_ktensor_finish(&norm))
		return tpf_kfail(c, TPF_ERR_LIMIT, "norm size overflows");
	norm.data = tpf_malloc(norm.nbytes ? norm.nbytes : 1);
	norm.host = NULL;
	if (!norm.data)
		return tpf_kfail(c, TPF_ERR_NOMEM, "out of memory");
	j = norm_job(c, 1);
	j.residual = opt_in(c, 3);
	j.y = &norm;
	j.sum = opt_out(c, 1);
	if (norm_setup(c, &j, &na) || !gamma_fits(j.gamma, j.cols)) {
		st = tpf_kfail(c, TPF_ERR_INVALID, "axis or gamma does not fit x");
		goto out_free;
	}
	if ((st = rms_run(c, &j)))
		goto out_free;
	if (norm_out)
		memcpy(norm_out->data, norm.data, norm.nbytes);
	struct tpf_ktensor qin[2] = {norm, c->in[2]};
	struct tpf_ktensor qout[2] = {c->out[0], {0}};
	struct tpf_kernel_call sub = *c;
	sub.in = qin;
	sub.out = qout;
	if (na.quant == TPF_NORM_QUANT_NVFP4) {
		struct tpf_ktensor *ys = opt_out(c, 2);
		if (!ys) {
			st = tpf_kfail(c, TPF_ERR_INVALID, "nvfp4 needs the block scale output");
			goto out_free;
		}
		qout[1] = *ys;
		sub.n_in = 2;
		sub.n_out = 2;
		st = tpf_cpu_fp4_dynamic_quantize(&sub);
	} else if (na.quant == TPF_NORM_QUANT_FP8 || na.quant == TPF_NORM_QUANT_NVFP4_BLOCK) {
		sub.n_in = 2;
		sub.n_out = 1;
		st = tpf_cpu_quantize_linear(&sub);
	} else if (na.quant == TPF_NORM_QUANT_FP8_GROUP) {
		st = fp8_group_quantize(c, &norm, na.block_size);
	} else {
		st = tpf_kfail(c, TPF_ERR_UNSUPPORTED, "quant '%s' not supported", na.quant_name);
	}
out_free:
	tpf_free(norm.data);
	return st;
}

/* ShardedRMSNorm(x_0..x_n-1, gamma_0..gamma_n-1) -> y_0..y_n-1 (docs/ops.md):
 * each x_i is this rank's shard of a hidden dim of full_dims[i] (or
 * full_dim) elements.  The SUMSQ phase writes float32 [rows, n] partial sums
 * of squares; the NORMALIZE phase takes the same inputs plus the reduced
 * sums as the last operand and normalizes each shard over the full width
 * with its epsilons[i] (or epsilon).
 *
 * The part form (part_starts/part_ends, gamma_i the full weight): the sum
 * buffer has one more float, 1 on a rank whose parts are all its own
 * shards (so the reduced value is the count of such ranks).  Such a rank
 * normalizes its shard (NORMALIZE, with gamma_i from its start); a rank
 * whose part is another's gathers the inputs and computes the part from
 * them (MAIN).  NORMALIZE fails when not every rank took its own part: the
 * ranks' graphs disagree. */

TPF_CPU_KERNEL(tpf_cpu_sharded_sumsq)
{
	size_t n = c->n_in / 2;
	struct tpf_ktensor *s = &c->out[0];
	int parts = tpf_node_attr(c->node, "part_starts") != NULL;
	if (n == 0 || c->n_in % 2 || s->dtype != TPF_DTYPE_FLOAT)
		return tpf_kfail(c, TPF_ERR_INVALID, "expects n inputs, n gammas and a float32 sum buffer");
	int64_t rows = -1;
	for (size_t p = 0; p < n; p++) {
		const struct tpf_ktensor *x = &c->in[p];
		int64_t cols;
		enum tpf_status st = tpf_sharded_tokens(c, p, &rows, &cols);
		if (st)
			return st;
		if (s->numel != rows * (int64_t)n + parts)
			return tpf_kfail(c, TPF_ERR_INVALID, "sum buffer has the wrong size");
		for (int64_t i = 0; i < rows; i++) {
			float ss = 0;
			for (int64_t k = 0; k < cols; k++) {
				float v = (float)tpf_elem_load(x->dtype, x->data, i * cols + k);
				ss += v * v;
			}
			((float *)s->data)[i * (int64_t)n + (int64_t)p] = ss;
		}
	}
	if (parts)
		((float *)s->data)[s->numel - 1] = tpf_sharded_parts_own(c, n) ? 1.0f : 0.0f;
	return TPF_OK;
}

TPF_CPU_KERNEL(tpf_cpu_sharded_normalize)
{
	size_t n = (c->n_in - 1) / 2;
	const struct tpf_ktensor *s = &c->in[c->n_in - 1];
	int parts = tpf_node_attr(c->node, "part_starts") != NULL;
	if (n == 0 || c->n_in != 2 * n + 1 || c->n_out < n || s->dtype != TPF_DTYPE_FLOAT)
		return tpf_kfail(c, TPF_ERR_INVALID, "expects n inputs, n gammas and the reduced sums");
	if (parts) {
		int world = c->world > 0 ? c->world : 1;
		float own = s->numel ? ((const float *)s->data)[s->numel - 1] : 0;
		if (!tpf_sharded_parts_own(c, n))
			return tpf_kfail(c, TPF_ERR_INVALID, "rank %d's parts are not its own shards; the "
				         "part form's other path gathers them", c->rank);
		if (own != (float)world)
			return tpf_kfail(c, TPF_ERR_INVALID,
					 "the ranks disagree about the parts: %d of %d take their own "
					 "shard (each rank's graph must keep its own part, or every rank "
					 "another's)",
					 (int)own, world);
	}
	for (size_t p = 0; p < n; p++) {
		struct rms_job j = {0};
		int64_t start = 0, end = 0;
		j.x = &c->in[p];
		j.gamma = &c->in[n + p];
		j.y = &c->out[p];
		j.cols = j.x->rank ? j.x->dims[j.x->rank - 1] : 1;
		j.rows = j.cols ? j.x->numel / j.cols : 0;
		j.eps = tpf_sharded_epsilon(c, p);
		j.gamma_offset = tpf_node_attr_float(c->node, "weight_offset", 0.0f);
		j.ext_sumsq = s->data;
		j.ext_stride = (int64_t)n;
		j.ext_col = (int64_t)p;
		j.full_cols = tpf_sharded_full_dim(c, p, j.cols);
		if (parts && !tpf_sharded_part(c, p, &start, &end)) {
			j.gamma_start = start;
			if (j.gamma->numel != j.full_cols)
				return tpf_kfail(c, TPF_ERR_INVALID, "weight %zu has %lld elements; the part "
					         "form takes the full weight of %lld", n + p,
					         (long long)j.gamma->numel, (long long)j.full_cols);
		} else if (!gamma_fits(j.gamma, j.cols)) {
			return tpf_kfail(c, TPF_ERR_INVALID, "gamma does not fit input %zu", p);
		}
		if (s->numel != j.rows * (int64_t)n + parts)
			return tpf_kfail(c, TPF_ERR_INVALID, "the sums do not fit input %zu", p);
		enum tpf_status st = rms_run(c, &j);
		if (st)
			return st;
	}
	return TPF_OK;
}

/* The part form on a rank whose part is not its own shard: inputs are the
 * gathered x_i (float32 or the activation type, [W, rows, d_i] rank after
 * rank), the full gamma_i and the reduced sums; y_i[t, :] is the part
 * [start_i, end_i) of RMSNorm over the full width.  Called with the
 * reduced sums alone (before the gathers), it checks that no rank took
 * its own part: such a rank is not gathering. */
TPF_CPU_KERNEL(tpf_cpu_sharded_gathered)
{
	size_t n = (c->n_in - 1) / 2;
	const struct tpf_ktensor *s = &c->in[c->n_in - 1];
	int world = c->world > 0 ? c->world : 1;
	if (c->n_in == 1 && s->dtype == TPF_DTYPE_FLOAT) {
		float own = s->numel ? ((const float *)s->data)[s->numel - 1] : 0;
		if (own != 0)
			return tpf_kfail(c, TPF_ERR_INVALID,
					 "the ranks disagree about the parts: %d of %d take their own "
					 "shard (each rank's graph must keep its own part, or every rank "
					 "another's)",
					 (int)own, world);
		return TPF_OK;
	}
	if (n == 0 || c->n_in != 2 * n + 1 || c->n_out < n || s->dtype != TPF_DTYPE_FLOAT)
		return tpf_kfail(c, TPF_ERR_INVALID, "expects n gathered inputs, n gammas and the reduced sums");
	float offset = tpf_node_attr_float(c->node, "weight_offset", 0.0f);
	for (size_t p = 0; p < n; p++) {
		struct tpf_sharded_gathered gp; /* the part and its geometry */
		TPF_KTRY(tpf_sharded_gathered_part(c, p, world, &gp));
		const struct tpf_ktensor *g = &c->in[p], *gamma = &c->in[n + p];
		struct tpf_ktensor *y = &c->out[p];
		float eps = tpf_sharded_epsilon(c, p);
		if (gp.w <= 0 || gp.start < 0 || gp.end > gp.full ||
		    g->numel != (int64_t)world * gp.rows * gp.d || gamma->numel != gp.full ||
		    s->numel != gp.rows * (int64_t)n + 1)
			return tpf_kfail(c, TPF_ERR_INVALID,
					 "part [%lld, %lld) of tensor %zu does not fit its gathered input "
					 "(%lld elements), weight (%lld) or sums",
					 (long long)gp.start, (long long)gp.end, p, (long long)g->numel,
					 (long long)gamma->numel);
		if (tpf_sharded_full_dim(c, p, gp.d) != gp.full)
			return tpf_kfail(c, TPF_ERR_INVALID, "tensor %zu: the gathered width %lld is not the "
					 "full dim %lld", p, (long long)gp.full,
					 (long long)tpf_sharded_full_dim(c, p, gp.d));
		for (int64_t t = 0; t < gp.rows; t++) {
			float ss = ((const float *)s->data)[t * (int64_t)n + (int64_t)p];
			float inv = 1.0f / sqrtf(ss / (float)gp.full + eps);
			for (int64_t k = 0; k < gp.w; k++) {
				int64_t col = gp.start + k;
				int64_t src = (col / gp.d) * gp.rows * gp.d + t * gp.d + col % gp.d;
				float v = (float)tpf_elem_load(g->dtype, g->data, src);
				float gm = offset + (float)tpf_elem_load(gamma->dtype, gamma->data, col);
				tpf_elem_store(y->dtype, y->data, t * gp.w + k, v * inv * gm, 1);
			}
		}
	}
	return TPF_OK;
}
