#include "bindings/c_api/handles.h"

#include <mutex>
#include <random>
#include <unordered_map>

#include "collectives/process_group.h"
#include "core/error.h"

namespace dt::capi {
namespace {

struct Entry {
  Kind kind;
  std::shared_ptr<void> object;
};

struct Registry {
  std::mutex mu;
  std::unordered_map<uint64_t, Entry> objects;
  uint64_t next = 0;
  Registry() {
    // A random base (multiple of 16, high bits set) so that small integers and stale ids of another run are never
    // live handles.
    std::random_device rd;
    next = ((uint64_t(rd()) << 32 | rd()) | (uint64_t(1) << 62)) & ~uint64_t(15);
  }
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: handles may be released during static destruction
  return *r;
}

std::string describe_id(uint64_t id) { return str_cat("0x", std::hex, id); }

}  // namespace

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kComm:
      return "communicator";
    case Kind::kMesh:
      return "mesh";
    case Kind::kTensor:
      return "tensor";
    case Kind::kWork:
      return "work";
    case Kind::kFsdpGroup:
      return "FSDP group";
    case Kind::kCommDebug:
      return "CommDebugMode";
  }
  return "handle";
}

CommObject::~CommObject() {
  if (!process_group) return;
  comm.reset();
  try {
    destroy_process_group();
  } catch (...) {
  }
}

uint64_t register_object(Kind kind, std::shared_ptr<void> object) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.next += 16;
  r.objects.emplace(r.next, Entry{kind, std::move(object)});
  return r.next;
}

std::shared_ptr<void> lookup_object(uint64_t id, Kind kind, const char* what) {
  if (id == 0) throw HandleError(str_cat(what, " is a NULL ", kind_name(kind), " handle"));
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.objects.find(id);
  if (it == r.objects.end())
    throw HandleError(str_cat(what, " (", describe_id(id), ") is not a live handle: destroyed, or never made"));
  if (it->second.kind != kind)
    throw HandleError(str_cat(what, " (", describe_id(id), ") is a ", kind_name(it->second.kind), " handle, not a ",
                              kind_name(kind), " handle"));
  return it->second.object;
}

std::shared_ptr<void> remove_object(uint64_t id, Kind kind, const char* what) {
  std::shared_ptr<void> object = lookup_object(id, kind, what);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.objects.erase(id) == 0)  // destroyed by another thread in between
    throw HandleError(str_cat(what, " (", describe_id(id), ") is not a live handle: destroyed twice"));
  return object;
}

size_t live_objects() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.objects.size();
}

}  // namespace dt::capi
