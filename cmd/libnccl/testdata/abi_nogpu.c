/* The C ABI where there is no GPU: every call answers (never crashes or
 * hangs), communicators are refused with ncclInvalidUsage and a last
 * error that says why, and calls on nothing are invalid arguments.
 * Built and run by abi_test.go against include/nccl.h. */
#include <stdio.h>
#include <string.h>

#include "nccl.h"

static int failures;

#define EXPECT(cond, ...)                   \
  do {                                      \
    if (!(cond)) {                          \
      failures++;                           \
      printf("FAIL %s:%d: ", __FILE__, __LINE__); \
      printf(__VA_ARGS__);                  \
      printf("\n");                         \
    }                                       \
  } while (0)

int main(void) {
  int version = 0;
  EXPECT(ncclGetVersion(&version) == ncclSuccess, "ncclGetVersion");
  EXPECT(version == NCCL_VERSION_CODE, "version %d, header says %d", version, NCCL_VERSION_CODE);
  EXPECT(ncclGetVersion(NULL) == ncclInvalidArgument, "ncclGetVersion(NULL)");

  for (int r = ncclSuccess; r < ncclNumResults; r++) {
    const char *s = ncclGetErrorString((ncclResult_t)r);
    EXPECT(s != NULL && s[0] != 0, "no text for result %d", r);
  }

  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  EXPECT(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId: %s", ncclGetLastError(NULL));

  ncclComm_t comm = (ncclComm_t)&id;
  ncclResult_t r = ncclCommInitRank(&comm, 2, id, 0);
  EXPECT(r == ncclInvalidUsage, "ncclCommInitRank without a GPU returned %d (%s)", r, ncclGetErrorString(r));
  EXPECT(comm == NULL, "a communicator came back from a failed init");
  const char *last = ncclGetLastError(NULL);
  EXPECT(last != NULL && strstr(last, "GPU") != NULL, "last error does not say why: %s", last ? last : "(null)");
  printf("ncclCommInitRank: %s: %s\n", ncclGetErrorString(r), last);

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  r = ncclCommInitRankConfig(&comm, 2, id, 1, &config);
  EXPECT(r == ncclInvalidUsage, "ncclCommInitRankConfig without a GPU returned %d", r);

  ncclComm_t comms[2];
  r = ncclCommInitAll(comms, 2, NULL);
  EXPECT(r == ncclInvalidUsage, "ncclCommInitAll without a GPU returned %d", r);

  /* A group of initialisations fails at its end. */
  EXPECT(ncclGroupStart() == ncclSuccess, "ncclGroupStart");
  r = ncclCommInitRank(&comm, 2, id, 0);
  ncclResult_t r2 = ncclGroupEnd();
  EXPECT(r == ncclInvalidUsage || r2 == ncclInvalidUsage, "grouped init without a GPU: %d then %d", r, r2);

  ncclUniqueId junk;
  memset(&junk, 7, sizeof junk);
  r = ncclCommInitRank(&comm, 2, junk, 0);
  EXPECT(r == ncclInvalidArgument || r == ncclInvalidUsage, "init from a junk id returned %d", r);

  float buf[4] = {0};
  r = ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, NULL, NULL);
  EXPECT(r == ncclInvalidArgument, "ncclAllReduce on no communicator returned %d", r);
  r = ncclSend(buf, 4, ncclFloat, 1, NULL, NULL);
  EXPECT(r == ncclInvalidArgument, "ncclSend on no communicator returned %d", r);
  r = ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, (ncclComm_t)buf, NULL);
  EXPECT(r == ncclInvalidArgument, "ncclAllReduce on a pointer that is no communicator returned %d", r);

  ncclResult_t async = ncclSuccess;
  EXPECT(ncclCommGetAsyncError(NULL, &async) == ncclInvalidArgument, "ncclCommGetAsyncError(NULL)");
  int n = 0;
  EXPECT(ncclCommCount(NULL, &n) == ncclInvalidArgument, "ncclCommCount(NULL)");
  EXPECT(ncclCommDestroy(NULL) == ncclSuccess, "ncclCommDestroy(NULL)");
  EXPECT(ncclCommAbort(NULL) == ncclSuccess, "ncclCommAbort(NULL)");

  EXPECT(ncclGroupEnd() == ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  EXPECT(ncclGroupStart() == ncclSuccess && ncclGroupStart() == ncclSuccess, "nested ncclGroupStart");
  EXPECT(ncclGroupEnd() == ncclSuccess && ncclGroupEnd() == ncclSuccess, "empty nested group");

  void *p = NULL;
  r = ncclMemAlloc(&p, 1 << 20);
  EXPECT(r != ncclSuccess && p == NULL, "ncclMemAlloc without a GPU returned %d", r);
  ncclRedOp_t op;
  float two = 2;
  r = ncclRedOpCreatePreMulSum(&op, &two, ncclFloat, ncclScalarHostImmediate, NULL);
  EXPECT(r == ncclInvalidArgument, "ncclRedOpCreatePreMulSum on no communicator returned %d", r);

  if (failures) {
    printf("%d failures\n", failures);
    return 1;
  }
  printf("PASS\n");
  return 0;
}
