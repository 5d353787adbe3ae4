// Error files: how a failed rank tells its launcher why it failed, in torchelastic's convention.
//
// Note [Error files]
// The launcher (dtrun, torchrun) gives every rank a path in TORCHELASTIC_ERROR_FILE. A rank that fails writes its
// error there before it exits:
//   {"message": {"message": "<what>", "extraInfo": {"py_callstack": "", "timestamp": "<unix seconds>"}}}
// which is what torch.distributed.elastic's @record writes for a Python exception, so the launcher reads the files
// of C++ and Python ranks alike and names the error of the rank that failed first, not only its exit code. Programs
// call record_error() where they turn an exception into an exit code (the examples' and tools' main); nothing is
// written when the variable is unset.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace dt {

// Writes `what` to the file TORCHELASTIC_ERROR_FILE names (replacing it); returns whether it did. Never throws: a
// rank on its way out reports a failure to write on stderr and goes on exiting.
bool record_error(std::string_view what);

// The message in an error file written by record_error() or by torchelastic's @record (the older form
// {"message": "<what>"} too); nullopt when the file is missing, empty or holds no message.
std::optional<std::string> read_error_file(const std::string& path);

}  // namespace dt
