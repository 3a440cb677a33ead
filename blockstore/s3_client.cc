// S3Client on libcurl (SigV4 by CURLOPT_AWS_SIGV4) and tinyxml2. See s3_client.h.
#include "blockstore/s3_client.h"

#include <curl/curl.h>
#include <tinyxml2.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <random>
#include <thread>

#include <sys/stat.h>

#include "blockstore/kernel_copy.h"
#include "blockstore/log.h"

namespace kvfs {

namespace {

using S3Clock = std::chrono::steady_clock;

constexpr size_t kS3ErrorBodyMax = 64 << 10;  // error bodies kept at most this long
// XML answers of successful calls kept at most this long: a listing page of 1,000 keys of up to 1,024
// bytes each, with their sizes, ETags, dates and owners, is ~1.5 MB (before, the 64 KiB cap of error
// bodies cut pages of more than ~150 keys: "not a ListBucketResult").
constexpr size_t kS3XmlBodyMax = 8 << 20;
constexpr size_t kS3HandlePoolMax = 32;       // idle curl handles kept (each keeps its connections)

void S3GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

bool S3Unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
         c == '.' || c == '~';
}

// Percent-encoding as SigV4 wants it (RFC 3986 unreserved kept, upper-case hex); '/' kept in keys.
std::string S3Encode(std::string_view s, bool keep_slash) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (S3Unreserved(c) || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::string S3Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t' || s[b] == '\r' || s[b] == '\n')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r' || s[e - 1] == '\n')) --e;
  return std::string(s.substr(b, e - b));
}

bool S3IEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(x) == std::tolower(y);
         });
}

const char* S3ElementText(const tinyxml2::XMLElement* parent, const char* name) {
  const tinyxml2::XMLElement* e = parent ? parent->FirstChildElement(name) : nullptr;
  const char* t = e ? e->GetText() : nullptr;
  return t ? t : "";
}

// A ListObjectsV2 answer (ListBucketResult): objects, common prefixes (with a delimiter), truncation
// and the continuation token. False if the body is not one.
bool ParseListPage(const std::string& body, S3ListPage* page) {
  tinyxml2::XMLDocument doc;
  if (doc.Parse(body.data(), body.size()) != tinyxml2::XML_SUCCESS) return false;
  const tinyxml2::XMLElement* root = doc.RootElement();
  if (!root || std::string_view(root->Name()) != "ListBucketResult") return false;
  page->truncated = std::string_view(S3ElementText(root, "IsTruncated")) == "true";
  if (page->truncated) page->next_token = S3ElementText(root, "NextContinuationToken");
  for (const tinyxml2::XMLElement* c = root->FirstChildElement("Contents"); c;
       c = c->NextSiblingElement("Contents")) {
    S3ObjectInfo o;
    o.key = S3ElementText(c, "Key");
    o.size = std::strtoull(S3ElementText(c, "Size"), nullptr, 10);
    o.etag = S3ElementText(c, "ETag");
    page->objects.push_back(std::move(o));
  }
  for (const tinyxml2::XMLElement* c = root->FirstChildElement("CommonPrefixes"); c;
       c = c->NextSiblingElement("CommonPrefixes")) {
    page->common_prefixes.push_back(S3ElementText(c, "Prefix"));
  }
  return true;
}

// Transport failures worth another attempt (the server may be restarting, a connection was dropped).
bool S3RetryableCurl(CURLcode rc) {
  switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
  }
}

bool S3RetryableHttp(long status, const std::string& s3_code) {
  return status >= 500 || status == 429 || status == 408 ||
         (status == 409 && s3_code == "ConditionalRequestConflict");
}

}  // namespace

const char* S3OpName(S3Op op) {
  switch (op) {
    case S3Op::kPut:
      return "put";
    case S3Op::kGet:
      return "get";
    case S3Op::kHead:
      return "head";
    case S3Op::kDelete:
      return "delete";
    case S3Op::kList:
      return "list";
    case S3Op::kCreateMultipart:
      return "create_multipart";
    case S3Op::kUploadPart:
      return "upload_part";
    case S3Op::kCompleteMultipart:
      return "complete_multipart";
    case S3Op::kAbortMultipart:
      return "abort_multipart";
    case S3Op::kCreateBucket:
      return "create_bucket";
    case S3Op::kCount:
      break;
  }
  return "?";
}

uint64_t S3Counters::TotalRequests() const {
  uint64_t n = 0;
  for (const auto& r : requests) n += r.load();
  return n;
}

// ---- credentials ----

Result<S3Credentials> S3Credentials::FromSharedFile(const std::string& path, const std::string& profile) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("s3 credentials file " + path + " cannot be read");
  S3Credentials c;
  bool in_section = false, found = false;
  std::string line;
  while (std::getline(in, line)) {
    std::string t = S3Trim(line);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (t.front() == '[' && t.back() == ']') {
      std::string name = S3Trim(std::string_view(t).substr(1, t.size() - 2));
      in_section = name == profile;
      found = found || in_section;
      continue;
    }
    if (!in_section) continue;
    const size_t eq = t.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = S3Trim(std::string_view(t).substr(0, eq));
    const std::string v = S3Trim(std::string_view(t).substr(eq + 1));
    if (k == "aws_access_key_id")
      c.access_key_id = v;
    else if (k == "aws_secret_access_key")
      c.secret_access_key = v;
    else if (k == "aws_session_token")
      c.session_token = v;
  }
  if (!found) return Status::NotFound("s3 credentials file " + path + " has no profile [" + profile + "]");
  if (c.access_key_id.empty() || c.secret_access_key.empty()) {
    return Status::InvalidArgument("s3 credentials file " + path + " profile [" + profile +
                                   "] lacks aws_access_key_id or aws_secret_access_key");
  }
  c.file = path;
  c.profile = profile;
  return c;
}

