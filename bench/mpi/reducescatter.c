/* MPI_Reduce_scatter_block, float32 sum, out of place: the peer of
 * vccl-bench reducescatter. size is the whole send buffer; count is the
 * block each rank receives. */
#define COLL_NAME "reducescatter"
#define COLL_REDOP "sum"
#define COLL_ROOT -1
#define COLL_WIDE 0
#include "common.h"

static double coll_busfactor(int n) { return (double)(n - 1) / n; }

static void coll_layout(long size, long *count, long *sendn, long *recvn)
{
	*count = size / 4 / nranks;
	*sendn = *count * nranks;
	*recvn = *count;
}

static void coll_run(float *send, float *recv, long count)
{
	MPI_Reduce_scatter_block(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

static float coll_expect(long j, long count)
{
	float s = 0;
	for (int p = 0; p < nranks; p++)
		s += value(p, rank * count + j, COLL_WIDE);
	return s;
}

static long coll_outn(long count, long recvn) { (void)recvn; return count; }
static int coll_sends(void) { return 1; }
