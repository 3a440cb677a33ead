#include "blockstore/env.h"

#include <cerrno>

namespace kvfs {

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

}  // namespace kvfs
