/* fatal.c - trn_die(): the trainer's one way out on an error it cannot recover from. */
#include "trainer/fatal.h"

#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void trn_die(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	int rank = 0, world = 1;

	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &world);
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "trainer: rank %d: error: %s\n", rank, msg);
	fflush(stderr);
	if (world > 1)
		MPI_Abort(MPI_COMM_WORLD, 1);
	MPI_Finalize();
	exit(1);
}
