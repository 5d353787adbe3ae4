#include "dtensor/checkpoint/plan.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "core/error.h"

namespace dt::checkpoint {

std::vector<std::vector<PlannedBlock>> plan_writers(const std::vector<SavedTensor>& tensors,
                                                    const std::vector<std::vector<Box>>& boxes) {
  const size_t world = boxes.size();
  std::vector<uint64_t> load(world, 0);
  std::vector<std::vector<PlannedBlock>> plan(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    // Replicas of a block: the ranks holding the same box, blocks in order of their lowest rank.
    std::vector<Box> order;
    std::map<std::pair<Shape, Shape>, std::vector<int64_t>> replicas;
    for (size_t r = 0; r < world; ++r) {
      const Box& b = boxes[r][i];
      if (b.numel() == 0) continue;
      auto& list = replicas[{b.offset, b.shape}];
      if (list.empty()) order.push_back(b);
      list.push_back(int64_t(r));
    }
    for (const Box& b : order) {
      int64_t best = -1;
      for (int64_t x : replicas[{b.offset, b.shape}])
        if (best < 0 || load[size_t(x)] < load[size_t(best)]) best = x;  // ranks ascend: ties keep the lowest
      load[size_t(best)] += uint64_t(b.numel()) * dtype_size(tensors[i].dtype);
      plan[i].push_back({b, best});
    }
  }
  return plan;
}

std::string rank_file_name(const std::string& save_id, int64_t rank) {
  return str_cat(save_id, "-r", rank, ".safetensors");
}
std::string rank_meta_name(const std::string& save_id, int64_t rank) { return str_cat(save_id, "-r", rank, ".json"); }
std::string rank_error_name(const std::string& save_id, int64_t rank) { return str_cat(save_id, "-r", rank, ".error"); }

bool is_checkpoint_file(const std::string& name) {
  // <16 hex>-r<digits>.(safetensors|json|error)[.tmp], or the index's temporary.
  if (name == std::string(kIndexTmpName)) return true;
  if (name.size() < 20 || name[16] != '-' || name[17] != 'r') return false;
  for (size_t i = 0; i < 16; ++i)
    if (!std::isxdigit(static_cast<unsigned char>(name[i]))) return false;
  size_t i = 18;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) ++i;
  if (i == 18) return false;
  std::string rest = name.substr(i);
  if (rest.size() > 4 && rest.substr(rest.size() - 4) == ".tmp") rest.resize(rest.size() - 4);
  return rest == ".safetensors" || rest == ".json" || rest == ".error";
}

RankFile rank_file(const std::string& save_id, int64_t rank, const std::vector<SavedTensor>& tensors,
                   const std::vector<std::vector<PlannedBlock>>& plan) {
  RankFile f;
  f.name = rank_file_name(save_id, rank);
  std::vector<SafetensorsEntry> entries;
  std::map<std::string, std::string> meta{
      {"format", "pt"}, {"dtensor.save_id", save_id}, {"dtensor.rank", std::to_string(rank)}};
  for (size_t i = 0; i < tensors.size(); ++i)
    for (const PlannedBlock& b : plan[i]) {
      if (b.writer != rank) continue;
      entries.push_back({tensors[i].name, tensors[i].dtype, b.box.shape, 0, 0});
      f.entries.push_back({i, b.box, 0, 0});
      std::string off;
      for (int64_t o : b.box.offset) off += (off.empty() ? "" : ",") + std::to_string(o);
      meta["dtensor.offset." + tensors[i].name] = off;
    }
  f.header = encode_safetensors_header(entries, meta);
  for (size_t k = 0; k < entries.size(); ++k) {
    f.entries[k].begin = f.header.size() + entries[k].begin;
    f.entries[k].bytes = entries[k].end - entries[k].begin;
  }
  f.bytes = f.header.size() + (entries.empty() ? 0 : entries.back().end);
  return f;
}

}  // namespace dt::checkpoint
