#include "dtensor/comm_counter.h"

#include <map>
#include <sstream>

namespace dt {

CommCounter::CommCounter(std::optional<DeviceMesh> mesh) : mesh_(std::move(mesh)), thread_(std::this_thread::get_id()) {
  observer_id_ = add_collective_observer([this](const CollectiveEvent& ev) {
    if (std::this_thread::get_id() != thread_) return;
    const CollectiveArgs& a = *ev.args;
    int64_t dim = -1;
    if (mesh_ && mesh_->is_member())
      for (int64_t m = 0; m < mesh_->ndim(); ++m)
        if (mesh_->comm(m).get() == ev.comm) dim = m;
    const int n = ev.comm->size();
    std::lock_guard<std::mutex> lock(mu_);
    records_.push_back({a.kind, dim, a.input_bytes(n), n});
  });
}

CommCounter::~CommCounter() { remove_collective_observer(observer_id_); }

int64_t CommCounter::count(CollectiveKind kind) const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t c = 0;
  for (const Record& r : records_) c += r.kind == kind;
  return c;
}

int64_t CommCounter::count(CollectiveKind kind, int64_t mesh_dim) const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t c = 0;
  for (const Record& r : records_) c += r.kind == kind && r.mesh_dim == mesh_dim;
  return c;
}

int64_t CommCounter::total() const {
  std::lock_guard<std::mutex> lock(mu_);
  return int64_t(records_.size());
}

int64_t CommCounter::bytes(CollectiveKind kind) const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t b = 0;
  for (const Record& r : records_)
    if (r.kind == kind) b += r.bytes;
  return b;
}

std::vector<CommCounter::Record> CommCounter::records() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_;
}

void CommCounter::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  records_.clear();
}

std::string CommCounter::summary() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (records_.empty()) return "no collectives";
  std::map<int, std::map<int64_t, std::pair<int64_t, int64_t>>> by;  // kind -> dim -> (count, bytes)
  for (const Record& r : records_) {
    auto& e = by[int(r.kind)][r.mesh_dim];
    e.first++;
    e.second += r.bytes;
  }
  std::ostringstream os;
  bool first = true;
  for (auto& [kind, dims] : by) {
    int64_t c = 0, b = 0;
    for (auto& [d, e] : dims) {
      c += e.first;
      b += e.second;
    }
    os << (first ? "" : "; ") << collective_kind_name(CollectiveKind(kind)) << ": " << c << " (";
    bool f2 = true;
    for (auto& [d, e] : dims) {
      os << (f2 ? "" : ", ");
      if (d < 0)
        os << "other";
      else if (mesh_ && mesh_->shape().has_names())
        os << mesh_->shape().dim_label(d);
      else
        os << "mesh dim " << d;
      os << ": " << e.first;
      f2 = false;
    }
    os << "), " << b << " B";
    first = false;
  }
  return os.str();
}

}  // namespace dt
