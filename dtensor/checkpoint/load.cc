// load and import_safetensors (one path: an Index, from a checkpoint or from safetensors files), and verify.
#include <optional>
#include <set>
#include <unordered_map>

#include "core/error.h"
#include "core/trace.h"
#include "dtensor/checkpoint/checkpoint.h"
#include "dtensor/checkpoint/file_io.h"
#include "dtensor/checkpoint/reader.h"
#include "placement/layout.h"

namespace dt::checkpoint {
namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "'" : ", '") + x + "'";
  return s;
}

// Fills target's local block from t (host memory read straight into a contiguous host local tensor).
void fill_block(Reader& reader, const StoredTensor& t, const DTensor& target) {
  if (!target.mesh().is_member()) return;
  const Tensor& local = target.to_local();
  const Box box{target.local_offset(), local.shape()};
  if (box.numel() == 0) return;
  if (t.dtype != local.dtype()) {  // LoadOptions::convert_dtype: read as stored, cast once
    Tensor host = Tensor::empty(local.shape(), t.dtype, Device::cpu());
    reader.read_block(t, box, host.data_ptr());
    Tensor(local).copy_(host.to(local.dtype()));
    return;
  }
  if (local.device().is_cpu() && local.is_contiguous()) {
    reader.read_block(t, box, local.data_ptr());
    return;
  }
  Tensor host = Tensor::empty(local.shape(), local.dtype(), Device::cpu());
  reader.read_block(t, box, host.data_ptr());
  Tensor(local).copy_(host);
}

LoadResult load_index(const Index& index, const TensorList& tensors, const LoadOptions& options,
                      const std::string& what) {
  LoadResult result;
  result.metadata = index.metadata;
  // Each given tensor's stored one, looked up once (a checkpoint may hold thousands).
  std::unordered_map<std::string, const StoredTensor*> stored;
  for (const StoredTensor& s : index.tensors) stored.emplace(s.name, &s);
  std::vector<const StoredTensor*> found;
  std::set<std::string> given;
  for (const auto& [name, t] : tensors) {
    DT_CHECK_ARG(t.defined(), what, ": tensor '", name, "' is undefined");
    DT_CHECK_ARG(given.insert(name).second, what, ": tensor '", name, "' is given twice");
    auto it = stored.find(name);
    found.push_back(it == stored.end() ? nullptr : it->second);
    if (found.back() == nullptr) result.missing.push_back(name);
  }
  for (const StoredTensor& s : index.tensors)
    if (!given.count(s.name)) result.unexpected.push_back(s.name);
  if (options.strict && (!result.missing.empty() || !result.unexpected.empty()))
    DT_THROW(InvalidArgument, what, " does not match the tensors given (strict load):",
             result.missing.empty() ? "" : " missing from the checkpoint: " + join(result.missing) + ";",
             result.unexpected.empty() ? "" : " in the checkpoint but not given: " + join(result.unexpected) + ";",
             " load with strict = false to load the common ones");
  // Every dtype and shape is checked before anything is read.
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    const StoredTensor* s = found[i];
    if (s == nullptr) continue;
    const bool convertible = options.convert_dtype && is_floating(s->dtype) && is_floating(t.dtype());
    DT_CHECK_ARG((s->dtype == t.dtype() || convertible) && s->shape == t.shape(), what, ": tensor '", name, "' is ",
                 dtype_name(s->dtype), " ", shape_str(s->shape), " in '", index.path, "' but ", dtype_name(t.dtype()),
                 " ", shape_str(t.shape()), " in the model",
                 s->shape == t.shape() && !options.convert_dtype ? " (LoadOptions::convert_dtype casts on load)" : "");
  }
  Reader reader(index);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const DTensor& t = tensors[i].second;
    const StoredTensor* s = found[i];
    if (s == nullptr) continue;
    if (!t.spec().has_partial()) {
      fill_block(reader, *s, t);
      continue;
    }
    // Partial: load the value as Replicate, then the exact R -> P rule of redistribute (collective over its mesh).
    ShardingSpec rspec = t.spec();
    for (int64_t m = 0; m < rspec.mesh_ndim(); ++m)
      if (is_partial(rspec[m])) rspec = rspec.with_placement(m, Replicate{});
    const Shape local_shape =
        t.mesh().is_member() ? dt::local_shape(t.shape(), t.mesh().shape(), rspec, t.mesh().coordinate()) : Shape{0};
    DTensor r =
        DTensor::from_local_unchecked(Tensor::empty(local_shape, t.dtype(), t.device()), t.mesh(), rspec, t.shape());
    fill_block(reader, *s, r);
    const DTensor p = r.redistribute(t.spec());
    if (t.mesh().is_member()) Tensor(t.to_local()).copy_(p.to_local());
  }
  result.bytes_read = reader.bytes_read();
  return result;
}

}  // namespace

LoadResult load(const std::string& dir, const TensorList& tensors, const LoadOptions& options) {
  std::optional<trace::Span> reading(std::in_place, trace::Category::kCheckpoint, "load.index");
  const Index index = read_index(dir);
  reading.reset();
  trace::Span span(trace::Category::kCheckpoint, "load.read");
  return load_index(index, tensors, options, "checkpoint '" + dir + "'");
}

LoadResult import_safetensors(const std::string& path, const TensorList& tensors, const LoadOptions& options) {
  return load_index(index_of_safetensors(path), tensors, options, "safetensors '" + path + "'");
}

Index read_checkpoint_index(const std::string& dir) { return read_index(dir); }

uint64_t verify(const std::string& dir) {
  const Index index = read_index(dir);
  for (const auto& [name, bytes] : index.file_bytes) {
    File f(join_path(index.dir, name), File::Mode::kRead);
    if (f.size() != bytes)
      DT_THROW(InvalidArgument, "checkpoint: file '", f.path(), "' has ", f.size(), " bytes but the index says ", bytes,
               f.size() < bytes ? " (truncated)" : " (damaged)");
  }
  Reader reader(index);
  std::vector<char> buf;  // one buffer for every chunk: a fresh one per chunk spent most of the time faulting pages in
  for (const StoredTensor& t : index.tensors)
    for (const StoredChunk& c : t.chunks) {
      if (buf.size() < c.bytes) buf.resize(c.bytes);
      reader.read_block(t, c.box, buf.data());
    }
  return reader.bytes_read();
}

bool is_complete(const std::string& dir) {
  try {
    read_index(dir);
    return true;
  } catch (const InvalidArgument&) {
    return false;
  } catch (const SystemError&) {
    return false;
  }
}

}  // namespace dt::checkpoint
