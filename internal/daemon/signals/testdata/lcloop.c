// lcloop.c: an LC process that pushes no latency, for the request-tracing
// test. It waits for a line on stdin (so the test can attach first), then
// makes N requests (argv[1]) the way an inference server does: an event
// record and an input copy, 3 ms of CPU work (building the batch), two
// kernel launches and a cuStreamSynchronize (the fake libcuda's sleeps 2 ms), and
// one request whose synchronization fails (not a served request), each
// after 30 ms of quiet (more than the 25 ms quiet gap a process has until
// it learns its own). It prints its pid when done.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "spin.h"

int cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                   void *, void **, void **);
int cuStreamSynchronize(void *);
int cuEventSynchronize(void *);
int cuEventRecord(void *, void *);
int cuMemcpyHtoDAsync_v2(uint64_t, const void *, size_t, void *);

int main(int argc, char **argv)
{
	char line[16];
	int n = argc > 1 ? atoi(argv[1]) : 30;
	if (!fgets(line, sizeof line, stdin))
		return 1;
	for (int i = 0; i < n; i++) {
		usleep(30000);
		cuEventRecord(0, (void *)0x5678);
		cuMemcpyHtoDAsync_v2(0x1000, line, sizeof line, (void *)0x5678);
		spin(3000000);
		cuLaunchKernel((void *)0x1234, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0);
		cuLaunchKernel((void *)0x1234, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0);
		cuStreamSynchronize((void *)0x5678);
	}
	usleep(30000);
	cuLaunchKernel((void *)0x1234, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0);
	cuEventSynchronize(0); /* the fake fails it with 700 */
	printf("%d\n", getpid());
	return 0;
}
