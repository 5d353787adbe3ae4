// Checkpoints through the C API (dtensor/checkpoint/checkpoint.h); metadata travels as a JSON object of scalars.
#include <boost/json.hpp>

#include "bindings/c_api/funnel.h"
#include "core/error.h"

using namespace dt;        // NOLINT: entry points are thin
using namespace dt::capi;  // NOLINT

namespace {

namespace json = boost::json;

checkpoint::Metadata parse_metadata(const char* text) {
  checkpoint::Metadata out;
  if (text == nullptr) return out;
  boost::system::error_code ec;
  json::parse_options opts;
  opts.max_depth = 4;
  const json::value v = json::parse(text, ec, {}, opts);
  DT_CHECK_ARG(!ec && v.is_object(), "metadata_json is not a JSON object: ", ec ? ec.message() : "another value");
  for (const auto& kv : v.get_object()) {
    const std::string k(kv.key());
    const json::value& x = kv.value();
    if (x.is_bool()) {
      out[k] = x.get_bool();
    } else if (x.is_int64()) {
      out[k] = x.get_int64();
    } else if (x.is_uint64()) {
      out[k] = int64_t(x.get_uint64());
    } else if (x.is_double()) {
      out[k] = x.get_double();
    } else if (x.is_string()) {
      out[k] = std::string(x.get_string());
    } else {
      DT_THROW(InvalidArgument, "metadata_json: '", k, "' is not a bool, number or string");
    }
  }
  return out;
}

std::string metadata_json(const checkpoint::Metadata& m) {
  json::object o;
  for (const auto& [k, v] : m) o[k] = json::parse(checkpoint::meta_to_string(v));
  return json::serialize(o);
}

// The named tensors, checked; the first one's object (for the owner check and the work's mesh).
checkpoint::TensorList tensor_list(const char* const* names, const dt_tensor_t* tensors, int32_t n,
                                   std::shared_ptr<TensorObject>* first, const char* fn) {
  require_array(names, n, int64_t(1) << 24, "names");
  require_array(tensors, n, int64_t(1) << 24, "tensors");
  checkpoint::TensorList list;
  for (int32_t i = 0; i < n; ++i) {
    DT_CHECK_ARG(names[i] != nullptr, "names[", i, "] is NULL");
    auto o = get<TensorObject>(tensors[i], "tensors[i]");
    require_owner(*o, fn);
    if (!*first) *first = o;
    list.push_back({names[i], o->tensor});
  }
  return list;
}

}  // namespace

extern "C" {

dt_status_t dt_checkpoint_save(const char* dir, const char* const* names, const dt_tensor_t* tensors, int32_t n,
                               const char* metadata, dt_work_t* out_work) {
  return call("dt_checkpoint_save", [&] {
    require(dir, "dir");
    std::shared_ptr<TensorObject> first;
    const checkpoint::TensorList list = tensor_list(names, tensors, n, &first, "dt_checkpoint_save");
    const checkpoint::Metadata meta = parse_metadata(metadata);
    if (out_work == nullptr) {
      checkpoint::save(dir, list, meta);
      return;
    }
    auto w = std::make_shared<WorkObject>();
    w->owner = first->owner;
    w->mesh = first->mesh;
    w->work = checkpoint::save_async(dir, list, meta);
    *out_work = make_handle<dt_work_t>(std::move(w));
  });
}

dt_status_t dt_checkpoint_load(const char* dir, const char* const* names, const dt_tensor_t* tensors, int32_t n,
                               int32_t strict, char* metadata, size_t cap, size_t* needed) {
  return call("dt_checkpoint_load", [&] {
    require(dir, "dir");
    std::shared_ptr<TensorObject> first;
    const checkpoint::TensorList list = tensor_list(names, tensors, n, &first, "dt_checkpoint_load");
    const checkpoint::LoadResult r = checkpoint::load(dir, list, {.strict = strict != 0});
    copy_out(metadata_json(r.metadata), metadata, cap, needed);
  });
}

}  // extern "C"
