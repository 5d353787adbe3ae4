// Plain safetensors files for the Python ecosystem: export from live DTensors (every rank writes its own blocks in
// place) and from a checkpoint folder (one process, one tensor in memory at a time).
#include <boost/json.hpp>
#include <cstdio>

#include "collectives/exchange.h"
#include "core/error.h"
#include "dtensor/checkpoint/checkpoint.h"
#include "dtensor/checkpoint/file_io.h"
#include "dtensor/checkpoint/prepare.h"
#include "dtensor/checkpoint/reader.h"

namespace dt::checkpoint {
namespace {

namespace json = boost::json;

struct OutFile {
  std::string name;  // plain name beside the output path
  std::string header;
  uint64_t bytes = 0;
  std::vector<std::pair<size_t, uint64_t>> tensors;  // (tensor index, file offset of its data)
};

struct OutLayout {
  std::string dir;
  std::vector<OutFile> files;
  std::string hf_index;                          // the index JSON when sharded, else empty
  std::vector<std::pair<size_t, size_t>> where;  // tensor -> (file, position in that file's list)
};

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Tensors in order (anything with name, dtype and shape: SavedTensor, StoredTensor), a new file whenever the next
// tensor would push the current one past max_shard_bytes.
template <typename T>
OutLayout plan_output(const std::string& path, const std::vector<T>& tensors, const ExportOptions& options) {
  std::vector<std::string> names;
  std::vector<DType> dtypes;
  std::vector<Shape> shapes;
  for (const T& t : tensors) {
    names.push_back(t.name);
    dtypes.push_back(t.dtype);
    shapes.push_back(t.shape);
  }
  OutLayout out;
  const size_t slash = path.find_last_of('/');
  out.dir = slash == std::string::npos ? "." : path.substr(0, slash);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  std::vector<std::vector<size_t>> groups;
  if (options.max_shard_bytes == 0) {
    groups.emplace_back();
    for (size_t i = 0; i < names.size(); ++i) groups.back().push_back(i);
  } else {
    DT_CHECK_ARG(ends_with(base, ".json"),
                 "safetensors export: with max_shard_bytes the path names the index and must "
                 "end in .json (e.g. model.safetensors.index.json), got '",
                 path, "'");
    uint64_t in_current = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      const uint64_t b = uint64_t(shape_numel(shapes[i])) * dtype_size(dtypes[i]);
      if (groups.empty() || (in_current > 0 && in_current + b > options.max_shard_bytes)) {
        groups.emplace_back();
        in_current = 0;
      }
      groups.back().push_back(i);
      in_current += b;
    }
  }
  std::string stem = base;
  for (const char* tail : {".json", ".index", ".safetensors"})
    if (ends_with(stem, tail)) stem.resize(stem.size() - std::string(tail).size());
  out.where.resize(names.size());
  json::object weight_map;
  uint64_t total = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    OutFile f;
    if (options.max_shard_bytes == 0) {
      f.name = base;
    } else {
      char buf[64];
      std::snprintf(buf, sizeof buf, "-%05zu-of-%05zu.safetensors", g + 1, groups.size());
      f.name = stem + buf;
    }
    std::vector<SafetensorsEntry> entries;
    for (size_t i : groups[g]) entries.push_back({names[i], dtypes[i], shapes[i], 0, 0});
    f.header = encode_safetensors_header(entries, options.metadata);
    for (size_t k = 0; k < groups[g].size(); ++k) {
      out.where[groups[g][k]] = {g, k};
      f.tensors.push_back({groups[g][k], f.header.size() + entries[k].begin});
      weight_map[names[groups[g][k]]] = f.name;
      total += entries[k].end - entries[k].begin;
    }
    f.bytes = f.header.size() + (entries.empty() ? 0 : entries.back().end);
    out.files.push_back(std::move(f));
  }
  if (options.max_shard_bytes != 0) {
    json::object root;
    root["metadata"] = json::object{{"total_size", total}};
    root["weight_map"] = std::move(weight_map);
    out.hf_index = json::serialize(root);
  }
  return out;
}

// Writes a row-major block (box) of a tensor of `shape` into its place in the file.
void write_block(File& f, uint64_t data_begin, const Shape& shape, const Box& box, const void* data, size_t es) {
  const Box whole{Shape(shape.size(), 0), shape};
  for_each_run(box, box, whole, [&](int64_t s, int64_t d, int64_t len) {
    f.write_at(static_cast<const char*>(data) + uint64_t(s) * es, uint64_t(len) * es, data_begin + uint64_t(d) * es);
  });
}

