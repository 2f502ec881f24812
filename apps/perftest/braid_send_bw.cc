// braid_send_bw: ib_send_bw over Braid. The server posts receives and
// measures what arrives, the client sends; each prints its own result.
#include "perftest_common.h"

int main(int argc, char** argv) {
  return braid::perftest::run_bw_main(braid::perftest::Verb::kSend, argc, argv);
}
