// braid_open_device: configuration, neighbours, engine.
#include <arpa/inet.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "engine/port_opener.h"
#include "verbs/device_io.h"
#include "verbs/verbs_internal.h"

namespace braid {

namespace {

bool parse_ipv4(const char* s, uint32_t* out) {
  in_addr a{};
  if (s == nullptr || inet_pton(AF_INET, s, &a) != 1) return false;
  *out = ntohl(a.s_addr);
  return true;
}

bool parse_mac(const std::string& s, wire::MacAddr* out) {
  unsigned v[6];
  if (std::sscanf(s.c_str(), "%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6) {
    return false;
  }
  for (int i = 0; i < 6; ++i) {
    if (v[i] > 255) return false;
    (*out)[i] = static_cast<uint8_t>(v[i]);
  }
  return true;
}

// A 32-byte secret from 64 hex digits, or from "@path": a file holding them
// (whitespace around them allowed).
bool parse_auth_key(const char* spec, wire::TssSecret* out, std::string* error) {
  if (spec == nullptr || *spec == '\0') {
    *error = "a key is required (64 hex digits, or @file)";
    return false;
  }
  std::string text = spec;
  if (text[0] == '@') {
    std::ifstream in(text.substr(1));
    if (!in) {
      *error = "cannot read " + text.substr(1);
      return false;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  std::string hex;
  for (const char ch : text) {
    if (!std::isspace(static_cast<unsigned char>(ch))) hex += ch;
  }
  if (hex.size() != 2 * out->size()) {
    *error = "must be 64 hex digits (32 bytes), not " + std::to_string(hex.size()) + " characters";
    return false;
  }
  for (size_t i = 0; i < out->size(); ++i) {
    uint8_t v = 0;
    for (int k = 0; k < 2; ++k) {
      const char ch = static_cast<char>(std::tolower(static_cast<unsigned char>(hex[2 * i + k])));
      const int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
      if (d < 0) {
        *error = "not a hex digit: '" + std::string(1, hex[2 * i + k]) + "'";
        return false;
      }
      v = static_cast<uint8_t>(v * 16 + d);
    }
    (*out)[i] = v;
  }
  return true;
}

braid_context* fail(int err, const std::string& why) {
  set_last_error(why);
  errno = err;
  return nullptr;
}

}  // namespace

braid_context* open_device(const braid_device_config* config, std::unique_ptr<PacketIo> io) {
  std::vector<std::unique_ptr<PacketIo>> ios;
  if (io != nullptr) ios.push_back(std::move(io));
  return open_device(config, std::move(ios));
}

braid_context* open_device(const braid_device_config* config,
                           std::vector<std::unique_ptr<PacketIo>> ios) {
  if (config == nullptr) return fail(EINVAL, "open_device: no configuration");
  auto c = std::make_unique<braid_context>();
  c->config = *config;
  // QP numbers (the connections' PDC ids) start at a random one and go
  // round: a device opened after another (a program run again) does not
  // give its QPs the numbers the last one's peers may still send to (a
  // lingering CLOSE or ACK of an earlier connection on the same ids).
  std::random_device rd;
  c->next_qpn = rd() % 65535 + 1;
  c->qpn_key = (uint64_t{rd()} << 32 | rd()) | 1;  // never 0
  auto own = [](const char* s) { return s == nullptr ? std::string() : std::string(s); };
  c->port_spec = own(config->port);
  c->ipv4 = own(config->ipv4);
  c->gateway = own(config->gateway);
  c->neighbors = own(config->neighbors);
  c->eal_args = own(config->eal_args);
  c->config.port = c->port_spec.c_str();
  c->config.ipv4 = c->ipv4.c_str();
  c->config.gateway = c->gateway.empty() ? nullptr : c->gateway.c_str();
  c->config.neighbors = c->neighbors.empty() ? nullptr : c->neighbors.c_str();
  c->config.eal_args = c->eal_args.empty() ? nullptr : c->eal_args.c_str();
  if (c->config.mtu == 0) c->config.mtu = 1500;
  if (c->config.entropies == 0) c->config.entropies = 16;
  if (c->config.entropies > 256) return fail(EINVAL, "open_device: entropies must be 1..256");
  if (c->config.udp_port == 0) c->config.udp_port = wire::kUetUdpPort;
  if (c->config.paths == BRAID_PATHS_DEFAULT) c->config.paths = BRAID_PATHS_REPS;
  if (braid_paths_name(c->config.paths) == nullptr) {
    return fail(EINVAL, "open_device: paths must be a braid_path_policy (braid_paths_from_name)");
  }
  if (c->config.cc == BRAID_CC_DEFAULT) c->config.cc = BRAID_CC_NSCC;
  if (c->config.base_rtt_us == 0) c->config.base_rtt_us = BRAID_DEFAULT_BASE_RTT_US;
  if (braid_cc_name(c->config.cc) == nullptr) {
    return fail(EINVAL, "open_device: cc must be a braid_cc (braid_cc_from_name)");
  }
  if (c->config.credit != 0 && c->config.credit != 1) {
    return fail(EINVAL, "open_device: credit must be 0 (off) or 1 (on)");
  }
  if (c->config.stats < -1 || c->config.stats > 1) {
    return fail(EINVAL, "open_device: stats must be 1 (publish), 0 (if BRAID_STATS=1) or -1");
  }
  if (c->config.prefix_len == 0) c->config.prefix_len = 24;
  if (c->config.engines == 0) c->config.engines = 1;
  if (c->config.engines < 1 || c->config.engines > kMaxEngines) {
    return fail(EINVAL, "open_device: engines must be 1.." + std::to_string(kMaxEngines));
  }
  const auto engines = static_cast<uint16_t>(c->config.engines);
  if (!ios.empty() && ios.size() != engines) {
    return fail(EINVAL, "open_device: " + std::to_string(ios.size()) + " backends for " +
                            std::to_string(engines) + " engines");
  }
  if (c->config.auth < BRAID_AUTH_OFF || c->config.auth > BRAID_AUTH_REQUIRED) {
    return fail(EINVAL, "open_device: auth must be a braid_auth");
  }
  if (c->config.pdc_per_peer != 0 && c->config.pdc_per_peer != 1) {
    return fail(EINVAL, "open_device: pdc_per_peer must be 0 (a PDC per QP) or 1 (per peer)");
  }
  if (c->config.pdc_per_peer == 1 && c->config.auth != BRAID_AUTH_OFF) {
    return fail(EINVAL, "open_device: pdc_per_peer needs auth off");
  }
  if (c->config.auth != BRAID_AUTH_OFF) {
    std::string error;
    if (!parse_auth_key(config->auth_key, &c->auth_secret, &error)) {
      return fail(EINVAL, "open_device: auth_key: " + error);
    }
  }
  c->config.auth_key = nullptr;  // the secret is kept once, not the caller's pointer
  if (!parse_ipv4(config->ipv4, &c->ip)) {
    return fail(EINVAL, "open_device: ipv4 must be a dotted-quad address, e.g. 198.18.0.1");
  }
  uint32_t gateway = 0;
  if (config->gateway != nullptr && !parse_ipv4(config->gateway, &gateway)) {
    return fail(EINVAL, "open_device: gateway is not an IPv4 address");
  }
  if (ios.empty()) {
    const PortOpener opener = registered_port_opener();
    if (opener == nullptr) {
      return fail(ENODEV,
                  "open_device: no packet I/O backend is linked in (link braid_dpdk_backend)");
    }
    PortRequest request;
    request.spec = c->config.port == nullptr ? "" : c->config.port;
    request.eal_args = c->config.eal_args == nullptr ? "" : c->config.eal_args;
    request.lcore = c->config.lcore;
    request.mtu = c->config.mtu;
    request.tx_copy = c->config.tx_copy == 1;
    request.link_wait_ms = c->config.link_wait_ms;
    request.queues = static_cast<uint16_t>(c->config.engines < 1 ? 1 : c->config.engines);
    request.before_shutdown = settle_at_exit;
    OpenedPort opened = opener(request);
    if (opened.ios.empty()) return fail(ENODEV, opened.error);
    ios = std::move(opened.ios);
    c->port = std::move(opened.port);
  }
  PacketIo* io = ios[0].get();
  if (c->config.link_mbps == 0) c->config.link_mbps = io->link_mbps();
  if (c->config.link_mbps == 0) c->config.link_mbps = 100'000;
  // NSCC's largest window is 1.5 x the link's BDP at the base RTT; it keeps
  // windows up to NsccCc::kMaxWindowBytes.
  const double max_window =
      1.5 * double(c->config.link_mbps) * 1e6 / 8 * double(c->config.base_rtt_us) * 1e-6;
  if (max_window > NsccCc::kMaxWindowBytes) {
    return fail(EINVAL, "open_device: link_mbps " + std::to_string(c->config.link_mbps) +
                            " x base_rtt_us " + std::to_string(c->config.base_rtt_us) +
                            " gives NSCC a largest window (1.5 x BDP) of " +
                            std::to_string(static_cast<uint64_t>(max_window)) + " bytes; at most " +
                            std::to_string(static_cast<uint64_t>(NsccCc::kMaxWindowBytes)) +
                            " are supported");
  }
  EngineConfig ec;
  ec.ip = c->ip;
  ec.udp_port = c->config.udp_port;
  ec.prefix_len = static_cast<uint32_t>(c->config.prefix_len);
  ec.gateway = gateway;
  ec.crc_trailer = c->config.crc == 1 || (c->config.crc == 0 && !io->host_local());
  c->crc = ec.crc_trailer;
  ec.auth = static_cast<AuthMode>(c->config.auth);
  ec.auth_secret = c->auth_secret;
  // Each engine has a credit pacer; they share one next-grant time, so that
  // together they grant the link's rate (not engines times it), and the
  // engine of a lone receiving QP all of it.
  ec.credit_rate_bps = uint64_t{c->config.link_mbps} * 1'000'000;
  if (engines > 1) ec.credit_shared_next_at = &c->credit_next_at;
  ec.cc_per_peer = c->config.cc_per_qp == 0;
  c->memory = std::make_unique<MemoryRegionTable>();
  ec.shared_memory = c->memory.get();
  if (engines > 1) c->group = std::make_unique<EngineGroup>(engines);
  for (uint16_t k = 0; k < engines; ++k) {
    auto slot = std::make_unique<EngineSlot>();
    slot->engine = std::make_unique<Engine>(std::move(ios[k]), ec);
    if (c->group) slot->engine->join(c->group.get(), k);
    c->slots.push_back(std::move(slot));
  }
  c->engine = c->slots[0]->engine.get();
  // Port events say changes from the state at open.
  c->port_reported_ok = c->port_ok();
  // Several engines may be driven from several threads: every call locks.
  c->locking = engines > 1;
  // Static neighbours: "ip=mac,ip=mac".
  std::stringstream ss(c->neighbors);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    uint32_t ip = 0;
    wire::MacAddr mac{};
    if (eq == std::string::npos || !parse_ipv4(item.substr(0, eq).c_str(), &ip) ||
        !parse_mac(item.substr(eq + 1), &mac)) {
      return fail(EINVAL, "open_device: neighbors must look like 198.18.0.2=02:00:00:00:00:02");
    }
    for (auto& s : c->slots) s->engine->add_neighbor(ip, mac);
  }
  const char* env = std::getenv("BRAID_STATS");
  if (c->config.stats == 1 ||
      (c->config.stats == 0 && env != nullptr && std::strcmp(env, "1") == 0)) {
    std::string error;
    // One object per engine, each with its own QPs; braid_stats_name
    // names engine 0's.
    for (auto& s : c->slots) {
      if (!s->engine->enable_stats(kStatsMaxQps, c->config.entropies, &error)) {
        return fail(EIO, error);
      }
    }
    c->stats_name = c->engine->stats_name();
  }
  if (c->config.progress_thread) start_progress_thread(c.get());
  return c.release();
}

}  // namespace braid
