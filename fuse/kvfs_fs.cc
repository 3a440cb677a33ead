// KvfsFs (fuse/kvfs_fs.h): the FUSE session set-up (INIT capabilities, mount, signal handlers, the
// multi-threaded loop, the final commits after it), the op table that routes each FUSE request to its
// callback (fuse/ops_*.cc, timed per operation), and the public methods (stats).
//
// Structure follows libfuse's example/passthrough_hp.cc: an inode table holding only the inodes the
// kernel knows (lookup counts, FORGET), a Handle per open file in fi->fh, and replies that set entry/attr
// timeouts and open flags (keep_cache, direct_io) deliberately; the comments say why. The parts are
// listed in fuse/kvfs_fs_impl.h. Called by tools/mount_cmd.cc (kvfs mount) and the unit tests.
// Thread safety: Mount/InstallSignalHandlers/Loop from one thread; Exit and the stats from any.
#include "fuse/kvfs_fs.h"

#include "fuse/kvfs_fs_impl.h"

#include <algorithm>

namespace kvfs {
namespace {

void OpInit(void* userdata, fuse_conn_info* conn) {
  auto* fs = static_cast<KvfsFs::Impl*>(userdata);
  auto want = [&](unsigned cap) {
    if (conn->capable & cap) conn->want |= cap;
  };
  // The daemon must see O_TRUNC at open: a truncating open starts a new version (docs/design.md §4).
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
  // The kernel takes min(the bdi's read_ahead_kb, max_readahead): Mount raised the bdi first.
  if (fs->opts.read_ahead > 0) conn->max_readahead = std::max<uint32_t>(fs->opts.read_ahead, 128u << 10);
  conn->max_background = 128;          // async reads / direct I/O in flight
  conn->congestion_threshold = 96;
  conn->time_gran = 1;
}

void OpDestroy(void*) {}

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
  if (store) AttachStore(store);
}

void KvfsFs::AttachStore(Store* store) {
  impl_->store = store;
  impl_->staging.store = store;
  store->SetChangeListener([gate = impl_->gate](const PeerChanges& c) {
    std::lock_guard<std::mutex> g(gate->mu);
    if (gate->impl) gate->impl->OnPeerChanges(c);
  });
}

KvfsFs::~KvfsFs() {
  impl_->StopCommitter();
  if (impl_->store) impl_->store->SetChangeListener(nullptr);
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
  impl_->session.Unmount();  // signal handlers, mount; the session is destroyed with impl_
}

Status KvfsFs::Mount(const std::string& mountpoint, const std::vector<std::string>& fuse_opts,
                     const std::string& fsname) {
  static const fuse_lowlevel_ops ops = MakeOps();
  std::string o = "fsname=" + fsname + ",subtype=kvfs";
  for (const auto& x : fuse_opts) {
    if (!x.empty()) o += "," + x;
  }
  if (!impl_->session.Create("kvfs", o, ops, impl_.get())) {
    return Status::InvalidArgument("fuse_session_new failed (bad -o option?): " + o);
  }
  if (!impl_->session.Mount(mountpoint)) return Status::IOError("cannot mount FUSE at " + mountpoint);
  return Status::OK();
}

Status KvfsFs::ApplyReadAhead() {
  if (impl_->opts.read_ahead == 0) return Status::OK();
  std::string why;
  if (!impl_->session.SetReadAhead(impl_->opts.read_ahead >> 10, &why)) return Status::IOError(why);
  impl_->read_ahead_applied = impl_->opts.read_ahead;
  return Status::OK();
}

Status KvfsFs::InstallSignalHandlers() {
  if (!impl_->session.get()) return Status::InvalidArgument("not mounted");
  if (!impl_->session.InstallSignalHandlers()) return Status::IOError("fuse_set_signal_handlers");
  return Status::OK();
}

int KvfsFs::Loop() {
  if (!impl_->session.get() || !impl_->store) return 1;
  // Every worker stays (no idle limit below max_threads): a worker that exits frees its 1 MiB receive
  // buffer, and the one started for the next burst takes a page fault per 4 KiB of every payload it
  // receives until its new buffer is warm (a VM exit each, on the dev VM 20-190 us). 32 x 1 MiB stays.
  // Ends with the signal handlers removed and the file system unmounted.
  int r = impl_->session.Loop(impl_->opts.clone_fd, impl_->opts.max_threads, impl_->opts.max_threads);
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
  impl_->session.Exit();
}

StatsSnapshot KvfsFs::Snapshot() {
  StatsSnapshot s;
  s.pid = getpid();
  s.version = impl_->opts.version;
  s.git_commit = impl_->opts.git_commit;
  if (impl_->store) s.store = impl_->store->GetStats();
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
  s.read_ahead = impl_->read_ahead_applied.load(std::memory_order_relaxed);
  s.spills = impl_->staging.spills.load();
  s.spilled_bytes_total = impl_->staging.spilled_total.load();
  s.spill_errors = impl_->staging.spill_errors.load();
  s.whole_record_commits = impl_->staging.whole_record_commits.load();
  s.extent_flushes = impl_->staging.extent_flushes.load();
  s.compaction_flushes = impl_->staging.compaction_flushes.load();
  s.compaction_copied_bytes = impl_->staging.compaction_copied_bytes.load();
  s.sealed_closes = impl_->staging.sealed_closes.load();
  s.sealed_flushes = impl_->staging.sealed_flushes.load();
  s.flushes_deferred = impl_->staging.flushes_deferred.load();
  s.closes_committed_open = impl_->closes_committed_open.load();
  s.closes_superseded_late = impl_->closes_superseded_late.load();
  s.commits_owed = impl_->commits_owed.load();
  s.streamed_commits = impl_->staging.streamed_commits.load();
  s.shadow_versions_created = impl_->shadows.load();
  s.versions_committed = impl_->committed.load();
  s.versions_discarded = impl_->discarded.load();
  s.flush_records = impl_->flush_records.load();
  s.flush_errors = impl_->flush_errors.load();
  s.commit_errors = impl_->commit_errors.load();
  s.failed_publishes = impl_->failed_publishes.load();
  s.inval_calls = impl_->inval_calls.load();
  s.inval_missed = impl_->inval_missed.load();
  s.inval_retries = impl_->inval_retries.load();
  s.lookups_uncached = impl_->lookups_uncached.load();
  s.inodes_renumbered = impl_->renumbered.load();
  s.fresh_forgotten = impl_->fresh_forgotten.load();
  s.hidden_reset = impl_->hidden_reset.load();
  s.bytes_read = impl_->bytes_read.load();
  s.bytes_written = impl_->bytes_written.load();
  s.reads_in_flight_max = impl_->reads_in_flight_max.load();
  return s;
}

std::string KvfsFs::StatsJson() { return StatsToJson(Snapshot()); }

}  // namespace kvfs

