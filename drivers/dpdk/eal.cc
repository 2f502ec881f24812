#include "dpdk/eal.h"

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

#include <pthread.h>
#include <rte_alarm.h>
#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_log.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

namespace braid::dpdk {
namespace {

struct EalState {
  bool initialized = false;
  bool shut_down = false;
  bool own_prefix = false;  // the prefix is our per-process default
  EalMemoryMode mode = EalMemoryMode::kAuto;
  std::string prefix;
  std::string runtime_dir;
  // rte_eal_init keeps pointers into argv, so both live for the process.
  std::vector<std::string> args;
  std::vector<char*> argv;
};

EalState& state() {
  static EalState s;
  return s;
}

std::string default_prefix() {
  return "braid-" + std::to_string(::getpid());
}

bool starts_with(std::string_view s, std::string_view p) {
  return s.substr(0, p.size()) == p;
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) {
    if (!out.empty()) out += ' ';
    out += s;
  }
  return out;
}

uint64_t read_u64(const std::filesystem::path& path) {
  std::ifstream in(path);
  uint64_t v = 0;
  in >> v;
  return in ? v : 0;
}

// "2M", "1G", "2048K", "1048576k" -> kB; 0 if unreadable.
uint64_t page_size_kb(std::string_view text) {
  uint64_t n = 0;
  size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') n = n * 10 + (text[i++] - '0');
  if (i == text.size()) return n / 1024;  // bytes
  switch (text[i]) {
    case 'k':
    case 'K':
      return n;
    case 'm':
    case 'M':
      return n << 10;
    case 'g':
    case 'G':
      return n << 20;
    default:
      return 0;
  }
}

uint64_t default_page_size_kb() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t value = 0;
  std::string unit;
  while (in >> key >> value) {
    std::getline(in, unit);
    if (key == "Hugepagesize:") return value;
  }
  return 2048;
}

uint64_t free_pages(uint64_t size_kb) {
  return read_u64("/sys/kernel/mm/hugepages/hugepages-" + std::to_string(size_kb) +
                  "kB/free_hugepages");
}

// The part of a vdev string before its arguments: "net_memif0,role=..." ->
// "net_memif0".
std::string_view vdev_name(std::string_view vdev) {
  return vdev.substr(0, vdev.find(','));
}

// vhost-user shares guest memory one region per file descriptor and has a
// small table of them; with a file per hugepage it runs out ("Too many memory
// regions") and, worse, a virtio-user link then shows up and stalls after
// 256 packets. memif zero-copy exports memory the same way.
bool vdev_needs_single_file_segments(std::string_view vdev) {
  const std::string_view name = vdev_name(vdev);
  if (starts_with(name, "net_virtio_user") || starts_with(name, "virtio_user") ||
      starts_with(name, "net_vhost") || starts_with(name, "eth_vhost")) {
    return true;
  }
  return starts_with(name, "net_memif") && vdev.find("zero-copy=yes") != std::string_view::npos;
}

// A value of a flag in extra_args, as "--flag=value" or "--flag value".
std::vector<std::string> flag_values(const std::vector<std::string>& args, std::string_view flag) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == flag && i + 1 < args.size()) {
      out.push_back(args[++i]);
    } else if (starts_with(a, flag) && a.size() > flag.size() && a[flag.size()] == '=') {
      out.push_back(a.substr(flag.size() + 1));
    }
  }
  return out;
}

bool allows_pci_device(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "--allow" || starts_with(a, "--allow=") || a == "-w" || a == "--pci-whitelist" ||
        starts_with(a, "-a")) {
      return true;
    }
  }
  return false;
}

std::string vdev_probe_hint(std::string_view vdev) {
  const std::string_view name = vdev_name(vdev);
  if (starts_with(name, "net_virtio_user")) {
    return "virtio-user found no vhost-user backend at its path=: start the vhost side first, "
           "or add server=1 here and client=1 on the vhost side";
  }
  if (starts_with(name, "net_vhost")) {
    return "vhost could not create its iface= socket: check the directory exists and no stale "
           "socket file is in the way";
  }
  if (starts_with(name, "net_af_xdp") || starts_with(name, "net_af_packet")) {
    return "check that iface= names an existing interface (in this network namespace) and that "
           "the process runs as root";
  }
  if (starts_with(name, "net_memif")) {
    return "check that no other memif server in this network namespace has the same socket= "
           "(DPDK 22.11 binds it in the abstract namespace unless socket-abstract=no, and "
           "keeps it bound until the process exits) and that id= is not used twice";
  }
  return "check the vdev's arguments against the PMD's documentation";
}

