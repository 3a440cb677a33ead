// Eviction policy (store.h "Capacity and eviction", docs/design.md §6): the decisions of the evictor,
// apart from its mechanism (engine/capacity.cc: accounting, the evictor thread, drops, unlinks,
// RESERVE). Pure functions of numbers: no I/O, no locks, no clock.
//  * EvictionLimits: per-node high/low watermarks and hard limit from the capacity, the global
//    watermarks, validated.
//  * EvictionTarget / EmergencyTarget: how many bytes this node keeps after a round.
//  * ChooseReinsertions: which live records of a segment about to be dropped are appended again.
//  * ShouldSealActiveEarly: on a full export, whether the active segment is sealed now to be reclaimed.
//  * AutoSegmentSize: the segment size of a mount that does not give one, from the export's size.
// Which segment goes first (segments with no live record, then FIFO: the oldest (generation, seq) that
// may be dropped) is the order of the evictor's segment map plus one index read per segment
// (EvictOnce); what "may be dropped" means (sealed, unpinned, no append in flight at its seal) is the
// mechanism's, since it needs its locks.
//
// Callers: StoreImpl (engine/capacity.cc, engine/store_stats.cc); tests/unit/eviction_policy_test.cc.
// Thread safety: stateless; EvictionLimits is a value.
#pragma once

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "blockstore/status.h"

namespace kvfs {

struct EvictionLimits {
  uint64_t capacity = 0, segment_size = 0;
  // Per node (0 without a capacity): evict above high down to low; writers wait above hard_limit.
  //   high = capacity - segment_size (capacity when it is under three segments)
  //   low = high - max(segment_size, capacity / 8);  hard_limit = capacity + segment_size
  uint64_t node_high = 0, node_low = 0, hard_limit = 0;
  // Global (0 = none): over all nodes' segments; low defaults to 7/8 of high.
  uint64_t global_high = 0, global_low = 0;

  // Live data is evicted only with a capacity or a global watermark; otherwise only dead segments go.
  bool bounded() const { return capacity > 0 || global_high > 0; }
  // InvalidArgument when global_low >= global_high.
  static Result<EvictionLimits> Make(uint64_t capacity, uint64_t segment_size, uint64_t global_high,
                                     uint64_t global_low);
};

inline constexpr uint64_t kNoEvictionTarget = UINT64_MAX;

// The bytes this node should keep: node_low when over node_high (with a capacity), and over the global
// high watermark its proportional share (node_bytes / global bytes) of the excess over the global low
// watermark is removed; the smaller of the two. kNoEvictionTarget when neither applies. peer_bytes is
// read only with a global watermark.
uint64_t EvictionTarget(const EvictionLimits& limits, uint64_t node_bytes, uint64_t peer_bytes);

// The backing store itself is full (bounded stores only): drop at least the oldest segment, and enough
// that, with the bytes already awaiting unlink, two segments' worth of space is free. avail: the
// backing's free bytes, or nullptr when unknown (statfs failed). Returns min(target, that).
uint64_t EmergencyTarget(const EvictionLimits& limits, uint64_t target, uint64_t node_bytes,
                         const uint64_t* avail, uint64_t pending_unlink_bytes);

// The export is full and the active segment (segment_bytes written so far, live_bytes of committed
// files in it) is mostly dead: sealed now, it can be reclaimed as a dead segment once its last live
// file goes, instead of holding its dead bytes until it fills up (it may never: the export is full).
// True when at least half of it, and at least kSealEarlyMinDeadBytes, is dead.
inline constexpr uint64_t kSealEarlyMinDeadBytes = 256ull << 10;
inline bool ShouldSealActiveEarly(uint64_t segment_bytes, uint64_t live_bytes) {
  const uint64_t dead = segment_bytes > live_bytes ? segment_bytes - live_bytes : 0;
  return dead >= kSealEarlyMinDeadBytes && dead >= segment_bytes - dead;
}

// The segment size when none is given (kvfs mount without --segment-size): 1/8 of the space kvfs may
// use (the export's size from statvfs, or a smaller --capacity / --high-watermark), rounded DOWN to a
// power of two, clamped to [kMinAutoSegmentSize, kDefaultSegmentSize]. So an export of 32 MiB gets
// 4 MiB segments, 64 MiB 8 MiB, 512 MiB 64 MiB, 2 GiB and more 256 MiB. Space comes back only in whole
// segments (a segment with one live file keeps its dead bytes), so a small export needs many segments.
// usable_bytes 0 (unknown): kDefaultSegmentSize.
inline constexpr uint64_t kDefaultSegmentSize = 256ull << 20;
inline constexpr uint64_t kMinAutoSegmentSize = 4ull << 20;
inline uint64_t AutoSegmentSize(uint64_t usable_bytes) {
  if (usable_bytes == 0) return kDefaultSegmentSize;
  const uint64_t eighth = usable_bytes / 8;
  uint64_t p = kMinAutoSegmentSize;
  while (p < kDefaultSegmentSize && p * 2 <= eighth) p *= 2;
  return p;
}

// Hits-based reinsertion (CacheLib Navy's hits policy): the records of a segment about to be dropped
// with >= min_hits reads, most hits first (ties: lower offset first), and the byte budget for them
// (max_fraction of the segment's bytes). The caller appends them in order while each fits the
// remaining budget, and stops once less than one block is left.
struct ReinsertPlan {
  std::vector<std::pair<uint32_t, uint64_t>> records;  // (hits, record offset)
  uint64_t budget = 0;
};
ReinsertPlan ChooseReinsertions(const std::unordered_map<uint64_t, uint32_t>& hits, uint32_t min_hits,
                                double max_fraction, uint64_t segment_bytes);

}  // namespace kvfs
