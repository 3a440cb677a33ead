// FuseSession: the libfuse3 low-level session set-up that kvfs (fuse/kvfs_fs.cc) and kvfs-nfsim
// (tools/nfsim.cc) share: fuse_session_new from one "-o" option string, mount, the SIGINT/SIGTERM/SIGHUP
// handlers that end the loop, the multi-threaded loop and its config (clone_fd, thread counts), unmount
// and destroy. The callers keep their own op tables, INIT capabilities and options.
//
// Built as its own small library (kvfs_fuse_session: libfuse only, no Store), so nfsim stays a plain
// passthrough daemon.
//
// Thread safety: Create/Mount/InstallSignalHandlers/Loop/Unmount and the destructor from one thread;
// Exit and get() from any thread (get() is set once by Create, before the loop starts).
// Invariants: after the destructor nothing of the session is left: signal handlers removed, the mount
// unmounted, the session destroyed (in that order); each step is done at most once.
#pragma once

#include <string>
#include <vector>

struct fuse_session;
struct fuse_lowlevel_ops;

namespace kvfs {

class FuseSession {
 public:
  FuseSession() = default;
  ~FuseSession();
  FuseSession(const FuseSession&) = delete;
  FuseSession& operator=(const FuseSession&) = delete;

  // fuse_session_new with argv {progname, "-o", opts} (opts may be empty: no -o). `ops` must outlive the
  // session; `userdata` is what fuse_req_userdata answers. False when libfuse refuses the options.
  bool Create(const char* progname, const std::string& opts, const fuse_lowlevel_ops& ops, void* userdata);
  // fuse_session_mount. False when the mount fails (or there is no session).
  bool Mount(const std::string& mountpoint);
  // fuse_set_signal_handlers: SIGINT/SIGTERM/SIGHUP end the loop. False on failure (or no session).
  bool InstallSignalHandlers();
  // fuse_session_loop_mt until the file system is unmounted or a signal arrives; then removes the signal
  // handlers and unmounts. Returns fuse_session_loop_mt's result (< 0 on error); -1 without a session.
  int Loop(bool clone_fd, unsigned max_threads, unsigned max_idle_threads);
  // Removes the signal handlers and unmounts, if still installed / mounted.
  void Unmount();
  // Ends the loop (fuse_session_exit).
  void Exit();

  fuse_session* get() const { return se_; }

  // Sets the read-ahead window of this session's mount (after Mount, before the loop answers INIT): `kb`
  // KiB into read_ahead_kb of the mount's backing device info (/sys/class/bdi/MAJOR:MINOR). The mount is
  // the one FUSE mount on the mount point that /proc/self/mountinfo lists now and did not list just
  // before Mount; when there are several (another mount on the same path raced this one) nothing is
  // written. The kernel gives a FUSE bdi 128 KiB and at INIT lowers it to the daemon's max_readahead,
  // never raises it, so a buffered sequential read(2) otherwise reaches the daemon as 128 KiB READs
  // whatever max_readahead says. Needs root (sysfs); does not block on the mount (no stat of it: before
  // INIT that would wait for the loop). False with *error set when nothing was written.
  bool SetReadAhead(uint32_t kb, std::string* error) const;

 private:
  fuse_session* se_ = nullptr;
  std::string mountpoint_;                 // as given to Mount, resolved (realpath)
  std::vector<std::string> premount_ids_;  // mountinfo ids of FUSE mounts on it just before Mount
  bool mounted_ = false;
  bool signals_ = false;
};

}  // namespace kvfs
