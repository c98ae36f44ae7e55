// SPDX-License-Identifier: MIT
// Private to kernels/cuda: element access for every dtype the CUDA kernels
// handle, index helpers, launch helpers and the kernel entry points.
#ifndef TPF_CUDA_COMMON_CUH
#define TPF_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>

#include "dtype-ops.h"
#include "kernel-host.h"
#include "quant-ops.h"

#include "cuda-kernels.h"

namespace tpfc {

// ------------------------------------------------------------ element access
// Dtypes are passed to kernels as ints (enum tpf_dtype values); switches on
// them are uniform across a launch.

__device__ __forceinline__ float e2m1_to_f(unsigned code)
{
	const float mag[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
	float v = mag[code & 7];
	return (code & 8) ? -v : v;
}

// Round to nearest even e2m1 code, saturating at 6; NaN gives -0 (code 8).
// Integer steps on the float's bits, no branches: from 1 up the code is the
// float rounded to one mantissa bit (the 22 bits below it rounded to
// nearest even into the exponent and that bit, less the bits of 1.0 plus
// 2); below 1 it is rint(2|v|), which adding 2^23 rounds.  Equal to
// counting the rounding boundaries (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5;
// ties to the even code) for every one of the 2^32 floats, in half the
// instructions.
__device__ __forceinline__ unsigned f_to_e2m1(float v)
{
	const unsigned b = __float_as_uint(v), ab = b & 0x7fffffffu;
	const unsigned lo = __float_as_uint(fmaf(__uint_as_float(ab), 2.f, 8388608.f)) - 0x4B000000u;
	const unsigned hi = min(((ab + 0x1FFFFFu + ((ab >> 22) & 1u)) >> 22) - 252u, 7u);
	const unsigned c = ab < 0x3f800000u ? lo : hi;
	return ab > 0x7f800000u ? 8u : (((b >> 28) & 8u) | c);
}

// v / d rounded to float, given rd = 1 / (double)d.  Where the quotient is
// a normal float this is the float division's value: the exact quotient of
// two floats lies at least about 2^-49 (relative) from any point where
// float rounding changes, and the double product is within about 2^-52 of
// it.  Subnormal quotients may differ by one unit at ties (the callers
// convert to FP8 / e2m1, where every subnormal float codes as zero);
// zeros, infinities and NaNs come out as from the division.  No division
// and its slow-path branch per value.
__device__ __forceinline__ float div_by(float v, double rd)
{
	return __double2float_rn((double)v * rd);
}

// 1 / (double)d for a positive normal float d, within about an ulp of
// double (what div_by needs: far inside the 2^-49 margin it relies on):
// the hardware's approximate reciprocal refined by three Newton steps,
// without the division's range checks and slow path; zero, subnormal,
// infinite or NaN d take the division.  The PTX ISA gives no error bound
// for rcp.approx.ftz.f64 (it works from the top 32 bits: about 2^-20);
// each step squares the relative error, so any start better than 2^-7
// ends at the double rounding.  bench-arnorm checks every NVFP4 and FP8
// group code against the host's division.
__device__ __forceinline__ double rcp_double(float d)
{
	if (!(d >= 1.17549435e-38f && d <= 3.40282347e38f))
		return 1.0 / (double)d;
	const double x = (double)d;
	double r;
	asm("rcp.approx.ftz.f64 %0, %1;" : "=d"(r) : "d"(x));
	r = fma(r, fma(-x, r, 1.0), r);
	r = fma(r, fma(-x, r, 1.0), r);
	return fma(r, fma(-x, r, 1.0), r);
}

// Element i of a bool or an 8 to 64 bit signed, or 8 to 32 bit unsigned,
// integer array in *v; false (and *v untouched) for any other dtype.
__device__ __forceinline__ bool ld_int(int dt, const void *p, int64_t i, int64_t *v)
{
	return tpf_load_int_elem(dt, p, i, v);
}

// Element i of a float32, float16 or bfloat16 array in *v; false (and *v
// untouched) for any other dtype.
__device__ __forceinline__ bool ld_f16_32(int dt, const void *p, int64_t i, float *v)
{
	switch (dt) {
	case TPF_DTYPE_FLOAT:
		*v = ((const float *)p)[i];
		return true;
	case TPF_DTYPE_FLOAT16:
		*v = __half2float(((const __half *)p)[i]);
		return true;
	case TPF_DTYPE_BFLOAT16:
		*v = __bfloat162float(((const __nv_bfloat16 *)p)[i]);
		return true;
	default:
		return false;
	}
}

__device__ __forceinline__ double ld_d(int dt, const void *p, int64_t i)
{
	int64_t iv;
	if (ld_int(dt, p, i, &iv))
		return (double)iv;
	float fv;
	if (ld_f16_32(dt, p, i, &fv))
		return fv;
	switch (dt) {
	case TPF_DTYPE_DOUBLE:
		return ((const double *)p)[i];
	case TPF_DTYPE_FLOAT8E4M3FN: {
		__nv_fp8_e4m3 v;
		v.__x = ((const uint8_t *)p)[i];
		return (float)v;
	}
	case TPF_DTYPE_FLOAT8E5M2: {
		__nv_fp8_e5m2 v;
		v.__x = ((const uint8_t *)p)[i];
		return (float)v;
	}
	case TPF_DTYPE_FLOAT4E2M1:
		return e2m1_to_f((((const uint8_t *)p)[i >> 1] >> ((i & 1) * 4)) & 0xf);
	case TPF_DTYPE_UINT4:
		return (((const uint8_t *)p)[i >> 1] >> ((i & 1) * 4)) & 0xf;
	case TPF_DTYPE_INT4: {
		int v = (((const uint8_t *)p)[i >> 1] >> ((i & 1) * 4)) & 0xf;
		return v >= 8 ? v - 16 : v;
	}
	case TPF_DTYPE_UINT2:
		return (((const uint8_t *)p)[i >> 2] >> ((i & 3) * 2)) & 0x3;
	case TPF_DTYPE_INT2: {
		int v = (((const uint8_t *)p)[i >> 2] >> ((i & 3) * 2)) & 0x3;
		return v >= 2 ? v - 4 : v;
	}
	case TPF_DTYPE_UINT64:
		return (double)((const uint64_t *)p)[i];
	default:
		return 0;
	}
}

__device__ __forceinline__ float ld_f(int dt, const void *p, int64_t i)
{
	float fv;
	return ld_f16_32(dt, p, i, &fv) ? fv : (float)ld_d(dt, p, i);
}

__device__ __forceinline__ int64_t ld_i(int dt, const void *p, int64_t i)
{
	int64_t iv;
	if (tpf_load_wrapped_int_elem(dt, p, i, &iv))
		return iv;
	switch (dt) {
	case TPF_DTYPE_UINT4:
	case TPF_DTYPE_INT4:
	case TPF_DTYPE_UINT2:
	case TPF_DTYPE_INT2:
		return (int64_t)ld_d(dt, p, i);
	default: {
		double v = ld_d(dt, p, i);
		return isnan(v) ? 0 : (int64_t)v;
	}
	}
}

__device__ __forceinline__ int64_t clamp_i(double v, double lo, double hi)
{
	if (isnan(v))
		return 0;
	v = trunc(v);
	v = v < lo ? lo : v > hi ? hi : v;
	return (int64_t)v;
}

// Stores v (an integer, double or float) converted to float32, float64,
// float16 or bfloat16 (round to nearest even) when dt is one of these;
// false, storing nothing, for any other dtype.
template <typename V> __device__ __forceinline__ bool st_float(int dt, void *p, int64_t i, V v)
{
	switch (dt) {
	case TPF_DTYPE_FLOAT:
		((float *)p)[i] = (float)v;
		return true;
	case TPF_DTYPE_DOUBLE:
		((double *)p)[i] = (double)v;
		return true;
	case TPF_DTYPE_FLOAT16:
		((__half *)p)[i] = __float2half_rn((float)v);
		return true;
	case TPF_DTYPE_BFLOAT16:
		((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn((float)v);
		return true;
	default:
		return false;
	}
}

// Integer store with C-cast wrapping (sub-byte types are not stored here).
__device__ __forceinline__ void st_i(int dt, void *p, int64_t i, int64_t v)
{
	if (!st_float(dt, p, i, v))
		tpf_store_int_elem(dt, p, i, v);
}

// Float store: round to nearest even; fp8 saturates when `sat`; integers
// truncate toward zero and clamp (NaN gives 0), as Cast does.
__device__ __forceinline__ void st_d(int dt, void *p, int64_t i, double v, int sat = 1)
{
	if (st_float(dt, p, i, v))
		return;
	switch (dt) {
	case TPF_DTYPE_FLOAT8E4M3FN:
		((uint8_t *)p)[i] = (uint8_t)__nv_cvt_float_to_fp8((float)v, sat ? __NV_SATFINITE : __NV_NOSAT,
								    __NV_E4M3);
		return;
	case TPF_DTYPE_FLOAT8E5M2:
		((uint8_t *)p)[i] = (uint8_t)__nv_cvt_float_to_fp8((float)v, sat ? __NV_SATFINITE : __NV_NOSAT,
								    __NV_E5M2);
		return;
	case TPF_DTYPE_BOOL:
		((uint8_t *)p)[i] = v != 0;
		return;
	case TPF_DTYPE_INT64:
		((int64_t *)p)[i] = clamp_i(v, -9.2233720368547758e18, 9.2233720368547748e18);
		return;
	case TPF_DTYPE_UINT64:
		((uint64_t *)p)[i] = isnan(v) || v <= 0 ? 0
				     : v >= 1.8446744073709552e19 ? UINT64_MAX
								  : (uint64_t)v;
		return;
	default: {
		// 8 to 32 bit integers (st_i stores no 4 or 2 bit ones)
		double lo, hi;
		if (tpf_quant_int_range((enum tpf_dtype)dt, &lo, &hi) == 0)
			st_i(dt, p, i, clamp_i(v, lo, hi));
		return;
	}
	}
}

__device__ __forceinline__ void st_f(int dt, void *p, int64_t i, float v, int sat = 1)
{
	if (!st_float(dt, p, i, v))
		st_d(dt, p, i, (double)v, sat);
}

// Rounds v through dtype dt, as storing and reloading would.
__device__ __forceinline__ float round_through(int dt, float v)
{
	switch (dt) {
	case TPF_DTYPE_FLOAT16:
		return __half2float(__float2half_rn(v));
	case TPF_DTYPE_BFLOAT16:
		return __bfloat162float(__float2bfloat16_rn(v));
	case TPF_DTYPE_FLOAT8E4M3FN: {
		__nv_fp8_e4m3 q;
		q.__x = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
		return (float)q;
	}
	default:
		return v;
	}
}

// A float16/bfloat16/float32 element of type T as float (in) and a float
// rounded to nearest even to T (out), for kernels templated on the type.
template <typename T> struct Cvt;
template <> struct Cvt<float> {
	__device__ static float in(float v) { return v; }
	__device__ static float out(float v) { return v; }
};
template <> struct Cvt<__half> {
	__device__ static float in(__half v) { return __half2float(v); }
	__device__ static __half out(float v) { return __float2half_rn(v); }
};
template <> struct Cvt<__nv_bfloat16> {
	__device__ static float in(__nv_bfloat16 v) { return __bfloat162float(v); }
	__device__ static __nv_bfloat16 out(float v) { return __float2bfloat16_rn(v); }
};

// The same for kernels vectorized over 16-byte chunks (uint4) of T:
// kPerChunk elements a chunk, load a T as float, store a float as T.
template <typename T> struct Elem {
	static constexpr int kPerChunk = 16 / (int)sizeof(T);
	__device__ static float load(T v) { return Cvt<T>::in(v); }
	__device__ static T store(float v) { return Cvt<T>::out(v); }
};

// ------------------------------------------------------------ indexing
// A strided view of up to kMaxOps operands over an output of `rank` dims
// (dims collapsed on the host where possible).

constexpr int kMaxRank = TPF_KERNEL_MAX_RANK;
constexpr int kMaxOps = 4;

struct Strided {
	int rank, n;
	int64_t dims[kMaxRank];
	int64_t strides[kMaxOps][kMaxRank];
};

// Offsets of output element i in each operand.
template <typename I>
__device__ __forceinline__ void offsets(const Strided &s, I i, I *off)
{
#pragma unroll
	for (int k = 0; k < kMaxOps; k++)
		off[k] = 0;
	for (int d = s.rank - 1; d >= 0; d--) {
		I dim = (I)s.dims[d];
		I idx = i % dim;
		i /= dim;
#pragma unroll
		for (int k = 0; k < kMaxOps; k++)
			if (k < s.n)
				off[k] += idx * (I)s.strides[k][d];
	}
}

// ------------------------------------------------------------ elements by size
// Kernels that move elements without reading them see only their size in
// bytes: 1, 2, 4 or (any other value) 8.

// Element i of p, es bytes wide, set to the low es bytes of bits.
__device__ __forceinline__ void store_bits(void *p, int64_t i, int es, uint64_t bits)
{
	switch (es) {
	case 1:
		((uint8_t *)p)[i] = (uint8_t)bits;
		break;
	case 2:
		((uint16_t *)p)[i] = (uint16_t)bits;
		break;
	case 4:
		((uint32_t *)p)[i] = (uint32_t)bits;
		break;
	default:
		((uint64_t *)p)[i] = bits;
		break;
	}
}

// f(E()) with E the unsigned integer type of es bytes (1, 2, 4, else 8),
// so that a host function launches the kernel instantiated for that width.
template <typename F> void by_elem_size(size_t es, F &&f)
{
	switch (es) {
	case 1:
		f(uint8_t());
		break;
	case 2:
		f(uint16_t());
		break;
	case 4:
		f(uint32_t());
		break;
	default:
		f(uint64_t());
		break;
	}
}

// ------------------------------------------------------------ packed 16-bit pairs
// The two elements of a 32-bit word holding two bf16 or fp16 values (the
// lower index in the low half), and the mma operand type name.

template <typename T> struct Bits;

template <> struct Bits<__nv_bfloat16> {
	static constexpr bool is_bf16 = true;
	// low / high element of a packed pair as float
	static __device__ __forceinline__ float lo(uint32_t v)
	{
		return __uint_as_float(v << 16);
	}
	static __device__ __forceinline__ float hi(uint32_t v)
	{
		return __uint_as_float(v & 0xffff0000u);
	}
	static __device__ __forceinline__ unsigned short from_float(float v)
	{
		return __bfloat16_as_ushort(__float2bfloat16_rn(v));
	}
	// lo and hi rounded to a packed pair
	static __device__ __forceinline__ uint32_t pack(float lo, float hi)
	{
		__nv_bfloat162 p = __floats2bfloat162_rn(lo, hi);
		return *(uint32_t *)&p;
	}
};

template <> struct Bits<__half> {
	static constexpr bool is_bf16 = false;
	static __device__ __forceinline__ float lo(uint32_t v)
	{
		return __half2float(__ushort_as_half((unsigned short)(v & 0xffffu)));
	}
	static __device__ __forceinline__ float hi(uint32_t v)
	{
		return __half2float(__ushort_as_half((unsigned short)(v >> 16)));
	}
	static __device__ __forceinline__ unsigned short from_float(float v)
	{
		return __half_as_ushort(__float2half_rn(v));
	}
	static __device__ __forceinline__ uint32_t pack(float lo, float hi)
	{
		__half2 p = __floats2half2_rn(lo, hi);
		return *(uint32_t *)&p;
	}
};

// d += a x b, mma.sync m16n8k16 (row-major A, column-major B), operands of
// type T (bf16 or fp16) packed two a word, float32 accumulators.
template <typename T>
__device__ __forceinline__ void mma16816(float &d0, float &d1, float &d2, float &d3, uint32_t a0, uint32_t a1,
					 uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1)
{
#define TPF_MMA_16816(TY)                                                                          \
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TY "." TY ".f32 {%0, %1, %2, %3}, " \
		     "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"                              \
		     : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)                                      \
		     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1))
	if constexpr (Bits<T>::is_bf16)
		TPF_MMA_16816("bf16");
	else
		TPF_MMA_16816("f16");
#undef TPF_MMA_16816
}

template <typename T>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
	mma16816<T>(d[0], d[1], d[2], d[3], a[0], a[1], a[2], a[3], b0, b1);
}

