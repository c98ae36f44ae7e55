// SPDX-License-Identifier: MIT
// The one-shot and two-shot all-reduces through peer memory, alone or fused
// with the residual add + RMSNorm (+ FP8) that follows (ar-norm.cuh), and the
// sharded RMSNorm's exchange.  See tpf-cuda.h.
#include "ar-norm.cuh"

namespace {

// ---------------------------------------------------------------- one-shot
//
// Protocol of the peer-memory kernels.  Each rank has a receive area of
// three buffers; call n uses buffer n % 3 on every rank.  A buffer's unused
// 16-byte units hold -0.0 placeholders (0x80000000 words for the sharded
// norm's floats); writers store real data (-0.0 scrubbed to +0.0) and
// readers spin until a unit holds no placeholder, then put the placeholders
// back at once: every unit a call writes is read exactly once, by the rank
// that owns the buffer, in the same call.  No rank writes buffer n % 3 again
// before call n + 3, and a rank gets there only after every rank has
// started call n + 2 (each call waits on data from every rank, directly or
// through the owner of its rows), so the reset is done by then.

// Buffer b of a rank's receive area: world source slots, then one gather slot.
struct ArParams {
	char *peer[kMaxWorld]; // receive area of each rank, as mapped here
	int rank, world;
	size_t slot_bytes;     // one slot of one buffer
	tpfc::PeerState *state;
	unsigned long long timeout_ns; // a wait gives up after this long
	const void *x;
	int64_t rows;
	NormOut o;

	__device__ size_t slot(int b, int q) const { return ((size_t)b * (world + 1) + q) * slot_bytes; }
};

// Waits until v, loaded from the 16 bytes at src, holds no placeholder
// (loading it again), then puts the placeholders back.  Gives up (false, v
// zeroed) when tpfc::wait_expired says so.
template <typename T> __device__ inline bool settle16(uint4 *src, uint4 &v, const ArParams &p)
{
	unsigned long long t0 = 0;
	for (unsigned spins = 0; has_placeholder<T>(v); spins++) {
		if (spins == 0) {
			t0 = tpfc::now_ns();
		} else if ((spins & 255u) == 0 && tpfc::wait_expired(p.state, p.timeout_ns, t0)) {
			v = make_uint4(0, 0, 0, 0);
			return false;
		}
		v = load_volatile(src);
	}
	const uint32_t w = placeholder_word<T>();
	store_volatile(src, make_uint4(w, w, w, w));
	return true;
}

// Loads the 16 bytes at src and waits for them (settle16).
template <typename T> __device__ inline bool take16(uint4 *src, uint4 &v, const ArParams &p)
{
	v = load_volatile(src);
	return settle16<T>(src, v, p);
}

// Takes this thread's chunks (c = threadIdx.x + k * blockDim.x < chunks)
// of the row at `row` in a receive buffer into v, every load issued before
// any is waited on: a row that has arrived costs one round trip, not one a
// chunk.  The two-shot kernel's instance for many rows takes its rows so
// (at 4x H100 2048 x 8192: 176 us against 183 chunk by chunk); with rows
// still arriving, chunk by chunk measured faster (32 x 4096: 7.9 us
// against 10.6).
template <typename T, int CPT>
__device__ inline void take_chunks(char *row, int chunks, uint4 *v, const ArParams &p)
{
	uint4 *u = reinterpret_cast<uint4 *>(row);
#pragma unroll
	for (int k = 0; k < CPT; k++) {
		const int c = threadIdx.x + k * blockDim.x;
		if (c < chunks)
			v[k] = load_volatile(u + c);
	}
#pragma unroll
	for (int k = 0; k < CPT; k++) {
		const int c = threadIdx.x + k * blockDim.x;
		if (c < chunks)
			settle16<T>(u + c, v[k], p);
	}
}

// The start of every peer-memory kernel: with programmatic dependent
// launch the grid may start before the previous kernel of the stream has
// finished; nothing is read or written before that kernel's results are
// visible.  The stream's next kernel may start at once (launch_dependents:
// a GEMV launched as a dependent loads its first weight rows while this one
// waits for the peers).
__device__ inline void peer_begin()
{
	tpfc::pdl_trigger();
	tpfc::pdl_wait();
}

// Sums slot q = 0..world-1 of row `lrow` of buffer b (in rank order, the
// same on every rank, so that every rank's result is bit-identical) into
// acc, rounded to T.  This rank's own contribution comes from `mine`, its
// chunks of the row in registers (scrubbed, as the peers received them).
// ROWS: a slot's whole row is taken at a time (take_chunks), else chunk
// after chunk; the sums are the same.  (Issuing several slots' loads before
// checking any measured no faster on 2x H100: 6.64 us against 6.05 at
// 1 x 4096.)
template <typename T, int CPT = kMaxChunksPerThread, bool ROWS = false>
__device__ inline void sum_slots(const ArParams &p, int b, int64_t lrow, int chunks, float (*acc)[8],
				 const uint4 *mine)
{
	constexpr int N = Elem<T>::kPerChunk;
	const size_t row_bytes = (size_t)p.o.hidden * sizeof(T);
	char *own = p.peer[p.rank];
#pragma unroll
	for (int k = 0; k < CPT; k++)
#pragma unroll
		for (int i = 0; i < 8; i++)
			acc[k][i] = 0.f;
	if constexpr (ROWS) {
		for (int q = 0; q < p.world; q++) {
			uint4 v[CPT];
			if (q == p.rank) {
#pragma unroll
				for (int k = 0; k < CPT; k++)
					v[k] = scrub<T>(mine[k]);
			} else {
				take_chunks<T, CPT>(own + p.slot(b, q) + lrow * row_bytes, chunks, v, p);
			}
#pragma unroll
			for (int k = 0; k < CPT; k++) {
				if (threadIdx.x + k * blockDim.x >= chunks)
					continue;
				float f[8];
				unpack<T>(v[k], f);
#pragma unroll
				for (int i = 0; i < N; i++)
					acc[k][i] += f[i];
			}
		}
	} else {
#pragma unroll
		for (int k = 0; k < CPT; k++) {
			int c = threadIdx.x + k * blockDim.x;
			if (c >= chunks)
				continue;
			for (int q = 0; q < p.world; q++) {
				uint4 v;
				if (q == p.rank)
					v = scrub<T>(mine[k]);
				else
					take16<T>(reinterpret_cast<uint4 *>(own + p.slot(b, q) + lrow * row_bytes +
									     (size_t)c * 16),
						  v, p);
				float f[8];
				unpack<T>(v, f);
#pragma unroll
				for (int i = 0; i < N; i++)
					acc[k][i] += f[i];
			}
		}
	}
#pragma unroll
	for (int k = 0; k < CPT; k++)
#pragma unroll
		for (int i = 0; i < N; i++)
			acc[k][i] = round_to<T>(acc[k][i]); // the all-reduce result is a T tensor
}

// One-shot: every rank stores its rows into slot `rank` of every other
// rank's buffer, then reduces all rows itself (its own from registers).
template <typename T, int Q, int CPT = kMaxChunksPerThread>
__global__ void __launch_bounds__(CPT == 1 ? kWideThreads : kMaxThreads) arnorm_oneshot_kernel(ArParams p)
{
	__shared__ float scratch[128];
	__shared__ unsigned s_iter;
	int phase = 0;
	const int chunks = (int)(p.o.hidden / Elem<T>::kPerChunk);
	const size_t row_bytes = (size_t)p.o.hidden * sizeof(T);
	peer_begin();
	// the counter, the first row's data, residual and gamma in flight
	// together (one row a block whenever the rows fit the grid)
	const unsigned it0 = tpfc::read_counter(p.state);
	const bool single = blockIdx.x + gridDim.x >= p.rows;
	uint4 xv[CPT];
	RowInT<CPT> in;
	load_chunks<T, CPT>(p.x, blockIdx.x, chunks, xv);
	load_row_in<T, CPT>(p.o, blockIdx.x, chunks, in);
	unsigned ticket = 0;
	const unsigned iter = tpfc::call_counter(p.state, it0, &s_iter, &ticket);
	const int b = (int)(iter % 3);

	// 1. push this rank's rows into slot `rank` of buffer b of every other
	//    rank (all of them first: a block waits for the peers' rows only
	//    after its own are on their way, so the waits overlap)
	for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
		uint4 v[CPT];
		if (row == blockIdx.x) {
#pragma unroll
			for (int k = 0; k < CPT; k++)
				v[k] = xv[k];
		} else {
			load_chunks<T, CPT>(p.x, row, chunks, v);
		}
#pragma unroll
		for (int k = 0; k < CPT; k++) {
			int c = threadIdx.x + k * blockDim.x;
			if (c >= chunks)
				continue;
			const uint4 s = scrub<T>(v[k]);
			size_t off = p.slot(b, p.rank) + row * row_bytes + (size_t)c * 16;
			for (int q = 0; q < p.world; q++)
				if (q != p.rank)
					store_volatile(reinterpret_cast<uint4 *>(p.peer[q] + off), s);
		}
	}
	for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
		if (!single) {
			load_chunks<T, CPT>(p.x, row, chunks, xv);
			load_row_in<T, CPT>(p.o, row, chunks, in);
		}
		// 2. wait for every other rank's row in our buffer b, sum in float
		float acc[CPT][8];
		sum_slots<T, CPT>(p, b, row, chunks, acc, xv);
		// 3. residual, norm, quantization in registers
		finish_row<T, Q, CPT>(acc, in, row, chunks, p.o, scratch, phase);
	}
	tpfc::call_end(p.state, iter, ticket);
}

