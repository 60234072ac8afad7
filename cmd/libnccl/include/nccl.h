/*
 * nccl.h — the C interface of VCCL-Go's libnccl.so.2.
 *
 * VCCL-Go is a drop-in for NCCL: this header declares the functions,
 * types and constants a program uses to call it, written for VCCL-Go from
 * NCCL's public API documentation. The names, numeric values and struct
 * layouts are NCCL's (the API of NCCL 2.21), so that a program built
 * against NCCL's own header runs on this library unmodified, and one
 * built against this header runs on either. docs/nccl-abi.md says what is
 * implemented and what returns ncclInvalidUsage.
 */
#ifndef NCCL_H_
#define NCCL_H_

#include <limits.h>
#include <stddef.h>

/* cudaStream_t (and half, bfloat16): from the CUDA runtime's headers when
 * they are there, as NCCL's header includes them; else the same opaque
 * stream handle declared here. */
#if defined(__has_include) && !defined(VCCL_NO_CUDA_HEADERS)
#if __has_include(<cuda_runtime.h>)
#include <cuda_runtime.h>
#include <cuda_fp16.h> /* half, as NCCL's header gives it */
#if defined(CUDART_VERSION) && CUDART_VERSION >= 11000
#include <cuda_bf16.h>
#endif
#define VCCL_HAVE_CUDA_RUNTIME 1
#endif
#endif
#ifndef VCCL_HAVE_CUDA_RUNTIME
typedef struct CUstream_st *cudaStream_t;
#endif

/* VCCL_CONST qualifies pointers the library only reads. The library's own
 * Go build defines it empty (its exported functions cannot say const). */
#ifndef VCCL_CONST
#define VCCL_CONST const
#endif

#define NCCL_MAJOR 2
#define NCCL_MINOR 21
#define NCCL_PATCH 5
#define NCCL_SUFFIX "vccl"
/* Versions from 2.9 are MAJOR*10000 + MINOR*100 + PATCH, older ones
 * MAJOR*1000 + MINOR*100 + PATCH. */
#define NCCL_VERSION(X, Y, Z) \
  (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))
#define NCCL_VERSION_CODE NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)

#ifdef __cplusplus
extern "C" {
#endif

/* A communicator: one rank's handle, opaque to the program. */
typedef struct ncclComm *ncclComm_t;
#define NCCL_COMM_NULL NULL

/* What every rank of a communicator is given to find the others. VCCL's
 * carries the address of the rendezvous store ncclGetUniqueId started and
 * the job's token. */
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

/* Every function returns one of these. */
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1, /* a CUDA call failed */
  ncclSystemError = 2,        /* a system call or the network failed */
  ncclInternalError = 3,      /* a bug in the library */
  ncclInvalidArgument = 4,    /* an argument is wrong */
  ncclInvalidUsage = 5,       /* a call the library cannot serve here (no GPU, unsupported) */
  ncclRemoteError = 6,        /* a peer process is gone or a link failed */
  ncclInProgress = 7,         /* a non-blocking call is still running */
  ncclNumResults = 8
} ncclResult_t;

/* Communicator options for ncclCommInitRankConfig and ncclCommSplit. VCCL
 * reads size, magic and version, and ignores the tuning fields. */
#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1

typedef struct ncclConfig_v21700 {
  size_t size;         /* sizeof(ncclConfig_t), set by the initializer */
  unsigned int magic;  /* 0xcafebeef, set by the initializer */
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char *netName;
  int splitShare;
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER                                           \
  {                                                                       \
    sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), \
    NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,  \
    NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT   \
  }

/* Element types. VCCL reduces every type but the 8-bit floats, which it
 * only moves (all-gather, broadcast, all-to-all, send and receive). */
typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

/* Reductions. Values from ncclNumOps up are pre-multiplied sums made by
 * ncclRedOpCreatePreMulSum; the last enumerator makes the type 32 bits. */
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff
} ncclRedOp_t;

/* Where a pre-multiplied sum's scalar lives: device memory, read when each
 * operation runs, or host memory, read once when the op is made. */
typedef enum {
  ncclScalarDevice = 0,
  ncclScalarHostImmediate = 1
} ncclScalarResidence_t;

/* ---- Version, ids, errors ---- */
ncclResult_t ncclGetVersion(int *version);
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);
VCCL_CONST char *ncclGetErrorString(ncclResult_t result);
/* The calling thread's last error, in words (the comm is not needed). */
VCCL_CONST char *ncclGetLastError(ncclComm_t comm);

/* ---- Communicators ----
 * The device is the calling thread's current CUDA device. Within
 * ncclGroupStart/ncclGroupEnd, initialisations run together at
 * ncclGroupEnd (one thread may then create the ranks of several GPUs). */
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config);
ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
                                      ncclUniqueId *commIds, ncclConfig_t *config);
ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, VCCL_CONST int *devlist);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config);
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);
ncclResult_t ncclCommCount(VCCL_CONST ncclComm_t comm, int *count);
ncclResult_t ncclCommCuDevice(VCCL_CONST ncclComm_t comm, int *device);
ncclResult_t ncclCommUserRank(VCCL_CONST ncclComm_t comm, int *rank);

/* Buffer registration is accepted and changes nothing: VCCL maps a
 * buffer for its peers the first time an operation uses it. */
ncclResult_t ncclCommRegister(VCCL_CONST ncclComm_t comm, void *buff, size_t size, void **handle);
ncclResult_t ncclCommDeregister(VCCL_CONST ncclComm_t comm, void *handle);
ncclResult_t ncclMemAlloc(void **ptr, size_t size);
ncclResult_t ncclMemFree(void *ptr);

/* ---- Reductions ---- */
ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);

/* ---- Collectives ----
 * Each returns once its work is queued behind the work already on stream;
 * work queued on stream afterwards runs after it. Buffers are device
 * memory of the communicator's GPU allocated with cudaMalloc (CUDA IPC
 * must be able to share it). In place: sendbuff == recvbuff (for
 * all-gather, sendbuff at rank*sendcount of recvbuff; for reduce-scatter,
 * recvbuff at rank*recvcount of sendbuff). */
ncclResult_t ncclAllReduce(VCCL_CONST void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclBroadcast(VCCL_CONST void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream);
ncclResult_t ncclReduce(VCCL_CONST void *sendbuff, void *recvbuff, size_t count,
                        ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                        cudaStream_t stream);
ncclResult_t ncclAllGather(VCCL_CONST void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduceScatter(VCCL_CONST void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream);
ncclResult_t ncclAlltoAll(VCCL_CONST void *sendbuff, void *recvbuff, size_t count,
                          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclGather(VCCL_CONST void *sendbuff, void *recvbuff, size_t count,
                        ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclScatter(VCCL_CONST void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);

/* ---- Point to point ----
 * Sends and receives between two ranks match in the order they are
 * called. Put the sends and receives that must progress together (an
 * exchange, an all-to-all) in one group; a rank may send to itself in a
 * group that also receives from itself. */
ncclResult_t ncclSend(VCCL_CONST void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);

/* ---- Groups ---- */
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

#ifdef __cplusplus
}
#endif

#endif /* NCCL_H_ */
