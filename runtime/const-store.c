/* SPDX-License-Identifier: MIT */
/*
 * The constants a session's plans share (runtime-internal.h).
 *
 * A session keeps one plan per input signature, and a decode loop whose
 * cache grows by a token each step makes a new signature every step.  Each
 * plan used to pack its own copies of the weights it reads in column tiles
 * and upload its own device copy of every constant: with a prefill and a
 * decode plan the weights sat on the GPU twice, and a loop over growing
 * cache lengths filled it with one copy per kept plan.  The store holds
 * what depends only on the model's bytes, once per session:
 *
 *   - derived host copies (a weight packed in column tiles, an FP8 weight
 *     transposed), keyed by the source bytes, the derivation and its
 *     parameter;
 *   - device copies, keyed by the host bytes they copy (the model's own
 *     tensors, or a derived copy above).
 *
 * Keys are addresses: only bytes that live as long as the session (the
 * model's tensors, the store's own copies: rt_value.lasting) may be
 * entered, never a plan's folded values or a Constant's scalar that the
 * IR makes anew for each plan, whose addresses a later allocation may
 * reuse.  A derived copy's key also holds its source's geometry: two
 * tensors may share bytes (external data mapped at one offset).  Nothing
 * is dropped before the session ends: everything here is the model's
 * tensors or derives from its weights, at most a few forms of each.
 */
#include <stdint.h>
#include <string.h>

#include "runtime-internal.h"

enum { CS_BYTES = -1 }; /* an entry of bytes that may have a device copy */

struct cs_entry {
	/* key: for CS_BYTES the bytes (src, rows = their count); else the
	 * derivation's source and geometry */
	struct tpf_const_key key;
	void *host;       /* derivations: the copy (owned) */
	size_t nbytes;
	void *dev;        /* CS_BYTES: the device copy, NULL until asked */
};

struct tpf_const_store {
	struct cs_entry *e;
	size_t n, cap;
	uint32_t *slot; /* open addressing: entry index + 1, 0 empty */
	size_t n_slots; /* a power of two, at least twice n */
	size_t dev_bytes, host_bytes;
};

static uint64_t mix(uint64_t h, uint64_t v)
{
	h ^= v + UINT64_C(0x9e3779b97f4a7c15) + (h << 6) + (h >> 2);
	return h * UINT64_C(0xbf58476d1ce4e5b9);
}

static size_t key_hash(const struct tpf_const_key *k)
{
	uint64_t h = mix(0, (uint64_t)(uintptr_t)k->src);
	h = mix(h, (uint64_t)k->rows);
	h = mix(h, (uint64_t)k->cols);
	h = mix(h, ((uint64_t)(uint32_t)k->elem_bytes << 32) | (uint32_t)k->kind);
	h = mix(h, (uint64_t)(uint32_t)k->param);
	return (size_t)(h ^ (h >> 31));
}

static int key_eq(const struct tpf_const_key *a, const struct tpf_const_key *b)
{
	return a->src == b->src && a->rows == b->rows && a->cols == b->cols && a->elem_bytes == b->elem_bytes &&
	       a->kind == b->kind && a->param == b->param;
}

static struct cs_entry *find(const struct tpf_const_store *cs, const struct tpf_const_key *k)
{
	if (!cs || !cs->n_slots)
		return NULL;
	size_t mask = cs->n_slots - 1;
	for (size_t i = key_hash(k) & mask;; i = (i + 1) & mask) {
		uint32_t s = cs->slot[i];
		if (!s)
			return NULL;
		if (key_eq(&cs->e[s - 1].key, k))
			return &cs->e[s - 1];
	}
}

static void place(struct tpf_const_store *cs, size_t idx)
{
	size_t mask = cs->n_slots - 1, i = key_hash(&cs->e[idx].key) & mask;
	while (cs->slot[i])
		i = (i + 1) & mask;
	cs->slot[i] = (uint32_t)(idx + 1);
}

