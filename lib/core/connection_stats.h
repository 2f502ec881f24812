// What a connection (and each queue pair it carries) counts.
#pragma once

#include <cstdint>

namespace braid {

// What a connection has seen; all plain counters.
struct ConnectionStats {
  uint64_t data_sent = 0;      // data packets, first transmissions
  uint64_t retransmits = 0;    // data packets sent again
  uint64_t data_received = 0;  // new data packets accepted
  uint64_t duplicates = 0;     // data packets already received
  uint64_t out_of_window = 0;
  uint64_t acks_sent = 0;
  uint64_t acks_received = 0;
  uint64_t nacks_sent = 0;
  uint64_t nacks_received = 0;
  uint64_t trimmed_received = 0;
  uint64_t lost_inferred = 0;       // declared lost from SACK / per-entropy gaps
  uint64_t lost_nacked = 0;         // declared lost by a TRIMMED NACK
  uint64_t lost_timeout = 0;        // declared lost by the RTO
  uint64_t timeouts = 0;            // RTO expirations
  uint64_t spurious_timeouts = 0;   // ... shown spurious: the first copy was ACKed later
  uint64_t rnr_nacks = 0;           // receiver-not-ready NACKs sent (we had no receive)
  uint64_t rnr_nacks_received = 0;  // ... received (the peer had none)
  uint64_t access_errors = 0;       // remote accesses refused (we were the target)
  uint64_t invalid_requests = 0;
  uint64_t bad_acks = 0;         // ACKs for PSNs never sent, etc.
  uint64_t stale_responses = 0;  // read responses for no outstanding READ
  uint64_t stale_closes = 0;     // CLOSEs naming PSNs this connection never sent: ignored
  uint64_t stale_ctrl = 0;       // CNPs, CREDITs, CREDIT_REQs naming PSNs out of reach: ignored
  uint64_t wrong_job_id = 0;     // data whose SES job id (or none) is not this direction's: dropped
  // Authenticated mode.
  uint64_t auth_failed = 0;    // sealed packets that did not authenticate: dropped
  uint64_t auth_replayed = 0;  // sealed packets whose counter was seen (or too old): dropped
  uint64_t unsealed = 0;       // packets not sealed (auth on) or sealed (auth off): dropped
  uint64_t read_timeouts = 0;  // RTOs spent waiting for READ response data
  uint64_t tail_probes = 0;    // packets resent by a tail-loss probe
  uint64_t cnps_sent = 0;      // DCQCN: congestion notifications we sent
  uint64_t cnps_received = 0;
  uint64_t ecn_received = 0;  // data packets that arrived marked ECN-CE
  // Receiver-driven credit (credit.h).
  uint64_t credit_requests_sent = 0;      // CREDIT_REQs we sent (our demand)
  uint64_t credit_requests_received = 0;  // ... the peer's
  uint64_t credits_sent = 0;              // CREDITs we sent (grants, or repeats)
  uint64_t credits_received = 0;          // ... that granted something new
  uint64_t credit_bytes_granted = 0;      // by us, to the peer
  uint64_t unscheduled_sent = 0;          // data packets sent without credit (speculative)
  uint64_t credit_stalls = 0;             // times we asked again after waiting for credit
  uint64_t credit_capped = 0;             // our grants to the peer stopped: too much unused
  uint64_t credit_forgiven = 0;           // ... and resumed when it asked again
  uint64_t tails_deferred = 0;            // last bytes of a WRITE held until the rest was placed
  uint64_t malformed_ctrl = 0;            // CTRL packets too short for their type: dropped
  uint64_t after_refusal = 0;             // packets at or after a refused one, not placed
  uint64_t missing_crc = 0;               // no trailer from a peer that sends them: dropped
  uint64_t atomics_received = 0;          // atomic requests accepted (this end the target)
  uint64_t atomics_executed = 0;          // ... and run (once each)
  uint64_t nops_received = 0;             // NOPs filling the PSN of a request we refused (RNR)
  uint64_t duplicate_messages = 0;  // parts of messages whose receive had completed: not placed
  uint64_t wrong_qp = 0;  // requests naming a QP not on this connection, responses a slot: dropped
  uint64_t bytes_placed = 0;
};

}  // namespace braid
