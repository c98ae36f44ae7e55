// SPDX-License-Identifier: MIT
// The small-M MatMul kernels (kernels/cuda/gemv.cu) alone, one GPU: for
// each shape, launches over enough distinct copies of W that none of it is
// in L2 (at least 512 MB a graph), captured in one CUDA graph as the runtime
// launches them (programmatic dependents, W invariant); best of 10 replays.
// Also a "layer": the four GEMVs of a Llama-3-8B decoder layer at TP=2 in
// turn.  Prints us a call, TB/s of W and a hash of the last output (equal
// hashes: equal bits; the kernel variants are chosen by the TPF_GEMV*
// options, read once, so compare runs of this program).  Each shape is run
// with W row-major and, where the FMA kernel takes it, packed in column
// tiles (tpf_gemv_pack; the same sums in the same order, so the same
// bits: checked).
//   bench-gemv [--rows N]... [--json PATH]
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "cuda/tpf-cuda.h"
#include "tpf-kernels.h"

int tpf_cu_gemv_try(const struct tpf_kernel_call *c, enum tpf_dtype dt, const void *a, const void *w, void *y,
		    int64_t rows, int64_t K, int64_t N, int w_invariant, int w_tiled, int gated,
		    enum tpf_status *st);


#define CK(x)                                                                                                          \
	do {                                                                                                           \
		cudaError_t e_ = (x);                                                                                  \
		if (e_ != cudaSuccess) {                                                                               \
			fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));                    \
			exit(1);                                                                                       \
		}                                                                                                      \
	} while (0)

struct Shape {
	const char *name;
	int64_t K, N;
};

// bf16 values in [-1, 1) from a counter hash
__global__ void fill_kernel(unsigned short *p, size_t n, uint32_t seed)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		uint32_t h = (uint32_t)i * 2654435761u ^ seed;
		h ^= h >> 15;
		h *= 2246822519u;
		h ^= h >> 13;
		float f = (float)(h & 0xffff) / 32768.f - 1.f;
		uint32_t b;
		memcpy(&b, &f, 4);
		p[i] = (unsigned short)((b + 0x7fff + ((b >> 16) & 1)) >> 16);
	}
}

static void fill(unsigned short *p, size_t n, uint32_t seed)
{
	fill_kernel<<<1024, 256>>>(p, n, seed);
	CK(cudaGetLastError());
}

static uint64_t hash_dev(const void *p, size_t bytes)
{
	std::vector<unsigned char> h(bytes);
	CK(cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost));
	uint64_t x = 1469598103934665603ull;
	for (size_t i = 0; i < bytes; i++)
		x = (x ^ h[i]) * 1099511628211ull;
	return x;
}

struct Call {
	const void *w;
	int64_t K, N;
	int tiled;
};

// best us per replay of the calls captured in one graph
static double time_calls(cudaStream_t s, const std::vector<Call> &calls, const void *a, void *y, int rows)
{
	struct tpf_kernel_call c;
	memset(&c, 0, sizeof(c));
	c.stream = s;
	auto run = [&]() {
		for (const Call &k : calls) {
			enum tpf_status st = TPF_OK;
			if (!tpf_cu_gemv_try(&c, TPF_DTYPE_BFLOAT16, a, k.w, y, rows, k.K, k.N, 1, k.tiled, 0, &st) ||
			    st != TPF_OK) {
				fprintf(stderr, "gemv not taken or failed: %lld x %lld x %lld\n", (long long)rows,
					(long long)k.K, (long long)k.N);
				exit(1);
			}
		}
	};
	run(); // eager once (instances' attributes set outside capture)
	CK(cudaStreamSynchronize(s));
	cudaGraph_t g;
	cudaGraphExec_t ge;
	CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
	run();
	CK(cudaStreamEndCapture(s, &g));
	CK(cudaGraphInstantiate(&ge, g, 0));
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	CK(cudaGraphLaunch(ge, s));
	float best = 1e30f;
	for (int r = 0; r < 10; r++) {
		CK(cudaEventRecord(e0, s));
		CK(cudaGraphLaunch(ge, s));
		CK(cudaEventRecord(e1, s));
		CK(cudaEventSynchronize(e1));
		float ms;
		CK(cudaEventElapsedTime(&ms, e0, e1));
		if (ms < best)
			best = ms;
	}
	CK(cudaGraphExecDestroy(ge));
	CK(cudaGraphDestroy(g));
	CK(cudaEventDestroy(e0));
	CK(cudaEventDestroy(e1));
	return best * 1000.0;
}