const char* errno_name(int e) {
  switch (e) {
    case EACCES:
      return "EACCES";
    case EAGAIN:
      return "EAGAIN";
    case EALREADY:
      return "EALREADY";
    case EFAULT:
      return "EFAULT";
    case EINVAL:
      return "EINVAL";
    case ENODEV:
      return "ENODEV";
    case ENOMEM:
      return "ENOMEM";
    case ENOTSUP:
      return "ENOTSUP";
    case EPROTO:
      return "EPROTO";
    default:
      return "errno";
  }
}

std::string eal_failure(int e, const std::vector<std::string>& args, EalMemoryMode mode) {
  std::ostringstream m;
  m << "rte_eal_init failed (" << errno_name(e) << ": " << rte_strerror(e) << ") with '"
    << join(args) << "' (memory mode '" << memory_mode_name(mode) << "'): ";
  switch (e) {
    case EACCES:
      m << "DPDK could not read hugepage information or lacks a permission: run as root, or use "
           "--memory=no-huge";
      break;
    case ENOMEM:
      m << "not enough memory for the EAL: lower -m (EalConfig::memory_mb) or reserve more "
           "hugepages";
      break;
    case EINVAL:
      m << "an EAL argument was refused: check extra_args and the vdev strings";
      break;
    case EAGAIN:
    case EEXIST:
      m << "another DPDK process may use this file prefix: choose another file_prefix";
      break;
    case EALREADY:
      m << "DPDK was initialised already in this process: initialise it once";
      break;
    default:
      m << "see the EAL log above for the step that failed";
      break;
  }
  return m.str();
}

}  // namespace

const char* memory_mode_name(EalMemoryMode mode) {
  switch (mode) {
    case EalMemoryMode::kAuto:
      return "auto";
    case EalMemoryMode::kInMemory:
      return "in-memory";
    case EalMemoryMode::kNoHuge:
      return "no-huge";
    case EalMemoryMode::kHugepages:
      return "hugepages";
  }
  return "?";
}

bool parse_memory_mode(std::string_view text, EalMemoryMode* mode) {
  for (EalMemoryMode m : {EalMemoryMode::kAuto, EalMemoryMode::kInMemory, EalMemoryMode::kNoHuge,
                          EalMemoryMode::kHugepages}) {
    if (text == memory_mode_name(m)) {
      *mode = m;
      return true;
    }
  }
  return false;
}

HugepageInfo HugepageInfo::probe() {
  HugepageInfo info;
  std::error_code ec;
  for (const auto& dir : std::filesystem::directory_iterator("/sys/kernel/mm/hugepages", ec)) {
    info.total_free += read_u64(dir.path() / "free_hugepages");
  }
  std::ifstream mounts("/proc/mounts");
  std::string line;
  while (std::getline(mounts, line)) {
    std::istringstream fields(line);
    std::string device, point, type, options;
    if (!(fields >> device >> point >> type >> options) || type != "hugetlbfs") continue;
    uint64_t size_kb = default_page_size_kb();
    const size_t at = options.find("pagesize=");
    if (at != std::string::npos) {
      const size_t end = options.find(',', at);
      size_kb = page_size_kb(std::string_view(options).substr(at + 9, end - (at + 9)));
    }
    const uint64_t free = free_pages(size_kb);
    // Prefer a mount that can actually be used; otherwise remember the first
    // one so the error can name it.
    if (info.mount_point.empty() || (info.mount_free == 0 && free > 0)) {
      info.mount_point = point;
      info.mount_free = free;
    }
  }
  return info;
}

