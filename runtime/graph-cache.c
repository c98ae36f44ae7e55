/* SPDX-License-Identifier: MIT */
/* The CUDA graphs' cache policy (graph-cache.h). */
#include "graph-cache.h"

#include <stddef.h>
#include <string.h>

static void forget(struct tpf_graph_cache *c, struct tpf_graph_entry *e)
{
	if (e->exec && c->destroy)
		c->destroy(e->exec, c->arg);
	memset(e, 0, sizeof(*e));
}

struct tpf_graph_entry *tpf_graph_cache_get(struct tpf_graph_cache *c, uint64_t key,
					    enum tpf_graph_action *action)
{
	struct tpf_graph_entry *hit = NULL, *free_e = NULL, *oldest = NULL;
	for (size_t i = 0; i < TPF_GRAPH_CACHE_SIZE; i++) {
		struct tpf_graph_entry *e = &c->e[i];
		if (!e->used) {
			if (!free_e)
				free_e = e;
		} else if (e->key == key) {
			hit = e;
		} else if (!oldest || e->used < oldest->used) {
			oldest = e;
		}
	}
	if (!hit) {
		hit = free_e ? free_e : oldest;
		forget(c, hit);
		hit->key = key;
	}
	hit->used = ++c->clock;
	*action = hit->exec ? TPF_GRAPH_REPLAY : hit->runs == 0 ? TPF_GRAPH_EAGER : TPF_GRAPH_CAPTURE;
	hit->runs++;
	return hit;
}

void tpf_graph_cache_drop_key(struct tpf_graph_cache *c, uint64_t key)
{
	for (size_t i = 0; i < TPF_GRAPH_CACHE_SIZE; i++)
		if (c->e[i].used && c->e[i].key == key)
			forget(c, &c->e[i]);
}

void tpf_graph_cache_drop_all(struct tpf_graph_cache *c)
{
	for (size_t i = 0; i < TPF_GRAPH_CACHE_SIZE; i++)
		if (c->e[i].used)
			forget(c, &c->e[i]);
}

unsigned tpf_graph_cache_count(const struct tpf_graph_cache *c)
{
	unsigned n = 0;
	for (size_t i = 0; i < TPF_GRAPH_CACHE_SIZE; i++)
		n += c->e[i].exec != NULL;
	return n;
}
