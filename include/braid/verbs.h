/*
 * Braid's verbs API: the objects and semantics of libibverbs (device, PD,
 * MR, CQ, RC QP, post_send / post_recv / poll_cq) over Braid's multipath
 * transport on a DPDK port. Names mirror libibverbs with a braid_ prefix and
 * every enum value equals its libibverbs counterpart, so code ports by
 * renaming and a libibverbs shim can map 1:1.
 *
 * Errors: functions returning int return 0 or a positive errno value (as
 * libibverbs); functions returning pointers return NULL and set errno.
 * braid_last_error() gives a human-readable reason for the last failure on
 * the calling thread (e.g. why a port could not start).
 *
 * Threads and progress. By default a device runs to completion: Braid's
 * engine (receive, timers, transmit) runs inside braid_poll_cq(),
 * braid_post_send() and braid_post_recv(), on the calling thread, with no
 * locks. All calls on one device must then come from one thread at a time.
 * With braid_device_config.progress_thread = 1 (or once a completion channel
 * is created) every call takes the device's lock, so any thread may call
 * in, and a dedicated thread drives the engine whenever the application has
 * made no call for about 1 ms (it is blocked, or busy elsewhere); while the
 * application calls in, its calls drive the engine and the thread sleeps.
 */
#ifndef BRAID_VERBS_H
#define BRAID_VERBS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct braid_context;
struct braid_pd;
struct braid_cq;
struct braid_qp;
struct braid_srq;
struct braid_ah;
struct braid_comp_channel;