Status Eal::build_args(const EalConfig& config, const HugepageInfo& huge,
                       std::vector<std::string>* args, EalMemoryMode* resolved) {
  args->clear();
  for (const std::string& a : config.extra_args) {
    if (a == "--no-huge" || a == "--in-memory") {
      return Status::failure("'" + a +
                             "' in extra_args: choose the memory mode with "
                             "EalConfig::memory (--memory=" +
                             a.substr(2) + "), which checks the machine can do it");
    }
    if (starts_with(a, "--file-prefix")) {
      return Status::failure("'--file-prefix' in extra_args: set EalConfig::file_prefix instead");
    }
  }
  const bool pci_allowed = allows_pci_device(config.extra_args);
  const bool no_pci = config.no_pci.value_or(!pci_allowed);
  if (no_pci && pci_allowed) {
    return Status::failure(
        "--no-pci requested while extra_args allows a PCI device (-a): drop one of them");
  }

  EalMemoryMode mode = config.memory;
  if (mode == EalMemoryMode::kAuto) {
    mode = !huge.mount_point.empty() && huge.mount_free > 0 ? EalMemoryMode::kHugepages
                                                            : EalMemoryMode::kNoHuge;
  }
  if (mode == EalMemoryMode::kHugepages) {
    if (huge.mount_point.empty()) {
      return Status::failure(
          "no hugepages mounted and memory mode 'hugepages' requested: mount hugetlbfs "
          "(mount -t hugetlbfs nodev /dev/hugepages) and reserve pages (echo 512 > "
          "/proc/sys/vm/nr_hugepages), or use --memory=no-huge");
    }
    if (huge.mount_free == 0) {
      return Status::failure("hugetlbfs is mounted at " + huge.mount_point +
                             " but has no free hugepages and memory mode 'hugepages' was "
                             "requested: reserve pages (echo 512 > /proc/sys/vm/nr_hugepages) "
                             "or use --memory=no-huge");
    }
  }
  if (mode == EalMemoryMode::kInMemory && huge.total_free == 0) {
    return Status::failure(
        "memory mode 'in-memory' needs free hugepages (it backs memory with hugepage memfds; "
        "no mount needed) and none are reserved: echo 512 > /proc/sys/vm/nr_hugepages, or use "
        "--memory=no-huge");
  }
  if (resolved) *resolved = mode;

  args->push_back("braid");
  // Core placement given in the pass-through arguments (-l, --lcores, -c)
  // replaces ours.
  const bool placed = std::any_of(
      config.extra_args.begin(), config.extra_args.end(),
      [](const std::string& a) { return a == "-l" || a == "-c" || a.rfind("--lcores", 0) == 0; });
  if (!placed) {
    args->push_back("-l");
    args->push_back(std::to_string(config.lcore));
  }
  args->push_back("--file-prefix=" +
                  (config.file_prefix.empty() ? default_prefix() : config.file_prefix));
  // DPDK's notices (EAL start-up, every vhost-user message) bury what a
  // tool prints: warnings and errors only, unless the pass-through
  // arguments or BRAID_DPDK_LOG (e.g. info, debug) say otherwise.
  const bool has_log_level =
      std::any_of(config.extra_args.begin(), config.extra_args.end(),
                  [](const std::string& a) { return a.rfind("--log-level", 0) == 0; });
  // Braid offers no DPDK telemetry socket (one more file per process).
  const bool telemetry = std::any_of(config.extra_args.begin(), config.extra_args.end(),
                                     [](const std::string& a) { return a == "--telemetry"; });
  if (!telemetry) args->push_back("--no-telemetry");
  if (!has_log_level) {
    const char* level = std::getenv("BRAID_DPDK_LOG");
    args->push_back(std::string("--log-level=") + (level && *level ? level : "warning"));
  }
  switch (mode) {
    case EalMemoryMode::kNoHuge:
      args->push_back("--no-huge");
      args->push_back("-m");
      args->push_back(std::to_string(config.memory_mb ? config.memory_mb : 512));
      break;
    case EalMemoryMode::kInMemory:
      args->push_back("--in-memory");
      [[fallthrough]];
    case EalMemoryMode::kHugepages:
    case EalMemoryMode::kAuto:
      if (config.memory_mb) {
        args->push_back("-m");
        args->push_back(std::to_string(config.memory_mb));
      }
      break;
  }
  if (no_pci) args->push_back("--no-pci");
  for (const std::string& v : config.vdevs) args->push_back("--vdev=" + v);

  bool needs_sfs = false;
  for (const std::string& v : config.vdevs) needs_sfs |= vdev_needs_single_file_segments(v);
  for (const std::string& v : flag_values(config.extra_args, "--vdev")) {
    needs_sfs |= vdev_needs_single_file_segments(v);
  }
  bool has_sfs = false;
  for (const std::string& a : config.extra_args) has_sfs |= a == "--single-file-segments";
  if (needs_sfs && !has_sfs) args->push_back("--single-file-segments");

  args->insert(args->end(), config.extra_args.begin(), config.extra_args.end());
  return {};
}