// Two-shot: rank q owns the rows r with r % world == q.  1. every rank
// stores each row it does not own into slot `rank` of the owner's buffer
// (a reduce-scatter); 2. each owner sums its rows (its own part from x),
// adds their residual, stores the rounded residual sums into the gather
// slot of every other rank's buffer (an all-gather) and finishes them;
// 3. every rank finishes the rows it does not own from its gather slot.
// Each rank moves 2 x (world-1)/world of the tensor instead of (world-1)
// times it, and reads only its own rows' residual; the norm and
// quantization run on every rank from the same residual sums, so the
// outputs are the same everywhere.  Owners take every world-th row, not a
// block of rows each: the grid walks the rows in order, and with blocks of
// rows every rank's step 1 sent to the same owner at the same time (at 4x
// H100 the bare two-shot all-reduce of 2048 x 8192 took 237 us against
// NCCL's 173; 170 with every world-th row).
// With many rows at more than two ranks (the BATCH and SPLIT instance)
// steps 2 and 3 run side by side in the two halves of the grid.  No wait
// depends on a later phase (step 2 waits only on step 1's stores, which
// every block makes before it waits on anything; step 3 only on step
// 2's), and the grid is resident as a whole, so it cannot deadlock.
template <typename T, int Q, bool BATCH, bool SPLIT>
__global__ void __launch_bounds__(kMaxThreads) arnorm_twoshot_kernel(ArParams p)
{
	__shared__ float scratch[128];
	__shared__ unsigned s_iter;
	int phase = 0;
	constexpr int N = Elem<T>::kPerChunk;
	const int chunks = (int)(p.o.hidden / N);
	const size_t row_bytes = (size_t)p.o.hidden * sizeof(T);
	peer_begin();
	unsigned ticket = 0;
	const unsigned iter = tpfc::call_counter(p.state, tpfc::read_counter(p.state), &s_iter, &ticket);
	const int b = (int)(iter % 3);
	const int W = p.world;
	const int64_t n_mine = tpf_rows_owned(p.rows, p.rank, W);
	const int64_t n_other = p.rows - n_mine;

	// 1. scatter: row r to its owner's slot `rank`, at the owner's local row
	//    r / world (the owned rows stay: step 2 reads them from x); the
	//    grid walks the rows not owned here, so that every block has work
	//    whatever the grid size
	for (tpf_row_walk it = tpf_row_walk_start(blockIdx.x, gridDim.x, p.rank, W); it.j < n_other;
	     it = tpf_row_walk_next(it)) {
		const int64_t row = tpf_row_walk_row(it);
		const int owner = tpf_row_walk_owner(it);
		const size_t off = p.slot(b, p.rank) + (size_t)it.group * row_bytes;
#pragma unroll
		for (int k = 0; k < kMaxChunksPerThread; k++) {
			int c = threadIdx.x + k * blockDim.x;
			if (c < chunks)
				store_volatile(reinterpret_cast<uint4 *>(p.peer[owner] + off + (size_t)c * 16),
					       scrub<T>(get<BATCH>(reinterpret_cast<const uint4 *>(p.x) + row * chunks + c)));
		}
	}
	// SPLIT: half the blocks take the owned rows (2.), the other half the
	// other ranks' rows (3.) as they arrive, so that step 3's local work
	// overlaps step 2's sends instead of following them (at 4x H200 2048 x
	// 8192: 161.8 us against 167.2 one step after the other; at two ranks,
	// where a rank owns half the rows, slower: 119.6 against 113.7);
	// launched with at least two blocks.  Otherwise every block takes both
	// steps, one after the other.
	const unsigned half = SPLIT ? gridDim.x / 2 : 0;
	// 2. reduce the owned rows, gather them to every rank, finish them
	for (int64_t j = blockIdx.x; j < (SPLIT && blockIdx.x >= half ? 0 : n_mine); j += (SPLIT ? half : gridDim.x)) {
		const int64_t row = j * W + p.rank;
		RowIn in;
		uint4 xv[kMaxChunksPerThread];
		load_chunks<T>(p.x, row, chunks, xv);
		load_row_in<T, kMaxChunksPerThread, BATCH>(p.o, row, chunks, in);
		float acc[kMaxChunksPerThread][8];
		sum_slots<T, kMaxChunksPerThread, BATCH>(p, b, j, chunks, acc, xv);
		const size_t off = p.slot(b, W) + row * row_bytes;
#pragma unroll
		for (int k = 0; k < kMaxChunksPerThread; k++) {
			int c = threadIdx.x + k * blockDim.x;
			if (c >= chunks)
				continue;
			if (p.o.residual)
				add_residual<T>(acc[k], in.res[k]);
			// the owner finishes from what it sends (-0.0 scrubbed too), so
			// that every rank's outputs are bit-identical
			uint4 v = scrub<T>(pack<T>(acc[k]));
			unpack<T>(v, acc[k]);
			for (int i = 1, q = p.rank + 1; i < W; i++, q++) { // the next ranks first: no rank is every owner's first target
				if (q == W)
					q = 0;
				store_volatile(reinterpret_cast<uint4 *>(p.peer[q] + off + (size_t)c * 16), v);
			}
		}
		finish_row<T, Q, kMaxChunksPerThread, BATCH, false>(acc, in, row, chunks, p.o, scratch, phase);
	}
	// 3. the other ranks' rows from the gather slot, their residual added
	char *own = p.peer[p.rank];
	for (tpf_row_walk it = tpf_row_walk_start(blockIdx.x - half, gridDim.x - half, p.rank, W);
	     it.j < (SPLIT && blockIdx.x < half ? 0 : n_other); it = tpf_row_walk_next(it)) {
		const int64_t row = tpf_row_walk_row(it);
		RowIn in;
		load_row_in<T, kMaxChunksPerThread, BATCH, false>(p.o, row, chunks, in);
		float acc[kMaxChunksPerThread][8];
		if (BATCH) {
			uint4 v[kMaxChunksPerThread];
			take_chunks<T, kMaxChunksPerThread>(own + p.slot(b, W) + row * row_bytes, chunks, v, p);
#pragma unroll
			for (int k = 0; k < kMaxChunksPerThread; k++)
				if (threadIdx.x + k * blockDim.x < chunks)
					unpack<T>(v[k], acc[k]);
		} else {
#pragma unroll
			for (int k = 0; k < kMaxChunksPerThread; k++) {
				int c = threadIdx.x + k * blockDim.x;
				if (c >= chunks)
					continue;
				uint4 v;
				take16<T>(reinterpret_cast<uint4 *>(own + p.slot(b, W) + row * row_bytes + (size_t)c * 16), v,
					  p);
				unpack<T>(v, acc[k]);
			}
		}
		finish_row<T, Q, kMaxChunksPerThread, BATCH, false>(acc, in, row, chunks, p.o, scratch, phase);
	}
	tpfc::call_end(p.state, iter, ticket);
}

