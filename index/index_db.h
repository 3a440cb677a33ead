// IndexDb: the local RocksDB namespace + location index of one kvfs node (docs/design.md §3). It is a cache of
// the journals and segments: deleting the directory loses nothing; Store rebuilds it from the export.
//
// Two faces:
//   * namespace by inode (Lookup, Mkdir, CreateFile, Rename, ...), mirroring engine/store.h: what the
//     local FUSE operations do; and
//   * journal application by PATH (ApplyBatch / ApplyPut / ApplyUnlink / ...): replaying our own journal
//     at rebuild and peers' journals later. Last writer wins per path by (stamp, node).
//
// ---- On-disk layout: RocksDB column families, key and value encodings ----
// In index/index_keys.h (private to IndexDb), with the part that owns each key. Bump kIndexFormatVersion
// if you change it. The implementation is cut by what it indexes: index_db.cc (open/close, counters),
// namespace_index.cc (dentries, inodes, xattrs, tombstones), location_index.cc (segments),
// progress_index.cc (applied positions, HLC floor), index_apply.cc (journal entries by path),
// index_export.cc (views, export, dump); their shared state and transactions are in index_txn.h.
//
// "applied/<node>" is the journal position ("<gen>-<n>@<offset>", journal.h) up to which the index holds
// that node's entries: for peers, where tailing resumes; for the index's OWN node, set by a rebuild and
// at every clean close (Store::Close), so a clean index applies only the own entries that follow it
// (written while the node was down, e.g. by kvfs-fsck --repair). Format 2 added that own-node meaning
// (format 1 indexes are rebuilt).
//
// ---- readdir cookies ----
// Every dentry owns a cookie unique within its directory: XXH3-64 of the name with the top bit cleared,
// values 0/1/2 mapped to 3+ (0 = "from the start"; 1 and 2 are left to the caller for "." and "..").
// On a collision with another live name of the same directory the cookie is probed linearly (c+1, ...,
// wrapping to 3) until free. The cookie is stored in the dentry, so it is stable for the life of the
// dentry (across reopen too), and ReadDir iterates `dircookies` in cookie order from `after + 1`:
// since cookies are unique per directory, a continuation from the last returned cookie never repeats or
// skips an entry that existed for the whole listing, whatever is created or removed meanwhile.
// A rename gets a new cookie for the new name (or keeps the replaced destination's cookie).
//
// ---- stamps, LWW, tombstones, staged files ----
// A stamp is a hybrid-logical-clock value (u64) plus the node id that issued it; (stamp, node) pairs
// compare lexicographically. Stamp 0 means "not journaled" (a staged file, a local-only change). Each
// dentry carries the stamp of the event that bound its name; applied PUT / RENAME-to / UNLINK of a path
// act only if their (stamp, node) is greater than the dentry's and than the path's tombstone. An UNLINK
// (and the source of a RENAME) leaves a tombstone {path -> stamp, node} so a PUT with an older stamp
// applied later does not resurrect the file; a PUT that wins removes the tombstone. Tombstones live until
// PruneTombstones. Directories have no stamps (MKDIR creates if missing, RMDIR removes only if empty).
// A staged (uncommitted, local) file counts as newer than anything applied: an applied UNLINK does not
// remove it; an applied PUT / RENAME-to over it rebinds the name to the peer's committed file and leaves
// the staged inode *detached* (its record keeps parent + name); CommitFile of a detached staged inode
// links it back under that name (its stamp is newer by HLC). Staged inodes vanish at Open (docs/design.md §4).
//
// ---- segments and drops ----
// Committing a file located in a segment registers the segment as open if unknown and adds to its live
// bytes/records. ApplyDrop marks the segment dropped and DELETES every file located in it (dentry, inode,
// xattrs; no tombstone); a later PUT / RENAME / MOVE that points into a dropped segment is skipped, so a
// dropped segment's files stay absent (ENOENT).
//
// ---- counters ----
// files (committed regular files + symlinks + special files), directories (root included), live_bytes
// (sum of the sizes of committed regular files; an extent file counts its data bytes, holes excluded) are
// kept exactly in memory and persisted in meta "stats" in the same
// WriteBatch as the change that moves them.
//
// ---- inode numbers ----
// Root is 1 (kRootIno, mode S_IFDIR|0755, created with the index). Numbers increase monotonically and are
// never reused within the life of the index dir: ranges of 1M are reserved in meta (synced) before use.
// A file whose content changes gets a new inode number (docs/design.md §3): through an applied PUT, or
// Renumber (the FUSE layer, before a local writer starts a new version). Numbers are not journaled: an
// index rebuilt from the journals numbers everything afresh.
//
// ---- thread safety ----
// Every method is thread-safe. Writes are serialized by one namespace mutex and each is one atomic
// WriteBatch (WAL on, sync off). Reads take no lock: multi-key reads use a RocksDB snapshot; ReadDir
// pages use an iterator (its own consistent view).
//
// Paths: absolute, "/" is the root, components separated by single '/', no trailing '/'.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <utility>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "blockstore/status.h"
#include "blockstore/types.h"
#include "index/inode.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
}  // namespace rocksdb

