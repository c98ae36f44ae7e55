#!/usr/bin/env bash
# Mutation check of the test suites: plants one small regression at a time
# (a sed edit of one source file) in a scratch git worktree under /tmp,
# rebuilds there, and runs the tests that should notice, then the rest of
# the fast suites (unit, conformance; the MPI oracle at world size 2 where
# the mutant touches what it runs).  Each mutant is reported KILLED (with
# the first test that failed) or SURVIVED; the exit status is 1 when one
# survived, did not apply (its source line changed: update the mutant) or
# broke the build.  The main checkout is never modified.
#
# Not part of CI (it rebuilds the library once per mutant): about 4 minutes
# on 2 cores for all mutants from a fresh worktree.
#
# Usage: scripts/mutants.sh [--list] [--keep] [--work DIR] [--rev REV] [NAME...]
#   NAME...     run only these mutants (default: all; --list shows them)
#   --work DIR  the scratch worktree (default: a new /tmp/tpf-mutants.XXXXXX);
#               an existing one is moved to REV and rebuilt incrementally
#   --keep      keep the worktree and its build afterwards
#   --rev REV   the commit to mutate (default HEAD)
# Environment: TPF_MUTANT_JOBS (ninja -j, default 2).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# ------------------------------------------------------------------ mutants
# mutant NAME FILE SED-EXPRESSION KILLERS DESCRIPTION
#   KILLERS: meson test names to run first, in order; "oracle" runs
#   tests/mpi/oracle.py at world size 2.  After them the unit and
#   conformance suites run in full (the oracle too when KILLERS names it).
names=() files=() exprs=() killers=() descs=()
mutant() {
	names+=("$1") files+=("$2") exprs+=("$3") killers+=("$4") descs+=("$5")
}

mutant importer-float-attr ir/onnx-import.c \
	's|^\(\t*\)a->f = ap->f;$|\1a->f = (float)(int)ap->f;|' \
	"onnx-node-tests fuse-rmsnorm" \
	"the importer truncates float attributes to integers (epsilon 1e-5 becomes 0, alpha 0.5 becomes 0)"

mutant verifier-mixed-dtypes ir/ops/shape.c \
	's|^\(\t*\)} else if (c->in\[first\[o->type\]\].dtype != dt) {$|\1} else if (c->in[first[o->type]].dtype != dt \&\& 0) {|' \
	"verify malformed" \
	"the verifier accepts inputs of different dtypes where an op needs one dtype"

mutant infer-opaque-output ir/infer.c \
	's|^\(\t*\)if (t->dtype != TPF_DTYPE_UNDEFINED \&\& !t->weak) {$|\1if (0) {|' \
	"verify fuzz-replay-model" \
	"inference accepts a tensor op's output declared as a sequence or map, which hides every shape after it from the checks"

mutant pass-merge-element-size passes/merge-parallel-matmuls.c \
	's|^\(\t*\)const size_t esz = tpf_dtype_bits(first->dt) / 8;$|\1const size_t esz = tpf_dtype_bits(cs[0].dt) / 8;|' \
	"passes/merge-parallel-matmuls fuzz-replay-model" \
	"merge-parallel-matmuls sizes the merged weight by the first MatMul reading the input, which need not be in the group (0 bytes when it is no candidate)"

mutant kernel-pdl-unknown-kind kernels/env.c \
	's|^\(\t*\)return m ? m : TPF_PDL_DEFAULT;$|\1return m;|' \
	"env" \
	"a TPF_PDL list that names no kind (a typo, a former level such as 'none') turns every dependent launch of the GPU kernels off instead of keeping the default"

mutant env-check-accepts kernels/env.c \
	's#^\(\t*\)if (!s || tpf_env_well_formed(\&knobs\[i\], s))$#\1if (1)#' \
	"env env-knobs" \
	"a malformed tuning variable (TPF_ONESHOT=off, TPF_ONESHOT_MAX_BYTES=64M) is read as the default instead of stopping the run by name"

