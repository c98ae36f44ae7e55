/* SPDX-License-Identifier: MIT */
/* The text dump reader (tpf_model_parse_text): printing what it read gives
 * the dump back byte for byte (hand-written dumps of every construct, every
 * code of the small float formats, the fuzz corpus models); what it builds
 * is a well-formed graph (uses, subgraph captures); hand-written text may
 * leave things out; malformed text is an error naming the line and column;
 * allocation failures are a status. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "test-util.h"

/* Parses `text`, prints it, and expects the same text back. */
static void assert_round_trip(const char *text)
{
	struct tpf_model *m = parse_model(text);
	char *back = dump_text(m);

	if (strcmp(back, text) != 0)
		fprintf(stderr, "---- read ----\n%s---- printed ----\n%s---- end ----\n", text, back);
	assert_string_equal(back, text);
	free(back);
	tpf_model_free(m);
}

/* Every model-level line, every attribute kind, every type form, tensor
 * summaries, omitted inputs and outputs, overloads, origins, nameless
 * nodes, subgraphs with captures, functions. */
static const char everything[] =
	"ir_version 11\n"
	"producer \"unit\" \"1.0\"\n"
	"domain \"org.test\"\n"
	"model_version 3\n"
	"opset \"\" 23\n"
	"opset \"ai.tpfuse\" 1\n"
	"opset \"com.microsoft\" 1\n"
	"metadata \"tp_rank\" \"0\"\n"
	"metadata \"tp_world_size\" \"2\"\n"
	"graph \"main\" {\n"
	"  input %0: bf16[T,4096] \"hidden\"\n"
	"  input %1: f32[*] \"any_rank\"\n"
	"  input %2: ?[?,4] \"no_dtype\"\n"
	"  input %3: ? \"untyped\"\n"
	"  input %4: opaque \"seq\"\n"
	"  input %5: f32[2] \"with_default\" default = [1.5, -2.0]\n"
	"  input %6: bool[] \"cond\"\n"
	"  init %7: bf16[4096] \"norm.weight\" (8192 bytes)\n"
	"  init %8: bf16[] \"eps\" = 9.983778e-07\n"
	"  init %9: f32[2,2] \"ext\" (16 bytes, external \"w.data\" offset 4096)\n"
	"  init %10: f32[4] \"lazy\" (16 bytes, not loaded)\n"
	"  init %11: string[2] \"names\" = [\"a\\\"b\", \"\\x01\\n\"]\n"
	"  init %12: i4[3] \"nibbles\" = [-8, 7, 0]\n"
	"  init %13: u2[5] \"crumbs\" = [0, 1, 2, 3, 1]\n"
	"  init %14: f8e4m3fn[4] \"fp8\" = [448.0, -0.001953125, nan, -0.0]\n"
	"  init %15: f4e2m1[4] \"fp4\" = [0.5, 1.0, -6.0, 0.0]\n"
	"  init %16: i64[0] \"empty\" = []\n"
	"  init %17: c64[2] \"complex\" (16 bytes)\n"
	"  %18 = com.microsoft.AllReduce(%0) : bf16[T,4096]  # layer0/ar\n"
	"  %19 = RMSNormalization(%18, %7) {axis=-1, epsilon=1e-06} : bf16[T,4096]  # layer0/norm\n"
	"  %20, _, %21 = ai.tpfuse.Thing(_, %19) {fl=[0.5, 2.0], il=[1, -2], inf=-inf, nan=nan, "
	"none=[], pf=0.1, s=\"q\\\"\\\\\\n\\x01\\x00z\", sl=[\"x\", \"\"], "
	"tl=[tensor<i32[2] = [7, -8]>, tensor<f32[] = 2.5>], tv=tensor<f32[3,3] (36 bytes)>, "
	"zf=1.0} : (?, f32[3])  # t [fuse-x/p1]\n"
	"  %22 = Add(%19, %8) : ?  # -> sum\n"
	"  %23 = custom.Op:v2(%21) : ?  # -> %23 [fuse-y]\n"
	"  custom.Print(%23)\n"
	"  custom.Print(%23)  # [fuse-z/pp]\n"
	"  %24 = If(%6) {else_branch=graph, then_branch=graph} : ?  # branch\n"
	"    else_branch: graph \"else\" {\n"
	"      %25 = Constant() {value_float=2.5} : ?  # k\n"
	"      output %25: ? \"k_out\"\n"
	"    }\n"
	"    then_branch: graph \"then\" {\n"
	"      %26 = Neg(%5) : ?  # neg\n"
	"      %27 = custom.Inner(_, %6) {body=graph} : ?  # inner\n"
	"        body: graph \"body\" {\n"
	"          input %28: i64[] \"i\"\n"
	"          %29 = custom.Use(%5, %19) : ?  # deep\n"
	"          output %29: ? \"deep_out\"\n"
	"        }\n"
	"      output %26: ? \"neg_out\"\n"
	"    }\n"
	"  %30 = custom.Multi(%1) {branches=graphs[2]} : ?  # many\n"
	"    branches[0]: graph \"b0\" {\n"
	"      output %1: f32[*] \"any_rank\"\n"
	"    }\n"
	"    branches[1]: graph \"b1\" {\n"
	"      %31 = Relu(%1) : ?  # -> r\n"
	"      output %31: ? \"r\"\n"
	"    }\n"
	"  output %22: ? \"sum\"\n"
	"  output %24: ? \"branch_out\"\n"
	"  output %22: ? \"sum\"\n"
	"}\n"
	"function \"org.test\" \"Twice\" overload \"o1\" {\n"
	"  attribute \"alpha\"\n"
	"  attribute \"beta\" = 2.0\n"
	"  attribute \"names\" = [\"u\", \"v\"]\n"
	"  opset \"\" 23\n"
	"  metadata \"k\" \"v\"\n"
	"  input %0: ? \"x\"\n"
	"  %1 = Mul(%0, %0) {alpha=@alpha} : ?  # sq\n"
	"  output %1: ? \"y\"\n"
	"}\n"
	"function \"org.test\" \"Empty\" {\n"
	"}\n";