Result<S3Credentials> S3Credentials::FromEnvironment(const std::string& profile) {
  const char* id = std::getenv("AWS_ACCESS_KEY_ID");
  const char* secret = std::getenv("AWS_SECRET_ACCESS_KEY");
  if (id && *id && secret && *secret) {
    S3Credentials c;
    c.access_key_id = id;
    c.secret_access_key = secret;
    if (const char* tok = std::getenv("AWS_SESSION_TOKEN")) c.session_token = tok;
    return c;
  }
  std::string file;
  if (const char* f = std::getenv("AWS_SHARED_CREDENTIALS_FILE"); f && *f) {
    file = f;
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    file = std::string(home) + "/.aws/credentials";
  }
  std::string prof = profile;
  if (prof.empty()) {
    const char* p = std::getenv("AWS_PROFILE");
    prof = p && *p ? p : "default";
  }
  if (file.empty()) {
    return Status::InvalidArgument(
        "s3: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a "
        "shared credentials file (AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials)");
  }
  auto r = FromSharedFile(file, prof);
  if (!r.ok() && r.status().IsNotFound()) {
    return Status::InvalidArgument(
        "s3: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a shared credentials file "
        "(AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials): " + r.status().message());
  }
  return r;
}

// ---- handles ----

class S3Client::HandlePool {
 public:
  ~HandlePool() {
    for (CURL* h : idle_) curl_easy_cleanup(h);
  }
  CURL* Acquire() {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!idle_.empty()) {
        CURL* h = idle_.back();
        idle_.pop_back();
        return h;
      }
    }
    return curl_easy_init();
  }
  void Release(CURL* h) {
    curl_easy_reset(h);  // options back to defaults; the connection and DNS caches stay
    std::lock_guard<std::mutex> l(mu_);
    if (idle_.size() < kS3HandlePoolMax) {
      idle_.push_back(h);
      return;
    }
    curl_easy_cleanup(h);
  }

 private:
  std::mutex mu_;
  std::vector<CURL*> idle_;
};

struct S3Client::Request {
  const char* method = "GET";  // GET, PUT, HEAD, DELETE, POST
  std::string key;             // for the URL (encoded there) and messages; empty = the bucket
  std::string query;           // encoded, parameters in sorted order (SigV4's canonical query)
  std::vector<std::string> headers;
  std::string_view body;  // PUT / POST
  // GET sinks: buf (capacity cap, the range [range_offset, +cap) was asked) or out (whole body).
  char* buf = nullptr;
  size_t cap = 0;
  uint64_t range_offset = 0;
  bool ranged = false;
  std::string* out = nullptr;
  const std::atomic<bool>* cancel = nullptr;  // a parallel read's other part failed: stop
};

struct S3Client::Response {
  long status = 0;
  std::string body;  // XML answers and error bodies (not object data)
  std::string etag, request_id, s3_code, s3_message;
  uint64_t content_length = 0;
  size_t got = 0;  // bytes copied into Request::buf
};

namespace {

struct S3Transfer {
  CURL* h = nullptr;
  const void* req = nullptr;  // S3Client::Request (private type; reached through the callbacks below)
  void* resp = nullptr;
  size_t upload_pos = 0;
  uint64_t skip = 0;  // bytes of a 200 answer to a ranged GET to drop (a server that ignored Range)
  bool status_known = false;
  long status = 0;
};

}  // namespace

// Callbacks need the private types: friend-free static helpers that know their layout.
struct S3ClientCallbacks {
  static size_t Write(char* ptr, size_t size, size_t nmemb, void* userdata) {
    auto* t = static_cast<S3Transfer*>(userdata);
    const auto& req = *static_cast<const S3Client::Request*>(t->req);
    auto& resp = *static_cast<S3Client::Response*>(t->resp);
    const size_t n = size * nmemb;
    if (req.cancel && req.cancel->load(std::memory_order_relaxed)) return 0;  // CURLE_WRITE_ERROR: stop
    if (!t->status_known) {
      curl_easy_getinfo(t->h, CURLINFO_RESPONSE_CODE, &t->status);
      t->status_known = true;
      if (t->status == 200 && req.ranged) t->skip = req.range_offset;
    }
    if (t->status >= 300 || (!req.buf && !req.out)) {
      const size_t cap = t->status >= 300 ? kS3ErrorBodyMax : kS3XmlBodyMax;
      if (resp.body.size() < cap) resp.body.append(ptr, std::min(n, cap - resp.body.size()));
      return n;
    }
    std::string_view data(ptr, n);
    if (t->skip > 0) {
      const size_t s = static_cast<size_t>(std::min<uint64_t>(t->skip, data.size()));
      data.remove_prefix(s);
      t->skip -= s;
    }
    if (req.buf) {
      const size_t c = std::min(data.size(), req.cap - resp.got);
      if (VerifyUntouchedThroughKernel()) {
        WriteThroughKernel(req.buf + resp.got, data.data(), c);
      } else {
        std::memcpy(req.buf + resp.got, data.data(), c);
      }
      resp.got += c;
    } else {
      req.out->append(data);
    }
    return n;
  }
  static size_t Read(char* ptr, size_t size, size_t nmemb, void* userdata) {
    auto* t = static_cast<S3Transfer*>(userdata);
    const auto& req = *static_cast<const S3Client::Request*>(t->req);
    const size_t n = std::min(size * nmemb, req.body.size() - t->upload_pos);
    std::memcpy(ptr, req.body.data() + t->upload_pos, n);
    t->upload_pos += n;
    return n;
  }
  static size_t Header(char* ptr, size_t size, size_t nmemb, void* userdata) {
    auto* t = static_cast<S3Transfer*>(userdata);
    auto& resp = *static_cast<S3Client::Response*>(t->resp);
    const size_t n = size * nmemb;
    std::string_view line(ptr, n);
    const size_t colon = line.find(':');
    if (colon != std::string_view::npos) {
      const std::string_view name = line.substr(0, colon);
      if (S3IEquals(name, "etag"))
        resp.etag = S3Trim(line.substr(colon + 1));
      else if (S3IEquals(name, "x-amz-request-id"))
        resp.request_id = S3Trim(line.substr(colon + 1));
    }
    return n;
  }
};

