// libfuse3 low-level operations of kvfs. See kvfs_fs.h for the model and docs/semantics.md for the rules.
//
// Structure follows libfuse's example/passthrough_hp.cc: an inode table holding only the inodes the
// kernel knows (lookup counts, FORGET), a Handle per open file in fi->fh, and replies that set entry/attr
// timeouts and open flags (keep_cache, direct_io) deliberately; the comments say why.
#define FUSE_USE_VERSION 312

#include "fuse/kvfs_fs.h"

#include <fuse_lowlevel.h>
#include <linux/fs.h>  // RENAME_NOREPLACE, RENAME_EXCHANGE
#include <spdlog/spdlog.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <shared_mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "blockstore/log.h"
#include "fuse/chunk_buffer.h"
#include "fuse/stats_render.h"

#ifndef FALLOC_FL_KEEP_SIZE
#define FALLOC_FL_KEEP_SIZE 0x01
#endif

namespace kvfs {
namespace {

constexpr std::string_view kUserPrefix = "user.";
// Virtual xattrs of the mount root (answered by the daemon, hidden from listxattr, not settable).
constexpr std::string_view kStatsXattr = "user.kvfs.stats";
constexpr std::string_view kPidXattr = "user.kvfs.pid";

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}
int64_t TsNs(const timespec& ts) { return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec; }
timespec NsTs(int64_t ns) {
  timespec ts;
  ts.tv_sec = ns / 1000000000;
  ts.tv_nsec = ns % 1000000000;
  if (ts.tv_nsec < 0) {
    ts.tv_nsec += 1000000000;
    ts.tv_sec -= 1;
  }
  return ts;
}

// Where an error is reported: xattr calls answer ENODATA for a missing attribute, not ENOENT; an
// inode the kernel holds but the index no longer has (replaced or unlinked, e.g. by a peer) is ESTALE,
// so the kernel looks the name up again (DESIGN §4 "A dead inode answers ESTALE").
enum class ErrCtx { kDefault, kXattr, kInode };

// THE one place where a Status becomes an errno for a FUSE reply.
int ToErrno(const Status& s, ErrCtx ctx = ErrCtx::kDefault) {
  if (s.ok()) return 0;
  if (ctx == ErrCtx::kXattr && s.IsNotFound()) return ENODATA;
  if (ctx == ErrCtx::kInode && s.IsNotFound()) return ESTALE;
  int e = s.ToErrno();
  return e > 0 ? e : EIO;
}

void FillStat(const Attr& a, struct stat* st) {
  std::memset(st, 0, sizeof(*st));
  st->st_ino = a.ino;
  st->st_mode = a.mode;
  st->st_nlink = a.nlink;
  st->st_uid = a.uid;
  st->st_gid = a.gid;
  st->st_size = static_cast<off_t>(a.size);
  st->st_blksize = 4096;
  st->st_blocks = static_cast<blkcnt_t>((a.size + 511) / 512);
  st->st_atim = NsTs(a.atime_ns);
  st->st_mtim = NsTs(a.mtime_ns);
  st->st_ctim = NsTs(a.ctime_ns);
}

struct Version;

// Staging memory: what the budget (FsOptions::staging_bytes) counts, the spill counters, and a registry
// of the live versions from which spills pick their victims.
struct Staging {
  std::atomic<int64_t> ram_bytes{0};      // RAM chunks of all staged versions (ChunkBuffer::capacity)
  std::atomic<int64_t> spilled_bytes{0};  // provisional records written for versions still staged
  std::atomic<uint64_t> spills{0}, spilled_total{0}, spill_errors{0}, whole_record_commits{0};
  std::atomic<uint64_t> streamed_commits{0};  // records written by streaming a partly spilled version
  Store* store = nullptr;  // ReleaseRecordPin of a version's records when it is gone
  std::mutex mu;  // guards versions
  std::unordered_map<const Version*, std::weak_ptr<Version>> versions;
};

// A staged version of a file's content (DESIGN §4 "Versions").
struct Version {
  Version(uint64_t s, uint64_t i, bool hid, bool dio, Staging* st)
      : seq(s), ino(i), hidden(hid), direct(dio), staging(st) {}
  ~Version() {
    staging->ram_bytes.fetch_sub(static_cast<int64_t>(data.capacity()));
    staging->spilled_bytes.fetch_sub(static_cast<int64_t>(spilled));
    // Nothing references its spills and its record any more: their segments may be evicted or
    // reclaimed (a committed record's pin was released by its CommitFile already; idempotent).
    for (const Location& l : spills) staging->store->ReleaseRecordPin(l);
    staging->store->ReleaseRecordPin(record);
    std::lock_guard<std::mutex> g(staging->mu);
    staging->versions.erase(this);
  }

  const uint64_t seq;   // creation order among this daemon's versions
  const uint64_t ino;   // the inode it belongs to (the tag of its spill records)
  // hidden: not shown to stat/readers/rename until it commits (truncating rewrites of committed files
  // and concurrent O_TRUNC writers). direct: its handles use direct_io, so its bytes never enter the
  // inode's page cache, which another version owns (the concurrent O_TRUNC "shadow" case).
  const bool hidden;
  const bool direct;
  Staging* const staging;

  // mu guards data, attr, gen and spilled. Writers and spills take it exclusively, readers and flush
  // shared.
  std::shared_mutex mu;
  ChunkBuffer data;   // RAM chunks + references (copy-on-write base, spilled chunks)
  uint64_t spilled = 0;             // bytes of the provisional records written for this version
  // Its provisional records: each pins its segment against eviction (Store::ReleaseRecordPin) until
  // the version is destroyed, so its close never finds a spill evicted.
  std::vector<Location> spills;
  std::atomic<uint64_t> ram{0};     // data.capacity() as of the last change (victim choice, no lock)
  std::atomic<bool> spilling{false};  // a thread is spilling it (others pick another victim)
  Attr attr;          // mode, uid, gid, times; attr.size is ignored (data.size() is the size)
  uint64_t gen = 1;   // bumped on every change of the bytes or the size
  uint64_t attr_gen = 1;  // bumped on every change of attr (chmod, utimens...) after creation

  // io_mu serializes record writes and commits of this version; guards the fields below.
  std::mutex io_mu;
  bool has_record = false;
  uint64_t record_gen = 0;
  Location record;
  uint64_t committed_gen = 0;  // gen of the last successful CommitFile (0 = never)
  uint64_t committed_attr_gen = 0;

  // Guarded by the owning Inode's mu.
  int writers = 0;
  // When its last writer was released (Impl::next_order; 0 = never released). A commit counts from this
  // moment, not from when the (deferred) commit runs: the order of close(2) decides which version wins.
  uint64_t close_order = 0;
  // A version released before another version of the inode committed: it never commits (it would put
  // older content over newer), no open joins it, stat ignores it. Its deferred commit just drops it.
  bool superseded = false;
};

// One inode the kernel knows (or that an open handle still uses).
struct Inode {
  Inode(uint64_t i, uint32_t t) : ino(i), type(t) {}
  const uint64_t ino;
  const uint32_t type;  // S_IFMT bits

  // Guarded by Impl::table_mu.
  uint64_t nlookup = 0;
  uint64_t open_handles = 0;

  // Serializes the commits of this inode's versions (taken after Version::io_mu, before mu), so the
  // superseded check and CommitFile are one step.
  std::mutex commit_mu;
  std::mutex mu;  // guards the fields below
  bool unlinked = false;             // its name was unlinked or replaced: staged versions are discarded
  std::shared_ptr<Version> primary;  // the staged version that opens join and stat shows
  std::vector<std::shared_ptr<Version>> writing;  // versions with writers > 0 (primary + hidden ones)
  uint64_t committed_seq = 0;        // seq of the newest committed version
  bool contended = false;            // a hidden version is being written: page cache may mix versions
  // Open handles of this inode that use the page cache (not direct_io): while any is open, no new
  // version may start on this number (its O_TRUNC would reset their i_size, its writes their pages).
  uint64_t pc_handles = 0;
  bool renumbered = false;           // Store::Renumber moved its name to a new number (unlinked too)
  uint64_t lost_parent = 0;          // the name the kernel last looked it up by, or that it lost
  std::string lost_name;             // (renumbered, unlinked, replaced): where an ESTALE'd open retries
  uint64_t renumbered_to = 0;        // the number Renumber gave its name (0: none)
  // Bumped when a version starts on this number in place under open page-cache readers (a reopen via
  // /proc/self/fd: Impl::UndoRenumber): readers opened before then read the current content, as on a
  // local fs, not the content pinned at their open. Read without in->mu.
  std::atomic<uint64_t> rewrites{0};
  bool hidden_ever = false;          // never keep_cache again: cached pages may belong to a hidden version
  Attr last_attr;                    // last attributes seen (answers fstat of an unlinked file)
  Location last_loc;                 // last committed location seen (opens of a just-replaced file)
  bool last_committed = false;
};

struct Handle {
  std::shared_ptr<Inode> inode;
  std::shared_ptr<Version> version;  // writable handles; readers of a staged version
  bool writable = false;
  bool append = false;  // O_APPEND
  Location loc;      // readers of committed content: pinned at open
  uint64_t size = 0;
  bool pc = false;   // counted in Inode::pc_handles (opened without direct_io)
  uint64_t rewrites = 0;  // Inode::rewrites at open (readers of committed content)
};

Handle* H(fuse_file_info* fi) { return reinterpret_cast<Handle*>(fi->fh); }

}  // namespace

struct KvfsFs::Impl {
  Impl(Store* s, FsOptions o) : store(s), opts(o) { staging.store = s; }

  Store* store;
  FsOptions opts;
  KvfsFs* owner = nullptr;  // for StatsJson
  fuse_session* se = nullptr;
  bool mounted = false;
  bool signals = false;

  std::mutex table_mu;
  std::unordered_map<uint64_t, std::shared_ptr<Inode>> table;
  std::atomic<uint64_t> next_seq{1};
  std::atomic<uint64_t> next_order{1};  // Version::close_order
  Staging staging;
  // Reads referenced chunks of staged versions (copy-on-write bases, spills): Store::Read, so every
  // byte is verified against its block checksum.
  ChunkBuffer::Fetch fetch = [this](const Location& l, uint64_t off, size_t len, char* out) -> Status {
    size_t got = 0;
    Status s = store->Read(l, off, len, out, &got);
    if (s.ok() && got != len) return Status::Corruption("short read of a staged extent");
    return s;
  };
  // The same without loading values into the LRU: a streamed commit reads each spilled byte once.
  ChunkBuffer::Fetch fetch_uncached = [this](const Location& l, uint64_t off, size_t len, char* out) -> Status {
    size_t got = 0;
    Status s = store->ReadUncached(l, off, len, out, &got);
    if (s.ok() && got != len) return Status::Corruption("short read of a staged extent");
    return s;
  };
  std::atomic<uint64_t> open_handles{0}, staged_versions{0}, shadows{0}, committed{0}, discarded{0},
      flush_records{0}, flush_errors{0}, commit_errors{0}, renumbered{0};
  std::atomic<uint64_t> bytes_read{0}, bytes_written{0};
  FuseOpStats op_stats;  // requests and handler latency by operation (Timed in MakeOps)

  // Inode numbers that Renumber handed out (the number a retried open finds). Read-only opens of them
  // use direct_io, so such a number never has page-cache handles: a retried writable open can always
  // start its version there (never a second ESTALE). `virgin` until the first writable open starts a
  // version on it without renumbering again. Not tied to the inode table: the kernel's retry itself
  // may FORGET the new number (fuse_dentry_revalidate) before it looks it up again. Bounded: the oldest
  // numbers are dropped first (kMaxFresh renumbers later; their readers use the page cache again).
  // fresh_mu is a leaf lock, also taken under Inode::mu.
  static constexpr size_t kMaxFresh = 65536;
  std::mutex fresh_mu;
  std::unordered_map<uint64_t, bool> fresh;  // ino -> virgin
  std::deque<uint64_t> fresh_order;
  void AddFresh(uint64_t ino, bool virgin = true) {
    std::lock_guard<std::mutex> g(fresh_mu);
    if (fresh.emplace(ino, virgin).second) fresh_order.push_back(ino);
    while (fresh_order.size() > kMaxFresh) {
      fresh.erase(fresh_order.front());
      fresh_order.pop_front();
    }
  }
  bool IsFresh(uint64_t ino) {
    std::lock_guard<std::mutex> g(fresh_mu);
    return fresh.count(ino) != 0;
  }
  bool TakeVirgin(uint64_t ino) {
    std::lock_guard<std::mutex> g(fresh_mu);
    auto it = fresh.find(ino);
    if (it == fresh.end() || !it->second) return false;
    it->second = false;
    return true;
  }