mutant pattern-unknown-rank-same-shape passes/pattern.c \
	's|^\(\t*\)if (unknown_rank(a) \|\| unknown_rank(b))$|\1if (0)|' \
	"passes/fuse-allreduce-rmsnorm fuzz-replay-model" \
	"a residual of unknown rank counts as the reduced value's shape: AllReduce + Add + RMSNorm fuse where the residual may broadcast, and the fused op contradicts the norm's declared output"

mutant bench-trace-own-time bench/decode_trace.py \
	's|^\( *\)own = max(0, r\["end_ns"\] - max(r\["start_ns"\], frontier))$|\1own = r["end_ns"] - r["start_ns"]|' \
	"bench-tools" \
	"the decode profile charges every kernel its whole duration, so a dependent launched early (or a kernel inside another) is counted twice and a step's kernels add up to more than the step"

mutant strategy-gpu-table runtime/strategy.c \
	's|^\(\t*\)return gpu \&\& strstr(gpu, "H200") \&\& !strstr(gpu, "GH200")|\1return gpu \&\& strstr(gpu, "H2O0") \&\& !strstr(gpu, "GH200")|' \
	"strategy" \
	"every GPU takes the H100 strategy table, so an H200 runs the plain all-reduce of 129 to 256 tokens at hidden 8192 two-shot where its own measurements say one-shot"

mutant ir-attr-constant-anew ir/graph.c \
	's|^\(\t*\)const struct tpf_tensor \*c = v->attr_const;$|\1const struct tpf_tensor *c = NULL;|' \
	"ir plan-support" \
	"a value_float / value_int(s) Constant's tensor is made anew at every ask, so the model's arena grows with every plan and every plan keeps its own copy"

mutant peer-rows-wrap kernels/peer-rows.h \
	's|^\(\t*\)w.group++;$|\1;|' \
	"peer-rows" \
	"the two-shot all-reduce's walk over the rows a rank does not own stays in the same group when its place wraps: rows sent twice or never, to the wrong place of the owner's slot"

mutant pass-gamma-dtype passes/fuse-allreduce-rmsnorm.c \
	's|^\(\t*\)if (t_y != t_s \&\& t_y != t_g)$|\1if (t_y != t_s \&\& t_y != t_g \&\& 0)|' \
	"passes/fuse-allreduce-rmsnorm fuse-rmsnorm" \
	"the AllReduce + RMSNorm fusion matches a norm whose output dtype is neither the sum's nor gamma's (the peers' mixed-dtype miscompile)"

mutant kernel-fused-norm-eps kernels/cpu/norm.c \
	'/^static enum tpf_status tpf_norm_common/,/^}/s|^\(\t*\)return rms_run(c, \&j);$|\1j.eps *= 100;\n&|' \
	"kernels-cpu oracle" \
	"the fused RMSNorm kernels (ai.tpfuse.RMSNorm, AllReduceRMSNorm's post-reduce phase) use 100x the epsilon: outputs off by about 5e-4 relative"

mutant runtime-buffer-reuse runtime/plan-memory.c \
	's|^\(\t*\)if (y->last < x->first \|\| x->last < y->first)$|\1if (y->last <= x->first \|\| x->last < y->first)|' \
	"runtime oracle" \
	"the memory planner lets a step's output share the bytes of an input that the same step still reads"

mutant runtime-invariant-operands runtime/session.c \
	's|^\(\t*\)return r->known \|\| (r->is_input \&\& !r->written);$|\1return 1;|' \
	"runtime" \
	"every kernel operand is marked invariant, computed ones too (a GPU kernel would read a weight computed in the step before the kernel computing it has finished)"

mutant attention-softcap-refused kernels/cpu/attention.c \
	's|^\(\t*\)int causal = at.causal;$|&\n\1if (softcap > 0.0f)\n\1\treturn tpf_kfail(c, TPF_ERR_UNSUPPORTED, "softcap is not supported");|' \
	"onnx-node-tests kernels-cpu" \
	"the CPU Attention kernel refuses softcap (reported as unsupported)"

mutant verify-loose-quantized runtime/verify.c \
	's|^#define VERIFY_FLIP_FRACTION 0.25$|#define VERIFY_FLIP_FRACTION 1.0|' \
	"run-verify oracle" \
	"tpfuse run --verify lets every element of an output after a quantizer be one FP8 step off (a uniform 5% scale error passes)"