namespace kvfs {

// 3 added the xattrstamps column family (index_keys.h); a format 2 index opens as 3 (no stamps: every
// xattr older than any entry). 4 added the dirrenames column family (the records of directory renames);
// a format 2 or 3 index opens as 4 with no records. 5: a record may be that of a directory
// RENAME_EXCHANGE (DirRenameRecord::exchange, a kind byte after `to`); a format 2 to 4 index opens as 5.
inline constexpr uint32_t kIndexFormatVersion = 5;

struct IndexDbOptions {
  std::string dir;                          // local directory (never on NFS); created if missing
  std::string node_id;                      // this node; must match the one recorded in the index
  uint64_t block_cache_bytes = 64ull << 20; // RocksDB block cache, bytes
  // Tests only: replaces XXH3-64 as the cookie hash (to force collisions). Its result is still masked to
  // 63 bits and mapped away from 0/1/2. Never change it for an existing index (cookies are stored).
  uint64_t (*cookie_hash_for_test)(std::string_view name) = nullptr;
};

enum class SegmentState : uint8_t { kOpen = 0, kSealed = 1, kDropped = 2 };

struct SegmentInfo {
  SegmentId id;
  SegmentState state = SegmentState::kOpen;
  uint64_t live_bytes = 0;    // sum of lengths of committed files located in it (of an extent file: the
                              // bytes of its extents that use a record in it)
  uint64_t live_records = 0;  // number of committed files located in it (an extent file: + the number of
                              // distinct records in it that its map references)
  // Where a CUT{segment} entry ends the segment's valid bytes (bytes from the start of the file; the
  // lowest of all applied CUTs); UINT64_MAX if none. Carried by snapshots (index/snapshot.h), so it
  // outlives the journal file that held the CUT entry when that file is retired.
  uint64_t cut = UINT64_MAX;
};

struct IndexStats {
  uint64_t files = 0, directories = 0, live_bytes = 0;
  uint64_t staged_files = 0;  // in memory only
};

struct Tombstone {
  uint64_t stamp = 0;
  std::string node;
  // The binding the path last had when a tombstone was raised over it: (stamp, node) of the dentry the
  // UNLINK / rename-away removed (kept when a later tombstone finds no dentry). Every node that removes
  // or applies the removal of one binding records the same pair, whatever its own unlink's stamp: the
  // link claims' incarnation (engine/link_arbiter.h). 0 / "" when unknown (a tombstone of an older
  // index, or one applied from a snapshot, which carries only the UNLINK's stamp).
  uint64_t removed_stamp = 0;
  std::string removed_node;
};

// The record of one directory rename: the RENAME entry (stamp, node) that moved the directory `from` to
// `to` (absolute index paths). Kept forever in the index (column family dirrenames) and exported by the
// renaming node's snapshots, so that every rebuild redirects the entries older than it that name `from`
// or a path under it (index/dir_redirect.h), as the live nodes did (engine/dir_renames.h).
//
// exchange: the record of a renameat2(RENAME_EXCHANGE) with a directory on at least one side: `from` and
// `to` swapped what they name at (stamp, node). It redirects both ways in one step (an older entry under
// `from` lands under `to` and one under `to` under `from`, never back), and one record stands for the
// whole exchange (its key is its (stamp, node), like a rename's).
struct DirRenameRecord {
  std::string from, to;
  uint64_t stamp = 0;
  std::string node;
  bool exchange = false;
  bool operator==(const DirRenameRecord&) const = default;
};

// One journal entry to apply (docs/design.md §2 "Journal"). Fields not used by a kind are ignored.
struct ApplyOp {
  // kDirRenameRecord: a snapshot's RENAME entry, the record of a directory rename (path = from, to,
  // stamp, node, exchange): stored in dirrenames, nothing is moved (the snapshot holds the result).
  enum class Kind : uint8_t { kPut, kRename, kUnlink, kMkdir, kRmdir, kSetattr, kXattr, kMove, kSeal, kDrop, kCut,
                              kExchange, kDirRenameRecord };
  Kind kind = Kind::kPut;
  std::string path;        // PUT/UNLINK/MKDIR/RMDIR/SETATTR/XATTR/MOVE; RENAME: from
  std::string to;          // RENAME, DIRRENAME record: destination; EXCHANGE: the other name
  bool exchange = false;   // DIRRENAME record: of a directory RENAME_EXCHANGE (DirRenameRecord::exchange)
  Location location;       // PUT, RENAME (the moved file's location; may be empty), MOVE: new location
  Location old_location;   // MOVE: replaces this record (the file's location, or the record of every
                           // extent that references it); nothing if the file does not use it
  // MOVE: only the file at `path` (not the files found by the old record, index_apply.cc Move): a
  // rebuild's second application of a MOVE (index/replay.cc), which need not scan the segment again.
  bool move_at_path_only = false;
  ExtentMapRef extents;    // PUT: the file's extent map (location empty); null = a single record
  // PUT (entry version 5): the map as a delta against the binding of `path` by the applying node with
  // stamp delta->base_stamp; resolved by the apply (PutDelta in index_apply.cc), or, when that binding
  // is not what this index holds (map checksum), applied as an UNLINK at the entry's stamp.
  std::optional<ExtentDelta> delta;
  Attr attr;               // PUT: mode (S_IFREG, S_IFLNK or a special type | perms; rdev of a device),
                           // uid, gid, size, times; MKDIR; SETATTR
  uint32_t mask = 0;       // SETATTR: SetAttrMask bits
  std::string symlink;     // PUT of a symlink (from a SYMLINK entry): the target
  // PUT: the file's complete xattr set, which replaces the one the index has (nullopt: leave as is)
  std::optional<std::vector<std::pair<std::string, std::string>>> xattrs;
  std::string xattr_name;  // XATTR
  std::string xattr_value; // XATTR
  bool xattr_remove = false;
  SegmentId segment;       // SEAL / DROP / CUT (of a segment file)
  uint64_t cut_offset = 0; // CUT: the segment's valid end (SegmentInfo::cut keeps the lowest)
  uint64_t stamp = 0;      // HLC stamp of the entry (PUT/RENAME/UNLINK/SETATTR/XATTR)
  // The node whose journal holds the entry; "" = the batch's node (ApplyBatch's `node`). A rebuild
  // merges several nodes' entries into one batch (index/replay.h ReplayNodes).
  std::string node;
};

// What an apply changed, for kernel invalidation (fuse_lowlevel_notify_inval_entry / _inode).
struct ApplyResult {
  struct Changed {
    uint64_t parent = 0;
    std::string name;
    uint64_t old_ino = 0;  // 0 if the name did not exist before
    uint64_t new_ino = 0;  // 0 if the name does not exist after
  };
  std::vector<Changed> changed;      // names whose binding changed (in order of application)
  std::vector<uint64_t> attr_changed;  // inodes whose attributes / xattrs changed in place
  uint64_t applied = 0, skipped = 0;   // ops that changed something / were superseded or conflicting
  uint64_t unresolved_deltas = 0;      // delta PUTs whose base this index did not hold (applied as UNLINK)
  std::map<std::string, uint64_t> unresolved_by_node;  // the same, by the node whose entry it was
  // SETATTR / XATTR ops (indices into the batch) skipped because no name exists at their path (yet: a
  // peer's tailer may read the change before the PUT of the name it changes; engine/peer_tailer.h).
  std::vector<size_t> no_target;
  // RENAME ops (indices into the batch) that moved a directory (engine/dir_renames.h notes them).
  std::vector<size_t> moved_dirs;
};

// Content of one path for comparing two indexes (inode numbers excluded).
struct DumpEntry {
  uint32_t mode = 0;  // full st_mode
  Location location;  // regular files
  ExtentMapRef extents;  // regular files that are not one record
  uint64_t size = 0;  // regular files
  uint32_t uid = 0, gid = 0;
  int64_t mtime_ns = 0;  // regular files and symlinks (journaled)
  std::string symlink;
  uint64_t rdev = 0;  // character / block devices
  std::map<std::string, std::string> xattrs;
  bool operator==(const DumpEntry&) const = default;
};

struct RenameResult {
  Node moved;                  // the source node, as it is after the rename
  bool replaced = false;       // a destination was replaced
  Node replaced_node;          // valid when replaced (committed tells whether to journal / account it)
};

class IndexDb {
 public:
  // Opens (creating if missing) the index at opts.dir. Busy "index dir ... is in use by another kvfs
  // mount" if another process holds its RocksDB LOCK; InvalidArgument if it belongs to another node;
  // NotSupported on a different format version. Drops staged inodes left by the previous run.
  static Result<std::unique_ptr<IndexDb>> Open(const IndexDbOptions& opts);
  // Removes the index directory (for rebuild). Busy if it is open (by any process).
  static Status Destroy(const std::string& dir);
  ~IndexDb();

