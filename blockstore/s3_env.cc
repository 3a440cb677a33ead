// S3TierEnv (blockstore/s3_env.h).
#include "blockstore/s3_env.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <set>
#include <thread>
#include <utility>

#include <spdlog/spdlog.h>

#include "blockstore/object_store.h"

namespace kvfs {
namespace {

std::string_view S3EnvBaseName(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

bool S3EnvEndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// An object open for reading: every Read is one ranged GET, or several in flight for a large one
// (S3Config::read_parts), none asked past the size the HEAD at open found.
class S3ObjectFile final : public BackingFile {
 public:
  S3ObjectFile(S3Client* client, std::string key, std::string path, uint64_t size)
      : client_(client), key_(std::move(key)), path_(std::move(path)), size_(size) {}
  Status Read(uint64_t offset, size_t n, void* buf, size_t* got) override {
    *got = 0;
    if (n == 0) return Status::OK();
    return client_->Get(key_, offset, n, buf, got, size_.load());
  }
  Status Write(std::span<const WriteOp>) override { return ReadOnly(); }
  Status Sync() override { return Status::OK(); }
  Status Truncate(uint64_t) override { return ReadOnly(); }
  Result<uint64_t> Size() override {
    auto h = client_->Head(key_);
    if (!h.ok()) return h.status();
    size_ = h->size;
    return h->size;
  }
  const std::string& path() const override { return path_; }

 private:
  Status ReadOnly() const {
    return Status::IOError(path_ + ": object in the bucket is read-only (s3 key " + key_ + ")", EROFS);
  }
  S3Client* const client_;
  const std::string key_, path_;
  std::atomic<uint64_t> size_;  // the object's size at the last HEAD (Size() refreshes it)
};

// A "through" file open for writing: local writes; each Sync() PUTs the whole local file.
class S3ThroughFile final : public BackingFile {
 public:
  S3ThroughFile(S3TierEnv* env, std::unique_ptr<BackingFile> local) : env_(env), local_(std::move(local)) {}
  Status Read(uint64_t offset, size_t n, void* buf, size_t* got) override { return local_->Read(offset, n, buf, got); }
  Status Write(std::span<const WriteOp> ops) override { return local_->Write(ops); }
  Status Sync() override {
    KVFS_RETURN_IF_ERROR(local_->Sync());
    return env_->PutLocal(local_->path());
  }
  Status Truncate(uint64_t size) override { return local_->Truncate(size); }
  Result<uint64_t> Size() override { return local_->Size(); }
  const std::string& path() const override { return local_->path(); }

 private:
  S3TierEnv* const env_;
  std::unique_ptr<BackingFile> local_;
};

}  // namespace

Status ParseS3Url(const std::string& url, std::string* bucket, std::string* prefix) {
  constexpr std::string_view kScheme = "s3://";
  if (url.rfind(kScheme, 0) != 0) return Status::InvalidArgument("'" + url + "' is not an s3://BUCKET/PREFIX URL");
  std::string rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  *bucket = rest.substr(0, slash);
  std::string p = slash == std::string::npos ? "" : rest.substr(slash + 1);
  while (!p.empty() && p.back() == '/') p.pop_back();
  if (bucket->empty()) return Status::InvalidArgument("'" + url + "': no bucket name (s3://BUCKET/PREFIX)");
  if (p.find("//") != std::string::npos || p.rfind('/', 0) == 0) {
    return Status::InvalidArgument("'" + url + "': empty path component in the prefix");
  }
  *prefix = p.empty() ? "" : p + "/";
  return Status::OK();
}

S3TierEnv::S3TierEnv(std::shared_ptr<S3Client> client, std::string key_prefix, std::string staging_root,
                     Env* local)
    : client_(std::move(client)), prefix_(std::move(key_prefix)), root_(std::move(staging_root)), local_(local) {}

S3TierEnv::Kind S3TierEnv::KindOf(const std::string& path) const {
  if (path.size() < root_.size() || path.compare(0, root_.size(), root_) != 0 ||
      (path.size() > root_.size() && path[root_.size()] != '/')) {
    return Kind::kOutside;
  }
  const std::string_view base = S3EnvBaseName(path);
  if (S3EnvEndsWith(base, ".tmp") || base == "RESERVE") return Kind::kLocal;
  // Peer hold markers (engine/peer_holds.h) stay local on S3 (docs/s3.md): classed as bucket files, each
  // removal sent a DELETE of a key that never existed (564 in one node's afternoon, failing and logged
  // while the gateway was down).
  if (path.find("/holds/", root_.size()) != std::string::npos) return Kind::kLocal;
  if (base.rfind("journal-", 0) == 0) return Kind::kStaged;
  if (S3EnvEndsWith(base, ".kseg") && path.find("/seg/") != std::string::npos) return Kind::kStaged;
  return Kind::kThrough;
}

std::string S3TierEnv::KeyOf(const std::string& path) const {
  if (path.size() <= root_.size() + 1) return prefix_;
  return prefix_ + path.substr(root_.size() + 1);
}

Status S3TierEnv::PutLocal(const std::string& path) {
  auto f = local_->Open(path, OpenOptions{});
  if (!f.ok()) return f.status();
  auto size = (*f)->Size();
  if (!size.ok()) return size.status();
  return client_->PutFile(KeyOf(path), f->get(), *size);
}

Result<std::unique_ptr<BackingFile>> S3TierEnv::Open(const std::string& path, const OpenOptions& opts) {
  const Kind kind = KindOf(path);
  if (kind == Kind::kOutside || kind == Kind::kLocal) return local_->Open(path, opts);
  if (opts.write) {
    if (kind == Kind::kThrough && opts.create && opts.exclusive) {
      auto h = client_->Head(KeyOf(path));
      if (h.ok()) return Status::Exists("open(O_EXCL) " + path + ": the object exists (s3 key " + KeyOf(path) + ")");
      if (!h.status().IsNotFound()) return h.status();
    }
    auto f = local_->Open(path, opts);
    if (!f.ok() || kind != Kind::kThrough) return f;
    return std::unique_ptr<BackingFile>(new S3ThroughFile(this, std::move(*f)));
  }
  OpenOptions lo = opts;
  auto f = local_->Open(path, lo);
  if (!f.ok() && lo.direct && f.status().ToErrno() == EINVAL) {
    lo.direct = false;  // a staging file system without O_DIRECT (tmpfs)
    f = local_->Open(path, lo);
  }
  if (f.ok() || !f.status().IsNotFound()) return f;
  const std::string key = KeyOf(path);
  auto h = client_->Head(key);
  if (!h.ok()) {
    if (h.status().IsNotFound()) return Status::NotFound("open " + path + ": not staged and no object " + key);
    return h.status();
  }
  return std::unique_ptr<BackingFile>(new S3ObjectFile(client_.get(), key, path, h->size));
}

Status S3TierEnv::CreateDir(const std::string& path) { return local_->CreateDir(path); }

Status S3TierEnv::Rename(const std::string& from, const std::string& to) {
  KVFS_RETURN_IF_ERROR(local_->Rename(from, to));
  const Kind kt = KindOf(to), kf = KindOf(from);
  if (kt == Kind::kThrough) KVFS_RETURN_IF_ERROR(PutLocal(to));
  if (kt == Kind::kStaged) {
    return Status::NotSupported("rename onto a staged file " + to + " on an s3 backing");
  }
  if (kf == Kind::kThrough || kf == Kind::kStaged) return client_->Delete(KeyOf(from));
  return Status::OK();
}

Status S3TierEnv::Remove(const std::string& path) {
  const Kind kind = KindOf(path);
  Status s = local_->Remove(path);
  if (kind == Kind::kOutside || kind == Kind::kLocal) return s;
  if (!s.ok() && !s.IsNotFound()) return s;
  // S3 answers a DELETE the same whether or not the key existed: a missing staged file is OK here.
  return client_->Delete(KeyOf(path));
}

Status S3TierEnv::GetChildren(const std::string& dir, std::vector<std::string>* names) {
  std::map<std::string, uint64_t> sizes;
  return GetChildrenWithSizes(dir, names, &sizes);
}

Status S3TierEnv::GetChildrenWithSizes(const std::string& dir, std::vector<std::string>* names,
                                       std::map<std::string, uint64_t>* sizes) {
  names->clear();
  sizes->clear();
  if (KindOf(dir) == Kind::kOutside) return local_->GetChildren(dir, names);
  std::vector<std::string> local;
  Status ls = local_->GetChildren(dir, &local);
  if (!ls.ok() && !ls.IsNotFound()) return ls;
  std::set<std::string> all(local.begin(), local.end());
  std::string prefix = KeyOf(dir);
  if (!prefix.empty() && prefix.back() != '/') prefix += '/';
  std::string token;
  bool any = false;
  do {
    auto page = client_->ListDelimited(prefix, token);
    if (!page.ok()) return page.status();
    for (const auto& o : page->objects) {
      if (o.key.size() > prefix.size()) {
        std::string name = o.key.substr(prefix.size());
        // A staged file of that name is what Open reads: its size is not the object's.
        if (std::find(local.begin(), local.end(), name) == local.end()) (*sizes)[name] = o.size;
        all.insert(std::move(name));
      }
      any = true;
    }
    for (const auto& p : page->common_prefixes) {
      if (p.size() > prefix.size() + 1) all.insert(p.substr(prefix.size(), p.size() - prefix.size() - 1));
      any = true;
    }
    token = page->next_token;
  } while (!token.empty());
  if (!ls.ok() && !any) return ls;  // NotFound: neither staged nor in the bucket
  names->assign(all.begin(), all.end());
  return Status::OK();
}

Result<FileInfo> S3TierEnv::Stat(const std::string& path) {
  auto st = local_->Stat(path);
  const Kind kind = KindOf(path);
  if (st.ok() || !st.status().IsNotFound() || kind == Kind::kOutside || kind == Kind::kLocal) return st;
  const std::string key = KeyOf(path);
  auto h = client_->Head(key);
  if (h.ok()) {
    FileInfo fi;
    fi.size = h->size;
    return fi;
  }
  if (!h.status().IsNotFound()) return h.status();
  auto page = client_->ListDelimited(key + "/", "", 1);
  if (!page.ok()) return page.status();
  if (page->objects.empty() && page->common_prefixes.empty()) return st.status();
  // A directory of the bucket exists in the staging directory too, so that files can be created in it
  // (Env::CreateDirs stops at the first directory Stat finds).
  KVFS_RETURN_IF_ERROR(local_->CreateDirs(path));
  FileInfo fi;
  fi.is_dir = true;
  return fi;
}

Status S3TierEnv::SyncDir(const std::string& dir) { return local_->SyncDir(dir); }

Status S3TierEnv::StatFs(const std::string& path, uint64_t* total_bytes, uint64_t* avail_bytes) {
  if (KindOf(path) == Kind::kOutside) return local_->StatFs(path, total_bytes, avail_bytes);
  *total_bytes = kS3TotalBytes;
  *avail_bytes = kS3TotalBytes;
  return Status::OK();
}

Status S3TierEnv::UploadStaged(const std::string& path) {
  auto f = local_->Open(path, OpenOptions{});
  if (!f.ok()) return f.status();
  auto size = (*f)->Size();
  if (!size.ok()) return size.status();
  KVFS_RETURN_IF_ERROR(client_->PutFile(KeyOf(path), f->get(), *size));
  f->reset();
  Status r = local_->Remove(path);
  return r.IsNotFound() ? Status::OK() : r;
}

Status S3TierEnv::PublishPrefix(const std::string& path, uint64_t len) {
  auto f = local_->Open(path, OpenOptions{});
  if (!f.ok()) return f.status();
  return client_->PutFile(KeyOf(path), f->get(), len);
}

std::optional<bool> S3TierEnv::conditional_put() const {
  std::lock_guard<std::mutex> l(probe_mu_);
  return conditional_;
}

void S3TierEnv::set_conditional_put(bool honoured) {
  std::lock_guard<std::mutex> l(probe_mu_);
  conditional_ = honoured;
}

Result<bool> S3TierEnv::ConditionalPuts(const std::string& probe_dir) {
  std::lock_guard<std::mutex> l(probe_mu_);
  if (!conditional_) {
    std::mt19937_64 rng(std::random_device{}());
    auto probed = ProbeConditionalPut(client_.get(), KeyOf(probe_dir) + "/claim-probe-" + std::to_string(rng() >> 1));
    if (!probed.ok()) return probed.status();
    conditional_ = *probed;
    if (!*probed) {
      spdlog::warn("kvfs: s3: the server ignores If-None-Match: * on PUT: generation claims use the timed "
                   "fallback (a claim waits {} ms; safe while a PUT completes within that), and link(2) claims "
                   "are a HEAD then a PUT, not atomic across nodes (docs/s3.md)",
                   claim_wait_ms_.load());
    }
  }
  return *conditional_;
}

// A link claim (engine/link_arbiter.h) as an object: a conditional PUT whose body is a nonce of this call,
// so that a retry after a lost answer that finds the object recognises it as its own.
Status S3TierEnv::CreateExclusive(const std::string& path) {
  const Kind kind = KindOf(path);
  if (kind != Kind::kThrough) return local_->CreateExclusive(path);
  const size_t slash = path.find_last_of('/');
  auto conditional = ConditionalPuts(slash == std::string::npos ? root_ : path.substr(0, slash));
  if (!conditional.ok()) return conditional.status();
  const std::string key = KeyOf(path);
  std::mt19937_64 rng(std::random_device{}());
  const std::string nonce = "nonce=" + std::to_string(rng() >> 1) + "\n";
  S3PutOptions o;
  if (*conditional) {
    o.if_none_match = true;
  } else {
    auto h = client_->Head(key);
    if (h.ok()) return Status::Exists("create " + path + ": the object exists (s3 key " + key + ")");
    if (!h.status().IsNotFound()) return h.status();
  }
  Status s = client_->Put(key, nonce, o);
  if (!s.IsExists()) return s;
  auto theirs = client_->GetAll(key);
  if (theirs.ok() && *theirs == nonce) return Status::OK();
  return Status::Exists("create " + path + ": the object exists (s3 key " + key + ")");
}

Status S3TierEnv::ClaimGeneration(const std::string& node_dir, uint64_t generation, const std::string& owner_text) {
  auto conditional_r = ConditionalPuts(node_dir);
  if (!conditional_r.ok()) return conditional_r.status();
  const bool conditional = *conditional_r;
  char gen[32];
  std::snprintf(gen, sizeof(gen), "%020llu", static_cast<unsigned long long>(generation));
  const std::string base = KeyOf(node_dir) + "/claim-" + gen + "-";
  if (conditional) {
    const std::string key = base + "00000000000000000000";
    S3PutOptions o;
    o.if_none_match = true;
    Status s = client_->Put(key, owner_text, o);
    if (!s.IsExists()) return s;
    auto theirs = client_->GetAll(key);  // a retry after a lost answer finds our own claim
    if (theirs.ok() && *theirs == owner_text) return Status::OK();
    return Status::Exists("claim " + key + " exists" + (theirs.ok() ? ": " + *theirs : ""));
  }
  // Fallback: the smallest nonce among the claims of G listed one wait after ours holds it.
  std::mt19937_64 rng(std::random_device{}());
  char nonce[32];
  std::snprintf(nonce, sizeof(nonce), "%020llu", static_cast<unsigned long long>(rng() >> 1));
  const std::string key = base + nonce;
  KVFS_RETURN_IF_ERROR(client_->Put(key, owner_text));
  auto smallest = [&]() -> Result<std::string> {
    auto page = client_->List(base, "", 1);  // key order: the first is the smallest nonce
    if (!page.ok()) return page.status();
    return page->objects.empty() ? std::string() : page->objects.front().key;
  };
  auto first = smallest();
  if (first.ok() && *first == key) {
    std::this_thread::sleep_for(std::chrono::milliseconds(claim_wait_ms_.load()));
    first = smallest();
  }
  if (!first.ok()) return first.status();
  if (*first == key) return Status::OK();
  (void)client_->Delete(key);
  return Status::Exists("claim " + *first + " holds generation " + std::to_string(generation));
}

Status S3TierEnv::AbortStaleUploads(const std::string& dir, uint64_t* aborted) {
  *aborted = 0;
  auto ups = client_->ListUploads(KeyOf(dir) + "/");
  if (!ups.ok()) return ups.status();
  for (const auto& u : *ups) {
    KVFS_RETURN_IF_ERROR(client_->AbortUpload(u.key, u.upload_id));
    ++*aborted;
  }
  return Status::OK();
}

Status S3TierEnv::ListStaged(const std::string& dir, std::vector<std::string>* names) {
  return local_->GetChildren(dir, names);
}

Status S3TierEnv::SetAsideStaged(const std::string& path) { return local_->Rename(path, path + ".obsolete"); }

Result<uint64_t> S3TierEnv::PublishedSize(const std::string& path) {
  auto h = client_->Head(KeyOf(path));
  if (h.ok()) return h->size;
  if (h.status().IsNotFound()) return uint64_t{0};
  return h.status();
}

Result<uint64_t> S3TierEnv::StagedSize(const std::string& path) {
  auto st = local_->Stat(path);
  if (!st.ok()) return st.status();
  return st->size;
}

}  // namespace kvfs