int main(int argc, char **argv)
{
	std::vector<int> rows_list;
	const char *json = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--rows") && i + 1 < argc)
			rows_list.push_back(atoi(argv[++i]));
		else if (!strcmp(argv[i], "--json") && i + 1 < argc)
			json = argv[++i];
		else {
			fprintf(stderr, "usage: bench-gemv [--rows N]... [--json PATH]\n");
			return 2;
		}
	}
	if (rows_list.empty())
		rows_list = {1, 8};
	{ // the GEMV's tuning variables, as a session checks them
		struct tpf_diag *d = tpf_diag_create();
		if (tpf_env_check(d) != TPF_OK) {
			tpf_diag_print(d, stderr);
			return 2;
		}
		tpf_diag_free(d);
	}
	for (int r : rows_list)
		if (r < 1 || r > 16) {
			fprintf(stderr, "bench-gemv: --rows %d: expected 1 to 16\n", r);
			return 2;
		}
	FILE *jf = json ? fopen(json, "a") : NULL;
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	const char *opts[] = {"TPF_GEMV", "TPF_GEMV_MMA", "TPF_GEMV_COLS", "TPF_PDL"};
	char variant[256] = "";
	for (const char *o : opts)
		if (getenv(o)) {
			size_t l = strlen(variant);
			snprintf(variant + l, sizeof(variant) - l, "%s%s=%s", l ? "," : "", o, getenv(o));
		}
	if (!variant[0])
		strcpy(variant, "default");
	cudaStream_t s;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	// Llama-3-8B at TP=2: q/k/v merged, o_proj, gate/up merged, down
	static const Shape shapes[] = {
		{"qkv", 4096, 3072}, {"o", 2048, 4096}, {"gate_up", 4096, 14336}, {"down", 7168, 4096}};
	const size_t target = (size_t)512 << 20;
	// a layer's four weights, copied so that a graph streams >= 512 MB
	size_t layer_bytes = 0;
	for (const Shape &sh : shapes)
		layer_bytes += (size_t)sh.K * sh.N * 2;
	const int layers = (int)((target + layer_bytes - 1) / layer_bytes);
	std::vector<std::vector<void *>> w(4);
	for (int si = 0; si < 4; si++)
		for (int l = 0; l < layers; l++) {
			void *p;
			size_t n = (size_t)shapes[si].K * shapes[si].N;
			CK(cudaMalloc(&p, n * 2));
			fill((unsigned short *)p, n, (uint32_t)(si * 977 + l * 131 + 7));
			w[si].push_back(p);
		}
	void *a, *y;
	CK(cudaMalloc(&a, (size_t)16 * 14336 * 2));
	CK(cudaMalloc(&y, (size_t)16 * 14336 * 2));
	fill((unsigned short *)a, (size_t)16 * 14336, 99u);
	CK(cudaDeviceSynchronize());
	printf("device: %s, %d SMs; variant %s\n", prop.name, prop.multiProcessorCount, variant);
	int bad = 0;
	for (int rows : rows_list) {
		// W packed in column tiles (TPF_PHASE_MATMUL_TILED) where the FMA kernel takes this shape
		std::vector<std::vector<void *>> wp(4);
		std::vector<int> tw(4);
		for (int si = 0; si < 4; si++) {
			const int64_t K = shapes[si].K, N = shapes[si].N;
			tw[si] = tpf_cuda_gemv_tile_cols(TPF_DTYPE_BFLOAT16, rows, K, N);
			for (int l = 0; tw[si] && l < layers; l++) {
				// packed on the host as the plan packs a known weight
				const size_t pb = tpf_gemv_packed_bytes(K, N, tw[si], 2);
				std::vector<unsigned char> hw((size_t)K * N * 2), hp(pb);
				CK(cudaMemcpy(hw.data(), w[si][l], hw.size(), cudaMemcpyDeviceToHost));
				tpf_gemv_pack(hw.data(), hp.data(), K, N, tw[si], 2);
				void *p;
				CK(cudaMalloc(&p, pb));
				CK(cudaMemcpy(p, hp.data(), pb, cudaMemcpyHostToDevice));
				wp[si].push_back(p);
			}
		}
		CK(cudaStreamSynchronize(s));
		for (int packed = 0; packed < 2; packed++)
			for (int si = 0; si <= 4; si++) {
				if (packed && (si < 4 ? !tw[si] : !(tw[0] && tw[1] && tw[2] && tw[3])))
					continue;
				std::vector<Call> calls;
				double bytes = 0;
				const char *name = si < 4 ? shapes[si].name : "layer";
				for (int rep = 0; rep < 2; rep++)
					for (int l = 0; l < layers; l++)
						for (int k = 0; k < 4; k++) {
							if (si < 4 && k != si)
								continue;
							calls.push_back({packed ? wp[k][l] : w[k][l], shapes[k].K, shapes[k].N,
									 packed ? tw[k] : 0});
							bytes += (double)shapes[k].K * shapes[k].N * 2;
						}
				double us = time_calls(s, calls, a, y, rows);
				double per = us / (si < 4 ? calls.size() : calls.size() / 4);
				double tbs = bytes / (us * 1e-6) / 1e12;
				const int64_t lastN = calls.back().N;
				uint64_t h = hash_dev(y, (size_t)rows * lastN * 2);
				static uint64_t plain_hash[5];
				if (!packed)
					plain_hash[si] = h;
				const bool same = !packed || h == plain_hash[si];
				bad += !same;
				printf("rows %2d %-8s %-6s %8.2f us/%s  %5.3f TB/s  hash %016llx%s\n", rows, name,
				       packed ? "tiled" : "plain", per, si < 4 ? "call" : "layer", tbs,
				       (unsigned long long)h, same ? "" : "  MISMATCH");
				if (jf)
					fprintf(jf,
						"{\"bench\": \"gemv\", \"device\": \"%s\", \"variant\": \"%s\", "
						"\"layout\": \"%s\", \"rows\": %d, \"shape\": \"%s\", \"us\": %.3f, "
						"\"tbps\": %.4f, \"hash\": \"%016llx\", \"same\": %s}\n",
						prop.name, variant, packed ? "tiled" : "plain", rows, name, per, tbs,
						(unsigned long long)h, same ? "true" : "false");
			}
		for (int si = 0; si < 4; si++)
			for (void *p : wp[si])
				CK(cudaFree(p));
	}
	if (jf)
		fclose(jf);
	if (bad)
		fprintf(stderr, "bench-gemv: %d tiled results differ from the row-major ones\n", bad);
	return bad ? 1 : 0;
}
