// callbench.c: what uprobes cost a CUDA process. After a line on stdin (so
// that the tracer can attach to its pid), it makes N "requests" and prints
// the mean time of one in nanoseconds. A request is one cuLaunchKernel and
// one cuStreamSynchronize (FAKECUDA_SYNC_US=0: they do nothing), or with
// "hint" as second argument one gpreempt_hint and its gpreempt_ready.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                   void *, void **, void **);
int cuStreamSynchronize(void *);
unsigned long gpreempt_hint(char *, unsigned long);
int gpreempt_ready(unsigned long);

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 100000;
	int hint = argc > 2 && strcmp(argv[2], "hint") == 0;
	char line[16];
	if (n <= 0 || !fgets(line, sizeof line, stdin))
		return 1;
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < n; i++) {
		if (hint) {
			gpreempt_ready(gpreempt_hint("bench", 100));
			continue;
		}
		cuLaunchKernel(0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0);
		cuStreamSynchronize(0);
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	double ns = (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
	printf("%.1f\n", ns / n);
	return 0;
}
