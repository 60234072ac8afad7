/*
 * mpi.h — the few MPI calls nccl-tests makes, for one host, without MPI.
 *
 * nccl-tests runs one process per rank only when built with MPI=1. This
 * stand-in (libmpi.so from mpi.c) lets it do so on a machine with no MPI:
 * the processes are started by any launcher that sets RANK and WORLD_SIZE
 * (vcclrun, torchrun) or Open MPI's variables, and meet in a shared-memory
 * file named after the job. Every collective is an all-gather through that
 * file between two barriers; that is all nccl-tests needs (a handful of
 * small exchanges at start and end). One communicator: MPI_Comm_split
 * accepts only the split that keeps every process together.
 */
#ifndef VCCL_MPI_SHIM_H
#define VCCL_MPI_SHIM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int MPI_Comm;
typedef int MPI_Datatype;
typedef int MPI_Op;

#define MPI_SUCCESS 0
#define MPI_COMM_WORLD 1
#define MPI_IN_PLACE ((void *)1)

#define MPI_DATATYPE_NULL 0
#define MPI_BYTE 1
#define MPI_CHAR 2
#define MPI_INT 3
#define MPI_LONG 4
#define MPI_LONG_LONG 5
#define MPI_INT64_T 6
#define MPI_UINT64_T 7
#define MPI_DOUBLE 8
#define MPI_FLOAT 9

#define MPI_SUM 1
#define MPI_MIN 2
#define MPI_MAX 3

int MPI_Init(int *argc, char ***argv);
int MPI_Finalize(void);
int MPI_Comm_size(MPI_Comm comm, int *size);
int MPI_Comm_rank(MPI_Comm comm, int *rank);
int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *newcomm);
int MPI_Comm_free(MPI_Comm *comm);
int MPI_Barrier(MPI_Comm comm);
int MPI_Bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm);
int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                  MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Gather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
               MPI_Datatype recvtype, int root, MPI_Comm comm);
int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm);
int MPI_Abort(MPI_Comm comm, int code);

#ifdef __cplusplus
}
#endif

#endif