template <typename T> __global__ void fill_placeholder_kernel(uint4 *p, size_t n)
{
	const uint32_t w = placeholder_word<T>();
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		p[i] = make_uint4(w, w, w, w);
}

} // namespace

// ---------------------------------------------------------------- one-shot host side

// The two-shot kernel for dtype T and QuantKind Q: its instance for many
// rows where `many` (rows taken whole: take_chunks; x and the residual
// loaded and every output stored evict-first, so that L2 keeps what the
// peers write: at 4x H100 2048 x 8192, 172.4 us against 175.7 with the
// default cache policy), with steps 2 and 3 side by side where `split`
// (more than two ranks).
template <typename T, int Q> void (*two_shot_kernel(bool many, bool split))(ArParams)
{
	return many ? split ? arnorm_twoshot_kernel<T, Q, true, true> : arnorm_twoshot_kernel<T, Q, true, false>
		    : arnorm_twoshot_kernel<T, Q, false, false>;
}

// The one-shot or two-shot kernel for dtype T and QuantKind q (the one-shot
// at one chunk a thread where `wide`, the two-shot's instance for many rows
// where `many`, with steps 2 and 3 side by side where also `split`).
template <typename T>
void (*peer_kernel(bool two, int q, bool wide = false, bool many = false, bool split = false))(ArParams)
{
	switch (q) {
	case kQPlain:
		return two    ? two_shot_kernel<T, kQPlain>(many, split)
		       : wide ? arnorm_oneshot_kernel<T, kQPlain, 1> : arnorm_oneshot_kernel<T, kQPlain>;
	case kQFp4:
		return two    ? two_shot_kernel<T, kQFp4>(many, split)
		       : wide ? arnorm_oneshot_kernel<T, kQFp4, 1> : arnorm_oneshot_kernel<T, kQFp4>;
	case kQGroup:
		return two    ? two_shot_kernel<T, kQGroup>(many, split)
		       : wide ? arnorm_oneshot_kernel<T, kQGroup, 1> : arnorm_oneshot_kernel<T, kQGroup>;
	default:
		return two    ? two_shot_kernel<T, kQAny>(many, split)
		       : wide ? arnorm_oneshot_kernel<T, kQAny, 1> : arnorm_oneshot_kernel<T, kQAny>;
	}
}