// ---- client ----

S3Client::S3Client(S3Config config) : config_(std::move(config)), pool_(std::make_unique<HandlePool>()) {}

Result<std::unique_ptr<S3Client>> S3Client::Create(S3Config config) {
  S3GlobalInit();
  std::string ep = config.endpoint;
  while (!ep.empty() && ep.back() == '/') ep.pop_back();
  if (ep.empty()) return Status::InvalidArgument("s3: no endpoint");
  std::string scheme = "https";
  if (const size_t p = ep.find("://"); p != std::string::npos) {
    scheme = ep.substr(0, p);
    ep = ep.substr(p + 3);
  }
  if (scheme != "https" && scheme != "http") {
    return Status::InvalidArgument("s3: endpoint " + config.endpoint + ": scheme must be https or http");
  }
  if (ep.empty() || ep.find('/') != std::string::npos) {
    return Status::InvalidArgument("s3: endpoint " + config.endpoint +
                                   ": want SCHEME://HOST[:PORT] without a path");
  }
  const std::string& b = config.bucket;
  if (b.size() < 3 || b.size() > 63 || b.find('/') != std::string::npos) {
    return Status::InvalidArgument("s3: bucket name '" + b + "' is not 3..63 characters without '/'");
  }
  if (config.credentials.access_key_id.empty() || config.credentials.secret_access_key.empty()) {
    return Status::InvalidArgument("s3: no credentials (access key id and secret access key)");
  }
  if (config.region.empty()) return Status::InvalidArgument("s3: no region");
  if (config.part_size < (5ull << 20))
    return Status::InvalidArgument("s3: part size below S3's 5 MiB minimum");
  if (config.deadline_ms == 0 || config.request_timeout_ms == 0 || config.connect_timeout_ms == 0) {
    return Status::InvalidArgument("s3: timeouts and the deadline must be positive");
  }
  std::unique_ptr<S3Client> c(new S3Client(std::move(config)));
  c->creds_ = std::make_shared<const S3Credentials>(c->config_.credentials);
  c->cred_file_id_ = S3CredFileId(c->config_.credentials.file);  // a change after this is re-read
  c->cred_checked_ = S3Clock::now();
  c->scheme_host_ = scheme + "://" + (c->config_.path_style ? ep : c->config_.bucket + "." + ep);
  c->sigv4_ = "aws:amz:" + c->config_.region + ":s3";
  return c;
}

std::string S3Client::Url(const std::string& key, const std::string& query) const {
  std::string url = scheme_host_;
  if (config_.path_style) url += "/" + config_.bucket;
  // The bucket itself: "/BUCKET" path-style (no trailing '/': gateways sign the path without it), "/"
  // virtual-hosted.
  if (!key.empty() || !config_.path_style) url += "/" + S3Encode(key, /*keep_slash=*/true);
  if (!query.empty()) url += "?" + query;
  return url;
}

Status S3Client::Fail(S3Op op, Status s) {
  counters_.failures[static_cast<size_t>(op)]++;
  if (s.IsNotFound() || s.IsExists()) {
    // A missing key (HEAD before a write) or a conditional PUT's 412 (a claim taken) is an answer, not a
    // fault: the caller decides.
    spdlog::debug("{}", ErrnoText(s));
  } else {
    LogLimited(spdlog::level::warn, LogKey(std::string("s3-") + S3OpName(op), s), "{}", ErrnoText(s));
  }
  return s;
}

// What tells a rewritten credentials file: mtime, size, inode (an agent's write-temp + rename).
S3Client::FileId S3Client::S3CredFileId(const std::string& file) {
  FileId id;
  struct stat st{};
  if (!file.empty() && stat(file.c_str(), &st) == 0) {
    id.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
    id.size = st.st_size;
    id.ino = st.st_ino;
  }
  return id;
}

