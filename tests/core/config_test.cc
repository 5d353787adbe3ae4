#include "core/config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <optional>
#include <set>
#include <string>

#include "core/error.h"
#include "tests/error_of.h"

namespace dt {
namespace {

// Sets one variable for the scope and makes the configuration parse again on both ends.
class EnvScope {
 public:
  EnvScope(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = ::getenv(name)) old_ = old;
    value ? ::setenv(name, value->c_str(), 1) : ::unsetenv(name);
    config::reset_for_testing();
  }
  ~EnvScope() {
    old_ ? ::setenv(name_, old_->c_str(), 1) : ::unsetenv(name_);
    config::reset_for_testing();
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

using dt::testing::error_of;

TEST(Config, DefaultsApplyWhenUnsetOrEmpty) {
  {
    EnvScope e("DT_TIMEOUT_S", std::nullopt);
    EXPECT_EQ(config::get_seconds(config::Var::kTimeoutS), 300.0);
  }
  EnvScope e("DT_UCX_CHUNK_BYTES", "");
  EXPECT_EQ(config::get_int(config::Var::kUcxChunkBytes), 262144);
  EXPECT_FALSE(config::is_set(config::Var::kUcxChunkBytes));
}

TEST(Config, ParsesEachType) {
  EnvScope a("DT_TIMEOUT_S", "0.25"), b("DT_UCX_SPIN_US", "17"), c("DT_HUGE_PAGES", "off"), d("DT_LOG", "error"),
      f("DT_MASTER_ADDR", "10.1.2.3");
  EXPECT_EQ(config::get_seconds(config::Var::kTimeoutS), 0.25);
  EXPECT_EQ(config::get_int(config::Var::kUcxSpinUs), 17);
  EXPECT_FALSE(config::get_bool(config::Var::kHugePages));
  EXPECT_EQ(config::get_string(config::Var::kLog), "error");
  EXPECT_EQ(config::get_string(config::Var::kMasterAddr), "10.1.2.3");
  EXPECT_TRUE(config::is_set(config::Var::kUcxSpinUs));
  for (const char* yes : {"1", "true", "yes", "on"}) {
    EnvScope g("DT_DEBUG_COLLECTIVES", yes);
    EXPECT_TRUE(config::get_bool(config::Var::kDebugCollectives)) << yes;
  }
}

TEST(Config, MalformedValuesNameTheVariableAndTheValue) {
  struct Case {
    const char* name;
    const char* value;
    config::Var var;
  };
  for (const Case& c :
       {Case{"DT_TIMEOUT_S", "5s", config::Var::kTimeoutS}, Case{"DT_TIMEOUT_S", "-1", config::Var::kTimeoutS},
        Case{"DT_TIMEOUT_S", "1e99", config::Var::kTimeoutS}, Case{"DT_UCX_STALL_MS", "0", config::Var::kUcxStallMs},
        Case{"DT_UCX_SPIN_US", "12abc", config::Var::kUcxSpinUs},
        Case{"DT_UCX_CHUNK_BYTES", "99999999999999999999999", config::Var::kUcxChunkBytes},
        Case{"DT_HUGE_PAGES", "maybe", config::Var::kHugePages}, Case{"DT_LOG", "loud", config::Var::kLog}}) {
    EnvScope e(c.name, c.value);
    const std::string msg = error_of([&] {
      switch (config::info(c.var).type) {
        case config::Type::kSeconds:
          config::get_seconds(c.var);
          break;
        case config::Type::kInt:
          config::get_int(c.var);
          break;
        case config::Type::kBool:
          config::get_bool(c.var);
          break;
        default:
          config::get_string(c.var);
      }
    });
    EXPECT_NE(msg.find(c.name), std::string::npos) << c.name << "=" << c.value << ": " << msg;
    EXPECT_NE(msg.find(std::string("'") + c.value + "'"), std::string::npos) << msg;
  }
}

TEST(Config, ValuesAreReadOnceUntilReset) {
  EnvScope e("DT_UCX_SPIN_US", "5");
  EXPECT_EQ(config::get_int(config::Var::kUcxSpinUs), 5);
  ::setenv("DT_UCX_SPIN_US", "6", 1);
  EXPECT_EQ(config::get_int(config::Var::kUcxSpinUs), 5);  // cached: the process sees one value
  config::reset_for_testing();
  EXPECT_EQ(config::get_int(config::Var::kUcxSpinUs), 6);
}

TEST(Config, TableIsWellFormedAndHelpListsEveryVariable) {
  std::set<std::string> names;
  const std::string help = config::help_text();
  for (const auto& v : config::all_vars()) {
    EXPECT_TRUE(names.insert(v.name).second) << "declared twice: " << v.name;
    EXPECT_EQ(std::string(v.name).rfind("DT_", 0), 0u) << v.name;
    EXPECT_NE(help.find(v.name), std::string::npos) << v.name;
    EXPECT_GT(std::string(v.help).size(), 10u) << v.name;
    EXPECT_EQ(&config::info(v.id), &v);
    if (*v.default_value == '\0') continue;
    EnvScope unset(v.name, std::nullopt);  // every default parses as its own type
    switch (v.type) {
      case config::Type::kBool:
        EXPECT_NO_THROW(config::get_bool(v.id)) << v.name;
        break;
      case config::Type::kInt:
        EXPECT_NO_THROW(config::get_int(v.id)) << v.name;
        break;
      case config::Type::kSeconds:
        EXPECT_NO_THROW(config::get_seconds(v.id)) << v.name;
        break;
      default:
        EXPECT_NO_THROW(config::get_string(v.id)) << v.name;
    }
  }
}

}  // namespace
}  // namespace dt
