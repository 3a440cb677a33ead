// The index's view of one inode and one directory entry: the shapes that the index (index_db.h), the
// journal replay and the engine (engine/store.h) pass around. Plain values, no behaviour; safe to copy
// between threads.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <string>

#include "blockstore/extent_map.h"
#include "blockstore/types.h"

namespace kvfs {

inline constexpr uint64_t kRootIno = 1;

// Attributes of an inode (what stat(2) shows). Times in ns since the epoch.
struct Attr {
  uint64_t ino = 0;
  uint32_t mode = 0;  // S_IFREG / S_IFDIR / S_IFLNK / S_IFIFO / S_IFSOCK / S_IFCHR / S_IFBLK | perms
  uint32_t uid = 0, gid = 0;
  uint64_t size = 0;  // bytes
  int64_t atime_ns = 0, mtime_ns = 0, ctime_ns = 0;
  uint32_t nlink = 1;
  uint64_t rdev = 0;  // character / block devices: the device number (st_rdev); 0 for other types
};

// Whether mode's type is a special file kvfs keeps as an index-only node: FIFO, socket, character or
// block device (journaled as a SYMLINK entry of version 4, docs/format.md).
inline bool IsSpecialFileMode(uint32_t mode) {
  const uint32_t t = mode & S_IFMT;
  return t == S_IFIFO || t == S_IFSOCK || t == S_IFCHR || t == S_IFBLK;
}

struct Node {
  Attr attr;
  Location location;       // files only; empty for 0-byte files and staged files without a record
  // Files whose version is not one record (docs/design.md §13): the extent map (location is then
  // empty, attr.size = its size); null for every single-record file.
  ExtentMapRef extents;
  bool committed = false;  // journaled (files); directories are always committed
  uint64_t parent = 0;
  std::string name;
};

// SetAttr mask bits (the subset of FUSE_SET_ATTR_* that the index keeps).
enum SetAttrMask : uint32_t {
  kSetMode = 1u << 0,
  kSetUid = 1u << 1,
  kSetGid = 1u << 2,
  kSetSize = 1u << 3,
  kSetAtime = 1u << 4,
  kSetMtime = 1u << 5,
  kSetCtime = 1u << 6,
  // With kSetAtime: the atime of a read (relatime, Store::NoteRead), journaled about a second after the
  // read with the read's stamp. Applied only if that stamp is newer than the inode's last change (its
  // record's stamp: its version's PUT, the last SETATTR): a utimensat or a new version that came after
  // the read, on any node, is never overwritten by it. (Older binaries ignore the bit: plain kSetAtime.)
  kSetAtimeOfRead = 1u << 7,
  // On a SETATTR entry (every SetAttr journals it, Store::SetAttr): the entry's attrs are the node's whole
  // attribute set after the change (mode, uid, gid, atime, mtime, ctime; size only with kSetSize), and
  // applying it sets all of them. Entries are applied last-writer-wins by (stamp, node) against the
  // inode's attribute stamp (docs/semantics.md §4), so an older entry is ignored without losing a field
  // a newer one did not name. Older binaries ignore the bit (they apply the named fields only).
  kSetAttrsWhole = 1u << 8,
};
// The fields kSetAttrsWhole sets (kSetSize stays explicit: size belongs to the content, PUT).
inline constexpr uint32_t kSetAttrsWholeFields = kSetMode | kSetUid | kSetGid | kSetAtime | kSetMtime | kSetCtime;

struct DirEntry {
  std::string name;
  uint64_t ino = 0;
  uint32_t mode = 0;     // S_IFMT bits at least
  uint64_t cookie = 0;   // stable: pass it back as `after` to continue behind this entry
};

}  // namespace kvfs
