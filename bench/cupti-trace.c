/* SPDX-License-Identifier: MIT */
/* Kernel timeline through CUPTI's activity API; see cupti-trace.h. */
#include "cupti-trace.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cupti_activity.h>

typedef CUptiResult (*enable_fn)(CUpti_ActivityKind);
typedef CUptiResult (*flush_fn)(uint32_t);
typedef CUptiResult (*next_fn)(uint8_t *, size_t, CUpti_Activity **);
typedef CUptiResult (*register_fn)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
typedef CUptiResult (*result_string_fn)(CUptiResult, const char **);
typedef CUptiResult (*dropped_fn)(CUcontext, uint32_t, size_t *);

struct record {
	const char *kind;  /* "kernel", "memcpy", "memset" */
	char *name;        /* kernels: the mangled name */
	uint64_t start, end, graph_node, bytes;
	int grid[3], block[3];
	int regs, smem;
	uint32_t stream, graph;
};

static struct {
	void *lib;
	enable_fn enable, disable;
	flush_fn flush;
	next_fn next;
	register_fn reg;
	result_string_fn result_string;
	dropped_fn dropped_fn;
	pthread_mutex_t lock;
	int keep;                  /* records are kept (between start and stop) */
	struct record *recs;
	size_t n, cap;
	int oom;
	size_t dropped;            /* records CUPTI had no buffer room for */
	size_t incomplete;         /* records without an end (start or end 0) */
} T = {.lock = PTHREAD_MUTEX_INITIALIZER};

static const CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
					   CUPTI_ACTIVITY_KIND_MEMSET};
#define BUFFER_BYTES ((size_t)8 << 20)

static int fail(char *err, size_t n, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, n, fmt, ap);
	va_end(ap);
	return -1;
}

static const char *result_text(CUptiResult r)
{
	const char *s = NULL;
	if (T.result_string && T.result_string(r, &s) == CUPTI_SUCCESS && s)
		return s;
	return "unknown CUPTI error";
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
	*buffer = aligned_alloc(8, BUFFER_BYTES);
	*size = *buffer ? BUFFER_BYTES : 0;
	*max_records = 0;
}

static struct record *push(void)
{
	if (T.n == T.cap) {
		size_t cap = T.cap ? 2 * T.cap : 4096;
		struct record *r = realloc(T.recs, cap * sizeof(*r));
		if (!r) {
			T.oom = 1;
			return NULL;
		}
		T.recs = r;
		T.cap = cap;
	}
	struct record *r = &T.recs[T.n++];
	memset(r, 0, sizeof(*r));
	return r;
}

/* a memcpy or memset record (their structs differ, their fields agree) */
static void keep_copy(const char *kind, uint64_t bytes, uint64_t start, uint64_t end, uint32_t stream, uint32_t graph,
		      uint64_t node)
{
	struct record *r = push();
	if (!r)
		return;
	r->kind = kind;
	r->start = start;
	r->end = end;
	r->bytes = bytes;
	r->stream = stream;
	r->graph = graph;
	r->graph_node = node;
}

static void keep_record(const CUpti_Activity *a)
{
	struct record *r;
	if (a->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || a->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
		const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)a;
		if (!(r = push()))
			return;
		r->kind = "kernel";
		r->name = strdup(k->name ? k->name : "?");
		if (!r->name)
			T.oom = 1;
		r->start = k->start;
		r->end = k->end;
		r->grid[0] = k->gridX, r->grid[1] = k->gridY, r->grid[2] = k->gridZ;
		r->block[0] = k->blockX, r->block[1] = k->blockY, r->block[2] = k->blockZ;
		r->regs = k->registersPerThread;
		r->smem = k->staticSharedMemory + k->dynamicSharedMemory;
		r->stream = k->streamId;
		r->graph = k->graphId;
		r->graph_node = k->graphNodeId;
	} else if (a->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
		const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)a;
		keep_copy("memcpy", m->bytes, m->start, m->end, m->streamId, m->graphId, m->graphNodeId);
	} else if (a->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
		const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)a;
		keep_copy("memset", m->bytes, m->start, m->end, m->streamId, m->graphId, m->graphNodeId);
	}
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
	(void)size;
	pthread_mutex_lock(&T.lock);
	CUpti_Activity *a = NULL;
	while (T.next && T.next(buffer, valid, &a) == CUPTI_SUCCESS) {
		if (!T.keep)
			continue;
		size_t before = T.n;
		keep_record(a);
		/* a record a forced flush took before its activity ended */
		if (T.n > before && (!T.recs[T.n - 1].start || !T.recs[T.n - 1].end)) {
			free(T.recs[--T.n].name);
			T.incomplete++;
		}
	}
	size_t dropped = 0;
	if (T.keep && T.dropped_fn && T.dropped_fn(ctx, stream, &dropped) == CUPTI_SUCCESS)
		T.dropped += dropped;
	pthread_mutex_unlock(&T.lock);
	free(buffer);
}

static void clear_records(void)
{
	for (size_t i = 0; i < T.n; i++)
		free(T.recs[i].name);
	T.n = 0;
	T.oom = 0;
	T.dropped = 0;
	T.incomplete = 0;
}

