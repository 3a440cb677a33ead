// FuseSession (fuse/session.h): the FUSE session set-up shared by kvfs and kvfs-nfsim.
#define FUSE_USE_VERSION 312

#include "fuse/session.h"

#include <fuse_lowlevel.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
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

}  // namespace

bool FuseSession::SetReadAhead(const std::string& mountpoint, uint32_t kb, std::string* error) {
  char real[PATH_MAX];
  const std::string path = ::realpath(mountpoint.c_str(), real) ? std::string(real) : mountpoint;
  std::ifstream in("/proc/self/mountinfo");
  if (!in) {
    *error = "cannot read /proc/self/mountinfo";
    return false;
  }
  // Fields: id parent MAJOR:MINOR root mount-point options [optional...] - fstype source super-options.
  std::string line, dev;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string id, parent, majmin, root, mp;
    if (!(f >> id >> parent >> majmin >> root >> mp)) continue;
    std::string w;
    while (f >> w && w != "-") {
    }
    std::string fstype;
    if (!(f >> fstype)) continue;
    if (UnescapeMountinfo(mp) == path && fstype.rfind("fuse", 0) == 0) dev = majmin;  // the newest wins
  }
  if (dev.empty()) {
    *error = "no FUSE mount at " + path + " in /proc/self/mountinfo";
    return false;
  }
  const std::string knob = "/sys/class/bdi/" + dev + "/read_ahead_kb";
  std::FILE* f = std::fopen(knob.c_str(), "w");
  if (!f) {
    *error = "cannot open " + knob;
    return false;
  }
  const bool ok = std::fprintf(f, "%u\n", kb) > 0;
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed) {
    *error = "cannot write " + knob;
    return false;
  }
  return true;
}

void FuseSession::Exit() {
  if (se_) fuse_session_exit(se_);
}

}  // namespace kvfs