  // Threads whose open (or truncate(path)) we answered ESTALE, by the request's pid (the calling
  // thread's id), with the name a renumber moved when we know it. The kernel retries such a call once,
  // after a fresh LOOKUP; the thread's next open is that retry, and it must not get ESTALE again (ext4
  // never answers ESTALE): it starts its version on the number it finds when no page-cache handle is
  // open there (docs/semantics.md §1 "Inode numbers"). While a retry on a name is pending, whatever
  // number the name gets meanwhile (a rename over it) is kept free of page-cache readers (AddFresh),
  // and other writers do not renumber it (the retry's OPEN may follow its LOOKUP at any time). A stale
  // entry (the retry's LOOKUP failed) only spares the thread's next open a renumber. Bounded (cleared
  // when kMaxFresh threads wait). A leaf lock.
  using NameKey = std::pair<uint64_t, std::string>;
  struct NameKeyHash {
    size_t operator()(const NameKey& k) const {
      return std::hash<std::string>()(k.second) ^ (std::hash<uint64_t>()(k.first) * 0x9e3779b97f4a7c15ull);
    }
  };
  std::mutex retry_mu;
  std::unordered_map<uint32_t, NameKey> retrying;          // tid -> name (parent 0: unknown)
  std::unordered_map<NameKey, int, NameKeyHash> pending;   // name -> retrying threads
  void MarkRetry(const fuse_ctx* ctx, uint64_t parent = 0, const std::string& name = {}) {
    if (!ctx || ctx->pid <= 0) return;
    std::lock_guard<std::mutex> g(retry_mu);
    if (retrying.size() >= kMaxFresh) {
      retrying.clear();
      pending.clear();
    }
    auto [it, added] = retrying.try_emplace(static_cast<uint32_t>(ctx->pid), NameKey{parent, name});
    if (!added) {
      if (parent == 0 || it->second.first != 0) return;  // keep the name a renumber recorded
      it->second = NameKey{parent, name};
    }
    if (parent != 0) pending[it->second]++;
  }
  bool TakeRetry(const fuse_ctx* ctx) {
    if (!ctx || ctx->pid <= 0) return false;
    std::lock_guard<std::mutex> g(retry_mu);
    auto it = retrying.find(static_cast<uint32_t>(ctx->pid));
    if (it == retrying.end()) return false;
    if (it->second.first != 0) {
      auto p = pending.find(it->second);
      if (p != pending.end() && --p->second <= 0) pending.erase(p);
    }
    retrying.erase(it);
    return true;
  }
  // A LOOKUP by a thread whose open is being retried: the retry's own LOOKUP (LOOKUP_REVAL) of the name
  // it will open. The regular file found is the retry's target: from now on it gets no page-cache
  // readers, and other writers do not renumber it.
  void RetryLookup(const fuse_ctx* ctx, uint64_t parent, const std::string& name, uint64_t ino) {
    if (!ctx || ctx->pid <= 0) return;
    {
      std::lock_guard<std::mutex> g(retry_mu);
      if (retrying.empty()) return;
      auto it = retrying.find(static_cast<uint32_t>(ctx->pid));
      if (it == retrying.end()) return;
      NameKey k{parent, name};
      if (it->second != k) {
        if (it->second.first != 0) {
          auto p = pending.find(it->second);
          if (p != pending.end() && --p->second <= 0) pending.erase(p);
        }
        it->second = k;
        pending[k]++;
      }
    }
    AddFresh(ino, /*virgin=*/false);
  }
  bool RetryPending(uint64_t parent, const std::string& name) {
    std::lock_guard<std::mutex> g(retry_mu);
    return !pending.empty() && pending.count(NameKey{parent, name}) != 0;
  }
  // The error reply of an open/create/truncate(path): a missing inode is ESTALE, and the thread's
  // retry is expected (MarkRetry).
  void ReplyOpenError(fuse_req_t req, const Status& s) {
    int e = ToErrno(s, ErrCtx::kInode);
    if (e == ESTALE) MarkRetry(fuse_req_ctx(req));
    fuse_reply_err(req, e);
  }

  // Kernel page-cache invalidations run on their own thread: fuse_lowlevel_notify_inval_inode must not
  // be called from a worker that the kernel may be waiting on.
  std::mutex nq_mu;
  std::condition_variable nq_cv;
  struct Notice {
    uint64_t ino = 0;       // inval_inode (name empty) or the old inode of a changed name
    uint64_t parent = 0;    // inval_entry when name is not empty
    std::string name;
  };
  std::deque<Notice> nq;
  struct ListenerGate {
    std::mutex mu;
    Impl* impl = nullptr;
  };
  std::shared_ptr<ListenerGate> gate;
  bool nq_stop = false;
  std::thread notifier;

  // ---- inode table ----
  std::shared_ptr<Inode> Ref(uint64_t ino, uint32_t type) {
    std::lock_guard<std::mutex> g(table_mu);
    auto& p = table[ino];
    if (!p) p = std::make_shared<Inode>(ino, type & S_IFMT);
    p->nlookup++;
    return p;
  }
  std::shared_ptr<Inode> Get(uint64_t ino) {
    std::lock_guard<std::mutex> g(table_mu);
    auto it = table.find(ino);
    return it == table.end() ? nullptr : it->second;
  }
  // Get, or create an entry without a lookup reference (a handle or an op on an inode we dropped).
  std::shared_ptr<Inode> GetOrMake(uint64_t ino, uint32_t type) {
    std::lock_guard<std::mutex> g(table_mu);
    auto& p = table[ino];
    if (!p) p = std::make_shared<Inode>(ino, type & S_IFMT);
    return p;
  }
  void MaybeEraseLocked(const std::shared_ptr<Inode>& in) {
    if (in->nlookup == 0 && in->open_handles == 0 && in->ino != kRootIno) {
      {
        // A version still committing (deferred) keeps its inode: a new Inode object for the same
        // number would not see it.
        std::lock_guard<std::mutex> g(in->mu);
        if (!in->writing.empty()) return;
      }
      auto it = table.find(in->ino);
      if (it != table.end() && it->second == in) table.erase(it);
    }
  }
  void Forget(uint64_t ino, uint64_t n) {
    std::lock_guard<std::mutex> g(table_mu);
    auto it = table.find(ino);
    if (it == table.end()) return;
    auto in = it->second;
    in->nlookup = n >= in->nlookup ? 0 : in->nlookup - n;
    MaybeEraseLocked(in);
  }
  void AddHandle(const std::shared_ptr<Inode>& in) {
    std::lock_guard<std::mutex> g(table_mu);
    in->open_handles++;
    open_handles++;
  }
  void DropHandle(const std::shared_ptr<Inode>& in) {
    std::lock_guard<std::mutex> g(table_mu);
    in->open_handles--;
    open_handles--;
    MaybeEraseLocked(in);
  }
  // parent/name: the name it lost (a writable open that then answers ESTALE expects its retry there).
  void MarkUnlinked(uint64_t ino, uint64_t parent, const std::string& name) {
    if (ino == 0) return;
    auto in = Get(ino);
    if (!in) return;
    std::lock_guard<std::mutex> g(in->mu);
    in->unlinked = true;
    in->last_attr.nlink = 0;
    if (!in->renumbered) {
      in->lost_parent = parent;
      in->lost_name = name;
    }
  }

