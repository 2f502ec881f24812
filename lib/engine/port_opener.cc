#include "engine/port_opener.h"

#include <atomic>

namespace braid {

namespace {
std::atomic<PortOpener> g_opener{nullptr};
}  // namespace

void register_port_opener(PortOpener opener) {
  g_opener.store(opener);
}

PortOpener registered_port_opener() {
  return g_opener.load();
}

}  // namespace braid
