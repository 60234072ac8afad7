/* MPI_Allreduce, float32 sum, out of place: the peer of vccl-bench allreduce. */
#define COLL_NAME "allreduce"
#define COLL_REDOP "sum"
#define COLL_ROOT -1
#define COLL_WIDE 0
#include "common.h"

static double coll_busfactor(int n) { return 2.0 * (n - 1) / n; }

static void coll_layout(long size, long *count, long *sendn, long *recvn)
{
	*count = size / 4;
	*sendn = *recvn = *count;
}

static void coll_run(float *send, float *recv, long count)
{
	MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

static float coll_expect(long j, long count)
{
	(void)count;
	float s = 0;
	for (int p = 0; p < nranks; p++)
		s += value(p, j, COLL_WIDE);
	return s;
}

static long coll_outn(long count, long recvn) { (void)recvn; return count; }
static int coll_sends(void) { return 1; }
