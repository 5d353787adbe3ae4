// Sharded checkpoints: a map from names to DTensors (plus scalar metadata) saved by every rank in parallel and loaded
// into any mesh, placements, world size and shard order. PyTorch's torch.distributed.checkpoint is the model.
//
//   dt::checkpoint::save("ckpt/step-100", {{"w", w}, {"b", b}}, {{"step", int64_t(100)}});
//   ...  // later, maybe at another world size, with other placements:
//   auto r = dt::checkpoint::load("ckpt/step-100", {{"w", w2}, {"b", b2}});   // fills w2, b2 in place
//   int64_t step = std::get<int64_t>(r.metadata.at("step"));
//
// Note [Checkpoint layout]
// A checkpoint is a folder. Each rank writes the blocks it owns into one safetensors file `<id>-r<rank>.safetensors`
// (a valid safetensors file on its own, tensors named as given). A block held by several ranks (Replicate dims) is
// written once, by the replica chosen by the layout: tensors in order, each block to the replica with the fewest bytes
// so far (ties: the lowest rank), so that replicated state spreads over the ranks; no bytes are compared. Partial
// tensors are reduced (redistributed to Replicate) first. Each block's bytes are checksummed per page (CRC-32C, 64
// KiB by default). When a rank's file is complete and fsynced it writes `<id>-r<rank>.json` (its checksums) under a
// temporary name and renames it (not fsynced: the index carries its contents), and rank 0, once every rank's has
// appeared, writes the index (Note [Checkpoint index]) as dtensor.index.json: to a temporary name, fsync, rename,
// fsync of the folder. The index is the commit point: a folder without it is not a checkpoint, and a folder whose new
// save was interrupted still holds its previous index and the files that index names (file names carry the save id,
// so a new save never overwrites them). After the rename rank 0 removes the files of this format that the index does
// not name (older saves, interrupted ones).
//
// Loading reads the index on every rank and, for each tensor, only the byte ranges of the chunks that overlap this
// rank's block, widened to whole checksum pages, which it verifies before use. It needs no communication (except
// for Partial targets, which are loaded as Replicate and then redistributed).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtensor/checkpoint/index.h"
#include "dtensor/dtensor.h"

namespace dt::checkpoint {

using TensorList = std::vector<std::pair<std::string, DTensor>>;

struct SaveOptions {
  uint64_t page_bytes = 64 * 1024;  // checksum page size (a multiple of 8 bytes)
};

// A save in flight (save_async). wait() is collective over the world, like redistribute_async's: every rank calls
// it, in the same order as its other collectives; it returns once this rank's files are durable and rank 0 wrote
// the index, and throws on every rank when any rank failed (naming it). Destroying a handle without wait() blocks
// until this rank's part is written (errors are logged), with no communication.
class SaveHandle {
 public:
  SaveHandle() = default;
  ~SaveHandle();
  SaveHandle(SaveHandle&&) noexcept;
  SaveHandle& operator=(SaveHandle&&) noexcept;
  void wait();
  bool is_completed() const;  // this rank's part is done (no communication)
  bool valid() const { return state_ != nullptr; }

  struct State;  // opaque (save.cc)
  explicit SaveHandle(std::shared_ptr<State> s) : state_(std::move(s)) {}

