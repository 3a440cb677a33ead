// Helpers the subcommands of the kvfs command share (tools/mount_cmd.cc, mount_checks.cc, umount_cmd.cc,
// stats_cmd.cc): exit codes, one-line errors and warnings, paths and mount points as
// /proc/self/mountinfo lists them, reading the daemon's virtual xattrs, and where a daemon leaves its
// final Store::Close result for `kvfs umount`.
//
// Thread safety: plain functions without shared state (Die ends the process).
#pragma once

#include <sys/types.h>

#include <string>

namespace kvfs::cli {

inline constexpr int kExitUsage = 2;  // bad invocation or environment the user can fix
inline constexpr int kExitFail = 1;   // runtime failure

// "kvfs: MSG" on stderr, then exit(code).
[[noreturn]] void Die(int code, const std::string& msg);

// Something merely unusual in the options: one line on the terminal, the mount goes on.
void Warn(const std::string& msg);

// realpath(3) of p; p itself when that fails.
std::string RealPath(const std::string& p);

bool IsDir(const std::string& p);

// True if `path` (a real path) is a mount point in /proc/self/mountinfo.
bool IsMountPoint(const std::string& path);

// The file system type of the mount at `path` (a real path) in /proc/self/mountinfo ("" if none):
// the field after " - ".
std::string MountFsType(const std::string& path);

bool DirEmpty(const std::string& p);

// getxattr(2) of `name` into *out (any size). False with errno set (ENODATA, ENOTCONN, ...).
bool ReadXattr(const std::string& path, const char* name, std::string* out);

// The daemon's final result for `kvfs umount` (which cannot wait(2) for a process it did not start):
// <run dir>/close-<pid> = the Store::Close error, written just before the daemon exits if that failed
// (none when it succeeded; a stale one of an earlier process with the same pid is removed at mount);
// umount reads and removes it. Run dir: /run/kvfs when /run is writable (root), else /tmp/kvfs-<uid>.
std::string CloseStatusPath(pid_t pid);

}  // namespace kvfs::cli
