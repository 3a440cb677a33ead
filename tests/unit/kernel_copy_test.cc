#include "blockstore/kernel_copy.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdio>
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

TEST(KernelCopyTest, WriteThroughKernelLandsExactlyTheSourceBytes) {
  for (size_t n : {size_t{1}, size_t{4095}, size_t{65536} + 3, size_t{3u << 20} + 17}) {
    const std::string src = KernelCopyPattern(n);
    const size_t map_len = (n + 8192 + 4095) / 4096 * 4096;
    void* m = mmap(nullptr, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(m, MAP_FAILED);
    char* dst = static_cast<char*>(m) + 4096 + 1;  // unaligned, never touched before the call
    const KernelCopyStats before = GetKernelCopyStats();
    WriteThroughKernel(dst, src.data(), n);
    const KernelCopyStats after = GetKernelCopyStats();
    EXPECT_TRUE(std::string(dst, n) == src) << n;
    EXPECT_EQ(dst[-1], 0) << n;  // nothing written around the range
    EXPECT_EQ(dst[n], 0) << n;
    EXPECT_EQ(after.write_bytes - before.write_bytes, n);  // process_vm_writev works on this test box
    EXPECT_EQ(after.write_fallbacks, before.write_fallbacks);
    EXPECT_EQ(after.bytes, before.bytes);  // not a verification's copy
    munmap(m, map_len);
  }
}

TEST(KernelCopyTest, WriteThroughKernelFallsBackToMemcpy) {
  const std::string src = KernelCopyPattern(70000);
  std::string dst(70000, '\0');
  SetKernelCopyDisabledForTest(true);
  const KernelCopyStats before = GetKernelCopyStats();
  WriteThroughKernel(dst.data(), src.data(), src.size());
  const KernelCopyStats after = GetKernelCopyStats();
  SetKernelCopyDisabledForTest(false);
  EXPECT_TRUE(dst == src);
  EXPECT_EQ(after.write_fallbacks, before.write_fallbacks + 1);
  EXPECT_EQ(after.write_bytes, before.write_bytes);
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

// ---- --verify-copy: the decision from injected figures (never from timings), the modes ----

VerifyCopyProbe Figures(double fresh, double touched, double kernel, bool works = true) {
  VerifyCopyProbe p;
  p.in_place_fresh_s_per_gb = fresh;
  p.in_place_touched_s_per_gb = touched;
  p.kernel_copy_s_per_gb = kernel;
  p.kernel_copy_works = works;
  p.bytes = 512 * 1024;
  p.rounds = 4;
  return p;
}

TEST(VerifyCopyTest, KernelCopyOnlyWhenItClearlyBeatsTheFirstTouch) {
  // A guest with shadow paging (the dev VM): the first touch traps, ~3 s/GB; the kernel copy ~0.3 s/GB.
  EXPECT_TRUE(ChooseVerifyCopy(Figures(3.05, 0.13, 0.31)));
  // Bare metal / EPT: in place 0.13 s/GB beats the copy's 0.3 s/GB.
  EXPECT_FALSE(ChooseVerifyCopy(Figures(0.13, 0.12, 0.30)));
  // A small first-touch cost is not worth a second copy: the copy must cost under 80 % of in place.
  EXPECT_FALSE(ChooseVerifyCopy(Figures(0.35, 0.13, 0.30)));
  EXPECT_FALSE(ChooseVerifyCopy(Figures(1.0, 0.13, 0.80)));
  EXPECT_TRUE(ChooseVerifyCopy(Figures(1.0, 0.13, 0.79)));
  // The kernel refused the copy (vmsplice unavailable), no rounds, or a figure below the clock: in place.
  EXPECT_FALSE(ChooseVerifyCopy(Figures(3.05, 0.13, 0.31, /*works=*/false)));
  VerifyCopyProbe none = Figures(3.05, 0.13, 0.31);
  none.rounds = 0;
  EXPECT_FALSE(ChooseVerifyCopy(none));
  EXPECT_FALSE(ChooseVerifyCopy(Figures(3.05, 0.13, 0.0)));
  EXPECT_FALSE(ChooseVerifyCopy(Figures(0.0, 0.0, 0.31)));
}

TEST(VerifyCopyTest, ModesParseAndName) {
  VerifyCopyMode m = VerifyCopyMode::kKernel;
  ASSERT_TRUE(ParseVerifyCopyMode("auto", &m));
  EXPECT_EQ(m, VerifyCopyMode::kAuto);
  ASSERT_TRUE(ParseVerifyCopyMode("kernel", &m));
  EXPECT_EQ(m, VerifyCopyMode::kKernel);
  for (const char* s : {"inplace", "in-place", "in_place"}) {
    ASSERT_TRUE(ParseVerifyCopyMode(s, &m)) << s;
    EXPECT_EQ(m, VerifyCopyMode::kInPlace);
  }
  EXPECT_FALSE(ParseVerifyCopyMode("", &m));
  EXPECT_FALSE(ParseVerifyCopyMode("Kernel", &m));
  EXPECT_FALSE(ParseVerifyCopyMode("copy", &m));
  EXPECT_STREQ(VerifyCopyModeName(VerifyCopyMode::kAuto), "auto");
  EXPECT_STREQ(VerifyCopyModeName(VerifyCopyMode::kKernel), "kernel");
  EXPECT_STREQ(VerifyCopyModeName(VerifyCopyMode::kInPlace), "inplace");
}

TEST(VerifyCopyTest, ForcedModesSetThePathWithoutProbing) {
  const VerifyCopyChoice in_place = ConfigureVerifyCopy(VerifyCopyMode::kInPlace);
  EXPECT_FALSE(in_place.kernel);
  EXPECT_FALSE(in_place.probed);
  EXPECT_FALSE(VerifyUntouchedThroughKernel());
  EXPECT_EQ(GetVerifyCopy().mode, VerifyCopyMode::kInPlace);
  EXPECT_NE(DescribeVerifyCopy(in_place).find("in place (--verify-copy inplace; not probed)"), std::string::npos);
  const VerifyCopyChoice kernel = ConfigureVerifyCopy(VerifyCopyMode::kKernel);
  EXPECT_TRUE(kernel.kernel);
  EXPECT_FALSE(kernel.probed);
  EXPECT_TRUE(VerifyUntouchedThroughKernel());
  SetVerifyCopy(VerifyCopyChoice{});  // the process default: kernel
}

TEST(VerifyCopyTest, AutoProbesAndChoosesWhatTheDecisionSays) {
  const KernelCopyStats before = GetKernelCopyStats();
  const VerifyCopyChoice c = ConfigureVerifyCopy(VerifyCopyMode::kAuto);
  // The probe's bytes are not the read path's: the counters do not move.
  EXPECT_EQ(GetKernelCopyStats().bytes, before.bytes);
  EXPECT_EQ(GetKernelCopyStats().fallbacks, before.fallbacks);
  EXPECT_TRUE(c.probed);
  EXPECT_EQ(c.probe.rounds, 4);
  EXPECT_EQ(c.probe.bytes, 512u * 1024);
  EXPECT_TRUE(c.probe.kernel_copy_works);
  EXPECT_EQ(c.kernel, ChooseVerifyCopy(c.probe));
  EXPECT_EQ(VerifyUntouchedThroughKernel(), c.kernel);
  const std::string d = DescribeVerifyCopy(c);
  EXPECT_NE(d.find("(auto: in place "), std::string::npos) << d;
  EXPECT_NE(d.find("probe 4 x 512 KiB"), std::string::npos) << d;
  std::printf("verify copy: %s\n", d.c_str());  // the figures, for a person (not asserted)
  SetVerifyCopy(VerifyCopyChoice{});
}

}  // namespace
}  // namespace kvfs
