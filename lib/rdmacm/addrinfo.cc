// rdma_getaddrinfo / rdma_freeaddrinfo: getaddrinfo's answer (numeric or
// named IPv4 and IPv6 addresses) in rdma_addrinfo's shape: a passive
// lookup gives a source address, an active one a destination (and the
// hint's source). No ibacm: no route or connect data.
#include <netdb.h>
#include <rdma/rdma_cma.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#define BRAID_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

sockaddr* copy_addr(const sockaddr* sa, socklen_t len) {
  auto* p = static_cast<sockaddr*>(std::malloc(len));
  if (p) std::memcpy(p, sa, len);
  return p;
}

socklen_t addr_len(const sockaddr* sa) {
  return sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

}  // namespace

BRAID_EXPORT void rdma_freeaddrinfo(rdma_addrinfo* res) {
  while (res != nullptr) {
    rdma_addrinfo* next = res->ai_next;
    std::free(res->ai_src_addr);
    std::free(res->ai_dst_addr);
    std::free(res->ai_src_canonname);
    std::free(res->ai_dst_canonname);
    std::free(res->ai_route);
    std::free(res->ai_connect);
    std::free(res);
    res = next;
  }
}

BRAID_EXPORT int rdma_getaddrinfo(const char* node, const char* service, const rdma_addrinfo* hints,
                                  rdma_addrinfo** res) {
  if (res == nullptr || (node == nullptr && service == nullptr && hints == nullptr)) {
    errno = EINVAL;
    return -1;
  }
  auto* ai = static_cast<rdma_addrinfo*>(std::calloc(1, sizeof(rdma_addrinfo)));
  if (ai == nullptr) {
    errno = ENOMEM;
    return -1;
  }
  const bool passive = hints && (hints->ai_flags & RAI_PASSIVE);
  ai->ai_qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type : IBV_QPT_RC;
  ai->ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space : RDMA_PS_TCP;
  ai->ai_flags = passive ? RAI_PASSIVE : 0;
  if (node != nullptr || service != nullptr) {
    addrinfo h{};
    h.ai_family = hints && hints->ai_family ? hints->ai_family : AF_UNSPEC;
    if (h.ai_family == AF_UNSPEC) h.ai_family = AF_INET;  // Braid's devices are IPv4
    h.ai_socktype = ai->ai_qp_type == IBV_QPT_UD ? SOCK_DGRAM : SOCK_STREAM;
    if (passive) h.ai_flags |= AI_PASSIVE;
    if (hints && (hints->ai_flags & RAI_NUMERICHOST)) h.ai_flags |= AI_NUMERICHOST;
    addrinfo* gai = nullptr;
    const int r = getaddrinfo(node, service, &h, &gai);
    if (r != 0) {
      std::free(ai);
      return r;
    }
    ai->ai_family = gai->ai_family;
    sockaddr* a = copy_addr(gai->ai_addr, gai->ai_addrlen);
    const socklen_t alen = gai->ai_addrlen;
    freeaddrinfo(gai);
    if (a == nullptr) {
      std::free(ai);
      errno = ENOMEM;
      return -1;
    }
    if (passive) {
      ai->ai_src_addr = a;
      ai->ai_src_len = alen;
    } else {
      ai->ai_dst_addr = a;
      ai->ai_dst_len = alen;
    }
  }
  if (hints != nullptr) {
    if (ai->ai_src_addr == nullptr && hints->ai_src_addr != nullptr) {
      ai->ai_src_addr = copy_addr(hints->ai_src_addr, addr_len(hints->ai_src_addr));
      ai->ai_src_len = addr_len(hints->ai_src_addr);
      if (ai->ai_family == 0) ai->ai_family = hints->ai_src_addr->sa_family;
    }
    if (ai->ai_dst_addr == nullptr && hints->ai_dst_addr != nullptr) {
      ai->ai_dst_addr = copy_addr(hints->ai_dst_addr, addr_len(hints->ai_dst_addr));
      ai->ai_dst_len = addr_len(hints->ai_dst_addr);
      if (ai->ai_family == 0) ai->ai_family = hints->ai_dst_addr->sa_family;
    }
  }
  if (ai->ai_family == 0) ai->ai_family = AF_INET;
  *res = ai;
  return 0;
}
