/*
 * The one list of registered passes (private to passes/).
 *
 * Adding a pass is one line here: TPF_PASS(c_name) for a pass defined as
 * `const struct tpf_pass tpf_pass_<c_name>` in its own file under passes/.
 * The list order is the registry order (`tpfuse passes` prints it); the
 * default pipeline is a separate list of names in pass-registry.c.
 *
 * Included without TPF_PASS defined, this file declares the pass objects
 * (extern const struct tpf_pass tpf_pass_<c_name>;).  No include guard: it
 * is an X-macro list, like ir/ops.def.
 */
#ifndef TPF_PASS
#define TPF_PASS(id) extern const struct tpf_pass tpf_pass_##id;
#define TPF_PASS_LIST_DECLARES
#endif

TPF_PASS(dce)
TPF_PASS(remove_identity)
TPF_PASS(remove_noop_cast)
TPF_PASS(fold_constants)
TPF_PASS(cse)
TPF_PASS(coalesce_alltoall)
TPF_PASS(canonicalize_rmsnorm)
TPF_PASS(canonicalize_allgather)
TPF_PASS(fuse_allreduce_rmsnorm)
TPF_PASS(fuse_allreduce_rmsnorm_quant)
TPF_PASS(fuse_sharded_rmsnorm)
TPF_PASS(fuse_sigmoid_gate)
TPF_PASS(fuse_residual_rmsnorm)
TPF_PASS(merge_parallel_matmuls)
TPF_PASS(fuse_swiglu)
TPF_PASS(fuse_rotary_embedding)
TPF_PASS(fuse_attention)
TPF_PASS(shard)
TPF_PASS(kv_cache_in_place)
TPF_PASS(last_position_logits)
TPF_PASS(greedy_next_token)
/* lowering to a backend (passes/lower.c) */
TPF_PASS(lower_matmul_transb)
TPF_PASS(lower_matmul_transb_int)
TPF_PASS(lower_matmul_fp8)
TPF_PASS(lower_gated_matmul)

#ifdef TPF_PASS_LIST_DECLARES
#undef TPF_PASS
#undef TPF_PASS_LIST_DECLARES
#endif
