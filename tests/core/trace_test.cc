// The span recorder (core/trace.h): off, nothing is recorded and no file appears; on, spans nest and keep their order
// on each thread, threads get their own tracks, the ring keeps the last events and counts the dropped ones, and the
// file is the Chrome trace event format (parsed back here) with the clock offset applied.
#include "core/trace.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.h"

namespace dt {
namespace {

namespace json = boost::json;

std::string temp_dir(const std::string& name) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("dt_trace_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

json::object read_json(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return json::parse(ss.str()).as_object();
}

TEST(Trace, OffRecordsNothing) {
  ASSERT_FALSE(trace::enabled());
  { trace::Span s(trace::Category::kUser, "unseen"); }
  trace::record(trace::Category::kUser, "unseen", 0, 1, 1);
  EXPECT_TRUE(trace::snapshot().empty());
  EXPECT_EQ(trace::stop(), "");  // not started: no file
}

// GPU spans (Note [GPU spans]) record nothing off a CUDA device, in a build without CUDA, or while tracing is off;
// draining with nothing queued is a no-op. Their timing is tested on a GPU (tests/gpu/trace_gpu_test.cc).
TEST(Trace, GpuSpansOffTheGpuRecordNothing) {
  {
    trace::GpuSpan off("unseen", 0, nullptr);
    EXPECT_FALSE(off.active());  // tracing is off
  }
  const std::string dir = temp_dir("gpu_off");
  trace::start({.dir = dir, .rank = 0, .world_size = 1, .capacity = 64});
  {
    trace::GpuSpan cpu("cpu op", -1, nullptr);
    EXPECT_FALSE(cpu.active());
  }
  trace::drain_gpu_spans(true);
  for (const trace::Event& e : trace::snapshot()) EXPECT_NE(e.category, trace::Category::kGpu) << e.name;
  EXPECT_STREQ(trace::category_name(trace::Category::kGpu), "gpu");
  trace::stop();
  std::filesystem::remove_all(dir);
}

TEST(Trace, SpansNestInOrderOnEachThread) {
  const std::string dir = temp_dir("nest");
  trace::start({.dir = dir, .rank = 3, .world_size = 4, .capacity = 1024});
  {
    trace::StepSpan step(7);
    {
      trace::Span outer(trace::Category::kUser, "outer");
      outer.set_args(trace::Args().str("quote", "a \"b\"\n").num("n", -5).take());
      { trace::Span inner(trace::Category::kOp, "inner"); }
      { trace::Span second(trace::Category::kOp, "second"); }
    }
    std::thread([] {
      trace::set_thread_name("worker");
      trace::Span w(trace::Category::kUser, "on a worker");
    }).join();
  }
  const std::vector<trace::Event> ev = trace::snapshot();
  ASSERT_EQ(ev.size(), 5u);
  // Recorded as they end: inner, second, outer, the worker's, step.
  EXPECT_STREQ(ev[0].name, "inner");
  EXPECT_STREQ(ev[1].name, "second");
  EXPECT_STREQ(ev[2].name, "outer");
  EXPECT_STREQ(ev[3].name, "on a worker");
  EXPECT_STREQ(ev[4].name, "step");
  for (const trace::Event& e : ev) EXPECT_LE(e.begin_ns, e.end_ns) << e.name;
  // Children lie within their parents, siblings in order.
  EXPECT_LE(ev[2].begin_ns, ev[0].begin_ns);
  EXPECT_LE(ev[0].end_ns, ev[1].begin_ns);
  EXPECT_LE(ev[1].end_ns, ev[2].end_ns);
  EXPECT_LE(ev[4].begin_ns, ev[2].begin_ns);
  EXPECT_LE(ev[3].end_ns, ev[4].end_ns);
  EXPECT_EQ(ev[0].track, ev[4].track);
  EXPECT_NE(ev[3].track, ev[4].track);
  EXPECT_EQ(ev[4].args, "\"step\":7");

  trace::set_clock_offset(-2'500'000, 1'000);  // written timestamps move by -2.5 ms
  const std::string path = trace::stop();
  EXPECT_EQ(path, trace::rank_file(dir, 3));
  EXPECT_FALSE(trace::enabled());
  const json::object f = read_json(path);
  const json::object& meta = f.at("dtensor").as_object();
  EXPECT_EQ(meta.at("rank").as_int64(), 3);
  EXPECT_EQ(meta.at("world_size").as_int64(), 4);
  EXPECT_EQ(meta.at("clock").at("offset_ns").as_int64(), -2'500'000);
  EXPECT_EQ(meta.at("clock").at("uncertainty_ns").as_int64(), 1'000);
  EXPECT_EQ(meta.at("dropped").as_int64(), 0);
  int complete = 0;
  bool worker_named = false;
  for (const json::value& v : f.at("traceEvents").as_array()) {
    const json::object& e = v.as_object();
    ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("name"));
    EXPECT_EQ(e.at("pid").as_int64(), 3);
    if (e.at("ph") == "M" && e.at("name") == "thread_name" && e.at("args").at("name") == "worker") worker_named = true;
    if (e.at("ph") != "X") continue;
    ++complete;
    EXPECT_GE(e.at("dur").to_number<double>(), 0);
    if (e.at("name") == "outer") {
      EXPECT_EQ(e.at("args").at("quote"), "a \"b\"\n");
      EXPECT_EQ(e.at("args").at("n").as_int64(), -5);
      EXPECT_EQ(e.at("cat"), "user");
      // The offset applied: ts (µs) = (begin + offset) / 1000.
      EXPECT_NEAR(e.at("ts").to_number<double>(), double(ev[2].begin_ns - 2'500'000) / 1e3, 1e-3);
    }
  }
  EXPECT_EQ(complete, 5);
  EXPECT_TRUE(worker_named);
  std::filesystem::remove_all(dir);
}

TEST(Trace, TheRingKeepsTheLastEventsAndCountsTheDropped) {
  const std::string dir = temp_dir("ring");
  trace::start({.dir = dir, .rank = 0, .world_size = 1, .capacity = 16});
  for (int i = 0; i < 40; ++i)
    trace::record(trace::Category::kUser, trace::intern("e" + std::to_string(i)), i, i + 1, 1);
  const std::vector<trace::Event> ev = trace::snapshot();
  ASSERT_EQ(ev.size(), 16u);
  EXPECT_STREQ(ev.front().name, "e24");
  EXPECT_STREQ(ev.back().name, "e39");
  EXPECT_EQ(trace::stats().dropped, 24);
  const json::object f = read_json(trace::stop());
  EXPECT_EQ(f.at("dtensor").at("dropped").as_int64(), 24);
  EXPECT_EQ(f.at("dtensor").at("events").as_int64(), 16);
  std::filesystem::remove_all(dir);
}

TEST(Trace, BadStarts) {
  EXPECT_THROW(trace::start({.dir = "", .rank = 0, .world_size = 1, .capacity = 0}), InvalidArgument);
  EXPECT_THROW(trace::start({.dir = "/tmp", .rank = 2, .world_size = 2, .capacity = 0}), InvalidArgument);
  EXPECT_THROW(trace::start({.dir = "/proc/no/such/dir", .rank = 0, .world_size = 1, .capacity = 0}), InvalidArgument);
  const std::string dir = temp_dir("twice");
  trace::start({.dir = dir, .rank = 0, .world_size = 1, .capacity = 8});
  EXPECT_THROW(trace::start({.dir = dir, .rank = 0, .world_size = 1, .capacity = 8}), InvalidArgument);
  trace::stop();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dt