mutant verify-never-mismatch runtime/verify.c \
	's|^\(\t*\)double x = tpf_elem_load(got->dtype, got->data, i);$|\1double x = tpf_elem_load(ref->dtype, ref->data, i);|' \
	"run-verify oracle" \
	"tpfuse run --verify compares the reference with itself and never reports a mismatch"

mutant pass-rotary-halves-unchecked passes/fuse-rotary.c \
	's|^\(\t*\)if (!il \&\& memcmp(row, row + (size_t)half \* esz, (size_t)half \* esz))$|\1if (0 \&\& memcmp(row, row + (size_t)half * esz, (size_t)half * esz))|' \
	"passes/fuse-rotary-embedding-near-misses" \
	"fuse-rotary-embedding takes a constant cos/sin cache whose halves differ for a rotate-half cache (RotaryEmbedding would use the first half for both)"

mutant kernel-rotary-sign kernels/cpu/fused-decode.c \
	's|^\([\t ]*\)to_t(dt, cs \* x1) - to_t(dt, sn \* x2), 1);$|\1to_t(dt, cs * x1) + to_t(dt, sn * x2), 1);|' \
	"onnx-node-tests decode-fusions" \
	"the CPU RotaryEmbedding kernel rotates the first half the wrong way"

mutant kernel-gated-silu kernels/cpu/fused-decode.c \
	's|^\(\t*\)return to_t(t, g \* to_t(t, 1.0 / (1.0 + exp(-g))));$|\1return to_t(t, g * to_t(t, 1.0 / (1.0 + exp(g))));|' \
	"decode-fusions" \
	"the CPU GatedActivation kernel computes SiLU with sigmoid(-g)"

mutant pass-attention-softmax-axis passes/fuse-attention.c \
	's|^\(\t*\)if (!(ax == -1 \|\| (r > 0 \&\& ax == r - 1)))$|\1if (!(ax == -1 \|\| (r > 0 \&\& ax == r - 1)) \&\& 0)|' \
	"passes/fuse-attention-near-misses attention-fusion" \
	"fuse-attention takes a Softmax along another axis than the keys' into Attention"

mutant runtime-split-view-offset runtime/plan-lower.c \
	's|^\(\t*\)y->alias_off = x->alias_off + off;$|\1y->alias_off = x->alias_off;|' \
	"runtime" \
	"a view at an offset (a Split's piece, a Slice's run) starts at the input's first byte"

mutant kernel-gemv-pack-gated kernels/host.c \
	's|^\(\t*\)memcpy(d + h \* es, row + ((size_t)F + (size_t)t \* h) \* es, h \* es);$|\1memcpy(d + h * es, row + (size_t)t * h * es, h * es);|' \
	"plan-lowering" \
	"the merged gate/up weight packed for the folded GatedActivation holds the gate columns twice (no up columns)"

mutant runtime-gated-fold-unrun runtime/plan-lower.c \
	's|^\(\t*\)} else if ((st = add_kernel_step(p, p->opt.backend, n, TPF_PHASE_PRODUCT, ins, 2, \&prod, 1, d))) {$|\1} else if (0) {|' \
	"plan-support plan-lowering" \
	"a GatedMatMul that the packed product does not take runs its activation alone, on a product nothing wrote"

mutant runtime-constants-per-plan runtime/session.c \
	's|^\(\t*\)if (r->lasting) {$|\1if (0) {|' \
	"plan-support" \
	"every plan uploads its own device copy of the model's constants again (the session's store is not used)"

mutant runtime-constant-scalar-shared runtime/plan-lower.c \
	's|^\(\t*\)r->lasting = 1; /\* the Constant.s tensor is the model.s \*/$|\1r->lasting = n->attrs[0].kind == TPF_ATTR_TENSOR;|' \
	"plan-support" \
	"a Constant's value_float is the plan's own again: every plan uploads its own copy of the scalar the model holds once"

mutant runtime-shared-constant-freed runtime/session.c \
	's|^\(\t*\)if (s->b->const_dev\[i\] \&\& !p->values\[i\].lasting)$|\1if (s->b->const_dev[i])|' \
	"plan-support" \
	"a plan that goes frees the device copies its constants share with the session's other plans"

