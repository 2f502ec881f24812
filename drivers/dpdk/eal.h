// DPDK's Environment Abstraction Layer, initialised once per process from a
// small config. The config is turned into EAL arguments by a pure function
// (build_args) so that the choices it makes on this machine -- hugepages or
// not, --single-file-segments for vhost-user style vdevs, --no-pci -- can be
// tested without starting DPDK. No DPDK header is included here.
#pragma once

#include <chrono>
#include <csignal>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace braid::dpdk {

// Success, or why not: the cause and the fix in one message.
struct [[nodiscard]] Status {
  std::string error;  // empty on success
  bool ok() const { return error.empty(); }
  static Status failure(std::string why) { return Status{std::move(why)}; }
};

enum class EalMemoryMode : uint8_t {
  // Hugepages if a hugetlbfs with free pages is mounted, else no-huge.
  kAuto,
  // Hugepage memfds, no hugetlbfs mount and no runtime files; still needs
  // reserved hugepages (vm.nr_hugepages).
  kInMemory,
  // Ordinary anonymous memory: works everywhere, sized up front (-m).
  kNoHuge,
  // A mounted hugetlbfs with free pages.
  kHugepages,
};

// "auto", "in-memory", "no-huge", "hugepages": the spelling of --memory=.
const char* memory_mode_name(EalMemoryMode mode);
bool parse_memory_mode(std::string_view text, EalMemoryMode* mode);

struct EalConfig {
  std::string file_prefix;              // empty: "braid-<pid>"
  std::vector<std::string> vdevs;       // each becomes --vdev=<vdev>
  std::vector<std::string> extra_args;  // passed through (-a <pci>, --huge-dir, --log-level)
  int lcore = 0;                        // -l
  // Unset: --no-pci unless extra_args allows a PCI device (-a/--allow).
  std::optional<bool> no_pci;
  EalMemoryMode memory = EalMemoryMode::kAuto;
  uint32_t memory_mb = 0;  // no-huge: 0 means 512; hugepage modes: 0 leaves it dynamic
};

// What the machine offers, read from /proc/mounts and /sys/kernel/mm.
struct HugepageInfo {
  std::string mount_point;  // first hugetlbfs mount, empty if none
  uint64_t mount_free = 0;  // free pages of the mounted page size
  uint64_t total_free = 0;  // free pages of any size (what in-memory can use)
  static HugepageInfo probe();
};

class Eal {
 public:
  // The full argv (argv[0] included) for a config on a machine, or an error
  // naming the cause and the fix; `resolved` gets the mode `auto` became.
  // Pure: does not touch DPDK.
  static Status build_args(const EalConfig& config, const HugepageInfo& huge,
                           std::vector<std::string>* args, EalMemoryMode* resolved = nullptr);

  // Builds the arguments and runs rte_eal_init. Once per process: DPDK
  // cannot be initialised twice, so a second call is an error.
  static Status init(const EalConfig& config);
  static bool initialized();
  // Adds a vdev after init (hotplug), e.g. a second device in one process.
  // Succeeds at once if a port of that name already exists.
  static Status probe_vdev(const std::string& spec);
  // Stops and closes the vdev's port and removes the device, after the
  // EAL's interrupt thread has finished the events its closing raised
  // (removing a memif while a disconnect of it is pending crashes DPDK).
  static Status remove_vdev(const std::string& name);
  // Returns once the interrupt thread has handled what it had been handed.
  static void drain_interrupts();
  // Runs `fn` on the EAL's interrupt thread (as an alarm) and waits for it:
  // what it does to a port cannot interleave with the port's own events
  // there (a memif peer's disconnect unmapping the rings a close is
  // tearing down crashed now and then). Runs `fn` here if the EAL has no
  // interrupt thread to run it on.
  static void run_on_interrupt_thread(void (*fn)(void*), void* arg);
  // Parks the interrupt thread in one of its alarms until the matching
  // resume_interrupts(): no PMD handler runs meanwhile, so bursts cannot
  // race a memif peer's disconnect, which unmaps the rings a burst reads
  // (DPDK 22.11's memif checks its connected flag once, then reads the
  // ring; it raises no link-state event to synchronise with). Nests (a
  // count); the thread is parked by the first call and let go by the last
  // resume. drain_interrupts and run_on_interrupt_thread let it run for
  // their job and park it again. False when the thread did not park within
  // `wait` (gone or stuck): it is not parked then, and resume_interrupts()
  // must not be called.
  static bool pause_interrupts(std::chrono::milliseconds wait = std::chrono::milliseconds(2000));
  static void resume_interrupts();
  // The interrupt thread is parked now (diagnostics and tests).
  static bool interrupts_paused();
  // While one lives, a parked interrupt thread runs (a port's open needs
  // it for its link handshake); it is parked again after.
  class InterruptsRun {
   public:
    InterruptsRun();
    ~InterruptsRun();
    InterruptsRun(const InterruptsRun&) = delete;
    InterruptsRun& operator=(const InterruptsRun&) = delete;

   private:
    bool lent_ = false;
  };
  // The arguments init passed to rte_eal_init (empty before).
  static const std::vector<std::string>& args();
  // The memory mode init resolved `auto` to.
  static EalMemoryMode memory_mode();
  // True when init's arguments include the flag (e.g. "--single-file-segments").
  static bool has_arg(std::string_view flag);

  // rte_eal_cleanup, then removes the runtime directory if init generated its
  // prefix (a per-process name nobody else uses): DPDK leaves several MB of
  // shared-config files in /var/run/dpdk otherwise. Ports must be closed or
  // no longer used. DPDK cannot be initialised again afterwards.
  static void shutdown();
};

// Blocks SIGPIPE on this thread while DPDK tears a port down (virtio-user
// tells its vhost-user peer over a socket the peer may have closed: the
// write would kill the process), then discards a SIGPIPE that arrived and
// restores the thread's mask.
class SigpipeGuard {
 public:
  SigpipeGuard();
  ~SigpipeGuard();
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;

 private:
  sigset_t old_;
};

}  // namespace braid::dpdk
