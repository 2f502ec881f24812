#include "loopback/pipe_io.h"

namespace braid {

std::pair<std::unique_ptr<PipeIo>, std::unique_ptr<PipeIo>> PipeIo::make_pair(
    const wire::MacAddr& a, const wire::MacAddr& b, uint32_t max_frame) {
  auto ab = std::make_shared<Wire>();
  auto ba = std::make_shared<Wire>();
  return {std::unique_ptr<PipeIo>(new PipeIo(a, max_frame, ba, ab)),
          std::unique_ptr<PipeIo>(new PipeIo(b, max_frame, ab, ba))};
}

uint16_t PipeIo::rx_burst(RxFrame* frames, uint16_t n) {
  std::lock_guard<std::mutex> g(in_->lock);
  uint16_t k = 0;
  while (k < n && !in_->frames.empty()) {
    // Each frame owns its buffer until released, by whichever end (an
    // engine of a group hands frames to another before they are released).
    auto* buf = new std::vector<uint8_t>(std::move(in_->frames.front()));
    in_->frames.pop_front();
    frames[k++] = RxFrame{buf->data(), static_cast<uint32_t>(buf->size()), buf};
  }
  stats_.rx_frames += k;
  return k;
}

void PipeIo::rx_release(RxFrame* frames, uint16_t n) {
  for (uint16_t i = 0; i < n; ++i) delete static_cast<std::vector<uint8_t>*>(frames[i].handle);
}

uint16_t PipeIo::tx_alloc(TxFrame* frames, uint16_t n) {
  for (uint16_t i = 0; i < n; ++i) {
    auto* buf = new std::vector<uint8_t>(max_frame_);
    frames[i] = TxFrame{buf->data(), max_frame_, 0, buf};
  }
  return n;
}

uint16_t PipeIo::tx_burst(TxFrame* frames, uint16_t n) {
  if (tx_stuck_) {
    stats_.tx_ring_full += n;
    return 0;
  }
  std::lock_guard<std::mutex> g(out_->lock);
  for (uint16_t i = 0; i < n; ++i) {
    std::unique_ptr<std::vector<uint8_t>> buf(static_cast<std::vector<uint8_t>*>(frames[i].handle));
    if (cut_) {
      ++stats_.tx_dropped;
      continue;
    }
    buf->resize(frames[i].len);
    // A bit flipped near the frame's end (inside any UDP payload), as a
    // faulty link or switch memory would.
    if (corrupt_every_ != 0 && ++sent_ % corrupt_every_ == 0 && buf->size() > 6) {
      (*buf)[buf->size() - 6] ^= 0x10;
    }
    out_->frames.push_back(std::move(*buf));
    ++stats_.tx_frames;
  }
  return n;
}

void PipeIo::tx_free(TxFrame* frames, uint16_t n) {
  for (uint16_t i = 0; i < n; ++i) delete static_cast<std::vector<uint8_t>*>(frames[i].handle);
}

}  // namespace braid