  // The inode's path in the mount, for log lines ("/a/b"); "(unlinked)" when the index no longer has it.
  std::string PathOf(uint64_t ino) {
    std::vector<std::string> parts;
    for (int depth = 0; ino != kRootIno && depth < 256; ++depth) {
      auto n = store->GetInode(ino);
      if (!n.ok()) return "(unlinked)";
      parts.push_back(n->name);
      ino = n->parent;
    }
    std::string p;
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) p += "/" + *it;
    return p.empty() ? "/" : p;
  }

  void QueueInval(uint64_t ino) {
    std::lock_guard<std::mutex> g(nq_mu);
    nq.push_back(Notice{ino, 0, {}});
    nq_cv.notify_one();
  }
  // Peers' journal entries were applied to the index (Store's peer thread): tell the kernel.
  void OnPeerChanges(const PeerChanges& c) {
    std::lock_guard<std::mutex> g(nq_mu);
    for (const auto& n : c.names) nq.push_back(Notice{n.old_ino, n.parent, n.name});
    for (uint64_t ino : c.inodes) nq.push_back(Notice{ino, 0, {}});
    nq_cv.notify_one();
  }
  void NotifierMain() {
    std::unique_lock<std::mutex> lk(nq_mu);
    for (;;) {
      nq_cv.wait(lk, [&] { return nq_stop || !nq.empty(); });
      if (nq_stop) return;
      Notice n = std::move(nq.front());
      nq.pop_front();
      lk.unlock();
      if (se && !n.name.empty()) {
        // The kernel takes the parent directory's lock for this: never call it from a FUSE worker.
        int r = fuse_lowlevel_notify_inval_entry(se, n.parent, n.name.data(), n.name.size());
        if (r != 0 && r != -ENOENT) spdlog::debug("inval_entry {}/{}: {}", n.parent, n.name, strerror(-r));
        if (n.ino != 0 && store->GetInode(n.ino).status().IsNotFound()) MarkUnlinked(n.ino, n.parent, n.name);
      } else if (se && n.ino != 0) {
        int r = fuse_lowlevel_notify_inval_inode(se, n.ino, 0, 0);
        if (r != 0 && r != -ENOENT) spdlog::debug("inval_inode {}: {}", n.ino, strerror(-r));
      }
      lk.lock();
    }
  }

  // ---- attributes ----
  static void VersionAttr(Version& v, Attr* a) {
    std::shared_lock<std::shared_mutex> g(v.mu);
    *a = v.attr;
    a->size = v.data.size();
  }

  // Attributes stat shows for ino: the primary staged version if any, else the Store's. *timeout: how
  // long the kernel may cache them (0 while staged: st_size must be exact).
  // The attributes stat shows while versions are staged (in->mu held): the newest version being
  // written (hidden ones included: the kernel keeps ONE i_size per inode, and the writer's page-cache
  // reads and appends use it, so it must be the writer's size), else the visible primary. False: none.
  static bool StagedAttr(Inode& in, Attr* out) {
    std::shared_ptr<Version> v = in.primary;
    for (auto& w : in.writing) {
      if (w->superseded) continue;
      if (!v || w->seq > v->seq) v = w;
    }
    if (!v) return false;
    VersionAttr(*v, out);
    out->ino = in.ino;
    if (in.unlinked) out->nlink = 0;
    return true;
  }

  Status GetAttr(uint64_t ino, Attr* out, double* timeout) {
    auto in = Get(ino);
    if (in) {
      std::lock_guard<std::mutex> g(in->mu);
      if (StagedAttr(*in, out)) {
        in->last_attr = *out;
        *timeout = 0;
        return Status::OK();
      }
    }
    auto n = store->GetInode(ino);
    if (!n.ok()) {
      if (in && n.status().IsNotFound()) {
        // Gone from the index but still open here (unlinked, or replaced by a peer): fstat answers
        // the last attributes, as a local fs does for an open unlinked file.
        uint64_t handles;
        {
          std::lock_guard<std::mutex> tg(table_mu);
          handles = in->open_handles;
        }
        std::lock_guard<std::mutex> g(in->mu);
        if ((in->unlinked || handles > 0) && in->last_attr.ino == ino) {
          *out = in->last_attr;
          out->nlink = 0;
          *timeout = 0;
          return Status::OK();
        }
      }
      return n.status();
    }
    *out = n->attr;
    out->ino = ino;
    bool cacheable = S_ISDIR(out->mode) || S_ISLNK(out->mode) || n->committed;
    if (in) {
      std::lock_guard<std::mutex> g(in->mu);
      in->last_attr = *out;
      in->last_loc = n->location;
      in->last_committed = n->committed;
      // A hidden version is being written: its writer's lseek(SEEK_END)/append must ask again.
      if (!in->writing.empty()) cacheable = false;
    }
    *timeout = cacheable ? opts.attr_timeout_s : 0;
    return Status::OK();
  }

  // Replies with a positive entry for node (one lookup reference). fresh_only: if n is a staged regular
  // file of which no staged version is left here, reply nothing and return false (the caller looks again).
  // The index's attributes of a staged file are placeholders (size 0): the sizes are the versions' (and
  // StagedAttr shows them). A LOOKUP that read n from the index before the file's deferred commit and
  // replies after it (the commit dropped the version) would give the kernel size 0 with a valid lookup:
  // the kernel then cuts that inode's i_size and page cache under its readers (a publisher's rename
  // looks up the target name: LOOKUP_RENAME_TARGET). The index commits before the version is dropped,
  // so looking again finds the committed node.
  bool ReplyEntry(fuse_req_t req, const Node& n, bool fresh_only = false) {
    auto in = Ref(n.attr.ino, n.attr.mode);
    fuse_entry_param e;
    std::memset(&e, 0, sizeof(e));
    e.ino = n.attr.ino;
    e.generation = 0;
    Attr a = n.attr;
    double at = (S_ISDIR(a.mode) || S_ISLNK(a.mode) || n.committed) ? opts.attr_timeout_s : 0;
    {
      std::unique_lock<std::mutex> g(in->mu);
      if (StagedAttr(*in, &a)) {
        at = 0;
      } else if (fresh_only && S_ISREG(n.attr.mode) && !n.committed) {
        g.unlock();
        Forget(n.attr.ino, 1);
        return false;
      }
      in->last_attr = a;
      in->last_loc = n.location;
      in->last_committed = n.committed;
      if (S_ISREG(n.attr.mode) && !in->unlinked) {
        in->lost_parent = n.parent;
        in->lost_name = n.name;
      }
    }
    FillStat(a, &e.attr);
    e.attr_timeout = at;
    e.entry_timeout = opts.entry_timeout_s;
    fuse_reply_entry(req, &e);
    return true;
  }
  void ReplyNegative(fuse_req_t req) {
    // ino 0 = a negative entry the kernel caches for entry_timeout (connectors probe absent keys a lot).
    fuse_entry_param e;
    std::memset(&e, 0, sizeof(e));
    e.ino = 0;
    e.entry_timeout = opts.negative_timeout_s;
    fuse_reply_entry(req, &e);
  }

  // ---- versions ----
  std::shared_ptr<Version> NewVersion(uint64_t ino, bool hidden, bool direct) {
    staged_versions++;
    if (hidden) shadows++;
    auto v = std::make_shared<Version>(next_seq.fetch_add(1), ino, hidden, direct, &staging);
    std::lock_guard<std::mutex> g(staging.mu);
    staging.versions.emplace(v.get(), v);
    return v;
  }

  // After a change of v.data (v.mu held exclusively): the RAM it holds now vs. cap_before.
  void AccountRam(Version& v, uint64_t cap_before) {
    uint64_t cap = v.data.capacity();
    staging.ram_bytes += static_cast<int64_t>(cap) - static_cast<int64_t>(cap_before);
    v.ram.store(cap);
  }

  // ---- staging budget (DESIGN §4: "a FUSE worker never waits for memory") ----
  // Called before a change that allocates up to `need` bytes of staging RAM (no version lock held).
  // While the staged RAM + need exceeds the budget, spills the version holding the most RAM (its own
  // version included). Never waits for memory: when every candidate is being spilled by another
  // thread, or nothing is left to spill, the change goes ahead over the budget. Errors of the spill
  // (NoSpace: backing store or capacity full; IOError) are the caller's: the write fails cleanly,
  // nothing staged is lost (the victim keeps its bytes in RAM).
  Status MakeRoom(uint64_t need) {
    const uint64_t budget = opts.staging_bytes;
    for (int round = 0; round < 64; ++round) {
      int64_t ram = staging.ram_bytes.load();
      if (ram < 0 || static_cast<uint64_t>(ram) + need <= budget) return Status::OK();
      std::shared_ptr<Version> victim = PickVictim();
      if (!victim) return Status::OK();
      Status s = Spill(*victim);
      victim->spilling.store(false);
      if (!s.ok()) return s;
    }
    return Status::OK();
  }

  // The staged version with the most RAM that no other thread is spilling (marked spilling), or null.
  std::shared_ptr<Version> PickVictim() {
    for (int attempt = 0; attempt < 4; ++attempt) {
      std::shared_ptr<Version> best;
      uint64_t best_ram = 0;
      {
        std::lock_guard<std::mutex> g(staging.mu);
        for (auto& [p, w] : staging.versions) {
          uint64_t r = p->ram.load();
          if (r <= best_ram || p->spilling.load()) continue;
          if (auto v = w.lock()) {
            best = std::move(v);
            best_ram = r;
          }
        }
      }
      if (!best) return nullptr;
      bool expected = false;
      if (best->spilling.compare_exchange_strong(expected, true)) return best;
    }
    return nullptr;
  }

  // Writes v's RAM chunks as ONE provisional record and keeps only their Locations (ChunkBuffer::ToRef).
  // Full chunks only, so appends to the partial last chunk do not read it back; the last chunk too when
  // there is nothing else. The record is journaled only if the version is later committed whole from it
  // (FlushLocked); otherwise it is an orphan (dead bytes).
  Status Spill(Version& v) {
    // io_mu (taken before mu, as Commit does) only if free: it guards the version's last record.
    std::unique_lock<std::mutex> io(v.io_mu, std::try_to_lock);
    std::unique_lock<std::shared_mutex> g(v.mu);
    if (io.owns_lock() && v.has_record && v.record_gen == v.gen && !v.record.empty() &&
        v.record.length == v.data.size()) {
      // Closed and recorded, waiting for its commit: its bytes are that record already. No I/O.
      uint64_t cap = v.data.capacity();
      v.data.SetBacking(v.record, v.data.size());
      AccountRam(v, cap);
      return Status::OK();
    }
    std::vector<size_t> ram = v.data.RamChunks();
    std::vector<size_t> pick;
    for (size_t i : ram) {
      if (v.data.ChunkFull(i)) pick.push_back(i);
    }
    if (pick.empty()) pick = ram;
    if (pick.empty()) return Status::OK();
    std::vector<std::string_view> parts;
    parts.reserve(pick.size());
    for (size_t i : pick) parts.push_back(v.data.ChunkView(i));
    auto r = store->WriteProvisionalRecord(v.ino, parts);
    if (!r.ok()) {
      staging.spill_errors++;
      LogLimited(spdlog::level::warn, LogKey("fuse-spill", r.status()), "spill of {} (inode {}, {} chunks): {}",
                 PathOf(v.ino), v.ino, pick.size(), ErrnoText(r.status()));
      return r.status();
    }
    uint64_t cap = v.data.capacity(), off = 0;
    for (size_t k = 0; k < pick.size(); ++k) {
      v.data.ToRef(pick[k], *r, off);
      off += parts[k].size();
    }
    AccountRam(v, cap);
    v.spills.push_back(*r);
    v.spilled += r->length;
    staging.spilled_bytes += static_cast<int64_t>(r->length);
    staging.spilled_total += r->length;
    staging.spills++;
    return Status::OK();
  }

  // A version for a new writable handle of `in` (its writer counted). The rule (docs/semantics.md):
  //  - without O_TRUNC: join the newest version being written; if none, a copy-on-write *primary*
  //    version of the committed content (visible: stat and new readers see it, as on a local fs);
  //  - O_TRUNC while another version of the inode is being written: a *shadow* (hidden + direct_io),
  //    so two writers of one temp name each produce a whole version and nobody sees a mix;
  //  - O_TRUNC of a committed file nobody writes: a *replacement* (hidden, page cache): readers and
  //    stat keep the committed content until the new version commits whole;
  //  - O_TRUNC of a staged file (created, never committed): a new empty primary version.
  // need_content=false: the caller truncates to 0 anyway (skip the copy-on-write load).
  // retry: the kernel's retry of this thread's call that we answered ESTALE (TakeRetry): never renumber
  // again where that is safe.
  Result<std::shared_ptr<Version>> AcquireWritable(const std::shared_ptr<Inode>& in, bool trunc,
                                                   const fuse_ctx* ctx, bool need_content = true,
                                                   bool retry = false) {
    const bool inplace = retry && UndoRenumber(in);
    for (int attempt = 0;; ++attempt) {
      std::vector<std::shared_ptr<Version>> settle;
      auto r = AcquireWritableOnce(in, trunc, ctx, need_content, retry, inplace,
                                   attempt < 2 ? &settle : nullptr);
      if (settle.empty()) return r;
      // O_TRUNC while the versions of the inode are only waiting for their deferred commit (all
      // writers closed): commit them now, so the new version starts on a committed, idle inode, i.e.
      // on a new inode number. A shadow on this number would make the kernel reset its i_size under
      // the page-cache readers of the closed version (a reader of LMCache's final name read 0 or
      // 131,072 of 262,172 bytes when the second writer of <key>.tmp opened just after the first
      // closed; fs_ops_test SameTempWriters.test_processes, ~1 run in 15).
      for (auto& v : settle) {
        Status s = FinishRelease(in, v);
        if (!s.ok()) spdlog::error("commit of inode {}: {} (version not published)", in->ino, s.ToString());
      }
    }
  }
  // The kernel's retry of a writable open we answered ESTALE came back to the very number we renumbered
  // away from: the open did not go through a name (a /proc/self/fd or /dev/fd magic link, which re-opens
  // the same inode however often it is retried), so a new number can never reach it. Like a local fs, the
  // open then writes that inode: the name moves back to it (Store::Renumber(to)), provided the number
  // the name got is still unused here (no handle, no version). The caller starts its version in place
  // (readers see the rewrite). Returns whether it did.
  bool UndoRenumber(const std::shared_ptr<Inode>& in) {
    uint64_t to, parent;
    std::string name;
    {
      std::lock_guard<std::mutex> g(in->mu);
      if (!in->renumbered || in->renumbered_to == 0 || in->lost_parent == 0) return false;
      to = in->renumbered_to;
      parent = in->lost_parent;
      name = in->lost_name;
    }
    auto cur = store->GetInode(to);
    if (!cur.ok() || !cur->committed || cur->parent != parent || cur->name != name) return false;
    if (auto other = Get(to)) {
      {
        std::lock_guard<std::mutex> tg(table_mu);
        if (other->open_handles != 0) return false;
      }
      std::lock_guard<std::mutex> og(other->mu);
      if (!other->writing.empty()) return false;
    }
    auto back = store->Renumber(to, in->ino);
    if (!back.ok()) {
      spdlog::debug("undo renumber {} -> {}: {}", to, in->ino, back.status().ToString());
      return false;
    }
    {
      std::lock_guard<std::mutex> g(in->mu);
      in->renumbered = false;
      in->unlinked = false;
      in->renumbered_to = 0;
      in->last_attr = back->attr;
      in->last_loc = back->location;
    }
    spdlog::debug("inode {}: renumber to {} undone (a reopen through a magic link)", in->ino, to);
    // Cached dentries of the name that point to `to` (gone now): the notifier drops them and marks
    // `to` unlinked if the kernel still holds it.
    std::lock_guard<std::mutex> qg(nq_mu);
    nq.push_back(Notice{to, parent, name});
    nq_cv.notify_one();
    return true;
  }
  // inplace: UndoRenumber just gave the name back to this number: start the version here whatever
  // page-cache handles are open, as a visible version, and invalidate the kernel's cache of the inode.
  Result<std::shared_ptr<Version>> AcquireWritableOnce(const std::shared_ptr<Inode>& in, bool trunc,
                                                       const fuse_ctx* ctx, bool need_content, bool retry,
                                                       bool inplace,
                                                       std::vector<std::shared_ptr<Version>>* settle) {
    std::lock_guard<std::mutex> g(in->mu);
    // Newest version being written or being committed by its last release (still in `writing`).
    std::shared_ptr<Version> newest;
    for (auto& w : in->writing) {
      if (w->superseded) continue;  // older than the committed content: never joined
      if (!newest || w->seq > newest->seq) newest = w;
    }
    auto join = [&](const std::shared_ptr<Version>& v) {
      v->writers++;
      if (std::find(in->writing.begin(), in->writing.end(), v) == in->writing.end()) in->writing.push_back(v);
      return v;
    };
    int64_t now = NowNs();
    if (!trunc) {
      if (newest) return join(newest);  // POSIX: handles of one file see each other's writes
    }
    if (trunc && newest && settle && !in->unlinked &&
        std::all_of(in->writing.begin(), in->writing.end(), [](const auto& w) { return w->writers == 0; })) {
      *settle = in->writing;  // the caller commits them and tries again
      return std::shared_ptr<Version>();
    }
    if (trunc && newest) {
      auto v = NewVersion(in->ino, /*hidden=*/true, /*direct=*/true);
      VersionAttr(*newest, &v->attr);
      v->attr.mtime_ns = v->attr.ctime_ns = now;
      v->data.Resize(0);
      in->contended = true;
      in->hidden_ever = true;
      return join(v);
    }
    auto n = store->GetInode(in->ino);
    Attr a;
    if (!n.ok()) {
      // Gone between the kernel's LOOKUP and this OPEN. Unlinked or renamed over on this node: like a
      // local fs, the open gets the doomed inode (a version that is discarded at its release), as
      // read-only opens do — unless page-cache handles of the old content are open here (this version
      // would reset their i_size). Renumbered, replaced by a peer, or with such handles: NotFound,
      // which the open answers with ESTALE, so the kernel looks the name up again.
      // On the kernel's retry, the number was live at its LOOKUP just now: the unlink or replacement
      // (on this node before its flag is set, or a peer's) came during this open, so it is doomed too.
      if (n.status().IsNotFound() && retry && !in->renumbered) in->unlinked = true;
      if (!n.status().IsNotFound() || !in->unlinked || in->renumbered || in->pc_handles != 0 ||
          in->last_attr.ino != in->ino) {
        if (in->lost_parent != 0) MarkRetry(ctx, in->lost_parent, in->lost_name);
        return n.status();
      }
      // O_TRUNC: hidden like any rewrite of committed content (racing readers of the doomed inode
      // read its last version whole, through direct_io).
      auto v = NewVersion(in->ino, /*hidden=*/trunc, /*direct=*/false);
      a = in->last_attr;
      a.nlink = 0;
      if (trunc || !need_content || !in->last_committed || in->last_loc.empty()) {
        if (trunc && a.size != 0) a.mtime_ns = a.ctime_ns = now;
        a.size = 0;
      } else {
        a.size = std::min<uint64_t>(a.size, in->last_loc.length);
        v->data.SetBacking(in->last_loc, a.size);
      }
      v->attr = a;
      if (trunc) {
        in->contended = true;
        in->hidden_ever = true;
      } else {
        in->primary = v;
      }
      return join(v);
    }
    // A new version may start on this number only if no page-cache handle is open on it. It does so
    // for the first writable open of a number Renumber handed out (virgin) and for the kernel's retry
    // of an open we answered ESTALE (so the retry never fails again).
    bool keep = false;
    if (in->pc_handles == 0) {
      const bool virgin = TakeVirgin(in->ino);  // used up by whichever writer comes first
      keep = virgin || retry || RetryPending(n->parent, n->name);
    }
    if (inplace) {
      keep = true;
      in->rewrites++;
      QueueInval(in->ino);  // off this thread (nq_mu is a leaf lock)
    }
    if (n->committed && S_ISREG(n->attr.mode) && !keep) {
      // New content of a committed file gets a new inode number (DESIGN §3). The kernel keeps ONE
      // page cache and ONE i_size per inode: were the new version written under this number, a reader
      // that opened the old content (page cache) would read it cut to the new size. So the file moves
      // to a fresh number now, and the open answers ESTALE: the kernel looks the name up again
      // (LOOKUP_REVAL) and retries the open on the new number, once. This number keeps the old content
      // for its open handles (pinned Location) until they close; the kernel forgets it then.
      MarkRetry(ctx, n->parent, n->name);  // before the name moves (OpRename checks it)
      auto nn = store->Renumber(in->ino);
      if (!nn.ok()) return nn.status();
      AddFresh(nn->attr.ino);
      in->renumbered_to = nn->attr.ino;
      in->unlinked = true;  // its name now belongs to the new number
      in->renumbered = true;
      in->lost_parent = n->parent;
      in->lost_name = n->name;
      in->last_attr = n->attr;
      in->last_attr.ino = in->ino;
      in->last_loc = n->location;
      in->last_committed = true;
      renumbered++;
      {
        // Other processes' cached dentries of the name: the notifier thread (it holds no lock a
        // worker needs) invalidates them.
        std::lock_guard<std::mutex> qg(nq_mu);
        nq.push_back(Notice{in->ino, n->parent, n->name});
        nq_cv.notify_one();
      }
      return Status::FromErrno(ESTALE, "inode " + std::to_string(in->ino) + " renumbered to " +
                                           std::to_string(nn->attr.ino) + " for a new version");
    }
    a = n->attr;
    a.ino = in->ino;
    if (trunc) {
      // In place (inplace): a visible version, as a local fs truncates the file under its readers.
      bool committed = n.ok() && n->committed && !inplace;
      auto v = NewVersion(in->ino, /*hidden=*/committed, /*direct=*/false);
      if (a.size != 0) a.mtime_ns = a.ctime_ns = now;
      a.size = 0;
      v->attr = a;
      if (committed) {
        in->contended = true;
        in->hidden_ever = true;
      } else {
        in->primary = v;
      }
      return join(v);
    }
    // Copy-on-write: a non-truncating writable open of a committed file starts from its content, as
    // references to the committed record (no copy). A chunk is copied into RAM when a write changes
    // part of it (ChunkBuffer); until something changes, the version IS the committed value: its
    // FLUSH writes no record and its last RELEASE journals nothing (an O_RDWR open that only reads
    // costs no backing write).
    auto v = NewVersion(in->ino, false, false);
    if (need_content) {
      if (a.size != 0) {
        if (n->location.empty()) return Status::Corruption("committed file without a location");
        a.size = std::min<uint64_t>(a.size, n->location.length);
        v->data.SetBacking(n->location, a.size);
      }
      v->has_record = true;
      v->record = a.size == 0 ? Location{} : n->location;
      v->record_gen = v->gen;
      if (n->committed) {
        v->committed_gen = v->gen;
        v->committed_attr_gen = v->attr_gen;
      }
    } else {
      a.size = 0;
    }
    a.ino = in->ino;
    v->attr = a;
    in->primary = v;
    return join(v);
  }

  // Sets v's size (setattr, truncate by name, fallocate): spills first when growing over the budget,
  // and after, when a large growth took staging over it (its zeros go to the backing store).
  // grow_only: leave a larger size alone (fallocate).
  Status Truncate(Version& v, uint64_t size, int64_t now, bool grow_only = false) {
    if (size > opts.max_file_size) return Status::IOError("file size over --max-file-size", EFBIG);
    uint64_t cur;
    {
      std::shared_lock<std::shared_mutex> g(v.mu);
      cur = v.data.size();
    }
    // Growth makes holes (no RAM); at most the partial last chunk is copied in (one chunk).
    if (size > cur) KVFS_RETURN_IF_ERROR(MakeRoom(ChunkBuffer::kChunk));
    {
      std::unique_lock<std::shared_mutex> g(v.mu);
      if (grow_only && size <= v.data.size()) return Status::OK();
      uint64_t cap = v.data.capacity();
      Status s = v.data.Resize(size, fetch);
      AccountRam(v, cap);
      if (!s.ok()) return s;
      v.gen++;
      v.attr.mtime_ns = v.attr.ctime_ns = now;
    }
    if (size > cur) return MakeRoom(0);
    return Status::OK();
  }

  bool IsUnlinked(Inode& in) {
    std::lock_guard<std::mutex> g(in.mu);
    return in.unlinked;
  }

  // Writes v's bytes as a record if they changed since the last record. Requires v.io_mu.
  Status FlushLocked(Inode& in, Version& v) {
    if (IsUnlinked(in)) return Status::OK();  // discarded at release: nothing to publish
    std::shared_lock<std::shared_mutex> g(v.mu);
    if (v.has_record && v.record_gen == v.gen) return Status::OK();
    if (v.data.size() == 0) {
      v.record = Location{};
      v.has_record = true;
      v.record_gen = v.gen;
      return Status::OK();
    }
    Location whole;
    if (v.data.WholeRecord(&whole)) {
      // Every byte is one record already (spilled in one piece, or an unchanged copy-on-write base):
      // journal that Location, no second copy.
      staging.whole_record_commits++;
      v.record = whole;
      v.has_record = true;
      v.record_gen = v.gen;
      return Status::OK();
    }
    Result<Location> r = Location{};
    if (!v.data.has_refs()) {
      r = store->WriteRecord(in.ino, v.data.Parts());
    } else {
      // Partly spilled (or a changed copy-on-write version): the value is written again whole, streamed
      // in 4 MiB pieces: the referenced chunks are copied segment-to-segment (read back verified,
      // bypassing the LRU) and the RAM chunks copied in, so the commit needs one 4 MiB buffer, not the
      // file's size.
      const uint64_t size = v.data.size();
      r = store->WriteRecordStreamed(in.ino, size, [&](uint64_t off, size_t len, char* out) -> Status {
        size_t got = 0;
        KVFS_RETURN_IF_ERROR(v.data.Read(off, len, out, fetch_uncached, &got));
        if (got != len) return Status::Corruption("short read of a staged version");
        return Status::OK();
      });
      if (r.ok()) staging.streamed_commits++;
    }
    if (!r.ok()) {
      flush_errors++;
      LogLimited(spdlog::level::warn, LogKey("fuse-write-record", r.status()), "write record of {} (inode {}, {} bytes): {}",
                 PathOf(in.ino), in.ino, v.data.size(), ErrnoText(r.status()));
      return r.status();
    }
    flush_records++;
    // The record this one replaces is garbage now (unless it is one of the version's own spills, still
    // referenced by its chunks and released with them): let its segment age.
    if (v.has_record && std::find(v.spills.begin(), v.spills.end(), v.record) == v.spills.end()) {
      store->ReleaseRecordPin(v.record);
    }
    v.record = *r;
    v.has_record = true;
    v.record_gen = v.gen;
    return Status::OK();
  }

  Status Flush(Inode& in, Version& v) {
    std::lock_guard<std::mutex> g(v.io_mu);
    return FlushLocked(in, v);
  }

  // Commits v (record + journal PUT under the inode's current name) unless its name is gone.
  Status Commit(const std::shared_ptr<Inode>& in, const std::shared_ptr<Version>& v) {
    std::lock_guard<std::mutex> g(v->io_mu);
    std::lock_guard<std::mutex> cg(in->commit_mu);
    for (int attempt = 0;; ++attempt) {
      if (IsUnlinked(*in)) return Status::OK();
      {
        std::lock_guard<std::mutex> lg(in->mu);
        if (v->superseded) return Status::OK();  // a version closed later already committed
      }
      KVFS_RETURN_IF_ERROR(FlushLocked(*in, *v));
      Attr a;
      uint64_t gen, attr_gen;
      {
        std::shared_lock<std::shared_mutex> rg(v->mu);
        gen = v->gen;
        attr_gen = v->attr_gen;
        if (v->record_gen != gen && attempt < 3) continue;  // a write landed after the record: again
        a = v->attr;
        a.size = v->data.size();
      }
      if (v->committed_gen == gen && v->committed_attr_gen == attr_gen) return Status::OK();
      a.ino = in->ino;
      if (a.nlink == 0) a.nlink = 1;
      Location loc = a.size == 0 ? Location{} : v->record;
      Status s = store->CommitFile(in->ino, loc, a);
      if (!s.ok()) {
        if (s.IsNotFound() || IsUnlinked(*in)) return Status::OK();  // unlinked meanwhile: discarded
        commit_errors++;
        LogLimited(spdlog::level::warn, LogKey("fuse-commit", s), "commit of {} (inode {}): {}", PathOf(in->ino),
                   in->ino, ErrnoText(s));
        return s;
      }
      committed++;
      v->committed_gen = gen;
      v->committed_attr_gen = attr_gen;
      bool inval = false;
      {
        std::lock_guard<std::mutex> lg(in->mu);
        in->committed_seq = std::max(in->committed_seq, v->seq);
        // Versions whose last writer was released before this commit (their own commit is deferred)
        // are older content: they must not commit after this one, nor be joined.
        uint64_t order = v->writers > 0 || v->close_order == 0 ? next_order.fetch_add(1) : v->close_order;
        for (auto& w : in->writing) {
          if (w != v && w->writers == 0 && w->close_order != 0 && w->close_order < order) {
            w->superseded = true;
            if (in->primary == w) in->primary = nullptr;
          }
        }
        // A newer commit hides an older staged primary (its writers keep writing; it commits later).
        if (in->primary && in->primary != v && in->primary->seq < v->seq) in->primary = nullptr;
        inval = in->contended || v->hidden;
        in->last_attr = a;
        in->last_loc = loc;
        in->last_committed = true;
      }
      // The content changed under readers that cached the old one (a hidden version committed, or
      // versions raced): drop the kernel's cached pages and attributes of this inode.
      if (inval) QueueInval(in->ino);
      return Status::OK();
    }
  }

  // close(2) of the version's last writer handle (FLUSH): the version becomes what stat and new
  // readers see at once (close-to-open), even though its journal PUT waits for RELEASE, which the
  // kernel sends asynchronously after close returns.
  void PromoteAtClose(const std::shared_ptr<Inode>& in, const std::shared_ptr<Version>& v) {
    std::lock_guard<std::mutex> g(in->mu);
    if (in->unlinked || v->writers != 1 || in->primary == v) return;
    in->primary = v;
  }

  // Drops one writer of v; the last one commits it (DESIGN §4 "Commit"). defer: commit it
  // opts.commit_delay_ms later on the committer thread, so that the rename that usually follows close
  // (temp file + rename) happens first and the journal gets one PUT under the final name instead of a
  // PUT under the temp name + a RENAME. Until then the version stays staged and visible as before.
  Status ReleaseWritable(const std::shared_ptr<Inode>& in, const std::shared_ptr<Version>& v,
                         bool defer = false) {
    {
      std::lock_guard<std::mutex> g(in->mu);
      if (--v->writers > 0) return Status::OK();
      v->close_order = next_order.fetch_add(1);
    }
    if (defer && opts.commit_delay_ms > 0) {
      std::lock_guard<std::mutex> g(cq_mu);
      if (!cq_stop) {
        cq.push_back(Deferred{std::chrono::steady_clock::now() + std::chrono::milliseconds(opts.commit_delay_ms),
                              in, v});
        cq_cv.notify_one();
        return Status::OK();
      }
    }
    return FinishRelease(in, v);
  }

  // The last writer is gone: commit v (again if something changed while committing), then drop it.
  Status FinishRelease(const std::shared_ptr<Inode>& in, const std::shared_ptr<Version>& v) {
    {
      std::lock_guard<std::mutex> g(in->mu);
      if (v->writers > 0) return Status::OK();  // a new writer joined: its release commits
    }
    bool unl = IsUnlinked(*in);
    Status s;
    for (int round = 0;; ++round) {
      s = Commit(in, v);
      // A truncate(path) or chmod that landed on this version while it was being committed (its last
      // writer already gone) must not be lost: commit again.
      std::lock_guard<std::mutex> g(in->mu);
      if (!s.ok() || v->writers != 0 || in->unlinked || v->superseded || round >= 8) break;
      std::shared_lock<std::shared_mutex> vg(v->mu);
      if (v->committed_gen == v->gen && v->committed_attr_gen == v->attr_gen) break;
    }
    std::lock_guard<std::mutex> g(in->mu);
    if (v->writers == 0) {
      auto& w = in->writing;
      w.erase(std::remove(w.begin(), w.end(), v), w.end());
      // An unlinked inode keeps its last version as what fstat/lseek of its remaining readers show
      // (it can never be published or opened by name again).
      if (in->primary == v && !in->unlinked) in->primary = nullptr;
      if (w.empty()) in->contended = false;
      if (unl || in->unlinked || v->superseded) discarded++;
    }
    return s;
  }

  // ---- deferred commits ----
  struct Deferred {
    std::chrono::steady_clock::time_point due;
    std::shared_ptr<Inode> in;
    std::shared_ptr<Version> v;
  };
  std::mutex cq_mu;
  std::condition_variable cq_cv;
  std::deque<Deferred> cq;  // due times are nondecreasing (one fixed delay)
  bool cq_stop = false;
  int cq_inflight = 0;  // commits the committer thread popped and is running (guarded by cq_mu)
  std::thread committer;

  void CommitterMain() {
    std::unique_lock<std::mutex> lk(cq_mu);
    for (;;) {
      if (cq.empty()) {
        if (cq_stop) return;
        cq_cv.wait(lk);
        continue;
      }
      if (!cq_stop && std::chrono::steady_clock::now() < cq.front().due) {
        cq_cv.wait_until(lk, cq.front().due);
        continue;
      }
      Deferred d = std::move(cq.front());
      cq.pop_front();
      cq_inflight++;
      lk.unlock();
      RunDeferred(d);
      lk.lock();
      cq_inflight--;
      cq_cv.notify_all();
    }
  }
  void RunDeferred(Deferred& d) {
    Status s = FinishRelease(d.in, d.v);
    if (!s.ok()) {
      LogLimited(spdlog::level::err, LogKey("fuse-deferred-commit", s), "commit of {} (inode {}): {} (version not published)",
                 PathOf(d.in->ino), d.in->ino, ErrnoText(s));
    }
    std::lock_guard<std::mutex> g(table_mu);
    MaybeEraseLocked(d.in);
  }
  // Runs every deferred commit now, in the calling thread, and waits for the one the committer may be
  // running: fsync / fsyncdir must also cover files closed just before (their commit is deferred).
  void DrainDeferred() {
    std::deque<Deferred> todo;
    {
      std::unique_lock<std::mutex> lk(cq_mu);
      todo.swap(cq);
      cq_cv.wait(lk, [&] { return cq_inflight == 0; });
    }
    for (auto& d : todo) RunDeferred(d);
  }
  // Commits everything deferred now and stops the committer thread.
  void StopCommitter() {
    {
      std::lock_guard<std::mutex> g(cq_mu);
      cq_stop = true;
      cq_cv.notify_all();
    }
    if (committer.joinable()) committer.join();
  }
};

