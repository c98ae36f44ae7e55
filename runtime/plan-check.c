/* SPDX-License-Identifier: MIT */
/* What a backend can run: the ops, forms and dtypes the runtime refuses,
 * found from the graph alone (tpf_plan_check_model) or while lowering, and
 * reported as one error. */
#include "plan-internal.h"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------ unsupported ops
 * Every (op, dtype) the runtime cannot run, once, with its node count and
 * first node: a plan refusal names all of them in one error. */

struct unsup_entry {
	char op[128];
	enum tpf_dtype dt;
	size_t count;
	char first[160];
	char reason[320];
};

struct tpf_unsupported {
	struct unsup_entry *e;
	size_t n, cap, nodes;
	int nomem;
};

struct tpf_unsupported *tpf_unsupported_create(void)
{
	return tpf_calloc(1, sizeof(struct tpf_unsupported));
}

void tpf_unsupported_free(struct tpf_unsupported *u)
{
	if (u)
		tpf_free(u->e);
	tpf_free(u);
}

size_t tpf_unsupported_count(const struct tpf_unsupported *u)
{
	return u ? u->n : 0;
}

void tpf_unsupported_add(struct tpf_unsupported *u, const struct tpf_node *n, enum tpf_dtype dt,
			 const char *reason)
{
	char op[128];
	if (!u || !n)
		return;
	snprintf(op, sizeof(op), "%s%s%s", n->domain && *n->domain ? n->domain : "",
		 n->domain && *n->domain ? "::" : "", n->op_type ? n->op_type : "?");
	u->nodes++;
	/* a node whose dtype is not known (after a node that has no shapes)
	 * counts with its op's entry */
	for (size_t i = 0; i < u->n; i++)
		if (!strcmp(u->e[i].op, op) &&
		    (u->e[i].dt == dt || dt == TPF_DTYPE_UNDEFINED || u->e[i].dt == TPF_DTYPE_UNDEFINED)) {
			if (u->e[i].dt == TPF_DTYPE_UNDEFINED)
				u->e[i].dt = dt;
			u->e[i].count++;
			return;
		}
	if (u->n == u->cap) {
		size_t cap = u->cap ? 2 * u->cap : 16;
		void *ne = tpf_realloc(u->e, cap * sizeof(*u->e));
		if (!ne) {
			u->nomem = 1;
			return;
		}
		u->e = ne;
		u->cap = cap;
	}
	struct unsup_entry *e = &u->e[u->n++];
	memset(e, 0, sizeof(*e));
	snprintf(e->op, sizeof(e->op), "%s", op);
	e->dt = dt;
	e->count = 1;
	tpf_node_describe(n, e->first, sizeof(e->first));
	/* "node 'X' (Op): why" -> "why" */
	const char *r = reason ? reason : "";
	if (!strncmp(r, "node '", 6)) {
		const char *colon = strstr(r, "): ");
		if (colon)
			r = colon + 3;
	}
	snprintf(e->reason, sizeof(e->reason), "%s", r);
}

enum tpf_status tpf_unsupported_report(const struct tpf_unsupported *u, enum tpf_backend b,
				       struct tpf_diag *d)
{
	if (!u || !u->n)
		return u && u->nomem ? tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory") : TPF_OK;
	size_t cap = 256 + u->n * (sizeof(struct unsup_entry) + 64), at = 0;
	char *text = tpf_malloc(cap);
	if (!text)
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED,
				     "the %s runtime cannot run %zu nodes of this model (%zu kinds of op)",
				     tpf_backend_name(b), u->nodes, u->n);
	at += (size_t)snprintf(text + at, cap - at,
			       "the %s runtime cannot run %zu node%s of this model (%zu kind%s of op):",
			       tpf_backend_name(b), u->nodes, u->nodes == 1 ? "" : "s", u->n, u->n == 1 ? "" : "s");
	for (size_t i = 0; i < u->n && at < cap; i++) {
		const struct unsup_entry *e = &u->e[i];
		char dt[48] = "";
		if (e->dt != TPF_DTYPE_UNDEFINED)
			snprintf(dt, sizeof(dt), " (%s)", tpf_dtype_name(e->dt));
		at += (size_t)snprintf(text + at, cap - at, "\n  %s%s: %zu node%s, the first %s%s%s", e->op, dt,
				       e->count, e->count == 1 ? "" : "s", e->first, e->reason[0] ? ": " : "", e->reason);
	}
	tpf_diag_add(d, TPF_SEV_ERROR, "%s", text);
	tpf_free(text);
	return TPF_ERR_UNSUPPORTED;
}