 private:
  std::shared_ptr<State> state_;
};

// Saves into `dir` (created when missing). Collective over the world of the tensors' meshes: every rank passes the
// same names, global shapes, dtypes and specs in the same order (checked; an InvalidArgument names the ranks that
// differ). Returns when the checkpoint is complete on disk.
void save(const std::string& dir, const TensorList& tensors, const Metadata& metadata = {},
          const SaveOptions& options = {});
// The same, returning once this rank's blocks are copied aside (device blocks to host memory): the writes, the
// checksums and the index run on a thread while training goes on. Call wait() before the next collective that
// depends on the checkpoint; a later save_async waits for this one first.
SaveHandle save_async(const std::string& dir, const TensorList& tensors, const Metadata& metadata = {},
                      const SaveOptions& options = {});

struct LoadOptions {
  // Every tensor given must be in the checkpoint and every tensor of the checkpoint must be given (InvalidArgument
  // listing both otherwise, before anything is read). Non-strict: only the tensors present on both sides are loaded
  // and the others are reported.
  bool strict = true;
  // A floating tensor stored in another floating dtype (bf16 on disk, f32 in the model) is cast on load, once per
  // block; otherwise a dtype that differs is an InvalidArgument.
  bool convert_dtype = false;
};

struct LoadResult {
  Metadata metadata;
  std::vector<std::string> missing;     // given, not in the checkpoint (not loaded)
  std::vector<std::string> unexpected;  // in the checkpoint, not given
  uint64_t bytes_read = 0;              // by this rank
};

// Fills each tensor's local block in place (the storage is kept) from the checkpoint in `dir`, whatever layout and
// world size saved it. A dtype or global shape that differs from the checkpoint's is an InvalidArgument naming the
// tensor; a damaged, truncated or missing file one naming the tensor and the file.
LoadResult load(const std::string& dir, const TensorList& tensors, const LoadOptions& options = {});

// The index of the checkpoint in `dir`, validated (for inspection).
Index read_checkpoint_index(const std::string& dir);
// Reads every chunk of every tensor and checks every page checksum and file size; returns the number of bytes
// checked, or throws at the first problem (naming the tensor and the file). Not collective.
uint64_t verify(const std::string& dir);
// Whether `dir` holds a complete checkpoint (an index that parses and validates).
bool is_complete(const std::string& dir);
// The complete checkpoint under `root` (a folder of checkpoint folders) with the greatest "step" metadata (folders
// without one come first, by name); nullopt when there is none.
std::optional<std::string> latest(const std::string& root);
// Removes the complete checkpoints under `root` but the `keep` newest (by step, then name), and the folders of
// interrupted saves that sort before the oldest one kept. Returns the folders removed. Not collective: one rank
// calls it, after the save it follows has completed (SaveHandle::wait, or save).
std::vector<std::string> prune(const std::string& root, int64_t keep);
// Removes the folders of interrupted saves under `root` (every sub-folder without a complete checkpoint), newer
// ones included: what a job restarted after a failure calls (one rank, before it saves anything), so that a save
// the failure cut short is neither loaded (latest() skips it anyway) nor left behind. Returns the folders removed.
std::vector<std::string> remove_interrupted(const std::string& root);

// ---- The ecosystem: plain safetensors files ----

struct ExportOptions {
  // 0: one file. Otherwise Hugging Face style shards of at most this many bytes (a larger tensor gets a file of its
  // own): `<stem>-00001-of-0000N.safetensors` beside `path` and the index at `path` (which must end in .json).
  uint64_t max_shard_bytes = 0;
  std::map<std::string, std::string> metadata = {{"format", "pt"}};
  // Called as this rank's blocks are written: (bytes written so far, this rank's total), first with (0, total),
  // last with (total, total). A progress bar for people; empty: none.
  std::function<void(uint64_t done, uint64_t total)> progress = {};
};

// Writes the tensors, whole, into one safetensors file (or shards) that the safetensors package and PyTorch load as
// ordinary tensors. Collective like save: every rank writes the blocks it owns at their places in the file (no rank
// gathers the model); the file appears complete or not at all (temporary name, fsync, rename).
void export_safetensors(const std::string& path, const TensorList& tensors, const ExportOptions& options = {});
// Loads from a safetensors file, or a Hugging Face index (.json), into any layout, like load (no checksums there).
LoadResult import_safetensors(const std::string& path, const TensorList& tensors, const LoadOptions& options = {});

// Single process: a checkpoint folder rewritten as safetensors (one file or shards), one tensor in memory at a time
// (for tools: `dtckpt export`).
void export_checkpoint(const std::string& dir, const std::string& path, const ExportOptions& options = {});

}  // namespace dt::checkpoint