// The fewest blocks of `threads` an SM holds of the one-shot (wide or not)
// or two-shot kernels (every instance) of dtype dt, over every output kind.
template <typename T> int least_resident_t(bool two, bool wide, int threads)
{
	int least = 1 << 30;
	for (int q = kQAny; q <= kQGroup; q++)
		for (int many = 0; many <= (int)two; many++)
			for (int split = 0; split <= many; split++) {
				int n = 0;
				cudaOccupancyMaxActiveBlocksPerMultiprocessor(
					&n, peer_kernel<T>(two, q, wide, many, split), threads, 0);
				least = n < least ? n : least;
			}
	return least;
}
int least_resident(enum tpf_dtype dt, bool two, bool wide, int threads)
{
	return dt == TPF_DTYPE_FLOAT	 ? least_resident_t<float>(two, wide, threads)
	       : dt == TPF_DTYPE_FLOAT16 ? least_resident_t<__half>(two, wide, threads)
					 : least_resident_t<__nv_bfloat16>(two, wide, threads);
}

// The two-shot kernel's narrow block for rows of `chunks`: four chunks a
// thread, at least 128 threads, at most `full`.
int two_shot_narrow(int chunks, int full)
{
	int t = ((chunks + kMaxChunksPerThread - 1) / kMaxChunksPerThread + 31) / 32 * 32;
	t = t < 128 ? 128 : t;
	return t < full ? t : full;
}

struct tpf_cuda_arnorm {
	int rank, world;
	enum tpf_dtype dtype;
	size_t max_elems, slot_bytes;
	char *local;                 // our receive area (3 buffers x world slots)
	char *peer[kMaxWorld];       // every rank's receive area mapped here
	tpfc::PeerState *state;
	int max_grid;                // blocks that are surely resident together
	int max_grid_sharded;        // the same for the sharded norm's kernel (a smaller one: more fit)
	int grid_two[kMaxThreads / 32 + 1]; // two-shot blocks surely resident, by threads / 32
	int64_t wide_rows;           // one-shot calls of at most this many rows take the wide instances
	unsigned long long timeout_ns;
	bool pdl;                    // programmatic dependent launch
};

namespace {

// Launches a peer-memory kernel; with pdl, as a programmatic dependent of
// the stream's previous kernel (its launch overlaps that kernel's end; the
// kernel's griddepcontrol.wait keeps the data dependency).
template <typename... Args>
cudaError_t launch_peer(const struct tpf_cuda_arnorm *c, void (*kernel)(Args...), int grid, int threads,
			cudaStream_t s, Args... args)
{
	cudaLaunchConfig_t cfg = {};
	cfg.gridDim = dim3((unsigned)grid);
	cfg.blockDim = dim3((unsigned)threads);
	cfg.stream = s;
	cudaLaunchAttribute attr[1];
	attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
	attr[0].val.programmaticStreamSerializationAllowed = 1;
	cfg.attrs = attr;
	cfg.numAttrs = c->pdl ? 1 : 0;
	return cudaLaunchKernelEx(&cfg, kernel, args...);
}

// The exchange's part of a peer-memory kernel's parameters (the rest zero).
ArParams peer_params(const struct tpf_cuda_arnorm *c)
{
	ArParams p;
	memset(&p, 0, sizeof(p));
	for (int q = 0; q < c->world; q++)
		p.peer[q] = c->peer[q];
	p.rank = c->rank;
	p.world = c->world;
	p.slot_bytes = c->slot_bytes;
	p.state = c->state;
	p.timeout_ns = c->timeout_ns;
	return p;
}

} // namespace

extern "C" void tpf_cuda_arnorm_free(struct tpf_cuda_arnorm *c)
{
	if (!c)
		return;
	for (int q = 0; q < c->world; q++)
		if (q != c->rank && c->peer[q])
			cudaIpcCloseMemHandle(c->peer[q]);
	if (c->local)
		cudaFree(c->local);
	if (c->state)
		cudaFree(c->state);
	tpf_free(c);
}

extern "C" size_t tpf_cuda_arnorm_max_elems(const struct tpf_cuda_arnorm *c)
{
	return c->max_elems;
}

