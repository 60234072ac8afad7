/* A C model of the direct all-reduce across the cores of a host (float32,
 * in place): W processes, one a core; rank r reduces block r of every
 * rank's buffer, chunk by chunk, then copies every other block from the
 * rank that reduced it (hostdirect.go's shape). What it models is how a
 * rank reaches its peers' memory:
 *
 *   cma       process_vm_readv of each peer's chunk into a scratch buffer,
 *             reduced from there; the all-gather by process_vm_readv too
 *             (what the shm transport's single copy does)
 *   shmcpy    the buffers in one shared mapping: each peer's chunk copied
 *             into scratch and reduced from there, the all-gather by memcpy
 *   shmcpynt  shmcpy with the all-gather written by non-temporal stores
 *   shm       reduced straight from the peers' mapped chunks
 *   shmnt     shm with the all-gather written by non-temporal stores
 *
 * Prints the mean and best of ITERS calls as nccl-tests' busbw
 * (2(W-1)/W * bytes / time); every call's result is checked. BENCHMARKS.md
 * ("Known limits") has a run on the 16-core host.
 *
 *   gcc -O3 -march=x86-64-v3 -o /tmp/hostprobe bench/hostprobe.c
 *   /tmp/hostprobe MODE W BYTES CHUNK ITERS    (e.g. cma 16 67108864 65536 10) */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <stdatomic.h>
#include <immintrin.h>

static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
typedef struct { _Atomic long count; _Atomic long gen; char pad[48]; _Atomic long pid[256]; void *addr[256]; double t[256]; } ctl_t;
static ctl_t *ctl; static int W;
static void barrier(void){ long g=atomic_load(&ctl->gen); if(atomic_fetch_add(&ctl->count,1)==W-1){atomic_store(&ctl->count,0);atomic_fetch_add(&ctl->gen,1);} else while(atomic_load(&ctl->gen)==g) _mm_pause(); }
static void add(float *d,const float *a,const float *b,size_t n){for(size_t i=0;i<n;i++)d[i]=a[i]+b[i];}
static void cpynt(char *d,const char *s,size_t n){ size_t i=0; for(;i+32<=n;i+=32){__m256i v=_mm256_loadu_si256((const __m256i*)(s+i));_mm256_stream_si256((__m256i*)(d+i),v);} memcpy(d+i,s+i,n-i);} 
static void cmaread(int p,void *dst,void *src,size_t n){ struct iovec l={dst,n},r={src,n}; ssize_t k=process_vm_readv(ctl->pid[p],&l,1,&r,1,0); if(k!=(ssize_t)n){perror("pvr");exit(1);} }
int main(int argc,char**argv){
  if(argc!=6){fprintf(stderr,"usage: hostprobe cma|shmcpy|shmcpynt|shm|shmnt W BYTES CHUNK ITERS\n");return 2;}
  const char*mode=argv[1]; W=atoi(argv[2]); size_t S=strtoul(argv[3],0,0), C=strtoul(argv[4],0,0); int iters=atoi(argv[5]);
  if(strcmp(mode,"cma")&&strcmp(mode,"shmcpy")&&strcmp(mode,"shmcpynt")&&strcmp(mode,"shm")&&strcmp(mode,"shmnt")){fprintf(stderr,"hostprobe: unknown mode %s\n",mode);return 2;}
  if(W<1||W>256||iters<1||C<32||C%32||S%((size_t)W*C)){fprintf(stderr,"hostprobe: want 1 <= W <= 256, ITERS >= 1, CHUNK a multiple of 32, BYTES a multiple of W*CHUNK\n");return 2;}
  ctl=mmap(0,sizeof(ctl_t),PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS,-1,0);
  int shm=strncmp(mode,"shm",3)==0, nt=strcmp(mode,"shmnt")==0||strcmp(mode,"shmcpynt")==0, viacopy=strncmp(mode,"shmcpy",6)==0;
  char*region=0; if(shm){region=mmap(0,S*W,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS,-1,0);}
  for(int r=0;r<W;r++) if(fork()==0){
    cpu_set_t cs;CPU_ZERO(&cs);CPU_SET(r,&cs);sched_setaffinity(0,sizeof cs,&cs);
    char*buf= shm? region+S*r : aligned_alloc(4096,S);
    char*scr=aligned_alloc(4096,2*C);
    size_t bl=S/W, n=bl/4; (void)n;
    ctl->pid[r]=getpid(); ctl->addr[r]=buf;
    float*f=(float*)buf; for(size_t i=0;i<S/4;i++) f[i]=1.0f; memset(scr,0,2*C);
    barrier();
    double best=1e9,sum=0;
    for(int it=0;it<iters+3;it++){
      for(size_t i=0;i<S/4;i++) f[i]=1.0f; /* reset input (not timed) */
      barrier(); double t0=now();
      char*mine=buf+bl*r;
      for(size_t off=0;off<bl;off+=C){ size_t c=off+C<=bl?C:bl-off;
        if(shm&&viacopy){ for(int k=1;k<W;k++){int p=(r+k)%W; memcpy(scr,(char*)ctl->addr[p]+bl*r+off,c); add((float*)(mine+off),(float*)(mine+off),(float*)scr,c/4);} }
        else if(shm){ float*d=(float*)(mine+off); int first=1;
          for(int k=1;k<W;k++){int p=(r+k)%W; float*s=(float*)((char*)ctl->addr[p]+bl*r+off); add(d, first?(float*)(mine+off):d, s, c/4); first=0;} }
        else { for(int k=1;k<W;k++){int p=(r+k)%W; cmaread(p,scr,(char*)ctl->addr[p]+bl*r+off,c); add((float*)(mine+off),(float*)(mine+off),(float*)scr,c/4);} }
      }
      barrier();
      for(int k=1;k<W;k++){int p=(r+W-k)%W; char*src=(char*)ctl->addr[p]+bl*p, *dst=buf+bl*p;
        if(shm){ if(nt) cpynt(dst,src,bl); else memcpy(dst,src,bl);} else { for(size_t off=0;off<bl;off+=C){size_t c=off+C<=bl?C:bl-off; cmaread(p,dst+off,src+off,c);} } }
      if(nt) _mm_sfence();
      barrier(); double t=now()-t0;
      if(it>=3){ if(t<best)best=t; sum+=t; }
      if(f[0]!=(float)W || f[S/4-1]!=(float)W){fprintf(stderr,"wrong %f\n",f[0]);exit(1);}
    }
    ctl->t[r]=sum/iters; if(r==0){ double t=sum/iters; printf("%s W=%d S=%zu C=%zu mean %.3f ms best %.3f ms busbw %.2f GB/s (best %.2f)\n",mode,W,S,C,t*1e3,best*1e3,2.0*(W-1)/W*S/t/1e9,2.0*(W-1)/W*S/best/1e9);} 
    exit(0);
  }
  for(int r=0;r<W;r++) wait(0);
  return 0;
}
