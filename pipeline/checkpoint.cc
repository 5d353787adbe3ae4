// Checkpoints of a pipeline-parallel model (pipeline/checkpoint.h, Note [Pipeline checkpoints]).
#include "pipeline/checkpoint.h"

#include <cstdio>
#include <cstring>
#include <map>
#include <string_view>
#include <utility>

#include "collectives/exchange.h"
#include "core/error.h"
#include "dtensor/device_mesh.h"

namespace dt::pipeline {
namespace {

// Length-prefixed fields ("5:hello"), so that names and values may hold any byte.
void put(std::string& out, std::string_view s) {
  out += std::to_string(s.size());
  out += ':';
  out += s;
}

std::string take(std::string_view& in) {
  const size_t colon = in.find(':');
  DT_ASSERT(colon != std::string_view::npos, "pipeline checkpoint: a malformed exchange");
  const size_t n = std::stoull(std::string(in.substr(0, colon)));
  std::string s(in.substr(colon + 1, n));
  in.remove_prefix(colon + 1 + n);
  return s;
}

// A metadata value as text and its type's letter (b, i, d, s); doubles to 17 digits, which round-trip.
std::pair<char, std::string> meta_value(const checkpoint::MetaValue& v) {
  if (const bool* b = std::get_if<bool>(&v)) return {'b', *b ? "1" : "0"};
  if (const int64_t* i = std::get_if<int64_t>(&v)) return {'i', std::to_string(*i)};
  if (const double* d = std::get_if<double>(&v)) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", *d);
    return {'d', buf};
  }
  return {'s', std::get<std::string>(v)};
}

checkpoint::MetaValue parse_meta(char type, const std::string& s) {
  switch (type) {
    case 'b':
      return s == "1";
    case 'i':
      return int64_t(std::stoll(s));
    case 'd':
      return std::stod(s);
    default:
      return s;
  }
}

struct Entry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
};

// Every rank's blob, gathered over `world` (all_gather_ints of 8-byte words, padded to the longest).
std::vector<std::string> all_gather_blobs(Communicator& world, const std::string& mine) {
  const std::vector<int64_t> sizes = all_gather_ints(world, {int64_t(mine.size())});
  int64_t longest = 0;
  for (int64_t n : sizes) longest = std::max(longest, n);
  std::vector<int64_t> words(size_t((longest + 7) / 8), 0);
  std::memcpy(words.data(), mine.data(), mine.size());
  const std::vector<int64_t> all = all_gather_ints(world, words);
  std::vector<std::string> out;
  for (size_t r = 0; r < sizes.size(); ++r)
    out.emplace_back(reinterpret_cast<const char*>(all.data() + r * words.size()), size_t(sizes[r]));
  return out;
}

struct Completed {
  checkpoint::TensorList tensors;
  checkpoint::Metadata metadata;
};

