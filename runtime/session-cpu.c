/* SPDX-License-Identifier: MIT */
/* The CPU device (host memory, step marks from the host's clock), the
 * device of either backend (tpf_device_create), and the memory a backend
 * has left (tpf_memory_available, tpf_memory_check). */
#include "runtime-internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef TPF_HAVE_CUDA
#include "tpf-cuda-runtime.h"
#include "cuda/tpf-cuda.h"
#endif

/* ------------------------------------------------------------ CPU device */

static void *cpu_alloc(struct tpf_device *dev, size_t bytes)
{
	/* 64-byte alignment for the kernels' sake; aligned_alloc needs a multiple */
	size_t n = (bytes + 63) & ~(size_t)63;
	return aligned_alloc(64, n ? n : 64);
}

static void cpu_free(struct tpf_device *dev, void *p)
{
	free(p);
}

static enum tpf_status cpu_copy(struct tpf_device *dev, void *dst, const void *src, size_t n,
				struct tpf_diag *d)
{
	if (n && dst != src)
		memcpy(dst, src, n);
	return TPF_OK;
}

static enum tpf_status cpu_sync(struct tpf_device *dev, struct tpf_diag *d)
{
	return TPF_OK;
}

/* Timing marks: kernels are synchronous on the CPU, the clock suffices. */
struct cpu_marks {
	double *t;
	size_t n;
};

static double clock_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static enum tpf_status cpu_mark(struct tpf_device *dev, size_t i, struct tpf_diag *d)
{
	struct cpu_marks *m = dev->ctx;
	if (i >= m->n) {
		size_t n = i + 1 > 2 * m->n ? i + 1 : 2 * m->n;
		double *t = tpf_realloc(m->t, n * sizeof(double));
		if (!t)
			return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
		for (size_t k = m->n; k < n; k++)
			t[k] = -1;
		m->t = t;
		m->n = n;
	}
	m->t[i] = clock_ms();
	return TPF_OK;
}

static double cpu_elapsed_ms(struct tpf_device *dev, size_t a, size_t b)
{
	struct cpu_marks *m = dev->ctx;
	if (a >= m->n || b >= m->n || m->t[a] < 0 || m->t[b] < 0)
		return -1;
	return m->t[b] - m->t[a];
}

static void cpu_destroy(struct tpf_device *dev)
{
	struct cpu_marks *m = dev->ctx;
	if (m)
		tpf_free(m->t);
	tpf_free(m);
	tpf_free(dev);
}

enum tpf_status tpf_device_create(enum tpf_backend kind, int local_rank, struct tpf_device **out,
				  struct tpf_diag *d)
{
	*out = NULL;
	if (kind == TPF_BACKEND_CUDA) {
#ifdef TPF_HAVE_CUDA
		return tpf_cuda_device_create(local_rank, out, d);
#else
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "this tpfuse was built without CUDA");
#endif
	}
	if (kind != TPF_BACKEND_CPU)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "unknown backend %d", (int)kind);
	struct tpf_device *dev = tpf_calloc(1, sizeof(*dev));
	struct cpu_marks *marks = tpf_calloc(1, sizeof(*marks));
	if (!dev || !marks) {
		tpf_free(dev);
		tpf_free(marks);
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	}
	dev->kind = TPF_BACKEND_CPU;
	dev->ctx = marks;
	dev->mark = cpu_mark;
	dev->elapsed_ms = cpu_elapsed_ms;
	dev->alloc = cpu_alloc;
	dev->free = cpu_free;
	dev->upload = cpu_copy;
	dev->download = cpu_copy;
	dev->sync = cpu_sync;
	dev->destroy = cpu_destroy;
	*out = dev;
	return TPF_OK;
}

void tpf_device_free(struct tpf_device *dev)
{
	if (dev && dev->destroy)
		dev->destroy(dev);
}

/* ------------------------------------------------------------ memory available */

static int read_u64_file(const char *path, uint64_t *v)
{
	char buf[64];
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	char *end;
	unsigned long long x = strtoull(buf, &end, 10);
	if (end == buf)
		return -1; /* "max" */
	*v = x;
	return 0;
}

/* Host memory a process can still use: MemAvailable, within the cgroup's
 * limit where one is set. */
static int host_available(size_t *out)
{
	uint64_t avail = 0;
	int have = 0;
	FILE *f = fopen("/proc/meminfo", "r");
	if (f) {
		char line[256];
		unsigned long long kb;
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
				avail = (uint64_t)kb * 1024;
				have = 1;
				break;
			}
		fclose(f);
	}
	if (!have) {
		long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
		if (pages <= 0 || size <= 0)
			return -1;
		avail = (uint64_t)pages * (uint64_t)size;
	}
	uint64_t max, cur;
	if (!read_u64_file("/sys/fs/cgroup/memory.max", &max) &&
	    !read_u64_file("/sys/fs/cgroup/memory.current", &cur))
		avail = cur >= max ? 0 : max - cur < avail ? max - cur : avail;
	*out = avail > SIZE_MAX ? SIZE_MAX : (size_t)avail;
	return 0;
}

static int backend_available(enum tpf_backend b, size_t *out)
{
	if (b == TPF_BACKEND_CPU)
		return host_available(out);
#ifdef TPF_HAVE_CUDA
	size_t total;
	if (b == TPF_BACKEND_CUDA)
		return tpf_cuda_mem_info(out, &total);
#endif
	return -1;
}

/* What the backend has, capped by TPF_MEMORY_LIMIT. */
int tpf_memory_available(enum tpf_backend b, size_t *out)
{
	long long cap = tpf_env_int("TPF_MEMORY_LIMIT", 0);
	if (backend_available(b, out)) {
		if (cap <= 0)
			return -1;
		*out = (size_t)cap;
		return 0;
	}
	if (cap > 0 && (unsigned long long)cap < *out)
		*out = (size_t)cap;
	return 0;
}

static void human_bytes(size_t n, char *buf, size_t size)
{
	const char *unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
	double v = (double)n;
	int u = 0;
	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, size, "%zu bytes", n);
	else
		snprintf(buf, size, "%.1f %s", v, unit[u]);
}

enum tpf_status tpf_memory_check(enum tpf_backend b, size_t need, const char *what, struct tpf_diag *d)
{
	size_t avail;
	char nb[32], ab[32];
	if (tpf_memory_available(b, &avail))
		return TPF_OK; /* cannot tell: the allocation will say */
	if (need <= avail)
		return TPF_OK;
	human_bytes(need, nb, sizeof(nb));
	human_bytes(avail, ab, sizeof(ab));
	return tpf_diag_fail(d, TPF_ERR_NOMEM, "%s: %s needed, only %s of %s memory available", what, nb, ab,
			     b == TPF_BACKEND_CPU ? "host" : tpf_backend_name(b));
}
