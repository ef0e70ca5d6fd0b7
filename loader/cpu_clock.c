/* cpu_clock.c - a worker's CPU time, charged per unit of work with few reads of the thread clock
 * (see cpu_clock.h). Measured on 32x32x3 records from memory: two reads per task of 4-8 samples
 * were 10-14% of loaderd's CPU; one read per 8 units leaves about 2.5%. */
#include "loader/cpu_clock.h"

#include <time.h>

int64_t ldr_thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void ldr_cpu_clock_init(struct ldr_cpu_clock *c, int64_t now_ns)
{
	*c = (struct ldr_cpu_clock){ .mark = ldr_thread_cpu_ns(), .mark_ns = now_ns, .ratio = 1 };
}

int64_t ldr_cpu_clock_lap(struct ldr_cpu_clock *c, int64_t dt_ns, int64_t now_ns)
{
	c->wall += dt_ns;
	if (++c->units < LDR_CPU_CLOCK_UNITS && now_ns - c->mark_ns < LDR_CPU_CLOCK_WINDOW_NS) {
		int64_t e = (int64_t)((double)dt_ns * c->ratio);
		c->est += e;
		return e;
	}
	int64_t cpu = ldr_thread_cpu_ns(), used = cpu - c->mark, charge = used - c->est;
	double r = c->wall > 0 ? (double)used / (double)c->wall : 1;
	c->ratio = r > 2 ? 2 : r < 0 ? 0 : r;
	c->mark = cpu;
	c->mark_ns = now_ns;
	c->est = charge < 0 ? -charge : 0;
	c->wall = 0;
	c->units = 0;
	c->reads++;
	return charge < 0 ? 0 : charge;
}