/* Device configuration. Unset fields (0 / NULL) take the defaults shown. */
struct braid_device_config {
  /* DPDK port: a vdev spec ("net_memif0,role=client,socket=/tmp/m.sock"),
   * a PCI address ("0000:3b:00.0"), or the name of a port already probed.
   * One braid_context per port at a time in a process (a second open is
   * refused: share the context, from any thread with a progress thread);
   * libibverbs' contexts of one device share theirs. */
  const char* port;
  const char* ipv4;      /* our address, e.g. "198.18.0.1" (required) */
  int prefix_len;        /* on-link prefix, default 24 */
  const char* gateway;   /* next hop for off-link peers, optional */
  const char* neighbors; /* static ARP entries "ip=mac,ip=mac", optional */
  const char* eal_args;  /* extra EAL arguments, space separated */
  uint32_t mtu;          /* link MTU, default 1500 (up to 9000) */
  uint16_t entropies;    /* UDP source ports sprayed per QP, 1..256, default 16 */
  uint16_t udp_port;     /* default 4793 */
  int lcore;             /* core for the engine, default: the calling core */
  int progress_thread;   /* 1: a dedicated progress thread */
  /* How long open waits for the link of a port that connects to a peer (a
   * memif client, virtio-user...), retrying the connection: default 2000. */
  uint32_t link_wait_ms;
  /* End-to-end integrity: 1 puts a CRC-32C trailer on every packet sent,
   * -1 none, 0 (default) only on ports whose frames leave the host (a NIC,
   * AF_PACKET, AF_XDP; not memif, vhost/virtio-user, ring). A flag in each
   * packet says whether it carries one, so the ends need not agree; every
   * trailer received is checked (corrupted packets are dropped, counted as
   * rx_bad_crc, and resent). It costs ~100 ns per 1.4 KiB and ~400 ns per
   * 4 KiB at each end (docs/benchmarks.md). */
  int crc;
  /* How each QP chooses the entropy (path) of a packet: enum
   * braid_path_policy (or braid_paths_from_name()), default BRAID_PATHS_REPS. */
  int paths;
  /* Congestion control of each QP: enum braid_cc (or braid_cc_from_name()),
   * default BRAID_CC_NSCC (docs/congestion.md). */
  int cc;
  /* The link rate congestion control scales itself by, in Mb/s: default the
   * port's reported speed (100000 when it reports none, and for host-local
   * PMDs: memif, vhost, virtio-user, ring, null). */
  uint32_t link_mbps;
  /* The network's base RTT, in us, as UET configures it: the unloaded round
   * trip between the farthest hosts, hosts' turnaround included. Every QP
   * of every host takes its NSCC parameters from it (delay target, window
   * steps, largest window 1.5 x link rate x base RTT), so QPs sharing a link
   * share it fairly; each QP still measures its own smallest RTT for its
   * queueing delay. 0: BRAID_DEFAULT_BASE_RTT_US, which covers a software
   * datapath on one host (memif, virtio: 25-60 us measured here). */
  uint32_t base_rtt_us;
  /* For more busy-polling processes than cores (a switch, peers and tools
   * on one host): after this many calls in a row that found no work
   * (braid_poll_cq with no completion, braid_progress moving no frame),
   * the calling thread yields its core (sched_yield), so that whoever it
   * waits for runs now instead of after its time slice. 0 (default): never;
   * on a core of its own, yielding adds to latency (docs/benchmarks.md). */
  uint32_t idle_yield;
  /* Receiver-driven credit on each QP, on top of `cc` (docs/congestion.md):
   * 1 on, 0 (default) off. A sender sends a BDP from idle, then only what
   * its receiver grants; each port's receiver grants at link_mbps in turns
   * among the QPs that ask, so a many-to-one incast arrives at the link's
   * rate instead of as a queue. Both ends of a QP should agree. */
  int credit;
  /* Live statistics for other processes: 1 publishes the port's, each QP's
   * and each entropy's counters into /dev/shm/braid-stats.<pid>.<n> ten
   * times a second, read by `braid_stat` while the program runs; -1 never;
   * 0 (default) only when the environment has BRAID_STATS=1. */
  int stats;
  /* How long braid_modify_qp to RTR waits for the peer's ARP reply when its
   * MAC is not known yet, in us: 0 (default) 2000, < 0 not at all. Without
   * the reply the QP goes to RTR all the same and sends once it arrives; a
   * caller that must not block (an NCCL plugin's connect) sets -1. */
  int rtr_arp_wait_us;
  /* Payloads sent: 0 (default) straight from registered memory where the
   * port can take them so (memif in copy mode: the PMD copies every frame
   * out before its burst call returns; braid_port_attr.tx_in_place says
   * whether a port does), otherwise copied into the packet buffer; 1
   * always copied. */
  int tx_copy;
  /* Engines on the port, one per core: 0 or 1 (default) one; N (up to 16)
   * opens the port with N queue pairs (the PMD must have them: memif and
   * vhost take the peer's count) and runs an engine on each. A QP runs on
   * engine qp_num % N; packets that arrive on another engine's queue are
   * handed to it. Calls may come from any thread (each takes the locks of
   * the engines it touches); with progress_thread, each engine has its own
   * thread. A CQ takes completions from QPs of any engine, in order per QP
   * (docs/ibverbs.md). */
  int engines;
  /* Authenticated mode (docs/security.md): enum braid_auth, default off.
   * ON seals every packet of every QP with AES-256-GCM (UET's TSS header,
   * a 16-byte ICV) under keys derived for each QP direction from auth_key,
   * and takes only packets that authenticate (replays and forgeries are
   * dropped and counted). REQUIRED also answers no frame it cannot
   * authenticate. Both ends need the same mode and key. */
  int auth;
  /* The secret every device of the job shares: 64 hex digits (32 bytes),
   * or "@path" of a file that holds them. Required when auth is on. */
  const char* auth_key;
  /* Congestion state: 0 (default) one per peer, shared by an engine's QPs
   * to the same peer address (one window, pacing clock and CNP timer), so
   * that four QPs to a peer take one host's share of a bottleneck, not
   * four; 1 one per QP, as RoCE's DCQCN per QP (docs/congestion.md). */
  int cc_per_qp;
  /* Transport state (the PDC: PSNs, window, paths, timers, ACKs): 0
   * (default) one per QP; 1 one per peer address (and path MTU), shared by
   * the device's QPs to it, as UET shares a PDC: a thousand QPs to a peer
   * hold one PDC's state and its ACKs cover them all, while each QP keeps
   * its own queues, order, RNR waits and errors. Both ends need the same
   * setting (and as many engines); auth off only (docs/ibverbs.md). */
  int pdc_per_peer;
};

enum braid_auth {
  BRAID_AUTH_OFF = 0,
  BRAID_AUTH_ON = 1,
  BRAID_AUTH_REQUIRED = 2,
};

enum braid_path_policy {
  BRAID_PATHS_DEFAULT = 0,
  BRAID_PATHS_ROUND_ROBIN = 1, /* oblivious: every entropy in turn */
  BRAID_PATHS_REPS = 2,        /* recycle entropies that came back unmarked */
  BRAID_PATHS_BITMAP = 3,      /* in turn, passing over ones penalised by ECN, NACK, loss */
  /* Further policies a build registers (lib/core/paths/registry.h) follow:
   * braid_paths_from_name() finds them. */
};

/* The braid_path_policy of the path policy of that name ("round-robin",
 * "reps", "bitmap", or any other the build registers), 0 when no policy
 * has it. */
int braid_paths_from_name(const char* name);
/* The name of a braid_path_policy (1 on), NULL for a number no policy has. */
const char* braid_paths_name(int paths);