// Fails every rank when any failed (this rank's own error first), like SaveHandle::wait.
void agree(Communicator& world, std::exception_ptr error, const std::string& what) {
  const std::vector<int64_t> all = all_gather_ints(world, {error ? 1 : 0});
  if (error) std::rethrow_exception(error);
  std::string failed;
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r] != 0) failed += (failed.empty() ? "" : ", ") + std::to_string(r);
  if (!failed.empty()) DT_THROW(RemoteError, what, " failed on rank ", failed, " (see its error)");
}

template <typename F>
std::exception_ptr capture(F&& f) {
  try {
    f();
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

// A file of the export at its full size, with its header, under its temporary name.
File create_out_file(const OutLayout& out, const OutFile& f, const std::string& tmp_suffix) {
  File file(join_path(out.dir, f.name) + tmp_suffix, File::Mode::kCreate);
  file.truncate(f.bytes);
  file.write_at(f.header.data(), f.header.size(), 0);
  return file;
}

void publish(const OutLayout& out, const std::string& path, const std::string& tmp_suffix) {
  for (const OutFile& f : out.files)
    durable_rename(join_path(out.dir, f.name) + tmp_suffix, join_path(out.dir, f.name));
  if (!out.hf_index.empty()) write_file_atomically(path, out.hf_index);
}

}  // namespace

void export_safetensors(const std::string& path, const TensorList& tensors, const ExportOptions& options) {
  const std::string what = "safetensors export to '" + path + "'";
  DT_CHECK_ARG(!path.empty(), "safetensors export: the path is empty");
  Prepared p = prepare(what, tensors, int64_t(options.max_shard_bytes));
  const OutLayout out = plan_output(path, p.tensors, options);
  const std::string tmp = ".tmp-" + p.save_id;
  const int64_t rank = p.world->rank();
  // Rank 0 makes the files at their full size with their headers; then every rank writes its blocks in place.
  agree(*p.world, rank != 0 ? nullptr : capture([&] {
    make_dirs(out.dir);
    for (const OutFile& f : out.files) create_out_file(out, f, tmp);
  }),
        what);
  agree(*p.world, capture([&] {
    std::vector<std::optional<File>> open(out.files.size());
    uint64_t total = 0, done = 0;
    for (size_t i = 0; i < p.tensors.size(); ++i)
      for (const PlannedBlock& b : p.plan[i])
        if (b.writer == rank) total += uint64_t(b.box.numel()) * dtype_size(p.tensors[i].dtype);
    if (options.progress) options.progress(0, total);
    for (size_t i = 0; i < p.tensors.size(); ++i)
      for (const PlannedBlock& b : p.plan[i]) {
        if (b.writer != rank) continue;
        const auto [fi, k] = out.where[i];
        if (!open[fi]) open[fi].emplace(join_path(out.dir, out.files[fi].name) + tmp, File::Mode::kWrite);
        const Tensor host = host_block(p.values[i], false);
        write_block(*open[fi], out.files[fi].tensors[k].second, p.tensors[i].shape, b.box, host.data_ptr(),
                    dtype_size(p.tensors[i].dtype));
        done += uint64_t(b.box.numel()) * dtype_size(p.tensors[i].dtype);
        if (options.progress) options.progress(done, total);
      }
    for (auto& f : open)
      if (f) f->sync();
  }),
        what);
  agree(*p.world, rank != 0 ? nullptr : capture([&] { publish(out, path, tmp); }), what);
}

void export_checkpoint(const std::string& dir, const std::string& path, const ExportOptions& options) {
  const Index index = read_index(dir);
  const OutLayout out = plan_output(path, index.tensors, options);
  const std::string tmp = ".tmp-" + index.save_id;
  make_dirs(out.dir);
  Reader reader(index);
  uint64_t total = 0, done = 0;
  for (const StoredTensor& t : index.tensors) total += t.nbytes();
  if (options.progress) options.progress(0, total);
  for (const OutFile& f : out.files) {
    File file = create_out_file(out, f, tmp);
    for (const auto& [i, begin] : f.tensors) {
      const StoredTensor& t = index.tensors[i];
      std::vector<char> buf(t.nbytes());
      reader.read_block(t, Box{Shape(t.shape.size(), 0), t.shape}, buf.data());
      file.write_at(buf.data(), buf.size(), begin);
      done += t.nbytes();
      if (options.progress) options.progress(done, total);
    }
    file.sync();
  }
  publish(out, path, tmp);
}

}  // namespace dt::checkpoint