mutant shard-refuse-group-size passes/shard/driver.c \
	's|^\(\t*\)if (world > 1 \|\| tpf_node_attr_int(n, "group_size", 1) > 1)$|\1if (world > 1)|' \
	"shard" \
	"tpfuse shard takes an export whose collectives have group_size 2 but no tp_world_size metadata for a single-device model: it drops their AllReduces and splits the rank graph again"

mutant shard-vocab-unshifted passes/shard/rewrite.c \
	's|^\(\t*\)in\[1\] = shifted;$|\1in[1] = ids;|' \
	"shard shard-vocab-parallel" \
	"the vocab-parallel embedding looks up the token ids themselves in the rank's rows of the table, not the ids less the rank's first row: every rank but 0 indexes past its rows"

mutant pass-sharded-qk-token-shape passes/fuse-sharded-rmsnorm.c \
	's|^\(\t*\)for (int i = 0; i < r - 1; i++)$|\1for (int i = 0; i < r - 2; i++)|' \
	"passes/fuse-sharded-rmsnorm-qk" \
	"fuse-sharded-rmsnorm merges into one exchange sharded norms whose token shapes differ in the last token dim (prefill Q with decode K): one sum buffer for two token counts"

mutant kernel-sharded-qk-column kernels/cpu/norm.c \
	's|^\(\t*\)j.ext_col = (int64_t)p;$|\1j.ext_col = 0;|' \
	"kernels-cpu mpi-fusions" \
	"the CPU ShardedRMSNorm of merged Q and K norms normalizes every tensor with the first one's sum of squares (K scaled by Q's norm)"

mutant kernel-sigmoid-gate-operands kernels/cpu/elementwise.c \
	's|^\(\t*\)tpf_elem_store(y->dtype, y->data, i, f + sig \* s, 1);$|\1tpf_elem_store(y->dtype, y->data, i, s + sig * f, 1);|' \
	"kernels-cpu" \
	"the CPU SigmoidGateAdd kernel computes shared + sigmoid(gate) * final (the gate scales the routed experts' sum instead of the shared expert)"

mutant pass-sigmoid-gate-leading-dims passes/fuse-sigmoid-gate.c \
	's|^\(\t*\)if ((why = leading_dims_differ(m, gate, "gate", shared, r_s - 1,$|\1if ((why = leading_dims_differ(m, gate, "gate", shared, r_s - 2,|' \
	"passes/fuse-sigmoid-gate-near-misses" \
	"fuse-sigmoid-gate takes a gate that broadcasts over the token dim next to the hidden one ([B,1,1] against [B,S,H]): one gate per sequence where the graph has one per token"

mutant coalesce-world-size passes/coalesce-alltoall.c \
	's|^\(\t*\)    world_size_of(m, first->node, ctx) != world)$|\1    0)|' \
	"passes/coalesce-alltoall" \
	"coalesce-alltoall packs AllToAll calls of different group sizes into one exchange, cut into the first one's number of chunks"

mutant coalesce-unpack-offset passes/coalesce-alltoall.c \
	's|^\(\t*\)u\[0\] = (int64_t)i, u\[1\] = j \* S + off, |\1u[0] = (int64_t)i, u[1] = j * S, |' \
	"coalesce-alltoall passes/coalesce-alltoall" \
	"the Unpack after a coalesced AllToAll copies every output from the first member's place in each rank's block (the pack table's offsets forgotten)"

mutant canonicalize-allgather-perm passes/canonicalize.c \
	's|^\(\t*\)int64_t want = i < r - 1 ? i + 1 : i == r - 1 ? 0 : r;$|\1int64_t want = i < r - 1 ? i + 1 : i == r - 1 ? r : 0;|' \
	"passes/canonicalize-allgather" \
	"an axis-0 all-gather whose Transpose puts the gathered copies last (perm [1, .., r, 0]) becomes a last-axis AllGather: the copies interleave element by element instead of block by block"

