// CommDebugMode through the C API (dtensor/comm_debug.h): scopes a framework enters from its own hooks.
#include "bindings/c_api/funnel.h"
#include "core/error.h"

using namespace dt;        // NOLINT: entry points are thin
using namespace dt::capi;  // NOLINT

namespace {
CommDebugMode::Phase phase_of(int32_t backward) {
  DT_CHECK_ARG(backward == 0 || backward == 1, "backward must be 0 (forward) or 1, got ", backward);
  return backward ? CommDebugMode::Phase::kBackward : CommDebugMode::Phase::kForward;
}
}  // namespace

extern "C" {

dt_status_t dt_comm_debug_create(dt_comm_debug_t* out) {
  return call("dt_comm_debug_create", [&] {
    require(out, "out");
    auto o = std::make_shared<CommDebugObject>();
    o->owner = std::this_thread::get_id();  // it counts this thread's calls
    o->mode = std::make_unique<CommDebugMode>();
    *out = make_handle<dt_comm_debug_t>(std::move(o));
  });
}

dt_status_t dt_comm_debug_declare(dt_comm_debug_t mode, const char* scope, int32_t depth) {
  return call("dt_comm_debug_declare", [&] {
    auto o = get<CommDebugObject>(mode, "mode");
    require(scope, "scope");
    DT_CHECK_ARG(depth >= 1, "depth must be at least 1 (the root), got ", depth);
    o->mode->declare(scope, int(depth));
  });
}

dt_status_t dt_comm_debug_enter(dt_comm_debug_t mode, const char* scope, int32_t backward) {
  return call("dt_comm_debug_enter", [&] {
    auto o = get<CommDebugObject>(mode, "mode");
    require(scope, "scope");
    o->mode->enter(scope, phase_of(backward));
  });
}

dt_status_t dt_comm_debug_exit(dt_comm_debug_t mode, const char* scope, int32_t backward) {
  return call("dt_comm_debug_exit", [&] {
    auto o = get<CommDebugObject>(mode, "mode");
    require(scope, "scope");
    o->mode->exit(scope, phase_of(backward));
  });
}

dt_status_t dt_comm_debug_json(dt_comm_debug_t mode, char* buf, size_t cap, size_t* needed) {
  return call("dt_comm_debug_json",
              [&] { copy_out(get<CommDebugObject>(mode, "mode")->mode->to_json(), buf, cap, needed); });
}

dt_status_t dt_comm_debug_text(dt_comm_debug_t mode, char* buf, size_t cap, size_t* needed) {
  return call("dt_comm_debug_text",
              [&] { copy_out(get<CommDebugObject>(mode, "mode")->mode->to_text(), buf, cap, needed); });
}

dt_status_t dt_comm_debug_destroy(dt_comm_debug_t mode) {
  return call("dt_comm_debug_destroy", [&] { release<CommDebugObject>(mode, "mode"); });
}

}  // extern "C"
