/* SPDX-License-Identifier: MIT */
/*
 * The two-shot all-reduce's row ownership (kernels/peer-rows.h, used by the
 * CUDA kernel in kernels/cuda/ar-peer.cu): rank q of W owns the rows r with
 * r % W == q; the walk over the rows a rank does not own, one per block of
 * a grid, visits each of them exactly once, names its owner and its place
 * in the owner's receive slot, and never a row past the end or one the rank
 * owns.  Every world size the kernels take (2 to 8), every rank, row counts
 * below, at and above the grid, grids of one block to more than the rows;
 * and the split grid of the many-row instance at more than two ranks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "peer-rows.h"

enum { MAX_ROWS = 200 };

/* Walks every block of a `grid`-block grid; counts the visits per row.
 * Returns the number of visits. */
static int64_t walk_grid(int64_t rows, int rank, int world, uint32_t grid, int *seen)
{
	const int64_t others = rows - tpf_rows_owned(rows, rank, world);
	int64_t visits = 0;
	memset(seen, 0, sizeof(int) * MAX_ROWS);
	for (uint32_t b = 0; b < grid; b++) {
		int64_t prev = -1;
		for (struct tpf_row_walk w = tpf_row_walk_start(b, grid, rank, world); w.j < others;
		     w = tpf_row_walk_next(w)) {
			const int64_t row = tpf_row_walk_row(w);
			const int owner = tpf_row_walk_owner(w);
			assert_true(row >= 0 && row < rows);
			assert_true(row > prev); /* a block's rows in order */
			prev = row;
			assert_int_equal(owner, (int)(row % world));
			assert_int_not_equal(owner, rank);
			assert_int_equal(w.group, row / world); /* the place in the owner's slot */
			seen[row]++;
			visits++;
		}
	}
	return visits;
}

static void test_owned(void **state)
{
	(void)state;
	for (int world = 2; world <= 8; world++)
		for (int64_t rows = 0; rows <= 3 * world + 1; rows++) {
			int64_t total = 0;
			for (int rank = 0; rank < world; rank++) {
				const int64_t n = tpf_rows_owned(rows, rank, world);
				int64_t count = 0;
				for (int64_t r = 0; r < rows; r++)
					count += r % world == rank;
				assert_int_equal(n, count);
				if (n > 0) /* its last owned row is in range, the next is not */
					assert_true((n - 1) * world + rank < rows && n * world + rank >= rows);
				total += n;
			}
			assert_int_equal(total, rows);
		}
}

static void test_walk(void **state)
{
	(void)state;
	static const int64_t row_counts[] = {0, 1, 2, 3, 5, 7, 8, 13, 31, 64, 97, 128, 199, 200};
	static const uint32_t grids[] = {1, 2, 3, 4, 5, 7, 8, 16, 33, 64, 132, 300};
	int seen[MAX_ROWS];
	for (int world = 2; world <= 8; world++)
		for (int rank = 0; rank < world; rank++)
			for (size_t i = 0; i < sizeof(row_counts) / sizeof(row_counts[0]); i++)
				for (size_t g = 0; g < sizeof(grids) / sizeof(grids[0]); g++) {
					const int64_t rows = row_counts[i];
					const int64_t visits = walk_grid(rows, rank, world, grids[g], seen);
					assert_int_equal(visits, rows - tpf_rows_owned(rows, rank, world));
					for (int64_t r = 0; r < rows; r++)
						assert_int_equal(seen[r], r % world != rank);
				}
}

/* At any step of the grid, the rows in flight go to every other rank in
 * turn: of any world - 1 consecutive rows a rank sends, each peer gets one
 * (what keeps the scatter from sending to one owner at a time). */
static void test_spread(void **state)
{
	(void)state;
	for (int world = 2; world <= 8; world++)
		for (int rank = 0; rank < world; rank++) {
			int owners[MAX_ROWS];
			int n = 0;
			for (struct tpf_row_walk w = tpf_row_walk_start(0, 1, rank, world); w.j < 120;
			     w = tpf_row_walk_next(w))
				owners[n++] = tpf_row_walk_owner(w);
			for (int s = 0; s + world - 1 <= n; s += world - 1) {
				unsigned mask = 0;
				for (int k = 0; k < world - 1; k++)
					mask |= 1u << owners[s + k];
				assert_int_equal(mask, ((1u << world) - 1) & ~(1u << rank));
			}
		}
}

/* The many-row instance at more than two ranks splits the grid: blocks
 * below half = grid / 2 take the owned rows (block b: j = b, b + half, ...),
 * the others walk the rows owned elsewhere as a grid of their own (first
 * b - half, step grid - half); the kernel's loop bounds keep each half out
 * of the other's loop (a block below half starts its walk at b - half
 * wrapped, bounded by 0).  Every row is finished once, by one half. */
static void test_halves(void **state)
{
	(void)state;
	static const int64_t row_counts[] = {5, 7, 13, 64, 97, 199, 200};
	static const uint32_t grids[] = {2, 3, 4, 7, 16, 33, 132, 264};
	for (int world = 3; world <= 8; world++)
		for (int rank = 0; rank < world; rank++)
			for (size_t i = 0; i < sizeof(row_counts) / sizeof(row_counts[0]); i++)
				for (size_t g = 0; g < sizeof(grids) / sizeof(grids[0]); g++) {
					const int64_t rows = row_counts[i];
					const uint32_t grid = grids[g], half = grid / 2;
					const int64_t n_mine = tpf_rows_owned(rows, rank, world);
					const int64_t n_other = rows - n_mine;
					int seen[MAX_ROWS] = {0};
					for (uint32_t b = 0; b < grid; b++) {
						for (int64_t j = b; j < (b >= half ? 0 : n_mine); j += half)
							seen[j * world + rank]++;
						for (struct tpf_row_walk w = tpf_row_walk_start(b - half, grid - half, rank, world);
						     w.j < (b < half ? 0 : n_other); w = tpf_row_walk_next(w)) {
							const int64_t row = tpf_row_walk_row(w);
							assert_true(row >= 0 && row < rows);
							assert_int_not_equal(row % world, rank);
							seen[row]++;
						}
					}
					for (int64_t r = 0; r < rows; r++)
						assert_int_equal(seen[r], 1);
				}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_owned),
		cmocka_unit_test(test_walk),
		cmocka_unit_test(test_spread),
		cmocka_unit_test(test_halves),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
