// libFuzzer target: the parsers of files a checkpoint load trusts nothing in: the safetensors header
// (parse_safetensors_header) and the checkpoint index (parse_index, with and without a valid trailing checksum, so
// that the JSON validation behind the checksum is reached too). Each must accept or refuse with
// dt::InvalidArgument, never crash, hang or allocate without bound; what it accepts must be consistent.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/crc32c.h"
#include "core/error.h"
#include "dtensor/checkpoint/index.h"
#include "dtensor/checkpoint/safetensors.h"

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant failed: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  using namespace dt::checkpoint;  // NOLINT
  if (data[0] & 1) {
    try {
      const SafetensorsHeader h = parse_safetensors_header(text, uint64_t(data[0]) * 64, "fuzz.safetensors");
      for (const SafetensorsEntry& e : h.tensors) check(e.begin <= e.end && e.end <= uint64_t(data[0]) * 64, "in data");
    } catch (const dt::InvalidArgument&) {
    }
    return 0;
  }
  // The index: as given, and with a correct checksum appended (the body's own validation).
  std::string body = text;
  if (!body.empty() && body.back() == '}') body.pop_back();
  char crc[9];
  std::snprintf(crc, sizeof crc, "%08x", dt::crc32c((body + "}").data(), body.size() + 1));
  for (const std::string& candidate : {text, body + ",\"index_crc32c\":\"" + crc + "\"}"}) {
    try {
      const Index index = parse_index(candidate, "fuzz/dtensor.index.json");
      for (const StoredTensor& t : index.tensors) {
        uint64_t covered = 0;
        for (const StoredChunk& c : t.chunks) {
          check(c.bytes == uint64_t(c.box.numel()) * dt::dtype_size(t.dtype), "chunk bytes match its box");
          covered += uint64_t(c.box.numel());
        }
        check(covered == uint64_t(dt::shape_numel(t.shape)), "chunks cover the tensor");
      }
    } catch (const dt::InvalidArgument&) {
    }
  }
  return 0;
}