std::shared_ptr<const S3Credentials> S3Client::Credentials(bool force, bool* changed) {
  if (changed) *changed = false;
  std::lock_guard<std::mutex> l(cred_mu_);
  const std::string& file = creds_->file;
  if (file.empty()) return creds_;
  const auto now = S3Clock::now();
  if (!force && cred_checked_ != TimePoint{} && now - cred_checked_ < std::chrono::seconds(1)) return creds_;
  cred_checked_ = now;
  const FileId id = S3CredFileId(file);
  if (!force && id == cred_file_id_) return creds_;
  auto fresh = S3Credentials::FromSharedFile(file, creds_->profile);
  if (!fresh.ok()) {
    // Mid-rewrite, removed, or broken: keep signing with what we have (they may still work).
    if (!cred_warned_) {
      spdlog::warn("kvfs: s3: re-reading the credentials: {}; still using the previous ones", fresh.status().message());
      cred_warned_ = true;
    }
    return creds_;
  }
  cred_warned_ = false;
  cred_file_id_ = id;
  const bool differ = fresh->access_key_id != creds_->access_key_id ||
                      fresh->secret_access_key != creds_->secret_access_key ||
                      fresh->session_token != creds_->session_token;
  if (differ) {
    creds_ = std::make_shared<const S3Credentials>(std::move(*fresh));
    counters_.credential_reloads++;
    spdlog::info("kvfs: s3: credentials re-read from {} [{}] (access key {}){}", file, creds_->profile,
                 creds_->access_key_id, force ? " after an access denied" : "");
  }
  if (changed) *changed = differ;
  return creds_;
}

S3Client::TimePoint S3Client::CallDeadline() const {
  return std::min(S3Clock::now() + std::chrono::milliseconds(config_.deadline_ms), BackingDeadlineScope::Current());
}

