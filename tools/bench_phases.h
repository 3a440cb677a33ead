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

// One profile in one mode ("direct", "ceiling", "kvfs" or "tmpfs"): {"ok", "phases": {...}, ...}, or
// {"ok": false, "error": ...}. Never throws for a failure of the workload or the stack.
json RunMode(const Config& cfg, const Profile& p, size_t size, const std::string& mode);

}  // namespace kvfs::bench