// ======================================================================================================
// FUSE callbacks
// ======================================================================================================
namespace {

KvfsFs::Impl* FS(fuse_req_t req) { return static_cast<KvfsFs::Impl*>(fuse_req_userdata(req)); }

bool NameTooLong(const char* name) { return std::strlen(name) > 255; }

// The group of a new entry in `parent` (the setgid-directory rule of Linux file systems such as ext4):
// in a directory with S_ISGID the entry gets the directory's group and a new subdirectory keeps
// S_ISGID (*mode); elsewhere the creator's gid. An unreadable parent leaves it to the create's own error.
gid_t NewEntryGid(KvfsFs::Impl* fs, fuse_ino_t parent, const fuse_ctx* ctx, mode_t* mode) {
  auto p = fs->store->GetInode(parent);
  if (!p.ok() || !(p->attr.mode & S_ISGID)) return ctx->gid;
  if (S_ISDIR(*mode)) *mode |= S_ISGID;
  return p->attr.gid;
}

void Reply(fuse_req_t req, const Status& s, ErrCtx ctx = ErrCtx::kDefault) {
  fuse_reply_err(req, ToErrno(s, ctx));
}

void OpInit(void* userdata, fuse_conn_info* conn) {
  auto* fs = static_cast<KvfsFs::Impl*>(userdata);
  auto want = [&](unsigned cap) {
    if (conn->capable & cap) conn->want |= cap;
  };
  // The daemon must see O_TRUNC at open: a truncating open starts a new version (DESIGN §4).
  want(FUSE_CAP_ATOMIC_O_TRUNC);
  want(FUSE_CAP_ASYNC_READ);
  want(FUSE_CAP_ASYNC_DIO);        // large O_DIRECT requests are split and sent concurrently
  want(FUSE_CAP_PARALLEL_DIROPS);  // lookups/creates in one directory in parallel (hash fan-out)
  want(FUSE_CAP_READDIRPLUS);
  want(FUSE_CAP_READDIRPLUS_AUTO);
  // No writeback cache: every write reaches the daemon, so FLUSH sees all bytes of close(2), and
  // the kernel never writes back pages after RELEASE.
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
  // Locks stay node-local in the kernel (we implement no lock ops).
  conn->want &= ~(FUSE_CAP_POSIX_LOCKS | FUSE_CAP_FLOCK_LOCKS);
  if (fs->opts.splice) {
    want(FUSE_CAP_SPLICE_READ);
    want(FUSE_CAP_SPLICE_WRITE);
    want(FUSE_CAP_SPLICE_MOVE);
  } else {
    conn->want &= ~(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
  }
  conn->max_write = fs->opts.max_write;
  conn->max_readahead = fs->opts.max_readahead;
  conn->max_background = 128;          // async reads / direct I/O in flight
  conn->congestion_threshold = 96;
  conn->time_gran = 1;
}

void OpDestroy(void*) {}

void OpLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  auto* fs = FS(req);
  if (NameTooLong(name)) return (void)fuse_reply_err(req, ENAMETOOLONG);
  // A staged file found here may be committed (its version dropped) before the reply: look again then
  // (ReplyEntry fresh_only). The last attempt replies whatever it finds: a staged node without a version
  // is a file being created right now (CreateFile before its open), empty.
  for (int attempt = 0;; ++attempt) {
    auto r = fs->store->Lookup(parent, name);
    if (!r.ok()) {
      if (r.status().IsNotFound()) {
        fs->store->RequestPeerRefresh();  // a peer may have just written it (rate-limited, never blocks)
        return fs->ReplyNegative(req);
      }
      return Reply(req, r.status());
    }
    if (S_ISREG(r->attr.mode) && !r->committed && fs->opts.test_lookup_delay_ms > 0 && attempt == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(fs->opts.test_lookup_delay_ms));  // TEST ONLY
    }
    if (S_ISREG(r->attr.mode)) fs->RetryLookup(fuse_req_ctx(req), parent, name, r->attr.ino);
    if (fs->ReplyEntry(req, *r, /*fresh_only=*/attempt < 3)) return;
  }
}