namespace {

// The two-shot kernel's instance for many rows from this many rows of
// `chunks` on: more than four rows a block of the full width.
int64_t many_rows(const struct tpf_cuda_arnorm *c, int chunks)
{
	const int64_t grid = c->grid_two[two_shot_narrow(chunks, row_threads(chunks)) / 32];
	return grid >= 2 ? 4 * (int64_t)c->grid_two[row_threads(chunks) / 32] + 1 : INT64_MAX;
}

} // namespace

extern "C" int64_t tpf_cuda_arnorm_many_rows(const struct tpf_cuda_arnorm *c, int64_t hidden)
{
	const int es = elem_size(c->dtype);
	if (hidden <= 0 || (hidden * es) % 16 || hidden * es / 16 > (int64_t)kMaxThreads * kMaxChunksPerThread)
		return -1;
	return many_rows(c, (int)(hidden * es / 16));
}

namespace {

int sharded_blocks_per_sm(); // defined with the sharded norm's kernel

// Everything before the exchange: buffers, state, placeholders, grid limits.
enum tpf_status arnorm_prepare(struct tpf_cuda_arnorm *c, int es, struct tpf_diag *d)
{
	c->slot_bytes = (c->max_elems * (size_t)es + 255) / 256 * 256;
	// 3 buffers of world source slots and one gather slot (two-shot)
	const size_t area = 3 * ((size_t)c->world + 1) * c->slot_bytes;
	cudaError_t e = cudaMalloc((void **)&c->local, area);
	if (e != cudaSuccess)
		return cuda_fail(d, "one-shot all-reduce buffers", e);
	e = cudaMalloc((void **)&c->state, sizeof(tpfc::PeerState));
	if (e == cudaSuccess)
		e = cudaMemset(c->state, 0, sizeof(tpfc::PeerState));
	if (e != cudaSuccess)
		return cuda_fail(d, "one-shot all-reduce state", e);
	size_t n = area / 16;
	if (c->dtype == TPF_DTYPE_FLOAT)
		fill_placeholder_kernel<float><<<1024, 256>>>((uint4 *)c->local, n);
	else
		fill_placeholder_kernel<__half><<<1024, 256>>>((uint4 *)c->local, n);
	e = cudaDeviceSynchronize();
	if (e != cudaSuccess)
		return cuda_fail(d, "one-shot all-reduce init", e);
	int dev = 0, sms = 0, per_sm = 0;
	cudaGetDevice(&dev);
	cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
	// the two-shot kernel at every block size it may take (run: narrow
	// blocks for many rows)
	int per_sm_two = 0;
	for (int k = 1; k <= kMaxThreads / 32; k++) {
		per_sm_two = least_resident(c->dtype, true, false, 32 * k);
		c->grid_two[k] = sms * (per_sm_two > 0 ? per_sm_two : 1);
	}
	// Both kernels at their largest block size (the last one above);
	// smaller blocks only fit more.
	per_sm = least_resident(c->dtype, false, false, kMaxThreads);
	per_sm = per_sm_two < per_sm ? per_sm_two : per_sm;
	c->max_grid = sms * (per_sm > 0 ? per_sm : 1);
	c->max_grid_sharded = sms * sharded_blocks_per_sm();
	{ // the wide one-shot: only where its whole grid (a block a row) is resident
		int wide = least_resident(c->dtype, false, true, kWideThreads);
		c->wide_rows = (int64_t)sms * (wide > 0 ? wide : 0);
		const long long w = tpf_env_int("TPF_AR_WIDE_ROWS", -1);
		if (w >= 0 && w < c->wide_rows)
			c->wide_rows = w;
	}

	return TPF_OK;
}

} // namespace

extern "C" enum tpf_status tpf_cuda_arnorm_create(int rank, int world, enum tpf_dtype dtype, size_t max_elems,
						  const struct tpf_cuda_exchange *ex,
						  struct tpf_cuda_arnorm **out, struct tpf_diag *d)
{
	*out = NULL;
	// Argument errors are the same on every rank: they return before the
	// exchange everywhere.
	int es = elem_size(dtype);
	if (!es)
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "one-shot all-reduce: dtype %s is not supported",
				     tpf_dtype_name(dtype));
	if (world < 1 || world > kMaxWorld || rank < 0 || rank >= world)
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "one-shot all-reduce: world size %d (rank %d) outside 1..%d",
				     world, rank, kMaxWorld);
	struct tpf_cuda_arnorm *c = (struct tpf_cuda_arnorm *)tpf_calloc(1, sizeof(*c));
	enum tpf_status st = TPF_OK;
	if (!c) {
		st = tpf_diag_fail(d, TPF_ERR_NOMEM, "one-shot all-reduce: out of memory");
	} else {
		c->rank = rank;
		c->world = world;
		c->dtype = dtype;
		c->max_elems = max_elems;
		c->timeout_ns = 60ull * 1000000000ull;
		c->pdl = tpfc::peer_pdl();
		st = arnorm_prepare(c, es, d);
	}
	char *none[kMaxWorld];
	st = tpfc::map_peers(rank, world, ex, st, c ? c->local : NULL, 0, c ? c->peer : none, NULL, "one-shot all-reduce",
			     d);
	if (st != TPF_OK) {
		tpf_cuda_arnorm_free(c);
		return st;
	}
	*out = c;
	return TPF_OK;
}