// ------------------------------------------------------------ dependent launch
// Programmatic dependent launch (sm_90): a kernel launched with
// tpfc_launch_pdl may start before the stream's previous kernel has
// finished, once every block of that kernel has called pdl_trigger (or
// ended).  Before pdl_wait it may only read what no kernel of the step
// writes (tpf_ktensor.invariant: weights, graph inputs); pdl_wait returns
// when the previous kernel has finished and its writes are visible.  On a
// kernel launched the ordinary way both are no-ops.

__device__ __forceinline__ void pdl_wait()
{
	asm volatile("griddepcontrol.wait;" ::: "memory");
}

// Lets the stream's next kernel, if launched with tpfc_launch_pdl, start
// (its blocks then take whatever the SMs have free and run up to their
// pdl_wait).
__device__ __forceinline__ void pdl_trigger()
{
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

} // namespace tpfc

// ------------------------------------------------------------ host helpers

// Whether kernels of kind k (kernel-host.h: tpf_pdl_kind) are launched as
// programmatic dependents of the stream's previous kernel, each waiting
// before its first access to what that kernel may write: TPF_PDL, read
// once (tpf_pdl_kinds_parse; docs/gpu.md has the measurements behind the
// default).  The peer-memory kernels follow TPF_PDL=0 alone (peer.cuh:
// tpfc::peer_pdl).
bool tpfc_pdl(enum tpf_pdl_kind k);