static void test_round_trip_everything(void **state)
{
	(void)state;
	assert_round_trip(everything);
}

/* The example of docs/cli.md: a branch outputs a value it captures, so the
 * captured value's name is only on the subgraph's output line. */
static const char cli_example[] =
	"ir_version 10\n"
	"producer \"pytorch\" \"2.5\"\n"
	"opset \"\" 23\n"
	"opset \"com.microsoft\" 1\n"
	"metadata \"tp_rank\" \"0\"\n"
	"metadata \"tp_world_size\" \"2\"\n"
	"graph \"main\" {\n"
	"  input %0: bf16[T,4096] \"hidden\"\n"
	"  init %1: bf16[4096] \"norm.weight\" (8192 bytes)\n"
	"  init %2: f32[] \"eps\" = 1e-06\n"
	"  init %3: bf16[4096,4096] \"q.weight\" (33554432 bytes, external \"model.data\" offset 8192)\n"
	"  %4 = com.microsoft.AllReduce(%0) : bf16[T,4096]  # layer0/ar\n"
	"  %5 = RMSNormalization(%4, %1) {axis=-1, epsilon=1e-06} : bf16[T,4096]  # layer0/norm\n"
	"  %6, %7 = ai.tpfuse.AllReduceRMSNorm(%0, %5, %1) {epsilon=1e-06} : (bf16[T,4096], "
	"bf16[T,4096])  # fused [fuse-allreduce-rmsnorm/ar+residual+norm]\n"
	"  %8 = Greater(%6, %2) : bool[T,4096]  # cmp\n"
	"  %9 = If(%8) {else_branch=graph, then_branch=graph} : bf16[*]  # branch\n"
	"    else_branch: graph \"else\" {\n"
	"      %10 = Neg(%7) : bf16[T,4096]  # neg\n"
	"      output %10: bf16[T,4096] \"n\"\n"
	"    }\n"
	"    then_branch: graph \"then\" {\n"
	"      output %7: bf16[T,4096] \"r\"\n"
	"    }\n"
	"  output %9: bf16[*] \"out\"\n"
	"}\n"
	"function \"custom.domain\" \"MyFn\" {\n"
	"  attribute \"alpha\"\n"
	"  opset \"\" 23\n"
	"  input %0: ? \"x\"\n"
	"  %1 = Relu(%0) : ?  # -> y\n"
	"  output %1: ? \"y\"\n"
	"}\n";

static void test_round_trip_cli_example(void **state)
{
	(void)state;
	assert_round_trip(cli_example);
	/* the captured value took the name "r", in both branches */
	struct tpf_model *m = parse_model(cli_example);
	struct tpf_node *fused = find_node(m->graph, "fused");
	struct tpf_node *ifn = find_node(m->graph, "branch");
	assert_string_equal(fused->outputs[1]->name, "r");
	struct tpf_graph *else_g = tpf_node_attr(ifn, "else_branch")->g;
	struct tpf_value *cap = find_node(else_g, "neg")->inputs[0];
	assert_int_equal(cap->kind, TPF_VALUE_OUTER);
	assert_string_equal(cap->name, "r");
	assert_ptr_equal(cap->outer, fused->outputs[1]);
	assert_ptr_equal(tpf_graph_find_value(else_g, "r"), cap);
	tpf_model_free(m);
}