/* The network base RTT NSCC takes when braid_device_config.base_rtt_us is 0
 * (docs/congestion.md). */
#define BRAID_DEFAULT_BASE_RTT_US 25

enum braid_cc {
  BRAID_CC_DEFAULT = 0,      /* BRAID_CC_NSCC */
  BRAID_CC_FIXED_WINDOW = 1, /* 1 MiB in flight per QP, never changed */
  BRAID_CC_NSCC = 2,         /* UET's NSCC: ECN and delay */
  BRAID_CC_DCQCN = 3,        /* RoCEv2's: a paced rate cut by CNPs for ECN-CE */
  /* Further algorithms a build registers (lib/core/cc/registry.h) follow:
   * braid_cc_from_name() finds them. */
};

/* The braid_cc of the congestion-control algorithm of that name ("fixed",
 * "nscc", "dcqcn", or any other the build registers), 0 when no algorithm
 * has it. */
int braid_cc_from_name(const char* name);
/* The name of a braid_cc (1 on), NULL for a number no algorithm has. */
const char* braid_cc_name(int cc);

enum braid_access_flags {
  BRAID_ACCESS_LOCAL_WRITE = 1,
  BRAID_ACCESS_REMOTE_WRITE = 1 << 1,
  BRAID_ACCESS_REMOTE_READ = 1 << 2,
  BRAID_ACCESS_REMOTE_ATOMIC = 1 << 3,
  BRAID_ACCESS_RELAXED_ORDERING = 1 << 20, /* accepted, ignored */
};

union braid_gid {
  uint8_t raw[16];
  struct {
    uint64_t subnet_prefix;
    uint64_t interface_id;
  } global;
};

enum braid_mtu {
  BRAID_MTU_256 = 1,
  BRAID_MTU_512 = 2,
  BRAID_MTU_1024 = 3,
  BRAID_MTU_2048 = 4,
  BRAID_MTU_4096 = 5,
};

/* DOWN: the link is down (a memif or vhost-user port until its peer
 * attaches), or up but stalled: its TX ring has taken no frame for a second
 * while frames wait (a peer that stopped polling). */
enum braid_port_state {
  BRAID_PORT_DOWN = 1,
  BRAID_PORT_ACTIVE = 4,
};

/* braid_device_attr.vendor_id: not an IEEE OUI but the locally
 * administered prefix of Braid's node GUIDs. */
#define BRAID_VENDOR_ID 0x02b7a1

struct braid_device_attr {
  char fw_ver[64];
  uint64_t max_mr_size;
  uint32_t vendor_id;
  uint32_t vendor_part_id;
  int max_qp;
  int max_qp_wr;
  int max_sge;
  int max_cq;
  int max_cqe;
  int max_mr;
  int max_pd;
  int max_qp_rd_atom;
  int max_qp_init_rd_atom;
  /* 1 (IBV_ATOMIC_HCA): atomics are atomic with respect to every other
   * atomic on the device. */
  int atomic_cap;
  uint8_t phys_port_cnt;
  int max_srq;
  int max_srq_wr;
  int max_srq_sge;
};

struct braid_port_attr {
  enum braid_port_state state;
  enum braid_mtu max_mtu;
  enum braid_mtu active_mtu;
  int gid_tbl_len;
  uint32_t max_msg_sz;
  uint8_t link_layer;  /* 2: Ethernet, as IBV_LINK_LAYER_ETHERNET */
  uint32_t link_mtu;   /* Ethernet MTU of the DPDK port */
  uint8_t tx_in_place; /* 1: payloads leave from registered memory, not copied first */
  uint32_t link_mbps;  /* the port's rate, Mb/s: braid_device_config.link_mbps as resolved */
};

enum braid_wc_status {
  BRAID_WC_SUCCESS = 0,
  BRAID_WC_LOC_LEN_ERR = 1,
  BRAID_WC_LOC_QP_OP_ERR = 2,
  BRAID_WC_LOC_PROT_ERR = 4,
  BRAID_WC_WR_FLUSH_ERR = 5,
  BRAID_WC_BAD_RESP_ERR = 7,
  BRAID_WC_REM_INV_REQ_ERR = 9,
  BRAID_WC_REM_ACCESS_ERR = 10,
  BRAID_WC_REM_OP_ERR = 11,
  BRAID_WC_RETRY_EXC_ERR = 12,
  BRAID_WC_RNR_RETRY_EXC_ERR = 13,
  BRAID_WC_GENERAL_ERR = 21,
};

enum braid_wc_opcode {
  BRAID_WC_SEND = 0,
  BRAID_WC_RDMA_WRITE = 1,
  BRAID_WC_RDMA_READ = 2,
  BRAID_WC_COMP_SWAP = 3,
  BRAID_WC_FETCH_ADD = 4,
  BRAID_WC_RECV = 128,
  BRAID_WC_RECV_RDMA_WITH_IMM = 129,
};

