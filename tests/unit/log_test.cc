// LogRateLimiter (blockstore/log.h): at most `burst` messages per key per interval, the suppressed count
// reported once when the key's next window starts; ErrnoText.
#include "blockstore/log.h"

#include <gtest/gtest.h>

#include <spdlog/sinks/ostream_sink.h>

#include <sstream>

namespace kvfs {
namespace {

using namespace std::chrono_literals;

struct FakeClock {
  std::chrono::steady_clock::time_point t{std::chrono::seconds(1000)};
  LogRateLimiter::Clock fn() {
    return [this] { return t; };
  }
};

TEST(LogRateLimiter, BurstThenSuppressThenReportOnce) {
  FakeClock c;
  LogRateLimiter rl(3, 10s, 16, c.fn());
  uint64_t sup = 99;
  double win = 0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(rl.Allow("read:EIO", &sup, &win));
    EXPECT_EQ(sup, 0u);
  }
  for (int i = 0; i < 7; ++i) {
    c.t += 1s;  // still inside the 10 s window (ends at +10 s)
    EXPECT_FALSE(rl.Allow("read:EIO", &sup, &win));
    EXPECT_EQ(sup, 0u);
  }
  // Another key has its own budget.
  EXPECT_TRUE(rl.Allow("write:ENOSPC", &sup));
  EXPECT_EQ(sup, 0u);
  c.t += 3s;  // 10 s after the window started: a new window; the 7 suppressed are reported once
  EXPECT_TRUE(rl.Allow("read:EIO", &sup, &win));
  EXPECT_EQ(sup, 7u);
  EXPECT_DOUBLE_EQ(win, 10.0);
  EXPECT_TRUE(rl.Allow("read:EIO", &sup));
  EXPECT_EQ(sup, 0u);
  EXPECT_TRUE(rl.Allow("read:EIO", &sup));
  EXPECT_FALSE(rl.Allow("read:EIO", &sup));
  // A window without suppressions reports nothing.
  c.t += 60s;
  EXPECT_TRUE(rl.Allow("write:ENOSPC", &sup));
  EXPECT_EQ(sup, 0u);
}

TEST(LogRateLimiter, KeyTableIsBoundedAndFailsOpen) {
  FakeClock c;
  LogRateLimiter rl(1, 10s, 2, c.fn());
  uint64_t sup = 0;
  EXPECT_TRUE(rl.Allow("a", &sup));
  EXPECT_TRUE(rl.Allow("b", &sup));
  EXPECT_FALSE(rl.Allow("a", &sup));
  // Table full, no window ended: a third key is not limited (never lose all errors).
  EXPECT_TRUE(rl.Allow("c", &sup));
  EXPECT_TRUE(rl.Allow("c", &sup));
  c.t += 11s;  // windows of a and b ended: they are forgotten to make room for c
  EXPECT_TRUE(rl.Allow("c", &sup));
  EXPECT_FALSE(rl.Allow("c", &sup));
}

TEST(LogLimited, WritesTheSuppressedLine) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  auto logger = std::make_shared<spdlog::logger>("log_test", sink);
  logger->set_pattern("%l %v");
  auto prev = spdlog::default_logger();
  spdlog::set_default_logger(logger);
  // The default limiter: 5 per key per 10 s. A key unique to this test.
  for (int i = 0; i < 8; ++i) LogLimited(spdlog::level::err, "log_test:EIO", "read of /x/{}: failed", i);
  spdlog::set_default_logger(prev);
  const std::string s = out.str();
  EXPECT_NE(s.find("read of /x/4: failed"), std::string::npos);
  EXPECT_EQ(s.find("read of /x/5: failed"), std::string::npos);
  size_t lines = 0;
  for (char ch : s) lines += ch == '\n';
  EXPECT_EQ(lines, 5u);
}

TEST(ErrnoText, NamesTheErrno) {
  EXPECT_EQ(ErrnoText(Status::IOError("pread /b/seg: Input/output error", EIO)),
            "IOError: pread /b/seg: Input/output error [errno 5 EIO]");
  EXPECT_EQ(ErrnoText(Status::NoSpace("pwrite /b/seg: No space left on device")).find("[errno 28 ENOSPC]") !=
                std::string::npos,
            true);
  EXPECT_EQ(ErrnoText(Status::OK()), "OK");
}

}  // namespace
}  // namespace kvfs
