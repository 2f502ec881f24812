#include "wire/tss.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstring>

#include "wire/byte_order.h"
#include "wire/pds.h"

namespace braid::wire {

namespace {

constexpr uint32_t kSpBit = 1u << 26;

EVP_CIPHER_CTX* ctx_of(void* p) {
  return static_cast<EVP_CIPHER_CTX*>(p);
}

// Additional authenticated data: both addresses, the security header and
// the clear PDS header (in that order, as they are hashed).
bool add_aad(EVP_CIPHER_CTX* c, bool enc, uint32_t src_ip, uint32_t dst_ip, const uint8_t* hdr,
             size_t hdr_len) {
  uint8_t ips[8];
  store_be32(ips, src_ip);
  store_be32(ips + 4, dst_ip);
  int n = 0;
  if (enc) {
    return EVP_EncryptUpdate(c, nullptr, &n, ips, 8) == 1 &&
           EVP_EncryptUpdate(c, nullptr, &n, hdr, static_cast<int>(hdr_len)) == 1;
  }
  return EVP_DecryptUpdate(c, nullptr, &n, ips, 8) == 1 &&
         EVP_DecryptUpdate(c, nullptr, &n, hdr, static_cast<int>(hdr_len)) == 1;
}

}  // namespace

size_t decode_tss_header(const uint8_t* p, size_t len, TssHeader* h) {
  if (len < kTssHeaderSize || (p[0] >> 3) != kPdsTypeSecurity) return 0;
  const uint32_t w = load_be32(p);
  h->ssi_present = (w & kSpBit) != 0;
  h->an = static_cast<uint8_t>((w >> 24) & 1);
  h->sdi = w & 0xffffff;
  size_t at = 4;
  if (h->ssi_present) {
    if (len < kTssSsiHeaderSize) return 0;
    h->ssi = load_be32(p + 4);
    at = 8;
  }
  h->counter = load_be64(p + at);
  h->size = at + 8;
  return h->size;
}

size_t pds_header_size(const uint8_t* p, size_t len) {
  if (len < kPrologueSize) return 0;
  size_t n = 0;
  switch (static_cast<PdsType>(p[0] >> 3)) {
    case PdsType::kRudReq:
    case PdsType::kRodReq:
      n = kRequestSize;
      break;
    case PdsType::kRudCcReq:
    case PdsType::kRodCcReq:
      n = kRequestCcSize;
      break;
    case PdsType::kAck:
      n = kAckSize;
      break;
    case PdsType::kAckCc:
      n = kAckCcSize;
      break;
    case PdsType::kAckCcx:
      n = kAckCcSize + 8;
      break;
    case PdsType::kNack:
      n = kNackSize;
      break;
    case PdsType::kNackCcx:
      n = kNackCcxSize;
      break;
    case PdsType::kCtrl:
      n = kCtrlSize;
      break;
    default:
      return 0;
  }
  return n <= len ? n : 0;
}

std::unique_ptr<TssKey> TssKey::derive(const TssSecret& secret, const TssDirection& d,
                                       uint32_t sdi) {
  uint8_t info[64];
  size_t n = 0;
  std::memcpy(info, "braid-tss1", 10);
  n = 10;
  store_be32(info + n, d.src_ip);
  store_be32(info + n + 4, d.dst_ip);
  store_be16(info + n + 8, d.src_id);
  store_be16(info + n + 10, d.dst_id);
  store_be32(info + n + 12, d.start_psn);
  n += 16;
  std::memcpy(info + n, d.nonce.data(), d.nonce.size());
  n += d.nonce.size();
  uint8_t key[32], salt[32];
  unsigned int len = 0;
  info[n] = 'k';
  if (HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), info, n + 1, key, &len) ==
      nullptr) {
    return nullptr;
  }
  info[n] = 's';
  if (HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), info, n + 1, salt, &len) ==
      nullptr) {
    return nullptr;
  }
  std::unique_ptr<TssKey> k(new TssKey());
  EVP_CIPHER_CTX* c = EVP_CIPHER_CTX_new();
  if (c == nullptr) return nullptr;
  k->ctx_ = c;
  // One context serves both ways: each packet re-initialises it with its
  // nonce (EVP keeps the expanded key).
  if (EVP_CipherInit_ex(c, EVP_aes_256_gcm(), nullptr, key, nullptr, 1) != 1) return nullptr;
  std::memcpy(k->salt_.data(), salt, 4);
  k->sdi_ = sdi & 0xffffff;
  // Random start: a key derived again for the same names (a QP made again
  // with the same ids and PSNs) never repeats a nonce.
  if (RAND_bytes(reinterpret_cast<uint8_t*>(&k->counter_), sizeof k->counter_) != 1) {
    return nullptr;
  }
  k->counter_ >>= 1;  // 2^63 packets before a wrap, which would look like replays
  k->start_ = k->counter_;
  OPENSSL_cleanse(key, sizeof key);
  return k;
}