mutant canonicalize-norm-casts-dtype passes/canonicalize.c \
	's|^\(\t*\)if (t_in != t_out)$|\1if (t_in != t_out \&\& 0)|' \
	"passes/canonicalize-rmsnorm-near-misses passes/canonicalize-rmsnorm-forms" \
	"Cast(float16 -> float) -> RMSNorm -> Cast(bfloat16) becomes one RMSNorm giving float16: the model's bfloat16 output changes dtype"

mutant strategy-hidden-inf runtime/strategy.c \
	's|parse_count(w\[2\], \&r.hidden, 0)|parse_count(w[2], \&r.hidden, 1)|' \
	"strategy" \
	"a strategy table row whose HIDDEN is 'inf' is read as hidden -1 instead of refused with its file and line"

mutant cse-float-attr-equal passes/cleanup.c \
	's|^\(\t*\)return memcmp(\&a->f, \&b->f, sizeof(a->f)) == 0;$|\1return 1;|' \
	"passes/cse" \
	"cse merges nodes that differ only in a FLOAT attribute: LayerNormalizations of epsilon 1e-5 and 0.5 become one"

mutant swiglu-split-any-axis passes/fuse-swiglu.c \
	's|^\(\t*\)if (r <= 0 \|\| (axis != -1 \&\& axis != r - 1))$|\1if (r <= 0)|' \
	"passes/fuse-swiglu" \
	"fuse-swiglu packs the equal halves of a Split along any axis as if it were the last one (the fused op reads the wrong halves)"

mutant attention-div-as-scale passes/fuse-attention.c \
	's|^\(\t*\)if (xi < 0 \|\| n->op != TPF_OP_MUL \|\| |\1if (xi < 0 \|\| |' \
	"passes/fuse-attention" \
	"fuse-attention folds a constant Div of Q or K into scale as a multiply (scale 2.0 where 0.5 is right)"

mutant verifier-attr-since-skipped ir/verify-node.c \
	's|^\(\t*\)if (r->since \&\& c->opset > 0 \&\& c->opset < r->since \&\& is_onnx_domain(n->domain))$|\1if (r->since \&\& c->opset > 0 \&\& c->opset < r->since \&\& !is_onnx_domain(n->domain))|' \
	"verify" \
	"the verifier skips 'attribute needs opset N' for ONNX ops (Split with num_outputs at opset 17 is accepted)"

mutant python-unsupported-error python/tpfuse/_tpfuse.c \
	's|^\(\t*\){TPF_ERR_UNSUPPORTED, "unsupported", \&UnsupportedError},$|\1{TPF_ERR_UNSUPPORTED, "unsupported", \&ModelError},|' \
	"python-api" \
	"the Python package raises ModelError for a valid model tpfuse does not handle, where UnsupportedError is meant"

mutant strategy-crlf-refused runtime/strategy.c \
	's|^\(\t*\)for (char \*tok = strtok(line, " \\t\\r"); tok; tok = strtok(NULL, " \\t\\r"))$|\1for (char *tok = strtok(line, " \\t"); tok; tok = strtok(NULL, " \\t"))|' \
	"strategy" \
	"the strategy-table parser refuses CRLF line endings (a carriage return is read as part of the last field)"

mutant kernel-causal-past-ignored kernels/cpu/attention.c \
	's|^\(\t*\)if (causal \&\& j > s + coff)$|\1if (causal \&\& j > s)|' \
	"kernels-cpu" \
	"the CPU Attention's causal mask ignores the past length: a new query sees only as many keys as its position, cached ones included"

mutant kernel-nonpad-ignored kernels/cpu/attention.c \
	's|^\(\t*\)Tb = n < 0 ? 0 : n < T ? n : T;$|\1Tb = T;|' \
	"kernels-ops" \
	"the CPU Attention reads every key of an in-place cache, not each sequence's valid prefix (nonpad_kv_seqlen)"

mutant kernel-nonpad-causal-top-left kernels/cpu/attention.c \
	's|^\(\t*\)coff = n - S; /\* bottom-right aligned with the valid keys \*/$|\1coff = P;|' \
	"onnx-node-tests" \
	"with nonpad_kv_seqlen the CPU Attention's causal mask starts at the first key (top-left), not at the end of the valid keys"

