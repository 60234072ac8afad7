/* Memory bandwidth the way a 2-rank all-reduce of a large buffer meets it:
 * one thread per CPU, pinned, each copying its own 64 MiB buffer with
 * memcpy (glibc writes a copy this large past the caches), all at once;
 * prints each thread's best of 10 copies, as GB/s copied and as bytes read
 * plus written.
 *
 * It bounds what any 2-rank all-reduce of 64 MiB can reach on this VM:
 * each rank reads its 64 MiB input and writes its 64 MiB output at least
 * once, 256 MiB for the two, so the call takes at least 256 MiB over the
 * two threads' summed rate here (BENCHMARKS.md, the 11:15 reading).
 *
 *   gcc -O2 -Wall -pthread -o /tmp/membw bench/membw.c && /tmp/membw */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SIZE (64 << 20)
#define COPIES 10
#define THREADS 2

static pthread_barrier_t start;

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static void *copier(void *arg)
{
	int cpu = (int)(long)arg;
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	pthread_setaffinity_np(pthread_self(), sizeof s, &s);
	char *src = malloc(SIZE), *dst = malloc(SIZE);
	if (!src || !dst) {
		perror("malloc");
		exit(1);
	}
	memset(src, 1, SIZE);
	memset(dst, 2, SIZE);
	pthread_barrier_wait(&start);
	double best = 1e9;
	for (int i = 0; i < COPIES; i++) {
		double t = now();
		memcpy(dst, src, SIZE);
		t = now() - t;
		if (t < best)
			best = t;
	}
	printf("CPU %d: 64 MiB in %.2f ms: %.1f GB/s copied, %.1f GB/s read + written\n",
	       cpu, best * 1e3, SIZE / best / 1e9, 2.0 * SIZE / best / 1e9);
	free(src);
	free(dst);
	return NULL;
}

int main(void)
{
	pthread_t t[THREADS];
	pthread_barrier_init(&start, NULL, THREADS);
	for (long i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, copier, (void *)i);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	return 0;
}
