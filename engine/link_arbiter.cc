// LinkArbiter (link_arbiter.h): claims of link(2) names on the export.
#include "engine/link_arbiter.h"

#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <cstdio>

#include "blockstore/log.h"
#include "blockstore/node_dir.h"

namespace kvfs {

LinkArbiter::LinkArbiter(Env* env, const std::string& backing, std::string heartbeat, bool sweep)
    : env_(env), dir_(LinkClaimsDirPath(backing)), heartbeat_(std::move(heartbeat)), sweep_(sweep),
      next_sweep_(Clock::now() + kFirstSweepAfter) {}

Status LinkArbiter::Init() { return env_->CreateDirs(dir_); }

std::string LinkArbiter::ClaimFile(const std::string& path, const std::string& incarnation, int chain) const {
  std::string key = path;
  key.push_back('\0');
  key += incarnation;
  const XXH128_hash_t h = XXH3_128bits(key.data(), key.size());
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  std::string file = dir_ + "/" + buf;
  if (chain > 0) file += "." + std::to_string(chain);
  return file;
}

// A claim's age on the server's clock: its ctime against this node's HEARTBEAT's (rewritten every few
// seconds, so the age is at most one heartbeat interval short). ctime, not mtime: an NFS exclusive create
// may keep its verifier in the times it sets. Unknown (nullopt) where the backing gives no ctime (S3).
std::optional<std::chrono::nanoseconds> LinkArbiter::ServerAge(const std::string& file) {
  auto st = env_->Stat(file);
  if (!st.ok() || st->ctime_ns == 0) return std::nullopt;
  auto hb = env_->Stat(heartbeat_);
  if (!hb.ok() || hb->ctime_ns == 0) return std::nullopt;
  return std::chrono::nanoseconds(std::max<int64_t>(0, hb->ctime_ns - st->ctime_ns));
}

Status LinkArbiter::CreateClaim(const std::string& file) {
  if (dir_claims_.load(std::memory_order_relaxed)) {
    Status s = env_->CreateDirExclusive(file);
    if (!s.IsNotSupported()) return s;
    dir_claims_.store(false, std::memory_order_relaxed);
  }
  return env_->CreateExclusive(file);
}

Result<LinkArbiter::Claim> LinkArbiter::TryClaim(const std::string& path, const std::string& incarnation) {
  for (int chain = 0; chain <= kMaxChain; ++chain) {
    const std::string file = ClaimFile(path, incarnation, chain);
    Status s = CreateClaim(file);
    if (s.IsNotFound()) {
      // links/ was removed under the mount (an operator's cleanup): make it again and retry once.
      KVFS_RETURN_IF_ERROR(env_->CreateDirs(dir_));
      s = CreateClaim(file);
    }
    if (s.ok()) {
      std::lock_guard<std::mutex> l(mu_);
      seen_.erase(file);
      stats_.won++;
      return Claim{true, file};
    }
    if (!s.IsExists()) {
      LogLimited(spdlog::level::warn, "link-claim-create", "kvfs: link claim {}: {}", file, s.ToString());
      {
        std::lock_guard<std::mutex> l(mu_);
        stats_.errors++;
      }
      if (s.IsNoSpace() || s.IsTimedOut()) return s;
      return Status::IOError("link: cannot create its claim " + file + ": " + s.ToString());
    }
    // Someone holds it. Abandoned once it is stale_ old (the server's clock) and its name still absent
    // (the caller checked): its node crashed between claim and PUT, or the name was published and then
    // removed without a new tombstone (evicted, its directory renamed).
    const auto age = ServerAge(file);
    const auto now = Clock::now();
    std::lock_guard<std::mutex> l(mu_);
    bool abandoned;
    if (age) {
      abandoned = *age >= stale_;
    } else {
      // No server clock (S3): how long this node has seen it, continuously (sightings kept 2 x stale_).
      auto it = seen_.try_emplace(file, now).first;
      abandoned = now - it->second >= stale_;
    }
    if (!abandoned) {
      stats_.lost++;
      return Claim{false, {}};
    }
    stats_.abandoned++;  // the next link of the chain decides
  }
  return Status::IOError("link: more than " + std::to_string(kMaxChain) + " abandoned claims of " + path + " in " +
                         dir_);
}

void LinkArbiter::Keep(const std::string& file) {
  std::lock_guard<std::mutex> l(mu_);
  pending_.emplace_back(Clock::now() + ttl_, file);
}

void LinkArbiter::Release(const std::string& file) {
  Status s = env_->Remove(file);
  const bool failed = !s.ok() && !s.IsNotFound();
  if (failed) {
    // Left on the export (e.g. a directory someone put a file into): the sweep tries it again later.
    LogLimited(spdlog::level::warn, "link-claim", "kvfs: removing link claim {}: {}", file, s.ToString());
  }
  std::lock_guard<std::mutex> l(mu_);
  if (failed) {
    stats_.errors++;
  } else {
    stats_.removed++;
  }
}

void LinkArbiter::Tick(bool all) {
  const auto now = Clock::now();
  for (size_t n = 0;; ++n) {
    std::string file;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (pending_.empty() || (!all && pending_.front().first > now)) break;
      if (all && n >= kCloseRemovals) break;  // an unmount: the rest are left to the sweep
      file = std::move(pending_.front().second);
      pending_.pop_front();
    }
    Release(file);
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    // A sighting older than 2 x stale_ is forgotten: a claim seen again later starts a new count (it may
    // be a new claim under the same key: a name evicted without a tombstone and linked again).
    std::erase_if(seen_, [&](const auto& kv) { return now - kv.second >= 2 * stale_; });
  }
  if (!all && sweep_) SweepStep();
}

