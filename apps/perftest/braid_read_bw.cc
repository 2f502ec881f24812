// braid_read_bw: ib_read_bw over Braid. The client reads the server's
// buffer; the server's engine answers while it waits for the client's report.
#include "perftest_common.h"

int main(int argc, char** argv) {
  return braid::perftest::run_bw_main(braid::perftest::Verb::kRead, argc, argv);
}
