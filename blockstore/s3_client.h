// S3Client: the object calls of kvfs's S3 tier (issue #19) on one bucket: PUT (optionally conditional,
// If-None-Match: *), ranged GET, HEAD, DELETE, ListObjectsV2 after a start key, multipart upload for large
// objects, CreateBucket.
//
// Who calls it: today its tests (tests/s3/); next, the S3 implementation of the backing interface
// (docs/s3.md), which maps sealed segments, journal objects and heartbeats onto objects.
//
// Built on libcurl (Debian: libcurl4-openssl-dev): HTTP/1.1 with keep-alive, TLS (OpenSSL) and AWS
// Signature V4 (CURLOPT_AWS_SIGV4; no signing code here). Payloads are sent as UNSIGNED-PAYLOAD (the
// signature covers method, path, query and headers; TLS protects the body in transit, and kvfs verifies
// its block checksums on every read). XML responses (listings, multipart, error bodies) are parsed with
// tinyxml2 (Debian: libtinyxml2-dev).
//
// Units: offsets and sizes in bytes, times in milliseconds. Keys are object keys relative to the bucket
// (no leading '/'), percent-encoded here.
//
// Errors (blockstore/status.h), each with a message "s3 OP bucket/key: HTTP STATUS S3CODE (request id)",
// and a rate-limited log line (warn) for every failed call:
//   404 NoSuchKey / NoSuchBucket / NoSuchUpload  -> NotFound
//   403 (AccessDenied, SignatureDoesNotMatch, InvalidAccessKeyId, ...) -> IOError with errno EACCES
//   412 PreconditionFailed (a conditional PUT whose key exists)  -> Exists
//   416 on a ranged GET (offset at or past the end)              -> OK with 0 bytes (as pread at EOF)
//   other 4xx                                                    -> IOError (EIO); 400 -> InvalidArgument
//   5xx, 429, connection errors, timeouts: retried with exponential backoff and jitter (max_retries) as
//   long as the call's deadline allows; then IOError (EIO), or TimedOut when the deadline ran out.
// No request blocks past its deadline (S3Config::deadline_ms from its start, retries and backoff
// included): each attempt's connect and total timeouts are clipped to what is left. A multipart upload
// is several requests, each with its own deadline.
//
// Thread safety: every method is thread-safe. Calls run on the caller's thread, concurrently; each takes
// a libcurl handle from a small pool (so connections are reused) and returns it. counters() are atomics.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "blockstore/env.h"
#include "blockstore/status.h"

namespace kvfs {

struct S3Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // optional (temporary credentials): sent as x-amz-security-token
  // Where they came from, when from a shared credentials file (FromSharedFile): the client re-reads the
  // file when it changes and after a 403 naming the key or the token (S3Client::Credentials), so a file
  // rotated by an agent (temporary credentials) keeps a long-running mount working. Empty: fixed (the
  // environment is read once).
  std::string file, profile;

  // AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (/ AWS_SESSION_TOKEN) when both of the first two are set;
  // else the shared credentials file (AWS_SHARED_CREDENTIALS_FILE, default ~/.aws/credentials), section
  // `profile` (empty: AWS_PROFILE, else "default"). InvalidArgument naming what is missing otherwise.
  static Result<S3Credentials> FromEnvironment(const std::string& profile = "");
  // The INI file `path`, section [profile]: aws_access_key_id, aws_secret_access_key,
  // aws_session_token. NotFound when the file or the section is missing, InvalidArgument when a key is.
  static Result<S3Credentials> FromSharedFile(const std::string& path, const std::string& profile);
};

struct S3Config {
  // "https://host[:port]" or "http://host[:port]" (no path). Without a scheme, https is assumed.
  std::string endpoint;
  std::string bucket;
  std::string region = "us-east-1";
  // Path-style URLs (ENDPOINT/BUCKET/KEY) instead of virtual-hosted ones (BUCKET.HOST/KEY).
  bool path_style = false;
  // TLS: peer and host verification are always on for https. ca_file: a PEM bundle to trust instead of
  // the system's (a private CA, e.g. an on-premises StorageGRID); empty = the system store.
  std::string ca_file;
  S3Credentials credentials;

  uint32_t connect_timeout_ms = 3000;   // per attempt
  uint32_t request_timeout_ms = 30000;  // per attempt, the whole transfer
  uint32_t deadline_ms = 60000;         // per call, all attempts and backoff included
  uint32_t max_retries = 4;             // attempts after the first, on retryable failures
  uint32_t backoff_initial_ms = 50;     // doubles per retry (with jitter), capped at backoff_max_ms
  uint32_t backoff_max_ms = 2000;

  // Put() of an object of at least multipart_threshold bytes uploads it in parts of part_size bytes
  // (S3's limits: parts of 5 MiB .. 5 GiB except the last, at most 10,000 parts).
  uint64_t multipart_threshold = 64ull << 20;
  uint64_t part_size = 16ull << 20;

