// Two renderings of one StatsSnapshot (kvfs_fs.h): JSON for `kvfs stats --json` (the user.kvfs.stats
// xattr) and the Prometheus text exposition format 0.0.4 for `kvfs mount --metrics-listen`.
//
// Prometheus names follow its conventions (https://prometheus.io/docs/practices/naming/): prefix
// kvfs_, base units in the name (_bytes, _seconds), _total for counters. The metric list is in
// docs/operations.md ("Metrics"). Both functions are pure (no I/O, no locks) and thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "fuse/kvfs_fs.h"

namespace kvfs {

// One JSON object (the keys `kvfs stats` has always printed, plus fuse_ops, nodes, peers,
// backing_ops).
std::string StatsToJson(const StatsSnapshot& s);

// The text exposition: # HELP / # TYPE lines and samples, '\n'-terminated.
std::string StatsToPrometheus(const StatsSnapshot& s);

// A label value escaped for the exposition format (backslash, double quote, newline).
std::string PrometheusEscape(std::string_view v);

}  // namespace kvfs
