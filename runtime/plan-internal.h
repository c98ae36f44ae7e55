/* SPDX-License-Identifier: MIT */
/* Private to the plan's files: plan.c (values, inputs, scheduling, the
 * build), plan-check.c (what a backend can run), plan-lower.c (nodes to
 * steps), plan-memory.c (the arena) and plan-print.c. */
#ifndef TPF_PLAN_INTERNAL_H
#define TPF_PLAN_INTERNAL_H

#include "runtime-internal.h"

/* plan.c: the plan's values and steps */

/* Room in *arr (n elements of elem bytes used, *cap allocated) for one
 * more: 0, or -1 when out of memory. */
int tpf_rt_reserve_one(void **arr, size_t *cap, size_t n, size_t elem);
/* A new plan value for graph value v (NULL: a temporary named name); its
 * index, or -1 when out of memory. */
int tpf_rt_add_value(struct tpf_plan *p, const struct tpf_value *v, const char *name);
/* The plan value of graph value v, or -1. */
int tpf_rt_value_index(const struct tpf_plan *p, const struct tpf_value *v);
/* Appends a step; its index, or -1 when out of memory. */
int tpf_rt_add_step(struct tpf_plan *p, enum rt_step_kind kind, const struct tpf_node *n,
		    const struct tpf_kernel *k, enum tpf_kernel_phase ph, const int *ins, size_t n_in,
		    const int *outs, size_t n_out);
/* The session's store for a copy derived from value w, when w's bytes
 * outlive the plan; else NULL. */
struct tpf_const_store *tpf_rt_shared_store(const struct tpf_plan *p, int w);
/* Hands t's host copy (nbytes) to the store cs, if any, under key k. */
void tpf_rt_share_derived(struct tpf_const_store *cs, const struct tpf_const_key *k, struct rt_value *t,
			  size_t nbytes);
/* Marks (known[id] = 1) the values of g that fold when a plan is built. */
void tpf_rt_mark_folding(const struct tpf_graph *g, unsigned char *known, size_t n_ids);
/* Whether node n's outputs fold (by tpf_rt_mark_folding's marks). */
int tpf_rt_node_folds(const struct tpf_node *n, const unsigned char *known, size_t n_ids);

/* plan-check.c: what a backend runs */

/* The kernel phases node n lowers to (at most 2, in ph); their count. */
size_t tpf_rt_node_phases(const struct tpf_node *n, enum tpf_kernel_phase *ph);
/* Whether the runtime runs nodes of n's kind at all. */
int tpf_rt_runnable_op(const struct tpf_node *n);
/* Records in u a node whose phase ph backend b has no kernel for, by the
 * graph's dtypes. */
void tpf_rt_check_kernel(struct tpf_unsupported *u, enum tpf_backend b, const struct tpf_node *n,
			 enum tpf_kernel_phase ph);

/* plan-lower.c: every node of order (a topological order) to steps, or
 * folded on the host */
enum tpf_status tpf_rt_lower_graph(struct tpf_plan *p, const struct tpf_node **order, size_t n_order,
				   struct tpf_diag *d);

/* plan-memory.c: every step's buffers placed in one arena by liveness */
enum tpf_status tpf_rt_plan_memory(struct tpf_plan *p, struct tpf_diag *d);

#endif /* TPF_PLAN_INTERNAL_H */
