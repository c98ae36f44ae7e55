/* SPDX-License-Identifier: MIT */
/* The CUDA device: one GPU per rank, one non-blocking stream, cudaMalloc'ed
 * memory (the session's arena and constants), copies only at the graph's
 * edges, synchronization that polls against a deadline (and the NCCL
 * watchdog) instead of blocking forever, whole-plan CUDA graphs. */
#include "graph-cache.h"
#include "tpf-cuda-runtime.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct cuda_dev {
	int device;
	cudaStream_t stream;
	/* CUDA graphs of the plans, by key (graph-cache.h) */
	struct tpf_graph_cache graphs;
	unsigned long captures, replays, eager;
	int stuck; /* a wait timed out: later waits only check once */
	char model[256]; /* the GPU's name (tpf_device.model) */
	/* timing marks (profiling): events recorded on the stream */
	cudaEvent_t *marks;
	size_t n_marks;
};

static struct tpf_cuda_watchdog g_watchdog;
static int g_have_watchdog;

void tpf_cuda_set_watchdog(const struct tpf_cuda_watchdog *w)
{
	if (w) {
		g_watchdog = *w;
		g_have_watchdog = 1;
	} else {
		memset(&g_watchdog, 0, sizeof(g_watchdog));
		g_have_watchdog = 0;
	}
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static enum tpf_status cuda_err(struct tpf_diag *d, const char *what, cudaError_t e)
{
	return tpf_diag_fail(d, TPF_ERR_RUNTIME, "cuda: %s: %s", what, cudaGetErrorString(e));
}

static double timeout_of(void)
{
	const double env = tpf_env_seconds("TPF_CUDA_TIMEOUT_S", 0);
	if (env > 0)
		return env;
	if (g_have_watchdog && g_watchdog.timeout_s > 0)
		return g_watchdog.timeout_s;
	return 60;
}

/* Waits for the stream: polls, checks the watchdog, gives up after the
 * timeout (aborting the communicator so that stuck kernels end). */
static enum tpf_status stream_wait(struct cuda_dev *cd, struct tpf_diag *d)
{
	double limit = cd->stuck ? 0 : timeout_of();
	double t0 = now_s(), end = t0 + limit;
	unsigned spins = 0;
	for (;;) {
		cudaError_t e = cudaStreamQuery(cd->stream);
		if (e == cudaSuccess) {
			cd->stuck = 0;
			return TPF_OK;
		}
		if (e != cudaErrorNotReady)
			return cuda_err(d, "stream", e);
		if (g_have_watchdog && (spins & 255) == 0) {
			char msg[256] = "";
			if (g_watchdog.poll(g_watchdog.ctx, msg, sizeof(msg))) {
				g_watchdog.abort(g_watchdog.ctx);
				return tpf_diag_fail(d, TPF_ERR_RUNTIME, "GPU %d: %s", cd->device, msg);
			}
		}
		/* polls without sleeping for the first 10 ms: a sleep (20 us
		 * asked, more given) at the end of a decode step of about 1 ms
		 * cost it 6% */
		if (++spins > 64 && now_s() - t0 > 0.01) {
			struct timespec ts = {0, 20000};
			nanosleep(&ts, NULL);
		}
		if ((spins & 63) == 0 && now_s() > end) {
			cd->stuck = 1;
			if (g_have_watchdog)
				g_watchdog.abort(g_watchdog.ctx);
			return tpf_diag_fail(d, TPF_ERR_RUNTIME,
					     "GPU %d: work did not finish within %.0f s (a collective waits for a "
					     "peer that stopped or runs a different schedule?)",
					     cd->device, limit);
		}
	}
}

/* Bounded wait for clean-up paths: 0 when the stream is idle. */
static int settle(struct cuda_dev *cd)
{
	struct tpf_diag *d = tpf_diag_create();
	enum tpf_status st = d ? stream_wait(cd, d) : TPF_ERR_NOMEM;
	tpf_diag_free(d);
	return st != TPF_OK;
}

static void *dev_alloc(struct tpf_device *dev, size_t bytes)
{
	struct cuda_dev *cd = dev->ctx;
	void *p = NULL;
	cudaSetDevice(cd->device);
	if (cudaMalloc(&p, bytes ? bytes : 256) != cudaSuccess) {
		cudaGetLastError();
		return NULL;
	}
	return p;
}

static void dev_free(struct tpf_device *dev, void *p)
{
	struct cuda_dev *cd = dev->ctx;
	if (!p)
		return;
	cudaSetDevice(cd->device);
	/* pending work may still read it; behind a stuck collective the memory
	 * is left alone (cudaFree would wait for the device) */
	if (settle(cd))
		return;
	cudaFree(p);
}

static enum tpf_status dev_upload(struct tpf_device *dev, void *dst, const void *src, size_t n,
				  struct tpf_diag *d)
{
	struct cuda_dev *cd = dev->ctx;
	if (!n)
		return TPF_OK;
	/* from pageable memory the call returns once src has been staged */
	cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, cd->stream);
	return e == cudaSuccess ? TPF_OK : cuda_err(d, "upload", e);
}