TssKey::~TssKey() {
  EVP_CIPHER_CTX_free(ctx_of(ctx_));
}

size_t TssKey::seal(uint8_t* p, size_t body, uint32_t src_ip, uint32_t dst_ip) {
  const size_t pds = pds_header_size(p, body);
  if (pds == 0) return 0;
  std::memmove(p + kTssHeaderSize, p, body);
  store_be32(p, (uint32_t{kPdsTypeSecurity} << 27) | sdi_);
  const uint64_t counter = counter_++;
  store_be64(p + 4, counter);
  uint8_t iv[12];
  std::memcpy(iv, salt_.data(), 4);
  store_be64(iv + 4, counter);
  EVP_CIPHER_CTX* c = ctx_of(ctx_);
  uint8_t* text = p + kTssHeaderSize + pds;
  const size_t text_len = body - pds;
  int n = 0, m = 0;
  if (EVP_CipherInit_ex(c, nullptr, nullptr, nullptr, iv, 1) != 1 ||
      !add_aad(c, true, src_ip, dst_ip, p, kTssHeaderSize + pds) ||
      (text_len > 0 && EVP_EncryptUpdate(c, text, &n, text, static_cast<int>(text_len)) != 1) ||
      EVP_EncryptFinal_ex(c, text + n, &m) != 1 ||
      EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, kTssIcvSize, text + text_len) != 1) {
    return 0;
  }
  return kTssHeaderSize + body + kTssIcvSize;
}

size_t TssKey::open(const uint8_t* p, size_t len, const TssHeader& h, uint32_t src_ip,
                    uint32_t dst_ip, uint8_t* out) {
  if (len < h.size + kTssIcvSize) return 0;
  const uint8_t* pdsp = p + h.size;
  const size_t pds = pds_header_size(pdsp, len - h.size - kTssIcvSize);
  if (pds == 0) return 0;
  const size_t text_len = len - h.size - pds - kTssIcvSize;
  const uint8_t* text = pdsp + pds;
  uint8_t iv[12];
  std::memcpy(iv, salt_.data(), 4);
  store_be64(iv + 4, h.counter);
  EVP_CIPHER_CTX* c = ctx_of(ctx_);
  std::memcpy(out, pdsp, pds);
  uint8_t tag[kTssIcvSize];
  std::memcpy(tag, text + text_len, kTssIcvSize);
  int n = 0, m = 0;
  if (EVP_CipherInit_ex(c, nullptr, nullptr, nullptr, iv, 0) != 1 ||
      !add_aad(c, false, src_ip, dst_ip, p, h.size + pds) ||
      (text_len > 0 &&
       EVP_DecryptUpdate(c, out + pds, &n, text, static_cast<int>(text_len)) != 1) ||
      EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, kTssIcvSize, tag) != 1 ||
      EVP_DecryptFinal_ex(c, out + pds + n, &m) != 1) {
    return 0;
  }
  return pds + text_len;
}

bool TssReplayWindow::fresh(uint64_t counter) const {
  if (!started_ || counter > top_) return true;
  if (top_ - counter >= kSize) return false;
  const uint64_t i = counter % kSize;
  return !(seen_[i / 64] & (uint64_t{1} << (i % 64)));
}

void TssReplayWindow::take(uint64_t counter) {
  if (!started_ || (counter > top_ && counter - top_ >= kSize)) {
    seen_.fill(0);
    started_ = true;
    top_ = counter;
  } else if (counter > top_) {
    for (uint64_t c = top_ + 1; c <= counter; ++c) {
      const uint64_t i = c % kSize;
      seen_[i / 64] &= ~(uint64_t{1} << (i % 64));
    }
    top_ = counter;
  }
  const uint64_t i = counter % kSize;
  seen_[i / 64] |= uint64_t{1} << (i % 64);
}

}  // namespace braid::wire