// kernel<<<grid, block, smem, stream>>>(args...), as a programmatic
// dependent of the stream's previous kernel when pdl.
template <typename... KA, typename... A>
cudaError_t tpfc_launch_pdl(bool pdl, void (*kernel)(KA...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
			    A... args)
{
	cudaLaunchConfig_t cfg = {};
	cfg.gridDim = grid;
	cfg.blockDim = block;
	cfg.dynamicSmemBytes = smem;
	cfg.stream = stream;
	cudaLaunchAttribute attr[1];
	attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
	attr[0].val.programmaticStreamSerializationAllowed = 1;
	cfg.attrs = attr;
	cfg.numAttrs = pdl ? 1 : 0;
	return cudaLaunchKernelEx(&cfg, kernel, (KA)args...);
}

// Broadcast strides of each input against out (numpy rules), with adjacent
// dims merged where every operand allows.  -1 when an input does not
// broadcast.
int tpfc_strided_bcast(tpfc::Strided *s, const struct tpf_ktensor *out,
		       const struct tpf_ktensor *const *ins, int n);
// One operand with explicit strides (in elements) over out dims; merges dims.
void tpfc_strided_collapse(tpfc::Strided *s);

// Multiprocessors of the current device (cached per device; 132 when the
// query fails).
int tpfc_sm_count(void);

// Blocks for a grid-stride loop over n items.
unsigned tpfc_blocks(int64_t n, int threads);

// Status of the last launch: TPF_OK or a message naming the node.
enum tpf_status tpfc_launched(const struct tpf_kernel_call *c, const char *what);
// The status of a launch through cudaLaunchKernelEx that returned e (a
// failed launch's error is cleared, as tpfc_launched does).
enum tpf_status tpfc_launched_ex(const struct tpf_kernel_call *c, cudaError_t e, const char *what);
// A message for a failed CUDA runtime call.
enum tpf_status tpfc_cuda_fail(const struct tpf_kernel_call *c, const char *what, cudaError_t e);

static inline cudaStream_t tpfc_stream(const struct tpf_kernel_call *c)
{
	return (cudaStream_t)c->stream;
}

// kernel(args...) on the call's stream, a grid-stride loop over n items in
// blocks of `threads`; the launch's status (tpfc_launched) names `what`.
template <typename K, typename... A>
enum tpf_status tpfc_launch(const struct tpf_kernel_call *c, const char *what, int64_t n, int threads, K kernel,
			    A... args)
{
	kernel<<<tpfc_blocks(n, threads), threads, 0, tpfc_stream(c)>>>(args...);
	return tpfc_launched(c, what);
}

// 1 when the dtype is handled by the generic float path on the GPU.
int tpfc_float_ok(enum tpf_dtype t);
// 1 when the dtype is handled by the generic integer path on the GPU.
int tpfc_int_ok(enum tpf_dtype t);


// TPF_OK when dtype t has whole elements of 1 to 8 bytes, which the kernels
// that only move elements support; else the call fails.
static inline enum tpf_status tpfc_need_bytes(const struct tpf_kernel_call *c, enum tpf_dtype t)
{
	size_t es = tpf_elem_size(t);
	if (!es || es > 8)
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "dtype %s not supported (sub-byte or wide)", tpf_dtype_name(t));
	return TPF_OK;
}

// y takes x's bytes (on the call's stream) unless they are the same buffer:
// the scatter ops update a copy of their data input.
static inline enum tpf_status tpfc_copy_input(const struct tpf_kernel_call *c, const struct tpf_ktensor *x,
					      struct tpf_ktensor *y)
{
	if (y->data != x->data && x->nbytes) {
		cudaError_t e = cudaMemcpyAsync(y->data, x->data, x->nbytes, cudaMemcpyDeviceToDevice, tpfc_stream(c));
		if (e != cudaSuccess)
			return tpfc_cuda_fail(c, "copy", e);
	}
	return TPF_OK;
}

#endif
