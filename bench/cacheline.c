/* Cache-line hand-off between CPU 0 and CPU 1: two threads pinned one to
 * each pass a counter back and forth through one line; prints the median
 * one-way time (ns) of 5 runs of 100000 round trips.
 *
 * bench/compare.sh runs it before every repeat because this VM's two CPUs
 * do not stay put on the host: the hand-off measured either about 30 ns or
 * about 165 ns (2026-11-30, minutes apart), and at 165 a 1 MiB VCCL
 * broadcast over shared memory took 323-428 us against 54-60 us at 30
 * (the shm ring's sender writes lines the receiver's core just read), while
 * Open MPI's took 61 us in both. The number says which machine a run had. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define ROUNDS 100000
#define RUNS 5

static _Alignas(64) atomic_long line;

static int pin(int cpu)
{
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	return pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static void *answer(void *arg)
{
	(void)arg;
	if (pin(1) != 0) {
		fprintf(stderr, "cacheline: cannot run on CPU 1\n");
		exit(1);
	}
	for (long i = 1; i < 2L * ROUNDS * RUNS; i += 2) {
		while (atomic_load_explicit(&line, memory_order_acquire) != i)
			;
		atomic_store_explicit(&line, i + 1, memory_order_release);
	}
	return NULL;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(void)
{
	pthread_t t;
	if (pin(0) != 0) {
		fprintf(stderr, "cacheline: cannot run on CPU 0\n");
		return 1;
	}
	if (pthread_create(&t, NULL, answer, NULL) != 0) {
		fprintf(stderr, "cacheline: pthread_create failed\n");
		return 1;
	}
	double ns[RUNS];
	long v = 0;
	for (int r = 0; r < RUNS; r++) {
		struct timespec a, b;
		clock_gettime(CLOCK_MONOTONIC, &a);
		for (long i = 0; i < ROUNDS; i++, v += 2) {
			atomic_store_explicit(&line, v + 1, memory_order_release);
			while (atomic_load_explicit(&line, memory_order_acquire) != v + 2)
				;
		}
		clock_gettime(CLOCK_MONOTONIC, &b);
		ns[r] = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / (2.0 * ROUNDS);
	}
	pthread_join(t, NULL);
	qsort(ns, RUNS, sizeof ns[0], cmp);
	printf("%.0f\n", ns[RUNS / 2]);
	return 0;
}
