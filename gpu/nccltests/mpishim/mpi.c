/* A stand-in for the MPI calls of nccl-tests on one host: see mpi.h. */
#define _GNU_SOURCE
#include "mpi.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SLOT (256 * 1024)        /* bytes one rank contributes to one exchange */
#define MAGIC 0x7663636c6d706931ULL /* "vcclmpi1" */
#define TIMEOUT_S 600

struct header {
  uint64_t magic;
  uint64_t size;
  uint64_t count; /* ranks arrived at the current barrier */
  uint64_t gen;   /* barriers completed */
  char pad[32];
};

static int rank_, size_ = 1;
static struct header *hdr;
static char *slots;
static size_t maplen;
static char path[256];

static void die(const char *what) {
  fprintf(stderr, "mpi shim (rank %d of %d): %s\n", rank_, size_, what);
  exit(70);
}

static int envint(const char *a, const char *b, const char *c, int def) {
  const char *names[] = {a, b, c};
  for (int i = 0; i < 3; i++) {
    const char *v = names[i] ? getenv(names[i]) : NULL;
    if (v && *v) return atoi(v);
  }
  return def;
}

static uint64_t fnv(const char *s) {
  uint64_t h = 1469598103934665603ULL;
  for (; s && *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return h;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void barrier(void) {
  if (size_ == 1) return;
  uint64_t gen = __atomic_load_n(&hdr->gen, __ATOMIC_ACQUIRE);
  if (__atomic_add_fetch(&hdr->count, 1, __ATOMIC_ACQ_REL) == (uint64_t)size_) {
    __atomic_store_n(&hdr->count, 0, __ATOMIC_RELAXED);
    __atomic_add_fetch(&hdr->gen, 1, __ATOMIC_RELEASE);
    return;
  }
  double start = now();
  for (unsigned spins = 0; __atomic_load_n(&hdr->gen, __ATOMIC_ACQUIRE) == gen; spins++) {
    if (spins > 1000) usleep(50);
    if ((spins & 1023) == 0 && now() - start > TIMEOUT_S) die("a barrier timed out: a rank is gone or stuck");
  }
}

int MPI_Init(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  rank_ = envint("OMPI_COMM_WORLD_RANK", "PMI_RANK", "RANK", 0);
  size_ = envint("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "WORLD_SIZE", 1);
  if (size_ < 1 || rank_ < 0 || rank_ >= size_) die("bad rank or size in the environment");
  if (size_ == 1) return MPI_SUCCESS;
  /* The job's name: its token (vcclrun makes a fresh one per job), else
   * the rendezvous address. */
  const char *job = getenv("VCCL_JOB_TOKEN");
  char addr[128];
  if (!job || !*job) {
    snprintf(addr, sizeof addr, "%s:%s", getenv("MASTER_ADDR") ? getenv("MASTER_ADDR") : "",
             getenv("MASTER_PORT") ? getenv("MASTER_PORT") : "");
    job = addr;
  }
  snprintf(path, sizeof path, "/dev/shm/vccl-mpi-%016llx", (unsigned long long)fnv(job));
  maplen = sizeof(struct header) + (size_t)size_ * SLOT;
  int fd;
  if (rank_ == 0) {
    unlink(path);
    fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)maplen) != 0) die("cannot create the shared file");
  } else {
    double start = now();
    for (;;) {
      fd = open(path, O_RDWR);
      struct stat st;
      if (fd >= 0 && fstat(fd, &st) == 0 && (size_t)st.st_size == maplen) break;
      if (fd >= 0) close(fd);
      if (now() - start > 120) die("rank 0's shared file never appeared");
      usleep(1000);
    }
  }
  void *m = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) die("mmap");
  hdr = (struct header *)m;
  slots = (char *)m + sizeof(struct header);
  if (rank_ == 0) {
    hdr->size = (uint64_t)size_;
    __atomic_store_n(&hdr->magic, MAGIC, __ATOMIC_RELEASE);
  } else {
    double start = now();
    while (__atomic_load_n(&hdr->magic, __ATOMIC_ACQUIRE) != MAGIC) {
      if (now() - start > 120) die("rank 0 never set up the shared file");
      usleep(1000);
    }
  }
  barrier();
  return MPI_SUCCESS;
}

int MPI_Finalize(void) {
  if (size_ == 1) return MPI_SUCCESS;
  barrier();
  if (rank_ == 0) unlink(path);
  munmap(hdr, maplen);
  hdr = NULL;
  return MPI_SUCCESS;
}

int MPI_Abort(MPI_Comm comm, int code) {
  (void)comm;
  exit(code);
}

int MPI_Comm_size(MPI_Comm comm, int *size) {
  (void)comm;
  *size = size_;
  return MPI_SUCCESS;
}

int MPI_Comm_rank(MPI_Comm comm, int *rank) {
  (void)comm;
  *rank = rank_;
  return MPI_SUCCESS;
}

