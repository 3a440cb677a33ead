// IndexDb, common part: Open (column families, format / node checks, root inode, dropping the previous
// run's staged inodes), Close, Destroy, the lifecycle flags (meta "clean"), the inode number allocator
// (meta "ino_limit"), readdir cookie hashing and the in-memory counters (GetStats).
// Callers: Store (engine/), kvfs-fsck, the snapshot loader and the tests, through index_db.h.
// Thread-safety: Open/Destroy are static; Close is not concurrent with other calls (the owner closes
// last); the rest as index_db.h says. Layout: index_keys.h; state and transactions: index_txn.h.
// Invariants: an opened index has the root inode, format kIndexFormatVersion, this node's id and no
// staged inode.
#include "index/index_db.h"

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <mutex>

#include "blockstore/log.h"

#include "index/index_keys.h"
#include "index/index_txn.h"

namespace kvfs {

using namespace index_internal;

uint64_t DirCookieOf(std::string_view name) {
  uint64_t c = XXH3_64bits(name.data(), name.size()) & kMaxCookie;
  return c < 3 ? c + 3 : c;
}

Result<uint64_t> IndexDb::Impl::AllocIno() {
  if (next_ino >= ino_limit) {
    uint64_t lim = next_ino + kInoReserve;
    std::string v;
    PutLE(&v, lim, 8);
    rocksdb::WriteOptions wo;
    wo.sync = true;
    auto s = db->Put(wo, H(kMeta), kMetaInoLimit, v);
    if (!s.ok()) return WriteError(s, "reserve inode numbers");
    ino_limit = lim;
  }
  return next_ino++;
}

// ------------------------------------------------------------------------------------------------
IndexDb::IndexDb() : impl_(std::make_unique<Impl>()) {}
IndexDb::~IndexDb() { Close(); }

namespace {
// RocksDB's own diagnostics go to kvfs's log (spdlog; see Logv), instead of a LOG file in
// the index dir: on a full index disk RocksDB's file logger asserts (WritableFileWriter::
// AssertFalseAndGetStatusForPrevError in Debian's librocksdb) on its next line after a failed append,
// which aborted the daemon.
class SpdlogRocksLogger final : public rocksdb::Logger {
 public:
  SpdlogRocksLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL) {}
  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override { Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap); }
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    if (level < GetInfoLogLevel()) return;
    char buf[1024];
    std::vsnprintf(buf, sizeof(buf), format, ap);
    // RocksDB's errors as kvfs warnings; its warnings (e.g. a refused Open, which kvfs reports itself as a
    // one-line error) only with --log-level debug.
    if (level >= rocksdb::InfoLogLevel::ERROR_LEVEL) LogLimited(spdlog::level::warn, "rocksdb-error", "rocksdb: {}", buf);
    else spdlog::debug("rocksdb: {}", buf);
  }
};
}  // namespace