enum braid_wc_flags {
  BRAID_WC_GRH = 1 << 0, /* UD receives: a 40-byte GRH precedes the data */
  BRAID_WC_WITH_IMM = 1 << 1,
};

struct braid_wc {
  uint64_t wr_id;
  enum braid_wc_status status;
  enum braid_wc_opcode opcode;
  uint32_t vendor_err;
  uint32_t byte_len;
  uint32_t imm_data; /* network byte order, as libibverbs */
  uint32_t qp_num;
  uint32_t src_qp;
  unsigned int wc_flags;
};

struct braid_sge {
  uint64_t addr;
  uint32_t length;
  uint32_t lkey;
};

enum braid_wr_opcode {
  BRAID_WR_RDMA_WRITE = 0,
  BRAID_WR_RDMA_WRITE_WITH_IMM = 1,
  BRAID_WR_SEND = 2,
  BRAID_WR_SEND_WITH_IMM = 3,
  BRAID_WR_RDMA_READ = 4,
  BRAID_WR_ATOMIC_CMP_AND_SWP = 5, /* 8 bytes; the old value into sg_list */
  BRAID_WR_ATOMIC_FETCH_AND_ADD = 6,
};

enum braid_send_flags {
  BRAID_SEND_FENCE = 1,
  BRAID_SEND_SIGNALED = 1 << 1,
  BRAID_SEND_SOLICITED = 1 << 2,
  BRAID_SEND_INLINE = 1 << 3,
};

struct braid_send_wr {
  uint64_t wr_id;
  struct braid_send_wr* next;
  struct braid_sge* sg_list;
  int num_sge;
  enum braid_wr_opcode opcode;
  unsigned int send_flags;
  uint32_t imm_data; /* network byte order, as libibverbs */
  struct {
    uint64_t remote_addr;
    uint32_t rkey;
  } rdma;
  /* Atomics: an 8-byte aligned target in a region with REMOTE_ATOMIC, on a
   * QP whose peer allows it; sg_list is one 8-byte buffer for the old
   * value. Atomic against every other atomic on the target's device. */
  struct {
    uint64_t remote_addr;
    uint64_t compare_add; /* compare (CMP_AND_SWP) or add (FETCH_AND_ADD) */
    uint64_t swap;
    uint32_t rkey;
  } atomic;
  /* UD QPs: where the datagram goes. A remote_qkey with its top bit set
   * means the QP's own Q_Key, as InfiniBand. */
  struct {
    struct braid_ah* ah;
    uint32_t remote_qpn;
    uint32_t remote_qkey;
  } ud;
};

struct braid_recv_wr {
  uint64_t wr_id;
  struct braid_recv_wr* next;
  struct braid_sge* sg_list;
  int num_sge;
};

enum braid_qp_type {
  BRAID_QPT_RC = 2,
  /* Unreliable datagrams: SEND and SEND_WITH_IMM of at most the path MTU
   * (the port's), to the address handle each work request names; each
   * receive gets a 40-byte GRH before the data (BRAID_WC_GRH). */
  BRAID_QPT_UD = 4,
  /* A UD QP numbered 1 (InfiniBand's QP1, the general services QP), one per
   * device: where connection management messages go (librdmacm). Number 1
   * is never given to any other QP. Queried, it is a BRAID_QPT_UD QP. */
  BRAID_QPT_CM = 0x101,
};

enum braid_qp_state {
  BRAID_QPS_RESET = 0,
  BRAID_QPS_INIT = 1,
  BRAID_QPS_RTR = 2,
  BRAID_QPS_RTS = 3,
  BRAID_QPS_SQD = 4,
  BRAID_QPS_SQE = 5,
  BRAID_QPS_ERR = 6,
};

enum braid_qp_attr_mask {
  BRAID_QP_STATE = 1 << 0,
  BRAID_QP_CUR_STATE = 1 << 1,
  BRAID_QP_EN_SQD_ASYNC_NOTIFY = 1 << 2, /* with the move to SQD: SQ_DRAINED when drained */
  BRAID_QP_ACCESS_FLAGS = 1 << 3,
  BRAID_QP_PKEY_INDEX = 1 << 4,
  BRAID_QP_QKEY = 1 << 6, /* UD */
  BRAID_QP_PORT = 1 << 5,
  BRAID_QP_AV = 1 << 7,
  BRAID_QP_PATH_MTU = 1 << 8,
  BRAID_QP_TIMEOUT = 1 << 9,
  BRAID_QP_RETRY_CNT = 1 << 10,
  BRAID_QP_RNR_RETRY = 1 << 11,
  BRAID_QP_RQ_PSN = 1 << 12,
  BRAID_QP_MAX_QP_RD_ATOMIC = 1 << 13,
  BRAID_QP_MIN_RNR_TIMER = 1 << 15,
  BRAID_QP_SQ_PSN = 1 << 16,
  BRAID_QP_MAX_DEST_RD_ATOMIC = 1 << 17,
  BRAID_QP_CAP = 1 << 19,
  BRAID_QP_DEST_QPN = 1 << 20,
  BRAID_QP_AUTH_NONCE = 1 << 30, /* Braid's: braid_qp_attr.auth_nonce, at RTR */
};

