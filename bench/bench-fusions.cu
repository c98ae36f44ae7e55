// SPDX-License-Identifier: MIT
// The other three fusions on the GPU, one rank per GPU:
//   mpirun -np 2 bench-fusions [--json FILE]
// Timings are CUDA-graph replays (20 calls per graph, best of 10 replays,
// slowest rank), microseconds per call, bf16.
//   sharded Q/K RMSNorm (Dq 6144, Dk 1024 over the ranks), N tokens:
//     gather     AllGather Q, K -> reorder -> full RMSNorm -> slice (unfused graph)
//     variance   partial sums -> ncclAllReduce of 2 floats/token -> normalize (3 kernels)
//     oneshot    tpfuse's ShardedRMSNorm kernel: one exchange through peer memory
//   all-to-all of 4 sections x S sequences (2048, 2048, 32, 32 columns):
//     many       one AllToAll per sequence and section
//     coalesced  tpfuse Pack -> one AllToAll -> Unpack
//     direct     one NCCL group of every piece's sends and receives (no packing
//                copies)
//     peer       tpfuse's peer-memory all-to-all: one kernel moves every piece
//                from and into its own buffers (the runtime's path for a
//                coalesced run on CUDA)
//   sigmoid gate final + sigmoid(gate[T,1]) * shared, H 4096 (each GPU alone):
//     unfused    Sigmoid, Mul, Add kernels
//     fused      tpfuse SigmoidGateAdd
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "tpf-cuda.h"

#include "bench-common.cuh"

typedef __nv_bfloat16 bf16;
static int g_rank, g_world;

static bf16 *device_random(size_t n, unsigned seed)
{
	std::vector<bf16> v(n);
	unsigned s = seed * 2654435761u + 12345u;
	for (size_t i = 0; i < n; i++) {
		s = s * 1664525u + 1013904223u;
		v[i] = __float2bfloat16(((s >> 8) & 0xffff) / 32768.0f - 1.0f);
	}
	bf16 *d;
	CK(cudaMalloc(&d, n * sizeof(bf16) + 16));
	CK(cudaMemcpy(d, v.data(), n * sizeof(bf16), cudaMemcpyHostToDevice));
	return d;
}

static std::vector<float> to_host(const bf16 *d, size_t n)
{
	std::vector<bf16> h(n);
	CK(cudaMemcpy(h.data(), d, n * sizeof(bf16), cudaMemcpyDeviceToHost));
	std::vector<float> f(n);
	for (size_t i = 0; i < n; i++)
		f[i] = __bfloat162float(h[i]);
	return f;
}

static double max_diff(const bf16 *a, const bf16 *b, size_t n)
{
	std::vector<float> x = to_host(a, n), y = to_host(b, n);
	double m = 0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)x[i] - (double)y[i]);
		if (d != d)
			return INFINITY;
		if (d > m)
			m = d;
	}
	return m;
}

// gathered [W][N][wd] -> [N][W*wd]
__global__ void reorder_kernel(const bf16 *in, bf16 *out, int W, int64_t N, int64_t wd)
{
	int64_t total = (int64_t)W * N * wd;
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
		int64_t w = i / (N * wd), n = (i / wd) % N, j = i % wd;
		out[n * W * wd + w * wd + j] = in[i];
	}
}

// [N][full] -> this rank's columns [N][wd]
__global__ void slice_kernel(const bf16 *in, bf16 *out, int64_t N, int64_t full, int64_t wd, int rank)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < N * wd; i += (int64_t)gridDim.x * blockDim.x)
		out[i] = in[(i / wd) * full + rank * wd + i % wd];
}

__global__ void sigmoid_kernel(const bf16 *in, bf16 *out, int64_t n)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
		out[i] = __float2bfloat16(1.f / (1.f + __expf(-__bfloat162float(in[i]))));
}

__global__ void mul_bcast_kernel(const bf16 *g, const bf16 *s, bf16 *out, int64_t rows, int64_t H)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < rows * H; i += (int64_t)gridDim.x * blockDim.x)
		out[i] = __float2bfloat16(__bfloat162float(g[i / H]) * __bfloat162float(s[i]));
}

static int blocks(int64_t n)
{
	int64_t b = (n + 255) / 256;
	return (int)(b < 1 ? 1 : b > 65535 * 8 ? 65535 * 8 : b);
}

