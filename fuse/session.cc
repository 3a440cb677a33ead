// FuseSession (fuse/session.h): the FUSE session set-up shared by kvfs and kvfs-nfsim.
#define FUSE_USE_VERSION 312

#include "fuse/session.h"

#include <fuse_lowlevel.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

namespace kvfs {

namespace {

// A mountinfo path field: spaces, tabs, newlines and backslashes are written as \ooo octal.
std::string UnescapeMountinfo(const std::string& s) {
  std::string out;
  auto octal = [&](size_t i) { return i < s.size() && s[i] >= '0' && s[i] <= '7'; };
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] == '\\' && octal(i + 1) && octal(i + 2) && octal(i + 3)) {
      out.push_back(static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// The FUSE mounts on `path` now: (mountinfo id, MAJOR:MINOR) of each line whose mount point is `path`
// and whose file system type is fuse*. Fields: id parent MAJOR:MINOR root mount-point options
// [optional...] - fstype source super-options.
std::vector<std::pair<std::string, std::string>> FuseMountsAt(const std::string& path) {
  std::vector<std::pair<std::string, std::string>> out;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string id, parent, majmin, root, mp, w, fstype;
    if (!(f >> id >> parent >> majmin >> root >> mp)) continue;
    while (f >> w && w != "-") {
    }
    if (!(f >> fstype)) continue;
    if (UnescapeMountinfo(mp) == path && fstype.rfind("fuse", 0) == 0) out.emplace_back(id, majmin);
  }
  return out;
}

std::string Resolved(const std::string& path) {
  char real[PATH_MAX];
  return ::realpath(path.c_str(), real) ? std::string(real) : path;
}

}  // namespace

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
  if (!se_) return false;
  mountpoint_ = Resolved(mountpoint);
  premount_ids_.clear();
  for (const auto& m : FuseMountsAt(mountpoint_)) premount_ids_.push_back(m.first);
  if (fuse_session_mount(se_, mountpoint.c_str()) != 0) return false;
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

bool FuseSession::SetReadAhead(uint32_t kb, std::string* error) const {
  if (!mounted_) {
    *error = "not mounted";
    return false;
  }
  std::vector<std::string> devs;
  for (const auto& [id, dev] : FuseMountsAt(mountpoint_)) {
    if (std::find(premount_ids_.begin(), premount_ids_.end(), id) == premount_ids_.end()) devs.push_back(dev);
  }
  if (devs.size() != 1) {
    *error = devs.empty() ? "no new FUSE mount at " + mountpoint_ + " in /proc/self/mountinfo"
                          : std::to_string(devs.size()) + " FUSE mounts appeared at " + mountpoint_ +
                                " at once (another mount on the same path): cannot tell which is this one";
    return false;
  }
  const std::string knob = "/sys/class/bdi/" + devs[0] + "/read_ahead_kb";
  std::FILE* f = std::fopen(knob.c_str(), "w");
  if (!f) {
    *error = "cannot open " + knob + ": " + std::strerror(errno);
    return false;
  }
  const bool ok = std::fprintf(f, "%u\n", kb) > 0;
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed) {
    *error = "cannot write " + knob + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

void FuseSession::Exit() {
  if (se_) fuse_session_exit(se_);
}

}  // namespace kvfs