struct braid_qp_cap {
  uint32_t max_send_wr;
  uint32_t max_recv_wr;
  uint32_t max_send_sge;
  uint32_t max_recv_sge;
  uint32_t max_inline_data;
};

struct braid_qp_init_attr {
  void* qp_context;
  struct braid_cq* send_cq;
  struct braid_cq* recv_cq;
  struct braid_qp_cap cap;
  enum braid_qp_type qp_type;
  int sq_sig_all;
  /* Receives come from this shared receive queue (cap.max_recv_wr and
   * max_recv_sge are then ignored, and braid_post_recv refuses). */
  struct braid_srq* srq;
};

struct braid_ah_attr {
  union braid_gid dgid; /* the peer's IPv4-mapped GID (::ffff:a.b.c.d) */
  uint8_t port_num;
};

struct braid_qp_attr {
  enum braid_qp_state qp_state;
  enum braid_qp_state cur_qp_state;
  /* Below the port's active_mtu: payload per packet to the byte. Equal to
   * it: packets fill the link (1416 B at MTU 1500, 8916 B at 9000); both
   * ends then need the same link MTU, as with RoCE. */
  enum braid_mtu path_mtu;
  uint32_t qkey;
  uint32_t rq_psn; /* all 32 bits are used (InfiniBand's PSNs, through the */
  uint32_t sq_psn; /* libibverbs face, are 24): random ones are harder to guess */
  uint32_t dest_qp_num;
  unsigned int qp_access_flags;
  struct braid_qp_cap cap;
  struct braid_ah_attr ah_attr;
  uint16_t pkey_index;
  uint8_t max_rd_atomic;
  uint8_t max_dest_rd_atomic;
  uint8_t min_rnr_timer;
  uint8_t port_num;
  uint8_t timeout;   /* 4.096 us * 2^timeout, as InfiniBand; 0: default */
  uint8_t retry_cnt; /* 0..7 */
  uint8_t rnr_retry; /* 0..7, 7 = infinite */
  /* Authenticated mode: 16 bytes both ends agreed for this connection (e.g.
   * each end's random bytes, exchanged out of band and XORed), mixed into
   * the QP's keys so that they are new for every connection, even one on
   * the same QP numbers and PSNs (old packets then never authenticate).
   * Given at RTR with BRAID_QP_AUTH_NONCE; without it, zeros. */
  uint8_t auth_nonce[16];
  /* Moving an RC QP from RTS to SQD (send queue drain): nonzero, with
   * BRAID_QP_EN_SQD_ASYNC_NOTIFY, raises SQ_DRAINED once drained. */
  uint8_t en_sqd_async_notify;
  /* Queried: 1 while a QP in SQD still has requests it started that have
   * not completed. */
  uint8_t sq_draining;
};

/* Device. */
struct braid_context* braid_open_device(const struct braid_device_config* config);
int braid_close_device(struct braid_context* context);
const char* braid_last_error(void);
int braid_query_device(struct braid_context* context, struct braid_device_attr* attr);
int braid_query_port(struct braid_context* context, uint8_t port_num, struct braid_port_attr* attr);
int braid_query_gid(struct braid_context* context, uint8_t port_num, int index,
                    union braid_gid* gid);
/* The live statistics object's name in /dev/shm ("" when not publishing:
 * braid_device_config.stats). */
const char* braid_stats_name(struct braid_context* context);
/* Drives the engine once (receive, timers, transmit); returns frames moved. */
int braid_progress(struct braid_context* context);
/* From now on every call on the device takes its engines' locks, as with a
 * progress thread or several engines (then it does already): for a device
 * that several threads will call into, e.g. through several contexts.
 * Call before a second thread's first call. */
int braid_lock_calls(struct braid_context* context);

/* Protection domains and memory regions. */
struct braid_pd* braid_alloc_pd(struct braid_context* context);
int braid_dealloc_pd(struct braid_pd* pd);

