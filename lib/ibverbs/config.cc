#include "ibverbs/config.h"

#include <sched.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <map>
#include <utility>

namespace braid::ibv {
namespace {

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

bool to_number(const std::string& v, long lo, long hi, long* out) {
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < lo || n > hi) return false;
  *out = n;
  return true;
}

// The process's allowed CPUs as an EAL cpu list ("0-1", "3,5").
std::string allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return "0";
  std::string out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &set)) continue;
    if (!out.empty()) out += ',';
    out += std::to_string(c);
  }
  return out.empty() ? "0" : out;
}

}  // namespace

braid_device_config DeviceSettings::to_config() const {
  braid_device_config c{};
  c.port = port.c_str();
  c.ipv4 = ip.c_str();
  c.prefix_len = prefix_len;
  c.gateway = gateway.empty() ? nullptr : gateway.c_str();
  c.neighbors = neighbors.empty() ? nullptr : neighbors.c_str();
  c.eal_args = eal_args.empty() ? nullptr : eal_args.c_str();
  c.mtu = mtu;
  c.entropies = entropies;
  c.udp_port = udp_port;
  c.lcore = lcore < 0 ? 0 : lcore;
  c.progress_thread = progress_thread ? 1 : 0;
  c.link_wait_ms = link_wait_ms == 0 ? 1 : link_wait_ms;  // 0 in braid's config: the default
  c.crc = crc;
  c.paths = paths;
  c.cc = cc;
  c.link_mbps = link_mbps;
  c.base_rtt_us = base_rtt_us;
  c.idle_yield = idle_yield;
  c.credit = credit;
  c.cc_per_qp = cc_per_qp;
  c.pdc_per_peer = pdc_per_peer;
  c.tx_copy = tx_copy;
  c.engines = engines;
  c.auth = auth;
  c.auth_key = auth_key.empty() ? nullptr : auth_key.c_str();
  return c;
}