namespace {

// Runtime directories of Braid processes that died without shutting the EAL
// down (killed, crashed): several MB each in /var/run/dpdk, a tmpfs, so in
// memory. Only generated names (braid-<pid>) of processes that no longer
// exist are removed.
void remove_stale_runtime_dirs(const std::filesystem::path& ours) {
  std::error_code ec;
  const std::string prefix = "braid-";
  for (const auto& entry : std::filesystem::directory_iterator(ours.parent_path(), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string pid = name.substr(prefix.size());
    if (pid.find_first_not_of("0123456789") != std::string::npos || entry.path() == ours) continue;
    if (std::filesystem::exists("/proc/" + pid, ec)) continue;
    std::filesystem::remove_all(entry.path(), ec);
  }
}

}  // namespace

Status Eal::init(const EalConfig& config) {
  EalState& s = state();
  if (s.initialized || s.shut_down) {
    return Status::failure("the DPDK EAL was initialised already in this process (with '" +
                           join(s.args) +
                           "'); DPDK allows one rte_eal_init per process: initialise once "
                           "and share it");
  }
  std::vector<std::string> args;
  EalMemoryMode mode = config.memory;
  if (Status st = build_args(config, HugepageInfo::probe(), &args, &mode); !st.ok()) return st;

  s.args = std::move(args);
  s.argv.clear();
  for (std::string& a : s.args) s.argv.push_back(a.data());
  s.argv.push_back(nullptr);
  // DPDK's threads start here and inherit this thread's signal mask: with
  // SIGPIPE blocked, a write of theirs to a vhost-user or memif peer that
  // went away fails with EPIPE instead of killing the process.
  int ret = 0;
  {
    SigpipeGuard no_sigpipe;
    ret = rte_eal_init(static_cast<int>(s.args.size()), s.argv.data());
  }
  if (ret < 0) {
    const int e = rte_errno;
    return Status::failure(eal_failure(e, s.args, mode));
  }
  s.initialized = true;
  s.mode = mode;
  s.own_prefix = config.file_prefix.empty();
  s.prefix = config.file_prefix.empty() ? default_prefix() : config.file_prefix;
  s.runtime_dir = rte_eal_get_runtime_dir();
  if (s.own_prefix) remove_stale_runtime_dirs(s.runtime_dir);

  // A vdev whose PMD refuses to probe is only logged by the EAL, which then
  // carries on without the port; say which one and why it usually happens.
  std::vector<std::string> vdevs = config.vdevs;
  for (const std::string& v : flag_values(config.extra_args, "--vdev")) vdevs.push_back(v);
  for (const std::string& v : vdevs) {
    const std::string name(vdev_name(v));
    if (!starts_with(name, "net_") && !starts_with(name, "eth_")) continue;
    uint16_t port = 0;
    if (rte_eth_dev_get_port_by_name(name.c_str(), &port) != 0) {
      return Status::failure("vdev '" + name +
                             "' did not become a port (its PMD's reason is in the log above; "
                             "the EAL itself is up): " +
                             vdev_probe_hint(v));
    }
  }
  return {};
}

bool Eal::initialized() {
  return state().initialized;
}

const std::vector<std::string>& Eal::args() {
  return state().args;
}

EalMemoryMode Eal::memory_mode() {
  return state().mode;
}

bool Eal::has_arg(std::string_view flag) {
  for (const std::string& a : state().args) {
    if (a == flag) return true;
  }
  return false;
}

namespace {

// An object on our stack handed to the interrupt thread through an alarm
// passes through DPDK's uninstrumented alarm list: ThreadSanitizer sees no
// ordering between our writes before rte_eal_alarm_set and the callback's,
// so the hand-off is stated to it (a no-op in other builds).
#if defined(__SANITIZE_THREAD__)
void handoff_release(void* p) {
  __tsan_release(p);
}
void handoff_acquire(void* p) {
  __tsan_acquire(p);
}
#else
void handoff_release(void*) {}
void handoff_acquire(void*) {}
#endif

// Waits until the EAL's interrupt thread has run an alarm set now: events
// it had already been handed (a memif peer's disconnect, a callback
// unregistration left pending) are behind it. Bounded: the thread may be
// gone already.
void drain_interrupt_thread_impl() {
  for (int round = 0; round < 2; ++round) {
    std::atomic<bool> fired{false};
    auto cb = [](void* arg) {
      handoff_acquire(arg);
      static_cast<std::atomic<bool>*>(arg)->store(true);
    };
    handoff_release(&fired);
    if (rte_eal_alarm_set(1, cb, &fired) != 0) return;
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
    while (!fired.load() && std::chrono::steady_clock::now() < until) {
      std::this_thread::yield();
    }
    if (!fired.load()) {
      rte_eal_alarm_cancel(cb, &fired);
      return;
    }
  }
}

}  // namespace

SigpipeGuard::SigpipeGuard() {
  sigset_t block;
  sigemptyset(&block);
  sigaddset(&block, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &block, &old_);
}

SigpipeGuard::~SigpipeGuard() {
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  const timespec now{0, 0};
  while (sigtimedwait(&pipe, nullptr, &now) == SIGPIPE) {
  }
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

void release_all_pauses();  // below, with the pause's state

void Eal::shutdown() {
  EalState& s = state();
  if (!s.initialized) return;
  SigpipeGuard no_sigpipe;
  // Ports first, then let the interrupt thread finish what closing them
  // started: rte_eal_cleanup frees memory its handlers still use (memif's
  // control channel), which crashed at exit now and then.
  // Ports the program left open (it exited without closing its device)
  // are stopped and closed too; DPDK's complaints about the ones already
  // stopped are noise at exit.
  rte_log_set_global_level(RTE_LOG_EMERG);
  release_all_pauses();
  run_on_interrupt_thread(
      [](void*) {
        uint16_t port = 0;
        RTE_ETH_FOREACH_DEV(port) {
          rte_eth_dev_stop(port);
          rte_eth_dev_close(port);
        }
      },
      nullptr);
  drain_interrupts();
  // DPDK 22.11's rte_eal_cleanup frees the interrupt sources without
  // stopping the thread that watches them: an event arriving meanwhile (a
  // memif peer's disconnect as both ends exit) woke it into freed memory
  // (SIGSEGV in rte_intr_fd_get, about 1 run in 30 under load). Without
  // hugepage files it has nothing to clean that the end of the process
  // does not (the runtime directory goes below): it runs only when
  // hugepage files must go.
  if (s.mode == EalMemoryMode::kHugepages) rte_eal_cleanup();
  s.initialized = false;
  s.shut_down = true;
  // Only a directory named after our per-process prefix: a prefix chosen by
  // the caller may be shared with secondary processes.
  const std::filesystem::path dir(s.runtime_dir);
  if (s.own_prefix && dir.filename() == s.prefix) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
}

}  // namespace braid::dpdk

namespace braid::dpdk {

void Eal::drain_interrupts() {
  if (!initialized()) return;
  InterruptsRun run;
  drain_interrupt_thread_impl();
}

void Eal::run_on_interrupt_thread(void (*fn)(void*), void* arg) {
  struct Job {
    void (*fn)(void*);
    void* arg;
    std::atomic<int> state{0};  // 0 queued, 1 running, 2 done
  } job{fn, arg};
  InterruptsRun run;
  auto cb = [](void* p) {
    handoff_acquire(p);
    auto* j = static_cast<Job*>(p);
    int queued = 0;
    if (!j->state.compare_exchange_strong(queued, 1)) return;  // taken back
    j->fn(j->arg);
    j->state.store(2);
  };
  handoff_release(&job);
  if (!initialized() || rte_eal_alarm_set(1, cb, &job) != 0) {
    fn(arg);
    return;
  }
  // Bounded: if the interrupt thread is gone or stuck, take the job back
  // and run it here.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (job.state.load() != 2) {
    if (job.state.load() == 0 && std::chrono::steady_clock::now() > until) {
      int queued = 0;
      if (job.state.compare_exchange_strong(queued, 1)) {
        rte_eal_alarm_cancel(cb, &job);
        fn(arg);
        return;
      }
    }
    std::this_thread::yield();
  }
}

namespace {

// The interrupt thread parked by pause_interrupts: it waits in park_alarm
// until released. Shared with the alarm, which may run after the pausing
// call gave up on it.
struct Park {
  enum : int { kQueued, kParked, kReleased, kAbandoned };
  std::atomic<int> state{kQueued};
  std::mutex lock;
  std::condition_variable cv;
};
std::mutex g_pause_lock;  // the holders' count and the current park
int g_pause_depth = 0;
std::shared_ptr<Park> g_park;  // null while the thread runs
int g_lends = 0;               // InterruptsRun scopes alive: the thread runs for them

void park_alarm(void* arg) {
  handoff_acquire(arg);
  auto* holder = static_cast<std::shared_ptr<Park>*>(arg);
  const std::shared_ptr<Park> park = *holder;
  delete holder;
  int queued = Park::kQueued;
  if (!park->state.compare_exchange_strong(queued, Park::kParked)) return;  // taken back
  std::unique_lock<std::mutex> l(park->lock);
  park->cv.notify_all();
  park->cv.wait(l, [&] { return park->state.load() == Park::kReleased; });
}

// Under g_pause_lock.
bool park_now(std::chrono::milliseconds wait) {
  auto park = std::make_shared<Park>();
  auto* holder = new std::shared_ptr<Park>(park);
  handoff_release(holder);
  if (rte_eal_alarm_set(1, park_alarm, holder) != 0) {
    delete holder;
    return false;
  }
  {
    std::unique_lock<std::mutex> l(park->lock);
    park->cv.wait_for(l, wait, [&] { return park->state.load() == Park::kParked; });
  }
  int queued = Park::kQueued;
  if (park->state.compare_exchange_strong(queued, Park::kAbandoned)) {
    // Never parked: take the alarm back (if it runs meanwhile, it sees
    // the job abandoned and returns; it then freed its holder itself).
    if (rte_eal_alarm_cancel(park_alarm, holder) > 0) delete holder;
    return false;
  }
  g_park = std::move(park);
  return true;
}

// Under g_pause_lock.
void unpark_now() {
  if (!g_park) return;
  {
    std::lock_guard<std::mutex> l(g_park->lock);
    g_park->state.store(Park::kReleased);
  }
  g_park->cv.notify_all();
  g_park.reset();
}

}  // namespace

bool Eal::pause_interrupts(std::chrono::milliseconds wait) {
  std::lock_guard<std::mutex> g(g_pause_lock);
  if (g_lends > 0 && initialized()) {
    // Lent to a job (a port's handshake): parked when the last lend ends.
    ++g_pause_depth;
    return true;
  }
  if (!g_park && (!initialized() || !park_now(wait))) return false;
  ++g_pause_depth;
  return true;
}

void Eal::resume_interrupts() {
  std::lock_guard<std::mutex> g(g_pause_lock);
  if (g_pause_depth == 0 || --g_pause_depth > 0) return;
  unpark_now();
}

// At exit: ports a program left open still hold the thread.
void release_all_pauses() {
  std::lock_guard<std::mutex> g(g_pause_lock);
  g_pause_depth = 0;
  unpark_now();
}

bool Eal::interrupts_paused() {
  std::lock_guard<std::mutex> g(g_pause_lock);
  return g_park != nullptr;
}

Eal::InterruptsRun::InterruptsRun() {
  std::lock_guard<std::mutex> g(g_pause_lock);
  ++g_lends;
  lent_ = true;
  unpark_now();
}

Eal::InterruptsRun::~InterruptsRun() {
  if (!lent_) return;
  std::lock_guard<std::mutex> g(g_pause_lock);
  // Parked again for the holders left once no job needs the thread (if it
  // does not park in time, they burst unprotected, as pause_interrupts'
  // false allows).
  if (--g_lends == 0 && g_pause_depth > 0 && !g_park && initialized()) {
    park_now(std::chrono::milliseconds(5000));
  }
}

Status Eal::remove_vdev(const std::string& name) {
  if (!initialized()) return Status::failure("remove_vdev: the EAL is not initialised");
  uint16_t port = 0;
  if (rte_eth_dev_get_port_by_name(name.c_str(), &port) == 0) {
    run_on_interrupt_thread(
        [](void* p) {
          const uint16_t id = *static_cast<uint16_t*>(p);
          rte_eth_dev_stop(id);
          rte_eth_dev_close(id);
        },
        &port);
  }
  drain_interrupts();
  if (const int rc = rte_eal_hotplug_remove("vdev", name.c_str()); rc != 0) {
    return Status::failure("removing vdev " + name + " failed: " + rte_strerror(-rc));
  }
  drain_interrupts();
  return Status{};
}

Status Eal::probe_vdev(const std::string& spec) {
  if (!initialized()) return Status::failure("probe_vdev: the EAL is not initialised");
  const std::string name = spec.substr(0, spec.find(','));
  uint16_t port = 0;
  if (rte_eth_dev_get_port_by_name(name.c_str(), &port) == 0) return Status{};
  const int rc = rte_dev_probe(spec.c_str());
  if (rc != 0) {
    return Status::failure("cannot add port " + spec + ": " + rte_strerror(-rc) +
                           " (check the vdev arguments; a memif client needs its server first)");
  }
  if (rte_eth_dev_get_port_by_name(name.c_str(), &port) != 0) {
    return Status::failure("port " + name + " did not appear after probing " + spec);
  }
  return Status{};
}

}  // namespace braid::dpdk