/* What the reader built: types, tensors, captures, functions. */
static void test_structure(void **state)
{
	(void)state;
	struct tpf_model *m = parse_model(everything);
	struct tpf_graph *g = m->graph;

	assert_int_equal(m->ir_version, 11);
	assert_int_equal(m->model_version, 3);
	assert_string_equal(tpf_model_metadata(m, "tp_world_size"), "2");
	assert_int_equal(tpf_model_opset(m, "com.microsoft"), 1);
	assert_string_equal(g->name, "main");
	verify_ok(m);

	/* symbolic dims, defaults */
	struct tpf_value *h = tpf_graph_find_value(g, "hidden");
	assert_int_equal(h->type.shape.rank, 2);
	assert_string_equal(h->type.shape.dims[0].param, "T");
	assert_int_equal(h->type.shape.dims[1].value, 4096);
	struct tpf_value *d = tpf_graph_find_value(g, "with_default");
	assert_int_equal(d->kind, TPF_VALUE_INITIALIZER);
	assert_true(d->is_graph_input);
	assert_float_equal(((const float *)d->init->data)[0], 1.5f, 0);
	/* "(N bytes)" is zeros, external and not loaded have no data */
	const struct tpf_tensor *w = tpf_graph_find_value(g, "norm.weight")->init;
	assert_int_equal(w->nbytes, 8192);
	assert_non_null(w->data);
	assert_int_equal(((const uint8_t *)w->data)[8191], 0);
	const struct tpf_tensor *e = tpf_graph_find_value(g, "ext")->init;
	assert_true(e->is_external);
	assert_null(e->data);
	assert_string_equal(e->ext_location, "w.data");
	assert_int_equal(e->ext_offset, 4096);
	assert_null(tpf_graph_find_value(g, "lazy")->init->data);
	const struct tpf_tensor *nib = tpf_graph_find_value(g, "nibbles")->init;
	assert_int_equal(((const uint8_t *)nib->data)[0], 0x78);
	const struct tpf_tensor *s = tpf_graph_find_value(g, "names")->init;
	assert_int_equal(s->n_strings, 2);
	assert_string_equal(s->strings[0], "a\"b");

	/* nodes: omitted input and output, attributes, names, origins */
	struct tpf_node *t = find_node(g, "t");
	assert_non_null(t);
	assert_null(t->inputs[0]);
	assert_null(t->outputs[1]);
	assert_string_equal(t->domain, "ai.tpfuse");
	assert_string_equal(t->origin_pass, "fuse-x");
	assert_string_equal(t->origin_pattern, "p1");
	const struct tpf_attr *a = tpf_node_attr(t, "s");
	assert_int_equal(a->kind, TPF_ATTR_STRING);
	assert_int_equal(a->s_len, 7);
	assert_memory_equal(a->s, "q\"\\\n\x01\0z", 7);
	assert_int_equal(tpf_node_attr(t, "il")->kind, TPF_ATTR_INTS);
	assert_int_equal(tpf_node_attr(t, "fl")->kind, TPF_ATTR_FLOATS);
	assert_int_equal(tpf_node_attr(t, "tl")->kind, TPF_ATTR_TENSORS);
	assert_int_equal(tpf_node_attr(t, "zf")->kind, TPF_ATTR_FLOAT);
	struct tpf_value *sum = tpf_graph_find_value(g, "sum");
	assert_non_null(sum);
	assert_string_equal(sum->producer->name, "");
	assert_int_equal(sum->n_output_refs, 2);
	struct tpf_node *ov = find_op_type(g, "Op");
	assert_string_equal(ov->overload, "v2");
	assert_string_equal(ov->origin_pass, "fuse-y");
	assert_null(ov->origin_pattern);
	assert_null(find_op_type(g, "Print")->origin_pass);
	assert_string_equal(find_op_type(g, "Print")->next->origin_pattern, "pp");

	/* captures: the If records what its branches use of the main graph
	 * (the norm output two graphs down) as implicit inputs, with uses */
	struct tpf_node *ifn = find_node(g, "branch");
	assert_int_equal(ifn->n_implicit, 3); /* with_default, cond, the norm */
	struct tpf_value *normed = find_node(g, "layer0/norm")->outputs[0];
	int found = 0;
	for (size_t i = 0; i < normed->n_uses; i++)
		found |= normed->uses[i].node == ifn && normed->uses[i].index < 0;
	assert_true(found);
	struct tpf_graph *then_g = tpf_node_attr(ifn, "then_branch")->g;
	assert_ptr_equal(then_g->owner, ifn);
	assert_ptr_equal(then_g->parent, g);
	struct tpf_node *loop = find_node(then_g, "inner");
	assert_non_null(loop);
	assert_int_equal(loop->n_implicit, 2);
	struct tpf_graph *body = tpf_node_attr(loop, "body")->g;
	struct tpf_node *deep = find_node(body, "deep");
	assert_int_equal(deep->inputs[1]->kind, TPF_VALUE_OUTER);
	assert_int_equal(deep->inputs[1]->outer->kind, TPF_VALUE_OUTER);
	assert_ptr_equal(deep->inputs[1]->outer->outer, normed);
	struct tpf_node *many = find_node(g, "many");
	assert_int_equal(tpf_node_attr(many, "branches")->n, 2);

	/* functions */
	assert_int_equal(m->n_functions, 2);
	assert_string_equal(m->functions[0].overload, "o1");
	assert_int_equal(m->functions[0].n_attribute_names, 1);
	assert_int_equal(m->functions[0].n_attribute_protos, 2);
	assert_int_equal(m->functions[0].attribute_protos[1].kind, TPF_ATTR_STRINGS);
	struct tpf_node *sq = find_node(m->functions[0].body, "sq");
	assert_string_equal(tpf_node_attr(sq, "alpha")->ref_attr_name, "alpha");
	tpf_model_free(m);
}