struct braid_mr {
  struct braid_context* context;
  struct braid_pd* pd;
  void* addr;
  size_t length;
  uint32_t lkey;
  uint32_t rkey;
  int access;
};
struct braid_mr* braid_reg_mr(struct braid_pd* pd, void* addr, size_t length, int access);
int braid_dereg_mr(struct braid_mr* mr);
/* ibv_rereg_mr's: what the flags name changes, the keys stay. Work already
 * posted on the region is checked again when used (a receive's buffers
 * when its message arrives). */
enum braid_rereg_flags {
  BRAID_REREG_MR_CHANGE_TRANSLATION = 1 << 0, /* addr, length */
  BRAID_REREG_MR_CHANGE_PD = 1 << 1,
  BRAID_REREG_MR_CHANGE_ACCESS = 1 << 2,
};
int braid_rereg_mr(struct braid_mr* mr, int flags, struct braid_pd* pd, void* addr, size_t length,
                   int access);

/* Completion queues and channels. */
struct braid_comp_channel* braid_create_comp_channel(struct braid_context* context);
int braid_destroy_comp_channel(struct braid_comp_channel* channel);
/* A file descriptor that becomes readable when an armed CQ gets a completion. */
int braid_comp_channel_fd(struct braid_comp_channel* channel);
struct braid_cq* braid_create_cq(struct braid_context* context, int cqe, void* cq_context,
                                 struct braid_comp_channel* channel, int comp_vector);
int braid_destroy_cq(struct braid_cq* cq);
/* Completions taken (0..num_entries), or a negative errno value. */
int braid_poll_cq(struct braid_cq* cq, int num_entries, struct braid_wc* wc);
int braid_req_notify_cq(struct braid_cq* cq, int solicited_only);
/* After the channel fd is readable: which CQ fired (and its cq_context). */
int braid_get_cq_event(struct braid_comp_channel* channel, struct braid_cq** cq, void** cq_context);
void braid_ack_cq_events(struct braid_cq* cq, unsigned int nevents);

/* Address handles (for UD QPs): the peer's GID names its address, whose
 * MAC comes from ARP (resolved when created, waiting as modify_qp to RTR
 * does, or at the first send to it). */
struct braid_ah* braid_create_ah(struct braid_pd* pd, struct braid_ah_attr* attr);
int braid_destroy_ah(struct braid_ah* ah);

/* Queue pairs (RC and UD). */
struct braid_qp* braid_create_qp(struct braid_pd* pd, struct braid_qp_init_attr* attr);
int braid_destroy_qp(struct braid_qp* qp);
int braid_modify_qp(struct braid_qp* qp, struct braid_qp_attr* attr, int attr_mask);
int braid_query_qp(struct braid_qp* qp, struct braid_qp_attr* attr, int attr_mask,
                   struct braid_qp_init_attr* init_attr);
uint32_t braid_qp_num(const struct braid_qp* qp);
int braid_post_send(struct braid_qp* qp, struct braid_send_wr* wr, struct braid_send_wr** bad_wr);
/* Braid's own: posts every work request of the list or, returning the errno
 * of the first that would be refused (a full queue included), none. */
int braid_post_send_all(struct braid_qp* qp, struct braid_send_wr* wr);
int braid_post_recv(struct braid_qp* qp, struct braid_recv_wr* wr, struct braid_recv_wr** bad_wr);

/* Shared receive queues (InfiniBand's SRQ). A QP takes a receive for each
 * message that consumes one, in the order of its messages; it may take it
 * up to a window of messages before the message arrives (those before it
 * are on their way), and gives back the ones it never used when it goes to
 * the error state (docs/ibverbs.md). */
struct braid_srq_attr {
  uint32_t max_wr;
  uint32_t max_sge;
  uint32_t srq_limit; /* the limit event fires below this many; 0: disarmed */
};
struct braid_srq_init_attr {
  void* srq_context;
  struct braid_srq_attr attr; /* srq_limit is ignored at creation, as libibverbs */
};
enum braid_srq_attr_mask {
  BRAID_SRQ_MAX_WR = 1 << 0, /* grows the queue (never below what waits) */
  BRAID_SRQ_LIMIT = 1 << 1,  /* arms the limit event */
};
struct braid_srq* braid_create_srq(struct braid_pd* pd, struct braid_srq_init_attr* attr);
int braid_modify_srq(struct braid_srq* srq, struct braid_srq_attr* attr, int attr_mask);
int braid_query_srq(struct braid_srq* srq, struct braid_srq_attr* attr);
/* EBUSY while QPs use it. */
int braid_destroy_srq(struct braid_srq* srq);
int braid_post_srq_recv(struct braid_srq* srq, struct braid_recv_wr* wr,
                        struct braid_recv_wr** bad_wr);

