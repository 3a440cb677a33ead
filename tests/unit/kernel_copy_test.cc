#include "blockstore/kernel_copy.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace kvfs {
namespace {

std::string KernelCopyPattern(size_t n) {
  std::string s(n, '\0');
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s[i] = static_cast<char>(x);
  }
  return s;
}

// Visits src and returns what was handed out, checking order and grain.
std::string KernelCopyCollect(const std::string& src, size_t grain, std::vector<size_t>* sizes = nullptr) {
  std::string out;
  VisitThroughKernel(src.data(), src.size(), grain, [&](size_t off, const char* p, size_t n) {
    EXPECT_EQ(off, out.size());
    EXPECT_LE(n, kKernelCopyWindow);
    if (off + n < src.size()) {
      EXPECT_EQ(n % grain, 0u) << off;
    }
    out.append(p, n);
    if (sizes) sizes->push_back(n);
    return true;
  });
  return out;
}

TEST(KernelCopyTest, HandsOutExactlyTheSourceBytesInOrder) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{4095}, size_t{65536}, kKernelCopyWindow, kKernelCopyWindow + 1,
                   size_t{3u << 20} + 17}) {
    const std::string src = KernelCopyPattern(n);
    const KernelCopyStats before = GetKernelCopyStats();
    EXPECT_TRUE(KernelCopyCollect(src, 65536) == src) << n;
    const KernelCopyStats after = GetKernelCopyStats();
    // The kernel copies (this test box has vmsplice); never a fallback.
    EXPECT_EQ(after.bytes - before.bytes, n);
    EXPECT_EQ(after.fallbacks, before.fallbacks);
  }
}

TEST(KernelCopyTest, CopiesLandInOneReusedWindowNotInTheSource) {
  const std::string src = KernelCopyPattern(1u << 20);
  std::vector<const char*> ptrs;
  VisitThroughKernel(src.data(), src.size(), 4096, [&](size_t, const char* p, size_t) {
    ptrs.push_back(p);
    return true;
  });
  ASSERT_EQ(ptrs.size(), (1u << 20) / kKernelCopyWindow);
  for (const char* p : ptrs) {
    EXPECT_EQ(p, ptrs[0]);  // the thread's window every time
    EXPECT_TRUE(p < src.data() || p >= src.data() + src.size());
  }
}

TEST(KernelCopyTest, StopsWhenVisitSaysSo) {
  const std::string src = KernelCopyPattern(1u << 20);
  size_t calls = 0;
  EXPECT_FALSE(VisitThroughKernel(src.data(), src.size(), 65536, [&](size_t, const char*, size_t) {
    return ++calls < 2;
  }));
  EXPECT_EQ(calls, 2u);
}

TEST(KernelCopyTest, FallbackHandsOutTheSourceInPlace) {
  const std::string src = KernelCopyPattern((1u << 20) + 100);
  SetKernelCopyDisabledForTest(true);
  const KernelCopyStats before = GetKernelCopyStats();
  bool in_place = true;
  std::string out;
  VisitThroughKernel(src.data(), src.size(), 65536, [&](size_t off, const char* p, size_t n) {
    in_place = in_place && p == src.data() + off;
    out.append(p, n);
    return true;
  });
  SetKernelCopyDisabledForTest(false);
  EXPECT_TRUE(in_place);
  EXPECT_TRUE(out == src);
  EXPECT_EQ(GetKernelCopyStats().fallbacks, before.fallbacks + 1);
  EXPECT_EQ(GetKernelCopyStats().bytes, before.bytes);
}

TEST(KernelCopyTest, ManyThreadsEachUseTheirOwnWindow) {
  std::vector<std::string> srcs;
  for (int t = 0; t < 4; ++t) srcs.push_back(KernelCopyPattern((1u << 20) + static_cast<size_t>(t) * 4099));
  std::vector<std::thread> ts;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        if (KernelCopyCollect(srcs[t], 65536) != srcs[t]) bad++;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace kvfs