mutant plan-scatter-not-in-place runtime/plan-lower.c \
	's|^\(\t*\)make_view(p, ins\[0\], outs\[0\], 0); /\* the input is no view itself \*/$|\1p->n_views++;|' \
	"generate" \
	"a TensorScatter on a kept cache writes a copy: the cache the next step reads never gets the step's keys"

mutant generate-chunk-start-zero runtime/generate.c \
	's|^\(\t*\)g->lengths\[i\] = (int64_t)c0;$|\1g->lengths[i] = 0;|' \
	"generate" \
	"every prefill chunk of an in-place cache writes at position 0 (and a decode step too): the caches hold the wrong positions"

mutant shard-transpose-axis-kept passes/shard/rules-movement.c \
	's|^\(\t*\)c->out\[0\] = c->raw\[0\] = on_axis(c->in\[0\], i);$|\1c->out[0] = c->raw[0] = on_axis(c->in[0], c->in[0].axis);|' \
	"shard" \
	"shard keeps a split on its axis through a Transpose instead of moving it where perm puts it"

mutant shard-concat-edit-position passes/shard/rewrite.c \
	's|^\(\t*\)sub\[m++\] = (struct change){ch\[j\].elem - off, ch\[j\].value};$|\1sub[m++] = (struct change){ch[j].elem, ch[j].value};|' \
	"shard" \
	"shard writes a head-count edit of a Concat at the position in the whole Concat, not in the part that holds it (the head size changes instead)"

mutant shard-sections-first-only passes/shard/slice.c \
	's|^\(\t*\)uint64_t first = (uint64_t)((o \* D + off + rank \* part) \* inner) \* bits;$|\1uint64_t first = (uint64_t)((o * D + rank * part) * inner) * bits;|' \
	"shard" \
	"shard slices every section of a fused weight (q/k/v, gate/up) from the first section: each rank's k and v columns are copies of its q columns"

mutant last-logits-outside-use passes/last-logits.c \
	's|ok = o->uses\[u\].index >= 0 \&\& o->uses\[u\].node->mark;|ok = o->uses[u].index >= 0;|' \
	"passes/last-position-logits generate" \
	"last-position-logits takes a node into the cone although another node outside it uses its output (that user reads one position)"

mutant last-logits-twice passes/last-logits.c \
	's|dims\[1\].value == 1 \&\&$|dims[1].value == -7 \&\&|' \
	"passes/last-position-logits" \
	"last-position-logits slices logits that are already of one position again (a second run changes the graph)"

mutant pipeline-drop-absent-pass passes/pass-registry.c \
	's|^\(\t*\)if (kept == q->count)$|\1if (0)|' \
	"cli-fixtures" \
	"a -NAME for a pass the pipeline does not run removes nothing and says nothing (a misspelt --without goes unnoticed)"

mutant graph-cache-evicts-newest runtime/graph-cache.c \
	's|e->used < oldest->used) {$|e->used > oldest->used) {|' \
	"graph-cache" \
	"the CUDA graph cache gives way with the entry used last instead of the one used longest ago (a decode step's graph destroyed by the next prefill)"

mutant graph-cache-drop-other-keys runtime/graph-cache.c \
	's|if (c->e\[i\].used \&\& c->e\[i\].key == key)$|if (c->e[i].used \&\& c->e[i].key != key)|' \
	"graph-cache" \
	"dropping an unbound plan's CUDA graph drops every other plan's and keeps its own"

mutant profile-plans-order runtime/session.c \
	's|order\[j - 1\]->used > order\[j\]->used; j--) {$|order[j - 1]->used < order[j]->used; j--) {|' \
	"generate" \
	"tpfuse generate --profile prints the plans last run first (the decode step's table headed as the first)"

mutant pass-residual-broadcast passes/fuse-residual-rmsnorm.c \
	's|^\(\t*\)if (tpf_pattern_shapes_differ(x, sum) \|\| tpf_pattern_shapes_differ(r, sum))$|\1if (0)|' \
	"passes/fuse-residual-rmsnorm-near-misses" \
	"fuse-residual-rmsnorm takes an addend that broadcasts ([H] against [T, H]) into a norm that adds elementwise"