static enum tpf_status dev_download(struct tpf_device *dev, void *dst, const void *src, size_t n,
				    struct tpf_diag *d)
{
	struct cuda_dev *cd = dev->ctx;
	enum tpf_status st;
	if (!n)
		return TPF_OK;
	/* bounded wait first: a copy behind a stuck collective would block */
	if ((st = stream_wait(cd, d)))
		return st;
	cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, cd->stream);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(cd->stream);
	return e == cudaSuccess ? TPF_OK : cuda_err(d, "download", e);
}

static enum tpf_status dev_sync(struct tpf_device *dev, struct tpf_diag *d)
{
	return stream_wait(dev->ctx, d);
}

static void destroy_graph(void *exec, void *arg)
{
	if (!settle(arg))
		cudaGraphExecDestroy((cudaGraphExec_t)exec);
}

void tpf_cuda_device_drop_graph(struct tpf_device *dev)
{
	if (dev && dev->kind == TPF_BACKEND_CUDA)
		tpf_graph_cache_drop_all(&((struct cuda_dev *)dev->ctx)->graphs);
}

void tpf_cuda_device_drop_graph_key(struct tpf_device *dev, uint64_t key)
{
	if (dev && dev->kind == TPF_BACKEND_CUDA)
		tpf_graph_cache_drop_key(&((struct cuda_dev *)dev->ctx)->graphs, key);
}

static enum tpf_status dev_mark(struct tpf_device *dev, size_t i, struct tpf_diag *d)
{
	struct cuda_dev *cd = dev->ctx;
	cudaError_t e;
	if (i >= cd->n_marks) {
		size_t n = i + 1 > 2 * cd->n_marks ? i + 1 : 2 * cd->n_marks;
		cudaEvent_t *m = tpf_realloc(cd->marks, n * sizeof(*m));
		if (!m)
			return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
		cd->marks = m;
		for (size_t k = cd->n_marks; k < n; k++)
			if ((e = cudaEventCreate(&m[k])) != cudaSuccess) {
				cd->n_marks = k;
				return cuda_err(d, "timing event", e);
			}
		cd->n_marks = n;
	}
	e = cudaEventRecord(cd->marks[i], cd->stream);
	return e == cudaSuccess ? TPF_OK : cuda_err(d, "timing event", e);
}

static double dev_elapsed_ms(struct tpf_device *dev, size_t a, size_t b)
{
	struct cuda_dev *cd = dev->ctx;
	float ms = 0;
	if (a >= cd->n_marks || b >= cd->n_marks ||
	    cudaEventElapsedTime(&ms, cd->marks[a], cd->marks[b]) != cudaSuccess) {
		cudaGetLastError();
		return -1;
	}
	return ms;
}

static void dev_destroy(struct tpf_device *dev)
{
	struct cuda_dev *cd = dev->ctx;
	if (cd) {
		cudaSetDevice(cd->device);
		tpf_cuda_device_drop_graph(dev);
		for (size_t k = 0; k < cd->n_marks; k++)
			cudaEventDestroy(cd->marks[k]);
		tpf_free(cd->marks);
		if (!settle(cd))
			cudaStreamDestroy(cd->stream);
		tpf_free(cd);
	}
	tpf_free(dev);
}

/* Launches a captured graph once more. */
static enum tpf_status graph_replay(struct cuda_dev *cd, cudaGraphExec_t exec, struct tpf_diag *d)
{
	cudaError_t e = cudaGraphLaunch(exec, cd->stream);
	if (e != cudaSuccess)
		return cuda_err(d, "graph launch", e);
	cd->replays++;
	return TPF_OK;
}

