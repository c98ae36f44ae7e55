/* SPDX-License-Identifier: MIT */
/* Status names, diagnostics, allocation wrappers with fault injection,
 * checked size arithmetic and the bump arena every graph owns. */
#include "tpf-ir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *tpf_status_name(enum tpf_status s)
{
	static const char *const names[TPF_STATUS_COUNT] = {
		[TPF_OK] = "ok",
		[TPF_ERR_INVALID] = "invalid argument or model",
		[TPF_ERR_NOMEM] = "out of memory",
		[TPF_ERR_IO] = "I/O error",
		[TPF_ERR_PARSE] = "parse error",
		[TPF_ERR_UNSUPPORTED] = "unsupported",
		[TPF_ERR_VERIFY] = "verification failed",
		[TPF_ERR_LIMIT] = "limit exceeded",
		[TPF_ERR_RUNTIME] = "runtime error",
		[TPF_ERR_CONFLICT] = "an output would replace an input or another output",
	};
	if ((unsigned)s >= TPF_STATUS_COUNT)
		return "unknown status";
	return names[s];
}

/* ------------------------------------------------------------ allocation */

static uint64_t alloc_count;
static uint64_t alloc_fail_at; /* 0: never */

static int alloc_should_fail(void)
{
	alloc_count++;
	return alloc_fail_at != 0 && alloc_count >= alloc_fail_at;
}

void tpf_alloc_fail_after(uint64_t n)
{
	alloc_count = 0;
	alloc_fail_at = n;
}

uint64_t tpf_alloc_count(void)
{
	return alloc_count;
}

void *tpf_malloc(size_t n)
{
	if (alloc_should_fail())
		return NULL;
	return malloc(n ? n : 1);
}

void *tpf_calloc(size_t count, size_t size)
{
	size_t total;

	if (alloc_should_fail())
		return NULL;
	/* checked here, not left to calloc: sanitizer allocators abort on it */
	if (tpf_mul_size(count, size, &total))
		return NULL;
	if (total == 0)
		return calloc(1, 1);
	return calloc(count, size);
}

void *tpf_realloc(void *p, size_t n)
{
	if (alloc_should_fail())
		return NULL;
	return realloc(p, n ? n : 1);
}

void tpf_free(void *p)
{
	free(p);
}

char *tpf_strdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *r = tpf_malloc(n);
	if (r)
		memcpy(r, s, n);
	return r;
}

int tpf_mul_size(size_t a, size_t b, size_t *out)
{
	if (a != 0 && b > SIZE_MAX / a)
		return -1;
	*out = a * b;
	return 0;
}

int tpf_add_size(size_t a, size_t b, size_t *out)
{
	if (b > SIZE_MAX - a)
		return -1;
	*out = a + b;
	return 0;
}

FILE *tpf_fopen_regular(const char *path, const char *what, struct tpf_diag *d, enum tpf_status *st)
{
	enum tpf_status dummy;
	struct stat sb;
	FILE *f;
	int fd, flags;

	if (!st)
		st = &dummy;
	/* O_NONBLOCK: opening a named pipe for reading would wait for a writer */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		*st = tpf_diag_fail(d, TPF_ERR_IO, "%s %s: %s", what, path, strerror(errno));
		return NULL;
	}
	if (fstat(fd, &sb) != 0) {
		*st = tpf_diag_fail(d, TPF_ERR_IO, "%s %s: cannot stat: %s", what, path,
		                    strerror(errno));
		close(fd);
		return NULL;
	}
	if (!S_ISREG(sb.st_mode)) {
		*st = tpf_diag_fail(d, TPF_ERR_IO, "%s %s: not a regular file", what, path);
		close(fd);
		return NULL;
	}
	flags = fcntl(fd, F_GETFL);
	if (flags >= 0)
		(void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
	f = fdopen(fd, "rb");
	if (!f) {
		*st = tpf_diag_fail(d, TPF_ERR_IO, "%s %s: %s", what, path, strerror(errno));
		close(fd);
		return NULL;
	}
	*st = TPF_OK;
	return f;
}

/* ------------------------------------------------------------ diagnostics */

struct tpf_diag *tpf_diag_create(void)
{
	return tpf_calloc(1, sizeof(struct tpf_diag));
}

void tpf_diag_clear(struct tpf_diag *d)
{
	if (!d)
		return;
	for (size_t i = 0; i < d->count; i++)
		tpf_free(d->entries[i].text);
	d->count = 0;
	d->error_count = 0;
	d->dropped = 0;
}

void tpf_diag_free(struct tpf_diag *d)
{
	if (!d)
		return;
	tpf_diag_clear(d);
	tpf_free(d->entries);
	tpf_free(d);
}

