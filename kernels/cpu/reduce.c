/* SPDX-License-Identifier: MIT */
/* Reductions (ReduceMean/Sum/Max), Softmax, TopK, ArgMax.  Float types
 * accumulate in float32 (DOUBLE in double), integers in int64. */
#include "cpu-kernels.h"
#include "op-geometry.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

TPF_CPU_KERNEL(tpf_cpu_reduce)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_ktensor *y = &c->out[0];
	enum tpf_op op = c->node->op;
	int red[TPF_KERNEL_MAX_RANK], noop;
	enum tpf_status st = TPF_OK;
	if (tpf_reduce_axes(c, x->rank, red, &noop) < 0)
		return tpf_kfail(c, TPF_ERR_INVALID, "bad axes");
	/* the accumulator as a same-rank view with reduced dims of size 1 */
	struct tpf_ktensor acc_view = {0};
	acc_view.rank = x->rank;
	int64_t n_acc = 1, count = 1;
	for (int d = 0; d < x->rank; d++) {
		acc_view.dims[d] = red[d] ? 1 : x->dims[d];
		n_acc *= acc_view.dims[d];
		if (red[d])
			count *= x->dims[d];
	}
	if (n_acc != y->numel)
		return tpf_kfail(c, TPF_ERR_INVALID, "output has %lld elements, expected %lld",
				 (long long)y->numel, (long long)n_acc);
	int integral = tpf_dtype_is_integral(x->dtype);
	int wide = x->dtype == TPF_DTYPE_DOUBLE;
	double *accd = tpf_calloc(n_acc ? (size_t)n_acc : 1, sizeof(double));
	float *accf = tpf_calloc(n_acc ? (size_t)n_acc : 1, sizeof(float));
	int64_t *acci = tpf_calloc(n_acc ? (size_t)n_acc : 1, sizeof(int64_t));
	if (!accd || !accf || !acci) {
		st = tpf_kfail(c, TPF_ERR_NOMEM, "out of memory");
		goto out_free;
	}
	for (int64_t i = 0; i < n_acc; i++) {
		accd[i] = op == TPF_OP_REDUCE_MAX ? -INFINITY : 0;
		accf[i] = (float)accd[i];
		acci[i] = op == TPF_OP_REDUCE_MAX && x->dtype != TPF_DTYPE_BOOL ? INT64_MIN : 0;
	}
	const struct tpf_ktensor *views[1] = {&acc_view};
	struct tpf_bcast it;
	if (tpf_bcast_init(&it, x, views, 1)) {
		st = tpf_kfail(c, TPF_ERR_INVALID, "internal: reduction view");
		goto out_free;
	}
	for (int64_t i = 0; i < x->numel; i++, tpf_bcast_next(&it)) {
		int64_t o = it.off[0];
		if (integral) {
			int64_t v = tpf_elem_load_int(x->dtype, x->data, i);
			if (op == TPF_OP_REDUCE_MAX)
				acci[o] = v > acci[o] ? v : acci[o];
			else
				acci[o] += v;
		} else if (wide) {
			double v = tpf_elem_load(x->dtype, x->data, i);
			if (op == TPF_OP_REDUCE_MAX)
				accd[o] = (v > accd[o] || isnan(v)) ? v : accd[o];
			else
				accd[o] += v;
		} else {
			float v = (float)tpf_elem_load(x->dtype, x->data, i);
			if (op == TPF_OP_REDUCE_MAX)
				accf[o] = (v > accf[o] || isnan(v)) ? v : accf[o];
			else
				accf[o] += v;
		}
	}
	for (int64_t o = 0; o < n_acc; o++) {
		if (integral) {
			int64_t v = acci[o];
			if (op == TPF_OP_REDUCE_MEAN)
				v = count ? v / count : 0;
			tpf_elem_store_int(y->dtype, y->data, o, v);
		} else {
			double v = wide ? accd[o] : (double)accf[o];
			if (op == TPF_OP_REDUCE_MEAN)
				v = wide ? v / (double)count : (double)((float)v / (float)count);
			tpf_elem_store(y->dtype, y->data, o, v, 1);
		}
	}
out_free:
	tpf_free(accd);
	tpf_free(accf);
	tpf_free(acci);
	return st;
}