void OpForget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  FS(req)->Forget(ino, nlookup);
  fuse_reply_none(req);
}

void OpForgetMulti(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  auto* fs = FS(req);
  for (size_t i = 0; i < count; ++i) fs->Forget(forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

void OpGetattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  auto* fs = FS(req);
  Attr a;
  double timeout = 0;
  Handle* h = fi ? H(fi) : nullptr;
  // fstat-like getattr through a handle: that version's own view (a reader's, unless the file was
  // rewritten in place since it opened: then the inode's, as its reads, OpRead).
  if (h && h->version && (h->writable || h->inode->rewrites.load() == h->rewrites)) {
    KvfsFs::Impl::VersionAttr(*h->version, &a);
    a.ino = ino;
    struct stat st;
    FillStat(a, &st);
    return (void)fuse_reply_attr(req, &st, 0);
  }
  Status s = fs->GetAttr(ino, &a, &timeout);
  if (!s.ok()) return Reply(req, s, ErrCtx::kInode);
  struct stat st;
  FillStat(a, &st);
  fuse_reply_attr(req, &st, timeout);
}

void OpSetattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi) {
  auto* fs = FS(req);
  Handle* h = fi ? H(fi) : nullptr;
  auto in = h ? h->inode : fs->Get(ino);
  int64_t now = NowNs();
  Attr na;
  uint32_t mask = 0;
  uint32_t type = 0;
  if (!in) {
    auto n = fs->store->GetInode(ino);
    if (!n.ok()) return Reply(req, n.status(), ErrCtx::kInode);
    in = fs->GetOrMake(ino, n->attr.mode);
  }
  type = in->type;
  if (to_set & FUSE_SET_ATTR_MODE) {
    na.mode = (attr->st_mode & 07777) | type;
    mask |= kSetMode;
  }
  if (to_set & FUSE_SET_ATTR_UID) {
    na.uid = attr->st_uid;
    mask |= kSetUid;
  }
  if (to_set & FUSE_SET_ATTR_GID) {
    na.gid = attr->st_gid;
    mask |= kSetGid;
  }
  if (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_ATIME_NOW)) {
    na.atime_ns = (to_set & FUSE_SET_ATTR_ATIME_NOW) ? now : TsNs(attr->st_atim);
    mask |= kSetAtime;
  }
  if (to_set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW)) {
    na.mtime_ns = (to_set & FUSE_SET_ATTR_MTIME_NOW) ? now : TsNs(attr->st_mtim);
    mask |= kSetMtime;
  }
  na.ctime_ns = (to_set & FUSE_SET_ATTR_CTIME) ? TsNs(attr->st_ctim) : now;
  mask |= kSetCtime;

  if (to_set & FUSE_SET_ATTR_SIZE) {
    if (S_ISDIR(type)) return (void)fuse_reply_err(req, EISDIR);
    if (!S_ISREG(type)) return (void)fuse_reply_err(req, EINVAL);
    uint64_t size = static_cast<uint64_t>(attr->st_size);
    std::shared_ptr<Version> v = (h && h->writable) ? h->version : nullptr;
    if (v) {
      Status s = fs->Truncate(*v, size, now);
      if (!s.ok()) return Reply(req, s);
    } else {
      // truncate(2) by name: join the version being written (even one whose last writer is committing
      // it right now, so the new size cannot be lost), else a new version; the last writer commits.
      const fuse_ctx* ctx = fuse_req_ctx(req);
      auto r = fs->AcquireWritable(in, /*trunc=*/false, ctx, /*need_content=*/size != 0, fs->TakeRetry(ctx));
      if (!r.ok()) return fs->ReplyOpenError(req, r.status());  // ESTALE: truncate(2) retries the path
      auto nv = *r;
      Status ts = fs->Truncate(*nv, size, now);
      Status s = fs->ReleaseWritable(in, nv);
      if (!ts.ok()) return Reply(req, ts);
      if (!s.ok()) return Reply(req, s);
    }
  }
  // Other attributes: into every staged version (so a later commit carries them) and into the Store
  // (journaled SETATTR for committed inodes).
  uint32_t amask = mask & ~static_cast<uint32_t>(kSetSize);
  {
    std::lock_guard<std::mutex> g(in->mu);
    for (auto& v : in->writing) {
      std::unique_lock<std::shared_mutex> vg(v->mu);
      if (amask & kSetMode) v->attr.mode = na.mode;
      if (amask & kSetUid) v->attr.uid = na.uid;
      if (amask & kSetGid) v->attr.gid = na.gid;
      if (amask & kSetAtime) v->attr.atime_ns = na.atime_ns;
      if (amask & kSetMtime) v->attr.mtime_ns = na.mtime_ns;
      v->attr.ctime_ns = na.ctime_ns;
      v->attr_gen++;
    }
  }
  if (amask & ~static_cast<uint32_t>(kSetCtime)) {
    auto r = fs->store->SetAttr(ino, na, amask);
    if (!r.ok() && !(r.status().IsNotFound() && fs->IsUnlinked(*in))) return Reply(req, r.status());
  }
  Attr a;
  double timeout = 0;
  if (h && h->version) {
    KvfsFs::Impl::VersionAttr(*h->version, &a);
    a.ino = ino;
  } else {
    Status s = fs->GetAttr(ino, &a, &timeout);
    if (!s.ok()) return Reply(req, s, ErrCtx::kInode);
  }
  struct stat st;
  FillStat(a, &st);
  fuse_reply_attr(req, &st, timeout);
}

