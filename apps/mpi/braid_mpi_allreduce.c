// braid_mpi_allreduce: MPI_Allreduce (MPI_SUM of 64-bit integers) over
// every size from --min-bytes to --max-bytes, doubling, with every element
// of every result checked; rank 0 prints the time per call and the bus
// bandwidth (2(n-1)/n of the buffer per call, as nccl-tests counts it).
// Only the MPI calls are timed. Unmodified MPI: which transport carries it
// is mpirun's choice (scripts/mpi-ranks.sh: Open MPI's pml ucx over Braid,
// or pml ob1 with btl tcp).
//
//   mpirun -np N braid_mpi_allreduce [--min-bytes 8] [--max-bytes 4M]
//                                    [--budget-bytes 256M] [--max-iters 1000]
//
// Exit status 0 when every result matched; a wrong element is reported
// with its size, iteration and index, and the job aborted.
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_bytes(const char* s, uint64_t* out) {
  char* end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s) return -1;
  switch (*end) {
    case 'K':
    case 'k':
      v <<= 10;
      end++;
      break;
    case 'M':
    case 'm':
      v <<= 20;
      end++;
      break;
    case 'G':
    case 'g':
      v <<= 30;
      end++;
      break;
    default:
      break;
  }
  if (*end != '\0') return -1;
  *out = v;
  return 0;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  uint64_t min_bytes = 8, max_bytes = 4ull << 20, budget = 256ull << 20, max_iters = 1000;
  for (int i = 1; i < argc; i++) {
    uint64_t* dst = NULL;
    if (strcmp(argv[i], "--min-bytes") == 0)
      dst = &min_bytes;
    else if (strcmp(argv[i], "--max-bytes") == 0)
      dst = &max_bytes;
    else if (strcmp(argv[i], "--budget-bytes") == 0)
      dst = &budget;
    else if (strcmp(argv[i], "--max-iters") == 0)
      dst = &max_iters;
    if (dst == NULL || i + 1 >= argc || parse_bytes(argv[i + 1], dst) != 0) {
      if (rank == 0) fprintf(stderr, "braid_mpi_allreduce: bad argument '%s'\n", argv[i]);
      MPI_Finalize();
      return 2;
    }
    i++;
  }
  if (min_bytes < 8) min_bytes = 8;
  if (max_bytes < min_bytes || max_iters == 0) {
    if (rank == 0) fprintf(stderr, "braid_mpi_allreduce: empty size range\n");
    MPI_Finalize();
    return 2;
  }

  const size_t max_count = (size_t)(max_bytes / 8);
  int64_t* in = malloc(max_count * sizeof(int64_t));
  int64_t* out = malloc(max_count * sizeof(int64_t));
  if (in == NULL || out == NULL) {
    fprintf(stderr, "braid_mpi_allreduce: rank %d: out of memory\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  // Sum over ranks r of (r + 1) * (i + 1) + it = (i + 1) * n(n+1)/2 + n * it.
  const int64_t tri = (int64_t)size * (size + 1) / 2;
  if (rank == 0) {
    printf("# ranks %d, MPI_SUM of int64, every element checked\n", size);
    printf("%12s %8s %12s %12s\n", "bytes", "iters", "time_us", "busbw_GB/s");
  }
  uint64_t checked = 0;
  for (uint64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
    const size_t count = (size_t)(bytes / 8);
    uint64_t iters = budget / bytes;
    if (iters < 5) iters = 5;
    if (iters > max_iters) iters = max_iters;
    double elapsed = 0;
    for (uint64_t it = 0; it < iters + 2; it++) {  // two untimed warm-up calls
      for (size_t i = 0; i < count; i++)
        in[i] = (int64_t)(rank + 1) * (int64_t)(i + 1) + (int64_t)it;
      memset(out, 0xff, count * sizeof(int64_t));
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      MPI_Allreduce(in, out, (int)count, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
      const double t1 = MPI_Wtime();
      if (it >= 2) elapsed += t1 - t0;
      for (size_t i = 0; i < count; i++) {
        const int64_t want = (int64_t)(i + 1) * tri + (int64_t)size * (int64_t)it;
        if (out[i] != want) {
          fprintf(stderr,
                  "braid_mpi_allreduce: rank %d: %llu bytes, iteration %llu: element %zu is %lld, "
                  "not %lld\n",
                  rank, (unsigned long long)bytes, (unsigned long long)it, i, (long long)out[i],
                  (long long)want);
          MPI_Abort(MPI_COMM_WORLD, 1);
        }
      }
      checked += count;
    }
    // The slowest rank's time is the collective's.
    double slowest = 0;
    MPI_Reduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      const double per_call = slowest / (double)iters;
      const double busbw = size > 1 ? (double)bytes * 2.0 * (size - 1) / size / per_call / 1e9 : 0;
      printf("%12llu %8llu %12.2f %12.3f\n", (unsigned long long)bytes, (unsigned long long)iters,
             per_call * 1e6, busbw);
      fflush(stdout);
    }
    if (bytes > max_bytes / 2) break;  // no overflow past the largest size
  }
  uint64_t all_checked = 0;
  MPI_Reduce(&checked, &all_checked, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) printf("# all %llu elements correct\n", (unsigned long long)all_checked);
  free(in);
  free(out);
  MPI_Finalize();
  return 0;
}
