/*
 * The shared half of the MPI peer benchmarks: an nccl-tests-style sweep
 * (sizes, warm-up, timed iterations, time averaged over ranks, algbw and
 * busbw with nccl-tests' factors, a checked run with deterministic inputs).
 * Each collective's file defines the hooks below and includes this file.
 *
 *   mpirun -np 2 ./allreduce [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1]
 *
 * float32 and sum only: the comparison's case. Output columns are
 * vccl-bench's (and nccl-tests'), out of place only:
 *   size count type redop root time(us) algbw busbw #wrong
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <unistd.h>

static int rank, nranks;

/* Each collective's file defines, before including this one:
 *   COLL_NAME  "allreduce", ...      COLL_REDOP  "sum" or "none"
 *   COLL_ROOT  the root, or -1       COLL_WIDE   1: inputs not reduced (wide range)
 *   COLL_INPUT_IN_RECV (optional)   the call reads its input from recv (MPI_Bcast)
 * and, after it, the hooks below. */
#define coll_name COLL_NAME
static double coll_busfactor(int n);
/* Sizes the buffers for size bytes: sets *count (the call's count
 * argument), *sendn and *recvn (elements). */
static void coll_layout(long size, long *count, long *sendn, long *recvn);
static void coll_run(float *send, float *recv, long count);
/* The expected value of output element j on this rank. */
static float coll_expect(long j, long count);
/* Whether this rank's output is checked, and how many elements it has. */
static long coll_outn(long count, long recvn);
/* Whether this rank fills its send buffer (a broadcast's non-roots don't). */
static int coll_sends(void);

/* Rank p's input element j: small integers, exact in float32. wide: a
 * larger range for collectives that do not reduce. */
static float value(int p, long j, int wide)
{
	unsigned long h = (unsigned long)p * 131 + (unsigned long)j * 7;
	if (wide)
		return (float)((long)(h % 251) - 125);
	return (float)((long)(h % 9) - 4);
}

/* fill_inputs writes this rank's inputs into the n elements of b. */
static void fill_inputs(float *b, long n)
{
	for (long j = 0; j < n; j++)
		b[j] = value(rank, j, COLL_WIDE);
}

