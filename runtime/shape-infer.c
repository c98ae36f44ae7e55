/* SPDX-License-Identifier: MIT */
/* Concrete output shapes and dtypes of a node when the plan is built: the
 * op's own shape function (its record, ir/ops/) called on the bound input
 * dims, every one of them static, and on the values of inputs whose host
 * copies are known (Reshape targets, Slice bounds, TopK's K, ...).  An
 * output whose shape depends on a value that is not known is reported as
 * unsupported (data-dependent shapes are out of scope).
 *
 * Forms of an op that the kernels do not run are refused first, by the
 * kernels (tpf_kernel_supports, kernels/forms.c), before any shape is
 * computed. */
#include "runtime-internal.h"

static int present(const struct tpf_kernel_call *c, size_t i)
{
	return i < c->n_in && c->in[i].rank >= 0 && c->in[i].dtype != TPF_DTYPE_UNDEFINED;
}

static void bind_input(const struct tpf_kernel_call *c, size_t i, struct tpf_op_type *t)
{
	int64_t vals[TPF_MAX_VALUES];
	int k, n;

	tpf_op_type_unknown(t);
	t->present = present(c, i);
	if (!t->present)
		return;
	t->dtype = c->in[i].dtype;
	t->rank = c->in[i].rank;
	for (k = 0; k < t->rank; k++)
		t->dims[k] = (struct tpf_dim){c->in[i].dims[k], NULL, NULL};
	n = tpf_kread_ints(&c->in[i], vals, TPF_MAX_VALUES);
	if (n < 0)
		return;
	/* INT64_MIN marks a value that is not known (OP_VALUE_UNKNOWN); a real
	 * one (dynamo writes Slice starts of INT64_MIN for "from the first")
	 * binds as INT64_MIN + 1, which every rule clamps alike */
	for (k = 0; k < n; k++)
		t->values[k] = (struct tpf_dim){vals[k] == INT64_MIN ? INT64_MIN + 1 : vals[k], NULL, NULL};
	t->n_values = n;
}

enum tpf_status tpf_rt_infer(const struct tpf_node *n, struct tpf_kernel_call *c,
			     struct tpf_diag *d)
{
	const struct tpf_op_info *info = tpf_op_info(n->op);
	struct tpf_shape_call call;
	struct tpf_op_type *types;
	enum tpf_status st;
	size_t i, count;

	if (!c->n_out)
		return tpf_rt_node_fail(d, n, TPF_ERR_INVALID, "no outputs");
	if (n->op == TPF_OP_UNKNOWN || tpf_op_has_trait(n->op, TPF_OP_TRAIT_CONTROL_FLOW))
		return tpf_rt_node_fail(d, n, TPF_ERR_UNSUPPORTED, "op %s%s%s is not supported by the runtime",
			    n->domain && *n->domain ? n->domain : "",
			    n->domain && *n->domain ? "::" : "", n->op_type);
	for (i = 0; i < (size_t)info->min_inputs && i < c->n_in; i++)
		if (!present(c, i))
			return tpf_rt_node_fail(d, n, TPF_ERR_INVALID, "required input %zu is missing", i);
	if ((st = tpf_kernel_supports(n->op, c, d)))
		return st;
	/* the node's operands; a call with fewer leaves the rest omitted */
	if (tpf_add_size(n->n_inputs, n->n_outputs, &count) ||
	    !(types = tpf_malloc((count ? count : 1) * sizeof(*types))))
		return tpf_rt_node_fail(d, n, TPF_ERR_NOMEM, "out of memory");
	for (i = 0; i < n->n_inputs; i++)
		bind_input(c, i, &types[i]);
	tpf_shape_call_init(&call, n, TPF_SHAPE_CONCRETE, types);
	call.opset = c->opset;
	call.world = c->world;
	call.diag = d;
	st = tpf_op_infer(&call);
	if (st == TPF_ERR_VERIFY)
		st = TPF_ERR_INVALID;
	for (i = 0; !st && i < c->n_out && i < n->n_outputs; i++) {
		const struct tpf_op_type *t = &call.out[i];
		int k, known = t->rank >= 0 && t->dtype != TPF_DTYPE_UNDEFINED;

		if (!t->present)
			continue; /* omitted: left as the caller marked it */
		for (k = 0; known && k < t->rank; k++)
			known = !t->dims[k].param && t->dims[k].value >= 0;
		if (!known) {
			st = tpf_rt_node_fail(d, n, TPF_ERR_UNSUPPORTED,
				  "the shape of output %zu depends on values not known when the plan "
				  "is built (shapes, axes, sizes or K must be constants or computed "
				  "from shapes)",
				  i);
			break;
		}
		if (t->rank > TPF_KERNEL_MAX_RANK) {
			st = tpf_rt_node_fail(d, n, TPF_ERR_LIMIT, "output %zu has rank %d; at most %d supported", i,
				  t->rank, TPF_KERNEL_MAX_RANK);
			break;
		}
		c->out[i].dtype = t->dtype;
		/* an output that may have either of two dtypes (a canonical norm of
		 * a float32 gamma: the input's or gamma's) has the one the graph
		 * declares */
		if (t->alt_dtype != TPF_DTYPE_UNDEFINED && n->outputs[i] &&
		    n->outputs[i]->type.kind == TPF_TYPE_TENSOR && n->outputs[i]->type.dtype == t->alt_dtype)
			c->out[i].dtype = t->alt_dtype;
		c->out[i].rank = t->rank;
		for (k = 0; k < t->rank; k++)
			c->out[i].dims[k] = t->dims[k].value;
	}
	tpf_free(types);
	return st;
}