static size_t typesize(MPI_Datatype t) {
  switch (t) {
    case MPI_BYTE:
    case MPI_CHAR:
      return 1;
    case MPI_INT:
    case MPI_FLOAT:
      return 4;
    case MPI_LONG:
    case MPI_LONG_LONG:
    case MPI_INT64_T:
    case MPI_UINT64_T:
    case MPI_DOUBLE:
      return 8;
  }
  return 0;
}

/* exchange publishes n bytes of this rank and returns every rank's, valid
 * until release(). */
static const char *exchange(const void *mine, size_t n) {
  if (n > SLOT) die("an exchange larger than a slot");
  if (size_ == 1) return (const char *)mine;
  memcpy(slots + (size_t)rank_ * SLOT, mine, n);
  barrier();
  return slots;
}

static void release(void) { barrier(); }

int MPI_Barrier(MPI_Comm comm) {
  (void)comm;
  barrier();
  return MPI_SUCCESS;
}

int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *newcomm) {
  (void)comm;
  (void)key;
  const char *all = exchange(&color, sizeof color);
  for (int r = 0; r < size_; r++) {
    int c;
    memcpy(&c, all + (size_t)r * SLOT, sizeof c);
    if (c != color) die("MPI_Comm_split into several communicators is not supported");
  }
  release();
  *newcomm = MPI_COMM_WORLD;
  return MPI_SUCCESS;
}

int MPI_Comm_free(MPI_Comm *comm) {
  (void)comm;
  return MPI_SUCCESS;
}

int MPI_Bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  (void)comm;
  size_t n = (size_t)count * typesize(type);
  const char *all = exchange(buf, n);
  if (size_ > 1 && rank_ != root) memcpy(buf, all + (size_t)root * SLOT, n);
  if (size_ > 1) release();
  return MPI_SUCCESS;
}

int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                  MPI_Datatype recvtype, MPI_Comm comm) {
  (void)comm;
  (void)sendcount;
  (void)sendtype;
  size_t n = (size_t)recvcount * typesize(recvtype);
  const void *mine = sendbuf == MPI_IN_PLACE ? (const char *)recvbuf + (size_t)rank_ * n : sendbuf;
  if (size_ == 1) {
    if (mine != recvbuf) memmove(recvbuf, mine, n);
    return MPI_SUCCESS;
  }
  const char *all = exchange(mine, n);
  for (int r = 0; r < size_; r++) memcpy((char *)recvbuf + (size_t)r * n, all + (size_t)r * SLOT, n);
  release();
  return MPI_SUCCESS;
}

int MPI_Gather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
               MPI_Datatype recvtype, int root, MPI_Comm comm) {
  (void)comm;
  size_t n = (size_t)sendcount * typesize(sendtype);
  size_t rn = (size_t)recvcount * typesize(recvtype);
  const void *mine = sendbuf == MPI_IN_PLACE ? (const char *)recvbuf + (size_t)rank_ * rn : sendbuf;
  if (size_ == 1) {
    if (mine != recvbuf) memmove(recvbuf, mine, n);
    return MPI_SUCCESS;
  }
  const char *all = exchange(mine, n);
  if (rank_ == root)
    for (int r = 0; r < size_; r++) memcpy((char *)recvbuf + (size_t)r * rn, all + (size_t)r * SLOT, n);
  release();
  return MPI_SUCCESS;
}

#define FOLD(T)                                                  \
  do {                                                           \
    T *out = (T *)recvbuf;                                       \
    for (int i = 0; i < count; i++) {                            \
      T acc;                                                     \
      memcpy(&acc, all + (size_t)i * sizeof(T), sizeof(T));      \
      for (int r = 1; r < size_; r++) {                          \
        T v;                                                     \
        memcpy(&v, all + (size_t)r * SLOT + (size_t)i * sizeof(T), sizeof(T)); \
        if (op == MPI_SUM) acc += v;                             \
        else if (op == MPI_MIN) acc = v < acc ? v : acc;         \
        else if (op == MPI_MAX) acc = v > acc ? v : acc;         \
        else die("unknown MPI_Op");                              \
      }                                                          \
      out[i] = acc;                                              \
    }                                                            \
  } while (0)

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  (void)comm;
  size_t n = (size_t)count * typesize(type);
  const void *mine = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
  if (size_ == 1) {
    if (mine != recvbuf) memmove(recvbuf, mine, n);
    return MPI_SUCCESS;
  }
  const char *all = exchange(mine, n);
  switch (type) {
    case MPI_INT: FOLD(int); break;
    case MPI_LONG: FOLD(long); break;
    case MPI_LONG_LONG: FOLD(long long); break;
    case MPI_INT64_T: FOLD(int64_t); break;
    case MPI_UINT64_T: FOLD(uint64_t); break;
    case MPI_DOUBLE: FOLD(double); break;
    case MPI_FLOAT: FOLD(float); break;
    default: die("MPI_Allreduce of an unsupported datatype");
  }
  release();
  return MPI_SUCCESS;
}
