// kvfs-bench's phases: RunMode runs one profile in one mode on a fresh stack: init, store, lookup,
// [client restart], load, warm load and, with --fill-bytes, load with a full cache; each phase on
// --threads threads (lookup on one), timed per operation and per syscall, with the backing (nfsim)
// operations, kvfs's FUSE requests and the CPU seconds of every process during the phase, as one JSON
// object per mode (what the report and tools/bench_plot.py read). Also the terminal progress line.
// Called by main (tools/kvfs_bench.cc).
//
// Thread safety: RunMode from one thread at a time (the progress counters are process-wide);
// ProgressLoop runs on a thread of its own until *stop.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>

#include "tools/bench_config.h"
#include "tools/bench_profiles.h"

namespace kvfs::bench {

// Redraws "<profile/mode phase> [####....] done/total" on stderr every 100 ms (only when tty) until *stop.
void ProgressLoop(std::atomic<bool>* stop, bool tty);
// Blanks the progress line's label (between profiles).
void ClearProgressLabel();

// One profile in one mode ("direct", "ceiling", "kvfs", "tmpfs", "s3-kvfs" or "s3-object"): {"ok",
// "phases": {...}, ...}, or {"ok": false, "error": ...}. Never throws for a failure of the workload or
// the stack. In the s3 modes every phase has "s3": the S3 requests it sent, by type and per unit
// (S3Delta); s3-kvfs also "s3_store_through_unmount" (store phase start to the first unmount's counters).
json RunMode(const Config& cfg, const Profile& p, size_t size, const std::string& mode);

// after - before of two S3 counter objects (S3ClientCounters' shape): {"requests": {type: N} (types with
// N > 0, and "total"), "requests_per_unit": {type: N / units}, "bytes_sent", "bytes_received"}.
json S3Delta(const json& after, const json& before, uint64_t units);

}  // namespace kvfs::bench
