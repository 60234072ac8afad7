/* MPI_Bcast from rank 0, float32: the peer of vccl-bench broadcast. MPI's
 * broadcast is in place by nature: the root sends from recv, where the
 * checked run puts its input (COLL_INPUT_IN_RECV). */
#define COLL_NAME "broadcast"
#define COLL_REDOP "none"
#define COLL_ROOT 0
#define COLL_WIDE 1
#define COLL_INPUT_IN_RECV
#include "common.h"

static double coll_busfactor(int n) { (void)n; return 1; }

static void coll_layout(long size, long *count, long *sendn, long *recvn)
{
	*count = size / 4;
	*sendn = *recvn = *count;
}

static void coll_run(float *send, float *recv, long count)
{
	(void)send;
	MPI_Bcast(recv, (int)count, MPI_FLOAT, COLL_ROOT, MPI_COMM_WORLD);
}

static float coll_expect(long j, long count) { (void)count; return value(COLL_ROOT, j, COLL_WIDE); }
static long coll_outn(long count, long recvn) { (void)recvn; return count; }
static int coll_sends(void) { return rank == COLL_ROOT; }