Status S3Client::Perform(S3Op op, Request& req, Response* resp, const TimePoint* given_deadline) {
  const auto deadline = given_deadline ? *given_deadline : CallDeadline();
  const std::string what = std::string("s3 ") + req.method + " " + config_.bucket + "/" + req.key +
                           (req.query.empty() ? "" : "?" + req.query.substr(0, 64));
  const std::string url = Url(req.key, req.query);
  thread_local std::minstd_rand rng(std::random_device{}());
  std::string last_error;
  bool cred_retried = false;  // a 403 naming the key or token was retried once with re-read credentials
  for (uint32_t attempt = 0;; ++attempt) {
    const auto now = S3Clock::now();
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
    if (req.cancel && req.cancel->load()) return Status::IOError(what + ": cancelled (another part of the read failed)", ECANCELED);
    if (left <= 0) {
      return Fail(op, Status::TimedOut(what + ": deadline of " + std::to_string(config_.deadline_ms) +
                                       " ms passed after " + std::to_string(attempt) + " attempt(s)" +
                                       (last_error.empty() ? "" : ", last: " + last_error)));
    }
    *resp = Response();
    if (req.out) req.out->clear();

    CURL* h = pool_->Acquire();
    if (!h) return Fail(op, Status::IOError(what + ": curl_easy_init failed", ENOMEM));
    S3Transfer t;
    t.h = h;
    t.req = &req;
    t.resp = resp;
    char errbuf[CURL_ERROR_SIZE] = {0};
    curl_slist* hdrs = nullptr;
    hdrs = curl_slist_append(hdrs, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    // No "Expect:" override here: libcurl 7.88 signs an empty header it then does not send (403). Its
    // own Expect: 100-continue on large bodies is added after signing, and spares sending a body a 403
    // or 412 would refuse.
    const std::shared_ptr<const S3Credentials> creds = Credentials();
    if (!creds->session_token.empty()) {
      hdrs = curl_slist_append(hdrs, ("x-amz-security-token: " + creds->session_token).c_str());
    }
    for (const auto& x : req.headers) hdrs = curl_slist_append(hdrs, x.c_str());

    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4_.c_str());
    curl_easy_setopt(h, CURLOPT_USERNAME, creds->access_key_id.c_str());
    curl_easy_setopt(h, CURLOPT_PASSWORD, creds->secret_access_key.c_str());
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(std::min<int64_t>(config_.connect_timeout_ms, left)));
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS,
                     static_cast<long>(std::min<int64_t>(config_.request_timeout_ms, left)));
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
    if (!config_.ca_file.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, config_.ca_file.c_str());
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &S3ClientCallbacks::Write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, &S3ClientCallbacks::Header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &t);
    const std::string_view method = req.method;
    if (method == "PUT") {
      curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(h, CURLOPT_READFUNCTION, &S3ClientCallbacks::Read);
      curl_easy_setopt(h, CURLOPT_READDATA, &t);
      curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
    } else if (method == "POST") {
      curl_easy_setopt(h, CURLOPT_POST, 1L);
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, req.body.empty() ? "" : req.body.data());
    } else if (method == "HEAD") {
      curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (method == "DELETE") {
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
    }

    counters_.requests[static_cast<size_t>(op)]++;
    if (attempt > 0) counters_.retries++;
    if (op == S3Op::kGet) {
      const uint64_t now_in = ++counters_.gets_in_flight;
      uint64_t peak = counters_.gets_in_flight_peak.load();
      while (now_in > peak && !counters_.gets_in_flight_peak.compare_exchange_weak(peak, now_in)) {
      }
    }
    const CURLcode rc = curl_easy_perform(h);
    if (op == S3Op::kGet) counters_.gets_in_flight--;
    long status = 0;
    curl_off_t clen = -1;
    if (rc == CURLE_OK) {
      curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
      curl_easy_getinfo(h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &clen);
      curl_off_t up = 0, down = 0;
      curl_easy_getinfo(h, CURLINFO_SIZE_UPLOAD_T, &up);
      curl_easy_getinfo(h, CURLINFO_SIZE_DOWNLOAD_T, &down);
      counters_.bytes_sent += static_cast<uint64_t>(up);
      counters_.bytes_received += static_cast<uint64_t>(down);
    }
    curl_slist_free_all(hdrs);
    pool_->Release(h);

    bool retry = false;
    Status s;
    if (rc != CURLE_OK && req.cancel && req.cancel->load()) {
      return Status::IOError(what + ": cancelled (another part of the read failed)", ECANCELED);
    }
    if (rc != CURLE_OK) {
      last_error = std::string("curl: ") + (errbuf[0] ? errbuf : curl_easy_strerror(rc));
      retry = S3RetryableCurl(rc);
      if (rc == CURLE_SSL_CACERT_BADFILE) {
        last_error += " (the CA file '" + config_.ca_file + "' could not be read as a PEM bundle)";
      } else if (rc == CURLE_PEER_FAILED_VERIFICATION && config_.ca_file.empty()) {
        last_error += " (the server's certificate is not signed by a CA of the system's store: for a private "
                      "CA give its PEM bundle with --s3-ca FILE)";
      } else if (rc == CURLE_PEER_FAILED_VERIFICATION) {
        last_error += " (the server's certificate is not signed by a CA in '" + config_.ca_file +
                      "', or does not name the endpoint's host)";
      } else if (rc == CURLE_COULDNT_RESOLVE_HOST && !config_.path_style) {
        // Virtual-hosted addressing puts the bucket in the host name (BUCKET.HOST): an IP endpoint, or a
        // host without wildcard DNS, never resolves.
        last_error += " (virtual-hosted addressing asks for " + config_.bucket +
                      ".<endpoint host>; for an endpoint given by IP address or without wildcard DNS add "
                      "--s3-path-style)";
      }
      s = Status::IOError(what + ": " + last_error, EIO);
    } else {
      resp->status = status;
      resp->content_length = clen > 0 ? static_cast<uint64_t>(clen) : 0;
      if (status >= 200 && status < 300) return Status::OK();
      if (status == 416 && req.ranged) return Status::OK();  // offset at or past the end: 0 bytes
      tinyxml2::XMLDocument doc;
      if (!resp->body.empty() && doc.Parse(resp->body.data(), resp->body.size()) == tinyxml2::XML_SUCCESS) {
        const tinyxml2::XMLElement* root = doc.RootElement();
        if (root && std::string_view(root->Name()) == "Error") {
          resp->s3_code = S3ElementText(root, "Code");
          resp->s3_message = S3ElementText(root, "Message");
          if (resp->request_id.empty()) resp->request_id = S3ElementText(root, "RequestId");
        }
      }
      std::string code = resp->s3_code;
      if (code.empty()) {
        code = status == 404   ? "NotFound"
               : status == 403 ? "Forbidden"
               : status == 412 ? "PreconditionFailed"
                               : "";
      }
      last_error = "HTTP " + std::to_string(status) + (code.empty() ? "" : " " + code) +
                   (resp->s3_message.empty() ? "" : " (" + resp->s3_message + ")") +
                   (resp->request_id.empty() ? "" : " [request " + resp->request_id + "]");
      const std::string msg = what + ": " + last_error;
      retry = S3RetryableHttp(status, resp->s3_code);
      if (status == 404) {
        s = Status::NotFound(msg);
      } else if (status == 403) {
        // Credentials that stopped working (temporary ones expired, a key rotated): if they come from a
        // shared credentials file, re-read it and retry once at once with the new ones. A HEAD's 403 has
        // no body (no code): it counts as naming the key. AccessDenied (a policy) is not retried.
        const std::string& c3 = resp->s3_code;
        const bool key_or_token = c3.empty() || c3 == "ExpiredToken" || c3 == "InvalidAccessKeyId" ||
                                  c3 == "InvalidToken" || c3 == "TokenRefreshRequired" ||
                                  c3 == "SignatureDoesNotMatch" || c3 == "InvalidClientTokenId";
        bool changed = false;
        if (key_or_token && !cred_retried && !creds->file.empty() && (Credentials(true, &changed), changed)) {
          cred_retried = true;
          counters_.credential_retries++;
          spdlog::debug("{}: {} — retrying with the re-read credentials", what, last_error);
          continue;
        }
        s = Status::IOError(
            msg +
                ": access denied; check the credentials (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY "
                "or the credentials file profile), the region and the bucket policy",
            EACCES);
      } else if (status == 412) {
        s = Status::Exists(msg + ": the object exists (conditional write)");
      } else if (status == 400) {
        s = Status::InvalidArgument(msg);
      } else {
        s = Status::IOError(msg, EIO);
      }
    }
    if (!retry || attempt >= config_.max_retries) return Fail(op, s);
    // Backoff: initial * 2^attempt, capped, with jitter in [50%, 100%]; never past the deadline.
    uint64_t backoff = std::min<uint64_t>(
        config_.backoff_max_ms, static_cast<uint64_t>(config_.backoff_initial_ms) << std::min(attempt, 20u));
    backoff = backoff / 2 + (backoff > 1 ? rng() % (backoff / 2 + 1) : 0);
    const auto wake = S3Clock::now() + std::chrono::milliseconds(backoff);
    if (wake >= deadline) {
      return Fail(op, Status::TimedOut(what + ": deadline of " + std::to_string(config_.deadline_ms) +
                                       " ms leaves no time for retry " + std::to_string(attempt + 1) +
                                       ", last: " + last_error));
    }
    spdlog::debug("{}: {} — retry {} in {} ms", what, last_error, attempt + 1, backoff);
    std::this_thread::sleep_until(wake);
  }
}

Status S3Client::Put(const std::string& key, std::string_view data, const S3PutOptions& opts) {
  if (data.size() >= config_.multipart_threshold) return PutMultipart(key, data, opts);
  Request req;
  req.method = "PUT";
  req.key = key;
  req.body = data;
  if (opts.if_none_match) req.headers.push_back("If-None-Match: *");
  Response resp;
  return Perform(S3Op::kPut, req, &resp);
}