  // Parallel ranged GETs (docs/s3.md "Reads: several ranged GETs in flight"). Get() of a range of L
  // bytes (L within the object as far as the caller knows it) is split into P = min(read_parts,
  // L / read_part_min) parts (P <= 1: one GET, as for any small read), each a multiple of 64 KiB (kvfs's
  // checksum block) but the last, fetched concurrently: the caller's thread fetches the first part, the
  // others go to helper threads of this client, at most read_parallel parts at once over all calls (the
  // bound of extra GETs in flight per client, i.e. per mount); a part that finds no free helper is
  // fetched by the caller after its own, so a read never waits for another read's parts. All parts share
  // the call's deadline. read_parts = 1 turns splitting off. Only a range of at least read_split_min
  // bytes is split (docs/s3.md: a 2.25 MiB vLLM value loaded cold ran 186-196 MB/s at 1.06 GETs per
  // value in one GET, 144 MB/s at 4.07 split in 4); kvfs loads a value over 8 MiB in 4 MiB pieces, so
  // 4 MiB splits those (a 36 MiB value: 9 pieces of 4 ranged GETs) and no 2.25 MiB value.
  uint32_t read_parts = 4;
  uint64_t read_split_min = 4ull << 20;
  uint64_t read_part_min = 512ull << 10;
  uint32_t read_parallel = 16;
};

// The request types counted (each HTTP request, retries included: the figure an S3 site is billed by).
enum class S3Op : uint8_t {
  kPut = 0,
  kGet,
  kHead,
  kDelete,
  kList,
  kCreateMultipart,
  kUploadPart,
  kCompleteMultipart,
  kAbortMultipart,
  kCreateBucket,
  kCount,
};
const char* S3OpName(S3Op op);  // "put", "get", ... (metric label values)

struct S3Counters {
  static constexpr size_t kOps = static_cast<size_t>(S3Op::kCount);
  std::array<std::atomic<uint64_t>, kOps> requests{};      // HTTP requests sent, by type
  std::array<std::atomic<uint64_t>, kOps> failures{};      // calls that returned an error, by type
  std::atomic<uint64_t> retries{0};                        // requests that were retries
  std::atomic<uint64_t> bytes_sent{0}, bytes_received{0};  // bodies only
  // Parallel ranged GETs (S3Config::read_parts): Get() calls split into parts, their parts (each one
  // ranged GET, retries aside), the parts a helper thread fetched while the caller fetched its own.
  std::atomic<uint64_t> split_reads{0}, read_parts{0}, read_parts_parallel{0};
  // GET transfers running now, and the most at once since the client was made (a gauge and its peak).
  std::atomic<uint64_t> gets_in_flight{0}, gets_in_flight_peak{0};
  // Credentials re-read from the shared credentials file because it changed or a 403 named the key or
  // token (S3Credentials::file), and the 403s retried once with the re-read credentials.
  std::atomic<uint64_t> credential_reloads{0}, credential_retries{0};
  uint64_t Requests(S3Op op) const { return requests[static_cast<size_t>(op)].load(); }
  uint64_t Failures(S3Op op) const { return failures[static_cast<size_t>(op)].load(); }
  uint64_t TotalRequests() const;
};

struct S3ObjectInfo {
  std::string key;
  uint64_t size = 0;
  std::string etag;  // as the server sends it, quotes included
};

struct S3ListPage {
  std::vector<S3ObjectInfo> objects;  // in key order (UTF-8 binary order), all > start_after
  bool truncated = false;             // more keys follow: list again with start_after = objects.back().key
  // ListDelimited only: the "directories" (CommonPrefixes, each ending in '/') and the token of the next
  // page (NextContinuationToken; empty when not truncated).
  std::vector<std::string> common_prefixes;
  std::string next_token;
};

struct S3PutOptions {
  // If-None-Match: * — the PUT fails with Exists if the key exists (S3 since 2024, Ceph RGW, StorageGRID
  // 11.9+). For a multipart upload the header goes on CompleteMultipartUpload (Ceph RGW 16.2 ignores it
  // there). A retry after a lost answer can report Exists for the caller's own write: callers that must
  // know (a generation claim) put something of their own in the object and read it back on Exists.
  bool if_none_match = false;
};