  // Closes the database (idempotent). The destructor calls it.
  Status Close();

  // ---- lifecycle flags ----
  bool Created() const { return created_; }         // the index did not exist before this Open
  bool WasCleanlyClosed() const { return was_clean_; }  // as read at Open (false for a new index)
  Status MarkOpen();   // sets the dirty flag (synced)
  // The backing store's FORMAT id this index was built for ("" if never set: an index of an older kvfs).
  Result<std::string> BackingId() const;
  Status SetBackingId(const std::string& id);  // synced
  Status MarkClean();  // flushes the WAL, sets the clean flag (synced)
  Status SyncWal();    // makes every write so far durable in the local WAL
  const std::string& node_id() const { return node_id_; }

  // ---- namespace by inode (errors as store.h; stamp 0 = not journaled; node = this node) ----
  Result<Node> Lookup(uint64_t parent, std::string_view name);
  Result<Node> GetInode(uint64_t ino);
  Result<Node> Mkdir(uint64_t parent, std::string_view name, uint32_t mode, uint32_t uid, uint32_t gid,
                     uint64_t stamp = 0);
  Status Rmdir(uint64_t parent, std::string_view name);  // ENOTEMPTY, ENOTDIR, ENOENT, EBUSY for root
  // Staged regular file. Existing name: Exists when exclusive, else the existing node (EISDIR if a dir).
  Result<Node> CreateFile(uint64_t parent, std::string_view name, uint32_t mode, uint32_t uid, uint32_t gid,
                          bool exclusive);
  // Symlinks are committed at creation (the caller journals a PUT of S_IFLNK with the target).
  Result<Node> Symlink(uint64_t parent, std::string_view name, std::string_view target, uint32_t uid,
                       uint32_t gid, uint64_t stamp = 0);
  // A FIFO, socket or character / block device (mode's type S_IFIFO / S_IFSOCK / S_IFCHR / S_IFBLK,
  // else InvalidArgument; rdev kept for devices): an index-only node, committed at creation like a
  // symlink (the caller journals JournalEntry::Special). Exists if the name is taken.
  Result<Node> Mknod(uint64_t parent, std::string_view name, uint32_t mode, uint64_t rdev, uint32_t uid,
                     uint32_t gid, uint64_t stamp = 0);
  Result<std::string> ReadLink(uint64_t ino);  // InvalidArgument if not a symlink
  // Removes a non-directory (EISDIR for a dir) and returns what it was. With stamp != 0 (the caller
  // journals an UNLINK) a tombstone is written for the path.
  Result<Node> Unlink(uint64_t parent, std::string_view name, uint64_t stamp = 0);
  // rename(2) rules: ENOENT, ENOTDIR, EISDIR, ENOTEMPTY, EINVAL (dir into its own subtree, bad flags,
  // RENAME_EXCHANGE), EEXIST (RENAME_NOREPLACE). Directories may move across parents (never EXDEV here).
  // With stamp != 0 the source path gets a tombstone and the destination dentry that stamp.
  Result<RenameResult> Rename(uint64_t parent, std::string_view name, uint64_t new_parent,
                              std::string_view new_name, unsigned flags, uint64_t stamp = 0);
  // renameat2(RENAME_EXCHANGE): parent/name and new_parent/new_name, which must both exist (NotFound),
  // swap what they name in one transaction; any types (file, directory, symlink, special, staged). A
  // directory that would end up inside itself is InvalidArgument. Returns (the node that was at
  // parent/name, now at new_parent/new_name; the other one). stamp != 0: both dentries take it (the
  // caller journals bindings); same inode on both names: nothing changes. With a directory on a side,
  // each name keeps its binding and stamp != 0 writes the exchange's record (DirRenameRecord::exchange;
  // the caller journals an EXCHANGE), or, when the other side is a staged file, the record of the
  // directory's rename to that file's name (the caller journals that RENAME).
  Result<std::pair<Node, Node>> Exchange(uint64_t parent, std::string_view name, uint64_t new_parent,
                                         std::string_view new_name, uint64_t stamp = 0);
  // Sets the masked fields (the caller sets ctime via kSetCtime). Returns the new Attr.
  Result<Attr> SetAttr(uint64_t ino, const Attr& attr, uint32_t mask, uint64_t stamp = 0);
  // Staged -> committed (or a new commit of a committed file): location, size/mode/uid/gid/times from
  // attr (ino/nlink ignored), dentry stamp (stamp, node; node empty = this node). Relinks a detached
  // staged inode under its remembered name. NotFound if the inode is gone (unlinked before commit).
  // extents: the version's extent map when it is not one record (loc empty, attr.size = its size).
  // base (optional): what the name was bound to just before, when an extent delta against it may be
  // journaled (docs/format.md "Extent deltas"): bound by this node (dentry node = `node`) to a committed
  // regular file with a record or a map; base->found false otherwise.
  struct CommitBase {
    bool found = false;
    uint64_t stamp = 0;  // the dentry's stamp: the delta's base_stamp
    ExtentMap map;       // its content (index_txn.h DeltaBaseOf)
  };
  Result<Node> CommitFile(uint64_t ino, const Location& loc, const Attr& attr, uint64_t stamp,
                          std::string_view node = {}, ExtentMapRef extents = {}, CommitBase* base = nullptr);
  // Gives the committed regular file `ino` a fresh inode number (docs/design.md §3: new content gets a new
  // number; the caller is about to start a new version). The dentry (same cookie and stamp), attributes,
  // location, xattrs and segment membership move to the new number; `ino` no longer exists afterwards.
  // Content and path are unchanged, so nothing is journaled. Returns the node under its new number.
  // NotFound if ino is gone or detached, InvalidArgument if it is not a committed regular file.
  // to != 0: move it to that number instead of a fresh one (undoing an earlier Renumber: `to` must be a
  // number this index handed out before and no longer uses; InvalidArgument if an inode has it).
  Result<Node> Renumber(uint64_t ino, uint64_t to = 0);
  // Lists dir in cookie order after `after` (0 = from the start); fn returns false to stop.
  Status ReadDir(uint64_t dir, uint64_t after, const std::function<bool(const DirEntry&)>& fn);

