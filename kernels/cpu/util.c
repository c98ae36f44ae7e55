/* SPDX-License-Identifier: MIT */
/* Helpers shared by the CPU kernels: messages, broadcasting, axes. */
#include "cpu-kernels.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

enum tpf_status tpf_kfail(const struct tpf_kernel_call *c, enum tpf_status st, const char *fmt, ...)
{
	char msg[512];
	char who[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (c->node)
		tpf_node_describe(c->node, who, sizeof(who));
	else
		snprintf(who, sizeof(who), "kernel");
	tpf_diag_add(c->diag, TPF_SEV_ERROR, "%s: %s", who, msg);
	return st;
}

int tpf_bcast_init(struct tpf_bcast *b, const struct tpf_ktensor *out,
		   const struct tpf_ktensor *const *ins, int n)
{
	if (n > TPF_BCAST_MAX || out->rank > TPF_KERNEL_MAX_RANK)
		return -1;
	b->rank = out->rank;
	b->n = n;
	for (int d = 0; d < out->rank; d++) {
		b->dims[d] = out->dims[d];
		b->idx[d] = 0;
	}
	for (int k = 0; k < n; k++) {
		const struct tpf_ktensor *t = ins[k];
		int64_t stride = 1;
		b->off[k] = 0;
		if (t->rank > out->rank)
			return -1;
		for (int d = out->rank - 1; d >= 0; d--) {
			int td = d - (out->rank - t->rank);
			if (td < 0) {
				b->strides[k][d] = 0;
				continue;
			}
			int64_t dim = t->dims[td];
			if (dim == out->dims[d]) {
				b->strides[k][d] = dim == 1 ? 0 : stride;
			} else if (dim == 1) {
				b->strides[k][d] = 0;
			} else {
				return -1;
			}
			stride *= dim;
		}
	}
	return 0;
}

void tpf_bcast_next(struct tpf_bcast *b)
{
	for (int d = b->rank - 1; d >= 0; d--) {
		b->idx[d]++;
		for (int k = 0; k < b->n; k++)
			b->off[k] += b->strides[k][d];
		if (b->idx[d] < b->dims[d])
			return;
		for (int k = 0; k < b->n; k++)
			b->off[k] -= b->strides[k][d] * b->dims[d];
		b->idx[d] = 0;
	}
}

int tpf_norm_axis(int64_t axis, int rank)
{
	if (axis < 0)
		axis += rank;
	if (axis < 0 || axis >= rank)
		return -1;
	return (int)axis;
}

int64_t tpf_dims_prod(const int64_t *dims, int from, int to)
{
	int64_t p = 1;
	for (int i = from; i < to; i++)
		p *= dims[i];
	return p;
}

int tpf_kread_ints(const struct tpf_ktensor *t, int64_t *vals, int max)
{
	if (!t || !t->host || !tpf_dtype_is_integral(t->dtype) || t->numel > max)
		return -1;
	for (int64_t i = 0; i < t->numel; i++)
		vals[i] = tpf_elem_load_int(t->dtype, t->host, i);
	return (int)t->numel;
}

size_t tpf_elem_size(enum tpf_dtype t)
{
	unsigned bits = tpf_dtype_bits(t);
	return bits >= 8 ? bits / 8 : 0;
}

int tpf_ktensor_finish(struct tpf_ktensor *t)
{
	int64_t n = 1;
	if (t->rank < 0 || t->rank > TPF_KERNEL_MAX_RANK)
		return -1;
	for (int i = 0; i < t->rank; i++) {
		if (t->dims[i] < 0)
			return -1;
		if (t->dims[i] != 0 && n > INT64_MAX / t->dims[i])
			return -1;
		n *= t->dims[i];
	}
	t->numel = n;
	if (t->dtype == TPF_DTYPE_STRING || tpf_dtype_storage_bytes(t->dtype, (uint64_t)n, &t->nbytes))
		return -1;
	return 0;
}

const char *tpf_backend_name(enum tpf_backend b)
{
	switch (b) {
	case TPF_BACKEND_CPU:
		return "cpu";
	case TPF_BACKEND_CUDA:
		return "cuda";
	default:
		return "?";
	}
}

int tpf_backend_from_name(const char *name, enum tpf_backend *out)
{
	for (int b = 0; b < TPF_BACKEND_COUNT; b++) {
		if (strcmp(name, tpf_backend_name((enum tpf_backend)b)) == 0) {
			*out = (enum tpf_backend)b;
			return 0;
		}
	}
	return -1;
}

const char *tpf_kernel_phase_name(enum tpf_kernel_phase p)
{
	static const char *const names[TPF_PHASE_COUNT] = {
		[TPF_PHASE_MAIN] = "main",
		[TPF_PHASE_POST_REDUCE] = "post-reduce",
		[TPF_PHASE_SUMSQ] = "sumsq",
		[TPF_PHASE_NORMALIZE] = "normalize",
		[TPF_PHASE_GATHER_REORDER] = "gather-reorder",
		[TPF_PHASE_FP8_GEMM] = "fp8-gemm",
		[TPF_PHASE_MATMUL_BT] = "matmul-bt",
	};
	return (unsigned)p < TPF_PHASE_COUNT ? names[p] : "?";
}