Status S3Client::PutMultipart(const std::string& key, std::string_view data, const S3PutOptions& opts) {
  return Multipart(key, data.size(), opts, [data](uint64_t off, size_t n) -> Result<std::string_view> {
    return data.substr(off, n);
  });
}

Status S3Client::PutFile(const std::string& key, BackingFile* file, uint64_t size, const S3PutOptions& opts) {
  std::string buf;
  // Reads [off, off + n) of the file into buf (reused: one part in memory at a time).
  auto read = [&](uint64_t off, size_t n) -> Result<std::string_view> {
    buf.resize(n);
    size_t done = 0;
    while (done < n) {
      size_t got = 0;
      KVFS_RETURN_IF_ERROR(file->Read(off + done, n - done, buf.data() + done, &got));
      if (got == 0) {
        return Status::IOError("s3 upload of " + file->path() + ": file ends at " +
                               std::to_string(off + done) + ", before the " + std::to_string(size) +
                               " bytes to upload");
      }
      done += got;
    }
    return std::string_view(buf);
  };
  if (size >= config_.multipart_threshold) return Multipart(key, size, opts, read);
  auto whole = read(0, static_cast<size_t>(size));
  if (!whole.ok()) return whole.status();
  return Put(key, *whole, opts);
}

Status S3Client::Multipart(const std::string& key, uint64_t size, const S3PutOptions& opts,
                           const std::function<Result<std::string_view>(uint64_t, size_t)>& part_data) {
  const uint64_t part = config_.part_size;
  const uint64_t parts = std::max<uint64_t>(1, (size + part - 1) / part);
  if (parts > 10000)
    return Status::InvalidArgument("s3: object needs more than 10,000 parts; raise part_size");
  auto begun = BeginUpload(key);
  if (!begun.ok()) return begun.status();
  const std::string upload_id = *begun;
  Response resp;
  const std::string id_q = "uploadId=" + S3Encode(upload_id, false);
  auto abort = [&](Status s) {
    Request ab;
    ab.method = "DELETE";
    ab.key = key;
    ab.query = id_q;
    Response r;
    Status as = Perform(S3Op::kAbortMultipart, ab, &r);
    if (!as.ok() && !as.IsNotFound())
      spdlog::warn("s3: abort of the multipart upload of {} failed: {}", key, ErrnoText(as));
    return s;
  };
  std::string complete = "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">";
  for (uint64_t i = 0; i < parts; ++i) {
    const uint64_t off = i * part;
    Request up;
    up.method = "PUT";
    up.key = key;
    up.query = "partNumber=" + std::to_string(i + 1) + "&" + id_q;  // sorted: partNumber < uploadId
    auto body = part_data(off, static_cast<size_t>(std::min<uint64_t>(part, size - off)));
    if (!body.ok()) return abort(body.status());
    up.body = *body;
    Status s = Perform(S3Op::kUploadPart, up, &resp);
    if (!s.ok()) return abort(s);
    if (resp.etag.empty()) {
      return abort(Fail(S3Op::kUploadPart, Status::IOError("s3 PUT " + config_.bucket + "/" + key + " part " +
                                                           std::to_string(i + 1) + ": no ETag")));
    }
    tinyxml2::XMLDocument esc;  // XML-escape the ETag (it carries quotes) through tinyxml2's printer
    tinyxml2::XMLElement* e = esc.NewElement("ETag");
    e->SetText(resp.etag.c_str());
    esc.InsertEndChild(e);
    tinyxml2::XMLPrinter pr(nullptr, /*compact=*/true);
    esc.Print(&pr);
    complete += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber>" + pr.CStr() + "</Part>";
  }
  complete += "</CompleteMultipartUpload>";
  Request done;
  done.method = "POST";
  done.key = key;
  done.query = id_q;
  done.body = complete;
  done.headers.push_back("Content-Type: application/xml");
  if (opts.if_none_match) done.headers.push_back("If-None-Match: *");
  Status s = Perform(S3Op::kCompleteMultipart, done, &resp);
  if (!s.ok()) return abort(s);
  // CompleteMultipartUpload may answer 200 with an <Error> body.
  tinyxml2::XMLDocument doc;
  if (doc.Parse(resp.body.data(), resp.body.size()) == tinyxml2::XML_SUCCESS && doc.RootElement() &&
      std::string_view(doc.RootElement()->Name()) == "Error") {
    return abort(Fail(S3Op::kCompleteMultipart,
                      Status::IOError("s3 POST " + config_.bucket + "/" + key +
                                      "?uploadId: " + S3ElementText(doc.RootElement(), "Code") + " " +
                                      S3ElementText(doc.RootElement(), "Message"))));
  }
  return Status::OK();
}

Status S3Client::GetRange(const std::string& key, uint64_t offset, size_t n, char* buf, size_t* got,
                          const TimePoint& deadline, const std::atomic<bool>* cancel) {
  *got = 0;
  Request req;
  req.key = key;
  req.buf = buf;
  req.cap = n;
  req.ranged = true;
  req.range_offset = offset;
  req.cancel = cancel;
  req.headers.push_back("Range: bytes=" + std::to_string(offset) + "-" + std::to_string(offset + n - 1));
  Response resp;
  KVFS_RETURN_IF_ERROR(Perform(S3Op::kGet, req, &resp, &deadline));
  *got = resp.got;
  return Status::OK();
}

