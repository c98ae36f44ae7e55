// SPDX-License-Identifier: MIT
// Several all-to-alls in one kernel through peer memory: every piece moves
// from where its producer left it, with no packing copy on the sender.
// See tpf-cuda.h (tpf_cuda_a2a_*).
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda-common.cuh"
#include "peer.cuh"
#include "tpf-cuda.h"

namespace {

constexpr int kMaxWorld = tpfc::kPeerMaxWorld;
constexpr int kThreads = 512;
constexpr int kUnroll = 4; // units a thread has in flight

// The context's device state, at the start of its peer-mapped area: the
// call counter and give-up flag every peer-memory kernel keeps (peer.cuh)
// and, per sender, how many of its blocks have finished writing into this
// rank's area (over all calls: a call waits for the count of calls so far
// times the sender's grid).
struct A2AState {
	tpfc::PeerState s;
	unsigned from[kMaxWorld];
};
constexpr size_t kStateBytes = 256;
static_assert(sizeof(A2AState) <= kStateBytes, "state area");

struct A2APiece {
	const char *send; // world chunks of `bytes`, chunk q for rank q
	char *recv;       // world chunks of `bytes`, chunk q from rank q
	unsigned long long bytes;
};

struct A2AParams {
	char *area[kMaxWorld];      // every rank's area (state first), as mapped here
	int rank, world, n, unit_shift;
	int grid[kMaxWorld];        // each rank's grid: the blocks that count in
	size_t slot_bytes;          // one sender's slot of one buffer
	unsigned long long total;   // the pieces' bytes a destination, each padded to 16
	unsigned long long timeout_ns;
	A2APiece pc[TPF_CUDA_A2A_MAX_PIECES];