void OpAccess(fuse_req_t req, fuse_ino_t ino, int mask) {
  auto* fs = FS(req);
  Attr a;
  double t;
  Status s = fs->GetAttr(ino, &a, &t);
  if (!s.ok()) return Reply(req, s, ErrCtx::kInode);
  if (mask == F_OK) return (void)fuse_reply_err(req, 0);
  const fuse_ctx* ctx = fuse_req_ctx(req);
  if (ctx->uid == 0) {
    // root: X needs some x bit on regular files.
    bool ok = !(mask & X_OK) || S_ISDIR(a.mode) || (a.mode & 0111);
    return (void)fuse_reply_err(req, ok ? 0 : EACCES);
  }
  unsigned bits;
  if (ctx->uid == a.uid) bits = (a.mode >> 6) & 7;
  else if (ctx->gid == a.gid) bits = (a.mode >> 3) & 7;
  else bits = a.mode & 7;
  bool ok = ((mask & R_OK) == 0 || (bits & 4)) && ((mask & W_OK) == 0 || (bits & 2)) &&
            ((mask & X_OK) == 0 || (bits & 1));
  fuse_reply_err(req, ok ? 0 : EACCES);
}

void OpReadlink(fuse_req_t req, fuse_ino_t ino) {
  auto r = FS(req)->store->ReadLink(ino);
  if (!r.ok()) return Reply(req, r.status(), ErrCtx::kInode);
  fuse_reply_readlink(req, r->c_str());
}

void OpMkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  auto* fs = FS(req);
  if (NameTooLong(name)) return (void)fuse_reply_err(req, ENAMETOOLONG);
  const fuse_ctx* ctx = fuse_req_ctx(req);
  mode = (mode & 07777) | S_IFDIR;
  const gid_t gid = NewEntryGid(fs, parent, ctx, &mode);
  auto r = fs->store->Mkdir(parent, name, mode, ctx->uid, gid);
  if (!r.ok()) return Reply(req, r.status());
  fs->ReplyEntry(req, *r);
}

void OpRmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Reply(req, FS(req)->store->Rmdir(parent, name));
}

void OpUnlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  auto* fs = FS(req);
  uint64_t ino = 0;
  Status s = fs->store->Unlink(parent, name, &ino);
  if (s.ok()) fs->MarkUnlinked(ino, parent, name);
  Reply(req, s);
}

void OpSymlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name) {
  auto* fs = FS(req);
  if (NameTooLong(name)) return (void)fuse_reply_err(req, ENAMETOOLONG);
  if (std::strlen(link) >= 4096) return (void)fuse_reply_err(req, ENAMETOOLONG);
  const fuse_ctx* ctx = fuse_req_ctx(req);
  mode_t lmode = S_IFLNK;
  auto r = fs->store->Symlink(parent, name, link, ctx->uid, NewEntryGid(fs, parent, ctx, &lmode));
  if (!r.ok()) return Reply(req, r.status());
  fs->ReplyEntry(req, *r);
}

void OpRename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent, const char* newname,
              unsigned flags) {
  auto* fs = FS(req);
  if (flags & ~static_cast<unsigned>(RENAME_NOREPLACE)) return (void)fuse_reply_err(req, EINVAL);
  if (NameTooLong(newname)) return (void)fuse_reply_err(req, ENAMETOOLONG);
  uint64_t replaced = 0;
  if (fs->RetryPending(newparent, newname)) {
    // A writer's open of the destination is being retried (it got ESTALE): the file it will find
    // there must have no page-cache readers (Impl::retrying).
    auto src = fs->store->Lookup(parent, name);
    if (src.ok() && S_ISREG(src->attr.mode)) fs->AddFresh(src->attr.ino, /*virgin=*/false);
  }
  Status s = fs->store->Rename(parent, name, newparent, newname, flags, &replaced);
  // The destination's old inode lost its name: its staged versions are discarded, its readers go on.
  if (s.ok() && replaced != 0) fs->MarkUnlinked(replaced, newparent, newname);
  Reply(req, s);
}

void OpLink(fuse_req_t req, fuse_ino_t, fuse_ino_t, const char*) {
  fuse_reply_err(req, EPERM);  // DESIGN §3: hard links are refused
}

void OpMknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t) {
  auto* fs = FS(req);
  if (!S_ISREG(mode)) return (void)fuse_reply_err(req, EPERM);
  if (NameTooLong(name)) return (void)fuse_reply_err(req, ENAMETOOLONG);
  const fuse_ctx* ctx = fuse_req_ctx(req);
  mode = (mode & 07777) | S_IFREG;
  const gid_t gid = NewEntryGid(fs, parent, ctx, &mode);
  auto r = fs->store->CreateFile(parent, name, mode, ctx->uid, gid, true);
  if (!r.ok()) return Reply(req, r.status());
  auto in = fs->GetOrMake(r->attr.ino, S_IFREG);
  auto v = fs->AcquireWritable(in, true, ctx);  // an empty version, committed at once
  if (!v.ok()) return Reply(req, v.status());
  Status s = fs->ReleaseWritable(in, *v);
  if (!s.ok()) return Reply(req, s);
  auto n = fs->store->GetInode(r->attr.ino);
  if (!n.ok()) return Reply(req, n.status());
  fs->ReplyEntry(req, *n);
}

// Opens a handle of a regular file inode (shared by open and create).
// retry: this call is the kernel's retry of one we answered ESTALE (Impl::TakeRetry).
Status OpenHandle(KvfsFs::Impl* fs, fuse_req_t req, const std::shared_ptr<Inode>& in, fuse_file_info* fi,
                  bool force_trunc, bool retry) {
  int acc = fi->flags & O_ACCMODE;
  bool writable = acc == O_WRONLY || acc == O_RDWR;
  bool trunc = force_trunc || (fi->flags & O_TRUNC);
  auto h = std::make_unique<Handle>();
  h->inode = in;
  h->append = fi->flags & O_APPEND;
  bool direct = (fi->flags & O_DIRECT) || fs->opts.direct_io_all;
  fi->keep_cache = 0;
  if (writable) {
    auto r = fs->AcquireWritable(in, trunc, fuse_req_ctx(req), true, retry);
    if (!r.ok()) return r.status();
    h->version = *r;
    h->writable = true;
    // A shadow version does not share the inode's page cache with the version that owns it.
    if (h->version->direct) direct = true;
  } else {
    if (trunc) {  // O_RDONLY|O_TRUNC truncates on Linux
      auto r = fs->AcquireWritable(in, true, fuse_req_ctx(req), true, retry);
      if (!r.ok()) return r.status();
      Status s = fs->ReleaseWritable(in, *r);
      if (!s.ok()) return s;
    }
    h->rewrites = in->rewrites.load();
    {
      std::lock_guard<std::mutex> g(in->mu);
      h->version = in->primary;  // a file being written (visibly): read the staged bytes (POSIX)
    }
    if (!h->version) {
      auto n = fs->store->GetInode(in->ino);
      if (!n.ok()) {
        // Replaced or unlinked by this node between the kernel's LOOKUP and this OPEN: like a local
        // fs, open the doomed inode and read the version it last had (its record is still in its
        // segment). A peer's replacement answers ESTALE instead: the kernel then finds the new file.
        std::lock_guard<std::mutex> g(in->mu);
        if (!n.status().IsNotFound() || !in->unlinked || !in->last_committed || in->last_attr.ino != in->ino) {
          return n.status();
        }
        h->loc = in->last_loc;
        h->size = in->last_attr.size;
      } else {
        h->loc = n->location;
        h->size = n->attr.size;
      }
      // Committed content never changes under this inode except through this daemon, which writes
      // through the page cache or invalidates it: keep the cache across opens.
      fi->keep_cache = (n.ok() && n->committed) ? 1 : 0;
    }
  }
  {
    std::lock_guard<std::mutex> g(in->mu);
    if (!writable) {
      // The kernel keeps ONE page cache and ONE i_size per inode. Once an inode has had two versions
      // at a time (a hidden one next to the visible one), a page-cache reader could get pages or a
      // size of the other version (zero-filled tails, or a mix): such readers read through direct_io,
      // which returns exactly the bytes of the version this handle reads. So do readers of a number
      // Renumber handed out (a retried writer may start a version there: IsFresh), and a reader whose
      // inode got a new visible version since it looked (this check and the writers' look at
      // pc_handles are under in->mu).
      if (in->contended || in->hidden_ever || in->primary != h->version || fs->IsFresh(in->ino)) {
        direct = true;
      }
    }
    h->pc = !direct;
    if (h->pc) in->pc_handles++;
  }
  fi->direct_io = direct ? 1 : 0;
  if (direct) fi->keep_cache = 0;
  // A read-only handle's FLUSH does nothing here (OpFlush): FOPEN_NOFLUSH lets close(2) return without
  // that round trip to the daemon (one of the ~3 requests of a warm open/read/close). Kernels before 5.16
  // ignore the flag and keep sending FLUSH, which stays correct.
  fi->noflush = h->writable ? 0 : 1;
  fs->AddHandle(in);
  fi->fh = reinterpret_cast<uint64_t>(h.release());
  return Status::OK();
}

void ReleaseHandle(KvfsFs::Impl* fs, Handle* h) {
  auto in = h->inode;
  if (h->pc) {
    // First: the kernel no longer uses this handle, and the commit below makes the inode idle (a
    // retried writable open may then start a version on it).
    std::lock_guard<std::mutex> g(in->mu);
    in->pc_handles--;
  }
  if (h->writable && h->version) {
    Status s = fs->ReleaseWritable(h->inode, h->version, /*defer=*/true);
    if (!s.ok()) {
      LogLimited(spdlog::level::err, LogKey("fuse-release", s), "release of {} (inode {}): {} (version not published)",
                 fs->PathOf(h->inode->ino), h->inode->ino, ErrnoText(s));
    }
  }
  delete h;
  fs->DropHandle(in);
}

void OpOpen(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  auto* fs = FS(req);
  auto in = fs->Get(ino);
  if (!in) {
    auto n = fs->store->GetInode(ino);
    if (!n.ok()) return fs->ReplyOpenError(req, n.status());
    in = fs->GetOrMake(ino, n->attr.mode);
  }
  if (S_ISDIR(in->type)) return (void)fuse_reply_err(req, EISDIR);
  Status s = OpenHandle(fs, req, in, fi, false, fs->TakeRetry(fuse_req_ctx(req)));
  if (!s.ok()) return fs->ReplyOpenError(req, s);
  if (fuse_reply_open(req, fi) != 0) ReleaseHandle(fs, H(fi));  // the kernel never saw the handle
}

void OpCreate(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, fuse_file_info* fi) {
  auto* fs = FS(req);
  if (NameTooLong(name)) return (void)fuse_reply_err(req, ENAMETOOLONG);
  const fuse_ctx* ctx = fuse_req_ctx(req);
  const bool retry = fs->TakeRetry(ctx);
  bool excl = fi->flags & O_EXCL;
  mode = (mode & 07777) | S_IFREG;
  const gid_t gid = NewEntryGid(fs, parent, ctx, &mode);
  auto r = fs->store->CreateFile(parent, name, mode, ctx->uid, gid, excl);
  if (!r.ok()) return Reply(req, r.status());
  const Node& n = *r;
  if (S_ISDIR(n.attr.mode)) return (void)fuse_reply_err(req, EISDIR);
  // A writer's open of this name is being retried: keep page-cache readers off what it will find.
  if (S_ISREG(n.attr.mode) && fs->RetryPending(parent, name)) fs->AddFresh(n.attr.ino, /*virgin=*/false);
  if (!S_ISREG(n.attr.mode)) return (void)fuse_reply_err(req, EEXIST);
  // A new staged file starts an empty version; an existing one (a lost race, or the kernel had no
  // dentry) is opened like open(2) with these flags.
  auto in = fs->Ref(n.attr.ino, n.attr.mode);
  Status s = OpenHandle(fs, req, in, fi, false, retry);
  if (!s.ok()) {
    fs->Forget(n.attr.ino, 1);
    return fs->ReplyOpenError(req, s);
  }
  fuse_entry_param e;
  std::memset(&e, 0, sizeof(e));
  e.ino = n.attr.ino;
  Attr a = n.attr;
  Handle* h = H(fi);
  if (h->version) KvfsFs::Impl::VersionAttr(*h->version, &a);
  a.ino = n.attr.ino;
  FillStat(a, &e.attr);
  e.attr_timeout = 0;
  e.entry_timeout = fs->opts.entry_timeout_s;
  if (fuse_reply_create(req, &e, fi) != 0) {
    ReleaseHandle(fs, h);
    fs->Forget(n.attr.ino, 1);
  }
}

