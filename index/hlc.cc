#include "index/hlc.h"

#include <time.h>

#include <algorithm>
#include <string>

namespace kvfs {

HybridClock::HybridClock(uint64_t max_skew_ms, PhysicalClock physical)
    : max_skew_ms_(max_skew_ms), physical_(std::move(physical)) {}

uint64_t HybridClock::SystemPhysicalMs() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1'000'000;
}

uint64_t HybridClock::Now() {
  const uint64_t pt = Make(Physical(), 0);
  uint64_t last = last_.load(std::memory_order_acquire);
  for (;;) {
    const uint64_t next = std::max(last + 1, pt);
    if (last_.compare_exchange_weak(last, next, std::memory_order_acq_rel, std::memory_order_acquire)) {
      return next;
    }
  }
}

Status HybridClock::Update(uint64_t remote) {
  const uint64_t wall_ms = Physical();
  if (PhysicalMs(remote) > wall_ms + max_skew_ms_) {
    return Status::InvalidArgument("HLC stamp " + std::to_string(remote) + " is " +
                                   std::to_string(PhysicalMs(remote) - wall_ms) +
                                   " ms ahead of the local clock (max skew " + std::to_string(max_skew_ms_) +
                                   " ms)");
  }
  const uint64_t pt = Make(wall_ms, 0);
  uint64_t last = last_.load(std::memory_order_acquire);
  for (;;) {
    const uint64_t next = std::max(std::max(last, remote) + 1, pt);
    if (last_.compare_exchange_weak(last, next, std::memory_order_acq_rel, std::memory_order_acquire)) {
      return Status::OK();
    }
  }
}

void HybridClock::SetFloor(uint64_t persisted_max) {
  uint64_t last = last_.load(std::memory_order_acquire);
  while (last < persisted_max &&
         !last_.compare_exchange_weak(last, persisted_max, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
  }
}

}  // namespace kvfs