/* Every code of the formats of at most 8 bits reads back as printed. */
static void test_small_float_codes(void **state)
{
	(void)state;
	static const enum tpf_dtype types[] = {
		TPF_DTYPE_FLOAT8E4M3FN, TPF_DTYPE_FLOAT8E4M3FNUZ, TPF_DTYPE_FLOAT8E5M2,
		TPF_DTYPE_FLOAT8E5M2FNUZ, TPF_DTYPE_FLOAT8E8M0, TPF_DTYPE_FLOAT4E2M1,
		TPF_DTYPE_INT8, TPF_DTYPE_UINT8, TPF_DTYPE_INT4, TPF_DTYPE_UINT4,
	};
	for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
		struct tpf_model *m = tpf_model_create();
		unsigned bits = tpf_dtype_bits(types[k]), codes = 1u << bits;
		assert_non_null(m);
		for (unsigned c = 0; c < codes; c += 8) {
			uint8_t data[8] = {0};
			int64_t n = 8;
			char name[16];
			for (unsigned i = 0; i < 8; i++) {
				unsigned code = c + i;
				if (bits == 8)
					data[i] = (uint8_t)code;
				else
					data[i / 2] |= (uint8_t)(code << (4 * (i % 2)));
			}
			snprintf(name, sizeof(name), "c%u", c);
			assert_non_null(tpf_graph_add_initializer(m->graph, name, types[k], 1, &n, data,
								  bits == 8 ? 8 : 4));
		}
		char *text = dump_text(m);
		assert_round_trip(text);
		/* the codes themselves come back, but for the several NaNs of a format */
		struct tpf_model *back = parse_model(text);
		for (size_t i = 0; i < m->graph->n_initializers; i++) {
			const struct tpf_tensor *a = m->graph->initializers[i]->init;
			const struct tpf_tensor *b = back->graph->initializers[i]->init;
			assert_int_equal(a->nbytes, b->nbytes);
			if (!strstr(text, "nan"))
				assert_memory_equal(a->data, b->data, a->nbytes);
		}
		free(text);
		tpf_model_free(back);
		tpf_model_free(m);
	}
}

/* float16 and bfloat16 values read back exactly, and values between two
 * codes round to the nearest (ties to even). */
static void test_half_rounding(void **state)
{
	(void)state;
	struct tpf_model *m = parse_model(
		"graph \"\" {\n"
		"  init %0: f16[6] \"h\" = [65504.0, 6e-08, 1.00048828125, 1.0004, 70000.0, -1e-09]\n"
		"  init %1: bf16[4] \"b\" = [1.00390625, 1.005859375, 3.0e38, 1e-45]\n"
		"}\n");
	const uint16_t *h = m->graph->initializers[0]->init->data;
	const uint16_t *b = m->graph->initializers[1]->init->data;
	assert_int_equal(h[0], 0x7bff);
	assert_int_equal(h[1], 0x0001);
	assert_int_equal(h[2], 0x3c00); /* a tie: to even */
	assert_int_equal(h[3], 0x3c00);
	assert_int_equal(h[4], 0x7c00); /* overflow: infinity */
	assert_int_equal(h[5], 0x8000);
	assert_int_equal(b[0], 0x3f80); /* a tie: to even */
	assert_int_equal(b[1], 0x3f81);
	assert_int_equal(b[2], 0x7f62);
	assert_int_equal(b[3], 0x0000);
	tpf_model_free(m);
}

/* Hand-written text: no types, no comments, a value used before its line,
 * comments anywhere, more than 8 elements, integers for float attributes'
 * lists, CRLF line ends. */
static void test_hand_written(void **state)
{
	(void)state;
	struct tpf_model *m = parse_model(
		"# a comment before anything\r\n"
		"opset \"\" 23\r\n"
		"graph \"\" {\r\n"
		"  input %10: f32[16] \"x\"   # the activations\r\n"
		"  init %11: f32[16] \"w\" = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]\r\n"
		"\r\n"
		"  %3 = Mul(%2, %11)\r\n"
		"  %2 = Relu(%10) {alpha=[1, 2.5]}\r\n"
		"  output %3: f32[16] \"y\"\r\n"
		"}\r\n");
	struct tpf_graph *g = m->graph;
	verify_ok(m);
	struct tpf_value *y = tpf_graph_find_value(g, "y");
	assert_non_null(y);
	assert_int_equal(y->type.dtype, TPF_DTYPE_FLOAT); /* from the output line */
	assert_ptr_equal(y->producer->inputs[0]->producer, find_op(g, TPF_OP_RELU));
	assert_int_equal(tpf_node_attr(find_op(g, TPF_OP_RELU), "alpha")->kind, TPF_ATTR_FLOATS);
	assert_float_equal(((const float *)tpf_graph_find_value(g, "w")->init->data)[15], 16.0f, 0);
	/* the value named after its number */
	assert_string_equal(find_op(g, TPF_OP_RELU)->outputs[0]->name, "%2");
	/* a graph that used a value before its line comes sorted */
	assert_int_equal(g->first->op, TPF_OP_RELU);
	tpf_model_free(m);
}