DeviceSettings load_settings(std::string* error) {
  std::map<std::string, std::string> kv;
  DeviceSettings s;
  const char* file = std::getenv("BRAID_IBV_CONFIG");
  const std::string path = file ? file : "/etc/braid/ibverbs.conf";
  std::ifstream in(path);
  if (in) {
    s.source = path;
    std::string line;
    while (std::getline(in, line)) {
      line = trim(line.substr(0, line.find('#')));
      const size_t eq = line.find('=');
      if (line.empty() || eq == std::string::npos) continue;
      kv[trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
    }
  } else if (file) {
    if (error) *error = "BRAID_IBV_CONFIG names " + path + ", which cannot be read";
    return s;
  }
  static const char* const kKeys[] = {
      "name",         "port",     "ip",        "prefix_len", "gateway",   "neighbors",
      "eal_args",     "mtu",      "entropies", "udp_port",   "lcore",     "progress_thread",
      "link_wait_ms", "crc",      "paths",     "cc",         "link_mbps", "base_rtt_us",
      "idle_yield",   "credit",   "tx_copy",   "engines",    "auth",      "auth_key",
      "cc_scope",     "pdc_scope"};
  for (const char* k : kKeys) {
    std::string env = "BRAID_IBV_";
    for (const char* p = k; *p; ++p) env += static_cast<char>(std::toupper(*p));
    if (const char* v = std::getenv(env.c_str())) {
      kv[k] = v;
      if (s.source.empty()) s.source = "the environment";
    }
  }
  auto bad = [&](const std::string& key) {
    if (error) *error = "bad value '" + kv[key] + "' for " + key + " (from " + s.source + ")";
    return DeviceSettings{};
  };
  long n = 0;
  if (kv.count("name") && !kv["name"].empty()) s.name = kv["name"];
  s.port = kv["port"];
  s.ip = kv["ip"];
  s.gateway = kv["gateway"];
  s.neighbors = kv["neighbors"];
  s.eal_args = kv["eal_args"];
  if (kv.count("prefix_len")) {
    if (!to_number(kv["prefix_len"], 1, 32, &n)) return bad("prefix_len");
    s.prefix_len = static_cast<int>(n);
  }
  if (kv.count("mtu")) {
    if (!to_number(kv["mtu"], 576, 9216, &n)) return bad("mtu");
    s.mtu = static_cast<uint32_t>(n);
  }
  if (kv.count("entropies")) {
    if (!to_number(kv["entropies"], 1, 256, &n)) return bad("entropies");
    s.entropies = static_cast<uint16_t>(n);
  }
  if (kv.count("udp_port")) {
    if (!to_number(kv["udp_port"], 1, 65535, &n)) return bad("udp_port");
    s.udp_port = static_cast<uint16_t>(n);
  }
  if (kv.count("lcore")) {
    if (!to_number(kv["lcore"], 0, 1023, &n)) return bad("lcore");
    s.lcore = static_cast<int>(n);
  }
  if (kv.count("progress_thread")) {
    if (!to_number(kv["progress_thread"], 0, 1, &n)) return bad("progress_thread");
    s.progress_thread = n == 1;
  }
  if (kv.count("link_wait_ms")) {
    if (!to_number(kv["link_wait_ms"], 0, 3'600'000, &n)) return bad("link_wait_ms");
    s.link_wait_ms = static_cast<uint32_t>(n);
  }
  if (kv.count("engines")) {
    if (!to_number(kv["engines"], 1, 16, &n)) return bad("engines");
    s.engines = static_cast<int>(n);
  }
  if (kv.count("tx_copy")) {
    if (!to_number(kv["tx_copy"], 0, 1, &n)) return bad("tx_copy");
    s.tx_copy = static_cast<int>(n);
  }
  if (kv.count("crc")) {
    // 1: on, 0: off; unset: on where frames leave the host.
    if (!to_number(kv["crc"], 0, 1, &n)) return bad("crc");
    s.crc = n == 1 ? 1 : -1;
  }
  // A key whose value is one of a few names.
  auto named = [&](const char* key, std::initializer_list<std::pair<const char*, int>> names,
                   int* out) {
    if (!kv.count(key)) return true;
    for (const auto& [name, value] : names) {
      if (kv[key] == name) {
        *out = value;
        return true;
      }
    }
    return false;
  };
  if (kv.count("paths")) {
    s.paths = braid_paths_from_name(kv["paths"].c_str());
    if (s.paths == 0) return bad("paths");
  }
  if (kv.count("cc")) {
    s.cc = braid_cc_from_name(kv["cc"].c_str());
    if (s.cc == 0) return bad("cc");
  }
  if (!named("cc_scope", {{"peer", 0}, {"qp", 1}}, &s.cc_per_qp)) return bad("cc_scope");
  if (!named("pdc_scope", {{"qp", 0}, {"peer", 1}}, &s.pdc_per_peer)) return bad("pdc_scope");
  if (!named("auth",
             {{"off", BRAID_AUTH_OFF}, {"on", BRAID_AUTH_ON}, {"required", BRAID_AUTH_REQUIRED}},
             &s.auth)) {
    return bad("auth");
  }
  s.auth_key = kv["auth_key"];
  if (kv.count("link_mbps")) {
    if (!to_number(kv["link_mbps"], 1, 1'000'000, &n)) return bad("link_mbps");
    s.link_mbps = static_cast<uint32_t>(n);
  }
  if (kv.count("base_rtt_us")) {
    if (!to_number(kv["base_rtt_us"], 0, 1'000'000, &n)) return bad("base_rtt_us");
    s.base_rtt_us = static_cast<uint32_t>(n);
  }
  if (kv.count("credit")) {
    if (!to_number(kv["credit"], 0, 1, &n)) return bad("credit");
    s.credit = static_cast<int>(n);
  }
  if (kv.count("idle_yield")) {
    if (!to_number(kv["idle_yield"], 0, 1'000'000, &n)) return bad("idle_yield");
    s.idle_yield = static_cast<uint32_t>(n);
  }
  // Unmodified programs do not choose a core: two of them on one host must
  // not both be pinned to core 0, so the engine's thread keeps the
  // process's CPUs unless a core is named.
  if (s.lcore < 0) {
    if (!s.eal_args.empty()) s.eal_args += ' ';
    s.eal_args += "--lcores=0@(" + allowed_cpus() + ")";
  }
  return s;
}

IbRate ib_rate_for(uint32_t link_mbps) {
  struct Code {
    uint8_t code;
    uint32_t mbps;
  };
  static constexpr Code kWidths[] = {{1, 1}, {16, 2}, {2, 4}, {4, 8}, {8, 12}};
  static constexpr Code kSpeeds[] = {{1, 2500},   {2, 5000},   {4, 10000},   {16, 14000},
                                     {32, 25000}, {64, 50000}, {128, 100000}};
  IbRate best;
  for (const Code& w : kWidths) {
    for (const Code& l : kSpeeds) {
      const uint32_t mbps = w.mbps * l.mbps;
      // Of equal rates, the fewer lanes (1X NDR rather than 4X EDR).
      if (mbps <= link_mbps && mbps > best.mbps) best = IbRate{w.code, l.code, mbps};
    }
  }
  return best;
}

}  // namespace braid::ibv
