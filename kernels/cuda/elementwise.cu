// SPDX-License-Identifier: MIT
// Elementwise CUDA kernels with numpy broadcasting: binary arithmetic, Mod,
// comparisons and logic, variadic Max/Min, unary math, IsNaN/IsInf, Clip,
// Where, Cast, SigmoidGateAdd.
// bf16/fp16/fp32/fp8 compute in float32 and round once; DOUBLE in double;
// integer types in int64 (as the CPU reference kernels do).
#include "cuda-common.cuh"
#include "elementwise-ops.h"
#include "tpf-cuda.h"

#include <string.h>

using namespace tpfc;

namespace {

constexpr int kThreads = 256;

enum Mode { kFloat = 0, kDouble = 1, kInt = 2, kPowInt = 3, kU64 = 4 };

// float32 in float: division rounded as IEEE divides, x^2 (the RMSNorm
// idiom) exactly; the rest (+ - *, comparisons, Max/Min) in double, which
// rounds to the same float.
__device__ __forceinline__ float binop_f(int op, float a, float b)
{
	if (op == TPF_OP_DIV)
		return __fdiv_rn(a, b);
	if (op == TPF_OP_POW)
		return b == 2.0f ? a * a : powf(a, b);
	return (float)tpf_binop_d(op, a, b, 0);
}

struct BinArgs {
	int op, mode, da, db, dy, fmod_c;
	const void *a, *b;
	void *y;
};

template <typename I> __global__ void binary_kernel(BinArgs p, I n, Strided s)
{
	for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
		I off[kMaxOps];
		offsets<I>(s, i, off);
		switch (p.mode) {
		case kFloat:
			st_f(p.dy, p.y, i, binop_f(p.op, ld_f(p.da, p.a, off[0]), ld_f(p.db, p.b, off[1])));
			break;
		case kDouble:
			st_d(p.dy, p.y, i,
			     tpf_binop_d(p.op, ld_d(p.da, p.a, off[0]), ld_d(p.db, p.b, off[1]), p.fmod_c));
			break;
		case kInt:
			st_i(p.dy, p.y, i,
			     tpf_binop_i(p.op, ld_i(p.da, p.a, off[0]), ld_i(p.db, p.b, off[1]), p.fmod_c));
			break;
		case kU64:
			st_i(p.dy, p.y, i,
			     (int64_t)tpf_binop_u(p.op, ((const uint64_t *)p.a)[off[0]],
						  ((const uint64_t *)p.b)[off[1]]));
			break;
		default:
			st_d(p.dy, p.y, i, rint(pow(ld_d(p.da, p.a, off[0]), ld_d(p.db, p.b, off[1]))));
			break;
		}
	}
}

// Same-shape or scalar-operand bf16/fp16/fp32 arithmetic: no index math.
template <typename T>
__global__ void binary_flat_kernel(int op, const T *a, int64_t sa, const T *b, int64_t sb, T *y, int64_t n)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
		y[i] = Cvt<T>::out(binop_f(op, Cvt<T>::in(a[i * sa]), Cvt<T>::in(b[i * sb])));
}

int operand_ok(enum tpf_dtype t)
{
	return tpfc_float_ok(t) || tpfc_int_ok(t);
}