/* The kernel phases a node lowers to (at most 2), from its op's kernel
 * rows; MAIN for an op without any (reported as unsupported).  None for
 * a Constant (a plan constant) and the collectives that are communicator
 * steps only (lower_node). */
size_t tpf_rt_node_phases(const struct tpf_node *n, enum tpf_kernel_phase *ph)
{
	if (n->op == TPF_OP_CONSTANT || n->op == TPF_OP_MS_ALLREDUCE || n->op == TPF_OP_MS_ALLTOALL)
		return 0;
	size_t np = tpf_kernel_phases(n->op, ph, 2);
	if (!np)
		ph[np++] = TPF_PHASE_MAIN;
	return np;
}

int tpf_rt_runnable_op(const struct tpf_node *n)
{
	return n->op != TPF_OP_UNKNOWN && !tpf_op_has_trait(n->op, TPF_OP_TRAIT_CONTROL_FLOW) && !n->n_implicit;
}

/* Whether backend b has a kernel for node n's phase ph, by the dtype the
 * graph declares or infers for the key operand (unknown: any kernel of the
 * op).  Records a miss in u. */
void tpf_rt_check_kernel(struct tpf_unsupported *u, enum tpf_backend b, const struct tpf_node *n,
			 enum tpf_kernel_phase ph)
{
	char why[160];
	const struct tpf_kernel *any = tpf_kernel_find_any(b, n->op, ph);
	if (!any) {
		const struct tpf_value *v = n->n_inputs ? n->inputs[0] : NULL;
		snprintf(why, sizeof(why), "no %s kernel for this op%s%s", tpf_backend_name(b), ph ? " phase " : "",
			 ph ? tpf_kernel_phase_name(ph) : "");
		tpf_unsupported_add(u, n, v ? tpf_value_dtype(v) : TPF_DTYPE_UNDEFINED, why);
		return;
	}
	const struct tpf_value *key = any->key_input < 0 ? (n->n_outputs ? n->outputs[0] : NULL)
				      : (size_t)any->key_input < n->n_inputs ? n->inputs[any->key_input]
									       : NULL;
	enum tpf_dtype dt = key ? tpf_value_dtype(key) : TPF_DTYPE_UNDEFINED;
	if (dt == TPF_DTYPE_UNDEFINED || tpf_kernel_find(b, n->op, ph, dt))
		return;
	snprintf(why, sizeof(why), "no %s kernel for dtype %s", tpf_backend_name(b), tpf_dtype_name(dt));
	tpf_unsupported_add(u, n, dt, why);
}

/* Records the nodes of g that backend b cannot run, from the graph alone
 * (declared and inferred dtypes; nodes whose inputs are all constants run
 * on the host when the plan is built, with the CPU kernels). */
static enum tpf_status check_graph(const struct tpf_graph *g, enum tpf_backend b, struct tpf_unsupported *u)
{
	size_t n_ids = g->n_values;
	unsigned char *known = tpf_calloc(n_ids + 1, 1);
	if (!known)
		return TPF_ERR_NOMEM;
	tpf_rt_mark_folding(g, known, n_ids);
	for (const struct tpf_node *n = g->first; n; n = n->next) {
		if (!tpf_rt_runnable_op(n)) {
			const struct tpf_value *v = n->n_inputs ? n->inputs[0] : NULL;
			tpf_unsupported_add(u, n, v ? tpf_value_dtype(v) : TPF_DTYPE_UNDEFINED,
					    n->n_implicit && n->op != TPF_OP_UNKNOWN
						    ? "nodes with subgraphs are not supported by the runtime"
						    : "not supported by the runtime");
			continue;
		}
		enum tpf_kernel_phase ph[2];
		size_t np = tpf_rt_node_phases(n, ph);
		for (size_t k = 0; k < np; k++)
			tpf_rt_check_kernel(u, tpf_rt_node_folds(n, known, n_ids) ? TPF_BACKEND_CPU : b, n, ph[k]);
	}
	tpf_free(known);
	return TPF_OK;
}

enum tpf_status tpf_plan_check_model(const struct tpf_model *m, enum tpf_backend b, struct tpf_diag *d)
{
	if (!m || !m->graph)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "plan: no model");
	struct tpf_unsupported *u = tpf_unsupported_create();
	if (!u)
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	enum tpf_status st = check_graph(m->graph, b, u);
	if (!st)
		st = tpf_unsupported_report(u, b, d);
	else
		tpf_diag_fail(d, st, "out of memory");
	tpf_unsupported_free(u);
	return st;
}