  // ---- xattrs (flags: XATTR_CREATE -> Exists, XATTR_REPLACE -> NotFound when missing) ----
  Status SetXattr(uint64_t ino, std::string_view name, std::string_view value, int flags, uint64_t stamp = 0);
  Result<std::string> GetXattr(uint64_t ino, std::string_view name);  // NotFound (-> ENODATA)
  Result<std::vector<std::string>> ListXattr(uint64_t ino);           // sorted by name
  Status RemoveXattr(uint64_t ino, std::string_view name, uint64_t stamp = 0);  // NotFound if missing

  // ---- paths ----
  // "/a/b"; "/" for root; NotFound if the inode is gone. A detached staged inode answers the path it
  // remembers (where CommitFile will link it).
  Result<std::string> FullPath(uint64_t ino);
  Result<uint64_t> ResolvePath(std::string_view path);  // ENOENT, ENOTDIR for a file in the middle

  // ---- journal application by path ----
  // Applies ops in order as ONE atomic WriteBatch; if position is non-empty it is recorded as the applied
  // journal position of `node` in the same batch. Superseded (LWW) or conflicting ops (e.g. a file where a
  // directory is needed) are skipped and counted, never an error. Errors only for I/O or corruption.
  Result<ApplyResult> ApplyBatch(std::span<const ApplyOp> ops, std::string_view node,
                                 std::string_view position = {});
  // The same for ops of several nodes (ApplyOp::node; "" = `node`), recording each (node, position) of
  // `positions` as that node's applied journal position in the same batch.
  Result<ApplyResult> ApplyBatch(std::span<const ApplyOp> ops, std::string_view node,
                                 std::span<const std::pair<std::string, std::string>> positions);
  Result<std::string> GetAppliedPosition(std::string_view node);  // NotFound if none recorded
  std::map<std::string, std::string> GetAppliedPositions();

