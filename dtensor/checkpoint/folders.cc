// Folders of checkpoints: the newest complete one, pruning the older ones, removing interrupted saves.
#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "dtensor/checkpoint/checkpoint.h"
#include "dtensor/checkpoint/file_io.h"

namespace dt::checkpoint {
namespace {

struct Entry {
  std::string dir;
  bool complete = false;
  int64_t step = -1;  // -1 without a "step" metadata (or incomplete)
};

// The sub-folders of root in name order, each with whether it is complete and its step.
std::vector<Entry> entries(const std::string& root) {
  std::vector<std::string> names = list_dir(root);
  std::sort(names.begin(), names.end());
  std::vector<Entry> out;
  for (const std::string& name : names) {
    const std::string dir = join_path(root, name);
    if (!std::filesystem::is_directory(dir)) continue;
    Entry e{dir};
    if (file_exists(join_path(dir, kIndexName))) {
      try {
        const Index index = read_index(dir);
        e.complete = true;
        if (auto it = index.metadata.find("step"); it != index.metadata.end())
          if (const int64_t* s = std::get_if<int64_t>(&it->second)) e.step = *s;
      } catch (const Error&) {
        // damaged: not complete
      }
    }
    out.push_back(std::move(e));
  }
  return out;
}

// Newest first: the greatest step, then the greatest name.
bool newer(const Entry& a, const Entry& b) { return a.step != b.step ? a.step > b.step : a.dir > b.dir; }

}  // namespace

std::optional<std::string> latest(const std::string& root) {
  std::optional<Entry> best;
  for (const Entry& e : entries(root))
    if (e.complete && (!best || newer(e, *best))) best = e;
  if (!best) return std::nullopt;
  return best->dir;
}

std::vector<std::string> prune(const std::string& root, int64_t keep) {
  DT_CHECK_ARG(keep >= 1, "checkpoint prune: keep at least 1 checkpoint, got ", keep);
  std::vector<Entry> all = entries(root);
  std::vector<Entry> complete;
  for (const Entry& e : all)
    if (e.complete) complete.push_back(e);
  std::sort(complete.begin(), complete.end(), newer);
  if (complete.empty()) return {};
  std::vector<std::string> removed;
  for (size_t i = size_t(keep); i < complete.size(); ++i) removed.push_back(complete[i].dir);
  // Interrupted saves that sort before the oldest checkpoint kept (a later save may be writing a newer one).
  const std::string oldest_kept = complete[std::min(complete.size(), size_t(keep)) - 1].dir;
  for (const Entry& e : all)
    if (!e.complete && e.dir < oldest_kept) removed.push_back(e.dir);
  for (const std::string& d : removed) std::filesystem::remove_all(d);
  return removed;
}

std::vector<std::string> remove_interrupted(const std::string& root) {
  std::vector<std::string> removed;
  for (const Entry& e : entries(root))
    if (!e.complete) removed.push_back(e.dir);
  for (const std::string& d : removed) std::filesystem::remove_all(d);
  return removed;
}

}  // namespace dt::checkpoint