/* Asynchronous events, numbered as libibverbs' enum ibv_event_type. A QP that goes to
 * its error state raises, as an InfiniBand channel adapter does:
 * QP_ACCESS_ERR when, as responder, it refused a request for its access (a
 * bad R_Key, a range outside the region, a permission the region lacks);
 * QP_REQ_ERR when it refused a request it could not carry out (unless a
 * receive of its own completes in error for it: a SEND too long); CQ_ERR (on
 * the CQ) then QP_FATAL when a completion found its CQ full; then, on a QP
 * with an SRQ, QP_LAST_WQE_REACHED, for any error (braid_modify_qp to ERR
 * too): no receive of the SRQ is taken by it again. Errors a completion
 * reports (a requester's) raise nothing else.
 * COMM_EST: an RC QP in RTR received its first request packet (raised once,
 * and not once it is in RTS, as InfiniBand raises it).
 * SQ_DRAINED: an RC QP moved to SQD with BRAID_QP_EN_SQD_ASYNC_NOTIFY has
 * completed every request it had started (SQD starts no new one; they may
 * still be posted, and go once it is back in RTS, which modify_qp allows
 * only once drained).
 * PORT_ERR and PORT_ACTIVE (qp, cq, srq and context NULL: the device's one
 * port, number 1): the port went down (its link, or a TX ring that stopped
 * draining: braid_query_port says DOWN) or came back. Each engine looks at
 * its port every 10 ms while it is polled, and braid_query_port looks at
 * once (raising the event then): an event follows the change by up to
 * 10 ms, and a change undone within that raises none. */
enum braid_event_type {
  BRAID_EVENT_CQ_ERR = 0,
  BRAID_EVENT_QP_FATAL = 1,
  BRAID_EVENT_QP_REQ_ERR = 2,
  BRAID_EVENT_QP_ACCESS_ERR = 3,
  BRAID_EVENT_COMM_EST = 4,
  BRAID_EVENT_SQ_DRAINED = 5,
  BRAID_EVENT_PORT_ACTIVE = 9,
  BRAID_EVENT_PORT_ERR = 10,
  BRAID_EVENT_SRQ_LIMIT_REACHED = 15,
  BRAID_EVENT_QP_LAST_WQE_REACHED = 16,
};
struct braid_async_event {
  enum braid_event_type event_type;
  struct braid_srq* srq; /* for SRQ events */
  void* context;         /* the object's srq_context, qp_context or cq_context */
  struct braid_qp* qp;   /* for QP events */
  struct braid_cq* cq;   /* for CQ events */
};
/* Takes the oldest event waiting: 0, or EAGAIN when none waits (it never
 * blocks; wait for braid_async_event_fd to be readable). Destroying a QP,
 * CQ or SRQ drops the events about it still waiting; one already taken
 * names an object that may be gone. */
int braid_get_async_event(struct braid_context* context, struct braid_async_event* event);
/* Readable while events wait. */
int braid_async_event_fd(struct braid_context* context);
/* Events go to fn(arg, event) instead, as they happen, from the thread that
 * raised them (an engine's, holding its lock: fn must not call into the
 * device); NULL restores the queue. */
typedef void (*braid_async_handler)(void* arg, const struct braid_async_event* event);
int braid_set_async_handler(struct braid_context* context, braid_async_handler fn, void* arg);

/* Transport counters (Braid's own; libibverbs has no equivalent). They only
 * grow; a QP's are zero before RTR. Same locking rules as the call that
 * takes the object. */