/* A new entry (its key set, the rest zero); NULL when out of memory. */
static struct cs_entry *add(struct tpf_const_store *cs, const struct tpf_const_key *k)
{
	if (cs->n == UINT32_MAX - 1)
		return NULL;
	if (cs->n == cs->cap) {
		size_t cap = cs->cap ? cs->cap * 2 : 64;
		struct cs_entry *e = tpf_realloc(cs->e, cap * sizeof(*e));
		if (!e)
			return NULL;
		cs->e = e;
		cs->cap = cap;
	}
	if (2 * (cs->n + 1) > cs->n_slots) {
		size_t ns = cs->n_slots ? cs->n_slots * 2 : 128;
		uint32_t *slot = tpf_calloc(ns, sizeof(*slot));
		if (!slot)
			return NULL;
		tpf_free(cs->slot);
		cs->slot = slot;
		cs->n_slots = ns;
		for (size_t i = 0; i < cs->n; i++)
			place(cs, i);
	}
	struct cs_entry *e = &cs->e[cs->n];
	memset(e, 0, sizeof(*e));
	e->key = *k;
	place(cs, cs->n++);
	return e;
}

static struct tpf_const_key bytes_key(const void *host, size_t nbytes)
{
	return (struct tpf_const_key){.src = host, .rows = (int64_t)nbytes, .kind = CS_BYTES};
}

struct tpf_const_store *tpf_const_store_create(void)
{
	return tpf_calloc(1, sizeof(struct tpf_const_store));
}

void tpf_const_store_free(struct tpf_const_store *cs, struct tpf_device *dev)
{
	if (!cs)
		return;
	for (size_t i = 0; i < cs->n; i++) {
		if (cs->e[i].dev && dev)
			dev->free(dev, cs->e[i].dev);
		tpf_free(cs->e[i].host);
	}
	tpf_free(cs->e);
	tpf_free(cs->slot);
	tpf_free(cs);
}

void *tpf_const_store_derived(const struct tpf_const_store *cs, const struct tpf_const_key *k)
{
	const struct cs_entry *e = k->kind >= 0 ? find(cs, k) : NULL;
	return e ? e->host : NULL;
}

enum tpf_status tpf_const_store_add_derived(struct tpf_const_store *cs, const struct tpf_const_key *k,
					    void *host, size_t nbytes)
{
	if (!cs || k->kind < 0 || !host || find(cs, k))
		return TPF_ERR_INVALID;
	struct cs_entry *e = add(cs, k);
	if (!e)
		return TPF_ERR_NOMEM;
	e->host = host;
	e->nbytes = nbytes;
	cs->host_bytes += nbytes;
	return TPF_OK;
}

int tpf_const_store_on_device(const struct tpf_const_store *cs, const void *host, size_t nbytes)
{
	struct tpf_const_key k = bytes_key(host, nbytes);
	const struct cs_entry *e = find(cs, &k);
	return e && e->dev;
}

enum tpf_status tpf_const_store_device(struct tpf_const_store *cs, struct tpf_device *dev, const void *host,
				       size_t nbytes, const char *name, void **out, struct tpf_diag *d)
{
	struct tpf_const_key k = bytes_key(host, nbytes);
	struct cs_entry *e = find(cs, &k);
	*out = NULL;
	if (!e && !(e = add(cs, &k)))
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	if (!e->dev) {
		void *p = dev->alloc(dev, nbytes ? nbytes : 1);
		if (!p)
			return tpf_diag_fail(d, TPF_ERR_NOMEM, "cannot allocate constant '%s' (%zu bytes) on %s",
					     name, nbytes, tpf_backend_name(dev->kind));
		enum tpf_status st = dev->upload(dev, p, host, nbytes, d);
		if (st) {
			dev->free(dev, p);
			return st;
		}
		e->dev = p;
		cs->dev_bytes += nbytes;
	}
	*out = e->dev;
	return TPF_OK;
}

size_t tpf_const_store_device_bytes(const struct tpf_const_store *cs)
{
	return cs ? cs->dev_bytes : 0;
}

size_t tpf_const_store_host_bytes(const struct tpf_const_store *cs)
{
	return cs ? cs->host_bytes : 0;
}
