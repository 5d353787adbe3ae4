// The safetensors format (https://github.com/huggingface/safetensors): an 8-byte little-endian header length, a JSON
// header {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {str: str}}, then
// the tensors' bytes, row-major, offsets relative to the end of the header. dtensor writes every checkpoint file and
// every export in it, so the Python package and PyTorch read them as they are.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"

namespace dt::checkpoint {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte range relative to the data start
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;  // in the order of their offsets
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // file offset of the data (8 + header length)
};

// The format's dtype names ("F32", "BF16", "BOOL", ...), and back (nullopt for a name dtensor has no dtype for).
const char* safetensors_dtype_name(DType dtype);
std::optional<DType> dtype_from_safetensors(std::string_view name);

// Lays the entries out back to back in the given order (their begin/end are set) and returns the header bytes: the
// length field and the JSON, padded with spaces to a multiple of 8 bytes so the data is 8-byte aligned.
std::string encode_safetensors_header(std::vector<SafetensorsEntry>& entries,
                                      const std::map<std::string, std::string>& metadata);

// Parses and validates a header. `json` is the header text, `data_bytes` how many bytes follow it in the file
// (nullopt: unknown, not checked). Throws InvalidArgument naming `file` and the entry for anything malformed: bad
// JSON, an unknown dtype, a negative or overflowing shape, offsets that do not match the shape or run past the data,
// overlapping entries, a duplicate name.
SafetensorsHeader parse_safetensors_header(std::string_view json, std::optional<uint64_t> data_bytes,
                                           const std::string& file);
// Reads the length field and header of a file (a length above 100 MB or past the end of the file is refused
// before anything is allocated).
SafetensorsHeader read_safetensors_header(const std::string& path);

}  // namespace dt::checkpoint