class S3Client {
 public:
  // Checks the config (endpoint scheme, bucket, credentials present); sends no request.
  static Result<std::unique_ptr<S3Client>> Create(S3Config config);
  ~S3Client();
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  // PUT the object: one request below multipart_threshold, else a multipart upload (aborted on failure).
  Status Put(const std::string& key, std::string_view data, const S3PutOptions& opts = {});
  // A multipart upload whatever the size (parts of part_size; Put() uses it above the threshold).
  Status PutMultipart(const std::string& key, std::string_view data, const S3PutOptions& opts = {});
  // PUT the first `size` bytes of a local file (a sealed segment staged on disk), read part by part:
  // at most one part (part_size) in memory, or the whole file below multipart_threshold. A file shorter
  // than size, or a read error, fails the upload (aborted) with an IOError naming the file.
  Status PutFile(const std::string& key, BackingFile* file, uint64_t size, const S3PutOptions& opts = {});
  // GET bytes [offset, offset + n) into buf; *got = bytes copied, < n only at the end of the object
  // (0 when offset >= size). n == 0 sends nothing. A large range is fetched as several ranged GETs in
  // flight (S3Config::read_parts); object_size: the object's size as the caller knows it (a HEAD at
  // open), so that no part is asked wholly past the end (the last part still runs to offset + n: a
  // journal object replaced by a longer prefix is read to its new end). Any failed part fails the call
  // (its error; the other parts are cancelled, and buf's contents are then unspecified).
  Status Get(const std::string& key, uint64_t offset, size_t n, void* buf, size_t* got,
             uint64_t object_size = UINT64_MAX);
  // The whole object.
  Result<std::string> GetAll(const std::string& key);
  // HEAD: size and ETag. NotFound when the key does not exist.
  Result<S3ObjectInfo> Head(const std::string& key);
  // DELETE. OK whether or not the key existed (S3 answers 204 both ways).
  Status Delete(const std::string& key);
  // ListObjectsV2: keys under prefix, strictly after start_after (empty: from the first), at most
  // max_keys (1..1000) in one request.
  Result<S3ListPage> List(const std::string& prefix, const std::string& start_after,
                          uint32_t max_keys = 1000);
  // ListObjectsV2 with delimiter '/': the objects directly under prefix (a "directory" ending in '/') and
  // its subdirectories (common_prefixes), one page; continue with next_token (empty: the first page).
  Result<S3ListPage> ListDelimited(const std::string& prefix, const std::string& continuation_token,
                                   uint32_t max_keys = 1000);
  // ListMultipartUploads: the multipart uploads under prefix begun and neither completed nor aborted
  // (a crash in the middle of one leaves it, and its parts are stored and billed until it is aborted).
  // One page: at most 1000 (counted as a list request).
  struct Upload {
    std::string key, upload_id;
  };
  Result<std::vector<Upload>> ListUploads(const std::string& prefix);
  // CreateMultipartUpload: the upload id (PutFile and PutMultipart use it; tests start one to abort).
  Result<std::string> BeginUpload(const std::string& key);
  // AbortMultipartUpload. OK if the upload is gone already (404).
  Status AbortUpload(const std::string& key, const std::string& upload_id);
  // PUT Bucket (tests and first setup). OK if this account already owns it.
  Status CreateBucket();

  S3Counters& counters() { return counters_; }
  const S3Config& config() const { return config_; }

 private:
  struct Request;
  struct Response;
  class HandlePool;
  class ReadHelpers;
  using TimePoint = std::chrono::steady_clock::time_point;
  explicit S3Client(S3Config config);
  // One call: attempts with retries and backoff inside the deadline (the call's own, from now, or the
  // given one); fills resp from the last attempt.
  Status Perform(S3Op op, Request& req, Response* resp, const TimePoint* deadline = nullptr);
  // One ranged GET of [offset, offset + n) ending by deadline; cancel (optional): set by another part.
  Status GetRange(const std::string& key, uint64_t offset, size_t n, char* buf, size_t* got,
                  const TimePoint& deadline, const std::atomic<bool>* cancel);
  // The deadline of a call starting now: the client's per-call deadline, or the thread's
  // BackingDeadlineScope when that ends earlier.
  TimePoint CallDeadline() const;
  std::string Url(const std::string& key, const std::string& query) const;
  // The multipart upload of `size` bytes; part_data(offset, n) gives the bytes of one part (valid until
  // the next call). Aborts the upload on any failure.
  Status Multipart(const std::string& key, uint64_t size, const S3PutOptions& opts,
                   const std::function<Result<std::string_view>(uint64_t, size_t)>& part_data);
  // Counts a failed call of type op and logs it (rate-limited warn; NotFound at debug); returns s.
  Status Fail(S3Op op, Status s);
  // The credentials to sign the next request with. From a shared credentials file
  // (S3Credentials::file), the file is stat'ed at most once a second and re-read when its mtime, size or
  // inode changed; force: re-read now (after a 403 naming the key or token). *changed: the keys differ
  // from the ones in use before. A file that cannot be read or parsed keeps the old ones (one warning).
  std::shared_ptr<const S3Credentials> Credentials(bool force = false, bool* changed = nullptr);
  friend struct S3ClientCallbacks;

  S3Config config_;
  std::string scheme_host_;  // "https://host:port" (virtual-hosted: "https://bucket.host:port")
  std::string sigv4_;        // "aws:amz:REGION:s3"
  S3Counters counters_;
  std::unique_ptr<HandlePool> pool_;
  std::once_flag helpers_once_;
  std::unique_ptr<ReadHelpers> helpers_;  // made at the first split read (read_parallel threads)
  std::mutex cred_mu_;  // guards the four below
  std::shared_ptr<const S3Credentials> creds_;
  TimePoint cred_checked_{};
  struct FileId {
    int64_t mtime_ns = 0, size = -1;
    uint64_t ino = 0;
    bool operator==(const FileId&) const = default;
  } cred_file_id_;
  bool cred_warned_ = false;
  static FileId S3CredFileId(const std::string& file);
};

}  // namespace kvfs