void tpf_diag_vadd(struct tpf_diag *d, enum tpf_severity sev, const char *fmt, va_list ap)
{
	if (!d)
		return;
	if (sev == TPF_SEV_ERROR)
		d->error_count++;
	if (d->max_entries && d->count >= d->max_entries) {
		d->dropped++;
		return;
	}
	if (d->count == d->capacity) {
		size_t cap = d->capacity ? d->capacity * 2 : 8;
		struct tpf_diag_entry *e = tpf_realloc(d->entries, cap * sizeof(*e));
		if (!e) {
			d->dropped++;
			return;
		}
		d->entries = e;
		d->capacity = cap;
	}
	va_list ap2;
	va_copy(ap2, ap);
	int len = vsnprintf(NULL, 0, fmt, ap2);
	va_end(ap2);
	if (len < 0) {
		d->dropped++;
		return;
	}
	char *text = tpf_malloc((size_t)len + 1);
	if (!text) {
		d->dropped++;
		return;
	}
	vsnprintf(text, (size_t)len + 1, fmt, ap);
	d->entries[d->count].severity = sev;
	d->entries[d->count].text = text;
	d->count++;
}

void tpf_diag_add(struct tpf_diag *d, enum tpf_severity sev, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	tpf_diag_vadd(d, sev, fmt, ap);
	va_end(ap);
}

enum tpf_status tpf_diag_fail(struct tpf_diag *d, enum tpf_status st, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	tpf_diag_vadd(d, TPF_SEV_ERROR, fmt, ap);
	va_end(ap);
	return st;
}

void tpf_diag_print(const struct tpf_diag *d, FILE *f)
{
	static const char *const label[TPF_SEVERITY_COUNT] = {"note", "warning", "error"};
	if (!d)
		return;
	for (size_t i = 0; i < d->count; i++)
		fprintf(f, "%s: %s\n", label[d->entries[i].severity], d->entries[i].text);
	if (d->dropped)
		fprintf(f, "note: %zu more messages not shown\n", d->dropped);
}

/* ------------------------------------------------------------ arena */

struct arena_chunk {
	struct arena_chunk *next;
	size_t size, used;
	_Alignas(16) unsigned char data[];
};

struct tpf_arena {
	struct arena_chunk *head;
	size_t total;
};

#define ARENA_CHUNK 65536u

struct tpf_arena *tpf_arena_create(void)
{
	return tpf_calloc(1, sizeof(struct tpf_arena));
}

void tpf_arena_free(struct tpf_arena *a)
{
	if (!a)
		return;
	struct arena_chunk *c = a->head;
	while (c) {
		struct arena_chunk *next = c->next;
		tpf_free(c);
		c = next;
	}
	tpf_free(a);
}

void *tpf_arena_alloc(struct tpf_arena *a, size_t n)
{
	size_t need;
	if (tpf_add_size(n, 15, &need))
		return NULL;
	need &= ~(size_t)15;
	if (need == 0)
		need = 16;
	struct arena_chunk *c = a->head;
	if (!c || c->size - c->used < need) {
		size_t size = need > ARENA_CHUNK / 4 ? need : ARENA_CHUNK;
		size_t bytes;
		if (tpf_add_size(sizeof(struct arena_chunk), size, &bytes))
			return NULL;
		struct arena_chunk *nc = tpf_malloc(bytes);
		if (!nc)
			return NULL;
		nc->size = size;
		nc->used = 0;
		if (c && size != ARENA_CHUNK && c->size - c->used >= 1024) {
			/* Big one-off block: keep the current chunk as head so its
			 * free space is still used. */
			nc->next = c->next;
			c->next = nc;
		} else {
			nc->next = c;
			a->head = nc;
		}
		a->total += bytes;
		c = nc;
	}
	void *p = c->data + c->used;
	c->used += need;
	memset(p, 0, n);
	return p;
}

char *tpf_arena_strndup(struct tpf_arena *a, const char *s, size_t n)
{
	char *r = tpf_arena_alloc(a, n + 1);
	if (r) {
		if (n)
			memcpy(r, s, n);
		r[n] = '\0';
	}
	return r;
}

char *tpf_arena_strdup(struct tpf_arena *a, const char *s)
{
	if (!s)
		return NULL;
	return tpf_arena_strndup(a, s, strlen(s));
}

void *tpf_arena_memdup(struct tpf_arena *a, const void *p, size_t n)
{
	void *r = tpf_arena_alloc(a, n);
	if (r && n)
		memcpy(r, p, n);
	return r;
}

size_t tpf_arena_bytes(const struct tpf_arena *a)
{
	return a ? a->total : 0;
}