int tpf_trace_open(char *err, size_t n)
{
	if (T.lib)
		return 0;
	const char *names[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !T.lib; i++)
		T.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	if (!T.lib)
		return fail(err, n,
			    "--trace: cannot load libcupti.so.13, .so.12 or .so (last: %s); put the CUDA toolkit's "
			    "CUPTI library on LD_LIBRARY_PATH",
			    dlerror());
	T.enable = (enable_fn)dlsym(T.lib, "cuptiActivityEnable");
	T.disable = (enable_fn)dlsym(T.lib, "cuptiActivityDisable");
	T.flush = (flush_fn)dlsym(T.lib, "cuptiActivityFlushAll");
	T.next = (next_fn)dlsym(T.lib, "cuptiActivityGetNextRecord");
	T.reg = (register_fn)dlsym(T.lib, "cuptiActivityRegisterCallbacks");
	T.result_string = (result_string_fn)dlsym(T.lib, "cuptiGetResultString");
	T.dropped_fn = (dropped_fn)dlsym(T.lib, "cuptiActivityGetNumDroppedRecords");
	if (!T.enable || !T.disable || !T.flush || !T.next || !T.reg) {
		dlclose(T.lib);
		T.lib = NULL;
		T.enable = T.disable = NULL;
		T.flush = NULL;
		T.next = NULL;
		T.reg = NULL;
		return fail(err, n, "--trace: libcupti lacks the activity API");
	}
	CUptiResult r = T.reg(buffer_requested, buffer_completed);
	if (r != CUPTI_SUCCESS) {
		fail(err, n, "--trace: cuptiActivityRegisterCallbacks: %s", result_text(r));
		T.lib = NULL; /* (left loaded: nothing of it runs) */
		return -1;
	}
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		if ((r = T.enable(kinds[i])) != CUPTI_SUCCESS) {
			fail(err, n, "--trace: cuptiActivityEnable(%d): %s", (int)kinds[i], result_text(r));
			for (size_t j = 0; j < i; j++)
				T.disable(kinds[j]);
			T.lib = NULL;
			return -1;
		}
	return 0;
}

int tpf_trace_start(char *err, size_t n)
{
	if (!T.lib)
		return fail(err, n, "--trace: the tracer is not open");
	pthread_mutex_lock(&T.lock);
	T.keep = 0;
	pthread_mutex_unlock(&T.lock);
	CUptiResult r = T.flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
	pthread_mutex_lock(&T.lock);
	clear_records();
	T.keep = 1;
	pthread_mutex_unlock(&T.lock);
	return r == CUPTI_SUCCESS ? 0 : fail(err, n, "--trace: cuptiActivityFlushAll: %s", result_text(r));
}

void tpf_trace_json_string(FILE *out, const char *s)
{
	fputc('"', out);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fprintf(out, "\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			fprintf(out, "\\u%04x", (unsigned char)*s);
		else
			fputc(*s, out);
	}
	fputc('"', out);
}

long tpf_trace_stop(FILE *out, char *err, size_t n)
{
	if (!T.lib)
		return fail(err, n, "--trace: the tracer is not open");
	CUptiResult r = T.flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
	pthread_mutex_lock(&T.lock);
	T.keep = 0;
	long count = -1;
	if (r != CUPTI_SUCCESS) {
		fail(err, n, "--trace: cuptiActivityFlushAll: %s", result_text(r));
	} else if (T.oom) {
		fail(err, n, "--trace: out of memory after %zu records", T.n);
	} else if (T.dropped || T.incomplete) {
		fail(err, n, "--trace: %zu records dropped by CUPTI and %zu left incomplete; trace fewer steps", T.dropped,
		     T.incomplete);
	} else {
		for (size_t i = 0; i < T.n; i++) {
			const struct record *c = &T.recs[i];
			fprintf(out, "{\"kind\": \"%s\", \"name\": ", c->kind);
			tpf_trace_json_string(out, c->name ? c->name : c->kind);
			fprintf(out,
				", \"start_ns\": %llu, \"end_ns\": %llu, \"grid\": [%d, %d, %d], \"block\": [%d, %d, %d], "
				"\"regs\": %d, \"smem\": %d, \"bytes\": %llu, \"stream\": %u, \"graph\": %u, "
				"\"graph_node\": %llu}\n",
				(unsigned long long)c->start, (unsigned long long)c->end, c->grid[0], c->grid[1],
				c->grid[2], c->block[0], c->block[1], c->block[2], c->regs, c->smem,
				(unsigned long long)c->bytes, c->stream, c->graph, (unsigned long long)c->graph_node);
		}
		count = (long)T.n;
	}
	clear_records();
	pthread_mutex_unlock(&T.lock);
	return count;
}

void tpf_trace_close(void)
{
	if (!T.lib)
		return;
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		T.disable(kinds[i]);
	T.flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
	pthread_mutex_lock(&T.lock);
	clear_records();
	free(T.recs);
	T.recs = NULL;
	T.cap = 0;
	pthread_mutex_unlock(&T.lock);
	/* libcupti stays loaded: its threads may still hold its code. */
}
