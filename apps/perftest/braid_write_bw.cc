// braid_write_bw: ib_write_bw over Braid. The client writes, the server's
// engine places the data and acknowledges while it waits for the client's
// report, then prints it (perftest prints the table on both sides).
#include "perftest_common.h"

int main(int argc, char** argv) {
  return braid::perftest::run_bw_main(braid::perftest::Verb::kWrite, argc, argv);
}
