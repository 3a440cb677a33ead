// Logging helpers over spdlog (the one logging library of kvfs; Debian's libspdlog-dev).
//
// Rate limiting of repeated errors: a failing export or a corrupt segment can make every request fail
// the same way, thousands of times a second; the log must stay readable and the disk must not fill.
// LogLimited(level, key, fmt, args...) logs at most `burst` messages per `key` per `interval`
// (default 5 per 10 s); the rest are counted, and the next message of that key after the interval
// is preceded by one line "suppressed K similar messages (KEY) in the last N s". Keys name a call site
// and a cause (e.g. "fuse-read:EIO"), not a path, so one bad disk does not get one key per file.
//
// Every I/O error line carries the path and the errno: ErrnoText(status) renders a Status as
// "<code>: <message> [errno 5 EIO]" (the Env's messages already name the operation and the backing
// path; the FUSE layer adds the path in the mount).
//
// Thread safety: LogRateLimiter and LogLimited are thread-safe (one mutex; called only on error paths).
#pragma once

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "blockstore/status.h"

namespace kvfs {

class LogRateLimiter {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  // burst: messages allowed per key per interval (>= 1). max_keys bounds memory: when a new key would
  // exceed it, keys whose window ended are forgotten first (their unreported suppressions are lost),
  // then, if still full, the new key is not rate-limited (fail open: errors are never all lost).
  explicit LogRateLimiter(uint32_t burst = 5, std::chrono::milliseconds interval = std::chrono::seconds(10),
                          size_t max_keys = 1024, Clock clock = {});

  // Whether a message under key may be logged now. *suppressed_out = the number of messages of key
  // suppressed in its previous window, reported once when the next window starts (else 0); the caller
  // logs that count first. *window_s_out (optional) = that window's length in seconds.
  bool Allow(std::string_view key, uint64_t* suppressed_out, double* window_s_out = nullptr);

 private:
  struct Window {
    std::chrono::steady_clock::time_point start;
    uint32_t logged = 0;
    uint64_t suppressed = 0;
  };
  const uint32_t burst_;
  const std::chrono::milliseconds interval_;
  const size_t max_keys_;
  Clock clock_;
  std::mutex mu_;
  std::unordered_map<std::string, Window> windows_;
};

// The limiter LogLimited uses (process-wide).
LogRateLimiter& DefaultLogLimiter();

// "<Status::ToString()> [errno N NAME]" (no errno part for an OK status or errno 0).
std::string ErrnoText(const Status& s);

// A rate-limit key: "<site>:<errno name>" (e.g. "fuse-read:EIO"), or the status code name without errno.
std::string LogKey(std::string_view site, const Status& s);

template <typename... Args>
void LogLimited(spdlog::level::level_enum level, std::string_view key, spdlog::format_string_t<Args...> fmt,
                Args&&... args) {
  uint64_t suppressed = 0;
  double window_s = 0;
  const bool allow = DefaultLogLimiter().Allow(key, &suppressed, &window_s);
  if (suppressed > 0) {
    spdlog::log(level, "suppressed {} similar messages ({}) in the last {:.0f} s", suppressed, key, window_s);
  }
  if (allow) spdlog::log(level, fmt, std::forward<Args>(args)...);
}

}  // namespace kvfs
