/* SPDX-License-Identifier: MIT */
/* tpf_plan_print: the steps of a plan, their kernels and operands. */
#include "plan-internal.h"

#include <inttypes.h>
#include <stdio.h>

/* ------------------------------------------------------------ printing */

static void print_type(FILE *f, const struct tpf_ktensor *t)
{
	fprintf(f, "%s[", tpf_dtype_name(t->dtype));
	for (int i = 0; i < t->rank; i++)
		fprintf(f, "%s%lld", i ? "," : "", (long long)t->dims[i]);
	fprintf(f, "]");
}

static void print_operand(FILE *f, const struct tpf_plan *p, int idx)
{
	if (idx < 0) {
		fprintf(f, "-");
		return;
	}
	const struct rt_value *r = &p->values[idx];
	fprintf(f, "%s:", r->name);
	print_type(f, &r->t);
	if (r->known)
		fprintf(f, "@const");
	else if (r->buffer >= 0)
		fprintf(f, "@b%d", r->buffer);
}

void tpf_plan_print_inputs(const struct tpf_plan *p, FILE *f)
{
	int first = 1;
	for (size_t i = 0; i < p->n_values; i++) {
		const struct rt_value *r = &p->values[i];
		if (!r->is_input)
			continue;
		fprintf(f, "%s%s:", first ? "" : ", ", r->name);
		print_type(f, &r->t);
		first = 0;
	}
	if (first)
		fputs("no inputs", f);
}

static const char *step_kind_name(enum rt_step_kind k)
{
	static const char *const names[RT_STEP_KIND_COUNT] = {"kernel", "allreduce", "allgather",
							       "alltoall"};
	return (unsigned)k < RT_STEP_KIND_COUNT ? names[k] : "?";
}

enum tpf_status tpf_plan_print(const struct tpf_plan *p, FILE *f)
{
	struct tpf_plan_stats s;
	char who[256];
	tpf_plan_get_stats(p, &s);
	fprintf(f, "plan: backend %s, rank %d of %d, %zu steps (%zu kernels, %zu collectives), "
		   "%zu nodes folded on the host, %zu views\n",
		tpf_backend_name(p->opt.backend), p->opt.rank, p->opt.world, s.n_steps, s.n_kernel_steps,
		s.n_collective_steps, s.n_folded, s.n_views);
	fprintf(f, "inputs:\n");
	for (size_t i = 0; i < p->n_values; i++) {
		const struct rt_value *r = &p->values[i];
		if (!r->is_input)
			continue;
		fprintf(f, "  ");
		print_operand(f, p, (int)i);
		fprintf(f, "\n");
	}
	fprintf(f, "schedule:\n");
	for (size_t i = 0; i < p->n_steps; i++) {
		const struct rt_step *st = &p->steps[i];
		fprintf(f, "  #%-4zu %-9s %-32s %s", i, step_kind_name(st->kind),
			st->kernel ? st->kernel->name : "comm", tpf_node_describe(st->node, who, sizeof(who)));
		if (st->phase)
			fprintf(f, " [%s]", tpf_kernel_phase_name(st->phase));
		fprintf(f, "\n         (");
		for (size_t k = 0; k < st->n_in; k++) {
			fprintf(f, "%s", k ? ", " : "");
			print_operand(f, p, st->ins[k]);
		}
		fprintf(f, ") -> (");
		for (size_t k = 0; k < st->n_out; k++) {
			fprintf(f, "%s", k ? ", " : "");
			print_operand(f, p, st->outs[k]);
		}
		fprintf(f, ")\n");
	}
	fprintf(f, "outputs:\n");
	for (size_t i = 0; i < p->n_outputs; i++) {
		fprintf(f, "  ");
		print_operand(f, p, p->outputs[i]);
		fprintf(f, "\n");
	}
	fprintf(f, "buffers:\n");
	for (size_t i = 0; i < p->n_buffers; i++) {
		const struct rt_buffer *b = &p->buffers[i];
		fprintf(f, "  b%-4zu offset %10zu size %10zu live [%d, %d] %s\n", i, b->offset, b->size,
			b->first, b->last, p->values[b->value].name);
	}
	fprintf(f, "memory: arena peak %zu bytes (%zu without reuse, %zu buffers), constants %zu bytes\n",
		s.arena_bytes, s.unshared_bytes, s.n_buffers, s.constant_bytes);
	return ferror(f) ? TPF_ERR_IO : TPF_OK;
}