enum tpf_status launch_binary(const struct tpf_kernel_call *c, int op, const struct tpf_ktensor *a,
			      const struct tpf_ktensor *b, struct tpf_ktensor *y, int fmod_c = 0)
{
	if (!operand_ok(a->dtype) || !operand_ok(b->dtype) || !operand_ok(y->dtype))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "dtype %s not supported on cuda", tpf_dtype_name(a->dtype));
	if (y->numel == 0)
		return TPF_OK;
	const struct tpf_ktensor *ins[2] = {a, b};
	Strided s;
	if (tpfc_strided_bcast(&s, y, ins, 2))
		return tpf_kfail(c, TPF_ERR_INVALID, "operands do not broadcast to the output shape");
	cudaStream_t st = tpfc_stream(c);
	bool arith = op == TPF_OP_ADD || op == TPF_OP_SUB || op == TPF_OP_MUL || op == TPF_OP_DIV;
	bool same = a->dtype == b->dtype && a->dtype == y->dtype;
	bool flat = s.rank <= 1 && (a->numel == y->numel || a->numel == 1) &&
		    (b->numel == y->numel || b->numel == 1);
	if (arith && same && flat) {
		int64_t sa = a->numel == 1 ? 0 : 1, sb = b->numel == 1 ? 0 : 1;
		unsigned g = tpfc_blocks(y->numel, kThreads);
		switch (y->dtype) {
		case TPF_DTYPE_FLOAT:
			binary_flat_kernel<float><<<g, kThreads, 0, st>>>(op, (const float *)a->data, sa,
									  (const float *)b->data, sb, (float *)y->data,
									  y->numel);
			return tpfc_launched(c, "binary");
		case TPF_DTYPE_FLOAT16:
			binary_flat_kernel<__half><<<g, kThreads, 0, st>>>(op, (const __half *)a->data, sa,
									   (const __half *)b->data, sb,
									   (__half *)y->data, y->numel);
			return tpfc_launched(c, "binary");
		case TPF_DTYPE_BFLOAT16:
			binary_flat_kernel<__nv_bfloat16><<<g, kThreads, 0, st>>>(
				op, (const __nv_bfloat16 *)a->data, sa, (const __nv_bfloat16 *)b->data, sb,
				(__nv_bfloat16 *)y->data, y->numel);
			return tpfc_launched(c, "binary");
		default:
			break;
		}
	}
	int mode = kFloat;
	if (op == TPF_OP_POW && tpf_dtype_is_integral(a->dtype))
		mode = kPowInt;
	else if (a->dtype == TPF_DTYPE_UINT64 && b->dtype == TPF_DTYPE_UINT64)
		mode = kU64;
	else if (tpf_dtype_is_integral(a->dtype))
		mode = kInt;
	else if (a->dtype == TPF_DTYPE_DOUBLE || b->dtype == TPF_DTYPE_DOUBLE || y->dtype == TPF_DTYPE_DOUBLE ||
		 op == TPF_OP_MOD)
		mode = kDouble;
	BinArgs p = {op, mode, a->dtype, b->dtype, y->dtype, fmod_c, a->data, b->data, y->data};
	unsigned g = tpfc_blocks(y->numel, kThreads);
	if (y->numel < INT32_MAX)
		binary_kernel<int32_t><<<g, kThreads, 0, st>>>(p, (int32_t)y->numel, s);
	else
		binary_kernel<int64_t><<<g, kThreads, 0, st>>>(p, y->numel, s);
	return tpfc_launched(c, "binary");
}

// ------------------------------------------------------------ unary

// The float forms of TPF_UNOPS (elementwise-ops.h); the ops the CPU
// reference computes in double go through double here too, for the same
// roundings.
__device__ __forceinline__ float unop_f(int op, float x)
{
#define TPF_UNOP_VIA_DOUBLE (float)tpf_unop_d(op, (double)x)
	switch (op) {
#define UNOP_CASE_F(OP, in_double, in_float)                                                       \
	case TPF_OP_##OP:                                                                          \
		return in_float;
	TPF_UNOPS(UNOP_CASE_F)
#undef UNOP_CASE_F
	default:
		return TPF_UNOP_VIA_DOUBLE;
	}
#undef TPF_UNOP_VIA_DOUBLE
}

__global__ void unary_kernel(int op, int mode, int dx, const void *x, int dy, void *y, int64_t n, int aux)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
		if (op == TPF_OP_IS_NAN || op == TPF_OP_IS_INF) {
			((uint8_t *)y)[i] = (uint8_t)tpf_float_class(op, ld_d(dx, x, i), aux & 1, (aux & 2) != 0);
		} else if (mode == kInt) {
			st_i(dy, y, i, tpf_unop_i(op, ld_i(dx, x, i)));
		} else if (mode == kDouble) {
			st_d(dy, y, i, tpf_unop_d(op, ld_d(dx, x, i)));
		} else {
			st_f(dy, y, i, unop_f(op, ld_f(dx, x, i)));
		}
	}
}

// ------------------------------------------------------------ where / cast / gate

template <typename I> __global__ void where_kernel(int dc, const void *cond, const void *a, const void *b, void *y,
						   int es, I n, Strided s)
{
	for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
		I off[kMaxOps];
		offsets<I>(s, i, off);
		bool pick = ld_i(dc, cond, off[0]) != 0;
		const char *src = pick ? (const char *)a : (const char *)b;
		tpf_copy_elem(y, i, src, pick ? off[1] : off[2], es);
	}
}

__global__ void cast_kernel(int dx, const void *x, int dy, void *y, int64_t n, int sat, int int_to_int)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
		if (int_to_int)
			st_i(dy, y, i, ld_i(dx, x, i));
		else if (dx == TPF_DTYPE_INT64 || dx == TPF_DTYPE_UINT64)
			st_d(dy, y, i, dx == TPF_DTYPE_INT64 ? (double)ld_i(dx, x, i) : (double)(uint64_t)ld_i(dx, x, i),
			     sat);
		else
			st_d(dy, y, i, ld_d(dx, x, i), sat);
	}
}

