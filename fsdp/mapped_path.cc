// The mapped data path (fsdp/mapped_path.h).
#include "fsdp/mapped_path.h"

#include "collectives/host_window.h"
#include "core/config.h"
#include "core/error.h"

namespace dt::fsdp {

// Note [Gathering by mapping]
// On one host a gathered parameter need not be a copy: every rank keeps its shard of the parameter in a HostWindow
// (collectives/host_window.h), and the parameter's unsharded storage is an address range that maps rank r's shard
// at rank r's rows, for every r, this rank's own included. An unshard then moves none of its bytes, and a reshard
// frees nothing: the range is the shards' own memory. The range stays mapped for the group's lifetime, so the storage
// keeps its address and no page is faulted in after the first step. The all-gather still carries:
//   - the parameters that cannot be mapped: a shard that is not a whole number of pages on every rank but the last
//     (biases, norms). A group that casts to a param_dtype, offloads, or keeps a post-forward share
//     (reshard_after_forward = k) keeps the copying path whole, as does any group on a GPU;
//   - a token per rank, the count of this group's unshards. The all-gather completes only once every rank has
//     started it, that is, has finished what it wrote to its shards before (the optimizer step, a checkpoint load),
//     so the ranges read every shard as of this unshard. A rank whose count differs fails the wait, named.
// The peers' pages are live, not a snapshot: a rank that writes its shards between a peer's unshard and that peer's
// reshard changes what the peer computes with. The engine's order keeps clear of it: a rank steps its optimizer
// only after the reduce-scatter of every group, which needs every peer's gradients, which a peer sends only once its
// backward through the group (its last read) is done. After reshard a mapped parameter stays readable (it shows the
// shards' current values) where a copied one fails as a released storage. The window is made with the group, a
// collective over the shard dim that decides the same on every rank; DT_FSDP_MAP_SHARDS=0 turns it off.
bool MappedPath::admits(const GroupData& g, Direction d) {
  if (d != Direction::kGather || g.device.is_cuda() || g.layout.shard_size < 2 || g.post_forward_comm ||
      g.cpu_offload || !g.shard_comm->supports_segments(g.device))
    return false;
  for (const ParamLayout& p : g.layout.params)
    if (p.orig_dtype != p.param_dtype) return false;
  return true;
}

std::unique_ptr<DataPath> MappedPath::make(GroupData& g) {
  const GroupLayout& L = g.layout;
  const int64_t page = HostWindow::page_bytes();
  std::vector<HostWindow::RangeSpec> ranges;
  std::vector<size_t> which;
  std::vector<int64_t> offsets;
  int64_t window_bytes = 0;
  for (size_t i = 0; i < g.params.size(); ++i) {
    const Param& p = g.params[i];
    const ParamLayout& pl = p.layout();
    const int64_t row_bytes = p.row_bytes(pl.param_dtype);
    if (pl.unsharded_numel() == 0 || (pl.chunk * row_bytes) % page != 0) continue;
    HostWindow::RangeSpec range{pl.unsharded_numel() * int64_t(dtype_size(pl.param_dtype)), {}};
    for (int64_t r = 0; r < L.shard_size; ++r) {
      const IndexRange rows = p.rows(r);
      if (rows.size() > 0)
        range.pieces.push_back({int(r), window_bytes, rows.size() * row_bytes, rows.begin * row_bytes});
    }
    ranges.push_back(std::move(range));
    which.push_back(i);
    offsets.push_back(window_bytes);
    window_bytes += pl.chunk * row_bytes;
  }
  if (which.empty()) return nullptr;
  std::shared_ptr<HostWindow> window =
      HostWindow::create(*g.shard_comm, window_bytes, ranges, config::get_bool(config::Var::kFsdpMapShards));
  if (!window) return nullptr;
  for (size_t k = 0; k < which.size(); ++k) g.params[which[k]].map_into(window, k, offsets[k]);
  return std::make_unique<MappedPath>(g, std::move(window));
}

MappedPath::MappedPath(GroupData& g, std::shared_ptr<HostWindow> window)
    : SegmentedPath(g), window_(std::move(window)) {
  // The all-gather's block packs the parameters not mapped, then the token.
  block_bytes_ = 0;
  for (size_t i = 0; i < g.params.size(); ++i) {
    block_offset_[i] = block_bytes_;
    const ParamLayout& p = g.params[i].layout();
    if (!g.params[i].mapped()) block_bytes_ += p.padded_numel * int64_t(dtype_size(p.param_dtype));
  }
  block_bytes_ += int64_t(sizeof(int64_t));
}

Issued MappedPath::start_gather() {
  GatherSegments s = gather_segments();
  // The token, at the block's end.
  const int64_t S = g_.layout.shard_size;
  const int64_t at = block_bytes_ - int64_t(sizeof(int64_t));
  ++unshards_;
  tokens_.assign(size_t(S), -1);
  s.send.push_back(Segment{at, int64_t(sizeof(int64_t)), &unshards_});
  for (int64_t r = 0; r < S; ++r)
    s.recv[size_t(r)].push_back(Segment{at, int64_t(sizeof(int64_t)), &tokens_[size_t(r)]});
  return issue_gather(std::move(s));
}

void MappedPath::finish_gather() {
  SegmentedPath::finish_gather();
  for (size_t r = 0; r < tokens_.size(); ++r)
    DT_CHECK_ARG(tokens_[r] == unshards_, "fsdp: group ", g_.name, " was unsharded ", unshards_,
                 " times on this rank but ", tokens_[r], " times on rank ", g_.shard_comm->global_ranks()[r],
                 " (every rank must unshard its groups in the same order)");
}

}  // namespace dt::fsdp
