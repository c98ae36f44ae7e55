/* SPDX-License-Identifier: MIT */
/*
 * replay: runs saved inputs through a fuzz target without libFuzzer, so the
 * seed corpus and every input that once found a bug stay in the normal test
 * suite (and in the sanitizer build, where leaks and undefined behaviour
 * are caught too).
 *
 *   fuzz-replay-TARGET PATH...     PATH: a file, or a folder of files
 *
 * Exit status: 0 when every input ran (a target that finds a bug aborts),
 * 1 when a path cannot be read, 2 on a usage error.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t replayed;

static int replay_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	size_t cap = 0, len = 0;
	int rc = 1;

	if (!f) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return 1;
	}
	for (;;) {
		if (len == cap) {
			size_t ncap = cap ? cap * 2 : 4096;
			uint8_t *nb = realloc(buf, ncap);
			if (!nb) {
				fprintf(stderr, "replay: %s: out of memory\n", path);
				goto out_close;
			}
			buf = nb;
			cap = ncap;
		}
		size_t got = fread(buf + len, 1, cap - len, f);
		len += got;
		if (got == 0)
			break;
	}
	if (ferror(f)) {
		fprintf(stderr, "replay: %s: read error\n", path);
		goto out_close;
	}
	fprintf(stderr, "replay: %s (%zu bytes)\n", path, len);
	/* libFuzzer never passes NULL; give the target a valid pointer for 0 bytes */
	LLVMFuzzerTestOneInput(buf ? buf : (const uint8_t *)"", len);
	replayed++;
	rc = 0;
out_close:
	free(buf);
	fclose(f);
	return rc;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int replay_dir(const char *path)
{
	DIR *dir = opendir(path);
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;
	int rc = 0;

	if (!dir) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return 1;
	}
	while ((e = readdir(dir)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 64;
			char **nn = realloc(names, ncap * sizeof(*nn));
			if (!nn) {
				rc = 1;
				break;
			}
			names = nn;
			cap = ncap;
		}
		size_t len = strlen(path) + strlen(e->d_name) + 2;
		names[n] = malloc(len);
		if (!names[n]) {
			rc = 1;
			break;
		}
		snprintf(names[n], len, "%s/%s", path, e->d_name);
		n++;
	}
	closedir(dir);
	if (n)
		qsort(names, n, sizeof(*names), by_name);
	for (size_t i = 0; i < n; i++) {
		struct stat sb;
		if (stat(names[i], &sb) == 0 && S_ISREG(sb.st_mode))
			rc |= replay_file(names[i]);
		free(names[i]);
	}
	free(names);
	return rc;
}

int main(int argc, char **argv)
{
	int rc = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: %s PATH...\n", argv[0]);
		return 2;
	}
	for (int i = 1; i < argc; i++) {
		struct stat sb;
		if (stat(argv[i], &sb) != 0) {
			fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
			rc = 1;
		} else if (S_ISDIR(sb.st_mode)) {
			rc |= replay_dir(argv[i]);
		} else {
			rc |= replay_file(argv[i]);
		}
	}
	printf("replayed %zu inputs\n", replayed);
	return rc;
}