// 4 and 2 bit integer output: one thread per byte (8 / bits elements, the
// lowest bits first).  Integers wrap to the width; floats are truncated
// toward zero first (NaN gives 0), as the CPU reference does (docs/ops.md,
// "Cast").
__global__ void cast_to_subbyte_kernel(int dx, const void *x, int bits, uint8_t *y, int64_t n, int x_int)
{
	int per = 8 / bits;
	unsigned mask = (1u << bits) - 1;
	int64_t nb = (n + per - 1) / per;
	for (int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; b < nb; b += (int64_t)gridDim.x * blockDim.x) {
		unsigned byte = 0;
		for (int k = 0; k < per && b * per + k < n; k++) {
			int64_t i = b * per + k;
			int64_t v = x_int ? ld_i(dx, x, i) : clamp_i(ld_d(dx, x, i), -1e15, 1e15);
			byte |= ((unsigned)v & mask) << (k * bits);
		}
		y[b] = (uint8_t)byte;
	}
}

// FLOAT4E2M1 output: one thread per byte (two elements, low nibble first).
__global__ void cast_to_fp4_kernel(int dx, const void *x, uint8_t *y, int64_t n)
{
	int64_t nb = (n + 1) / 2;
	for (int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; b < nb; b += (int64_t)gridDim.x * blockDim.x) {
		unsigned lo = f_to_e2m1((float)ld_d(dx, x, 2 * b));
		unsigned hi = 2 * b + 1 < n ? f_to_e2m1((float)ld_d(dx, x, 2 * b + 1)) : 0;
		y[b] = (uint8_t)(lo | (hi << 4));
	}
}

template <typename I>
__global__ void gate_kernel(int df, const void *f, int dg, const void *g, int ds, const void *sh, int dy, void *y,
			    I n, Strided s)
{
	for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
		I off[kMaxOps];
		offsets<I>(s, i, off);
		float gv = ld_f(dg, g, off[1]);
		float sig = 1.0f / (1.0f + expf(-gv));
		st_f(dy, y, i, ld_f(df, f, off[0]) + sig * ld_f(ds, sh, off[2]));
	}
}

// Clip: bounds read from the device (scalars; NULL: no bound).  mode kInt,
// kU64 or float (through double: exact, the values are of the dtype).
__global__ void clip_kernel(int mode, int dt, const void *x, void *y, const void *lo, const void *hi, int64_t n)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
		if (mode == kU64) {
			uint64_t v = ((const uint64_t *)x)[i];
			TPF_CLAMP(v, lo, *(const uint64_t *)lo, hi, *(const uint64_t *)hi);
			((uint64_t *)y)[i] = v;
		} else if (mode == kInt) {
			int64_t v = ld_i(dt, x, i);
			TPF_CLAMP(v, lo, ld_i(dt, lo, 0), hi, ld_i(dt, hi, 0));
			st_i(dt, y, i, v);
		} else {
			double v = ld_d(dt, x, i);
			TPF_CLAMP(v, lo, ld_d(dt, lo, 0), hi, ld_d(dt, hi, 0));
			st_d(dt, y, i, v);
		}
	}
}

// Clip before opset 11: float bounds from attributes.
__global__ void clip_attr_kernel(int dt, const void *x, void *y, int has_lo, double lo, int has_hi, double hi,
				 int64_t n)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
		double v = ld_d(dt, x, i);
		TPF_CLAMP(v, has_lo, lo, has_hi, hi);
		st_d(dt, y, i, v);
	}
}

} // namespace