/* Names the dump gives win over names made from numbers, whichever line
 * comes first. */
static void test_names(void **state)
{
	(void)state;
	struct tpf_model *m = parse_model(
		"opset \"\" 23\n"
		"graph \"\" {\n"
		"  input %0: f32[4] \"x\"\n"
		"  %1 = Neg(%0)  # -> %2\n"
		"  %2 = Neg(%1)  # n2\n"
		"  %3 = Neg(%2)  # n3\n"
		"  output %3: f32[4] \"%1\"\n"
		"}\n");
	struct tpf_graph *g = m->graph;
	assert_string_equal(g->first->outputs[0]->name, "%2");
	assert_string_equal(g->outputs[0]->name, "%1");
	assert_ptr_equal(g->outputs[0]->producer, find_node(g, "n3"));
	assert_string_not_equal(find_node(g, "n2")->outputs[0]->name, "%2");
	verify_ok(m);
	tpf_model_free(m);
}

/* Node names the bare comment would read back as other names (a line end
 * eats a trailing CR, a newline splits the line, a trailing ']' reads as an
 * origin, a leading "-> " as an output name) are printed quoted. */
static void test_comment_names(void **state)
{
	(void)state;
	static const char text[] =
		"ir_version 10\n"
		"opset \"\" 23\n"
		"graph \"\" {\n"
		"  input %0: f32[4] \"x\"\n"
		"  %1 = Neg(%0) : f32[4]  # \"cr\\x0d\"\n"
		"  %2 = Neg(%1) : f32[4]  # \"two\\nlines\"\n"
		"  %3 = Neg(%2) : f32[4]  # \"x [y]\"\n"
		"  %4 = Neg(%3) : f32[4]  # \"-> z\"\n"
		"  %5 = Neg(%4) : f32[4]  # \"\\\"q\\\"\"\n"
		"  %6 = Neg(%5) : f32[4]  # \"n]\" [pass/pattern]\n"
		"  %7 = Neg(%6) : f32[4]  # -> \"o\\x0d]\"\n"
		"  %8 = Neg(%7) : f32[4]  # plain [name\n"
		"  output %8: f32[4] \"y\"\n"
		"}\n";
	struct tpf_model *m = parse_model(text);
	struct tpf_graph *g = m->graph;
	struct tpf_node *n;

	assert_non_null(find_node(g, "cr\r"));
	assert_non_null(find_node(g, "two\nlines"));
	assert_non_null(find_node(g, "x [y]"));
	assert_non_null(find_node(g, "-> z"));
	assert_non_null(find_node(g, "\"q\""));
	n = find_node(g, "n]");
	assert_non_null(n);
	assert_string_equal(n->origin_pass, "pass");
	assert_string_equal(n->origin_pattern, "pattern");
	assert_non_null(find_node(g, "plain [name"));
	for (n = g->first; n && n->name && n->name[0]; n = n->next)
		;
	assert_non_null(n);
	assert_string_equal(n->outputs[0]->name, "o\r]");
	tpf_model_free(m);
	assert_round_trip(text);

	/* a bare name that only starts like a quoted one stays as written, and
	 * prints quoted from then on */
	m = parse_model("opset \"\" 23\n"
			"graph \"\" {\n"
			"  input %0: f32[4] \"x\"\n"
			"  %1 = Neg(%0) : f32[4]  # \"half\n"
			"  output %1: f32[4] \"y\"\n"
			"}\n");
	assert_non_null(find_node(m->graph, "\"half"));
	char *back = dump_text(m);
	assert_non_null(strstr(back, "  # \"\\\"half\"\n"));
	free(back);
	tpf_model_free(m);
}

/* Symbolic dims whose bare names would read back as something else (more
 * dims, a static or unknown dim, an unknown rank) print quoted; the reader
 * takes a quoted dim as a name whatever it holds. */
static void test_quoted_dims(void **state)
{
	(void)state;
	static const char text[] =
		"ir_version 10\n"
		"opset \"\" 23\n"
		"graph \"\" {\n"
		"  input %0: f32[\"a,b\",\"12\",\"?\",batch size,\"x]\",\"\\\"q\"] \"x\"\n"
		"  input %1: f32[\"*\"] \"y\"\n"
		"  %2 = Neg(%1) : f32[\"*\"]  # n\n"
		"  output %2: f32[\"*\"] \"z\"\n"
		"}\n";
	static const char *const names[] = {"a,b", "12", "?", "batch size", "x]", "\"q"};
	struct tpf_model *m = parse_model(text);
	const struct tpf_shape *sh = &m->graph->inputs[0]->type.shape;

	assert_int_equal(sh->rank, 6);
	for (int i = 0; i < 6; i++) {
		assert_int_equal(sh->dims[i].value, -1);
		assert_non_null(sh->dims[i].param);
		assert_string_equal(sh->dims[i].param, names[i]);
	}
	sh = &m->graph->inputs[1]->type.shape;
	assert_int_equal(sh->rank, 1);
	assert_string_equal(sh->dims[0].param, "*");
	tpf_model_free(m);
	assert_round_trip(text);
}

