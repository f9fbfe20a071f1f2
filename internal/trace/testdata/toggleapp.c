// toggleapp.c: an LC's requests for BenchmarkProbeToggleCost. After a line on stdin, each request
// is LAUNCHES cuLaunchKernel calls with CPU work between them (STEP_US each, as a decode's host
// side), then a synchronize; between requests it sleeps GAP_MS. For each request it prints its
// wall and its thread's CPU time in ns: a request's time off its CPU is the difference.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "spin.h"

int cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                   void *, void **, void **);
int cuStreamSynchronize(void *);

static long long now(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc != 5)
		return 2;
	long requests = atol(argv[1]), launches = atol(argv[2]), step_us = atol(argv[3]), gap_ms = atol(argv[4]);
	char line[16];
	if (!fgets(line, sizeof line, stdin))
		return 1;
	for (long r = 0; r < requests; r++) {
		long long w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_THREAD_CPUTIME_ID);
		for (long i = 0; i < launches; i++) {
			cuLaunchKernel(0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0);
			spin(step_us * 1000LL);
		}
		cuStreamSynchronize(0);
		long long w1 = now(CLOCK_MONOTONIC), c1 = now(CLOCK_THREAD_CPUTIME_ID);
		printf("%lld %lld\n", w1 - w0, c1 - c0);
		fflush(stdout);
		struct timespec gap = {gap_ms / 1000, (gap_ms % 1000) * 1000000L};
		nanosleep(&gap, 0);
	}
	return 0;
}
