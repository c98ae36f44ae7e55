/* SPDX-License-Identifier: MIT */
/* Private to kernels/: which rows the two-shot all-reduce's ranks own
 * (kernels/cuda/ar-peer.cu; checked on the host by tests/test-peer-rows.c).
 * Rank q of `world` owns the rows r with r % world == q and reduces them;
 * the rows it does not own it scatters to their owners and later finishes
 * from the gathered sums.  Consecutive rows have different owners, so that
 * a grid walking the rows in order keeps every rank sending to all of its
 * peers at once. */
#ifndef TPF_PEER_ROWS_H
#define TPF_PEER_ROWS_H

#include <stdint.h>

#include "elementwise-ops.h" /* TPF_HD */

/* The rows of `rows` that `rank` owns; its j-th is j * world + rank, at
 * place j of its receive slots. */
TPF_HD int64_t tpf_rows_owned(int64_t rows, int rank, int world)
{
	return rows > rank ? (rows - rank + world - 1) / world : 0;
}

/* A walk over the rows `rank` does not own: the j-th of them (from 0) for
 * j = first, first + step, ... (a block of a grid: first = its index,
 * step = the grid size) is row group * world + owner, where group = j /
 * (world - 1) and owner counts 0..world-1 skipping the rank.  The row sits
 * at place `group` of its owner's receive slot.  Advanced by additions
 * only (64-bit divisions per row cost the kernel 8% at two ranks).  For
 * world >= 2. */
struct tpf_row_walk {
	int64_t j, group, step, dgroup;
	int pos, dpos, rank, world;
};

TPF_HD struct tpf_row_walk tpf_row_walk_start(uint32_t first, uint32_t step, int rank, int world)
{
	struct tpf_row_walk w;
	const uint32_t n = (uint32_t)(world - 1); /* 32-bit divisions: a kernel's grid */
	w.j = first;
	w.group = first / n;
	w.pos = (int)(first % n);
	w.step = step;
	w.dgroup = step / n;
	w.dpos = (int)(step % n);
	w.rank = rank;
	w.world = world;
	return w;
}

/* (By value: a walk whose address is taken lands in the kernel's local
 * memory.) */
TPF_HD int tpf_row_walk_owner(struct tpf_row_walk w)
{
	return w.pos < w.rank ? w.pos : w.pos + 1;
}

TPF_HD int64_t tpf_row_walk_row(struct tpf_row_walk w)
{
	return w.group * w.world + tpf_row_walk_owner(w);
}

TPF_HD struct tpf_row_walk tpf_row_walk_next(struct tpf_row_walk w)
{
	w.j += w.step;
	w.group += w.dgroup;
	w.pos += w.dpos;
	if (w.pos >= w.world - 1) {
		w.pos -= w.world - 1;
		w.group++;
	}
	return w;
}

#endif