	__device__ A2AState *state(int q) const { return reinterpret_cast<A2AState *>(area[q]); }
	// receiver r's slot for sender s in buffer b
	__device__ char *slot(int r, int b, int s) const
	{
		const int idx = s < r ? s : s - 1;
		return area[r] + kStateBytes + ((size_t)b * (world - 1) + idx) * slot_bytes;
	}
};

__device__ inline unsigned load_acquire_sys(const unsigned *p)
{
	unsigned v;
	asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

template <int U> struct Unit;
template <> struct Unit<16> {
	typedef uint4 T;
};
template <> struct Unit<4> {
	typedef unsigned T;
};
template <> struct Unit<1> {
	typedef unsigned char T;
};

// Copies units [lo, hi) of the concatenation over pieces (each piece's
// `bytes`, padded to 16 in the concatenation) from src_of(i, off) to
// dst_of(i, off), off the piece's byte offset in the concatenation; the
// block's threads side by side, kUnroll loads in flight a thread.
template <int U, typename Src, typename Dst>
__device__ inline void copy_range(const A2AParams &p, unsigned long long lo, unsigned long long hi, Src src_of,
				  Dst dst_of)
{
	typedef typename Unit<U>::T V;
	unsigned long long start = 0; // the piece's first unit
	for (int i = 0; i < p.n && start < hi; i++) {
		const unsigned long long units = p.pc[i].bytes / U, next = start + (p.pc[i].bytes + 15) / 16 * 16 / U;
		const unsigned long long a = lo > start ? lo - start : 0, b = hi - start < units ? hi - start : units;
		if (a < b) {
			const V *s = reinterpret_cast<const V *>(src_of(i, start * U));
			V *d = reinterpret_cast<V *>(dst_of(i, start * U));
			unsigned long long u = a + threadIdx.x;
			for (; u + (kUnroll - 1) * kThreads < b; u += kUnroll * kThreads) {
				V v[kUnroll];
#pragma unroll
				for (int k = 0; k < kUnroll; k++)
					v[k] = s[u + k * kThreads];
#pragma unroll
				for (int k = 0; k < kUnroll; k++)
					d[u + k * kThreads] = v[k];
			}
			for (; u < b; u += kThreads)
				d[u] = s[u];
		}
		start = next;
	}
}

// This block's share of n ranges of tu units each, split evenly over the
// grid as one range of n x tu, clipped to range k: [a, b), false when
// empty.
__device__ __forceinline__ bool block_share(int n, unsigned long long tu, int k, unsigned long long &a,
					    unsigned long long &b)
{
	const unsigned long long all = (unsigned long long)n * tu, first = k * tu;
	const unsigned long long lo = all * blockIdx.x / gridDim.x, hi = all * (blockIdx.x + 1) / gridDim.x;
	a = lo > first ? lo - first : 0;
	b = hi < first + tu ? hi - first : tu;
	return hi > first && lo < first + tu && a < b;
}

// 1. every destination's chunk of every piece: this rank's own straight
//    into recv, the others' into this rank's slot of their area (the grid
//    splits the destinations' units evenly); 2. each block counts itself in
//    at every peer; 3. once every block of every peer has, the peers'
//    chunks are copied from this rank's slots into recv.  Two buffers
//    alternate: a sender writes buffer b again two calls later, which it
//    begins only after this rank has begun the next call, so after this
//    call has ended here.
template <int U> __global__ void __launch_bounds__(kThreads, 2) a2a_kernel(A2AParams p)
{
	__shared__ unsigned s_iter;
	tpfc::pdl_trigger();
	tpfc::pdl_wait();
	A2AState *me = p.state(p.rank);
	unsigned ticket = 0;
	const unsigned iter = tpfc::call_counter(&me->s, tpfc::read_counter(&me->s), &s_iter, &ticket);
	const int b = (int)(iter & 1u);
	const unsigned long long tu = p.total >> p.unit_shift;

	// 1. all destinations, as one range of world x tu units split over the grid
	for (int q = 0; q < p.world; q++) {
		unsigned long long qlo, qhi;
		if (!block_share(p.world, tu, q, qlo, qhi))
			continue;
		char *slot = q == p.rank ? nullptr : p.slot(q, b, p.rank);
		copy_range<U>(
			p, qlo, qhi,
			[&](int i, unsigned long long) { return p.pc[i].send + (size_t)q * p.pc[i].bytes; },
			[&](int i, unsigned long long off) {
				return q == p.rank ? p.pc[i].recv + (size_t)q * p.pc[i].bytes : slot + off;
			});
	}
	// 2. count in at every peer once this block's writes are visible there
	__syncthreads();
	if (threadIdx.x == 0) {
		__threadfence_system();
		for (int q = 0; q < p.world; q++)
			if (q != p.rank)
				atomicAdd_system(&p.state(q)->from[p.rank], 1u);
	}
	// 3. wait for every block of every peer, then copy out of the slots
	if (threadIdx.x == 0) {
		for (int q = 0; q < p.world; q++) {
			if (q == p.rank)
				continue;
			const unsigned want = (iter + 1u) * (unsigned)p.grid[q];
			unsigned long long t0 = 0;
			for (unsigned spins = 0; (int)(load_acquire_sys(&me->from[q]) - want) < 0; spins++) {
				if (spins == 0)
					t0 = tpfc::now_ns();
				else if ((spins & 255u) == 0 && tpfc::wait_expired(&me->s, p.timeout_ns, t0))
					break;
			}
		}
	}
	__syncthreads();
	for (int k = 0; k < p.world - 1; k++) {
		const int q = k < p.rank ? k : k + 1;
		unsigned long long qlo, qhi;
		if (!block_share(p.world - 1, tu, k, qlo, qhi))
			continue;
		const char *slot = p.slot(p.rank, b, q);
		copy_range<U>(
			p, qlo, qhi, [&](int, unsigned long long off) { return slot + off; },
			[&](int i, unsigned long long) { return p.pc[i].recv + (size_t)q * p.pc[i].bytes; });
	}
	tpfc::call_end(&me->s, iter, ticket);
}

} // namespace

struct tpf_cuda_a2a {
	int rank, world;
	size_t slot_bytes;
	char *local;
	char *area[kMaxWorld];
	int grid;
	int grids[kMaxWorld];
	unsigned long long timeout_ns;
	bool pdl;
};

namespace {

enum tpf_status a2a_fail(struct tpf_diag *d, const char *what, cudaError_t e)
{
	return tpf_diag_fail(d, TPF_ERR_RUNTIME, "peer-memory all-to-all: %s: %s", what, cudaGetErrorString(e));
}

} // namespace

extern "C" void tpf_cuda_a2a_free(struct tpf_cuda_a2a *c)
{
	if (!c)
		return;
	for (int q = 0; q < c->world; q++)
		if (q != c->rank && c->area[q])
			cudaIpcCloseMemHandle(c->area[q]);
	if (c->local)
		cudaFree(c->local);
	tpf_free(c);
}

extern "C" size_t tpf_cuda_a2a_max_bytes(const struct tpf_cuda_a2a *c)
{
	return c->slot_bytes;
}

extern "C" enum tpf_status tpf_cuda_a2a_create(int rank, int world, size_t max_bytes,
					      const struct tpf_cuda_exchange *ex, struct tpf_cuda_a2a **out,
					      struct tpf_diag *d)
{
	*out = NULL;
	if (world < 2 || world > kMaxWorld || rank < 0 || rank >= world)
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED,
				     "peer-memory all-to-all: world size %d (rank %d) outside 2..%d", world, rank,
				     kMaxWorld);
	struct tpf_cuda_a2a *c = (struct tpf_cuda_a2a *)tpf_calloc(1, sizeof(*c));
	enum tpf_status st = TPF_OK;
	if (!c) {
		st = tpf_diag_fail(d, TPF_ERR_NOMEM, "peer-memory all-to-all: out of memory");
	} else {
		c->rank = rank;
		c->world = world;
		c->timeout_ns = 60ull * 1000000000ull;
		c->pdl = tpfc::peer_pdl();
		c->slot_bytes = (max_bytes + 255) / 256 * 256;
		const size_t area = kStateBytes + 2 * (size_t)(world - 1) * c->slot_bytes;
		cudaError_t e = cudaMalloc((void **)&c->local, area);
		if (e == cudaSuccess)
			e = cudaMemset(c->local, 0, kStateBytes);
		if (e == cudaSuccess)
			e = cudaDeviceSynchronize();
		int dev = 0, sms = 0, per_sm = 0;
		if (e == cudaSuccess)
			e = cudaGetDevice(&dev);
		if (e == cudaSuccess)
			e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
		// the least of the three instances: every block of any of them must fit
		int o16 = 0, o4 = 0, o1 = 0;
		if (e == cudaSuccess)
			e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&o16, a2a_kernel<16>, kThreads, 0);
		if (e == cudaSuccess)
			e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&o4, a2a_kernel<4>, kThreads, 0);
		if (e == cudaSuccess)
			e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&o1, a2a_kernel<1>, kThreads, 0);
		per_sm = o16 < o4 ? o16 : o4;
		per_sm = per_sm < o1 ? per_sm : o1;
		if (e != cudaSuccess) {
			st = a2a_fail(d, "setting up the buffers", e);
		} else {
			// every block resident at once (they wait for the peers'), two an SM
			c->grid = sms * (per_sm < 2 ? (per_sm < 1 ? 1 : per_sm) : 2);
		}
	}
	char *none[kMaxWorld];
	int grids[kMaxWorld];
	st = tpfc::map_peers(rank, world, ex, st, c ? c->local : NULL, c ? c->grid : 0, c ? c->area : none,
			     c ? c->grids : grids, "peer-memory all-to-all", d);
	if (st != TPF_OK) {
		tpf_cuda_a2a_free(c);
		return st;
	}
	*out = c;
	return TPF_OK;
}