static long parse_size(const char *s)
{
	char *end;
	double v = strtod(s, &end);
	long mult = 1;
	switch (*end) {
	case 'k': case 'K': mult = 1L << 10; end++; break;
	case 'm': case 'M': mult = 1L << 20; end++; break;
	case 'g': case 'G': mult = 1L << 30; end++; break;
	}
	if (end == s || *end != '\0' || v < 0) {
		if (rank == 0)
			fprintf(stderr, "%s: bad size %s\n", coll_name, s);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	return (long)(v * mult);
}

int main(int argc, char **argv)
{
	long minb = 1024, maxb = 1 << 20;
	double factor = 2;
	int iters = 20, warmup = 5, check = 1, opt;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	while ((opt = getopt(argc, argv, "b:e:f:n:w:c:")) != -1) {
		switch (opt) {
		case 'b': minb = parse_size(optarg); break;
		case 'e': maxb = parse_size(optarg); break;
		case 'f': factor = atof(optarg); break;
		case 'n': iters = atoi(optarg); break;
		case 'w': warmup = atoi(optarg); break;
		case 'c': check = atoi(optarg); break;
		default:
			if (rank == 0)
				fprintf(stderr, "usage: %s [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1]\n", argv[0]);
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
	}
	if (iters < 1 || minb > maxb || (minb != maxb && factor <= 1)) {
		if (rank == 0)
			fprintf(stderr, "%s: bad arguments\n", coll_name);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	long count, sendn, recvn;
	coll_layout(maxb, &count, &sendn, &recvn);
	float *send = malloc((sendn > 0 ? sendn : 1) * sizeof(float));
	float *recv = malloc((recvn > 0 ? recvn : 1) * sizeof(float));
	/* Every element holds an input before anything is timed, as
	 * vccl-bench's buffers do. A memset of zeros right after malloc is
	 * what GCC turns into calloc, which leaves fresh pages unmapped: the
	 * timed calls then read the kernel's zero page (always cached), and a
	 * single-copy read of it pins no memory of the sender's (a 2-rank
	 * 16 MiB broadcast ran twice as fast as on real data). */
	fill_inputs(send, sendn > 0 ? sendn : 1);
	fill_inputs(recv, recvn > 0 ? recvn : 1);
	if (rank == 0) {
		char name[MPI_MAX_PROCESSOR_NAME];
		int len, ver, sub;
		MPI_Get_processor_name(name, &len);
		MPI_Get_version(&ver, &sub);
		printf("# %s (MPI %d.%d): %d ranks  minBytes %ld maxBytes %ld step: %g(factor) warmup iters: %d iters: %d validation: %d\n",
		       coll_name, ver, sub, nranks, minb, maxb, factor, warmup, iters, check);
		printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count", "type", "redop", "root",
		       "time", "algbw", "busbw", "#wrong");
		printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)", "(elements)", "", "", "", "(us)",
		       "(GB/s)", "(GB/s)", "");
	}
	/* As nccl-tests (and vccl-bench) do: warm up at the largest and then
	 * the smallest size before the sweep, so that the job's first
	 * milliseconds are not timed in the first row. */
	long ends[2] = {maxb, minb};
	for (int e = 0; e < 2; e++) {
		coll_layout(ends[e], &count, &sendn, &recvn);
		for (int i = 0; i < warmup; i++)
			coll_run(send, recv, count);
	}
	double bwsum = 0;
	int nsizes = 0;
	long total_wrong = 0;
	for (long size = minb;;) {
		coll_layout(size, &count, &sendn, &recvn);
		long bytes = (sendn > recvn ? sendn : recvn) * (long)sizeof(float);
		for (int i = 0; i < warmup; i++)
			coll_run(send, recv, count);
		MPI_Barrier(MPI_COMM_WORLD);
		double t0 = MPI_Wtime();
		for (int i = 0; i < iters; i++)
			coll_run(send, recv, count);
		double us = (MPI_Wtime() - t0) * 1e6 / iters, sum;
		MPI_Allreduce(&us, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
		us = sum / nranks;
		double algbw = us > 0 ? bytes / (us * 1e3) : 0, busbw = algbw * coll_busfactor(nranks);
		long wrong = -1;
		if (check) {
			long outn = coll_outn(count, recvn), bad = 0;
			if (coll_sends())
				for (long j = 0; j < sendn; j++)
					send[j] = value(rank, j, COLL_WIDE);
			for (long j = 0; j < recvn; j++)
				recv[j] = NAN;
#ifdef COLL_INPUT_IN_RECV
			if (coll_sends())
				memcpy(recv, send, sendn * sizeof(float));
#endif
			coll_run(send, recv, count);
			for (long j = 0; j < outn; j++)
				if (!(recv[j] == coll_expect(j, count)))
					bad++;
			MPI_Allreduce(&bad, &wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
			total_wrong += wrong;
		}
		if (rank == 0) {
			char t[32];
			snprintf(t, sizeof t, us >= 10000 ? "%7.0f" : us >= 100 ? "%7.1f" : "%7.2f", us);
			char w[32];
			if (wrong < 0)
				snprintf(w, sizeof w, "N/A");
			else
				snprintf(w, sizeof w, "%ld", wrong);
			printf("%12ld  %12ld  %8s  %6s  %6d  %7s  %6.2f  %6.2f  %6s\n", bytes, count, "float32",
			       COLL_REDOP, COLL_ROOT, t, algbw, busbw, w);
			fflush(stdout);
		}
		bwsum += busbw;
		nsizes++;
		long next = (long)(size * factor);
		if (next <= size)
			next = size + 1;
		if (minb == maxb || next > maxb)
			break;
		size = next;
	}
	if (rank == 0) {
		if (check)
			printf("# Out of bounds values : %ld %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
		printf("# Avg bus bandwidth    : %g \n#\n", bwsum / nsizes);
	}
	free(send);
	free(recv);
	MPI_Finalize();
	return total_wrong ? 1 : 0;
}
