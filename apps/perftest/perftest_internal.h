// What the perftest tools' files share (apps/perftest, internal):
// perftest's constants and small helpers. The files: perftest_common.cc
// (helpers, patterns, the result line), options.cc, session.cc (device,
// resources, connection, barriers, statistics), bw.cc (the bandwidth test),
// lat.cc (latency reports and the latency test's main).
#pragma once

#include <cstddef>
#include <cstdint>

#include "perftest_common.h"

namespace braid::perftest {

inline constexpr uint64_t kMaxSize = uint64_t{1} << 23;  // -a runs 2 .. 2^23, as perftest
inline constexpr uint64_t kCqModSizeLimit = 8192;        // larger messages: CQ moderation off
inline constexpr uint64_t kPeakItersLimit = 20000;       // more iterations: no peak
inline constexpr int kInlineWriteLat = 220;              // perftest's inline defaults (RC)
inline constexpr int kInlineSendLat = 236;
inline constexpr uint8_t kIbPort = 1;
inline constexpr uint8_t kMinRnrTimer = 12;
inline constexpr int kPollBatch = 16;
inline constexpr int kWrIdQpShift = 48;  // wr_id: QP index above, sequence number below
inline constexpr uint64_t kWrIdSeqMask = (uint64_t{1} << kWrIdQpShift) - 1;
inline constexpr size_t kTextSize = 256;  // fixed-size text messages between the tools

// Report headers, as perftest prints them.
inline constexpr char kBwHeaderMiB[] =
    " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]";
inline constexpr char kBwHeaderGb[] =
    " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]";
inline constexpr char kLatHeader[] =
    " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    "
    "t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";
inline constexpr char kLatDurationHeader[] =
    " #bytes        #iterations       t_avg[usec]    tps average";

const char* verb_name(Verb v);
uint64_t mtu_bytes(enum braid_mtu m);
enum braid_mtu mtu_from_bytes(int bytes);
void progress_hook(void* arg);
const char* wc_status_str(enum braid_wc_status s);

}  // namespace braid::perftest