TPF_CPU_KERNEL(tpf_cpu_softmax)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_ktensor *y = &c->out[0];
	int64_t outer, len, inner;
	if (tpf_softmax_view(c, x, &outer, &len, &inner))
		return tpf_kfail(c, TPF_ERR_INVALID, "axis out of range");
	int wide = x->dtype == TPF_DTYPE_DOUBLE;
	double *buf = tpf_calloc(len ? (size_t)len : 1, sizeof(double));
	if (!buf)
		return tpf_kfail(c, TPF_ERR_NOMEM, "out of memory");
	for (int64_t o = 0; o < outer; o++) {
		for (int64_t in = 0; in < inner; in++) {
			int64_t base = o * len * inner + in;
			double mx = -INFINITY;
			for (int64_t k = 0; k < len; k++) {
				buf[k] = tpf_elem_load(x->dtype, x->data, base + k * inner);
				if (buf[k] > mx)
					mx = buf[k];
			}
			if (wide) {
				double s = 0;
				for (int64_t k = 0; k < len; k++)
					s += (buf[k] = exp(buf[k] - mx));
				for (int64_t k = 0; k < len; k++)
					tpf_elem_store(y->dtype, y->data, base + k * inner, buf[k] / s, 1);
			} else {
				float s = 0;
				for (int64_t k = 0; k < len; k++) {
					buf[k] = expf((float)(buf[k] - mx));
					s += (float)buf[k];
				}
				for (int64_t k = 0; k < len; k++)
					tpf_elem_store(y->dtype, y->data, base + k * inner, (float)buf[k] / s, 1);
			}
		}
	}
	tpf_free(buf);
	return TPF_OK;
}

struct topk_item {
	double v;
	int64_t i;
};

static int topk_cmp_largest(const void *pa, const void *pb)
{
	const struct topk_item *a = pa, *b = pb;
	int an = isnan(a->v), bn = isnan(b->v);
	if (an != bn)
		return an ? -1 : 1;
	if (a->v > b->v)
		return -1;
	if (a->v < b->v)
		return 1;
	return a->i < b->i ? -1 : a->i > b->i;
}

static int topk_cmp_smallest(const void *pa, const void *pb)
{
	const struct topk_item *a = pa, *b = pb;
	int an = isnan(a->v), bn = isnan(b->v);
	if (an != bn)
		return an ? 1 : -1;
	if (a->v < b->v)
		return -1;
	if (a->v > b->v)
		return 1;
	return a->i < b->i ? -1 : a->i > b->i;
}

TPF_CPU_KERNEL(tpf_cpu_topk)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_topk_args t;
	TPF_KTRY(tpf_topk_args(c, &t));
	struct tpf_ktensor *vals = &c->out[0], *idx = &c->out[1];
	int64_t k = t.k, len = t.len, outer = t.outer, inner = t.inner;
	int largest = t.largest;
	struct topk_item *items = tpf_calloc(len ? (size_t)len : 1, sizeof(*items));
	if (!items)
		return tpf_kfail(c, TPF_ERR_NOMEM, "out of memory");
	for (int64_t o = 0; o < outer; o++) {
		for (int64_t in = 0; in < inner; in++) {
			for (int64_t j = 0; j < len; j++) {
				items[j].v = tpf_dtype_is_integral(x->dtype)
						     ? (double)tpf_elem_load_int(x->dtype, x->data, (o * len + j) * inner + in)
						     : tpf_elem_load(x->dtype, x->data, (o * len + j) * inner + in);
				items[j].i = j;
			}
			qsort(items, (size_t)len, sizeof(*items), largest ? topk_cmp_largest : topk_cmp_smallest);
			for (int64_t j = 0; j < k; j++) {
				int64_t oi = (o * k + j) * inner + in;
				size_t es = tpf_elem_size(x->dtype);
				memcpy((char *)vals->data + (size_t)oi * es,
				       (const char *)x->data + (size_t)((o * len + items[j].i) * inner + in) * es, es);
				((int64_t *)idx->data)[oi] = items[j].i;
			}
		}
	}
	tpf_free(items);
	return TPF_OK;
}

TPF_CPU_KERNEL(tpf_cpu_argmax)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_ktensor *y = &c->out[0];
	int ax = tpf_norm_axis(tpf_node_attr_int(c->node, "axis", 0), x->rank);
	if (ax < 0)
		return tpf_kfail(c, TPF_ERR_INVALID, "axis out of range");
	int last = (int)tpf_node_attr_int(c->node, "select_last_index", 0);
	int64_t len = x->dims[ax];
	int64_t outer = tpf_dims_prod(x->dims, 0, ax), inner = tpf_dims_prod(x->dims, ax + 1, x->rank);
	for (int64_t o = 0; o < outer; o++) {
		for (int64_t in = 0; in < inner; in++) {
			double best = -INFINITY;
			int64_t bi = 0;
			for (int64_t j = 0; j < len; j++) {
				double v = tpf_elem_load(x->dtype, x->data, (o * len + j) * inner + in);
				if (j == 0 || v > best || (last && v == best)) {
					best = v;
					bi = j;
				}
			}
			((int64_t *)y->data)[o * inner + in] = bi;
		}
	}
	return TPF_OK;
}
