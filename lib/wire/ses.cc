#include "wire/ses.h"

#include "wire/byte_order.h"

namespace braid::wire {

size_t decode_ses_response(const uint8_t* p, size_t len, SesResponse* h) {
  if (len < kSesResponseSize) return 0;
  h->list = p[0] >> 6;
  h->opcode = p[0] & 0x3f;
  h->version = p[1] >> 6;
  h->return_code = p[1] & 0x3f;
  h->message_id = load_be16(p + 2);
  h->ri_generation = p[4];
  h->job_id = load_be24(p + 5);
  h->modified_length = load_be32(p + 8);
  h->read_request_message_id = 0;
  h->payload_length = 0;
  h->message_offset = 0;
  return kSesResponseSize;
}

size_t encode_ses_response(uint8_t* p, const SesResponse& h) {
  p[0] = static_cast<uint8_t>((h.list << 6) | (h.opcode & 0x3f));
  p[1] = static_cast<uint8_t>((h.version << 6) | (h.return_code & 0x3f));
  store_be16(p + 2, h.message_id);
  p[4] = h.ri_generation;
  store_be24(p + 5, h.job_id);
  store_be32(p + 8, h.modified_length);
  return kSesResponseSize;
}

size_t decode_ses_response_data(const uint8_t* p, size_t len, SesResponse* h) {
  if (len < kSesResponseDataSize) return 0;
  h->list = p[0] >> 6;
  h->opcode = p[0] & 0x3f;
  h->version = p[1] >> 6;
  h->return_code = p[1] & 0x3f;
  h->message_id = load_be16(p + 2);
  h->ri_generation = 0;
  h->job_id = load_be24(p + 5);
  h->read_request_message_id = load_be16(p + 8);
  h->payload_length = load_be16(p + 10) & 0x3fff;
  h->modified_length = load_be32(p + 12);
  h->message_offset = load_be32(p + 16);
  return kSesResponseDataSize;
}

size_t encode_ses_response_data(uint8_t* p, const SesResponse& h) {
  p[0] = static_cast<uint8_t>((h.list << 6) | (h.opcode & 0x3f));
  p[1] = static_cast<uint8_t>((h.version << 6) | (h.return_code & 0x3f));
  store_be16(p + 2, h.message_id);
  p[4] = 0;
  store_be24(p + 5, h.job_id);
  store_be16(p + 8, h.read_request_message_id);
  store_be16(p + 10, h.payload_length & 0x3fff);
  store_be32(p + 12, h.modified_length);
  store_be32(p + 16, h.message_offset);
  return kSesResponseDataSize;
}

}  // namespace braid::wire
