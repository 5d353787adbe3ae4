#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/config.h"
#include "core/tensor.h"

namespace dt {
namespace {

TEST(Storage, ReleaseAndRefillKeepViewsValid) {
  Tensor full = Tensor::arange(12).view({3, 4});
  Tensor row = full.select(0, 1);  // a view, like a module's reference to an unsharded parameter
  auto storage = full.storage();
  storage->release();
  EXPECT_TRUE(storage->is_released());
  EXPECT_THROW(row.to_vector(), InvalidArgument);
  EXPECT_NE(row.to_string().find("released"), std::string::npos);
  storage->resize(12 * sizeof(float));
  full.copy_(Tensor::arange(12).view({3, 4}).t().contiguous().view({3, 4}));
  // The view sees the new contents through the same storage object.
  std::vector<double> ref;
  for (int k = 4; k < 8; ++k) ref.push_back(double((k % 3) * 4 + k / 3));
  EXPECT_EQ(row.to_vector(), ref);
  EXPECT_TRUE(row.shares_storage_with(full));
}

TEST(Storage, WrappedMemoryCannotBeReleased) {
  float x[4] = {0, 1, 2, 3};
  Tensor t = Tensor::from_blob(x, {4}, DType::f32, Device::cpu());
  EXPECT_THROW(t.storage()->release(), InvalidArgument);
  EXPECT_THROW(t.storage()->resize(8), InvalidArgument);
}

TEST(Allocator, PoolReusesBlocks) {
  Allocator& a = allocator_for(Device::cpu());
  const size_t mib = size_t(1) << 20;
  void* p = a.allocate(37 * mib - 100);
  size_t before = a.allocated_bytes();
  a.deallocate(p, 37 * mib - 100);
  EXPECT_LT(a.allocated_bytes(), before);
  void* q = a.allocate(37 * mib - 5);  // same 37 MiB class: comes back from the cache
  EXPECT_EQ(p, q);
  a.deallocate(q, 37 * mib - 5);
  EXPECT_GE(a.peak_allocated_bytes(), 37 * mib);
  EXPECT_EQ(a.allocate(0), nullptr);
}

TEST(Allocator, PoolHandsOutTheBlockFreedLast) {
  // Several cached blocks of one size: the one freed last comes back first (it is the one still in cache).
  Allocator& a = allocator_for(Device::cpu());
  const size_t bytes = (size_t(3) << 20) + 12345;
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(a.allocate(bytes));
  for (void* p : blocks) a.deallocate(p, bytes);
  for (int i = 3; i >= 0; --i) EXPECT_EQ(a.allocate(bytes), blocks[size_t(i)]);
  for (void* p : blocks) a.deallocate(p, bytes);
}

// The VmFlags line of /proc/self/smaps for the mapping that holds `p` ("" when not found).
std::string vm_flags_of(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find('-') < line.find(' ')) {
      inside = addr >= lo && addr < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

TEST(Allocator, HostBlocksLieOnHugePages) {
  // Note [Huge pages for host blocks]: blocks from 64 KiB are cut from 2 MiB slabs, large ones start on a 2 MiB
  // boundary; both are advised for huge pages ("hg" in the mapping's VmFlags).
  if (!config::get_bool(config::Var::kHugePages)) GTEST_SKIP() << "DT_HUGE_PAGES=0";
  if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) GTEST_SKIP() << "kernel without THP";
  Allocator& a = allocator_for(Device::cpu());
  const size_t small = 96 << 10, large = (size_t(5) << 20) + 4096;
  void* p = a.allocate(small);
  void* q = a.allocate(small);
  void* big = a.allocate(large);
  const uintptr_t mask = ~uintptr_t((size_t(2) << 20) - 1);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) & mask, reinterpret_cast<uintptr_t>(q) & mask) << "one slab";
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big) & ~mask, 0u) << "2 MiB aligned";
  std::memset(p, 1, small);
  std::memset(big, 1, large);
  for (const void* block : {p, big}) {
    const std::string flags = vm_flags_of(block);
    ASSERT_FALSE(flags.empty()) << "no smaps entry for " << block;
    EXPECT_NE(flags.find(" hg"), std::string::npos) << flags;
  }
  // Slab blocks survive empty_cache(): the next block of the size still comes from the slab.
  a.deallocate(q, small);
  a.empty_cache();
  void* r = a.allocate(small);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(r) & mask, reinterpret_cast<uintptr_t>(p) & mask);
  a.deallocate(r, small);
  a.deallocate(p, small);
  a.deallocate(big, large);
}

TEST(Allocator, AReleasedStorageGetsItsAddressBack) {
  // An FSDP parameter's storage is released and re-filled every step while another of its size is too: it prefers
  // its own last block (views made over it stay valid), where the pool alone would hand out the block freed last.
  auto a = Storage::create(3000, Device::cpu());
  auto b = Storage::create(3000, Device::cpu());
  void* const pa = a->data();
  void* const pb = b->data();
  a->release();
  b->release();  // freed last: what a plain allocation of the size gets
  a->resize(3000);
  EXPECT_EQ(a->data(), pa);
  b->resize(3000);
  EXPECT_EQ(b->data(), pb);
  Allocator& pool = allocator_for(Device::cpu());
  b->release();
  void* other = pool.allocate(3000, nullptr);  // no hint: the last freed block, which b no longer finds
  EXPECT_EQ(other, pb);
  b->resize(3000);
  EXPECT_NE(b->data(), pb);
  pool.deallocate(other, 3000);
}

TEST(Device, ParsingAndAvailability) {
  EXPECT_EQ(Device::parse("cuda:3"), Device::cuda(3));
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_THROW(Device::parse("tpu"), InvalidArgument);
  EXPECT_THROW(Device::parse("cuda:x"), InvalidArgument);
  if (!cuda_available()) {
    EXPECT_THROW(Tensor::empty({4}, DType::f32, Device::cuda(0)), Unsupported);
  }
}

}  // namespace
}  // namespace dt