extern "C" void tpf_cuda_a2a_set_timeout(struct tpf_cuda_a2a *c, double seconds)
{
	c->timeout_ns = seconds > 0 ? (unsigned long long)(seconds * 1e9) : 60ull * 1000000000ull;
}

extern "C" enum tpf_status tpf_cuda_a2a_run(struct tpf_cuda_a2a *c, const void *const *send, void *const *recv,
					   const size_t *bytes_per_rank, size_t n, void *stream, struct tpf_diag *d)
{
	if (n > TPF_CUDA_A2A_MAX_PIECES)
		return tpf_diag_fail(d, TPF_ERR_LIMIT, "peer-memory all-to-all: %zu pieces, at most %d a call", n,
				     TPF_CUDA_A2A_MAX_PIECES);
	A2AParams p;
	memset(&p, 0, sizeof(p));
	uintptr_t bits = 0;
	unsigned long long total = 0;
	for (size_t i = 0; i < n; i++) {
		if (!send[i] || !recv[i])
			return tpf_diag_fail(d, TPF_ERR_INVALID, "peer-memory all-to-all: piece %zu has no buffer", i);
		p.pc[i].send = (const char *)send[i];
		p.pc[i].recv = (char *)recv[i];
		p.pc[i].bytes = bytes_per_rank[i];
		bits |= (uintptr_t)send[i] | (uintptr_t)recv[i] | (uintptr_t)bytes_per_rank[i];
		total += (bytes_per_rank[i] + 15) / 16 * 16;
	}
	if (total > c->slot_bytes)
		return tpf_diag_fail(d, TPF_ERR_LIMIT,
				     "peer-memory all-to-all: %llu bytes a destination exceed the buffer (%zu)", total,
				     c->slot_bytes);
	if (total == 0)
		return TPF_OK;
	for (int q = 0; q < c->world; q++) {
		p.area[q] = c->area[q];
		p.grid[q] = c->grids[q];
	}
	p.rank = c->rank;
	p.world = c->world;
	p.n = (int)n;
	p.slot_bytes = c->slot_bytes;
	p.total = total;
	p.timeout_ns = c->timeout_ns;
	const int unit = bits % 16 == 0 ? 16 : bits % 4 == 0 ? 4 : 1;
	p.unit_shift = unit == 16 ? 4 : unit == 4 ? 2 : 0;
	cudaLaunchConfig_t cfg = {};
	cfg.gridDim = dim3((unsigned)c->grid);
	cfg.blockDim = dim3((unsigned)kThreads);
	cfg.stream = (cudaStream_t)stream;
	cudaLaunchAttribute attr[1];
	attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
	attr[0].val.programmaticStreamSerializationAllowed = 1;
	cfg.attrs = attr;
	cfg.numAttrs = c->pdl ? 1 : 0;
	cudaError_t e = unit == 16 ? cudaLaunchKernelEx(&cfg, a2a_kernel<16>, p)
			: unit == 4 ? cudaLaunchKernelEx(&cfg, a2a_kernel<4>, p)
				    : cudaLaunchKernelEx(&cfg, a2a_kernel<1>, p);
	return e == cudaSuccess ? TPF_OK : a2a_fail(d, "launch", e);
}

extern "C" enum tpf_status tpf_cuda_a2a_check(struct tpf_cuda_a2a *c, struct tpf_diag *d)
{
	unsigned timed_out = 0;
	cudaError_t e = cudaMemcpy(&timed_out, &reinterpret_cast<A2AState *>(c->local)->s.timed_out, sizeof(timed_out),
				   cudaMemcpyDeviceToHost);
	if (e != cudaSuccess)
		return a2a_fail(d, "reading its state", e);
	if (timed_out)
		return tpf_diag_fail(d, TPF_ERR_RUNTIME,
				     "rank %d: a peer-memory all-to-all waited more than %.0f s for another rank's "
				     "pieces (did every rank reach the same all-to-all?); this context stays unusable",
				     c->rank, (double)c->timeout_ns / 1e9);
	return TPF_OK;
}
