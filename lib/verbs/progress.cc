// Driving the engines: the progress threads (one per engine) and
// braid_progress.
#include "braid/verbs.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "verbs/calls.h"
#include "verbs/device_io.h"
#include "verbs/verbs_internal.h"
using namespace braid::calls;

namespace {

// Each engine's progress thread drives it while the application does not.
// While the application calls into the engine (polling a CQ, posting) it
// drives the engine itself and the thread sleeps instead of fighting it for
// the lock and the core. Once the application has been away for a while
// (blocked on a socket, or spinning on memory for a WRITE to land, as
// perftest's latency tests do) the thread polls as long as there is work,
// and yields the core after a run of fruitless polls.
//
// Measured on one shared core (ib_write_lat over memif, 2 bytes): a
// real-time thread that naps when idle instead (SCHED_FIFO; a nap costs
// 15 us or more here) answered large messages sooner (64 KiB: 0.2 ms, not
// 2 ms) but made small ones worse (typical 1.4 -> 11..160 us), the
// figure perftest reports; the fair scheduler's time slices are what a
// large message waits for now.
void progress_loop(braid_context* c, uint16_t k) {
  // How often the thread looks whether the application still calls. Each
  // timed wake costs 15 us or more on these VMs: looking every 200 us took
  // a tenth of a busy ib_write_bw client's rate.
  constexpr auto kAppActiveSleep = std::chrono::microseconds(1000);
  constexpr uint32_t kIdlePolls = 32;  // fruitless polls before yielding
  // Data the thread placed is often answered by the application (a
  // ping-pong spinning on memory) once it gets the core: the ACK waits that
  // long to leave with the answer. Sent alone, it lets the peer see its
  // completion first and spin for the answer, with only its own thread to
  // fetch it. An application away for longer (a WRITE target blocked on a
  // socket) answers nothing: its ACKs go at once. Nor does one that waits
  // for completion events (it answers after its wake-up, if at all): a
  // held ACK there only delays its peer's send completions, which
  // collective libraries expect about a round trip after the data lands
  // (Gloo destroys a buffer once the peer's next message is in, and aborts
  // if its own send has not completed by then). Its ACKs leave in the poll
  // that received the data.

  constexpr braid::TimeNs kAckHoldNs = braid::kAckHoldNs;
  constexpr uint64_t kAnswerWindowNs = 2'000'000;
  braid::EngineSlot& slot = *c->slots[k];
  slot.engine->io().attach_thread();
  uint64_t seen = slot.calls.load(std::memory_order_relaxed);
  uint64_t last_active_ns = steady_ns();
  bool may_answer = true;
  braid::IdleYield idle(kIdlePolls);
  uint32_t polls = 0;
  while (!c->stop.load(std::memory_order_relaxed)) {
    const uint64_t calls = slot.calls.load(std::memory_order_relaxed);
    auto waits_for_events = [c] { return c->armed.load(std::memory_order_relaxed) > 0; };
    if (calls != seen && !waits_for_events()) {  // the application called since the last look
      seen = calls;
      {
        std::unique_lock<std::mutex> w(c->wake_lock);
        c->wake.wait_for(w, kAppActiveSleep, [&] {
          return waits_for_events() || c->stop.load(std::memory_order_relaxed);
        });
      }
      last_active_ns = steady_ns();
      may_answer = true;
      continue;
    }
    // The clock is read once in a while: a poll that finds nothing costs
    // little more than a clock read.
    if ((++polls & 63) == 0) may_answer = steady_ns() - last_active_ns < kAnswerWindowNs;
    int moved = 0;
    {
      std::unique_lock<std::mutex> g(slot.lock, std::try_to_lock);
      if (g.owns_lock()) {
        // ACKs of what woke an event waiter leave before it is woken: once
        // it runs, this thread may wait a time slice for the core.
        const braid::TimeNs hold = waits_for_events() ? braid::Engine::kAckNow
                                   : may_answer       ? kAckHoldNs
                                                      : 0;
        moved = progress_locked(c, k, hold);
      }
    }
    idle.pass(moved > 0);
  }
  slot.engine->io().detach_thread();
}

}  // namespace

namespace braid {
namespace {
std::mutex g_threads_lock;
std::vector<braid_context*> g_threaded;  // contexts whose progress thread runs
}  // namespace

void start_progress_thread(braid_context* c) {
  std::lock_guard<std::mutex> t(c->thread_lock);
  if (c->threaded.load() || c->stop.load()) return;
  c->locking = true;  // (with several engines, already)
  c->threaded = true;
  for (uint16_t k = 0; k < c->engines(); ++k) {
    c->slots[k]->progress = std::thread(progress_loop, c, k);
  }
  std::lock_guard<std::mutex> g(g_threads_lock);
  g_threaded.push_back(c);
}

void stop_progress_thread(braid_context* c) {
  // A second caller (close while the exit handler stops the threads)
  // waits here until they have been joined.
  std::lock_guard<std::mutex> t(c->thread_lock);
  if (!c->threaded.load() || c->stop.load()) return;
  {
    std::lock_guard<std::mutex> w(c->wake_lock);
    c->stop = true;
  }
  c->wake.notify_all();
  for (auto& s : c->slots) {
    if (s->progress.joinable()) s->progress.join();
  }
  std::lock_guard<std::mutex> g(g_threads_lock);
  g_threaded.erase(std::remove(g_threaded.begin(), g_threaded.end(), c), g_threaded.end());
}

void stop_all_progress_threads() {
  std::vector<braid_context*> live;
  {
    std::lock_guard<std::mutex> g(g_threads_lock);
    live = g_threaded;
  }
  for (braid_context* c : live) stop_progress_thread(c);
}
}  // namespace braid

extern "C" {

int braid_progress(struct braid_context* c) {
  int n = 0;
  for (uint16_t k = 0; k < c->engines(); ++k) {
    EngineGuard g(c, k, Drives::kYes);
    n += progress_locked(c, k);
  }
  idle_pass(c, n > 0);
  return n;
}

}  // extern "C"
