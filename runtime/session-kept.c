/* SPDX-License-Identifier: MIT */
/* Kept inputs (tpf_session_keep_inputs): graph inputs that live in device
 * memory of the session's own between runs, outside every plan's arena,
 * so that a step updating one in place (a KV cache written by
 * TensorScatter) leaves the update for the next run and no run copies it
 * from or to the host. */
#include "session-internal.h"

#include <string.h>

/* Writes zeros over `bytes` bytes of device memory at p. */
static enum tpf_status zero_fill(struct tpf_session *s, void *p, size_t bytes, struct tpf_diag *d)
{
	static const unsigned char zeros[1 << 16];
	for (size_t off = 0; off < bytes;) {
		size_t n = bytes - off < sizeof(zeros) ? bytes - off : sizeof(zeros);
		enum tpf_status st = s->dev->upload(s->dev, (char *)p + off, zeros, n, d);
		if (st)
			return st;
		off += n;
	}
	return TPF_OK;
}

static void drop_plans(struct tpf_session *s)
{
	struct bound *cur = s->b;
	for (size_t i = 0; i < TPF_SESSION_PLANS; i++) {
		s->b = &s->slots[i];
		tpf_rt_session_unbind(s);
	}
	s->b = cur;
}

void tpf_rt_kept_free(struct tpf_session *s)
{
	if (s->n_kept)
		tpf_rt_drop_graphs(s);
	for (size_t i = 0; i < s->n_kept; i++) {
		if (s->kept[i].buf)
			s->dev->free(s->dev, s->kept[i].buf);
		tpf_free(s->kept[i].name);
	}
	tpf_free(s->kept);
	tpf_free(s->kept_names);
	s->kept = NULL;
	s->kept_names = NULL;
	s->n_kept = 0;
}

enum tpf_status tpf_session_keep_inputs(struct tpf_session *s, const char *const *names, size_t n,
					struct tpf_diag *d)
{
	if (n && !names)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "tpf_session_keep_inputs: no names");
	drop_plans(s);
	tpf_rt_kept_free(s);
	if (!n)
		return TPF_OK;
	s->kept = tpf_calloc(n, sizeof(*s->kept));
	s->kept_names = tpf_calloc(n, sizeof(*s->kept_names));
	if (!s->kept || !s->kept_names) {
		tpf_rt_kept_free(s);
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		size_t len = names[i] ? strlen(names[i]) : 0;
		if (!len) {
			tpf_rt_kept_free(s);
			return tpf_diag_fail(d, TPF_ERR_INVALID, "kept input %zu has no name", i);
		}
		if (!(s->kept[i].name = tpf_malloc(len + 1))) {
			tpf_rt_kept_free(s);
			return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
		}
		memcpy(s->kept[i].name, names[i], len + 1);
		s->kept_names[i] = s->kept[i].name;
		s->n_kept++;
	}
	return TPF_OK;
}

enum tpf_status tpf_session_clear_kept(struct tpf_session *s, struct tpf_diag *d)
{
	for (size_t i = 0; i < s->n_kept; i++) {
		enum tpf_status st = s->kept[i].buf ? zero_fill(s, s->kept[i].buf, s->kept[i].bytes, d) : TPF_OK;
		if (st)
			return st;
	}
	return TPF_OK;
}

size_t tpf_session_kept_bytes(const struct tpf_session *s)
{
	size_t n = 0;
	for (size_t i = 0; i < s->n_kept; i++)
		n += s->kept[i].buf ? s->kept[i].bytes : 0;
	return n;
}

void *tpf_rt_kept_data(const struct tpf_session *s, int idx)
{
	const struct tpf_plan *p = s->b->plan;
	if (!s->b->kept_of)
		return NULL;
	const struct rt_value *r = &p->values[idx];
	int root = r->alias >= 0 ? r->alias : idx, k = s->b->kept_of[root];
	return k >= 0 ? (char *)s->kept[k].buf + r->alias_off : NULL;
}

enum tpf_status tpf_rt_kept_bind(struct tpf_session *s, int *moved, struct tpf_diag *d)
{
	const struct tpf_plan *p = s->b->plan;
	*moved = 0;
	if (!s->n_kept)
		return TPF_OK;
	if (!s->b->kept_of) {
		s->b->kept_of = tpf_malloc((p->n_values + 1) * sizeof(int));
		if (!s->b->kept_of)
			return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
		for (size_t i = 0; i < p->n_values; i++) {
			const struct rt_value *r = &p->values[i];
			s->b->kept_of[i] = -1;
			for (size_t k = 0; r->is_input && r->name && k < s->n_kept; k++)
				if (!strcmp(s->kept[k].name, r->name))
					s->b->kept_of[i] = (int)k;
		}
	}
	for (size_t i = 0; i < p->n_values; i++) {
		int k = s->b->kept_of[i];
		size_t bytes = p->values[i].t.nbytes;
		if (k < 0 || (s->kept[k].buf && s->kept[k].bytes == bytes))
			continue;
		enum tpf_status st = tpf_memory_check(s->dev->kind, bytes, "a kept input", d);
		if (st)
			return st;
		tpf_rt_drop_graphs(s); /* they point into the old buffer */
		if (s->kept[k].buf)
			s->dev->free(s->dev, s->kept[k].buf);
		s->kept[k].buf = s->dev->alloc(s->dev, bytes ? bytes : 64);
		s->kept[k].bytes = s->kept[k].buf ? bytes : 0;
		if (!s->kept[k].buf)
			return tpf_diag_fail(d, TPF_ERR_NOMEM, "cannot allocate %zu bytes for kept input '%s' on %s",
					     bytes, s->kept[k].name, tpf_backend_name(s->dev->kind));
		if ((st = zero_fill(s, s->kept[k].buf, bytes, d)))
			return st;
		s->kept_gen++;
	}
	*moved = s->b->kept_gen != s->kept_gen;
	s->b->kept_gen = s->kept_gen;
	return TPF_OK;
}
