/* Memory bandwidth the way a 2-rank all-reduce of a large buffer meets it:
 * one thread per CPU, pinned, each copying its own 64 MiB buffer with
 * memcpy (glibc writes a copy this large past the caches), all at once;
 * prints each thread's best of 10 copies, as GB/s copied and as bytes read
 * plus written.
 *
 * The thread count is the first argument (default 2); with more than one,
 * the last line sums the threads, the bound of a collective of that many
 * ranks. It bounds what any 2-rank all-reduce of 64 MiB can reach on this VM:
 * each rank reads its 64 MiB input and writes its 64 MiB output at least
 * once, 256 MiB for the two, so the call takes at least 256 MiB over the
 * two threads' summed rate here (BENCHMARKS.md, the 11:15 reading).
 *
 *   gcc -O2 -Wall -pthread -o /tmp/membw bench/membw.c && /tmp/membw 8 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SIZE (64 << 20)
#define COPIES 10
#define MAXTHREADS 256

static pthread_barrier_t start;
static double rate[MAXTHREADS];

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
	rate[cpu] = 2.0 * SIZE / best / 1e9;
	printf("CPU %d: 64 MiB in %.2f ms: %.1f GB/s copied, %.1f GB/s read + written\n",
	       cpu, best * 1e3, SIZE / best / 1e9, 2.0 * SIZE / best / 1e9);
	free(src);
	free(dst);
	return NULL;
}

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 2;
	if (threads < 1 || threads > MAXTHREADS) {
		fprintf(stderr, "membw: thread count %s: want 1 to %d\n", argv[1], MAXTHREADS);
		return 2;
	}
	pthread_t t[MAXTHREADS];
	pthread_barrier_init(&start, NULL, threads);
	for (long i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, copier, (void *)i);
	double sum = 0;
	for (int i = 0; i < threads; i++) {
		pthread_join(t[i], NULL);
		sum += rate[i];
	}
	printf("%d threads: %.1f GB/s read + written together\n", threads, sum);
	return 0;
}