// NCCL all-to-all of `bytes_per_rank` chunks
static void nccl_alltoall(const void *send, void *recv, size_t count_per_rank, ncclComm_t comm, cudaStream_t s)
{
	NK(ncclGroupStart());
	for (int q = 0; q < g_world; q++) {
		NK(ncclSend((const char *)send + q * count_per_rank * 2, count_per_rank, ncclBfloat16, q, comm, s));
		NK(ncclRecv((char *)recv + q * count_per_rank * 2, count_per_rank, ncclBfloat16, q, comm, s));
	}
	NK(ncclGroupEnd());
}

int main(int argc, char **argv)
{
	struct bench_env env;

	bench_start(&argc, &argv, &env);
	g_rank = env.rank;
	g_world = env.world;
	const int rank = g_rank, W = g_world;
	const char *json_path = env.json_path;
	const cudaDeviceProp &prop = env.prop;
	ncclComm_t comm = env.comm;
	cudaStream_t s = env.s;
	struct tpf_cuda_exchange ex = {mpi_allgather, NULL};
	FILE *jf = (rank == 0 && json_path) ? fopen(json_path, "w") : NULL;
	if (jf)
		fprintf(jf, "{\"device\": \"%s\", \"world\": %d,\n", prop.name, W);
	if (rank == 0)
		printf("device %s, world %d; microseconds per call (CUDA graph, best of %d replays, slowest rank)\n",
		       prop.name, W, kReplays);
	int bad = 0;

	// ---------------------------------------------------------- sharded Q/K norm
	{
		const int64_t Dq = 6144, Dk = 1024, wq = Dq / W, wk = Dk / W;
		const int Ns[] = {1, 16, 128, 1024, 2048, 4096, 8192};
		struct tpf_cuda_arnorm *fx;
		ok(tpf_cuda_arnorm_create(rank, W, TPF_DTYPE_FLOAT, 8192 * 2, &ex, &fx, g_diag));
		bf16 *gq_full = device_random(Dq, 3), *gk_full = device_random(Dk, 4);
		if (rank == 0)
			printf("sharded Q/K RMSNorm (Dq %lld, Dk %lld)\n%8s %10s %10s %10s  %s\n", (long long)Dq, (long long)Dk,
			       "tokens", "gather", "variance", "oneshot", "speedup vs gather");
		if (jf)
			fprintf(jf, "\"sharded_qk\": [\n");
		for (int ci = 0; ci < (int)(sizeof(Ns) / sizeof(Ns[0])); ci++) {
			int64_t N = Ns[ci];
			bf16 *q = device_random(N * wq, 10 + rank), *k = device_random(N * wk, 20 + rank);
			bf16 *gq, *gk, *fq, *fk, *nq, *nk, *oq, *ok_, *oq2, *ok2;
			CK(cudaMalloc(&gq, N * Dq * 2));
			CK(cudaMalloc(&gk, N * Dk * 2));
			CK(cudaMalloc(&fq, N * Dq * 2));
			CK(cudaMalloc(&fk, N * Dk * 2));
			CK(cudaMalloc(&nq, N * Dq * 2));
			CK(cudaMalloc(&nk, N * Dk * 2));
			CK(cudaMalloc(&oq, N * wq * 2));
			CK(cudaMalloc(&ok_, N * wk * 2));
			CK(cudaMalloc(&oq2, N * wq * 2));
			CK(cudaMalloc(&ok2, N * wk * 2));
			float *sums;
			CK(cudaMalloc(&sums, N * 2 * sizeof(float)));
			const bf16 *gq_shard = gq_full + rank * wq, *gk_shard = gk_full + rank * wk;
			struct tpf_cuda_sharded_args a;
			memset(&a, 0, sizeof(a));
			a.dtype = TPF_DTYPE_BFLOAT16;
			a.n = 2;
			a.rows = N;
			a.x[0] = q, a.x[1] = k;
			a.gamma[0] = gq_shard, a.gamma[1] = gk_shard;
			a.out[0] = oq2, a.out[1] = ok2;
			a.width[0] = wq, a.width[1] = wk;
			a.full_dim[0] = Dq, a.full_dim[1] = Dk;
			a.epsilon[0] = a.epsilon[1] = 1e-6f;
			auto gather = [&] {
				NK(ncclAllGather(q, gq, N * wq, ncclBfloat16, comm, s));
				NK(ncclAllGather(k, gk, N * wk, ncclBfloat16, comm, s));
				reorder_kernel<<<blocks(N * Dq), 256, 0, s>>>(gq, fq, W, N, wq);
				reorder_kernel<<<blocks(N * Dk), 256, 0, s>>>(gk, fk, W, N, wk);
				ok(tpf_cuda_rmsnorm(TPF_DTYPE_BFLOAT16, fq, gq_full, nq, N, Dq, 1e-6f, 0.f, s, g_diag));
				ok(tpf_cuda_rmsnorm(TPF_DTYPE_BFLOAT16, fk, gk_full, nk, N, Dk, 1e-6f, 0.f, s, g_diag));
				slice_kernel<<<blocks(N * wq), 256, 0, s>>>(nq, oq, N, Dq, wq, rank);
				slice_kernel<<<blocks(N * wk), 256, 0, s>>>(nk, ok_, N, Dk, wk, rank);
			};
			struct tpf_cuda_sharded_args av = a;
			auto variance = [&] {
				ok(tpf_cuda_sharded_sumsq(&av, sums, s, g_diag));
				NK(ncclAllReduce(sums, sums, N * 2, ncclFloat32, ncclSum, comm, s));
				ok(tpf_cuda_sharded_normalize(&av, sums, s, g_diag));
			};
			auto oneshot = [&] { ok(tpf_cuda_sharded_rmsnorm_run(fx, &a, s, g_diag)); };
			gather();
			oneshot();
			CK(cudaStreamSynchronize(s));
			double dq = max_diff(oq, oq2, N * wq), dk = max_diff(ok_, ok2, N * wk);
			int case_bad = !(dq <= 0.0625 && dk <= 0.0625);
			double tg = graph_time(s, gather), tv = graph_time(s, variance), to = graph_time(s, oneshot);
			int any_bad;
			MPI_Allreduce(&case_bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
			bad |= any_bad;
			if (rank == 0)
				printf("%8lld %10.2f %10.2f %10.2f  %.2fx   (max diff q %.3g, k %.3g)%s\n", (long long)N, tg, tv, to,
				       tg / to, dq, dk, any_bad ? " MISMATCH" : "");
			if (jf)
				fprintf(jf, "%s {\"tokens\": %lld, \"gather\": %.3f, \"variance\": %.3f, \"oneshot\": %.3f, \"max_diff\": %g, \"ok\": %s}\n",
					ci ? "," : "", (long long)N, tg, tv, to, dq > dk ? dq : dk, any_bad ? "false" : "true");
			cudaFree(q), cudaFree(k), cudaFree(gq), cudaFree(gk), cudaFree(fq), cudaFree(fk), cudaFree(nq), cudaFree(nk);
			cudaFree(oq), cudaFree(ok_), cudaFree(oq2), cudaFree(ok2), cudaFree(sums);
		}
		if (jf)
			fprintf(jf, "],\n");
		tpf_cuda_arnorm_free(fx);
	}

	// ---------------------------------------------------------- all-to-all coalescing
	{
		const int Ss[] = {1, 4, 16};
		const int64_t widths[4] = {2048, 2048, 32, 32};
		if (rank == 0)
			printf("all-to-all, 4 sections x S sequences, %d tokens per rank\n%6s %6s %12s %12s %12s %12s %12s  %s\n", 16384 / W,
			       "S", "calls", "many", "coalesced", "direct", "peer", "one_a2a", "best vs many");
		// bytes a destination: the largest case's, each piece padded to 16
		struct tpf_cuda_a2a *pa = NULL;
		ok(tpf_cuda_a2a_create(rank, W, (size_t)(16384 / W) * (2048 + 2048 + 32 + 32) * 2 / W + 64 * 16, &ex, &pa,
				       g_diag));
		if (jf)
			fprintf(jf, "\"a2a\": [\n");
		for (int ci = 0; ci < 3; ci++) {
			int S = Ss[ci];
			int64_t rows = (16384 / W) / S;
			int nb = 4 * S;
			std::vector<bf16 *> in(nb), out(nb), out2(nb);
			std::vector<int64_t> elems(nb);
			int64_t total = 0;
			for (int i = 0; i < nb; i++) {
				elems[i] = rows * widths[i % 4];
				total += elems[i];
				in[i] = device_random(elems[i], 100 * rank + i);
				CK(cudaMalloc(&out[i], elems[i] * 2));
				CK(cudaMalloc(&out2[i], elems[i] * 2));
			}
			// copy tables as the coalesce-alltoall pass computes them (bytes)
			int64_t Sx = total / W; // elements per destination chunk
			std::vector<tpf_cuda_segment> pseg, useg;
			int64_t off = 0;
			for (int i = 0; i < nb; i++) {
				int64_t c = elems[i] / W;
				for (int j = 0; j < W; j++) {
					pseg.push_back({i, j * c * 2, (j * Sx + off) * 2, c * 2});
					useg.push_back({i, (j * Sx + off) * 2, j * c * 2, c * 2});
				}
				off += c;
			}
			int64_t max_len = 0;
			for (auto &g : pseg)
				max_len = g.len > max_len ? g.len : max_len;
			tpf_cuda_segment *dps, *dus;
			void **din, **dout;
			bf16 *packed, *recv;
			CK(cudaMalloc(&dps, pseg.size() * sizeof(tpf_cuda_segment)));
			CK(cudaMalloc(&dus, useg.size() * sizeof(tpf_cuda_segment)));
			CK(cudaMemcpy(dps, pseg.data(), pseg.size() * sizeof(tpf_cuda_segment), cudaMemcpyHostToDevice));
			CK(cudaMemcpy(dus, useg.data(), useg.size() * sizeof(tpf_cuda_segment), cudaMemcpyHostToDevice));
			CK(cudaMalloc(&din, nb * sizeof(void *)));
			CK(cudaMalloc(&dout, nb * sizeof(void *)));
			CK(cudaMemcpy(din, in.data(), nb * sizeof(void *), cudaMemcpyHostToDevice));
			CK(cudaMemcpy(dout, out2.data(), nb * sizeof(void *), cudaMemcpyHostToDevice));
			CK(cudaMalloc(&packed, total * 2));
			CK(cudaMalloc(&recv, total * 2));
			auto many = [&] {
				for (int i = 0; i < nb; i++)
					nccl_alltoall(in[i], out[i], elems[i] / W, comm, s);
			};
			auto coalesced = [&] {
				ok(tpf_cuda_pack((const void *const *)din, packed, dps, (int)pseg.size(), max_len, s, g_diag));
				nccl_alltoall(packed, recv, Sx, comm, s);
				ok(tpf_cuda_unpack(recv, dout, dus, (int)useg.size(), max_len, s, g_diag));
			};
			auto one = [&] { nccl_alltoall(packed, recv, Sx, comm, s); };
			// the runtime's direct path: one group of every piece's sends
			// and receives, from and into the pieces' own buffers
			auto direct = [&] {
				NK(ncclGroupStart());
				for (int i = 0; i < nb; i++) {
					size_t c = (size_t)(elems[i] / W);
					for (int q = 0; q < W; q++) {
						NK(ncclSend(in[i] + q * c, c, ncclBfloat16, q, comm, s));
						NK(ncclRecv(out2[i] + q * c, c, ncclBfloat16, q, comm, s));
					}
				}
				NK(ncclGroupEnd());
			};
			std::vector<size_t> pbytes(nb);
			for (int i = 0; i < nb; i++)
				pbytes[i] = (size_t)(elems[i] / W) * 2;
			auto peer = [&] {
				ok(tpf_cuda_a2a_run(pa, (const void *const *)in.data(), (void *const *)out2.data(), pbytes.data(),
						    (size_t)nb, s, g_diag));
			};
			many();
			coalesced();
			CK(cudaStreamSynchronize(s));
			double md = 0;
			for (int i = 0; i < nb; i++) {
				double d = max_diff(out[i], out2[i], elems[i]);
				md = d > md ? d : md;
			}
			for (int i = 0; i < nb; i++)
				CK(cudaMemset(out2[i], 0, elems[i] * 2));
			direct();
			CK(cudaStreamSynchronize(s));
			for (int i = 0; i < nb; i++) {
				double d = max_diff(out[i], out2[i], elems[i]);
				md = d > md ? d : md;
			}
			// the peer path twice (both of its buffers), each checked
			for (int r = 0; r < 2; r++) {
				for (int i = 0; i < nb; i++)
					CK(cudaMemset(out2[i], 0, elems[i] * 2));
				peer();
				CK(cudaStreamSynchronize(s));
				ok(tpf_cuda_a2a_check(pa, g_diag));
				for (int i = 0; i < nb; i++) {
					double d = max_diff(out[i], out2[i], elems[i]);
					md = d > md ? d : md;
				}
			}
			int case_bad = md != 0.0;
			double tm = graph_time(s, many), tc = graph_time(s, coalesced), t1 = graph_time(s, one);
			double td = graph_time(s, direct), tp = graph_time(s, peer);
			ok(tpf_cuda_a2a_check(pa, g_diag));
			int any_bad;
			MPI_Allreduce(&case_bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
			bad |= any_bad;
			if (rank == 0)
				printf("%6d %6d %12.2f %12.2f %12.2f %12.2f %12.2f  %.2fx%s\n", S, nb, tm, tc, td, tp, t1,
				       tm / fmin(fmin(tc, td), tp),
				       any_bad ? " MISMATCH" : "");
			if (jf)
				fprintf(jf, "%s {\"S\": %d, \"calls\": %d, \"bytes\": %lld, \"many\": %.3f, \"coalesced\": %.3f, \"direct\": %.3f, \"peer\": %.3f, \"one_a2a\": %.3f, \"ok\": %s}\n",
					ci ? "," : "", S, nb, (long long)(total * 2), tm, tc, td, tp, t1, any_bad ? "false" : "true");
			for (int i = 0; i < nb; i++)
				cudaFree(in[i]), cudaFree(out[i]), cudaFree(out2[i]);
			cudaFree(dps), cudaFree(dus), cudaFree(din), cudaFree(dout), cudaFree(packed), cudaFree(recv);
		}
		tpf_cuda_a2a_free(pa);
		if (jf)
			fprintf(jf, "],\n");
	}

	// ---------------------------------------------------------- sigmoid gate
	{
		const int64_t H = 4096;
		const int Ts[] = {1, 32, 256, 2048, 8192, 32768};
		if (rank == 0)
			printf("sigmoid gate, H %lld, gate [T,1]\n%8s %10s %10s %10s %10s  %s\n", (long long)H, "tokens", "unfused",
			       "fused", "unf GB/s", "fused GB/s", "speedup");
		if (jf)
			fprintf(jf, "\"sigmoid_gate\": [\n");
		for (int ci = 0; ci < 6; ci++) {
			int64_t T = Ts[ci], n = T * H;
			bf16 *f = device_random(n, 1), *g = device_random(T, 2), *sh = device_random(n, 3), *o1, *o2, *sg, *m;
			CK(cudaMalloc(&o1, n * 2));
			CK(cudaMalloc(&o2, n * 2));
			CK(cudaMalloc(&sg, T * 2));
			CK(cudaMalloc(&m, n * 2));
			auto unfused = [&] {
				sigmoid_kernel<<<blocks(T), 256, 0, s>>>(g, sg, T);
				mul_bcast_kernel<<<blocks(n), 256, 0, s>>>(sg, sh, m, T, H);
				ok(tpf_cuda_add(TPF_DTYPE_BFLOAT16, f, m, o1, n, s, g_diag));
			};
			auto fused = [&] { ok(tpf_cuda_sigmoid_gate_add(TPF_DTYPE_BFLOAT16, f, g, sh, o2, T, H, 1, s, g_diag)); };
			unfused();
			fused();
			CK(cudaStreamSynchronize(s));
			double md = max_diff(o1, o2, n);
			int case_bad = !(md <= 0.0625);
			double tu = graph_time(s, unfused), tf = graph_time(s, fused);
			double bytes = 3.0 * n * 2;
			int any_bad;
			MPI_Allreduce(&case_bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
			bad |= any_bad;
			if (rank == 0)
				printf("%8lld %10.2f %10.2f %10.0f %10.0f  %.2fx (max diff %.3g)%s\n", (long long)T, tu, tf, bytes / tu / 1e3,
				       bytes / tf / 1e3, tu / tf, md, any_bad ? " MISMATCH" : "");
			if (jf)
				fprintf(jf, "%s {\"tokens\": %lld, \"unfused\": %.3f, \"fused\": %.3f, \"fused_GBps\": %.1f, \"max_diff\": %g, \"ok\": %s}\n",
					ci ? "," : "", (long long)T, tu, tf, bytes / tf / 1e3, md, any_bad ? "false" : "true");
			cudaFree(f), cudaFree(g), cudaFree(sh), cudaFree(o1), cudaFree(o2), cudaFree(sg), cudaFree(m);
		}
		if (jf)
			fprintf(jf, "]\n}\n");
	}
	if (jf)
		fclose(jf);
	ncclCommDestroy(comm);
	tpf_diag_free(g_diag);
	MPI_Finalize();
	return bad ? 1 : 0;
}
