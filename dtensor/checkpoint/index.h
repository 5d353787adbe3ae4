// What a checkpoint holds, in the form the loader reads: tensors by name, each made of chunks (boxes of the global
// tensor) stored at byte ranges of files, with a CRC-32C per page of each chunk. A checkpoint folder's index
// (kIndexName, JSON, written last) is parsed into it, and so is a plain safetensors file or a Hugging Face
// `*.safetensors.index.json` (one chunk per tensor, no checksums), so that one reader serves both.
//
// Note [Checkpoint index]
// The index is one JSON object: format and version, the save id, the world size that wrote it, the checksum page
// size, the user's metadata (scalars), every file with its size, and the tensors in the order they were given, each
// with dtype, global shape, the spec it was saved from (for people; loading ignores it) and its chunks (global
// offset and shape, file, first byte, byte count, page CRCs as 8 hex digits per page). The chunks of a tensor are
// disjoint and cover it exactly (a replicated block is stored once). The last member, "index_crc32c", is the CRC of
// the text before it (with the object closed): an index that parses but was damaged is still refused. The file
// names are plain names inside the folder (no '/' and no "..").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/dtype.h"
#include "dtensor/checkpoint/box.h"

namespace dt::checkpoint {

inline constexpr const char* kIndexName = "dtensor.index.json";
inline constexpr const char* kIndexTmpName = "dtensor.index.json.tmp";
inline constexpr const char* kFormatName = "dtensor-checkpoint";
inline constexpr int64_t kFormatVersion = 1;

// Scalar metadata saved with the tensors (the step, the learning rate, a data loader position, ...).
using MetaValue = std::variant<bool, int64_t, double, std::string>;
using Metadata = std::map<std::string, MetaValue>;
std::string meta_to_string(const MetaValue& v);

struct StoredChunk {
  Box box;
  std::string file;  // plain name inside the index's folder
  uint64_t begin = 0;
  uint64_t bytes = 0;
  std::vector<uint32_t> page_crcs;  // empty when the source has no checksums (a plain safetensors file)
};

struct StoredTensor {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  std::string spec;  // the placements it was saved from, e.g. "S(0)[1],S(0)[0]" ("" for an import)
  std::vector<StoredChunk> chunks;
  uint64_t nbytes() const { return uint64_t(shape_numel(shape)) * dtype_size(dtype); }
};

struct Index {
  std::string dir;   // the folder the files are in
  std::string path;  // the file the index came from (for messages)
  std::string save_id;
  int64_t world_size = 1;
  uint64_t page_bytes = 0;  // 0: no checksums
  Metadata metadata;
  std::map<std::string, uint64_t> file_bytes;  // each file's size
  std::vector<StoredTensor> tensors;           // in the order they were saved
};

// Page checksums as text (8 lowercase hex digits each, concatenated), and back (nullopt for anything else).
std::string encode_crcs(const std::vector<uint32_t>& crcs);
std::optional<std::vector<uint32_t>> decode_crcs(std::string_view hex);

// The JSON text of an index (Note [Checkpoint index]), ending in its own checksum and a newline.
std::string encode_index(const Index& index);
// Parses and validates an index's text: its checksum, every field, file names, chunk boxes inside their tensor,
// disjoint and covering it, byte counts matching the boxes and page counts matching the bytes. Throws
// InvalidArgument naming `path` and the tensor for anything wrong.
Index parse_index(std::string_view text, const std::string& path);
// dir/kIndexName, parsed (InvalidArgument when it is missing: the folder holds no complete checkpoint).
Index read_index(const std::string& dir);

// A plain safetensors file, or a Hugging Face index (`*.json` with a "weight_map" from names to files in its folder),
// as an Index of whole-tensor chunks without checksums.
Index index_of_safetensors(const std::string& path);

}  // namespace dt::checkpoint