Result<std::unique_ptr<IndexDb>> IndexDb::Open(const IndexDbOptions& opts) {
  if (opts.dir.empty()) return Status::InvalidArgument("index dir not set");
  if (opts.node_id.empty() || opts.node_id.find('\0') != std::string::npos)
    return Status::InvalidArgument("node id not set");
  std::error_code ec;
  std::filesystem::create_directories(opts.dir, ec);
  if (ec) return Status::IOError("create index dir " + opts.dir + ": " + ec.message(), ec.value());
  bool created = !std::filesystem::exists(std::filesystem::path(opts.dir) / "CURRENT");

  rocksdb::Options dbo;
  dbo.create_if_missing = true;
  dbo.create_missing_column_families = true;
  dbo.keep_log_file_num = 3;
  dbo.info_log = std::make_shared<SpdlogRocksLogger>();
  dbo.max_background_jobs = 2;
  dbo.db_write_buffer_size = 64ull << 20;
  auto cache = rocksdb::NewLRUCache(opts.block_cache_bytes);
  std::vector<rocksdb::ColumnFamilyDescriptor> cfds;
  for (int c = 0; c < kNumCf; c++) {
    rocksdb::ColumnFamilyOptions co;
    co.write_buffer_size = 16ull << 20;
    rocksdb::BlockBasedTableOptions bt;
    bt.block_cache = cache;
    if (c == kDentries) {
      bt.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
      bt.whole_key_filtering = true;
    }
    co.table_factory.reset(rocksdb::NewBlockBasedTableFactory(bt));
    cfds.emplace_back(kCfNames[c], co);
  }
  cfds.emplace_back(rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions());

  std::unique_ptr<IndexDb> idx(new IndexDb());
  Impl* im = idx->impl_.get();
  im->dir = opts.dir;
  im->node = opts.node_id;
  im->cookie_hash = opts.cookie_hash_for_test;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  auto s = rocksdb::DB::Open(dbo, opts.dir, cfds, &handles, &im->db);
  if (!s.ok()) {
    std::string m = s.ToString();
    if (m.find("lock") != std::string::npos || m.find("LOCK") != std::string::npos)
      return Status::Busy("index dir " + opts.dir + " is in use by another kvfs mount (" + m + ")");
    return ToStatus(s, "open index " + opts.dir);
  }
  im->cf = handles;  // last is default; kept so Close destroys it
  idx->node_id_ = opts.node_id;
  idx->created_ = created;

  auto get_meta = [&](const char* key, std::string* v, bool* found) { return im->DbGet(kMeta, key, v, found); };
  std::string v;
  bool found;
  rocksdb::WriteBatch init;
  KVFS_RETURN_IF_ERROR(get_meta(kMetaFormat, &v, &found));
  if (found) {
    Reader rd{v};
    uint32_t fmt = rd.U32();
    // Formats 3 and 4 only added a column family each (created above, empty), 5 a kind byte a record
    // may carry: upgrade. A format 2 or 3 index has no records of the directory renames it applied
    // (index_keys.h dirrenames); its own node's renames reach the next snapshot only if it is rebuilt.
    // An older kvfs refuses a format 5 index (NotSupported): a downgrade deletes the index directory.
    if (rd.ok && (fmt == 2 || fmt == 3 || fmt == 4)) {
      std::string f;
      PutLE(&f, kIndexFormatVersion, 4);
      init.Put(im->H(kMeta), kMetaFormat, f);
    } else if (!rd.ok || fmt != kIndexFormatVersion)
      return Status::NotSupported("index " + opts.dir + " has format " + std::to_string(fmt) + ", expected " +
                                  std::to_string(kIndexFormatVersion));
  } else {
    std::string f;
    PutLE(&f, kIndexFormatVersion, 4);
    init.Put(im->H(kMeta), kMetaFormat, f);
  }
  KVFS_RETURN_IF_ERROR(get_meta(kMetaNode, &v, &found));
  if (found && v != opts.node_id)
    return Status::InvalidArgument("index dir " + opts.dir + " belongs to node '" + v + "', not '" +
                                   opts.node_id + "'");
  if (!found) init.Put(im->H(kMeta), kMetaNode, opts.node_id);
  KVFS_RETURN_IF_ERROR(get_meta(kMetaInoLimit, &v, &found));
  if (found) im->next_ino = im->ino_limit = Reader{v}.U64();
  KVFS_RETURN_IF_ERROR(get_meta(kMetaHlc, &v, &found));
  if (found) im->hlc = Reader{v}.U64();
  KVFS_RETURN_IF_ERROR(get_meta(kMetaClean, &v, &found));
  idx->was_clean_ = found && v == "1" && !created;
  KVFS_RETURN_IF_ERROR(get_meta(kMetaStats, &v, &found));
  if (found) {
    Reader rd{v};
    im->files = rd.U64();
    im->dirs = rd.U64();
    im->live_bytes = rd.U64();
  }
  KVFS_RETURN_IF_ERROR(im->DbGet(kInodes, InoKey(kRootIno), &v, &found));
  if (!found) {
    InodeRec root;
    root.attr.ino = kRootIno;
    root.attr.mode = S_IFDIR | 0755;
    root.attr.nlink = 2;
    root.attr.size = 4096;
    root.attr.atime_ns = root.attr.mtime_ns = root.attr.ctime_ns = NowNs();
    root.committed = true;
    init.Put(im->H(kInodes), InoKey(kRootIno), EncodeInode(root));
    im->dirs += 1;
    std::string st;
    PutLE(&st, im->files.load(), 8);
    PutLE(&st, im->dirs.load(), 8);
    PutLE(&st, im->live_bytes.load(), 8);
    init.Put(im->H(kMeta), kMetaStats, st);
  }
  if (init.Count()) {
    rocksdb::WriteOptions wo;
    wo.sync = true;
    KVFS_RETURN_IF_ERROR(ToStatus(im->db->Write(wo, &init), "init index"));
  }

  // Staged inodes never survive a restart (nothing of them was journaled).
  {
    std::lock_guard<std::mutex> l(im->mu);
    Txn t(im);
    Ops o{im, t};
    std::vector<uint64_t> staged;
    KVFS_RETURN_IF_ERROR(t.ForEachPrefix(kStaged, "", [&](auto& k, auto&) {
      if (k.size() == 8) staged.push_back(GetBE64(k.data()));
      return true;
    }));
    im->staged = staged.size();  // Account(-1) below brings it to 0
    for (uint64_t ino : staged) {
      std::optional<InodeRec> r;
      KVFS_RETURN_IF_ERROR(o.GetRec(ino, &r));
      if (!r) {
        t.Del(kStaged, InoKey(ino));
        t.d_staged -= 1;
        continue;
      }
      std::optional<DentryVal> d;
      KVFS_RETURN_IF_ERROR(o.GetDentry(r->parent, r->name, &d));
      if (d && d->ino == ino) o.UnlinkDentry(r->parent, r->name, *d);
      KVFS_RETURN_IF_ERROR(o.PutRec(&*r, nullptr));
    }
    KVFS_RETURN_IF_ERROR(t.Commit());
    if (!staged.empty()) spdlog::info("index {}: dropped {} staged inodes of the previous run", opts.dir, staged.size());
  }
  return idx;
}

