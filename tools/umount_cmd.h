// `kvfs umount MOUNTPOINT [--timeout SECONDS]`: a clean unmount (fusermount3 -u, which fails with EBUSY
// while files are open), then waits for the daemon (pid from user.kvfs.pid) to flush and exit, and
// reports its final Store::Close result (CloseStatusPath in tools/cli_util.h). A dead mount of a killed
// daemon (ENOTCONN) is cleared with a lazy unmount. Called by main (tools/kvfs_main.cc).
//
// Thread safety: single-threaded CLI code (it forks fusermount3).
#pragma once

#include <string>

namespace kvfs::cli {

// The command's exit code: 0 unmounted and the daemon exited cleanly. Errors exit(1|2) with one line.
int RunUmount(const std::string& mp_in, double timeout_s);

}  // namespace kvfs::cli
