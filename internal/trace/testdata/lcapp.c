// lcapp.c: an "LC process" for the uprobe tests. For each line on stdin (so
// the test can attach to its pid first) it makes requests the way an
// inference server does:
//   1. h = hint("infer", 500); launch; launch; ready(h); cuStreamSynchronize
//   2. launch (Ex); cuEventSynchronize (which fails with 700)
//   3. h = hint("warmup", 7); cancel(h)
//   4. on a second thread: launch x3; 20 ms of CPU work; cuCtxSynchronize
//      (which sleeps)
// and prints its pid and the second thread's tid; it exits at the end of
// its input.
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "spin.h"

int cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                   void *, void **, void **);
int cuLaunchKernelEx(const void *, void *, void **, void **);
int cuStreamSynchronize(void *);
int cuEventSynchronize(void *);
int cuCtxSynchronize(void);
uint64_t gpreempt_hint(char *, uint64_t);
int gpreempt_ready(uint64_t);
int gpreempt_cancel(uint64_t);

static long other_tid;

static void *worker(void *arg)
{
	(void)arg;
	other_tid = syscall(SYS_gettid);
	for (int i = 0; i < 3; i++)
		cuLaunchKernel(0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0);
	spin(20000000);
	cuCtxSynchronize();
	return 0;
}

static int serve(void)
{
	uint64_t h = gpreempt_hint("infer", 500);
	cuLaunchKernel((void *)0x1234, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0);
	cuLaunchKernel((void *)0x1234, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0);
	gpreempt_ready(h);
	cuStreamSynchronize((void *)0x5678);

	cuLaunchKernelEx(0, 0, 0, 0);
	cuEventSynchronize(0);

	gpreempt_cancel(gpreempt_hint("warmup", 7));

	pthread_t th;
	if (pthread_create(&th, 0, worker, 0) != 0)
		return 1;
	pthread_join(th, 0);
	printf("%d %ld\n", getpid(), other_tid);
	fflush(stdout);
	return 0;
}

int main(void)
{
	char line[16];
	while (fgets(line, sizeof line, stdin))
		if (serve() != 0)
			return 1;
	return 0;
}
