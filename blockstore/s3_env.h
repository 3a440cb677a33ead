// S3TierEnv: the backing Env of an S3 mount (`kvfs mount --backing s3://BUCKET/PREFIX --s3-staging DIR`,
// docs/s3.md "The first slice: a tiered Env"). The engine keeps its paths under the staging directory
// (the Store's backing_dir is DIR); this Env keeps every file on local disk first and decides, by the
// file's name, what reaches the bucket and when. Key of a path: PREFIX + the path relative to DIR.
//
//   staged     seg/*.kseg and journal-*: written, synced and read locally. They reach the bucket only
//              through ObjectTier (below), called by the engine at points it chooses: a sealed segment is
//              uploaded whole and its staged copy removed (UploadStaged); a journal file is published as
//              a prefix ending after a complete entry whose segments are all in the bucket (PublishPrefix,
//              replacing the shorter object: every prefix agrees with the longer ones).
//   local      *.tmp and RESERVE: local only (RESERVE is about a full export; S3 does not fill up).
//   through    everything else (FORMAT, OWNER, HEARTBEAT, peers, snapshot-*): written locally and PUT
//              whole after each Sync() of a file open for writing and after a Rename() onto its name
//              (Env::WriteFileAtomic's temp + rename), so the bucket has the latest synced version. An
//              O_EXCL create fails with Exists when the object exists (FORMAT is written once).
//
// Reads: a path present in the staging directory is read there; otherwise the object is opened (one HEAD)
// and every BackingFile::Read is one ranged GET (the engine verifies its block checksums as on NFS).
// GetChildren merges the local directory with a delimited listing; Stat falls back to HEAD, then to a
// listing of KEY/ (a "directory", then also made in the staging directory, so files can be created there). Remove removes both. Paths outside DIR go to the local Env unchanged.
// StatFs reports kS3TotalBytes (S3 does not fill up; --capacity sets the limit kvfs keeps to).
//
// Errors: the S3Client's (NotFound, EACCES, EIO, TimedOut), never a silent success: a failed PUT of a
// "through" file fails the Sync or Rename that caused it (the local file is written all the same).
// Thread safety: every method is thread-safe (the S3Client and the local Env are).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "blockstore/env.h"
#include "blockstore/s3_client.h"
#include "blockstore/status.h"

namespace kvfs {

// What the engine calls to move staged files of a tiered backing into the object tier (engine/store_tier.cc).
class ObjectTier {
 public:
  virtual ~ObjectTier() = default;
  // Uploads the staged file at path (a sealed segment) as its object, then removes the staged copy.
  // NotFound when there is no staged copy (already uploaded, or dropped); the staged copy is kept on any
  // other error.
  virtual Status UploadStaged(const std::string& path) = 0;
  // Makes the object of path (a journal file) the first len bytes of the staged file (a replacement).
  virtual Status PublishPrefix(const std::string& path, uint64_t len) = 0;
  // Names in the staging directory `dir` only (no bucket listing). NotFound if dir does not exist.
  virtual Status ListStaged(const std::string& dir, std::vector<std::string>* names) = 0;
  // Renames the staged file at path to path + ".obsolete" in the staging directory only (the bucket is
  // left alone): leftovers a later mount from another staging directory made obsolete.
  virtual Status SetAsideStaged(const std::string& path) = 0;
  // Size of path's object in the bucket; 0 when there is none.
  virtual Result<uint64_t> PublishedSize(const std::string& path) = 0;
  // Size of the staged file at path. NotFound if none.
  virtual Result<uint64_t> StagedSize(const std::string& path) = 0;
  // Aborts the multipart uploads begun under dir's objects and never completed (a crash in the middle
  // of a segment upload leaves one: its parts stay stored, and billed, until aborted). Only for a
  // directory this node owns (no upload of it can be in progress). *aborted = how many.
  virtual Status AbortStaleUploads(const std::string& dir, uint64_t* aborted) = 0;
  // Claims generation `generation` of the node directory node_dir for the taker whose OWNER text is
  // owner_text (NodeDirOptions::claim): OK if this taker holds the claim, Exists if another one does.
  // Where the server honours If-None-Match: * (probed once: ProbeConditionalPut) one PUT of
  // <node_dir>/claim-<G>-<0> with it (on Exists the object is read back: our own retried PUT is ours);
  // where it does not, the fallback: PUT <node_dir>/claim-<G>-<random nonce>, wait claim_wait_ms, list the
  // claims of G: the smallest nonce holds it (the others delete theirs). Safe as long as a claim PUT
  // completes within claim_wait_ms.
  virtual Status ClaimGeneration(const std::string& node_dir, uint64_t generation, const std::string& owner_text) = 0;
  virtual const S3Counters& s3_counters() const = 0;
};

inline constexpr uint64_t kS3TotalBytes = 1ull << 50;  // what StatFs reports for an S3 backing (1 PiB)

class S3TierEnv : public Env, public ObjectTier {
 public:
  // staging_root: an absolute directory (no trailing '/'); key_prefix: "" or ending in '/'.
  S3TierEnv(std::shared_ptr<S3Client> client, std::string key_prefix, std::string staging_root,
            Env* local = Env::Posix());

