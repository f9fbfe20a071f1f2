// spin.h: CPU work for the fake LC programs (lcapp.c, and internal/daemon/signals' lcloop.c).
#ifndef GPREEMPT_TESTDATA_SPIN_H
#define GPREEMPT_TESTDATA_SPIN_H
#include <time.h>

// spin runs on a CPU until the thread has used ns more CPU time. Reading
// the thread's CPU clock also brings the scheduler's account of it up to
// date, so the next traced call sees all of it.
static void spin(long long ns)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	long long until = ts.tv_sec * 1000000000LL + ts.tv_nsec + ns;
	do
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	while (ts.tv_sec * 1000000000LL + ts.tv_nsec < until);
}
#endif
