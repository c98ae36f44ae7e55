/* SPDX-License-Identifier: MIT */
/*
 * Kernel timeline of a stretch of device work, through CUPTI's activity API
 * (libcupti, opened at run time: the benchmark runs without it when no trace
 * is asked for).  Every kernel, memcpy and memset that runs between
 * tpf_trace_start and tpf_trace_stop, CUDA graph nodes included (one record a
 * node), is written as one JSON line: its name, start and end on the GPU's
 * clock (ns), launch shape and graph node.  bench/decode_trace.py reads it.
 */
#ifndef TPF_BENCH_CUPTI_TRACE_H
#define TPF_BENCH_CUPTI_TRACE_H

#include <stddef.h>
#include <stdio.h>

/* Loads libcupti and turns on kernel, memcpy and memset records; records
 * made before tpf_trace_start are dropped.  Returns 0, or -1 with a message
 * in err. */
int tpf_trace_open(char *err, size_t n);
/* Drops what was recorded so far (after a device synchronization). */
int tpf_trace_start(char *err, size_t n);
/* Flushes the records made since tpf_trace_start (call after a device
 * synchronization) and writes them to out, one JSON object a line.  Returns
 * the number of records, or -1 with a message in err. */
long tpf_trace_stop(FILE *out, char *err, size_t n);
/* s as a JSON string (quoted, escaped). */
void tpf_trace_json_string(FILE *out, const char *s);
/* Turns the records off and frees the buffers. */
void tpf_trace_close(void);

#endif