extern "C" enum tpf_status tpf_cuda_arnorm_run(struct tpf_cuda_arnorm *c, const struct tpf_cuda_norm_args *a,
					       void *stream, struct tpf_diag *d)
{
	int chunks;
	enum tpf_status st = check_norm_args(a, d, &chunks);
	if (st != TPF_OK)
		return st;
	if (a->dtype != c->dtype)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "one-shot all-reduce: created for %s, called with %s",
				     tpf_dtype_name(c->dtype), tpf_dtype_name(a->dtype));
	if ((size_t)(a->rows * a->hidden) > c->max_elems)
		return tpf_diag_fail(d, TPF_ERR_LIMIT, "one-shot all-reduce: %lld elements exceed the buffer (%zu)",
				     (long long)(a->rows * a->hidden), c->max_elems);
	if (a->rows == 0)
		return TPF_OK;
	ArParams p = peer_params(c);
	p.x = a->x;
	p.rows = a->rows;
	p.o = norm_out_of(a);
	int threads = row_threads(chunks);
	int grid = (int)(a->rows < c->max_grid ? a->rows : c->max_grid);
	cudaStream_t s = (cudaStream_t)stream;
	const bool two = a->path == TPF_CUDA_AR_TWOSHOT && c->world > 1;
	const bool wide = !two && chunks > kMaxThreads && chunks <= kWideThreads && a->rows <= c->wide_rows;
	if (wide) {
		threads = (chunks + 31) / 32 * 32;
		grid = (int)a->rows;
	}
	bool many = false, split = false;
	if (two) {
		// Many rows (more than four a block at the full width): blocks of
		// four chunks a thread (at least 128 threads), so that more rows
		// are in flight at once (at 4x H100 2048 x 8192: 183 us against 192
		// at 512 threads, where one block fits an SM); fewer: the full
		// width, faster while each block takes a few rows (128 x 8192:
		// 17.0 us against 20.0; at 2x H100 512 x 4096: 17.6 against 19.4).
		// Many rows also take whole rows at a time (take_chunks), and at
		// more than two ranks run steps 2 and 3 side by side.
		const int narrow = two_shot_narrow(chunks, threads);
		many = a->rows >= many_rows(c, chunks);
		split = many && c->world > 2;
		threads = many ? narrow : threads;
		const int cap = c->grid_two[threads / 32];
		grid = (int)(a->rows < cap ? a->rows : cap);
	}
	const int q = quant_kind(p.o);
	cudaError_t e;
	switch (a->dtype) {
	case TPF_DTYPE_FLOAT:
		e = launch_peer(c, peer_kernel<float>(two, q, wide, many, split), grid, threads, s, p);
		break;
	case TPF_DTYPE_FLOAT16:
		e = launch_peer(c, peer_kernel<__half>(two, q, wide, many, split), grid, threads, s, p);
		break;
	default:
		e = launch_peer(c, peer_kernel<__nv_bfloat16>(two, q, wide, many, split), grid, threads, s, p);
		break;
	}
	return e == cudaSuccess ? TPF_OK : cuda_fail(d, two ? "two-shot all-reduce launch" : "one-shot all-reduce launch", e);
}

extern "C" void tpf_cuda_arnorm_set_timeout(struct tpf_cuda_arnorm *c, double seconds)
{
	c->timeout_ns = seconds > 0 ? (unsigned long long)(seconds * 1e9) : 60ull * 1000000000ull;
}

extern "C" enum tpf_status tpf_cuda_arnorm_check(struct tpf_cuda_arnorm *c, struct tpf_diag *d)
{
	unsigned timed_out = 0;
	cudaError_t e = cudaMemcpy(&timed_out, &c->state->timed_out, sizeof(timed_out), cudaMemcpyDeviceToHost);
	if (e != cudaSuccess)
		return cuda_fail(d, "reading the peer-memory collectives' state", e);
	if (timed_out)
		return tpf_diag_fail(d, TPF_ERR_RUNTIME,
				     "rank %d: a peer-memory collective waited more than %.0f s for another rank's "
				     "data (did every rank reach the same collective?); this communicator's peer-memory "
				     "collectives are unusable from here on",
				     c->rank, (double)c->timeout_ns / 1e9);
	return TPF_OK;
}

// ---------------------------------------------------------------- sharded RMSNorm

namespace {

struct ShardedParams {
	int n;
	int64_t rows;
	const void *x[TPF_CUDA_SHARDED_MAX];
	const void *gamma[TPF_CUDA_SHARDED_MAX];
	void *out[TPF_CUDA_SHARDED_MAX];
	int64_t width[TPF_CUDA_SHARDED_MAX];
	float inv_dim[TPF_CUDA_SHARDED_MAX];
	float eps[TPF_CUDA_SHARDED_MAX];
	float weight_offset;
};

// Partial sum of squares of row `row` of tensor i, over the block.
template <typename T>
__device__ float row_sumsq(const ShardedParams &p, int i, int64_t row, float *scratch, int &phase)
{
	constexpr int N = Elem<T>::kPerChunk;
	const int chunks = (int)(p.width[i] / N);
	const uint4 *src = reinterpret_cast<const uint4 *>(p.x[i]) + row * chunks;
	float s = 0.f;
	for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
		float f[8];
		unpack<T>(src[c], f);
#pragma unroll
		for (int k = 0; k < N; k++)
			s += f[k] * f[k];
	}
	return block_sum(s, scratch, phase);
}

template <typename T>
__device__ void row_normalize(const ShardedParams &p, int i, int64_t row, float total)
{
	constexpr int N = Elem<T>::kPerChunk;
	const int chunks = (int)(p.width[i] / N);
	const uint4 *src = reinterpret_cast<const uint4 *>(p.x[i]) + row * chunks;
	uint4 *dst = reinterpret_cast<uint4 *>(p.out[i]) + row * chunks;
	const uint4 *gam = reinterpret_cast<const uint4 *>(p.gamma[i]);
	float inv = rsqrtf(total * p.inv_dim[i] + p.eps[i]);
	for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
		float f[8], g[8];
		unpack<T>(src[c], f);
		unpack<T>(gam[c], g);
#pragma unroll
		for (int k = 0; k < N; k++)
			f[k] = f[k] * inv * (g[k] + p.weight_offset);
		dst[c] = pack<T>(f);
	}
}