Status IndexDb::Close() {
  if (!impl_ || !impl_->db) return Status::OK();
  for (auto* h : impl_->cf) impl_->db->DestroyColumnFamilyHandle(h);
  impl_->cf.clear();
  auto s = impl_->db->Close();
  delete impl_->db;
  impl_->db = nullptr;
  return ToStatus(s, "close index");
}

Status IndexDb::Destroy(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) return Status::OK();
  if (std::filesystem::exists(std::filesystem::path(dir) / "CURRENT")) {
    // Take the RocksDB lock (opening every column family) to make sure nobody uses it.
    std::vector<std::string> names;
    auto s = rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), dir, &names);
    if (s.ok()) {
      std::vector<rocksdb::ColumnFamilyDescriptor> cfds;
      for (auto& n : names) cfds.emplace_back(n, rocksdb::ColumnFamilyOptions());
      std::vector<rocksdb::ColumnFamilyHandle*> hs;
      rocksdb::DB* db = nullptr;
      rocksdb::Options o;
      s = rocksdb::DB::Open(o, dir, cfds, &hs, &db);
      if (!s.ok()) {
        std::string m = s.ToString();
        if (m.find("lock") != std::string::npos || m.find("LOCK") != std::string::npos)
          return Status::Busy("index dir " + dir + " is in use by another kvfs mount");
      } else {
        for (auto* h : hs) db->DestroyColumnFamilyHandle(h);
        db->Close();
        delete db;
      }
    }
  }
  std::filesystem::remove_all(dir, ec);
  if (ec) return Status::IOError("remove index dir " + dir + ": " + ec.message(), ec.value());
  return Status::OK();
}

Status IndexDb::MarkOpen() {
  rocksdb::WriteOptions wo;
  wo.sync = true;
  return ToStatus(impl_->db->Put(wo, impl_->H(kMeta), kMetaClean, "0"), "mark open");
}

Result<std::string> IndexDb::BackingId() const {
  std::string v;
  bool found = false;
  KVFS_RETURN_IF_ERROR(impl_->DbGet(kMeta, kMetaBackingId, &v, &found));
  return found ? v : std::string();
}

Status IndexDb::SetBackingId(const std::string& id) {
  rocksdb::WriteOptions wo;
  wo.sync = true;
  return ToStatus(impl_->db->Put(wo, impl_->H(kMeta), kMetaBackingId, id), "set backing id");
}

Status IndexDb::MarkClean() {
  KVFS_RETURN_IF_ERROR(SyncWal());  // refused after a failed write: the next mount rebuilds
  rocksdb::WriteOptions wo;
  wo.sync = true;
  return ToStatus(impl_->db->Put(wo, impl_->H(kMeta), kMetaClean, "1"), "mark clean");
}

Status IndexDb::SyncWal() {
  if (impl_->write_failed) return Status::IOError("index " + impl_->dir + " is read-only after a failed write");
  auto s = impl_->db->FlushWAL(true);
  return s.ok() ? Status::OK() : impl_->WriteError(s, "sync index wal");
}

IndexStats IndexDb::GetStats() const {
  IndexStats s;
  s.files = impl_->files;
  s.directories = impl_->dirs;
  s.live_bytes = impl_->live_bytes;
  s.staged_files = impl_->staged;
  return s;
}

}  // namespace kvfs
