// FuseSession (fuse/session.h): the FUSE session set-up shared by kvfs and kvfs-nfsim.
#define FUSE_USE_VERSION 312

#include "fuse/session.h"

#include <fuse_lowlevel.h>

#include <vector>

namespace kvfs {

FuseSession::~FuseSession() {
  Unmount();
  if (se_) fuse_session_destroy(se_);
}

bool FuseSession::Create(const char* progname, const std::string& opts, const fuse_lowlevel_ops& ops,
                         void* userdata) {
  std::vector<std::string> argv_s = {progname};
  if (!opts.empty()) {
    argv_s.push_back("-o");
    argv_s.push_back(opts);
  }
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  se_ = fuse_session_new(&args, &ops, sizeof(ops), userdata);
  fuse_opt_free_args(&args);
  return se_ != nullptr;
}

bool FuseSession::Mount(const std::string& mountpoint) {
  if (!se_ || fuse_session_mount(se_, mountpoint.c_str()) != 0) return false;
  mounted_ = true;
  return true;
}

bool FuseSession::InstallSignalHandlers() {
  if (!se_ || fuse_set_signal_handlers(se_) != 0) return false;
  signals_ = true;
  return true;
}

int FuseSession::Loop(bool clone_fd, unsigned max_threads, unsigned max_idle_threads) {
  if (!se_) return -1;
  fuse_loop_config* cfg = fuse_loop_cfg_create();
  fuse_loop_cfg_set_clone_fd(cfg, clone_fd ? 1 : 0);
  fuse_loop_cfg_set_max_threads(cfg, max_threads);
  fuse_loop_cfg_set_idle_threads(cfg, max_idle_threads);
  int r = fuse_session_loop_mt(se_, cfg);
  fuse_loop_cfg_destroy(cfg);
  Unmount();
  return r;
}

void FuseSession::Unmount() {
  if (!se_) return;
  if (signals_) {
    fuse_remove_signal_handlers(se_);
    signals_ = false;
  }
  if (mounted_) {
    fuse_session_unmount(se_);
    mounted_ = false;
  }
}

void FuseSession::Exit() {
  if (se_) fuse_session_exit(se_);
}

}  // namespace kvfs