void OpRead(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  auto* fs = FS(req);
  Handle* h = H(fi);
  if (off < 0) return (void)fuse_reply_err(req, EINVAL);
  // Our own reference: the reply completes the request, after which the kernel may send RELEASE for
  // this handle (an async readahead holds the last reference to the file) and another worker may
  // free the handle and its version while this thread still unlocks.
  std::shared_ptr<Version> vp = h->version;
  Location loc = h->loc;
  uint64_t hsize = h->size;
  if (!h->writable && h->inode->rewrites.load() != h->rewrites) {
    // The file was rewritten in place since this reader opened it (UndoRenumber): read what it has
    // now, the version being written or the committed content, as on a local fs.
    {
      std::lock_guard<std::mutex> g(h->inode->mu);
      vp = h->inode->primary;
    }
    if (!vp) {
      auto n = fs->store->GetInode(h->inode->ino);
      if (n.ok()) {
        loc = n->location;
        hsize = n->attr.size;
      }
    }
  }
  if (vp) {
    std::shared_lock<std::shared_mutex> g(vp->mu);
    const uint64_t uoff = static_cast<uint64_t>(off);
    if (vp->data.InRam(uoff, size)) {
      std::vector<iovec> iov;
      vp->data.Iov(uoff, size, &iov);
      uint64_t n = 0;
      for (const auto& v : iov) n += v.iov_len;
      fs->bytes_read.fetch_add(n, std::memory_order_relaxed);
      fuse_reply_iov(req, iov.data(), static_cast<int>(iov.size()));  // the kernel copies during the call
      return;
    }
    // Some of the range is on the backing store (copy-on-write base, spilled chunks): verified reads.
    thread_local std::vector<char> vbuf;
    if (vbuf.size() < size) vbuf.resize(size);
    size_t got = 0;
    Status s = vp->data.Read(uoff, size, vbuf.data(), fs->fetch, &got);
    if (!s.ok()) {
      LogLimited(spdlog::level::err, LogKey("fuse-read", s), "read of staged {} (inode {}) at {}+{}: {}",
                 fs->PathOf(h->inode->ino), h->inode->ino, uoff, size, ErrnoText(s));
      return Reply(req, s);
    }
    fs->bytes_read.fetch_add(got, std::memory_order_relaxed);
    fuse_reply_buf(req, vbuf.data(), got);
    return;
  }
  uint64_t uoff = static_cast<uint64_t>(off);
  if (uoff >= hsize || loc.empty()) return (void)fuse_reply_buf(req, nullptr, 0);
  size_t want = std::min<uint64_t>(size, hsize - uoff);
  // Reply straight from the verified bytes the store pins (the LRU value, or the blocks it just read):
  // the only copy is the kernel's, into the request's pages. `p` keeps them alive during the call.
  PinnedBytes p;
  Status s = fs->store->ReadPinned(loc, uoff, want, &p);
  if (!s.ok()) {
    LogLimited(spdlog::level::err, LogKey("fuse-read", s), "read of {} (inode {}) at {}+{}: {}",
               fs->PathOf(h->inode->ino), h->inode->ino, uoff, want, ErrnoText(s));
    return Reply(req, s);
  }
  fs->bytes_read.fetch_add(p.len, std::memory_order_relaxed);
  fuse_reply_buf(req, p.data, p.len);
}

void OpWrite(fuse_req_t req, fuse_ino_t, const char* buf, size_t size, off_t off, fuse_file_info* fi) {
  auto* fs = FS(req);
  Handle* h = H(fi);
  if (!h || !h->version) return (void)fuse_reply_err(req, EBADF);
  if (off < 0) return (void)fuse_reply_err(req, EINVAL);
  if (static_cast<uint64_t>(off) + size > fs->opts.max_file_size) return (void)fuse_reply_err(req, EFBIG);
  // Writeback of shared-mmap pages (fi->writepage) may arrive on any writable handle of the inode, also
  // after its FLUSH: it marks the version dirty, so the next flush or the last release writes a record.
  Version& v = *h->version;
  // Over the staging budget: spill first (this write may fail with ENOSPC, and then changes nothing).
  // A write allocates at most its size + one chunk (a partly written chunk of a copy-on-write base).
  Status s = fs->MakeRoom(size + ChunkBuffer::kChunk);
  if (!s.ok()) return Reply(req, s);
  {
    std::unique_lock<std::shared_mutex> g(v.mu);
    uint64_t cap = v.data.capacity();
    // O_APPEND on a shadow (direct_io) handle: the kernel's append offset is the inode's i_size, which
    // another version may have set; append to this version's end instead (no page cache to disagree).
    if (h->append && v.direct && !fi->writepage) off = static_cast<off_t>(v.data.size());
    s = v.data.Write(static_cast<uint64_t>(off), buf, size, fs->fetch);
    fs->AccountRam(v, cap);
    if (s.ok()) {
      v.gen++;
      v.attr.mtime_ns = v.attr.ctime_ns = NowNs();
    }
  }
  if (!s.ok()) {
    LogLimited(spdlog::level::err, LogKey("fuse-write", s), "write of {} (inode {}) at {}+{}: {}",
               fs->PathOf(h->inode->ino), h->inode->ino, off, size, ErrnoText(s));
    return Reply(req, s);
  }
  fs->bytes_written.fetch_add(size, std::memory_order_relaxed);
  fuse_reply_write(req, size);
}

void OpFlush(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  auto* fs = FS(req);
  Handle* h = H(fi);
  if (!h->writable || !h->version) return (void)fuse_reply_err(req, 0);
  Status s = fs->Flush(*h->inode, *h->version);
  if (s.ok()) fs->PromoteAtClose(h->inode, h->version);
  Reply(req, s);
}

void OpRelease(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  ReleaseHandle(FS(req), H(fi));
  fuse_reply_err(req, 0);
}

void OpFsync(fuse_req_t req, fuse_ino_t, int, fuse_file_info* fi) {
  auto* fs = FS(req);
  Handle* h = H(fi);
  if (h->writable && h->version) {
    Status s = fs->Commit(h->inode, h->version);
    if (!s.ok()) return Reply(req, s);
  }
  fs->DrainDeferred();  // a version closed just before (commit deferred) is covered too
  Reply(req, fs->store->Sync());
}

// A directory handle counts as an open handle of its inode, so fstat of an open directory that was
// removed (rmdir) answers its last attributes, as on a local fs, not ESTALE (differential seed 267).
void OpOpendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  auto* fs = FS(req);
  auto in = fs->Get(ino);
  if (!in) {
    auto n = fs->store->GetInode(ino);
    if (!n.ok()) return Reply(req, n.status(), ErrCtx::kInode);
    in = fs->GetOrMake(ino, n->attr.mode);
    std::lock_guard<std::mutex> g(in->mu);
    in->last_attr = n->attr;
    in->last_attr.ino = ino;
  }
  auto h = std::make_unique<Handle>();
  h->inode = in;
  fs->AddHandle(in);
  fi->fh = reinterpret_cast<uint64_t>(h.release());
  if (fuse_reply_open(req, fi) != 0) ReleaseHandle(fs, H(fi));
}

void OpReleasedir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  if (H(fi)) ReleaseHandle(FS(req), H(fi));
  fuse_reply_err(req, 0);
}

void OpFsyncdir(fuse_req_t req, fuse_ino_t, int, fuse_file_info*) {
  FS(req)->DrainDeferred();
  Reply(req, FS(req)->store->Sync());
}

// Directory offsets: 0 = start, 1 = after ".", 2 = after "..", otherwise the Store cookie of the last
// entry returned (stable: entries created or removed during a listing neither skip nor repeat others).
constexpr off_t kAfterDot = 1, kAfterDotDot = 2;

void DoReaddir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus) {
  auto* fs = FS(req);
  std::vector<char> buf(size);
  size_t used = 0;
  bool full = false;
  auto add_plain = [&](const char* name, uint64_t eino, uint32_t mode, off_t next) {
    struct stat st;
    std::memset(&st, 0, sizeof(st));
    st.st_ino = eino;
    st.st_mode = mode;
    size_t n = fuse_add_direntry(req, buf.data() + used, size - used, name, &st, next);
    if (n > size - used) return false;
    used += n;
    return true;
  };
  auto add_dot = [&](const char* name, uint64_t eino, off_t next) {
    if (!plus) return add_plain(name, eino, S_IFDIR, next);
    fuse_entry_param e;
    std::memset(&e, 0, sizeof(e));  // ino 0: the kernel takes no lookup reference for . and ..
    e.attr.st_ino = eino;
    e.attr.st_mode = S_IFDIR;
    size_t n = fuse_add_direntry_plus(req, buf.data() + used, size - used, name, &e, next);
    if (n > size - used) return false;
    used += n;
    return true;
  };
  if (off == 0) {
    if (!add_dot(".", ino, kAfterDot)) full = true;
  }
  if (!full && off <= kAfterDot) {
    uint64_t parent = ino;
    if (ino != kRootIno) {
      auto n = fs->store->GetInode(ino);
      if (n.ok() && n->parent) parent = n->parent;
    }
    if (!add_dot("..", parent, kAfterDotDot)) full = true;
  }
  Status s = Status::OK();
  if (!full) {
    uint64_t after = off <= kAfterDotDot ? 0 : static_cast<uint64_t>(off);
    s = fs->store->ReadDir(ino, after, [&](const DirEntry& d) {
      off_t next = static_cast<off_t>(d.cookie);
      if (!plus) return add_plain(d.name.c_str(), d.ino, d.mode, next);
      fuse_entry_param e;
      std::memset(&e, 0, sizeof(e));
      bool staged = false;
      if (auto in = fs->Get(d.ino)) {
        std::lock_guard<std::mutex> g(in->mu);
        staged = in->primary || !in->writing.empty();
      }
      if (staged) {
        // Being written: attributes from a listing would race with the writer's own i_size updates.
        // nodeid 0 in READDIRPLUS = "name only, no attributes, no lookup reference".
        e.attr.st_ino = d.ino;
        e.attr.st_mode = d.mode;
        size_t n = fuse_add_direntry_plus(req, buf.data() + used, size - used, d.name.c_str(), &e, next);
        if (n > size - used) return false;
        used += n;
        return true;
      }
      auto node = fs->store->GetInode(d.ino);
      if (!node.ok()) return true;  // removed meanwhile: skip it
      Attr a = node->attr;
      double at = (S_ISDIR(a.mode) || S_ISLNK(a.mode) || node->committed) ? fs->opts.attr_timeout_s : 0;
      a.ino = d.ino;
      e.ino = d.ino;
      FillStat(a, &e.attr);
      e.attr_timeout = at;
      e.entry_timeout = fs->opts.entry_timeout_s;
      size_t n = fuse_add_direntry_plus(req, buf.data() + used, size - used, d.name.c_str(), &e, next);
      if (n > size - used) return false;
      used += n;
      fs->Ref(d.ino, a.mode);  // the kernel now holds a lookup reference for this entry
      return true;
    });
  }
  if (!s.ok() && used == 0) return Reply(req, s);
  fuse_reply_buf(req, buf.data(), used);
}

void OpReaddir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  DoReaddir(req, ino, size, off, false);
}
void OpReaddirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  DoReaddir(req, ino, size, off, true);
}

void OpStatfs(fuse_req_t req, fuse_ino_t) {
  auto* fs = FS(req);
  uint64_t live = 0, files = 0, total = 0, avail = 0;
  Status s = fs->store->StatFs(&live, &files, &total, &avail);
  if (!s.ok()) return Reply(req, s);
  struct statvfs st;
  std::memset(&st, 0, sizeof(st));
  // f_bsize = f_frsize = 4096: LMCache aligns O_DIRECT buffers to statvfs().f_bsize.
  st.f_bsize = 4096;
  st.f_frsize = 4096;
  uint64_t live_blocks = (live + 4095) / 4096;
  uint64_t avail_blocks = avail / 4096;
  st.f_blocks = live_blocks + avail_blocks;  // used = live logical bytes (drops right after unlink)
  // Nothing left to write (backing full of dead bytes, or capacity reached): df shows the real size,
  // 100% used, never 0 blocks.
  if (avail_blocks == 0) st.f_blocks = std::max<uint64_t>(st.f_blocks, total / 4096);
  st.f_bfree = avail_blocks;
  st.f_bavail = avail_blocks;
  st.f_ffree = 1ull << 32;
  st.f_favail = st.f_ffree;
  st.f_files = files + st.f_ffree;
  st.f_namemax = 255;
  fuse_reply_statfs(req, &st);
}

bool IsUserXattr(const char* name) { return std::strncmp(name, kUserPrefix.data(), kUserPrefix.size()) == 0; }
bool IsVirtualXattr(fuse_ino_t ino, const char* name) {
  return ino == kRootIno && (name == kStatsXattr || name == kPidXattr);
}

void OpSetxattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size, int flags) {
  auto* fs = FS(req);
  if (!IsUserXattr(name)) return (void)fuse_reply_err(req, EOPNOTSUPP);
  if (IsVirtualXattr(ino, name)) return (void)fuse_reply_err(req, EPERM);
  Reply(req, fs->store->SetXattr(ino, name, std::string_view(value, size), flags), ErrCtx::kXattr);
}

