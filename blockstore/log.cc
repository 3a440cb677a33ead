#include "blockstore/log.h"

#include <cstring>

namespace kvfs {

LogRateLimiter::LogRateLimiter(uint32_t burst, std::chrono::milliseconds interval, size_t max_keys, Clock clock)
    : burst_(burst == 0 ? 1 : burst), interval_(interval), max_keys_(max_keys), clock_(std::move(clock)) {
  if (!clock_) clock_ = [] { return std::chrono::steady_clock::now(); };
}

bool LogRateLimiter::Allow(std::string_view key, uint64_t* suppressed_out, double* window_s_out) {
  *suppressed_out = 0;
  const auto now = clock_();
  std::lock_guard<std::mutex> l(mu_);
  auto it = windows_.find(std::string(key));
  if (it == windows_.end()) {
    if (windows_.size() >= max_keys_) {
      for (auto w = windows_.begin(); w != windows_.end();) {
        w = now - w->second.start >= interval_ ? windows_.erase(w) : std::next(w);
      }
      if (windows_.size() >= max_keys_) return true;  // fail open
    }
    it = windows_.emplace(std::string(key), Window{now, 0, 0}).first;
  }
  Window& w = it->second;
  if (now - w.start >= interval_) {
    *suppressed_out = w.suppressed;
    if (window_s_out) *window_s_out = std::chrono::duration<double>(now - w.start).count();
    w = Window{now, 0, 0};
  }
  if (w.logged < burst_) {
    w.logged++;
    return true;
  }
  w.suppressed++;
  return false;
}

LogRateLimiter& DefaultLogLimiter() {
  static LogRateLimiter* limiter = new LogRateLimiter();  // never destroyed: used until exit
  return *limiter;
}

std::string ErrnoText(const Status& s) {
  std::string out = s.ToString();
  const int e = s.ToErrno();
  if (s.ok() || e == 0) return out;
  const char* name = strerrorname_np(e);
  out += " [errno " + std::to_string(e) + (name ? std::string(" ") + name : std::string()) + "]";
  return out;
}

std::string LogKey(std::string_view site, const Status& s) {
  const int e = s.ToErrno();
  const char* name = e ? strerrorname_np(e) : nullptr;
  std::string k(site);
  k += ':';
  if (name) k += name;
  else k += s.ToString().substr(0, s.ToString().find(':'));
  return k;
}

}  // namespace kvfs