/* Op, attribute and graph-attribute names the bare forms cannot hold
 * (spaces, '.', ':', '(', '=', ',') print quoted: op<"domain", "op",
 * "overload">, {"a b"=1}, @"ref name", "else branch": graph. */
static void test_quoted_op_names(void **state)
{
	(void)state;
	static const char text[] =
		"ir_version 10\n"
		"opset \"\" 23\n"
		"graph \"\" {\n"
		"  input %0: f32[4] \"x\"\n"
		"  input %1: bool[] \"c\"\n"
		"  %2 = op<\"my dom\", \"My Op\", \"v 1\">(%0) {\"a b\"=1, \"x=1, y\"=2.0} : f32[4]  # n1\n"
		"  %3 = op<\"\", \"Slice:\">(%2) : ?  # n2\n"
		"  %4 = op<\"\", \"a.b\">(%3) {\"?\"=1} : ?  # n3\n"
		"  %5 = If(%1) {\"else branch\"=graph, then_branch=graph} : ?  # n4\n"
		"    \"else branch\": graph \"e\" {\n"
		"      %6 = Neg(%4) : ?  # n5\n"
		"      output %6: ? \"e_out\"\n"
		"    }\n"
		"    then_branch: graph \"t\" {\n"
		"      output %4: ? \"t_out\"\n"
		"    }\n"
		"  output %5: ? \"y\"\n"
		"}\n"
		"function \"org.test\" \"F\" {\n"
		"  attribute \"al pha\"\n"
		"  input %0: ? \"x\"\n"
		"  %1 = Mul(%0, %0) {alpha=@\"al pha\"} : ?  # sq\n"
		"  output %1: ? \"y\"\n"
		"}\n";
	struct tpf_model *m = parse_model(text);
	struct tpf_graph *g = m->graph;
	struct tpf_node *n = find_node(g, "n1");

	assert_string_equal(n->domain, "my dom");
	assert_string_equal(n->op_type, "My Op");
	assert_string_equal(n->overload, "v 1");
	assert_int_equal(n->n_attrs, 2);
	assert_string_equal(n->attrs[0].name, "a b");
	assert_string_equal(n->attrs[1].name, "x=1, y");
	n = find_node(g, "n2");
	assert_string_equal(n->domain, "");
	assert_string_equal(n->op_type, "Slice:");
	assert_null(n->overload);
	assert_string_equal(find_node(g, "n3")->op_type, "a.b");
	assert_string_equal(find_node(g, "n3")->attrs[0].name, "?");
	n = find_node(g, "n4");
	assert_string_equal(n->attrs[0].name, "else branch");
	assert_non_null(n->attrs[0].g);
	assert_string_equal(n->attrs[0].g->name, "e");
	assert_string_equal(m->functions[0].body->first->attrs[0].ref_attr_name, "al pha");
	tpf_model_free(m);
	assert_round_trip(text);
}

struct bad_case {
	const char *text;
	const char *message; /* expected in the error, with "test:LINE:COL: " */
};

