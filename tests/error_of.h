// The message of the dt::InvalidArgument a call throws, for tests that check what an error says ("(no error)" when
// it throws none; other exceptions pass through).
#pragma once

#include <string>

#include "core/error.h"

namespace dt::testing {

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace dt::testing
