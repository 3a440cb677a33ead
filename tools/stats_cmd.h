// `kvfs stats MOUNTPOINT [--json]`: reads the daemon's counters (the user.kvfs.stats xattr of the mount
// root, one JSON object: fuse/stats_render.h) and prints them as JSON or as a table. Called by main
// (tools/kvfs_main.cc).
//
// Thread safety: single-threaded CLI code.
#pragma once

#include <string>

namespace kvfs::cli {

// The command's exit code (0); errors exit(1|2) with one line.
int RunStats(const std::string& mp_in, bool json);

}  // namespace kvfs::cli
