// The stream-ordered reuse of freed device blocks (Note [Stream-safe frees] in core/allocator.cc), on a pool over
// host memory with fake events: a block freed while a recorded stream still has work is not handed out again until
// that work finished; blocks no stream was recorded on are reused at once.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "core/allocator.h"

namespace dt {
namespace {

// Events are numbered; an event fires when the test says its stream finished everything recorded so far.
class FakeEvents : public StreamEvents {
 public:
  void* record(Stream stream) override {
    if (gone_.count(stream.handle)) ADD_FAILURE() << "an event recorded on a destroyed stream";
    events_.push_back({stream.handle, false, false});
    return reinterpret_cast<void*>(events_.size());
  }
  bool query(void* e) override { return at(e).fired; }
  void synchronize(void* e) override {
    at(e).fired = true;
    ++synchronized;
  }
  void destroy(void* e) override {
    EXPECT_FALSE(at(e).destroyed);
    at(e).destroyed = true;
  }
  // The stream finished its work: every event recorded on it so far fires.
  void finish(Stream stream) {
    for (Event& e : events_)
      if (e.stream == stream.handle) e.fired = true;
  }
  // The stream was destroyed: recording on it from now on is an error.
  void destroy_stream(Stream stream) { gone_.insert(stream.handle); }
  size_t recorded() const { return events_.size(); }
  bool all_destroyed() const {
    for (const Event& e : events_)
      if (!e.destroyed) return false;
    return true;
  }
  int synchronized = 0;