  Result<std::unique_ptr<BackingFile>> Open(const std::string& path, const OpenOptions& opts) override;
  Status CreateDir(const std::string& path) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status Remove(const std::string& path) override;
  Status CreateExclusive(const std::string& path) override;
  Status GetChildren(const std::string& dir, std::vector<std::string>* names) override;
  Status GetChildrenWithSizes(const std::string& dir, std::vector<std::string>* names,
                              std::map<std::string, uint64_t>* sizes) override;
  Result<FileInfo> Stat(const std::string& path) override;
  Status SyncDir(const std::string& dir) override;
  Status StatFs(const std::string& path, uint64_t* total_bytes, uint64_t* avail_bytes) override;
  EnvCounters& counters() override { return local_->counters(); }

  Status UploadStaged(const std::string& path) override;
  Status PublishPrefix(const std::string& path, uint64_t len) override;
  Status AbortStaleUploads(const std::string& dir, uint64_t* aborted) override;
  Status ListStaged(const std::string& dir, std::vector<std::string>* names) override;
  Status SetAsideStaged(const std::string& path) override;
  Result<uint64_t> PublishedSize(const std::string& path) override;
  Result<uint64_t> StagedSize(const std::string& path) override;
  Status ClaimGeneration(const std::string& node_dir, uint64_t generation, const std::string& owner_text) override;
  const S3Counters& s3_counters() const override { return client_->counters(); }
  // The fallback's wait (the heartbeat interval by default); tests shorten it.
  void set_claim_wait_ms(uint32_t ms) { claim_wait_ms_ = ms; }
  // Whether claims use If-None-Match (probed at the first claim; nullopt before). Tests force it.
  std::optional<bool> conditional_put() const;
  void set_conditional_put(bool honoured);

  enum class Kind { kOutside, kLocal, kStaged, kThrough };
  Kind KindOf(const std::string& path) const;
  std::string KeyOf(const std::string& path) const;  // requires KindOf(path) != kOutside
  S3Client* client() const { return client_.get(); }
  // PUTs the first size bytes of the local file at path as its object (the "through" files).
  Status PutLocal(const std::string& path);

 private:
  std::shared_ptr<S3Client> client_;
  const std::string prefix_, root_;
  Env* const local_;
  std::atomic<uint32_t> claim_wait_ms_{5000};
  mutable std::mutex probe_mu_;
  std::optional<bool> conditional_;  // guarded by probe_mu_
  // Whether the server honours If-None-Match: * (probed once with a key under probe_dir).
  Result<bool> ConditionalPuts(const std::string& probe_dir);
};

// "s3://BUCKET/PREFIX" -> bucket, key prefix ("" or ending in '/'). InvalidArgument otherwise.
Status ParseS3Url(const std::string& url, std::string* bucket, std::string* prefix);

}  // namespace kvfs
