/* SPDX-License-Identifier: MIT */
/* The CUDA graphs' cache policy (runtime/graph-cache.h), apart from CUDA:
 * a key's eager run, capture and replays; another key's runs between leave
 * its graph alone (a decode step's graph across prefills); the least
 * recently used entry gives way when all are taken; a failed capture is
 * tried again; dropping one key or all of them destroys exactly their
 * graphs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "graph-cache.h"

/* what destroy was given */
static uintptr_t destroyed[64];
static size_t n_destroyed;

static void destroy(void *exec, void *arg)
{
	assert_ptr_equal(arg, &n_destroyed);
	assert_true(n_destroyed < 64);
	destroyed[n_destroyed++] = (uintptr_t)exec;
}

static void fresh(struct tpf_graph_cache *c)
{
	memset(c, 0, sizeof(*c));
	c->destroy = destroy;
	c->arg = &n_destroyed;
	n_destroyed = 0;
}

/* A fake graph for key. */
static void *graph_of(uint64_t key)
{
	return (void *)(uintptr_t)(0x1000 + key * 16);
}

/* One run of key: what the cache says, and a capture that succeeds (the
 * device's part) unless told to fail. */
static enum tpf_graph_action run(struct tpf_graph_cache *c, uint64_t key, int capture_fails)
{
	enum tpf_graph_action a;
	struct tpf_graph_entry *e = tpf_graph_cache_get(c, key, &a);
	assert_non_null(e);
	assert_true(e->key == key);
	if (a == TPF_GRAPH_REPLAY)
		assert_ptr_equal(e->exec, graph_of(key));
	else
		assert_null(e->exec);
	if (a == TPF_GRAPH_CAPTURE && !capture_fails)
		e->exec = graph_of(key);
	return a;
}

static void test_one_key(void **state)
{
	(void)state;
	struct tpf_graph_cache c;
	fresh(&c);
	assert_int_equal(run(&c, 7, 0), TPF_GRAPH_EAGER);
	assert_int_equal(run(&c, 7, 0), TPF_GRAPH_CAPTURE);
	for (int i = 0; i < 5; i++)
		assert_int_equal(run(&c, 7, 0), TPF_GRAPH_REPLAY);
	assert_int_equal(tpf_graph_cache_count(&c), 1);
	assert_int_equal(n_destroyed, 0);
}

/* decode (key 1) captured; a prefill (key 2) eager, then the decode step
 * replays its graph; the prefill's next run is captured, and both replay */
static void test_keys_between(void **state)
{
	(void)state;
	struct tpf_graph_cache c;
	fresh(&c);
	assert_int_equal(run(&c, 2, 0), TPF_GRAPH_EAGER);
	assert_int_equal(run(&c, 1, 0), TPF_GRAPH_EAGER);
	assert_int_equal(run(&c, 1, 0), TPF_GRAPH_CAPTURE);
	assert_int_equal(run(&c, 1, 0), TPF_GRAPH_REPLAY);
	assert_int_equal(run(&c, 2, 0), TPF_GRAPH_CAPTURE);
	assert_int_equal(run(&c, 1, 0), TPF_GRAPH_REPLAY);
	assert_int_equal(run(&c, 2, 0), TPF_GRAPH_REPLAY);
	assert_int_equal(run(&c, 1, 0), TPF_GRAPH_REPLAY);
	assert_int_equal(tpf_graph_cache_count(&c), 2);
	assert_int_equal(n_destroyed, 0);
}

/* every entry taken: the one used longest ago gives way, its graph
 * destroyed; the others keep theirs */
static void test_least_recent_gives_way(void **state)
{
	(void)state;
	struct tpf_graph_cache c;
	fresh(&c);
	for (uint64_t k = 1; k <= TPF_GRAPH_CACHE_SIZE; k++) {
		assert_int_equal(run(&c, k, 0), TPF_GRAPH_EAGER);
		assert_int_equal(run(&c, k, 0), TPF_GRAPH_CAPTURE);
	}
	assert_int_equal(tpf_graph_cache_count(&c), TPF_GRAPH_CACHE_SIZE);
	assert_int_equal(run(&c, 1, 0), TPF_GRAPH_REPLAY); /* key 2 is now the oldest */
	assert_int_equal(run(&c, 100, 0), TPF_GRAPH_EAGER);
	assert_int_equal(n_destroyed, 1);
	assert_true(destroyed[0] == (uintptr_t)graph_of(2));
	assert_int_equal(run(&c, 1, 0), TPF_GRAPH_REPLAY);
	assert_int_equal(run(&c, 3, 0), TPF_GRAPH_REPLAY);
	assert_int_equal(run(&c, 2, 0), TPF_GRAPH_EAGER); /* starts over; key 4 gives way */
	assert_int_equal(n_destroyed, 2);
	assert_true(destroyed[1] == (uintptr_t)graph_of(4));
	/* a key whose entry holds no graph yet gives way without a destroy */
	assert_int_equal(run(&c, 100, 0), TPF_GRAPH_CAPTURE);
	assert_int_equal(tpf_graph_cache_count(&c), TPF_GRAPH_CACHE_SIZE - 1);
}

static void test_failed_capture(void **state)
{
	(void)state;
	struct tpf_graph_cache c;
	fresh(&c);
	assert_int_equal(run(&c, 5, 0), TPF_GRAPH_EAGER);
	assert_int_equal(run(&c, 5, 1), TPF_GRAPH_CAPTURE);
	assert_int_equal(run(&c, 5, 0), TPF_GRAPH_CAPTURE);
	assert_int_equal(run(&c, 5, 0), TPF_GRAPH_REPLAY);
	assert_int_equal(n_destroyed, 0);
}

static void test_drops(void **state)
{
	(void)state;
	struct tpf_graph_cache c;
	fresh(&c);
	for (uint64_t k = 1; k <= 3; k++) {
		run(&c, k, 0);
		run(&c, k, 0);
	}
	run(&c, 4, 0); /* eager only: no graph */
	tpf_graph_cache_drop_key(&c, 2);
	assert_int_equal(n_destroyed, 1);
	assert_true(destroyed[0] == (uintptr_t)graph_of(2));
	tpf_graph_cache_drop_key(&c, 99); /* not there: nothing */
	assert_int_equal(n_destroyed, 1);
	assert_int_equal(run(&c, 2, 0), TPF_GRAPH_EAGER);
	assert_int_equal(run(&c, 1, 0), TPF_GRAPH_REPLAY);
	tpf_graph_cache_drop_all(&c);
	assert_int_equal(n_destroyed, 3); /* keys 1 and 3; 2 and 4 had none */
	assert_int_equal(tpf_graph_cache_count(&c), 0);
	for (uint64_t k = 1; k <= 4; k++)
		assert_int_equal(run(&c, k, 0), TPF_GRAPH_EAGER);
	/* key 0 is a key like any other */
	assert_int_equal(run(&c, 0, 0), TPF_GRAPH_EAGER);
	assert_int_equal(run(&c, 0, 0), TPF_GRAPH_CAPTURE);
	assert_int_equal(run(&c, 0, 0), TPF_GRAPH_REPLAY);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_one_key),
		cmocka_unit_test(test_keys_between),
		cmocka_unit_test(test_least_recent_gives_way),
		cmocka_unit_test(test_failed_capture),
		cmocka_unit_test(test_drops),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
