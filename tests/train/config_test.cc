// train::TrainConfig: TOML over the defaults, command-line overrides, the printed resolved config parsing back to
// itself, and every kind of bad input named by its key (and line): unknown sections and keys, wrong types, values
// out of range, bad choices, inconsistent fields, malformed TOML.
#include "train/config.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "tests/error_of.h"

namespace dt::train {
namespace {

const char* kBase = R"(
[model]
dim = 64
layers = 3
tie_embeddings = true

[training]
steps = 40
global_batch = 16
grad_accum = 4
max_norm = 0.5

[lr_schedule]
kind = "wsd"
warmup = 5
decay_steps = 10

[data]
path = "corpus.bin"
)";

using dt::testing::error_of;

TEST(TrainConfig, FileOverridesAndRoundTrip) {
  TrainConfig c = parse_config(kBase, {"--training.steps", "200", "--optimizer.lr=1e-3", "--parallelism.fsdp", "false",
                                       "--checkpoint.folder", "ckpt dir"});
  EXPECT_EQ(c.model.dim, 64);
  EXPECT_EQ(c.model.layers, 3);
  EXPECT_TRUE(c.model.tie_embeddings);
  EXPECT_EQ(c.model.heads, 4);  // a default
  EXPECT_EQ(c.training.steps, 200);
  EXPECT_EQ(c.training.grad_accum, 4);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1e-3);
  EXPECT_FALSE(c.parallelism.fsdp);
  EXPECT_EQ(c.lr_schedule.kind, "wsd");
  EXPECT_EQ(c.checkpoint.folder, "ckpt dir");
  // The printed config is TOML that parses back to the same config.
  const std::string printed = to_toml(c);
  EXPECT_NE(printed.find("[training]\nsteps = 200\n"), std::string::npos) << printed;
  EXPECT_EQ(to_toml(parse_config(printed)), printed);
  EXPECT_NE(config_help().find("training.grad_accum"), std::string::npos);
}

TEST(TrainConfig, BadInputNamesTheKey) {
  struct Case {
    std::string toml;
    std::vector<std::string> overrides;
    std::string expect;  // a part of the message
  };
  const std::string data = "[data]\npath = \"x.bin\"\n";
  const Case cases[] = {
      {data + "[trainnig]\nsteps = 1\n", {}, "unknown section 'trainnig'"},
      {data + "[training]\nstep = 1\n", {}, "<config>:4: unknown key 'training.step'"},
      {data + "[training]\nsteps = \"ten\"\n", {}, "'training.steps' must be an integer"},
      {data + "[optimizer]\nlr = true\n", {}, "'optimizer.lr' must be a number"},
      {data + "[parallelism]\nfsdp = 1\n", {}, "'parallelism.fsdp' must be true or false"},
      {data + "[training]\nseq = 0\n", {}, "'training.seq' is 0, outside [1, inf]"},
      {data + "[optimizer]\nbeta2 = 1.5\n", {}, "'optimizer.beta2' is 1.5"},
      {data + "[lr_schedule]\nkind = \"step\"\n", {}, "'lr_schedule.kind' is \"step\", not one of"},
      {data + "[mixed_precision]\nparam_dtype = \"fp8\"\n", {}, "'mixed_precision.param_dtype'"},
      {data + "[training]\nglobal_batch = 10\ngrad_accum = 4\n", {}, "not a multiple of 'training.grad_accum'"},
      {data + "[parallelism]\ndp = 4\nhsdp = 3\n", {}, "not a multiple of 'parallelism.hsdp'"},
      {"[training]\nsteps = 1\n", {}, "'data.path'"},
      {data + "[training\nsteps = 1\n", {}, "<config>:3:"},
      {data, {"--training.stepz", "3"}, "unknown config key --training.stepz"},
      {data, {"--training.steps", "3x"}, "--training.steps must be an integer, got '3x'"},
      {data, {"--training.steps"}, "has no value"},
      {data, {"training.steps", "3"}, "must be --section.key VALUE"},
  };
  for (const Case& c : cases) {
    const std::string e = error_of([&] { parse_config(c.toml, c.overrides); });
    EXPECT_NE(e.find(c.expect), std::string::npos) << "expected '" << c.expect << "' in: " << e;
  }
  EXPECT_NE(error_of([] { load_config("/nonexistent/train.toml"); }).find("does not exist"), std::string::npos);
}

}  // namespace
}  // namespace dt::train