void ReplyXattrValue(fuse_req_t req, const std::string& v, size_t size) {
  if (size == 0) return (void)fuse_reply_xattr(req, v.size());
  if (size < v.size()) return (void)fuse_reply_err(req, ERANGE);
  fuse_reply_buf(req, v.data(), v.size());
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

void OpIoctl(fuse_req_t req, fuse_ino_t, unsigned int, void*, fuse_file_info*, unsigned, const void*, size_t, size_t) {
  fuse_reply_err(req, ENOTTY);  // Python's isatty() on every open of numpy.tofile: answer at once
}

void OpFallocate(fuse_req_t req, fuse_ino_t, int mode, off_t offset, off_t length, fuse_file_info* fi) {
  auto* fs = FS(req);
  Handle* h = H(fi);
  if (mode & ~FALLOC_FL_KEEP_SIZE) return (void)fuse_reply_err(req, EOPNOTSUPP);
  if (!h->writable || !h->version) return (void)fuse_reply_err(req, EBADF);
  if (offset < 0 || length <= 0) return (void)fuse_reply_err(req, EINVAL);
  if (mode & FALLOC_FL_KEEP_SIZE) return (void)fuse_reply_err(req, 0);  // no holes, nothing to reserve
  Version& v = *h->version;
  uint64_t end = static_cast<uint64_t>(offset) + static_cast<uint64_t>(length);
  uint64_t cur;
  {
    std::shared_lock<std::shared_mutex> g(v.mu);
    cur = v.data.size();
  }
  Status s = Status::OK();
  if (end > cur) s = fs->Truncate(v, end, NowNs(), /*grow_only=*/true);
  fuse_reply_err(req, ToErrno(s));  // never touch the handle after replying (RELEASE may follow at once)
}

void OpLseek(fuse_req_t req, fuse_ino_t, off_t off, int whence, fuse_file_info* fi) {
  Handle* h = H(fi);
  uint64_t size;
  if (h->version) {
    std::shared_lock<std::shared_mutex> g(h->version->mu);
    size = h->version->data.size();
  } else {
    size = h->size;
  }
  if (off < 0) return (void)fuse_reply_err(req, EINVAL);
  uint64_t o = static_cast<uint64_t>(off);
  // Files have no holes: data is exactly [0, size), the only hole is the virtual one at EOF.
  if (whence == SEEK_DATA) {
    if (o >= size) return (void)fuse_reply_err(req, ENXIO);
    return (void)fuse_reply_lseek(req, off);
  }
  if (whence == SEEK_HOLE) {
    if (o >= size) return (void)fuse_reply_err(req, ENXIO);
    return (void)fuse_reply_lseek(req, static_cast<off_t>(size));
  }
  fuse_reply_err(req, EINVAL);
}

// Timed<K, Fn>::Call: the handler Fn, counted and timed as operation K (op_stats.h). The Impl pointer
// is taken before Fn runs: the reply inside Fn frees the request.
template <FuseOp K, auto Fn>
struct Timed;
template <FuseOp K, typename... A, void (*Fn)(fuse_req_t, A...)>
struct Timed<K, Fn> {
  static void Call(fuse_req_t req, A... a) {
    KvfsFs::Impl* fs = FS(req);
    const auto t0 = std::chrono::steady_clock::now();
    Fn(req, a...);
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);
    fs->op_stats.Observe(K, static_cast<uint64_t>(ns.count()));
  }
};

fuse_lowlevel_ops MakeOps() {
  fuse_lowlevel_ops ops;
  std::memset(&ops, 0, sizeof(ops));
  ops.init = OpInit;
  ops.destroy = OpDestroy;
  ops.lookup = Timed<FuseOp::kLookup, OpLookup>::Call;
  ops.forget = Timed<FuseOp::kForget, OpForget>::Call;
  ops.forget_multi = Timed<FuseOp::kForget, OpForgetMulti>::Call;
  ops.getattr = Timed<FuseOp::kGetattr, OpGetattr>::Call;
  ops.setattr = Timed<FuseOp::kSetattr, OpSetattr>::Call;
  ops.readlink = Timed<FuseOp::kReadlink, OpReadlink>::Call;
  ops.mknod = Timed<FuseOp::kMknod, OpMknod>::Call;
  ops.mkdir = Timed<FuseOp::kMkdir, OpMkdir>::Call;
  ops.unlink = Timed<FuseOp::kUnlink, OpUnlink>::Call;
  ops.rmdir = Timed<FuseOp::kRmdir, OpRmdir>::Call;
  ops.symlink = Timed<FuseOp::kSymlink, OpSymlink>::Call;
  ops.rename = Timed<FuseOp::kRename, OpRename>::Call;
  ops.link = Timed<FuseOp::kLink, OpLink>::Call;
  ops.open = Timed<FuseOp::kOpen, OpOpen>::Call;
  ops.read = Timed<FuseOp::kRead, OpRead>::Call;
  ops.write = Timed<FuseOp::kWrite, OpWrite>::Call;
  ops.flush = Timed<FuseOp::kFlush, OpFlush>::Call;
  ops.release = Timed<FuseOp::kRelease, OpRelease>::Call;
  ops.fsync = Timed<FuseOp::kFsync, OpFsync>::Call;
  ops.opendir = Timed<FuseOp::kOpendir, OpOpendir>::Call;
  ops.readdir = Timed<FuseOp::kReaddir, OpReaddir>::Call;
  ops.readdirplus = Timed<FuseOp::kReaddirplus, OpReaddirplus>::Call;
  ops.releasedir = Timed<FuseOp::kReleasedir, OpReleasedir>::Call;
  ops.fsyncdir = Timed<FuseOp::kFsyncdir, OpFsyncdir>::Call;
  ops.statfs = Timed<FuseOp::kStatfs, OpStatfs>::Call;
  ops.setxattr = Timed<FuseOp::kSetxattr, OpSetxattr>::Call;
  ops.getxattr = Timed<FuseOp::kGetxattr, OpGetxattr>::Call;
  ops.listxattr = Timed<FuseOp::kListxattr, OpListxattr>::Call;
  ops.removexattr = Timed<FuseOp::kRemovexattr, OpRemovexattr>::Call;
  ops.access = Timed<FuseOp::kAccess, OpAccess>::Call;
  ops.create = Timed<FuseOp::kCreate, OpCreate>::Call;
  ops.ioctl = Timed<FuseOp::kIoctl, OpIoctl>::Call;
  ops.fallocate = Timed<FuseOp::kFallocate, OpFallocate>::Call;
  ops.lseek = Timed<FuseOp::kLseek, OpLseek>::Call;
  return ops;
}

}  // namespace

// ======================================================================================================

KvfsFs::KvfsFs(Store* store, FsOptions opts) : impl_(std::make_unique<Impl>(store, opts)) {
  // The root is known to the kernel without a LOOKUP and is never forgotten.
  impl_->Ref(kRootIno, S_IFDIR);
  impl_->owner = this;
  impl_->notifier = std::thread([this] { impl_->NotifierMain(); });
  impl_->committer = std::thread([this] { impl_->CommitterMain(); });
  // Peers' changes reach the kernel through the notifier thread (it holds no lock a worker needs).
  // The Store may still run a copy of the callback after SetChangeListener(nullptr): the gate makes a
  // late call a no-op once this object is being destroyed.
  impl_->gate = std::make_shared<Impl::ListenerGate>();
  impl_->gate->impl = impl_.get();
  store->SetChangeListener([gate = impl_->gate](const PeerChanges& c) {
    std::lock_guard<std::mutex> g(gate->mu);
    if (gate->impl) gate->impl->OnPeerChanges(c);
  });
}

KvfsFs::~KvfsFs() {
  impl_->StopCommitter();
  impl_->store->SetChangeListener(nullptr);
  {
    std::lock_guard<std::mutex> g(impl_->gate->mu);
    impl_->gate->impl = nullptr;
  }
  {
    std::lock_guard<std::mutex> g(impl_->nq_mu);
    impl_->nq_stop = true;
    impl_->nq_cv.notify_all();
  }
  if (impl_->notifier.joinable()) impl_->notifier.join();
  if (impl_->se) {
    if (impl_->signals) fuse_remove_signal_handlers(impl_->se);
    if (impl_->mounted) fuse_session_unmount(impl_->se);
    fuse_session_destroy(impl_->se);
  }
}

Status KvfsFs::Mount(const std::string& mountpoint, const std::vector<std::string>& fuse_opts,
                     const std::string& fsname) {
  static const fuse_lowlevel_ops ops = MakeOps();
  std::string o = "fsname=" + fsname + ",subtype=kvfs";
  for (const auto& x : fuse_opts) {
    if (!x.empty()) o += "," + x;
  }
  std::vector<std::string> argv_s = {"kvfs", "-o", o};
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  impl_->se = fuse_session_new(&args, &ops, sizeof(ops), impl_.get());
  fuse_opt_free_args(&args);
  if (!impl_->se) return Status::InvalidArgument("fuse_session_new failed (bad -o option?): " + o);
  if (fuse_session_mount(impl_->se, mountpoint.c_str()) != 0) {
    return Status::IOError("cannot mount FUSE at " + mountpoint);
  }
  impl_->mounted = true;
  return Status::OK();
}

Status KvfsFs::InstallSignalHandlers() {
  if (!impl_->se) return Status::InvalidArgument("not mounted");
  if (fuse_set_signal_handlers(impl_->se) != 0) return Status::IOError("fuse_set_signal_handlers");
  impl_->signals = true;
  return Status::OK();
}

int KvfsFs::Loop() {
  if (!impl_->se) return 1;
  fuse_loop_config* cfg = fuse_loop_cfg_create();
  fuse_loop_cfg_set_clone_fd(cfg, impl_->opts.clone_fd ? 1 : 0);
  fuse_loop_cfg_set_max_threads(cfg, impl_->opts.max_threads);
  fuse_loop_cfg_set_idle_threads(cfg, std::min(impl_->opts.max_threads, 16u));
  int r = fuse_session_loop_mt(impl_->se, cfg);
  fuse_loop_cfg_destroy(cfg);
  if (impl_->signals) {
    fuse_remove_signal_handlers(impl_->se);
    impl_->signals = false;
  }
  if (impl_->mounted) {
    fuse_session_unmount(impl_->se);
    impl_->mounted = false;
  }
  // Deferred commits first, then versions still open here: they belong to handles the kernel never
  // released (lazy unmount / abort): publish what they have, as a release would.
  impl_->StopCommitter();
  std::vector<std::pair<std::shared_ptr<Inode>, std::shared_ptr<Version>>> left;
  {
    std::lock_guard<std::mutex> g(impl_->table_mu);
    for (auto& [ino, in] : impl_->table) {
      std::lock_guard<std::mutex> ig(in->mu);
      for (auto& v : in->writing) left.emplace_back(in, v);
    }
  }
  for (auto& [in, v] : left) {
    Status s = impl_->Commit(in, v);
    if (!s.ok()) {
      spdlog::error("final commit of {} (inode {}): {}", impl_->PathOf(in->ino), in->ino, ErrnoText(s));
    }
  }
  return r < 0 ? 1 : 0;
}

void KvfsFs::Exit() {
  if (impl_->se) fuse_session_exit(impl_->se);
}

StatsSnapshot KvfsFs::Snapshot() {
  StatsSnapshot s;
  s.pid = getpid();
  s.store = impl_->store->GetStats();
  s.fs = GetFsStats();
  s.fuse_ops = impl_->op_stats.Snapshot();
  return s;
}

FsStats KvfsFs::GetFsStats() {
  FsStats s;
  {
    std::lock_guard<std::mutex> g(impl_->table_mu);
    s.known_inodes = impl_->table.size();
    for (auto& [ino, in] : impl_->table) {
      std::lock_guard<std::mutex> ig(in->mu);
      s.staged_versions += in->writing.size();
    }
  }
  s.open_handles = impl_->open_handles.load();
  int64_t sb = impl_->staging.ram_bytes.load();
  s.staged_bytes = sb > 0 ? static_cast<uint64_t>(sb) : 0;
  int64_t sp = impl_->staging.spilled_bytes.load();
  s.spilled_bytes = sp > 0 ? static_cast<uint64_t>(sp) : 0;
  s.staging_budget = impl_->opts.staging_bytes;
  s.spills = impl_->staging.spills.load();
  s.spilled_bytes_total = impl_->staging.spilled_total.load();
  s.spill_errors = impl_->staging.spill_errors.load();
  s.whole_record_commits = impl_->staging.whole_record_commits.load();
  s.streamed_commits = impl_->staging.streamed_commits.load();
  s.shadow_versions_created = impl_->shadows.load();
  s.versions_committed = impl_->committed.load();
  s.versions_discarded = impl_->discarded.load();
  s.flush_records = impl_->flush_records.load();
  s.flush_errors = impl_->flush_errors.load();
  s.commit_errors = impl_->commit_errors.load();
  s.inodes_renumbered = impl_->renumbered.load();
  s.bytes_read = impl_->bytes_read.load();
  s.bytes_written = impl_->bytes_written.load();
  return s;
}

std::string KvfsFs::StatsJson() { return StatsToJson(Snapshot()); }

}  // namespace kvfs
