// HybridClock: the hybrid logical clock that stamps journal entries (docs/design.md §2 "Journal").
//
// Algorithm: S. Kulkarni, M. Demirbas et al., "Logical Physical Clocks and Consistent Snapshots in
// Globally Distributed Databases" (OPODIS 2014), "HLC". A stamp is one 64-bit integer
//
//     stamp = physical_ms << 16 | logical        (physical_ms: ms since the Unix epoch, 48 bits)
//
// so stamps compare as plain integers. With l = the last stamp this clock issued or saw and pt = the
// wall clock in ms:
//   Now()          (a local event: a journaled operation)    l = max(l + 1, pt << 16)
//   Update(remote) (an applied peer entry)                    l = max(max(l, remote) + 1, pt << 16)
// which is exactly the paper's (l, c) update rules written on the packed integer: when the logical half
// would overflow (65 536 events within one ms) the carry bumps the physical half by 1 ms, so the stamp
// runs ahead of the wall clock by that much until the wall clock catches up; ordering is never broken.
//
// Floor: SetFloor(persisted_max) makes every later stamp > persisted_max, so a restart whose wall clock
// went backwards never issues a stamp below one it persisted before (the Store keeps the floor in the
// index's `meta` column family and in snapshots).
//
// Skew bound: Update() rejects a remote stamp whose physical part is more than max_skew_ms ahead of this
// node's wall clock (a peer with a broken clock must not drag every node's clock into the future, which
// would make its entries win every last-writer-wins race). A rejected stamp leaves the clock unchanged.
//
// Thread safety: every method is thread-safe and lock-free (one atomic, compare-and-swap loops).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>

#include "blockstore/status.h"

namespace kvfs {

class HybridClock {
 public:
  static constexpr int kLogicalBits = 16;
  static constexpr uint64_t kLogicalMask = (uint64_t{1} << kLogicalBits) - 1;
  static constexpr uint64_t kDefaultMaxSkewMs = 60'000;

  // The physical clock: milliseconds since the Unix epoch. Tests inject a fake one.
  using PhysicalClock = std::function<uint64_t()>;

  // max_skew_ms: how far (ms) a remote stamp may be ahead of our wall clock; physical: default
  // SystemPhysicalMs (CLOCK_REALTIME).
  explicit HybridClock(uint64_t max_skew_ms = kDefaultMaxSkewMs, PhysicalClock physical = {});

  // A new stamp for a local event: strictly greater than every stamp returned or observed before (by
  // Now, Update or SetFloor) and >= the wall clock (ms << 16).
  uint64_t Now();

  // Observes a stamp of an applied peer entry: afterwards Now() > remote. InvalidArgument (clock
  // unchanged) if remote's physical part is more than max_skew_ms ahead of the wall clock.
  Status Update(uint64_t remote);

  // Every later stamp will be > persisted_max (the highest stamp persisted before a restart). Never
  // moves the clock backwards.
  void SetFloor(uint64_t persisted_max);

  // The last stamp issued or observed (what the Store persists as the floor). Does not advance.
  uint64_t Last() const { return last_.load(std::memory_order_acquire); }

  uint64_t max_skew_ms() const { return max_skew_ms_; }

  static constexpr uint64_t Make(uint64_t physical_ms, uint64_t logical) {
    return (physical_ms << kLogicalBits) | (logical & kLogicalMask);
  }
  static constexpr uint64_t PhysicalMs(uint64_t stamp) { return stamp >> kLogicalBits; }
  static constexpr uint64_t Logical(uint64_t stamp) { return stamp & kLogicalMask; }
  // CLOCK_REALTIME in milliseconds.
  static uint64_t SystemPhysicalMs();

 private:
  uint64_t Physical() const { return physical_ ? physical_() : SystemPhysicalMs(); }

  const uint64_t max_skew_ms_;
  const PhysicalClock physical_;
  std::atomic<uint64_t> last_{0};
};

}  // namespace kvfs