 private:
  struct Event {
    void* stream;
    bool fired, destroyed;
  };
  Event& at(void* e) { return events_.at(reinterpret_cast<size_t>(e) - 1); }
  std::vector<Event> events_;
  std::set<void*> gone_;
};

const Stream kComm{reinterpret_cast<void*>(0x10)}, kUser{reinterpret_cast<void*>(0x20)};

TEST(AllocatorStreams, BlockInUseByAStreamIsNotReusedBeforeItsWorkFinished) {
  auto events = std::make_shared<FakeEvents>();
  auto pool = make_stream_ordered_pool_for_testing(events);
  void* a = pool->allocate(4096);
  pool->record_stream(static_cast<char*>(a) + 100, kComm);  // an address inside the block
  pool->deallocate(a, 4096);
  EXPECT_EQ(events->recorded(), 1u);
  void* b = pool->allocate(4096);
  EXPECT_NE(b, a) << "reused while the stream may still use it";
  events->finish(kComm);
  void* c = pool->allocate(4096);
  EXPECT_EQ(c, a) << "not reused once the stream finished";
  pool->deallocate(b, 4096);
  pool->deallocate(c, 4096);
  EXPECT_TRUE(events->all_destroyed());
  EXPECT_EQ(pool->allocated_bytes(), 0u);
}

// Note [Temporaries of an op on another stream]: blocks handed out while a StreamUseScope is open are recorded on its
// stream; outside the scope, and in a scope of the current (null) stream, nothing is recorded.
TEST(AllocatorStreams, TemporariesOfAnOpOnAnotherStreamWaitForIt) {
  auto events = std::make_shared<FakeEvents>();
  auto pool = make_stream_ordered_pool_for_testing(events);
  void* tmp = nullptr;
  {
    const StreamUseScope scope(Device::cpu(), kUser);  // the testing pool's device; kUser is not current
    tmp = pool->allocate(8192);                        // a temporary of an op queued on kUser
    {
      const StreamUseScope current(Device::cpu(), Stream{});  // the current stream: nothing to record
      void* plain = pool->allocate(64);
      pool->deallocate(plain, 64);
    }
    pool->deallocate(tmp, 8192);  // the op returns while its kernel may still run on kUser
  }
  EXPECT_EQ(events->recorded(), 1u) << "one event, for the temporary, on kUser";
  void* next = pool->allocate(8192);
  EXPECT_NE(next, tmp) << "reused while kUser may still read it";
  events->finish(kUser);
  void* after = pool->allocate(8192);
  EXPECT_EQ(after, tmp) << "not reused once kUser finished";
  void* outside = pool->allocate(8192);  // the scope is closed: nothing recorded
  pool->deallocate(outside, 8192);
  EXPECT_EQ(events->recorded(), 1u);
  pool->deallocate(next, 8192);
  pool->deallocate(after, 8192);
}

TEST(AllocatorStreams, EveryRecordedStreamMustFinish) {
  auto events = std::make_shared<FakeEvents>();
  auto pool = make_stream_ordered_pool_for_testing(events);
  void* a = pool->allocate(1 << 20);
  pool->record_stream(a, kComm);
  pool->record_stream(a, kUser);
  pool->record_stream(a, kUser);  // once per stream
  pool->deallocate(a, 1 << 20);
  EXPECT_EQ(events->recorded(), 2u);
  events->finish(kComm);
  void* b = pool->allocate(1 << 20);
  EXPECT_NE(b, a);
  events->finish(kUser);
  void* c = pool->allocate(1 << 20);
  EXPECT_EQ(c, a);
  pool->deallocate(b, 1 << 20);
  pool->deallocate(c, 1 << 20);
}

TEST(AllocatorStreams, UnrecordedBlocksAndForeignAddresses) {
  auto events = std::make_shared<FakeEvents>();
  auto pool = make_stream_ordered_pool_for_testing(events);
  void* a = pool->allocate(512);
  int outside = 0;
  pool->record_stream(&outside, kComm);  // not from this pool: ignored
  pool->record_stream(nullptr, kComm);
  pool->deallocate(a, 512);
  EXPECT_EQ(events->recorded(), 0u);
  EXPECT_EQ(pool->allocate(512), a) << "a block no stream used is reused at once";
  pool->deallocate(a, 512);
}

TEST(AllocatorStreams, EmptyCacheWaitsForPendingBlocks) {
  auto events = std::make_shared<FakeEvents>();
  auto pool = make_stream_ordered_pool_for_testing(events);
  std::set<void*> blocks;
  for (int i = 0; i < 3; ++i) {
    void* p = pool->allocate(8192);
    pool->record_stream(p, kUser);
    blocks.insert(p);
  }
  for (void* p : blocks) pool->deallocate(p, 8192);
  EXPECT_EQ(pool->cached_bytes(), 0u);  // pending, not cached yet
  pool->empty_cache();
  EXPECT_EQ(events->synchronized, 3);
  EXPECT_TRUE(events->all_destroyed());
  EXPECT_EQ(pool->cached_bytes(), 0u);
  EXPECT_EQ(pool->allocated_bytes(), 0u);
}

// A communicator destroys its internal stream while blocks recorded on it are still alive (a tensor outlives the
// communicator): forget_stream records their events first, and their frees later record nothing on the dead stream.
TEST(AllocatorStreams, ForgottenStreamOrdersItsBlocksByAnEventRecordedBeforeItWent) {
  auto events = std::make_shared<FakeEvents>();
  auto pool = make_stream_ordered_pool_for_testing(events);
  void* a = pool->allocate(4096);
  void* b = pool->allocate(4096);
  pool->record_stream(a, kComm);
  pool->record_stream(a, kUser);
  pool->record_stream(b, kUser);
  pool->forget_stream(kComm);
  EXPECT_EQ(events->recorded(), 1u) << "one event for the one block recorded on the stream";
  events->destroy_stream(kComm);
  pool->deallocate(a, 4096);  // records on kUser only
  EXPECT_EQ(events->recorded(), 2u);
  events->finish(kUser);
  void* c = pool->allocate(4096);
  EXPECT_NE(c, a) << "reused before the forgotten stream's work finished";
  events->finish(kComm);  // its work up to forget_stream ran
  void* d = pool->allocate(4096);
  EXPECT_EQ(d, a);
  for (void* p : {b, c, d}) pool->deallocate(p, 4096);
  pool->empty_cache();
  EXPECT_TRUE(events->all_destroyed());
  EXPECT_EQ(pool->allocated_bytes(), 0u);
}

}  // namespace
}  // namespace dt