  // Single-op conveniences (no position recorded).
  Result<ApplyResult> ApplyPut(std::string_view path, const Location& loc, const Attr& attr, uint64_t stamp,
                               std::string_view node);
  Result<ApplyResult> ApplyRename(std::string_view from, std::string_view to, const Location& loc,
                                  uint64_t stamp, std::string_view node);
  Result<ApplyResult> ApplyUnlink(std::string_view path, uint64_t stamp, std::string_view node);
  Result<ApplyResult> ApplyMkdir(std::string_view path, const Attr& attr);
  Result<ApplyResult> ApplyRmdir(std::string_view path);
  Result<ApplyResult> ApplySetattr(std::string_view path, const Attr& attr, uint32_t mask, uint64_t stamp,
                                   std::string_view node);
  Result<ApplyResult> ApplyXattr(std::string_view path, std::string_view name, std::string_view value,
                                 bool remove, uint64_t stamp, std::string_view node);
  Result<ApplyResult> ApplyMove(std::string_view path, const Location& old_loc, const Location& new_loc);
  Result<ApplyResult> ApplySeal(const SegmentId& seg);
  Result<ApplyResult> ApplyDrop(const SegmentId& seg);

  Result<Tombstone> GetTombstone(std::string_view path);  // NotFound if none
  // The records of directory renames (DirRenameRecord), in (stamp, node) order; node non-empty: only
  // that node's. A record that does not decode is Corruption.
  Result<std::vector<DirRenameRecord>> ListDirRenames(std::string_view node = {});
  // Deletes tombstones with stamp < older_than. Returns how many.
  Result<uint64_t> PruneTombstones(uint64_t older_than);

