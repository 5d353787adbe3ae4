// Streams and events on the CPU (core/stream.h): every call is a no-op that reads as complete, and the CPU has no
// current stream; a CUDA device in a build or process without CUDA is refused clearly. The device behaviour is tested
// in tests/gpu/stream_event_test.cc.
#include "core/stream.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace dt {
namespace {

TEST(Stream, CpuCallsAreNoOps) {
  const Device cpu = Device::cpu();
  Stream s = create_stream(cpu);
  EXPECT_EQ(s.handle, nullptr);
  Event e = Event::record(cpu, s);
  EXPECT_TRUE(e.empty());
  EXPECT_EQ(e.handle(), nullptr);
  EXPECT_TRUE(e.query());
  e.block(s);
  e.synchronize();
  Event copy = e;
  EXPECT_TRUE(copy.query());
  EXPECT_TRUE(Event().query());
  destroy_stream(cpu, s);
}

TEST(Stream, TheCpuHasNoCurrentStream) {
  const Device cpu = Device::cpu();
  EXPECT_EQ(current_stream(cpu).handle, nullptr);
  set_current_stream(cpu, Stream{});
  { StreamGuard guard(cpu, Stream{}); }
  int not_a_stream = 0;
  try {
    set_current_stream(cpu, Stream{&not_a_stream});
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("cpu has no streams"), std::string::npos) << e.what();
  }
  EXPECT_EQ(resolve_stream(Stream{}, cpu).handle, nullptr);
  EXPECT_EQ(resolve_stream(Stream{&not_a_stream}, cpu).handle, &not_a_stream);
}

TEST(Stream, CudaWithoutAUsableDeviceIsRefused) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is usable here: tests/gpu covers it";
  EXPECT_THROW(create_stream(Device::cuda(0)), Unsupported);
  EXPECT_THROW(Event::record(Device::cuda(0), Stream{}), Unsupported);
  EXPECT_THROW(destroy_stream(Device::cuda(0), Stream{reinterpret_cast<void*>(1)}), Unsupported);
  EXPECT_THROW(set_current_stream(Device::cuda(0), Stream{}), Unsupported);
  EXPECT_EQ(current_stream(Device::cuda(0)).handle, nullptr);
}

}  // namespace
}  // namespace dt