static const struct bad_case bad_cases[] = {
	{"graph \"\" {\n  input %0: f32[4] \"x\"\n", "test:2:1: missing '}' for the graph opened on line 1"},
	{"graph \"\" {\n  %1 = Neg(%0)\n}\n", "test:2:12: value %0 is not defined"},
	{"graph \"\" {\n  input %0: f32[4] \"x\"\n  input %0: f32[4] \"y\"\n}\n",
	 "test:3:9: %0 is defined twice (first on line 2)"},
	{"graph \"\" {\n  input %0: f32[4] \"x\"\n  input %1: f32[4] \"x\"\n}\n",
	 "test:3:20: two values are named \"x\""},
	{"graph \"\" {\n  input %0: f33[4] \"x\"\n}\n", "test:2:13: unknown dtype 'f33'"},
	{"graph \"\" {\n  input %0: f32[4 \"x\"\n}\n", "test:2:13: missing ']' after the dims"},
	{"graph \"\" {\n  input %0: f32[\"a\"b] \"x\"\n}\n", "test:2:20: expected ',' or ']' after a quoted dim"},
	{"graph \"\" {\n  init %0: f32[2] \"w\" = [1.0]\n}\n", "test:2:24: 1 elements for a shape of 2"},
	{"graph \"\" {\n  init %0: f32[1] \"w\" = [1.0, 2.0]\n}\n",
	 "test:2:31: more than the 1 elements of the shape"},
	{"graph \"\" {\n  init %0: i8[1] \"w\" = [300]\n}\n", "test:2:25: '300' is out of the range of i8"},
	{"graph \"\" {\n  init %0: u8[1] \"w\" = [-1]\n}\n", "test:2:25: u8 is unsigned, found '-1'"},
	{"graph \"\" {\n  init %0: f32[1] \"w\" = [abc]\n}\n", "test:2:26: expected a number, found 'abc'"},
	{"graph \"\" {\n  init %0: f8e4m3fn[1] \"w\" = [inf]\n}\n", "test:2:31: f8e4m3fn cannot hold 'inf'"},
	{"graph \"\" {\n  init %0: bf16[4] \"w\" (9 bytes)\n}\n",
	 "test:2:24: 9 bytes, but 4 elements of bf16 take 8"},
	{"graph \"\" {\n  init %0: f32[999999999] \"w\" (3999999996 bytes)\n}\n", "is too large to read from text"},
	/* what the ONNX importer refuses, the text reader refuses too */
	{"graph \"\" {\n  input %0: f32[4] \"\"\n}\n", "test:2:20: an empty name"},
	{"graph \"\" {\n  init %0: f32[1] \"\" = [1.0]\n}\n", "test:2:19: an empty name"},
	{"graph \"\" {\n  input %0: f32[4] \"x\"\n  %1 = Neg(%0)\n  output %1: f32[4] \"\"\n}\n",
	 "test:4:21: an empty name"},
	{"function \"d\" \"\" {\n}\n", "test:1:10: a function needs a name"},
	{"function \"d\" \"f\" {\n  init %0: f32[] \"k\" = 1.0\n}\n", "test:2:1: a function has no initializers"},
	{"graph \"\" {\n  init %0: f32[2] \"w\" (8 bytes, external \"../w.bin\")\n}\n",
	 "test:2:42: external data location \"../w.bin\" contains a '..' component"},
	{"graph \"\" {\n  init %0: f32[2] \"w\" (8 bytes, external \"/etc/w\")\n}\n", "is an absolute path"},
	{"graph \"\" {\n  init %0: f32[2] \"w\" (8 bytes, external \"\")\n}\n", "is empty"},
	{"graph \"\" {\n  init %0: f32[2] \"w\" (12 bytes, external \"w.bin\")\n}\n",
	 "12 bytes, but 2 elements of f32 take 8"},
	{"graph \"\" {\n  init %0: f32[16777216] \"a\" (67108864 bytes)\n"
	 "  init %1: f32[1] \"b\" (4 bytes)\n}\n",
	 "test:3:23: the tensors given by size only"},
	{"graph \"\" {\n  input %0: f32[4] \"x\\q\"\n}\n", "test:2:23: unknown escape '\\q'"},
	{"graph \"\" {\n  input %0: f32[4] \"x\n}\n", "test:2:20: unterminated string"},
	{"graph \"\" {\n  input %0: f32[4] \"x\\x00\"\n}\n", "a name may not contain a NUL byte"},
	{"graph \"\" {\n  %1 = Neg(%0 %2)\n}\n", "test:2:15: expected ',' or ')' after a node input"},
	{"graph \"\" {\n  %1 = Neg()  {a=1, a=2}\n}\n", "test:2:21: attribute 'a' is given twice"},
	{"graph \"\" {\n  %1 = Neg() {a=sparse_tensor<4 bytes>}\n}\n", "sparse_tensor and type_proto"},
	{"graph \"\" {\n  %1 = If() {then_branch=graph}\n}\n", "test:2:1: graph attribute 'then_branch' has no block"},
	{"graph \"\" {\n  %1 = Neg() : (f32[4], f32[4])\n}\n", "test:2:3: 2 output types for 1 outputs"},
	{"graph \"\" {\n  %1 = Neg() junk\n}\n", "test:2:14: unexpected 'junk' after the node"},
	{"graph \"\" {\n  garbage\n}\n", "test:2:3: expected a node ('%N = Op(...)'), input, init or output"},
	{"graph \"\" {\n  %1, %1 = Split()\n}\n", "test:2:7: %1 is defined twice"},
	{"graph \"\" {\n  input %0: f32[4] \"x\"\n  output %0: f32[4] \"y\"\n}\n",
	 "the output is named \"y\", but its value is \"x\""},
	{"graph \"\" {\n  output _\n}\n", "an omitted graph output ('_') cannot be read back"},
	{"graph \"\" {\n}\ngraph \"\" {\n}\n", "test:3:1: a second graph"},
	{"irversion 3\n", "test:1:1: expected ir_version, producer"},
	{"ir_version x\n", "test:1:12: expected an IR version (an integer), found 'x'"},
	{"graph \"\" {\n  input %0: f32[4] \"x\" default = [1.0]\n}\n", "1 elements for a shape of 4"},
	{"graph \"\" {\n  input %99999999999: f32[4] \"x\"\n}\n", "test:2:9: value number too large"},
	{"graph \"\" {\n  %1 = If() {g=graph}\n    g: graph \"\" {\n      %1 = Neg()\n    }\n}\n",
	 "test:4:7: %1 is defined twice (first on line 2)"},
	{"graph \"\" {\n  %1 = Neg()\n    h: graph \"\" {\n}\n", "test:3:5: the node above has no graph attribute 'h'"},
	{"function \"d\" \"f\" {\n  attribute \"g\" = graph\n}\n", "a graph attribute here cannot be read back"},
};