struct braid_qp_stats {
  uint64_t data_packets_sent;     /* first transmissions */
  uint64_t retransmits;           /* data packets sent again */
  uint64_t data_packets_received; /* new data packets accepted */
  uint64_t duplicates;            /* data packets received twice */
  uint64_t acks_sent, acks_received;
  uint64_t nacks_sent, nacks_received;
  uint64_t lost_inferred; /* declared lost from SACK and per-path gaps */
  uint64_t lost_nacked;   /* declared lost by a NACK of a trimmed packet */
  uint64_t lost_timeout;  /* declared lost when the retransmit timer expired */
  uint64_t timeouts;      /* retransmit timer expirations */
  uint64_t rnr_nacks_sent, rnr_nacks_received;
  uint64_t access_errors; /* remote accesses refused (this QP the target) */
  uint64_t bytes_placed;  /* payload bytes written into local memory */
  /* The sender's state now (not counters): */
  uint64_t srtt_ns, min_rtt_ns;      /* smoothed and smallest RTT, 0 before a sample */
  uint32_t cwnd_bytes;               /* congestion window (payload + 64 B per packet) */
  uint32_t inflight_bytes;           /* counted the same way */
  uint16_t entropies;                /* paths sprayed over */
  uint16_t paths_bad;                /* of them, assumed bad now (REPS) */
  uint32_t rate_mbps;                /* pacing rate (DCQCN), 0: not paced */
  uint64_t ecn_received;             /* data packets that arrived marked ECN-CE */
  uint64_t cnps_sent, cnps_received; /* DCQCN's congestion notifications */
  /* NSCC's scale (0 with another algorithm, or before its first RTT): */
  uint32_t base_rtt_ns;     /* the base RTT it takes the network's to be */
  uint32_t target_delay_ns; /* queueing delay it aims at */
  uint32_t max_cwnd_bytes;  /* its largest window (1.5 x BDP) */
  uint32_t decreases;       /* multiplicative decreases so far */
  /* Receiver-driven credit (braid_device_config.credit): */
  uint64_t credit_requests_sent, credit_requests_received; /* CREDIT_REQs (demand) */
  uint64_t credits_sent, credits_received;                 /* CREDITs (grants) */
  uint64_t credit_bytes_granted;                           /* by this QP, to its peer */
  uint64_t unscheduled_sent; /* data packets sent without credit (from idle) */
  uint64_t credit_stalls;    /* times it asked again after waiting for credit */
  /* Packets refused as foreign (docs/security.md), all dropped: */
  uint64_t wrong_job_id;      /* data whose SES job id is not this QP direction's */
  uint64_t auth_failed;       /* sealed, and did not authenticate (auth on) */
  uint64_t auth_replayed;     /* sealed, authentic, seen before (or too old) */
  uint64_t unsealed;          /* in clear where auth is on, or sealed where it is off */
  uint64_t spurious_timeouts; /* timeouts a later ACK of the first copy showed spurious */
};
int braid_query_qp_stats(struct braid_qp* qp, struct braid_qp_stats* stats);

/* One entropy (path) of a QP: what was sent on it and came back. */
struct braid_path_stats {
  uint16_t udp_src_port; /* the entropy */
  uint8_t state;         /* 0 good, 1 skipped (slow), 2 assumed bad (REPS, bitmap) */
  uint8_t losses_in_row;
  uint32_t sent, acked, ecn_marked, lost;
  uint32_t srtt_ns, min_rtt_ns; /* 0 before a sample */
  /* Smoothed lateness: when a packet sent on it is acknowledged, how much
     later than it the newest packet already acknowledged was sent. About 0
     on a path as fast as the others; a slow path's extra delay. */
  uint32_t late_ns;
};
/* Entropy `index` (0 .. braid_qp_stats.entropies - 1) of an RTR/RTS QP. */
int braid_query_path_stats(struct braid_qp* qp, unsigned int index, struct braid_path_stats* stats);

struct braid_port_stats {
  uint64_t rx_frames, tx_frames;
  uint64_t rx_dropped;    /* frames the stack refused: malformed, foreign, bad CRC... */
  uint64_t rx_missed;     /* frames the NIC dropped (no buffer, ring full) */
  uint64_t tx_dropped;    /* frames the NIC lost after taking them */
  uint64_t tx_ring_full;  /* frames the full TX ring handed back, sent later */
  uint64_t tx_no_buffer;  /* sends deferred for lack of a transmit buffer */
  uint64_t arp_frames;    /* ARP frames sent */
  uint64_t tx_stalled_ms; /* how long the TX ring has taken nothing while frames wait */
  uint64_t rx_bad_crc;    /* frames whose CRC-32C trailer did not match (in rx_dropped) */
  uint64_t tx_in_place;   /* frames sent with their payload read from registered memory */
  /* Polls that came 0.5 ms or more after the previous one (the core was
     taken away, or the application did not call), and the longest such gap.
     Each first takes in what arrived meanwhile, then runs the timers. */
  uint64_t poll_gaps;
  uint64_t longest_poll_gap_us;
  /* With several engines (braid_device_config.engines): frames that
     arrived on one engine's queue for another's QP and were handed over,
     and those dropped because the owner's inbox was full (resent). */
  uint64_t steered;
  uint64_t steer_dropped;
};
int braid_query_port_stats(struct braid_context* context, struct braid_port_stats* stats);

/* GID helpers: the IPv4-mapped IPv6 address ::ffff:a.b.c.d. */
void braid_gid_from_ipv4(uint32_t ipv4_host_order, union braid_gid* gid);
int braid_gid_to_ipv4(const union braid_gid* gid, uint32_t* ipv4_host_order);

#ifdef __cplusplus
}
#endif

#endif /* BRAID_VERBS_H */