// The helper threads of split reads: exactly as many threads as slots (S3Config::read_parallel), and a
// part is queued only with a slot taken, so a queued part always has an idle thread: it never waits
// behind another read's GET.
class S3Client::ReadHelpers {
 public:
  explicit ReadHelpers(uint32_t n) : free_(n) {
    for (uint32_t i = 0; i < n; ++i) threads_.emplace_back([this] { Loop(); });
  }
  ~ReadHelpers() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  // Takes up to want slots (never waits); returns how many.
  uint32_t TrySlots(uint32_t want) {
    std::lock_guard<std::mutex> l(mu_);
    const uint32_t got = std::min(want, free_);
    free_ -= got;
    return got;
  }
  // Runs fn on a helper thread; one slot taken by TrySlots is given back when fn returns.
  void Run(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> l(mu_);
      queue_.push_back(std::move(fn));
    }
    cv_.notify_one();
  }

 private:
  void Loop() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        fn = std::move(queue_.front());
        queue_.pop_front();
      }
      fn();
      std::lock_guard<std::mutex> l(mu_);
      free_++;
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  uint32_t free_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

S3Client::~S3Client() = default;  // helpers_ first (joins its threads), then the handle pool

Status S3Client::Get(const std::string& key, uint64_t offset, size_t n, void* buf, size_t* got,
                     uint64_t object_size) {
  *got = 0;
  if (n == 0) return Status::OK();
  const TimePoint deadline = CallDeadline();
  char* out = static_cast<char*>(buf);
  // The bytes to split: the range, clipped to the object's known end (a part wholly past it would be a
  // request for nothing: 416).
  const uint64_t span = offset + n <= object_size ? n : (object_size > offset ? object_size - offset : 0);
  constexpr uint64_t kBlock = 64 << 10;
  uint64_t parts = config_.read_parts > 1 && config_.read_part_min > 0 && config_.read_parallel > 0 &&
                           span >= config_.read_split_min
                       ? std::min<uint64_t>(config_.read_parts, span / config_.read_part_min)
                       : 1;
  if (parts <= 1) return GetRange(key, offset, n, out, got, deadline, nullptr);
  const uint64_t part_len = ((span + parts - 1) / parts + kBlock - 1) & ~(kBlock - 1);
  parts = (span + part_len - 1) / part_len;
  if (parts <= 1) return GetRange(key, offset, n, out, got, deadline, nullptr);

  struct Part {
    uint64_t off = 0;  // relative to offset
    size_t len = 0;
    size_t got = 0;
    Status status;
  };
  struct Shared {
    std::vector<Part> parts;
    std::atomic<bool> cancel{false};
    std::mutex mu;
    std::condition_variable cv;
    uint32_t pending = 0;  // parts on helper threads not finished
  };
  auto sh = std::make_shared<Shared>();
  sh->parts.resize(parts);
  for (uint64_t i = 0; i < parts; ++i) {
    sh->parts[i].off = i * part_len;
    // The last part runs to the end of the asked range (past the object's known end, if the range does).
    sh->parts[i].len = static_cast<size_t>(i + 1 < parts ? part_len : n - i * part_len);
  }
  counters_.split_reads++;
  counters_.read_parts += parts;
  std::call_once(helpers_once_, [&] { helpers_ = std::make_unique<ReadHelpers>(config_.read_parallel); });
  const uint32_t helped = helpers_->TrySlots(static_cast<uint32_t>(parts - 1));
  counters_.read_parts_parallel += helped;
  auto fetch = [this, key, offset, out, deadline](Shared* s, size_t i) {
    Part& p = s->parts[i];
    p.status = GetRange(key, offset + p.off, p.len, out + p.off, &p.got, deadline, &s->cancel);
    if (!p.status.ok()) s->cancel = true;
  };
  // Parts 1..helped on helpers; the caller fetches part 0, then the parts no helper was free for.
  sh->pending = helped;
  for (uint32_t i = 1; i <= helped; ++i) {
    helpers_->Run([sh, i, fetch] {
      fetch(sh.get(), i);
      std::lock_guard<std::mutex> l(sh->mu);
      if (--sh->pending == 0) sh->cv.notify_all();
    });
  }
  fetch(sh.get(), 0);
  for (uint64_t i = helped + 1; i < parts && !sh->cancel; ++i) fetch(sh.get(), i);
  {
    // The helpers write into buf: wait for every one (each ends by the shared deadline).
    std::unique_lock<std::mutex> l(sh->mu);
    sh->cv.wait(l, [&] { return sh->pending == 0; });
  }
  // The first real failure (a cancelled part's status only says another part failed).
  const Status* failed = nullptr;
  for (const Part& p : sh->parts) {
    if (p.status.ok()) continue;
    if (!failed || (failed->ToErrno() == ECANCELED && p.status.ToErrno() != ECANCELED)) failed = &p.status;
  }
  if (failed) return *failed;
  // The bytes up to the first short part (the end of the object).
  size_t total = 0;
  for (const Part& p : sh->parts) {
    total += p.got;
    if (p.got < p.len) break;
  }
  *got = total;
  return Status::OK();
}

Result<std::string> S3Client::GetAll(const std::string& key) {
  std::string out;
  Request req;
  req.key = key;
  req.out = &out;
  Response resp;
  KVFS_RETURN_IF_ERROR(Perform(S3Op::kGet, req, &resp));
  return out;
}

Result<S3ObjectInfo> S3Client::Head(const std::string& key) {
  Request req;
  req.method = "HEAD";
  req.key = key;
  Response resp;
  KVFS_RETURN_IF_ERROR(Perform(S3Op::kHead, req, &resp));
  S3ObjectInfo info;
  info.key = key;
  info.size = resp.content_length;
  info.etag = resp.etag;
  return info;
}