static void test_errors(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
		struct tpf_diag *d = tpf_diag_create();
		struct tpf_model *m = (struct tpf_model *)1;
		const char *text = bad_cases[i].text;
		enum tpf_status st = tpf_model_parse_text(text, strlen(text), "test", &m, d);
		if (st == TPF_OK || d->count == 0 || !strstr(d->entries[0].text, bad_cases[i].message)) {
			fprintf(stderr, "case %zu: status %s, expected '%s', got:\n", i, tpf_status_name(st),
				bad_cases[i].message);
			tpf_diag_print(d, stderr);
		}
		assert_int_not_equal(st, TPF_OK);
		assert_null(m);
		assert_int_equal(d->error_count, 1);
		assert_non_null(strstr(d->entries[0].text, bad_cases[i].message));
		tpf_diag_free(d);
	}
	/* a NUL byte, and no text at all */
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_model *m = NULL;
	assert_int_equal(tpf_model_parse_text("graph \"\" {\n \0}\n", 14, "test", &m, d), TPF_ERR_PARSE);
	assert_non_null(strstr(d->entries[0].text, "test:2:2: a NUL byte in the text"));
	assert_int_equal(tpf_model_parse_text("", 0, NULL, &m, d), TPF_OK);
	assert_non_null(m);
	tpf_model_free(m);
	assert_int_equal(tpf_model_load_text_file("/nonexistent/x.txt", &m, d), TPF_ERR_IO);
	tpf_diag_free(d);
}

/* Every corpus model the importer takes, printed, read back and printed
 * again, gives the same text (comments aside: the dump notes training
 * info and sparse initializers it does not print). */
static char *without_comments(const char *text)
{
	char *out = malloc(strlen(text) + 1), *w = out;
	assert_non_null(out);
	for (const char *s = text; *s;) {
		const char *nl = strchr(s, '\n');
		size_t len = nl ? (size_t)(nl - s) + 1 : strlen(s);
		const char *p = s;
		while (*p == ' ')
			p++;
		if (*p != '#') {
			memcpy(w, s, len);
			w += len;
		}
		s += len;
	}
	*w = '\0';
	return out;
}

static void test_corpus_round_trip(void **state)
{
	(void)state;
	const char *root = getenv("TPF_SOURCE_ROOT");
	char dir[4096];
	int tried = 0;

	if (!root)
		skip();
	snprintf(dir, sizeof(dir), "%s/tests/fuzz/corpus/model", root);
	DIR *dd = opendir(dir);
	if (!dd)
		skip();
	for (struct dirent *de; (de = readdir(dd));) {
		char path[8192];
		struct tpf_model *m = NULL, *back = NULL;
		struct tpf_diag *d = tpf_diag_create();
		if (!strstr(de->d_name, ".onnx")) {
			tpf_diag_free(d);
			continue;
		}
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (tpf_model_load_file(path, &(struct tpf_load_options){.no_external_data = 1}, &m, d)) {
			tpf_diag_free(d);
			continue; /* the malformed seeds */
		}
		tpf_model_infer_shapes(m, NULL);
		char *text = dump_text(m);
		tpf_diag_clear(d);
		enum tpf_status st = tpf_model_parse_text(text, strlen(text), de->d_name, &back, d);
		if (st) {
			/* only what the dump does not hold may stop the reader */
			if (!d->count || !strstr(d->entries[0].text, "sparse_tensor and type_proto"))
				tpf_diag_print(d, stderr);
			assert_non_null(strstr(d->entries[0].text, "sparse_tensor and type_proto"));
		} else {
			char *again = dump_text(back), *a = without_comments(text),
			     *b = without_comments(again);
			if (strcmp(a, b) != 0)
				fprintf(stderr, "%s:\n---- printed ----\n%s---- read back ----\n%s", path, a, b);
			assert_string_equal(a, b);
			tried++;
			free(a);
			free(b);
			free(again);
		}
		free(text);
		tpf_model_free(back);
		tpf_model_free(m);
		tpf_diag_free(d);
	}
	closedir(dd);
	assert_true(tried >= 10);
}

/* Allocation failures: a status, never a crash or a leak (the sanitizer
 * build checks the latter). */
static void test_alloc_failures(void **state)
{
	(void)state;
	size_t len = strlen(everything);
	int passed = 0;

	for (uint64_t n = 1; n < 100000 && passed < 2; n++) {
		struct tpf_diag *d = tpf_diag_create();
		struct tpf_model *m = NULL;
		tpf_alloc_fail_after(n);
		enum tpf_status st = tpf_model_parse_text(everything, len, "test", &m, d);
		tpf_alloc_fail_after(0);
		assert_true(st == TPF_OK || st == TPF_ERR_NOMEM);
		assert_true((st == TPF_OK) == (m != NULL));
		passed = st == TPF_OK ? passed + 1 : 0;
		tpf_model_free(m);
		tpf_diag_free(d);
	}
	assert_int_equal(passed, 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip_everything),
		cmocka_unit_test(test_round_trip_cli_example),
		cmocka_unit_test(test_structure),
		cmocka_unit_test(test_small_float_codes),
		cmocka_unit_test(test_half_rounding),
		cmocka_unit_test(test_hand_written),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_comment_names),
		cmocka_unit_test(test_quoted_dims),
		cmocka_unit_test(test_quoted_op_names),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_corpus_round_trip),
		cmocka_unit_test(test_alloc_failures),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
