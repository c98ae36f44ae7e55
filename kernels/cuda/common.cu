// SPDX-License-Identifier: MIT
// Host helpers shared by the CUDA kernels: broadcast views, launch checks.
#include "cuda-common.cuh"

#include <stdlib.h>
#include <string.h>

using tpfc::Strided;

void tpfc_strided_collapse(Strided *s)
{
	Strided t;
	memset(&t, 0, sizeof(t));
	t.n = s->n;
	int r = 0;
	for (int d = 0; d < s->rank; d++) {
		if (s->dims[d] == 1)
			continue;
		if (r > 0) {
			bool merge = true;
			for (int k = 0; k < s->n; k++)
				if (t.strides[k][r - 1] != s->strides[k][d] * s->dims[d])
					merge = false;
			if (merge) {
				t.dims[r - 1] *= s->dims[d];
				for (int k = 0; k < s->n; k++)
					t.strides[k][r - 1] = s->strides[k][d];
				continue;
			}
		}
		t.dims[r] = s->dims[d];
		for (int k = 0; k < s->n; k++)
			t.strides[k][r] = s->strides[k][d];
		r++;
	}
	t.rank = r;
	*s = t;
}

int tpfc_strided_bcast(Strided *s, const struct tpf_ktensor *out, const struct tpf_ktensor *const *ins,
		       int n)
{
	if (n > tpfc::kMaxOps || out->rank > tpfc::kMaxRank || out->rank < 0)
		return -1;
	memset(s, 0, sizeof(*s));
	s->rank = out->rank;
	s->n = n;
	for (int d = 0; d < out->rank; d++)
		s->dims[d] = out->dims[d];
	for (int k = 0; k < n; k++) {
		const struct tpf_ktensor *t = ins[k];
		int64_t stride = 1;
		if (t->rank > out->rank)
			return -1;
		for (int d = out->rank - 1; d >= 0; d--) {
			int td = d - (out->rank - t->rank);
			if (td < 0) {
				s->strides[k][d] = 0;
				continue;
			}
			int64_t dim = t->dims[td];
			if (dim == out->dims[d])
				s->strides[k][d] = dim == 1 ? 0 : stride;
			else if (dim == 1)
				s->strides[k][d] = 0;
			else
				return -1;
			stride *= dim;
		}
	}
	tpfc_strided_collapse(s);
	return 0;
}

unsigned tpfc_blocks(int64_t n, int threads)
{
	int64_t b = (n + threads - 1) / threads;
	if (b < 1)
		b = 1;
	if (b > 132 * 64)
		b = 132 * 64; // grid-stride loops cover the rest
	return (unsigned)b;
}

enum tpf_status tpfc_cuda_fail(const struct tpf_kernel_call *c, const char *what, cudaError_t e)
{
	return tpf_kfail(c, TPF_ERR_RUNTIME, "cuda %s: %s", what, cudaGetErrorString(e));
}

int tpfc_sm_count(void)
{
	constexpr int kDev = 64;
	static int cache[kDev];
	int dev = 0;
	if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kDev)
		return 132;
	if (cache[dev] <= 0) {
		int n = 0;
		if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0)
			n = 132;
		cache[dev] = n;
	}
	return cache[dev];
}

bool tpfc_pdl(enum tpf_pdl_kind k)
{
	static const unsigned mask = tpf_pdl_kinds_parse(tpf_env_text("TPF_PDL"));
	return (mask >> k) & 1u;
}

enum tpf_status tpfc_launched_ex(const struct tpf_kernel_call *c, cudaError_t e, const char *what)
{
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		return tpfc_cuda_fail(c, what, e);
	}
	return tpfc_launched(c, what);
}

enum tpf_status tpfc_launched(const struct tpf_kernel_call *c, const char *what)
{
	cudaError_t e = cudaGetLastError();
	if (e == cudaSuccess)
		return TPF_OK;
	return tpfc_cuda_fail(c, what, e);
}

int tpfc_float_ok(enum tpf_dtype t)
{
	switch (t) {
	case TPF_DTYPE_FLOAT:
	case TPF_DTYPE_FLOAT16:
	case TPF_DTYPE_BFLOAT16:
	case TPF_DTYPE_DOUBLE:
	case TPF_DTYPE_FLOAT8E4M3FN:
	case TPF_DTYPE_FLOAT8E5M2:
		return 1;
	default:
		return 0;
	}
}

int tpfc_int_ok(enum tpf_dtype t)
{
	switch (t) {
	case TPF_DTYPE_BOOL:
	case TPF_DTYPE_UINT8:
	case TPF_DTYPE_INT8:
	case TPF_DTYPE_UINT16:
	case TPF_DTYPE_INT16:
	case TPF_DTYPE_INT32:
	case TPF_DTYPE_UINT32:
	case TPF_DTYPE_INT64:
	case TPF_DTYPE_UINT64:
		return 1;
	default:
		return 0;
	}
}

extern "C" int tpf_cuda_mem_info(size_t *free_bytes, size_t *total_bytes)
{
	size_t f = 0, t = 0;
	if (cudaMemGetInfo(&f, &t) != cudaSuccess) {
		cudaGetLastError();
		return -1;
	}
	*free_bytes = f;
	*total_bytes = t;
	return 0;
}