Completed complete(const checkpoint::TensorList& local, const checkpoint::Metadata& metadata,
                   const CommunicatorPtr& world) {
  DT_CHECK_ARG(world != nullptr, "pipeline checkpoint: the world communicator is null");
  std::string blob;
  for (const auto& [name, t] : local) {
    put(blob, "T");
    put(blob, name);
    put(blob, dtype_name(t.dtype()));
    std::string dims;
    for (int64_t d : t.shape()) dims += std::to_string(d) + ",";
    put(blob, dims);
  }
  for (const auto& [key, value] : metadata) {
    const auto [type, text] = meta_value(value);
    put(blob, "M");
    put(blob, key);
    put(blob, std::string(1, type));
    put(blob, text);
  }
  const std::vector<std::string> blobs = all_gather_blobs(*world, blob);
  // Every rank's names, and the union in one order: rank 0's, then each later rank's new ones.
  std::vector<std::vector<Entry>> lists(blobs.size());
  Completed out;
  std::vector<Entry> order;
  std::map<std::string, size_t> first;  // name -> index in order
  for (size_t r = 0; r < blobs.size(); ++r) {
    std::string_view in = blobs[r];
    while (!in.empty()) {
      const std::string kind = take(in);
      if (kind == "M") {
        const std::string key = take(in), type = take(in), value = take(in);
        out.metadata.emplace(key, parse_meta(type.at(0), value));  // the first rank's value wins (all agree)
        continue;
      }
      Entry e;
      e.name = take(in);
      e.dtype = dtype_from_name(take(in));
      const std::string dims = take(in);
      for (size_t at = 0; at < dims.size();) {
        const size_t comma = dims.find(',', at);
        e.shape.push_back(std::stoll(std::string(dims.substr(at, comma - at))));
        at = comma + 1;
      }
      lists[r].push_back(e);
      if (first.emplace(e.name, order.size()).second) order.push_back(e);
    }
  }
  // The groups of ranks that hold the same names (a pipeline coordinate each), in order of their first rank; a mesh
  // over each (collective: every rank makes every group's, in that order) carries the placeholders of its names.
  std::map<std::string, int> holder_group;  // name -> group
  std::vector<std::vector<int64_t>> groups;
  std::vector<std::string> group_key;
  for (size_t r = 0; r < lists.size(); ++r) {
    std::string key;
    for (const Entry& e : lists[r]) put(key, e.name);
    size_t g = 0;
    while (g < groups.size() && group_key[g] != key) ++g;
    if (g == groups.size()) {
      groups.emplace_back();
      group_key.push_back(key);
    }
    groups[g].push_back(int64_t(r));
    for (const Entry& e : lists[r]) holder_group.emplace(e.name, int(g));
  }
  std::vector<DeviceMesh> meshes;
  const Device device = local.empty() ? Device::cpu() : local.front().second.mesh().device();
  for (const auto& ranks : groups)
    meshes.push_back(DeviceMesh::create(world, device, {int64_t(ranks.size())}, {"holders"}, ranks));
  std::map<std::string, DTensor> mine(local.begin(), local.end());
  for (const Entry& e : order) {
    auto it = mine.find(e.name);
    if (it != mine.end()) {
      out.tensors.push_back(*it);
      continue;
    }
    const DeviceMesh& m = meshes[size_t(holder_group.at(e.name))];
    DT_ASSERT(!m.is_member(), "pipeline checkpoint: ", e.name, " is held by this rank's group but not given");
    out.tensors.push_back(
        {e.name, DTensor::from_local_unchecked(Tensor::empty({0}, e.dtype, device), m,
                                               ShardingSpec(std::vector<Placement>{Replicate{}}), e.shape)});
  }
  return out;
}

}  // namespace

checkpoint::TensorList complete_tensor_list(const checkpoint::TensorList& local, const CommunicatorPtr& world) {
  return complete(local, {}, world).tensors;
}

checkpoint::SaveHandle save_checkpoint_async(const std::string& dir, const nn::Module& mine, nn::Optimizer* optimizer,
                                             const checkpoint::Metadata& metadata, const CommunicatorPtr& world) {
  nn::TrainingState s = nn::training_state(mine, optimizer);
  for (const auto& [k, v] : metadata) {
    DT_CHECK_ARG(k.rfind("optim.", 0) != 0, "checkpoint: metadata key '", k, "' is reserved (optim.*)");
    s.metadata[k] = v;
  }
  Completed c = complete(s.tensors, s.metadata, world);
  return checkpoint::save_async(dir, c.tensors, c.metadata);
}

checkpoint::LoadResult load_checkpoint(const std::string& dir, nn::Module& mine, nn::Optimizer* optimizer) {
  checkpoint::LoadResult r = nn::load_checkpoint(dir, mine, optimizer, {.strict = false});
  std::string missing;
  for (const std::string& n : r.missing) missing += (missing.empty() ? "" : ", ") + n;
  DT_CHECK_ARG(missing.empty(), "checkpoint '", dir, "' lacks what this pipeline rank holds: ", missing);
  return r;
}

}  // namespace dt::pipeline