mutant pass-residual-sum-dropped passes/fuse-residual-rmsnorm.c \
	's|^\(\t*\)int need_sum = tpf_value_use_count(sum) > 1;$|\1int need_sum = tpf_value_use_count(sum) > 2;|' \
	"passes/fuse-residual-rmsnorm" \
	"fuse-residual-rmsnorm drops a sum that one more reader (the next residual add, a graph output) needs"

mutant pass-allreduce-drops-residual passes/fuse-allreduce-rmsnorm.c \
	's|^\(\t*\)if (norm->op == TPF_OP_TPF_RMS_NORM \&\& norm->n_inputs > 2)$|\1if (0)|' \
	"passes/fuse-residual-rmsnorm" \
	"fuse-allreduce-rmsnorm takes a norm that already adds a residual and drops the residual"

mutant runtime-transpose-view-swap runtime/plan-lower.c \
	's|^\(\t*\)if (a < last)$|\1if (0)|' \
	"runtime" \
	"a Transpose that swaps two axes of more than one element becomes a view (the elements stay where they were)"

mutant runtime-slice-view-start-aligned runtime/plan-lower.c \
	's|^\(\t*\)if (i == k \&\& stride % align)$|\1if (0)|' \
	"runtime" \
	"a Slice is a view when its own start happens to be aligned, so the choice hangs on a start that ranks may hold apart"

mutant fuzz-builder-op-inserted tests/fuzz/builder-ops.h \
	's|^\(\t*\)/\*  5 \*/ {"", "Cast"},$|\1/*  5 */ {"", "Neg"}, {"", "Cast"},|' \
	"fuzz-builder-ops" \
	"an op inserted in the middle of fuzz-builder's op table: every saved builder program that names a later op builds another one"

# ------------------------------------------------------------------ options
list=0 keep=0 work="" rev=HEAD
want=()
while [ $# -gt 0 ]; do
	case $1 in
	--list) list=1 ;;
	--keep) keep=1 ;;
	--work) work=${2:?--work needs a folder}; shift ;;
	--rev) rev=${2:?--rev needs a commit}; shift ;;
	-h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	-*) echo "unknown option $1" >&2; exit 2 ;;
	*) want+=("$1") ;;
	esac
	shift
done
if [ "$list" = 1 ]; then
	for i in "${!names[@]}"; do
		printf '%-26s %-32s %s\n' "${names[$i]}" "${files[$i]}" "${descs[$i]}"
	done
	exit 0