extern "C" TPF_CUDA_KERNEL(tpf_cu_clip)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_ktensor *y = &c->out[0];
	struct tpf_clip_bounds b;
	enum tpf_status st = tpf_clip_check(c, &b);
	if (st)
		return st;
	if (!operand_ok(x->dtype))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "dtype %s not supported on cuda", tpf_dtype_name(x->dtype));
	if (!x->numel)
		return TPF_OK;
	unsigned g = tpfc_blocks(x->numel, kThreads);
	if (c->n_in == 1) {
		clip_attr_kernel<<<g, kThreads, 0, tpfc_stream(c)>>>(x->dtype, x->data, y->data, b.has_lo, b.lo,
								     b.has_hi, b.hi, x->numel);
		return tpfc_launched(c, "clip");
	}
	int mode = x->dtype == TPF_DTYPE_UINT64 ? kU64 : tpf_dtype_is_integral(x->dtype) ? kInt : kDouble;
	clip_kernel<<<g, kThreads, 0, tpfc_stream(c)>>>(mode, x->dtype, x->data, y->data,
							b.bound[0] ? b.bound[0]->data : NULL,
							b.bound[1] ? b.bound[1]->data : NULL, x->numel);
	return tpfc_launched(c, "clip");
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_binary)
{
	int fmod_c = 0;
	enum tpf_status st = tpf_binary_check(c, &fmod_c);
	return st ? st : launch_binary(c, c->node->op, &c->in[0], &c->in[1], &c->out[0], fmod_c);
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_variadic)
{
	struct tpf_ktensor *y = &c->out[0];
	enum tpf_status st = tpf_variadic_check(c);
	if (st)
		return st;
	if (c->n_in == 1) {
		// y = broadcast(in[0]): max(x, x) is x, NaN included
		return launch_binary(c, c->node->op, &c->in[0], &c->in[0], y);
	}
	st = launch_binary(c, c->node->op, &c->in[0], &c->in[1], y);
	for (size_t k = 2; k < c->n_in && !st; k++)
		st = launch_binary(c, c->node->op, y, &c->in[k], y);
	return st;
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_unary)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_ktensor *y = &c->out[0];
	int op = c->node->op;
	enum tpf_status st = tpf_unary_check(c);
	if (st)
		return st;
	int integral = tpf_dtype_is_integral(x->dtype);
	bool classify = op == TPF_OP_IS_NAN || op == TPF_OP_IS_INF;
	if (classify && (integral || y->dtype != TPF_DTYPE_BOOL))
		return tpf_kfail(c, TPF_ERR_INVALID, "expects a float input and a bool output");
	if (!operand_ok(x->dtype) || !operand_ok(y->dtype))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "dtype %s not supported on cuda", tpf_dtype_name(x->dtype));
	if (!x->numel)
		return TPF_OK;
	int mode = integral ? kInt : x->dtype == TPF_DTYPE_DOUBLE ? kDouble : kFloat;
	int aux = 0;
	if (op == TPF_OP_IS_INF)
		aux = (tpf_node_attr_int(c->node, "detect_negative", 1) != 0) |
		      (tpf_node_attr_int(c->node, "detect_positive", 1) != 0) << 1;
	unary_kernel<<<tpfc_blocks(x->numel, kThreads), kThreads, 0, tpfc_stream(c)>>>(op, mode, x->dtype, x->data,
										     y->dtype, y->data, x->numel, aux);
	return tpfc_launched(c, "unary");
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_where)
{
	const struct tpf_ktensor *ins[3] = {&c->in[0], &c->in[1], &c->in[2]};
	struct tpf_ktensor *y = &c->out[0];
	if (c->in[1].dtype != y->dtype || c->in[2].dtype != y->dtype)
		return tpf_kfail(c, TPF_ERR_INVALID, "X and Y must have the output dtype");
	size_t es = tpf_elem_size(y->dtype);
	if (!es || es > 8 || !tpfc_int_ok(c->in[0].dtype))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "dtype %s not supported on cuda", tpf_dtype_name(y->dtype));
	Strided s;
	if (tpfc_strided_bcast(&s, y, ins, 3))
		return tpf_kfail(c, TPF_ERR_INVALID, "operands do not broadcast to the output shape");
	if (!y->numel)
		return TPF_OK;
	unsigned g = tpfc_blocks(y->numel, kThreads);
	if (y->numel < INT32_MAX)
		where_kernel<int32_t><<<g, kThreads, 0, tpfc_stream(c)>>>(c->in[0].dtype, c->in[0].data, c->in[1].data,
									  c->in[2].data, y->data, (int)es,
									  (int32_t)y->numel, s);
	else
		where_kernel<int64_t><<<g, kThreads, 0, tpfc_stream(c)>>>(c->in[0].dtype, c->in[0].data, c->in[1].data,
									  c->in[2].data, y->data, (int)es, y->numel, s);
	return tpfc_launched(c, "where");
}

