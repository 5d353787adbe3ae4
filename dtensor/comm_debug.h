// CommDebugMode: the collectives issued within its scope, counted and sized per kind under each module (or named
// scope) that was running, forward and backward apart (PyTorch's torch.distributed.tensor.debug.CommDebugMode).
//
//   dt::CommDebugMode mode;
//   auto tracked = dt::nn::track_modules(mode, *model);   // nn/comm_debug.h: every module's hooks feed the scopes
//   model->forward(...); loss.backward();
//   std::cout << mode.to_text();   // the table, indented by module depth
//   mode.to_json();                // the same as JSON
//
// Scopes nest: a call counts under every scope active when it is issued (a module's figures include its children's,
// as in PyTorch), and always under "Global". A scope entered while a backward scope is active, or entered as one, is
// a backward scope; calls with no scope active count under Global only, in phase "outside". Only calls made by the
// thread that created the mode count (one rank per thread in the thread backend). Sizes are CommCounter's: per-rank
// input bytes (CollectiveArgs::input_bytes), so Global's totals equal a CommCounter's over the same calls.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/communicator.h"

namespace dt {

class CommDebugMode {
 public:
  enum class Phase { kForward, kBackward, kOutside };
  struct Count {
    int64_t calls = 0;
    int64_t bytes = 0;
  };
  // kind name ("all_reduce") -> figures
  using Counts = std::map<std::string, Count>;
  struct Scope {
    std::string name;  // "Global", a module's fully-qualified name, or a user's scope
    int depth = 0;     // 0 for Global; a module's: its nesting under the tracked root + 1
    std::map<Phase, Counts> by_phase;
  };

  CommDebugMode();
  ~CommDebugMode();
  CommDebugMode(const CommDebugMode&) = delete;
  CommDebugMode& operator=(const CommDebugMode&) = delete;

  // Declares a scope (listing order and depth) before it is entered; entering an undeclared one declares it.
  void declare(const std::string& name, int depth);
  void enter(const std::string& name, Phase phase);
  void exit(const std::string& name, Phase phase);

  // Global first, then the scopes in declaration order.
  std::vector<Scope> scopes() const;
  // Global's calls of `kind` over every phase (CommCounter's count), and their bytes.
  int64_t count(CollectiveKind kind) const;
  int64_t bytes(CollectiveKind kind) const;
  int64_t total() const;
  // The table: every scope, indented by depth, with its phases and per kind "all_reduce: 2 (8.0 KiB)" where it made
  // calls ("no collectives" when none was made).
  std::string to_text() const;
  // {"scopes": [{"name", "depth", "forward": {"all_reduce": {"calls", "bytes"}}, "backward": {...}, "outside":
  // {...}}]}: every scope, with calls or not.
  std::string to_json() const;
  void reset();

 private:
  struct Entry {
    Scope scope;
    int active_forward = 0, active_backward = 0;
  };
  Entry& entry(const std::string& name, int depth);
  Count global(CollectiveKind kind) const;  // Global's figures of `kind` over every phase
  void observe(const CollectiveEvent& ev);

  mutable std::mutex mu_;
  std::thread::id thread_;
  int observer_id_ = -1;
  std::vector<Entry> entries_;  // [0]: Global
  std::map<std::string, size_t> index_;
};

const char* phase_name(CommDebugMode::Phase phase);  // "forward", "backward", "outside"

}  // namespace dt