Status S3Client::Delete(const std::string& key) {
  Request req;
  req.method = "DELETE";
  req.key = key;
  Response resp;
  return Perform(S3Op::kDelete, req, &resp);
}

Result<S3ListPage> S3Client::List(const std::string& prefix, const std::string& start_after,
                                  uint32_t max_keys) {
  max_keys = std::clamp<uint32_t>(max_keys, 1, 1000);
  Request req;
  req.key = "";
  // Parameters in sorted order (the canonical query SigV4 signs).
  req.query = "list-type=2&max-keys=" + std::to_string(max_keys);
  if (!prefix.empty()) req.query += "&prefix=" + S3Encode(prefix, false);
  if (!start_after.empty()) req.query += "&start-after=" + S3Encode(start_after, false);
  Response resp;
  KVFS_RETURN_IF_ERROR(Perform(S3Op::kList, req, &resp));
  S3ListPage page;
  if (!ParseListPage(resp.body, &page)) {
    return Fail(S3Op::kList, Status::IOError("s3 GET " + config_.bucket +
                                             "?list-type=2: the answer is not a ListBucketResult"));
  }
  return page;
}

Result<S3ListPage> S3Client::ListDelimited(const std::string& prefix, const std::string& continuation_token,
                                           uint32_t max_keys) {
  max_keys = std::clamp<uint32_t>(max_keys, 1, 1000);
  Request req;
  req.key = "";
  // Parameters in sorted order (the canonical query SigV4 signs).
  if (!continuation_token.empty()) req.query = "continuation-token=" + S3Encode(continuation_token, false) + "&";
  req.query += "delimiter=%2F&list-type=2&max-keys=" + std::to_string(max_keys);
  if (!prefix.empty()) req.query += "&prefix=" + S3Encode(prefix, false);
  Response resp;
  KVFS_RETURN_IF_ERROR(Perform(S3Op::kList, req, &resp));
  S3ListPage page;
  if (!ParseListPage(resp.body, &page)) {
    return Fail(S3Op::kList, Status::IOError("s3 GET " + config_.bucket +
                                             "?delimiter=/&list-type=2: the answer is not a ListBucketResult"));
  }
  if (page.truncated && page.next_token.empty()) {
    return Fail(S3Op::kList, Status::IOError("s3 list " + config_.bucket + "/" + prefix +
                                             ": truncated page without NextContinuationToken"));
  }
  return page;
}

Result<std::string> S3Client::BeginUpload(const std::string& key) {
  Response resp;
  Request init;
  init.method = "POST";
  init.key = key;
  init.query = "uploads=";
  KVFS_RETURN_IF_ERROR(Perform(S3Op::kCreateMultipart, init, &resp));
  std::string upload_id;
  {
    tinyxml2::XMLDocument doc;
    if (doc.Parse(resp.body.data(), resp.body.size()) == tinyxml2::XML_SUCCESS && doc.RootElement()) {
      upload_id = S3ElementText(doc.RootElement(), "UploadId");
    }
  }
  if (upload_id.empty()) {
    return Fail(S3Op::kCreateMultipart, Status::IOError("s3 POST " + config_.bucket + "/" + key +
                                                        "?uploads: no UploadId in the answer"));
  }
  return upload_id;
}

Result<std::vector<S3Client::Upload>> S3Client::ListUploads(const std::string& prefix) {
  Request req;
  req.key = "";
  // Parameters in sorted order (the canonical query SigV4 signs); valueless ones written "uploads=".
  req.query = (prefix.empty() ? std::string() : "prefix=" + S3Encode(prefix, false) + "&") + "uploads=";
  Response resp;
  KVFS_RETURN_IF_ERROR(Perform(S3Op::kList, req, &resp));
  tinyxml2::XMLDocument doc;
  const tinyxml2::XMLElement* root = nullptr;
  if (doc.Parse(resp.body.data(), resp.body.size()) == tinyxml2::XML_SUCCESS) root = doc.RootElement();
  if (!root || std::string_view(root->Name()) != "ListMultipartUploadsResult") {
    return Fail(S3Op::kList, Status::IOError("s3 GET " + config_.bucket +
                                             "?uploads: the answer is not a ListMultipartUploadsResult"));
  }
  std::vector<Upload> out;
  for (const tinyxml2::XMLElement* u = root->FirstChildElement("Upload"); u; u = u->NextSiblingElement("Upload")) {
    out.push_back(Upload{S3ElementText(u, "Key"), S3ElementText(u, "UploadId")});
  }
  return out;
}

Status S3Client::AbortUpload(const std::string& key, const std::string& upload_id) {
  Request req;
  req.method = "DELETE";
  req.key = key;
  req.query = "uploadId=" + S3Encode(upload_id, false);
  Response resp;
  Status s = Perform(S3Op::kAbortMultipart, req, &resp);
  return s.IsNotFound() ? Status::OK() : s;
}

Status S3Client::CreateBucket() {
  Request req;
  req.method = "PUT";
  req.key = "";
  std::string body;
  if (config_.region != "us-east-1") {
    body =
        "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><LocationConstraint>" +
        config_.region + "</LocationConstraint></CreateBucketConfiguration>";
  }
  req.body = body;
  Response resp;
  Status s = Perform(S3Op::kCreateBucket, req, &resp);
  if (!s.ok() && resp.s3_code == "BucketAlreadyOwnedByYou") return Status::OK();
  return s;
}

}  // namespace kvfs