// 4 or 2 for the sub-byte integer dtypes, else 0.
static int subbyte_int_bits(enum tpf_dtype t)
{
	return t == TPF_DTYPE_INT4 || t == TPF_DTYPE_UINT4 ? 4 : t == TPF_DTYPE_INT2 || t == TPF_DTYPE_UINT2 ? 2 : 0;
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_cast)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_ktensor *y = &c->out[0];
	if (x->numel != y->numel)
		return tpf_kfail(c, TPF_ERR_INVALID, "output size differs from the input's");
	bool out_fp4 = y->dtype == TPF_DTYPE_FLOAT4E2M1;
	int out_bits = subbyte_int_bits(y->dtype);
	bool in_ok = operand_ok(x->dtype) || x->dtype == TPF_DTYPE_FLOAT4E2M1 || subbyte_int_bits(x->dtype);
	if (!in_ok || (!operand_ok(y->dtype) && !out_fp4 && !out_bits))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "cast from %s to %s not supported on cuda",
				 tpf_dtype_name(x->dtype), tpf_dtype_name(y->dtype));
	if (!x->numel)
		return TPF_OK;
	cudaStream_t st = tpfc_stream(c);
	if (x->dtype == y->dtype) {
		cudaError_t e = cudaMemcpyAsync(y->data, x->data, y->nbytes, cudaMemcpyDeviceToDevice, st);
		return e == cudaSuccess ? TPF_OK : tpfc_cuda_fail(c, "cast copy", e);
	}
	if (out_fp4) {
		cast_to_fp4_kernel<<<tpfc_blocks((x->numel + 1) / 2, kThreads), kThreads, 0, st>>>(
			x->dtype, x->data, (uint8_t *)y->data, x->numel);
		return tpfc_launched(c, "cast");
	}
	int x_int = tpf_dtype_is_integral(x->dtype);
	if (out_bits) {
		int per = 8 / out_bits;
		cast_to_subbyte_kernel<<<tpfc_blocks((x->numel + per - 1) / per, kThreads), kThreads, 0, st>>>(
			x->dtype, x->data, out_bits, (uint8_t *)y->data, x->numel, x_int);
		return tpfc_launched(c, "cast");
	}
	int sat = (int)tpf_node_attr_int(c->node, "saturate", 1);
	int i2i = x_int && tpf_dtype_is_integral(y->dtype);
	cast_kernel<<<tpfc_blocks(x->numel, kThreads), kThreads, 0, st>>>(x->dtype, x->data, y->dtype, y->data,
									    x->numel, sat, i2i);
	return tpfc_launched(c, "cast");
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_sigmoid_gate_add)
{
	const struct tpf_ktensor *f = &c->in[0], *g = &c->in[1], *sh = &c->in[2];
	struct tpf_ktensor *y = &c->out[0];
	if (c->n_in != 3 || c->n_out != 1)
		return tpf_kfail(c, TPF_ERR_INVALID, "expects final, gate, shared");
	if (!y->numel)
		return TPF_OK;
	enum tpf_dtype dt = y->dtype;
	int64_t hidden = y->rank ? y->dims[y->rank - 1] : 1;
	int64_t rows = hidden ? y->numel / hidden : 0;
	int64_t gcols = g->rank ? g->dims[g->rank - 1] : 1;
	bool fused = (dt == TPF_DTYPE_FLOAT || dt == TPF_DTYPE_FLOAT16 || dt == TPF_DTYPE_BFLOAT16) &&
		     f->dtype == dt && g->dtype == dt && sh->dtype == dt && f->numel == y->numel &&
		     sh->numel == y->numel && f->rank == y->rank && sh->rank == y->rank &&
		     (gcols == 1 || gcols == hidden) && g->numel == rows * gcols;
	if (fused)
		for (int d = 0; d < y->rank; d++)
			if (f->dims[d] != y->dims[d] || sh->dims[d] != y->dims[d] ||
			    (d < y->rank - 1 && g->rank == y->rank && g->dims[d] != y->dims[d]))
				fused = false;
	if (fused && g->rank == y->rank)
		return tpf_cuda_sigmoid_gate_add(dt, f->data, g->data, sh->data, y->data, rows, hidden, gcols, c->stream,
						 c->diag);
	const struct tpf_ktensor *ins[3] = {f, g, sh};
	if (!tpfc_float_ok(f->dtype) || !tpfc_float_ok(g->dtype) || !tpfc_float_ok(sh->dtype) || !tpfc_float_ok(dt))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "dtype %s not supported on cuda", tpf_dtype_name(dt));
	Strided s;
	if (tpfc_strided_bcast(&s, y, ins, 3))
		return tpf_kfail(c, TPF_ERR_INVALID, "operands do not broadcast to the output shape");
	unsigned gr = tpfc_blocks(y->numel, kThreads);
	if (y->numel < INT32_MAX)
		gate_kernel<int32_t><<<gr, kThreads, 0, tpfc_stream(c)>>>(f->dtype, f->data, g->dtype, g->data, sh->dtype,
									  sh->data, dt, y->data, (int32_t)y->numel, s);
	else
		gate_kernel<int64_t><<<gr, kThreads, 0, tpfc_stream(c)>>>(f->dtype, f->data, g->dtype, g->data, sh->dtype,
									  sh->data, dt, y->data, y->numel, s);
	return tpfc_launched(c, "sigmoid gate");
}
