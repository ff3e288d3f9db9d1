// Protobuf wire encoding of the few Event shapes TensorBoard needs (see tb_event.h).
#include "track/tb_event.h"

#include <cstring>

namespace wmtp {

namespace {

// Wire types: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(char(v));
}
void put_key(std::string& out, int field, int wire_type) {
  put_varint(out, uint64_t(field) << 3 | uint64_t(wire_type));
}
void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}
void put_double(std::string& out, int field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  put_key(out, field, 1);
  for (int i = 0; i < 8; ++i) out.push_back(char((bits >> (8 * i)) & 0xFF));
}
void put_float(std::string& out, int field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  put_key(out, field, 5);
  for (int i = 0; i < 4; ++i) out.push_back(char((bits >> (8 * i)) & 0xFF));
}
void put_int(std::string& out, int field, int64_t v) {
  put_key(out, field, 0);
  put_varint(out, uint64_t(v));  // int64: negative values as 10-byte two's complement, as protobuf does
}

std::string event_header(double wall_time, int64_t step) {
  std::string ev;
  put_double(ev, 1, wall_time);
  put_int(ev, 2, step);
  return ev;
}

}  // namespace

std::string encode_file_version_event(double wall_time) {
  std::string ev = event_header(wall_time, 0);
  put_bytes(ev, 3, "brain.Event:2");
  return ev;
}

std::string encode_scalars_event(double wall_time, int64_t step,
                                 const std::vector<std::pair<std::string, double>>& values) {
  std::string summary;
  for (const auto& [tag, v] : values) {
    std::string value;
    put_bytes(value, 1, tag);
    put_float(value, 2, float(v));
    put_bytes(summary, 1, value);
  }
  std::string ev = event_header(wall_time, step);
  put_bytes(ev, 5, summary);
  return ev;
}

std::string encode_text_event(double wall_time, int64_t step, const std::string& tag, const std::string& text) {
  std::string plugin_data, metadata, tensor, value, summary;
  put_bytes(plugin_data, 1, "text");
  put_bytes(metadata, 1, plugin_data);
  put_int(tensor, 1, 7);     // DT_STRING
  put_bytes(tensor, 2, "");  // TensorShapeProto{}: a scalar
  put_bytes(tensor, 8, text);
  put_bytes(value, 1, tag);
  put_bytes(value, 8, tensor);
  put_bytes(value, 9, metadata);
  put_bytes(summary, 1, value);
  std::string ev = event_header(wall_time, step);
  put_bytes(ev, 5, summary);
  return ev;
}

}  // namespace wmtp
