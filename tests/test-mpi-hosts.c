/* SPDX-License-Identifier: MIT */
/*
 * Ranks grouped by host (runtime/comm.c): the MPI communicator exchanges
 * every rank's host name at creation, and the peer-memory collectives run
 * only where every rank shares one host.  Run under mpirun with one mode:
 *
 *   one    TPF_HOSTNAME unset: every rank on this host
 *   2x2    TPF_HOSTNAME=beta,alpha,beta,alpha at 4 ranks: 2 hosts, numbered
 *          by their lowest rank (beta first), 2 ranks each
 *   each   TPF_HOSTNAME=node{rank}: a host per rank
 *
 * Every mode also checks the pure parts on every rank: the grouping of a
 * table of names, the decision and its message, the name TPF_HOSTNAME
 * gives (lists, {rank}, malformed values), and a creation where one rank
 * has no name, which fails on every rank.  Started alone, it re-launches
 * itself as `mpirun -np 2 EXE one` (exit 77, skipped, when mpirun is
 * missing).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tpf-runtime.h"

static int failures;
static int rank = -1;

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "rank %d: check failed at line %d: %s\n", rank, __LINE__, #cond); \
			failures++;                                                                \
		}                                                                                  \
	} while (0)

static int diag_mentions(const struct tpf_diag *d, const char *needle)
{
	for (size_t i = 0; i < d->count; i++)
		if (strstr(d->entries[i].text, needle))
			return 1;
	return 0;
}

static void expect_hosts(const struct tpf_comm_hosts *h, int n_hosts, int host, int local_rank, int local_size)
{
	CHECK(h->n_hosts == n_hosts);
	CHECK(h->host == host);
	CHECK(h->local_rank == local_rank);
	CHECK(h->local_size == local_size);
}

/* The grouping of a table of names, the decision and its message. */
static void check_grouping(void)
{
	static const char names[6][8] = {"b", "a", "b", "c", "a", "b"};
	struct tpf_comm_hosts h;
	tpf_comm_hosts_group(&names[0][0], 8, 6, 0, &h);
	expect_hosts(&h, 3, 0, 0, 3);
	tpf_comm_hosts_group(&names[0][0], 8, 6, 4, &h);
	expect_hosts(&h, 3, 1, 1, 2);
	tpf_comm_hosts_group(&names[0][0], 8, 6, 5, &h);
	expect_hosts(&h, 3, 0, 2, 3);
	tpf_comm_hosts_group(&names[0][0], 8, 6, 3, &h);
	expect_hosts(&h, 3, 2, 0, 1);
	tpf_comm_hosts_group(&names[0][0], 8, 1, 0, &h);
	expect_hosts(&h, 1, 0, 0, 1);

	char why[256] = "";
	struct tpf_comm_hosts one = {1, 0, 3, 4}, two = {2, 1, 0, 2}, none = {0};
	CHECK(tpf_comm_hosts_peer_ok(&one, "nccl", why, sizeof(why)) == 1 && why[0] == 0);
	CHECK(tpf_comm_hosts_peer_ok(&none, "nccl", why, sizeof(why)) == 1 && why[0] == 0);
	CHECK(tpf_comm_hosts_peer_ok(&two, "nccl", why, sizeof(why)) == 0);
	CHECK(strstr(why, "ranks span 2 hosts: peer-memory collectives are off") != NULL);
	CHECK(strstr(why, "the communicator (nccl) runs them") != NULL);
	CHECK(tpf_comm_hosts_peer_ok(&two, NULL, NULL, 0) == 0);

	/* a communicator built without a grouping is one host */
	struct tpf_comm bare = {.rank = 2, .world = 3};
	tpf_comm_hosts(&bare, &h);
	expect_hosts(&h, 1, 0, 2, 3);
}

/* The names TPF_HOSTNAME gives (the caller restores it). */
static void check_names(struct tpf_diag *d)
{
	char buf[TPF_HOST_NAME_MAX], small[8];
	setenv("TPF_HOSTNAME", "n{rank}-x{rank}", 1);
	CHECK(tpf_comm_host_name(12, 16, buf, sizeof(buf), d) == TPF_OK && !strcmp(buf, "n12-x12"));
	setenv("TPF_HOSTNAME", "p, q ,r{rank}", 1);
	CHECK(tpf_comm_host_name(1, 3, buf, sizeof(buf), d) == TPF_OK && !strcmp(buf, "q"));
	CHECK(tpf_comm_host_name(2, 3, buf, sizeof(buf), d) == TPF_OK && !strcmp(buf, "r2"));
	CHECK(tpf_comm_host_name(0, 4, buf, sizeof(buf), d) == TPF_ERR_INVALID);
	CHECK(diag_mentions(d, "lists 3 names for 4 ranks"));
	tpf_diag_clear(d);
	setenv("TPF_HOSTNAME", "a,,b", 1);
	CHECK(tpf_comm_host_name(1, 3, buf, sizeof(buf), d) == TPF_ERR_INVALID);
	CHECK(diag_mentions(d, "gives rank 1 an empty host name"));
	tpf_diag_clear(d);
	setenv("TPF_HOSTNAME", "host-{rank}", 1);
	CHECK(tpf_comm_host_name(1234, 2000, small, sizeof(small), d) == TPF_ERR_INVALID);
	CHECK(diag_mentions(d, "longer than 7 bytes"));
	tpf_diag_clear(d);
	unsetenv("TPF_HOSTNAME");
	CHECK(tpf_comm_host_name(0, 1, buf, sizeof(buf), d) == TPF_OK && buf[0] != 0);
}