template <typename T> __global__ void __launch_bounds__(kMaxThreads) sharded_sumsq_kernel(ShardedParams p, float *sums)
{
	__shared__ float scratch[64];
	int phase = 0;
	for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x)
		for (int i = 0; i < p.n; i++) {
			float s = row_sumsq<T>(p, i, row, scratch, phase);
			if (threadIdx.x == 0)
				sums[row * p.n + i] = s;
		}
}

template <typename T>
__global__ void __launch_bounds__(kMaxThreads) sharded_normalize_kernel(ShardedParams p, const float *sums)
{
	for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x)
		for (int i = 0; i < p.n; i++)
			row_normalize<T>(p, i, row, sums[row * p.n + i]);
}

// take16 for one float of the sharded norm's exchange (placeholder
// 0x80000000): waits for it, puts the placeholder back, gives up (0) when
// wait_expired says so.
__device__ inline float take32(uint32_t *src, const ArParams &p)
{
	unsigned long long t0 = 0;
	uint32_t bits;
	asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(bits) : "l"(src));
	for (unsigned spins = 0; bits == 0x80000000u; spins++) {
		if (spins == 0)
			t0 = tpfc::now_ns();
		else if ((spins & 255u) == 0 && tpfc::wait_expired(p.state, p.timeout_ns, t0))
			return 0.f;
		asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(bits) : "l"(src));
	}
	asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(src), "r"(0x80000000u) : "memory");
	return __uint_as_float(bits);
}

// Rows a block of the sharded norm's one-shot kernel pushes before it waits
// for the first of them: the peers' sums of a group arrive together, and the
// group's rows are still in L1 when they are normalized.
constexpr int kShardedGroup = 4;

// One kernel: partial sums, push n floats per row to every rank, wait,
// normalize.  Thread i handles tensor i's exchange.  A block takes its rows
// in groups: every row's sums of a group go out before any is waited for; a
// block with one row keeps its own sums in a register instead of its own
// slot.  Each row's total is the ranks' sums added in rank order.
template <typename T>
__global__ void __launch_bounds__(kMaxThreads) sharded_oneshot_kernel(ShardedParams p, ArParams ar)
{
	__shared__ float scratch[64];
	__shared__ float totals[TPF_CUDA_SHARDED_MAX];
	__shared__ unsigned s_iter;
	int phase = 0;
	peer_begin();
	const unsigned it0 = tpfc::read_counter(ar.state);
	const bool single = blockIdx.x + gridDim.x >= p.rows;
	unsigned ticket = 0, iter = 0;
	char *own = ar.peer[ar.rank];
	const size_t row_bytes = (size_t)p.n * sizeof(float);
	const int64_t stride = gridDim.x;
	float mine = 0.f;
	for (int64_t r0 = blockIdx.x; r0 < p.rows; r0 += kShardedGroup * stride) {
		// 1. this rank's partial sums of the group's rows, pushed
		for (int64_t row = r0; row < p.rows && row < r0 + kShardedGroup * stride; row += stride) {
			for (int i = 0; i < p.n; i++) {
				const float s = row_sumsq<T>(p, i, row, scratch, phase);
				if (threadIdx.x == i)
					mine = s;
			}
			if (row == blockIdx.x) // uniform: the block's first row (every block has one)
				iter = tpfc::call_counter(ar.state, it0, &s_iter, &ticket);
			if (threadIdx.x < p.n) {
				uint32_t bits = __float_as_uint(mine);
				if (bits == 0x80000000u)
					bits = 0;
				mine = __uint_as_float(bits);
				const size_t off = ar.slot((int)(iter % 3), ar.rank) + row * row_bytes + threadIdx.x * 4;
				for (int q = 0; q < ar.world; q++)
					if (q != ar.rank || !single)
						asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(ar.peer[q] + off), "r"(bits)
							     : "memory");
			}
		}
		// 2. every rank's sums of the group's rows, then the local normalize
		const int b = (int)(iter % 3);
		for (int64_t row = r0; row < p.rows && row < r0 + kShardedGroup * stride; row += stride) {
			if (single) // gamma on its way into L1 while the peers' sums arrive
				for (int i = 0; i < p.n; i++)
					for (int c = threadIdx.x; c < (int)(p.width[i] / Elem<T>::kPerChunk); c += blockDim.x)
						asm volatile("prefetch.global.L1 [%0];" ::"l"(
							reinterpret_cast<const uint4 *>(p.gamma[i]) + c));
			if (threadIdx.x < p.n) {
				float t = 0.f;
				for (int q = 0; q < ar.world; q++)
					t += q == ar.rank && single
						     ? mine
						     : take32(reinterpret_cast<uint32_t *>(own + ar.slot(b, q) +
											   row * row_bytes + threadIdx.x * 4),
							      ar);
				totals[threadIdx.x] = t;
			}
			__syncthreads();
			for (int i = 0; i < p.n; i++)
				row_normalize<T>(p, i, row, totals[i]);
			__syncthreads();
		}
	}
	tpfc::call_end(ar.state, iter, ticket);
}

// Blocks of the sharded norm's kernel (at its largest block size) that
// surely fit an SM together, over its three instances.
int sharded_blocks_per_sm()
{
	int a[3] = {0, 0, 0};
	cudaOccupancyMaxActiveBlocksPerMultiprocessor(&a[0], sharded_oneshot_kernel<float>, kMaxThreads, 0);
	cudaOccupancyMaxActiveBlocksPerMultiprocessor(&a[1], sharded_oneshot_kernel<__half>, kMaxThreads, 0);
	cudaOccupancyMaxActiveBlocksPerMultiprocessor(&a[2], sharded_oneshot_kernel<__nv_bfloat16>, kMaxThreads, 0);
	int m = a[0] < a[1] ? a[0] : a[1];
	m = m < a[2] ? m : a[2];
	return m > 0 ? m : 1;
}