  // ---- segments ----
  Status SetSegmentState(const SegmentId& seg, SegmentState state);  // registers if unknown
  // Applies a CUT{segment} at `offset` (SegmentInfo::cut = min(cut, offset)); registers the segment
  // (state open) if unknown; no-op for a dropped segment.
  Status SetSegmentCut(const SegmentId& seg, uint64_t offset);
  Result<SegmentInfo> GetSegment(const SegmentId& seg);                // NotFound
  // The committed inodes located in seg (its segfiles keys): the files any of whose records is there.
  Result<std::vector<uint64_t>> SegmentInodes(const SegmentId& seg);
  // All segments ordered by (node, generation, seq) — i.e. oldest first per node.
  Status ListSegments(const std::function<bool(const SegmentInfo&)>& fn);

  // ---- HLC floor and stats ----
  // Highest stamp ever written (applied or local) or set; persisted in the batch that raised it.
  uint64_t HlcFloor() const;
  Status SetHlcFloor(uint64_t stamp);  // raises only
  IndexStats GetStats() const;

  // ---- checkpoints (index/snapshot.h) ----
  // A consistent read view of the whole index (a RocksDB snapshot), released when the last reference
  // goes. Take it while writers are excluded to get a state matching one journal position.
  class View;
  std::shared_ptr<const View> NewView();
  struct ExportItem {
    // kSymlink: any index-only node, a symlink or a special file (attr.mode says which; attr.rdev).
    // kPeerFileChanges: a committed file, symlink or special file bound by ANOTHER node whose attributes
    // (setattr: attr, at `stamp`) and/or some xattr names (xattr_changes) `node` changed last.
    // kDirRename: the record of a directory rename (path = from, to, stamp, by record_node: `node`'s
    // own, or a peer's that this index applied or stored).
    enum class Kind : uint8_t { kDir, kFile, kSymlink, kTombstone, kSegment, kPeerFileChanges, kDirRename };
    Kind kind = Kind::kDir;
    std::string path;   // absolute; empty for kSegment
    std::string to;     // kDirRename
    std::string record_node;  // kDirRename
    bool exchange = false;    // kDirRename: DirRenameRecord::exchange
    Attr attr;          // kDir, kFile, kSymlink
    Location location;  // kFile
    ExtentMapRef extents;  // kFile that is not one record (location empty)
    std::string symlink;
    uint64_t stamp = 0;  // kFile/kSymlink: the dentry's stamp; kTombstone: the tombstone's
    std::vector<std::pair<std::string, std::string>> xattrs;  // kDir, kFile, kSymlink
    SegmentInfo segment;                                       // kSegment (sealed, dropped or cut)
    // kPeerFileChanges: `node`'s SETATTR is the inode's last attribute change; kDir, kFile, kSymlink: an
    // attribute change was journaled after the binding (attr as it is now, at attr_stamp).
    bool setattr = false;
    uint64_t attr_stamp = 0;
    struct XattrChange {
      std::string name, value;
      bool removed = false;
      uint64_t stamp = 0;
    };
    // kPeerFileChanges: the names whose last set/remove is `node`'s; kDir, kFile, kSymlink: every name
    // with a journaled set/remove after the binding (its stamp; `xattrs` then holds the current values).
    std::vector<XattrChange> xattr_changes;
  };
  // Calls fn first for every record of a directory rename the index holds, `node`'s and its peers'
  // (kDirRename, in (stamp, node) order), then
  // for every directory (root excluded) and every committed file / symlink whose dentry was
  // bound by `node` (dentry node == node), in a depth-first walk (a directory before anything under it),
  // and in the same walk for every committed file bound by another node that `node` changed last
  // (kPeerFileChanges), then for every tombstone of `node`, then for every segment of `node` that is
  // sealed, dropped or has a CUT (SegmentInfo::cut). Staged files are never exported. fn's error
  // stops the walk and is returned.
  Status ExportLive(const View& view, std::string_view node, const std::function<Status(const ExportItem&)>& fn);

  // ---- tests / fsck ----
  // Every committed path (dirs, files, symlinks; staged files excluded; root excluded) -> content.
  Result<std::map<std::string, DumpEntry>> DumpByPath();

  IndexDb(const IndexDb&) = delete;
  IndexDb& operator=(const IndexDb&) = delete;

  struct Impl;  // index_txn.h

 private:
  IndexDb();
  // Symlink and Mknod: binds a new committed index-only inode (mode, rdev, target) at parent/name.
  Result<Node> MakeIndexOnly(uint64_t parent, std::string_view name, uint32_t mode, uint64_t rdev,
                             std::string_view target, uint32_t uid, uint32_t gid, uint64_t stamp);
  std::unique_ptr<Impl> impl_;
  std::string node_id_;
  bool created_ = false;
  bool was_clean_ = false;
};

// The readdir cookie of a name before collision probing (XXH3-64, top bit cleared, < 3 -> +3).
uint64_t DirCookieOf(std::string_view name);

}  // namespace kvfs
