#include "blockstore/env.h"

#include <algorithm>
#include <cerrno>

namespace kvfs {

namespace {
BackingModes g_backing_modes;
}  // namespace

BackingModes GetBackingModes() { return g_backing_modes; }
void SetBackingModes(const BackingModes& modes) { g_backing_modes = modes; }

Result<BackingModes> ParseBackingMode(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("invalid mode '" + text + "': " + why);
  };
  if (text.empty() || text.size() > 5) return bad("expected an octal mode such as 0600 or 0640");
  unsigned v = 0;
  for (char c : text) {
    if (c < '0' || c > '7') return bad("expected an octal mode such as 0600 or 0640");
    v = v * 8 + static_cast<unsigned>(c - '0');
  }
  if (v & ~0777u) return bad("only permission bits (at most 0777; no setuid, setgid or sticky bit)");
  if ((v & 0600u) != 0600u) return bad("the owner must keep read and write (0600)");
  BackingModes m;
  m.file = static_cast<mode_t>(v & 0666u);  // never executable
  m.dir = static_cast<mode_t>(m.file | ((m.file & 0444u) >> 2));
  return m;
}

Status Env::CreateDirs(const std::string& path) {
  if (path.empty() || path == "/") return Status::OK();
  auto st = Stat(path);
  if (st.ok()) {
    return st->is_dir ? Status::OK() : Status::FromErrno(ENOTDIR, path + ": not a directory");
  }
  if (!st.status().IsNotFound()) return st.status();
  auto slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0) KVFS_RETURN_IF_ERROR(CreateDirs(path.substr(0, slash)));
  return CreateDir(path);
}

Status Env::CreateExclusive(const std::string& path) {
  OpenOptions o;
  o.write = o.create = o.exclusive = true;
  auto f = Open(path, o);
  return f.ok() ? Status::OK() : f.status();
}

Status Env::CreateDirExclusive(const std::string& path) {
  return Status::NotSupported("mkdir as a claim: not on this backing: " + path);
}

Status Env::ReadFileToString(const std::string& path, std::string* out) {
  auto f = Open(path, OpenOptions{});
  if (!f.ok()) return f.status();
  out->clear();
  char buf[65536];
  uint64_t off = 0;
  for (;;) {
    size_t got = 0;
    KVFS_RETURN_IF_ERROR((*f)->Read(off, sizeof(buf), buf, &got));
    if (got == 0) break;
    out->append(buf, got);
    off += got;
  }
  return Status::OK();
}

Status Env::WriteFileAtomic(const std::string& path, const std::string& data) {
  const std::string tmp = path + ".tmp";
  Status s;
  {
    OpenOptions o;
    o.write = o.create = o.truncate = true;
    auto f = Open(tmp, o);
    if (!f.ok()) return f.status();
    if (!data.empty()) s = (*f)->Write(0, data.data(), data.size());
    if (s.ok()) s = (*f)->Sync();
  }
  if (s.ok()) {
    KVFS_RETURN_IF_ERROR(Rename(tmp, path));
    auto slash = path.find_last_of('/');
    return SyncDir(slash == std::string::npos ? "." : path.substr(0, slash));
  }
  if (!s.IsNoSpace()) return s;
  // A full backing store: a small record (HEARTBEAT, OWNER: one block) that already exists is
  // rewritten in place instead, padded with newlines to its old length: this allocates no block, so
  // a node can still be mounted (and files deleted) on a full export. One sector-sized write; a crash
  // in the middle of it is the only way to tear it.
  Remove(tmp);
  auto st = Stat(path);
  if (!st.ok() || st->is_dir || st->size > kInPlaceMax || data.size() > kInPlaceMax) return s;
  OpenOptions o;
  o.write = true;
  auto f = Open(path, o);
  if (!f.ok()) return s;
  std::string padded = data;
  if (padded.size() < st->size) padded.append(st->size - padded.size(), '\n');
  KVFS_RETURN_IF_ERROR((*f)->Write(0, padded.data(), padded.size()));
  return (*f)->Sync();
}

namespace {
thread_local BackingDeadlineScope::Clock::time_point t_backing_deadline = BackingDeadlineScope::Clock::time_point::max();
}  // namespace

BackingDeadlineScope::BackingDeadlineScope(std::chrono::milliseconds budget) : saved_(t_backing_deadline) {
  if (budget.count() > 0) t_backing_deadline = std::min(saved_, Clock::now() + budget);
}

BackingDeadlineScope::~BackingDeadlineScope() { t_backing_deadline = saved_; }

BackingDeadlineScope::Clock::time_point BackingDeadlineScope::Current() { return t_backing_deadline; }

}  // namespace kvfs
