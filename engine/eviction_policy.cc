// Eviction policy (engine/eviction_policy.h): limits, targets, reinsertion choice.
// Pure functions; no I/O, no locks. Callers: engine/capacity.cc, engine/store_stats.cc, unit tests.
#include "engine/eviction_policy.h"

#include <algorithm>

namespace kvfs {

Result<EvictionLimits> EvictionLimits::Make(uint64_t capacity, uint64_t segment_size, uint64_t global_high,
                                            uint64_t global_low) {
  EvictionLimits l;
  l.capacity = capacity;
  l.segment_size = segment_size;
  l.global_high = global_high;
  l.global_low = global_low ? global_low : global_high / 8 * 7;
  if (l.global_high && l.global_low >= l.global_high) {
    return Status::InvalidArgument("the low watermark must be below the high watermark");
  }
  if (capacity) {
    l.node_high = capacity >= 3 * segment_size ? capacity - segment_size : capacity;
    const uint64_t step = std::max(segment_size, capacity / 8);
    l.node_low = l.node_high > step ? l.node_high - step : 0;
    l.hard_limit = capacity + segment_size;
  }
  return l;
}

uint64_t EvictionTarget(const EvictionLimits& limits, uint64_t node_bytes, uint64_t peer_bytes) {
  uint64_t target = kNoEvictionTarget;
  if (limits.capacity && node_bytes > limits.node_high) target = limits.node_low;
  if (limits.global_high) {
    const uint64_t global = node_bytes + peer_bytes;
    if (global > limits.global_high && global > 0) {
      // This node's proportional share of the excess over the low watermark.
      const double share = static_cast<double>(global - limits.global_low) * node_bytes / global;
      const uint64_t t = node_bytes > share ? node_bytes - static_cast<uint64_t>(share) : 0;
      target = std::min(target, t);
    }
  }
  return target;
}

uint64_t EmergencyTarget(const EvictionLimits& limits, uint64_t target, uint64_t node_bytes,
                         const uint64_t* avail, uint64_t pending_unlink_bytes) {
  target = std::min(target, node_bytes ? node_bytes - 1 : 0);  // at least the oldest segment
  const uint64_t room = 2 * limits.segment_size;
  if (avail && *avail < room) {
    const uint64_t want = room - *avail;
    if (want > pending_unlink_bytes) {
      const uint64_t more = want - pending_unlink_bytes;
      target = std::min(target, node_bytes > more ? node_bytes - more : 0);
    }
  }
  return target;
}

ReinsertPlan ChooseReinsertions(const std::unordered_map<uint64_t, uint32_t>& hits, uint32_t min_hits,
                                double max_fraction, uint64_t segment_bytes) {
  ReinsertPlan plan;
  for (const auto& [off, n] : hits) {
    if (n < min_hits) continue;
    plan.records.emplace_back(n, off);
  }
  std::sort(plan.records.begin(), plan.records.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  plan.budget = static_cast<uint64_t>(max_fraction * static_cast<double>(segment_bytes));
  return plan;
}

}  // namespace kvfs
