/* SPDX-License-Identifier: MIT */
/* Private to runtime/: which captured CUDA graph a run uses, apart from
 * CUDA (device-cuda.c keeps the graphs, tests/test-graph-cache.c checks the
 * policy on any machine).
 *
 * A session holds up to TPF_SESSION_PLANS plans (a generation's prefill and
 * its decode step among them); the device keeps a graph for each of up to
 * TPF_GRAPH_CACHE_SIZE of them, by the plan's key.  A key's first run is
 * eager (first-use allocations), its second is captured, later ones replay.
 * Running another plan leaves a graph alone: a decode step's graph outlives
 * the next prompt's prefill.  Where every entry is taken, the one used
 * longest ago gives way.  What moves memory a graph points into (the arena,
 * the workspace, the kept inputs, a peer-memory context) drops them all; an
 * unbound plan drops its own. */
#ifndef TPF_GRAPH_CACHE_H
#define TPF_GRAPH_CACHE_H

#include <stdint.h>

#define TPF_GRAPH_CACHE_SIZE 8

enum tpf_graph_action {
	TPF_GRAPH_EAGER,   /* run the body as it is (the key's first run) */
	TPF_GRAPH_CAPTURE, /* capture the body into the entry's graph, then launch it */
	TPF_GRAPH_REPLAY,  /* launch the entry's graph */
};

struct tpf_graph_entry {
	uint64_t key;
	void *exec;     /* the instantiated graph; NULL until captured */
	unsigned runs;  /* runs with this key since the entry was taken */
	uint64_t used;  /* LRU stamp; 0: a free entry */
};

struct tpf_graph_cache {
	struct tpf_graph_entry e[TPF_GRAPH_CACHE_SIZE];
	uint64_t clock;
	/* frees an entry's graph (cudaGraphExecDestroy after the stream settles) */
	void (*destroy)(void *exec, void *arg);
	void *arg;
};

/* The entry for key (taken from a free one, else from the least recently
 * used, whose graph is destroyed) and what to do with it; counts the run.
 * A capture that fails leaves exec NULL: the next run tries again. */
struct tpf_graph_entry *tpf_graph_cache_get(struct tpf_graph_cache *c, uint64_t key,
					    enum tpf_graph_action *action);
/* Forgets key's entry (its plan is gone). */
void tpf_graph_cache_drop_key(struct tpf_graph_cache *c, uint64_t key);
/* Forgets every entry (memory the graphs point into moved). */
void tpf_graph_cache_drop_all(struct tpf_graph_cache *c);
/* Entries holding a graph. */
unsigned tpf_graph_cache_count(const struct tpf_graph_cache *c);

#endif