/* The communicator's grouping in this mode. */
static void check_comm(const char *mode, struct tpf_comm *c, struct tpf_diag *d)
{
	const int r = c->rank, w = c->world;
	struct tpf_comm_hosts h;
	tpf_comm_hosts(c, &h);
	char why[256] = "", name[TPF_HOST_NAME_MAX] = "";
	int ok = tpf_comm_hosts_peer_ok(&h, c->ops->name, why, sizeof(why));
	CHECK(tpf_comm_host_name(r, w, name, sizeof(name), d) == TPF_OK);
	if (!strcmp(mode, "one")) {
		expect_hosts(&h, 1, 0, r, w);
		CHECK(ok == 1 && why[0] == 0);
	} else if (!strcmp(mode, "2x2")) {
		CHECK(w == 4);
		expect_hosts(&h, 2, r % 2, r / 2, 2);
		CHECK(!strcmp(name, r % 2 ? "alpha" : "beta"));
		CHECK(ok == 0 && strstr(why, "ranks span 2 hosts") && strstr(why, "(mpi)"));
	} else if (!strcmp(mode, "each")) {
		char want[32];
		snprintf(want, sizeof(want), "node%d", r);
		expect_hosts(&h, w, r, 0, 1);
		CHECK(!strcmp(name, want));
		snprintf(want, sizeof(want), "ranks span %d hosts", w);
		CHECK(ok == 0 && strstr(why, want));
	} else {
		CHECK(!"a known mode");
	}
	/* every rank sees the same number of hosts, and (host, local rank)
	 * names a rank once */
	int mine[2] = {h.host, h.local_rank}, *all = calloc((size_t)w * 2, sizeof(int));
	CHECK(all && c->ops->allgather(c, mine, all, sizeof(mine), NULL, d) == TPF_OK);
	for (int p = 0; all && p < w; p++)
		for (int q = 0; q < p; q++)
			CHECK(all[2 * p] != all[2 * q] || all[2 * p + 1] != all[2 * q + 1]);
	free(all);
	CHECK(tpf_comm_check_same(c, (uint64_t)h.n_hosts, "the number of hosts", d) == TPF_OK);
}

/* Rank 1 has no name: the creation fails on every rank, naming it. */
static void check_nameless(int world, struct tpf_diag *d)
{
	char list[256] = "";
	for (int r = 0; r < world && r < 32; r++)
		strcat(strcat(list, r ? "," : ""), r == 1 ? "" : "h");
	setenv("TPF_HOSTNAME", list, 1);
	struct tpf_comm *c = NULL;
	CHECK(tpf_comm_create_mpi(&(struct tpf_comm_options){.timeout_s = 30}, &c, d) == TPF_ERR_INVALID);
	CHECK(c == NULL);
	CHECK(diag_mentions(d, rank == 1 ? "gives rank 1 an empty host name" : "rank 1 has no host name"));
	tpf_diag_clear(d);
}

int main(int argc, char **argv)
{
	if (!tpf_comm_launched_by_mpi()) {
		char *args[] = {"mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", argv[0], "one", NULL};
		execvp("mpirun", args);
		printf("mpirun not found: skipped\n");
		return 77;
	}
	const char *mode = argc > 1 ? argv[1] : "one";
	/* MPI started here outlives the communicators (none finalizes it), so
	 * the test can create one after another */
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_comm *c = NULL;
	if (tpf_comm_create_mpi(&(struct tpf_comm_options){.timeout_s = 30}, &c, d)) {
		tpf_diag_print(d, stderr);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	check_comm(mode, c, d);
	const int world = c->world;
	tpf_comm_free(c);

	const char *set = getenv("TPF_HOSTNAME");
	char *saved = set ? strdup(set) : NULL;
	check_grouping();
	check_names(d);
	check_nameless(world, d);
	if (saved)
		setenv("TPF_HOSTNAME", saved, 1);
	else
		unsetenv("TPF_HOSTNAME");
	free(saved);
	/* the environment as launched gives the same grouping again */
	CHECK(tpf_comm_create_mpi(&(struct tpf_comm_options){.timeout_s = 30}, &c, d) == TPF_OK);
	if (c) {
		check_comm(mode, c, d);
		tpf_comm_free(c);
	}
	printf("rank %d: %s (%s)\n", rank, failures ? "FAILED" : "ok", mode);
	tpf_diag_free(d);
	MPI_Finalize();
	return failures ? 1 : 0;
}