fi
sel=()
if [ ${#want[@]} -eq 0 ]; then
	sel=("${!names[@]}")
else
	for w in "${want[@]}"; do
		found=0
		for i in "${!names[@]}"; do
			[ "${names[$i]}" = "$w" ] && sel+=("$i") && found=1
		done
		[ "$found" = 1 ] || { echo "no mutant named '$w' (--list shows them)" >&2; exit 2; }
	done
fi

# ------------------------------------------------------------------ worktree
jobs=${TPF_MUTANT_JOBS:-2}
commit=$(git -C "$root" rev-parse --verify "$rev^{commit}") || exit 2
created=0
if [ -z "$work" ]; then
	work=$(mktemp -d /tmp/tpf-mutants.XXXXXX)
	rmdir "$work"
fi
case $work in /tmp/*) ;; *) echo "--work must be under /tmp" >&2; exit 2 ;; esac
if [ -e "$work/.git" ]; then
	git -C "$work" checkout -q --force --detach "$commit" || exit 2
else
	git -C "$root" worktree add -q --detach "$work" "$commit" || exit 2
	created=1
fi
# shellcheck disable=SC2317 # called through the trap
cleanup() {
	for i in "${sel[@]}"; do git -C "$work" checkout -q -- "${files[$i]}" 2>/dev/null; done
	if [ "$keep" = 0 ] && [ "$created" = 1 ]; then
		git -C "$root" worktree remove --force "$work"
	elif [ "$keep" = 1 ]; then
		echo "worktree kept: $work (scripts/mutants.sh --work $work reuses it)"
	fi
}
trap cleanup EXIT
logs=$work/mutant-logs
mkdir -p "$logs"
build=$work/build
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export TPF_LIMITS_NODES=${TPF_LIMITS_NODES:-20000} # test-limits' huge graphs, smaller
py=$root/.venv/bin/python
[ -x "$py" ] || py=python3
t_all=$(date +%s)
echo "==> mutants of $commit in $work"
# the Python package is built (where its headers are) for python-api
if [ ! -f "$build/build.ninja" ]; then
	meson setup "$build" "$work" -Dcuda=disabled -Dnccl=disabled -Dpython="$py" \
		>"$logs/setup.log" 2>&1 || { cat "$logs/setup.log"; exit 2; }
fi
echo "==> building the unmutated tree"
if ! ninja -C "$build" -j"$jobs" >"$logs/build.log" 2>&1; then
	tail -30 "$logs/build.log"
	echo "the unmutated tree does not build" >&2
	exit 2
fi

tests=$(meson test -C "$build" --no-rebuild --list 2>/dev/null)

# runs one test ("oracle" or a meson test name); 0 when it passed or skipped
run_test() { # NAME LOG
	if [ "$1" = oracle ]; then
		"$py" "$work/tests/mpi/oracle.py" --tpf-run "$build/tests/mpi/tpf-run" \
			--work "$build/mutant-oracle" --world-sizes 2 >"$2" 2>&1
	elif ! awk -F ' / ' -v t="$1" '$2 == t { f = 1 } END { exit !f }' <<<"$tests"; then
		# a test this build lacks (the Python package without its headers)
		# kills nothing: the mutant goes on to the suites
		echo "no test $1 in this build" >"$2"
	else
		meson test -C "$build" --no-rebuild --print-errorlogs "$1" >"$2" 2>&1
	fi
}

# the names of the failed tests of meson's last run
failed_in_log() {
	"$py" - "$build/meson-logs/testlog.json" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.strip():
        r = json.loads(line)
        if r.get("result") not in ("OK", "SKIP", "EXPECTEDFAIL"):
            print(r.get("name", "?").split(" / ")[-1])
PY
}

results=()
bad=0
for i in "${sel[@]}"; do
	name=${names[$i]} file=${files[$i]}
	t0=$(date +%s)
	log=$logs/$name
	echo "==> $name: ${descs[$i]}"
	if [ ! -f "$work/$file" ]; then
		results+=("$name: NOT APPLIED ($file does not exist at this commit; update the mutant)")
		bad=1
		continue
	fi
	cp "$work/$file" "$log.orig"
	sed -i -e "${exprs[$i]}" "$work/$file"
	if cmp -s "$work/$file" "$log.orig"; then
		results+=("$name: NOT APPLIED (no line of $file matches; update the mutant)")
		bad=1
		continue
	fi
	git -C "$work" diff --stat -- "$file" | head -1
	if ! ninja -C "$build" -j"$jobs" >"$log.build.log" 2>&1; then
		results+=("$name: BUILD FAILED (see $log.build.log)")
		bad=1
		git -C "$work" checkout -q -- "$file"
		continue
	fi
	verdict=""
	ran=()
	for k in ${killers[$i]}; do
		ran+=("$k")
		# test names such as passes/fuse-attention-near-misses hold slashes
		if ! run_test "$k" "$log.${k//\//_}.log"; then
			verdict="KILLED by $k"
			break
		fi
	done
	if [ -z "$verdict" ]; then
		ran+=("unit" "conformance")
		if ! meson test -C "$build" --no-rebuild --print-errorlogs --suite unit --suite conformance \
			>"$log.suites.log" 2>&1; then
			verdict="KILLED by $(failed_in_log | tr '\n' ' ' | sed 's/ $//')"
		fi
	fi
	git -C "$work" checkout -q -- "$file"
	if [ -z "$verdict" ]; then
		verdict="SURVIVED (ran: ${ran[*]})"
		bad=1
	fi
	results+=("$name: $verdict ($(($(date +%s) - t0)) s)")
	echo "    ${results[-1]}"
done

echo "==> summary ($(($(date +%s) - t_all)) s, commit $commit; logs in $logs)"
printf '%s\n' "${results[@]}"
[ "$keep" = 1 ] || [ "$created" = 0 ] || echo "(logs go with the worktree; --keep keeps them)"
exit $bad
