/* SPDX-License-Identifier: MIT */
/*
 * Control flow: If, Loop, Scan.  tpfuse keeps them intact; their bodies are
 * graphs of their own, verified and inferred first.  The shape functions
 * check that each body has the inputs and outputs its node needs and take
 * the output types from the bodies' outputs.
 */
#include "op-def.h"

#include <string.h>

enum { B = 1, I64 };

/* Number of inputs/outputs a body graph must have versus its node
 * ((size_t)-1: any). */
static const struct tpf_graph *check_body(struct tpf_shape_call *c, const char *attr,
					  size_t want_inputs, size_t want_outputs)
{
	const struct tpf_attr *a = tpf_node_attr(c->node, attr);
	const struct tpf_graph *b;

	if (!a || a->kind != TPF_ATTR_GRAPH || !a->g || a->ref_attr_name)
		return NULL;
	b = a->g;
	if (want_inputs != (size_t)-1 && b->n_inputs != want_inputs)
		op_error(c, "subgraph '%s' has %zu inputs; expected %zu", attr, b->n_inputs,
			 want_inputs);
	if (want_outputs != (size_t)-1 && b->n_outputs != want_outputs)
		op_error(c, "subgraph '%s' has %zu outputs; expected %zu", attr, b->n_outputs,
			 want_outputs);
	return b;
}

static void if_shape(struct tpf_shape_call *c)
{
	const struct tpf_graph *tg = check_body(c, "then_branch", 0, c->n_out);
	const struct tpf_graph *eg = check_body(c, "else_branch", 0, c->n_out);
	size_t j;
	int i;

	if (!tg || !eg || (tg->n_outputs && !tg->outputs) || (eg->n_outputs && !eg->outputs))
		return;
	for (j = 0; j < c->n_out && j < tg->n_outputs && j < eg->n_outputs; j++) {
		struct tpf_op_type a, b, *out = &c->out[j];

		op_type_from_value(tg->outputs[j], &a);
		op_type_from_value(eg->outputs[j], &b);
		if (a.dtype == b.dtype)
			out->dtype = a.dtype;
		if (a.rank >= 0 && a.rank == b.rank) {
			out->rank = a.rank;
			for (i = 0; i < a.rank; i++)
				out->dims[i] = (dim_is_static(&a.dims[i]) && dim_is_static(&b.dims[i]) &&
						a.dims[i].value == b.dims[i].value) ||
							       (a.dims[i].param && b.dims[i].param &&
								strcmp(a.dims[i].param, b.dims[i].param) == 0)
						   ? a.dims[i]
						   : dim_unknown();
		}
	}
}

const struct tpf_op_def tpf_op_def_IF = {
	.info = {"", "If", 1, 1, 1, -1},
	.since = 1,
	.traits = TPF_OP_TRAIT_CONTROL_FLOW,
	.inputs = {{"cond", B}},
	.outputs = {{"outputs", 0}},
	.types = {[B] = {"B", DT(BOOL), "bool"}},
	.attrs = (const struct op_attr[]){
		{.name = "then_branch", .kind = TPF_ATTR_GRAPH, .flags = ATTR_REQUIRED},
		{.name = "else_branch", .kind = TPF_ATTR_GRAPH, .flags = ATTR_REQUIRED},
		{0},
	},
	.shape = if_shape,
};

/* body: (iteration, condition, carried...) -> (condition, carried..., scans...) */
static void loop_shape(struct tpf_shape_call *c)
{
	const struct tpf_graph *body = check_body(c, "body", c->n_in, c->n_out + 1);
	size_t carried, j;
	int i;

	if (!body || c->n_in < 2 || (body->n_outputs && !body->outputs))
		return;
	carried = c->n_in - 2;
	for (j = 0; j < c->n_out && 1 + j < body->n_outputs; j++) {
		struct tpf_op_type t, *out = &c->out[j];

		op_type_from_value(body->outputs[1 + j], &t);
		if (j >= carried && t.rank >= 0) {
			/* scan outputs stack one value per iteration */
			if (t.rank + 1 > TPF_MAX_RANK)
				continue;
			for (i = t.rank; i > 0; i--)
				t.dims[i] = t.dims[i - 1];
			t.dims[0] = dim_unknown();
			t.rank++;
		}
		out->dtype = t.dtype;
		op_type_shape_of(out, &t);
		out->weak = 1; /* a body's types may be less precise than the node's */
	}
}

const struct tpf_op_def tpf_op_def_LOOP = {
	.info = {"", "Loop", 2, -1, 1, -1},
	.since = 1,
	.traits = TPF_OP_TRAIT_CONTROL_FLOW,
	.inputs = {{"M", I64, OPND_OPTIONAL}, {"cond", B, OPND_OPTIONAL}, {"v_initial", 0}},
	.outputs = {{"v_final_and_scan_outputs", 0}},
	.types = {[B] = {"B", DT(BOOL), "bool"}, [I64] = {"I", DT(INT64), "int64"}},
	.attrs = (const struct op_attr[]){
		{.name = "body", .kind = TPF_ATTR_GRAPH, .flags = ATTR_REQUIRED}, {0}},
	.shape = loop_shape,
};

static void scan_shape(struct tpf_shape_call *c)
{
	/* before opset 9 the first input is sequence_lens, not a body input */
	if (c->opset > 0 && c->opset < 9)
		check_body(c, "body", c->n_in ? c->n_in - 1 : 0, c->n_out);
	else
		check_body(c, "body", c->n_in, c->n_out);
}

const struct tpf_op_def tpf_op_def_SCAN = {
	.info = {"", "Scan", 1, -1, 1, -1},
	.since = 8,
	.traits = TPF_OP_TRAIT_CONTROL_FLOW,
	.inputs = {{"initial_state_and_scan_inputs", 0}},
	.outputs = {{"final_state_and_scan_outputs", 0}},
	.attrs = (const struct op_attr[]){
		{.name = "body", .kind = TPF_ATTR_GRAPH, .flags = ATTR_REQUIRED},
		{.name = "num_scan_inputs", .kind = TPF_ATTR_INT, .flags = ATTR_REQUIRED},
		{0},
	},
	.forms = {{9, 1, -1, 1}}, /* sequence_lens (input 0) may be omitted */
	.shape = scan_shape,
};
