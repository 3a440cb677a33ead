// FUSE callbacks of extended attributes: setxattr, getxattr, listxattr, removexattr (user.* only), and the
// virtual xattrs of the mount root (user.kvfs.stats, user.kvfs.pid). Called by libfuse worker threads
// through the op table (fuse/kvfs_fs.cc). Thread safety and invariants: fuse/kvfs_fs_impl.h.
#include "fuse/kvfs_fs_impl.h"

namespace kvfs {

namespace {

constexpr std::string_view kUserPrefix = "user.";
// Virtual xattrs of the mount root (answered by the daemon, hidden from listxattr, not settable).
constexpr std::string_view kStatsXattr = "user.kvfs.stats";
constexpr std::string_view kPidXattr = "user.kvfs.pid";

bool IsUserXattr(const char* name) { return std::strncmp(name, kUserPrefix.data(), kUserPrefix.size()) == 0; }

bool IsVirtualXattr(fuse_ino_t ino, const char* name) {
  return ino == kRootIno && (name == kStatsXattr || name == kPidXattr);
}

void ReplyXattrValue(fuse_req_t req, const std::string& v, size_t size) {
  if (size == 0) return (void)fuse_reply_xattr(req, v.size());
  if (size < v.size()) return (void)fuse_reply_err(req, ERANGE);
  fuse_reply_buf(req, v.data(), v.size());
}

}  // namespace

void OpSetxattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size, int flags) {
  auto* fs = FS(req);
  if (!IsUserXattr(name)) return (void)fuse_reply_err(req, EOPNOTSUPP);
  if (IsVirtualXattr(ino, name)) return (void)fuse_reply_err(req, EPERM);
  Reply(req, fs->store->SetXattr(ino, name, std::string_view(value, size), flags), ErrCtx::kXattr);
}

void OpGetxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  auto* fs = FS(req);
  spdlog::trace("getxattr {} {}", ino, name);
  if (!IsUserXattr(name)) return (void)fuse_reply_err(req, EOPNOTSUPP);
  if (ino == kRootIno && name == kStatsXattr && fs->owner) return ReplyXattrValue(req, fs->owner->StatsJson(), size);
  if (ino == kRootIno && name == kPidXattr) return ReplyXattrValue(req, std::to_string(getpid()), size);
  auto r = fs->store->GetXattr(ino, name);
  if (!r.ok()) return Reply(req, r.status(), ErrCtx::kXattr);
  ReplyXattrValue(req, *r, size);
}

void OpListxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  auto* fs = FS(req);
  auto r = fs->store->ListXattr(ino);
  if (!r.ok()) return Reply(req, r.status(), ErrCtx::kXattr);
  std::string out;
  for (const auto& n : *r) {
    if (!IsUserXattr(n.c_str()) || IsVirtualXattr(ino, n.c_str())) continue;
    out.append(n);
    out.push_back('\0');
  }
  ReplyXattrValue(req, out, size);
}

void OpRemovexattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  auto* fs = FS(req);
  if (!IsUserXattr(name)) return (void)fuse_reply_err(req, EOPNOTSUPP);
  if (IsVirtualXattr(ino, name)) return (void)fuse_reply_err(req, EPERM);
  Reply(req, fs->store->RemoveXattr(ino, name), ErrCtx::kXattr);
}

}  // namespace kvfs