enum tpf_status sharded_params(const struct tpf_cuda_sharded_args *a, ShardedParams *p, int *threads,
			       struct tpf_diag *d)
{
	int es = elem_size(a->dtype);
	if (!es)
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "cuda sharded norm: dtype %s is not supported",
				     tpf_dtype_name(a->dtype));
	if (a->n < 1 || a->n > TPF_CUDA_SHARDED_MAX)
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "cuda sharded norm: %d tensors (1..%d supported)", a->n,
				     TPF_CUDA_SHARDED_MAX);
	memset(p, 0, sizeof(*p));
	p->n = a->n;
	p->rows = a->rows;
	p->weight_offset = a->weight_offset;
	int maxc = 0;
	for (int i = 0; i < a->n; i++) {
		if (a->width[i] <= 0 || (a->width[i] * es) % 16 != 0 || a->full_dim[i] <= 0)
			return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED,
					     "cuda sharded norm: width %lld of tensor %d must be a positive multiple of %d",
					     (long long)a->width[i], i, 16 / es);
		p->x[i] = a->x[i];
		p->gamma[i] = a->gamma[i];
		p->out[i] = a->out[i];
		p->width[i] = a->width[i];
		p->inv_dim[i] = 1.0f / (float)a->full_dim[i];
		p->eps[i] = a->epsilon[i];
		int c = (int)(a->width[i] * es / 16);
		if (c > maxc)
			maxc = c;
	}
	*threads = row_threads(maxc);
	return TPF_OK;
}

} // namespace

#define TPF_DISPATCH_FLOAT_TYPES(dt, KERNEL, grid, threads, stream, ...)                            \
	do {                                                                                       \
		switch (dt) {                                                                      \
		case TPF_DTYPE_FLOAT:                                                              \
			KERNEL<float><<<grid, threads, 0, stream>>>(__VA_ARGS__);                   \
			break;                                                                     \
		case TPF_DTYPE_FLOAT16:                                                            \
			KERNEL<__half><<<grid, threads, 0, stream>>>(__VA_ARGS__);                  \
			break;                                                                     \
		default:                                                                           \
			KERNEL<__nv_bfloat16><<<grid, threads, 0, stream>>>(__VA_ARGS__);           \
			break;                                                                     \
		}                                                                                  \
	} while (0)

// The two passes of the exchange through the communicator: the per-rank
// sums of squares (normalize 0), or the normalization by the summed ones.
static enum tpf_status sharded_pass(const struct tpf_cuda_sharded_args *a, float *sums, int normalize,
				    void *stream, struct tpf_diag *d)
{
	ShardedParams p;
	int threads;
	enum tpf_status st = sharded_params(a, &p, &threads, d);
	if (st != TPF_OK || a->rows == 0)
		return st;
	if (normalize)
		TPF_DISPATCH_FLOAT_TYPES(a->dtype, sharded_normalize_kernel, grid_for(a->rows), threads,
					 (cudaStream_t)stream, p, sums);
	else
		TPF_DISPATCH_FLOAT_TYPES(a->dtype, sharded_sumsq_kernel, grid_for(a->rows), threads,
					 (cudaStream_t)stream, p, sums);
	cudaError_t e = cudaGetLastError();
	return e == cudaSuccess ? TPF_OK
				: cuda_fail(d, normalize ? "sharded normalize launch" : "sharded sumsq launch", e);
}

extern "C" enum tpf_status tpf_cuda_sharded_sumsq(const struct tpf_cuda_sharded_args *a, float *sums,
						  void *stream, struct tpf_diag *d)
{
	return sharded_pass(a, sums, 0, stream, d);
}

extern "C" enum tpf_status tpf_cuda_sharded_normalize(const struct tpf_cuda_sharded_args *a, const float *sums,
						      void *stream, struct tpf_diag *d)
{
	// the normalize kernel only reads the sums
	return sharded_pass(a, const_cast<float *>(sums), 1, stream, d);
}

extern "C" enum tpf_status tpf_cuda_sharded_rmsnorm_run(struct tpf_cuda_arnorm *c,
							const struct tpf_cuda_sharded_args *a, void *stream,
							struct tpf_diag *d)
{
	ShardedParams p;
	int threads;
	enum tpf_status st = sharded_params(a, &p, &threads, d);
	if (st != TPF_OK)
		return st;
	if (c->dtype != TPF_DTYPE_FLOAT)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "sharded norm exchange: needs a FLOAT exchange, not %s",
				     tpf_dtype_name(c->dtype));
	if ((size_t)(a->rows * a->n) > c->max_elems)
		return tpf_diag_fail(d, TPF_ERR_LIMIT, "sharded norm exchange: %lld floats exceed the buffer (%zu)",
				     (long long)(a->rows * a->n), c->max_elems);
	if (a->rows == 0)
		return TPF_OK;
	ArParams ar = peer_params(c);
	int grid = (int)(a->rows < c->max_grid_sharded ? a->rows : c->max_grid_sharded);
	cudaStream_t s = (cudaStream_t)stream;
	cudaError_t e;
	switch (a->dtype) {
	case TPF_DTYPE_FLOAT:
		e = launch_peer(c, sharded_oneshot_kernel<float>, grid, threads, s, p, ar);
		break;
	case TPF_DTYPE_FLOAT16:
		e = launch_peer(c, sharded_oneshot_kernel<__half>, grid, threads, s, p, ar);
		break;
	default:
		e = launch_peer(c, sharded_oneshot_kernel<__nv_bfloat16>, grid, threads, s, p, ar);
		break;
	}
	return e == cudaSuccess ? TPF_OK : cuda_fail(d, "sharded norm launch", e);
}
