/* MPI_Allgather, float32, out of place: the peer of vccl-bench allgather.
 * size is the whole receive buffer; count is per rank. */
#define COLL_NAME "allgather"
#define COLL_REDOP "none"
#define COLL_ROOT -1
#define COLL_WIDE 1
#include "common.h"

static double coll_busfactor(int n) { return (double)(n - 1) / n; }

static void coll_layout(long size, long *count, long *sendn, long *recvn)
{
	*count = size / 4 / nranks;
	*sendn = *count;
	*recvn = *count * nranks;
}

static void coll_run(float *send, float *recv, long count)
{
	MPI_Allgather(send, (int)count, MPI_FLOAT, recv, (int)count, MPI_FLOAT, MPI_COMM_WORLD);
}

static float coll_expect(long j, long count) { return value((int)(j / count), j % count, COLL_WIDE); }
static long coll_outn(long count, long recvn) { (void)count; return recvn; }
static int coll_sends(void) { return 1; }