enum tpf_status tpf_cuda_device_run_graph(struct tpf_device *dev, uint64_t key,
					  enum tpf_status (*body)(void *ctx, struct tpf_diag *d), void *ctx,
					  struct tpf_diag *d)
{
	struct cuda_dev *cd = dev->ctx;
	enum tpf_status st;
	enum tpf_graph_action act;
	cudaError_t e;
	if (dev->kind != TPF_BACKEND_CUDA)
		return body(ctx, d);
	struct tpf_graph_entry *g = tpf_graph_cache_get(&cd->graphs, key, &act);
	if (act == TPF_GRAPH_REPLAY)
		return graph_replay(cd, g->exec, d);
	if (act == TPF_GRAPH_EAGER) {
		/* first-use allocations (cuBLASLt, NCCL buffers) happen here */
		cd->eager++;
		return body(ctx, d);
	}
	/* capture; nothing must be pending on the stream */
	if ((st = stream_wait(cd, d)))
		return st;
	cudaGraph_t graph = NULL;
	e = cudaStreamBeginCapture(cd->stream, cudaStreamCaptureModeThreadLocal);
	if (e != cudaSuccess)
		return cuda_err(d, "begin capture", e);
	st = body(ctx, d);
	e = cudaStreamEndCapture(cd->stream, &graph);
	if (st) {
		if (graph)
			cudaGraphDestroy(graph);
		cudaGetLastError();
		return st;
	}
	if (e != cudaSuccess)
		return cuda_err(d, "end capture", e);
	cudaGraphExec_t exec = NULL;
	e = cudaGraphInstantiate(&exec, graph, 0);
	cudaGraphDestroy(graph);
	if (e != cudaSuccess)
		return cuda_err(d, "graph instantiate", e);
	g->exec = exec;
	cd->captures++;
	return graph_replay(cd, exec, d);
}

void tpf_cuda_device_graph_stats(const struct tpf_device *dev, unsigned long *captures,
				 unsigned long *replays, unsigned long *eager)
{
	const struct cuda_dev *cd = dev && dev->kind == TPF_BACKEND_CUDA ? dev->ctx : NULL;
	*captures = cd ? cd->captures : 0;
	*replays = cd ? cd->replays : 0;
	*eager = cd ? cd->eager : 0;
}

enum tpf_status tpf_device_create_cuda(int local_rank, struct tpf_device **out, struct tpf_diag *d)
{
	int count = 0;
	*out = NULL;
	cudaError_t e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess || count <= 0) {
		cudaGetLastError();
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "no CUDA device is visible (%s)",
				     e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
	}
	struct tpf_device *dev = tpf_calloc(1, sizeof(*dev));
	struct cuda_dev *cd = tpf_calloc(1, sizeof(*cd));
	if (!dev || !cd) {
		tpf_free(dev);
		tpf_free(cd);
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	}
	cd->device = (local_rank > 0 ? local_rank : 0) % count;
	cd->graphs.destroy = destroy_graph;
	cd->graphs.arg = cd;
	if ((e = cudaSetDevice(cd->device)) != cudaSuccess ||
	    (e = cudaStreamCreateWithFlags(&cd->stream, cudaStreamNonBlocking)) != cudaSuccess) {
		tpf_free(dev);
		tpf_free(cd);
		return cuda_err(d, "device set-up", e);
	}
	dev->kind = TPF_BACKEND_CUDA;
	dev->ctx = cd;
	dev->stream = cd->stream;
	dev->alloc = dev_alloc;
	dev->free = dev_free;
	dev->upload = dev_upload;
	dev->download = dev_download;
	dev->sync = dev_sync;
	dev->mark = dev_mark;
	dev->elapsed_ms = dev_elapsed_ms;
	dev->destroy = dev_destroy;
	struct cudaDeviceProp prop;
	if (cudaGetDeviceProperties(&prop, cd->device) == cudaSuccess) {
		snprintf(cd->model, sizeof(cd->model), "%s", prop.name);
		dev->model = cd->model;
	} else {
		cudaGetLastError();
	}
	*out = dev;
	return TPF_OK;
}

enum tpf_status tpf_cuda_device_create(int local_rank, struct tpf_device **out, struct tpf_diag *d)
{
	return tpf_device_create_cuda(local_rank, out, d);
}