void LinkArbiter::SweepStep() {
  std::vector<std::string> batch;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (sweep_names_.empty() && Clock::now() < next_sweep_) return;
  }
  bool start = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    start = sweep_names_.empty();
    if (start) next_sweep_ = Clock::now() + kSweepEvery;
  }
  if (start) {
    auto hb = env_->Stat(heartbeat_);
    std::vector<std::string> names;
    Status s = env_->GetChildren(dir_, &names);
    if (!hb.ok() || hb->mtime_ns == 0 || !s.ok()) return;  // no server clock here (S3): claims are not swept
    std::lock_guard<std::mutex> l(mu_);
    sweep_now_ns_ = hb->mtime_ns;
    sweep_names_ = std::move(names);
  }
  int64_t now_ns = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    const size_t n = std::min(sweep_names_.size(), kSweepStatsPerStep);
    batch.assign(sweep_names_.end() - static_cast<std::ptrdiff_t>(n), sweep_names_.end());
    sweep_names_.resize(sweep_names_.size() - n);
    now_ns = sweep_now_ns_;
  }
  const int64_t age_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(sweep_age_).count();
  uint64_t swept = 0;
  for (const std::string& name : batch) {
    const std::string file = dir_ + "/" + name;
    auto st = env_->Stat(file);
    // Directories (claims since 2026-12-03) and files (earlier claims, S3's): Remove takes both.
    if (!st.ok() || st->mtime_ns == 0 || now_ns - st->mtime_ns < age_ns) continue;
    Status s = env_->Remove(file);
    if (s.ok()) swept++;
  }
  std::lock_guard<std::mutex> l(mu_);
  stats_.swept += swept;
}

void LinkArbiter::SweepAtNextTickForTest() {
  std::lock_guard<std::mutex> l(mu_);
  next_sweep_ = Clock::now();
}

LinkArbiter::Stats LinkArbiter::GetStats() {
  std::lock_guard<std::mutex> l(mu_);
  Stats s = stats_;
  s.pending = pending_.size();
  return s;
}

void LinkArbiter::SetAgesForTest(std::chrono::milliseconds stale, std::chrono::milliseconds ttl,
                                 std::chrono::milliseconds sweep_age) {
  std::lock_guard<std::mutex> l(mu_);
  stale_ = stale;
  ttl_ = ttl;
  sweep_age_ = sweep_age;
}

}  // namespace kvfs
