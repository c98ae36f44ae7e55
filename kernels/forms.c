/* SPDX-License-Identifier: MIT */
/* The forms of known ops that the kernels do not run, on any backend: the
 * TPF_KERNEL_FORM rows of kernels.def.  The plan asks them through
 * tpf_kernel_supports before it computes a node's shapes, so that a node
 * the kernels cannot run is refused with what they lack, not with a shape
 * error.  They are no rule of the op (its record in ir/ops/ has those). */
#include "kernel-host.h"

#include <string.h>

/* Variadic broadcasting ops: the operands the kernels walk at most. */
#define FORM_MAX_OPERANDS 8

/* The split kernels' most outputs. */
#define FORM_MAX_SPLIT_OUTPUTS 256

static int present(const struct tpf_kernel_call *c, size_t i)
{
	return i < c->n_in && c->in[i].rank >= 0 && c->in[i].dtype != TPF_DTYPE_UNDEFINED;
}

static enum tpf_status tpf_form_cast(const struct tpf_kernel_call *c, struct tpf_diag *d)
{
	int64_t to = tpf_node_attr_int(c->node, "to", 0);

	if (!tpf_dtype_is_valid((int)to) || to == TPF_DTYPE_STRING || to == TPF_DTYPE_UNDEFINED)
		return tpf_kfail_to(c, d, TPF_ERR_UNSUPPORTED, "cast to dtype %lld not supported",
				 (long long)to);
	return TPF_OK;
}

static enum tpf_status tpf_form_split(const struct tpf_kernel_call *c, struct tpf_diag *d)
{
	if (c->n_out > FORM_MAX_SPLIT_OUTPUTS)
		return tpf_kfail_to(c, d, TPF_ERR_LIMIT, "more than 256 outputs");
	return TPF_OK;
}

/* The NVFP4 kernels quantize whole blocks of block_size (default 16)
 * elements of the last dim, the fp8-group ones whole groups (default 128). */
static enum tpf_status quant_blocks(const struct tpf_kernel_call *c, struct tpf_diag *d, int fp4,
				    int group)
{
	const struct tpf_ktensor *x = &c->in[0];
	int64_t bs = tpf_node_attr_int(c->node, "block_size", group ? 128 : 16);

	if (!present(c, 0))
		return TPF_OK;
	if ((fp4 || group) && (x->rank < 1 || bs <= 0 || x->dims[x->rank - 1] % bs))
		return tpf_kfail_to(c, d, TPF_ERR_INVALID, "last dim is not a multiple of block_size %lld",
				 (long long)bs);
	return TPF_OK;
}

static enum tpf_status tpf_form_fp4_blocks(const struct tpf_kernel_call *c, struct tpf_diag *d)
{
	return quant_blocks(c, d, 1, 0);
}

static enum tpf_status tpf_form_norm_quant_blocks(const struct tpf_kernel_call *c,
						  struct tpf_diag *d)
{
	const char *quant = tpf_node_attr_string(c->node, "quant", "fp8");

	return quant_blocks(c, d, strncmp(quant, "nvfp4", 5) == 0, strcmp(quant, "fp8-group") == 0);
}

static enum tpf_status tpf_form_allreduce(const struct tpf_kernel_call *c, struct tpf_diag *d)
{
	if (c->n_in != 1)
		return tpf_kfail_to(c, d, TPF_ERR_UNSUPPORTED,
				 "an AllReduce of %zu tensors (one per node is supported)", c->n_in);
	return TPF_OK;
}

static enum tpf_status tpf_form_attention(const struct tpf_kernel_call *c, struct tpf_diag *d)
{
	const struct tpf_node *n = c->node;

	if (!present(c, 2) || c->in[0].rank != 4 || c->in[1].rank != 4 || c->in[2].rank != 4)
		return tpf_kfail_to(c, d, TPF_ERR_UNSUPPORTED, "only 4-D Q, K, V are supported");
	if (c->n_out > 3)
		return tpf_kfail_to(c, d, TPF_ERR_UNSUPPORTED, "qk_matmul_output is not supported");
	if (present(c, 3) && c->in[3].rank >= 1 && c->in[1].rank == 4 &&
	    c->in[3].dims[c->in[3].rank - 1] != 1 &&
	    c->in[3].dims[c->in[3].rank - 1] < c->in[1].dims[2] + (present(c, 4) && c->in[4].rank == 4 ? c->in[4].dims[2] : 0))
		return tpf_kfail_to(c, d, TPF_ERR_UNSUPPORTED, "an attn_mask shorter than the keys is not supported");
	if (present(c, 6) && (present(c, 4) || (c->n_out > 1 && c->out[1].rank >= 0)))
		return tpf_kfail_to(c, d, TPF_ERR_UNSUPPORTED, "nonpad_kv_seqlen with past or present K/V is not supported");
	if (tpf_node_attr_int(n, "left_window_size", -1) >= 0 ||
	    tpf_node_attr_int(n, "right_window_size", -1) >= 0)
		return tpf_kfail_to(c, d, TPF_ERR_UNSUPPORTED, "windowed attention is not supported");
	return TPF_OK;
}

static enum tpf_status tpf_form_einsum(const struct tpf_kernel_call *c, struct tpf_diag *d)
{
	return tpf_einsum_form(c, d);
}

enum tpf_status tpf_kernel_supports(enum tpf_op op, const struct tpf_kernel_call *c,
				    struct tpf_diag *d)
{
	if (tpf_op_has_trait(op, TPF_OP_TRAIT_BROADCAST) && c->n_in > FORM_MAX_OPERANDS)
		return tpf_kfail_to(c, d, TPF_ERR_LIMIT, "more than 8 operands");
	switch (op) {
#define TPF_KERNEL(name, op, phase, key, cpu, cuda, fn)
#define TPF_KERNEL_CPU(name, op, phase, key, cpu, fn)
#define TPF_KERNEL_CUDA_WS(name, op, phase, key, cpu, cuda, fn)
#define TPF_KERNEL_FORM(op, fn)                                                                    \
	case TPF_OP_##op:                                                                          \
		return tpf_form_##fn(c, d);
#include "kernels.def"
#undef TPF_KERNEL
#undef TPF_KERNEL_CPU
#undef TPF_KERNEL_CUDA_WS
#undef TPF_KERNEL_FORM
	default:
		return TPF_OK;
	}
}
