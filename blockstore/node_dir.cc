#include "blockstore/node_dir.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <random>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>

#include "blockstore/log.h"

namespace kvfs {

namespace {

constexpr int kIdDigits = 20;

std::string Join(std::string_view a, std::string_view b) {
  std::string s(a);
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  s.push_back('/');
  s.append(b);
  return s;
}

std::string Pad20(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%020" PRIu64, v);
  return buf;
}

// Parses exactly 20 decimal digits.
bool ParseId(std::string_view s, uint64_t* v) {
  if (s.size() != kIdDigits) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// "<prefix><gen20>-<n20><suffix>"
bool ParseTwoIds(std::string_view name, std::string_view prefix, std::string_view suffix, uint64_t* a,
                 uint64_t* b) {
  if (name.size() != prefix.size() + 2 * kIdDigits + 1 + suffix.size()) return false;
  if (name.substr(0, prefix.size()) != prefix) return false;
  if (name.substr(name.size() - suffix.size()) != suffix) return false;
  name.remove_prefix(prefix.size());
  if (name[kIdDigits] != '-') return false;
  uint64_t x, y;
  if (!ParseId(name.substr(0, kIdDigits), &x) || !ParseId(name.substr(kIdDigits + 1, kIdDigits), &y))
    return false;
  *a = x;
  *b = y;
  return true;
}

// Lenient form for the generation scan: "<prefix><digits>-<digits><suffix>" with 1..20 digits each, so
// that files named by any past or future zero-padding width still raise the generation (over-counting
// is harmless, missing one could reuse a generation).
bool ParseGenerationLenient(std::string_view name, std::string_view prefix, std::string_view suffix,
                            uint64_t* gen) {
  if (name.size() < prefix.size() + suffix.size() + 3) return false;
  if (name.substr(0, prefix.size()) != prefix || name.substr(name.size() - suffix.size()) != suffix)
    return false;
  name = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  auto dash = name.find('-');
  if (dash == std::string_view::npos || dash == 0 || dash > kIdDigits) return false;
  std::string_view rest = name.substr(dash + 1);
  if (rest.empty() || rest.size() > kIdDigits) return false;
  for (char c : rest) {
    if (c < '0' || c > '9') return false;
  }
  auto r = std::from_chars(name.data(), name.data() + dash, *gen);
  return r.ec == std::errc() && r.ptr == name.data() + dash;
}

// key=value lines -> map. Lines without '=' are ignored (e.g. the "kvfs-format" magic line).
std::map<std::string, std::string> ParseKv(std::string_view text) {
  std::map<std::string, std::string> kv;
  while (!text.empty()) {
    auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    auto eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    kv[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
  }
  return kv;
}

template <class T>
bool ParseNum(const std::map<std::string, std::string>& kv, const char* key, T* out) {
  auto it = kv.find(key);
  if (it == kv.end()) return false;
  const std::string& s = it->second;
  auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

std::string ReadLocalFile(const char* path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Field 22 of /proc/<pid>/stat (start time in clock ticks after boot), 0 if unreadable.
uint64_t ProcStartTime(int64_t pid) {
  std::string s = ReadLocalFile(("/proc/" + std::to_string(pid) + "/stat").c_str());
  auto rp = s.rfind(')');
  if (rp == std::string::npos) return 0;
  std::istringstream in(s.substr(rp + 1));
  std::string field;
  // After "pid (comm)" come fields 3..; field 22 is the 20th of them.
  for (int i = 3; i <= 22; ++i) {
    if (!(in >> field)) return 0;
  }
  uint64_t v = 0;
  auto r = std::from_chars(field.data(), field.data() + field.size(), v);
  return r.ec == std::errc() ? v : 0;
}

bool IsPermissionError(const Status& s) {
  int e = s.ToErrno();
  return e == EROFS || e == EACCES || e == EPERM;
}

Status NotWritable(const std::string& backing, const Status& s) {
  return Status::IOError("backing directory " + backing + " is not writable: " + s.ToString(), s.ToErrno());
}

std::string FormatAge(int64_t age_ns) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.1f s", static_cast<double>(age_ns) / 1e9);
  return buf;
}

}  // namespace

// ---- Layout ----------------------------------------------------------------------------------------

std::string KvfsRootPath(std::string_view backing) { return Join(Join(backing, ".kvfs"), "v1"); }
std::string FormatFilePath(std::string_view backing) { return Join(KvfsRootPath(backing), "FORMAT"); }
std::string NodesDirPath(std::string_view backing) { return Join(KvfsRootPath(backing), "nodes"); }
std::string LinkClaimsDirPath(std::string_view backing) { return Join(KvfsRootPath(backing), "links"); }
std::string NodeDirPath(std::string_view backing, std::string_view node) {
  return Join(NodesDirPath(backing), node);
}
std::string OwnerFilePath(std::string_view backing, std::string_view node) {
  return Join(NodeDirPath(backing, node), "OWNER");
}
std::string HeartbeatFilePath(std::string_view backing, std::string_view node) {
  return Join(NodeDirPath(backing, node), "HEARTBEAT");
}
std::string PeersFilePath(std::string_view backing, std::string_view node) {
  return Join(NodeDirPath(backing, node), "peers");
}
std::string SegmentDirPath(std::string_view backing, std::string_view node) {
  return Join(NodeDirPath(backing, node), "seg");
}
std::string HoldsDirPath(std::string_view backing, std::string_view holder) {
  return Join(NodeDirPath(backing, holder), "holds");
}
std::string HoldDirPath(std::string_view backing, std::string_view holder, std::string_view owner) {
  return Join(HoldsDirPath(backing, holder), owner);
}

std::string SegmentFileName(uint64_t generation, uint64_t seq) {
  return Pad20(generation) + "-" + Pad20(seq) + ".kseg";
}
std::string JournalFileName(uint64_t generation, uint64_t n) {
  return "journal-" + Pad20(generation) + "-" + Pad20(n);
}
std::string SnapshotFileName(uint64_t generation, uint64_t n) {
  return "snapshot-" + Pad20(generation) + "-" + Pad20(n);
}
std::string SegmentFilePath(std::string_view backing, const SegmentId& id) {
  return Join(SegmentDirPath(backing, id.node), SegmentFileName(id.generation, id.seq));
}
std::string JournalFilePath(std::string_view backing, std::string_view node, uint64_t generation,
                            uint64_t n) {
  return Join(NodeDirPath(backing, node), JournalFileName(generation, n));
}
std::string SnapshotFilePath(std::string_view backing, std::string_view node, uint64_t generation,
                             uint64_t n) {
  return Join(NodeDirPath(backing, node), SnapshotFileName(generation, n));
}

bool ParseSegmentFileName(std::string_view name, uint64_t* generation, uint64_t* seq) {
  return ParseTwoIds(name, "", ".kseg", generation, seq);
}
bool ParseJournalFileName(std::string_view name, uint64_t* generation, uint64_t* n) {
  return ParseTwoIds(name, "journal-", "", generation, n);
}
bool ParseSnapshotFileName(std::string_view name, uint64_t* generation, uint64_t* n) {
  return ParseTwoIds(name, "snapshot-", "", generation, n);
}

Status ValidateNodeId(std::string_view node) {
  if (node.empty() || node.size() > 128 || node == "." || node == "..") {
    return Status::InvalidArgument("invalid node id '" + std::string(node) + "' (1..128 of [A-Za-z0-9._-])");
  }
  for (char c : node) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '_' || c == '-';
    if (!ok) {
      return Status::InvalidArgument("invalid node id '" + std::string(node) +
                                     "' (only [A-Za-z0-9._-] allowed)");
    }
  }
  return Status::OK();
}

// ---- FORMAT ----------------------------------------------------------------------------------------

std::string FormatInfo::Serialize() const {
  return "kvfs-format\nversion=" + std::to_string(version) + "\nalignment=" + std::to_string(alignment) +
         "\n" + (id.empty() ? "" : "id=" + id + "\n");
}

Result<FormatInfo> FormatInfo::Parse(std::string_view text) {
  if (text.substr(0, 12) != "kvfs-format\n") return Status::Corruption("FORMAT: missing 'kvfs-format' magic");
  auto kv = ParseKv(text);
  FormatInfo f;
  if (!ParseNum(kv, "version", &f.version)) return Status::Corruption("FORMAT: missing or bad version");
  if (!ParseNum(kv, "alignment", &f.alignment)) return Status::Corruption("FORMAT: missing or bad alignment");
  if (auto it = kv.find("id"); it != kv.end()) f.id = it->second;
  return f;
}

Status CheckBackingDir(Env* env, const std::string& backing) {
  if (backing.empty() || backing[0] != '/') {
    return Status::InvalidArgument("backing directory must be an absolute path, got '" + backing + "'");
  }
  auto st = env->Stat(backing);
  if (!st.ok()) {
    if (st.status().IsNotFound() || st.status().ToErrno() == ENOTDIR) {
      return Status::InvalidArgument("backing directory " + backing + " does not exist");
    }
    return Status::IOError("backing directory " + backing + ": " + st.status().ToString(),
                           st.status().ToErrno());
  }
  if (!st->is_dir) return Status::InvalidArgument("backing path " + backing + " is not a directory");
  return Status::OK();
}

Result<FormatInfo> EnsureFormat(Env* env, const std::string& backing) {
  KVFS_RETURN_IF_ERROR(CheckBackingDir(env, backing));
  const std::string root = KvfsRootPath(backing);
  const std::string path = FormatFilePath(backing);
  Status s = env->CreateDirs(root);
  if (!s.ok()) return IsPermissionError(s) ? NotWritable(backing, s) : s;
  FormatInfo mine;
  {
    std::random_device rd;  // getrandom(2)
    char hex[33];
    std::snprintf(hex, sizeof(hex), "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
    mine.id = hex;
  }
  {
    OpenOptions o;
    o.write = o.create = o.exclusive = true;
    auto f = env->Open(path, o);
    if (f.ok()) {
      const std::string text = mine.Serialize();
      Status w = (*f)->Write(0, text.data(), text.size());
      if (w.ok()) w = (*f)->Sync();
      if (w.ok()) w = env->SyncDir(root);
      if (!w.ok()) return IsPermissionError(w) ? NotWritable(backing, w) : w;
      spdlog::info("kvfs: created {} (format v{}, alignment {})", path, mine.version, mine.alignment);
      return mine;
    }
    if (!f.status().IsExists()) {
      return IsPermissionError(f.status()) ? NotWritable(backing, f.status()) : f.status();
    }
  }
  std::string text;
  KVFS_RETURN_IF_ERROR(env->ReadFileToString(path, &text));
  if (text.empty()) {
    // A creator crashed between the O_EXCL create and its write (or is writing right now): every kvfs
    // of this version writes the same bytes, so writing them again (atomically) is safe.
    spdlog::warn("kvfs: {} is empty; rewriting it", path);
    Status w = env->WriteFileAtomic(path, mine.Serialize());
    if (!w.ok()) return IsPermissionError(w) ? NotWritable(backing, w) : w;
    return mine;
  }
  auto parsed = FormatInfo::Parse(text);
  if (!parsed.ok()) return Status::Corruption(path + ": " + parsed.status().message());
  if (parsed->version > kFormatVersion) {
    return Status::InvalidArgument("backing store format v" + std::to_string(parsed->version) +
                                   " is newer than this kvfs (v" + std::to_string(kFormatVersion) +
                                   "): " + path);
  }
  if (parsed->version == 0) return Status::Corruption(path + ": format version 0");
  if (parsed->alignment != kAlignment) {
    return Status::InvalidArgument(path + ": alignment " + std::to_string(parsed->alignment) +
                                   " is not supported (this kvfs uses " + std::to_string(kAlignment) + ")");
  }
  return *parsed;
}

Result<std::vector<std::string>> ListNodes(Env* env, const std::string& backing,
                                           const std::vector<std::string>* known) {
  const std::string nodes = NodesDirPath(backing);
  std::vector<std::string> names, out;
  Status s = env->GetChildren(nodes, &names);
  if (s.IsNotFound()) return out;
  if (!s.ok()) return s;
  for (auto& n : names) {
    if (!ValidateNodeId(n).ok()) continue;
    if (known && std::find(known->begin(), known->end(), n) != known->end()) {
      out.push_back(std::move(n));
      continue;
    }
    auto st = env->Stat(Join(nodes, n));
    if (st.ok() && st->is_dir) out.push_back(std::move(n));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// ---- Records ---------------------------------------------------------------------------------------

HostIdentity HostIdentity::Current() {
  HostIdentity id;
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) == 0) id.host = host;
  id.boot_id = Trim(ReadLocalFile("/proc/sys/kernel/random/boot_id"));
  id.pid = ::getpid();
  id.pid_start = ProcStartTime(id.pid);
  return id;
}

std::string OwnerRecord::Serialize() const {
  return "host=" + owner.host + "\nboot_id=" + owner.boot_id + "\npid=" + std::to_string(owner.pid) +
         "\npid_start=" + std::to_string(owner.pid_start) + "\ngeneration=" + std::to_string(generation) +
         "\nacquired_ns=" + std::to_string(acquired_ns) + "\nstate=" + (released ? "released" : "active") +
         "\n";
}

Result<OwnerRecord> OwnerRecord::Parse(std::string_view text) {
  auto kv = ParseKv(text);
  OwnerRecord r;
  if (!kv.count("host") || !kv.count("boot_id") || !ParseNum(kv, "pid", &r.owner.pid) ||
      !ParseNum(kv, "generation", &r.generation)) {
    return Status::Corruption("OWNER: missing host, boot_id, pid or generation");
  }
  r.owner.host = kv["host"];
  r.owner.boot_id = kv["boot_id"];
  ParseNum(kv, "pid_start", &r.owner.pid_start);
  ParseNum(kv, "acquired_ns", &r.acquired_ns);
  r.released = kv["state"] == "released";
  return r;
}

std::string HeartbeatRecord::Serialize() const {
  std::string t = "time_ns=" + std::to_string(time_ns) + "\nhost=" + host + "\npid=" + std::to_string(pid) +
                  "\ngeneration=" + std::to_string(generation) + "\npad=";
  const size_t total = (t.size() + 1 + kHeartbeatBytes - 1) / kHeartbeatBytes * kHeartbeatBytes;
  t.append(total - t.size() - 1, 'x');
  t.push_back('\n');
  return t;
}

Result<HeartbeatRecord> HeartbeatRecord::Parse(std::string_view text) {
  auto kv = ParseKv(text);
  HeartbeatRecord r;
  if (!ParseNum(kv, "time_ns", &r.time_ns)) return Status::Corruption("HEARTBEAT: missing time_ns");
  r.host = kv["host"];
  ParseNum(kv, "pid", &r.pid);
  ParseNum(kv, "generation", &r.generation);
  return r;
}

bool LocalProcessAlive(const HostIdentity& id) {
  if (id.pid <= 0) return false;
  struct stat st;
  if (::stat(("/proc/" + std::to_string(id.pid)).c_str(), &st) != 0) return false;
  // A zombie (Z) or dying (X) process has exited and released everything (its flocks, its FUSE
  // session); only its parent has not reaped it yet (e.g. right after SIGKILL). It is dead.
  {
    std::string s = ReadLocalFile(("/proc/" + std::to_string(id.pid) + "/stat").c_str());
    auto rp = s.rfind(')');
    if (rp == std::string::npos) return false;  // gone between the stat and the read
    if (rp + 2 < s.size() && (s[rp + 2] == 'Z' || s[rp + 2] == 'X' || s[rp + 2] == 'x')) return false;
  }
  if (id.pid_start != 0) {
    uint64_t now_start = ProcStartTime(id.pid);
    if (now_start != 0 && now_start != id.pid_start) return false;  // pid reused by another process
  }
  return true;
}

int64_t WallClockNs() {
  timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// ---- Heartbeat -------------------------------------------------------------------------------------

Heartbeat::Heartbeat(std::function<Status()> beat, std::chrono::milliseconds interval)
    : beat_(std::move(beat)), interval_(interval) {}

Heartbeat::~Heartbeat() { Stop(); }

void Heartbeat::Start() {
  std::lock_guard<std::mutex> l(mu_);
  if (started_) return;
  started_ = true;
  stop_ = false;
  thread_ = std::thread([this] { Run(); });
}

void Heartbeat::Stop() {
  std::thread t;
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    cv_.notify_all();
    t = std::move(thread_);
  }
  if (t.joinable()) t.join();
}

Status Heartbeat::last_status() const {
  std::lock_guard<std::mutex> l(mu_);
  return last_;
}

void Heartbeat::Run() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    if (cv_.wait_for(l, interval_, [this] { return stop_; })) break;
    l.unlock();
    Status s = beat_();
    beats_.fetch_add(1);
    if (!s.ok()) {
      failures_.fetch_add(1);
      LogLimited(spdlog::level::warn, LogKey("heartbeat", s), "kvfs: heartbeat failed: {}", ErrnoText(s));
    }
    l.lock();
    last_ = s;
  }
}

// ---- NodeDir ---------------------------------------------------------------------------------------

Result<std::unique_ptr<NodeDir>> NodeDir::Acquire(NodeDirOptions opts) {
  Env* env = opts.env ? opts.env : Env::Posix();
  KVFS_RETURN_IF_ERROR(ValidateNodeId(opts.node_id));
  while (opts.backing_dir.size() > 1 && opts.backing_dir.back() == '/') opts.backing_dir.pop_back();
  auto fmt = EnsureFormat(env, opts.backing_dir);
  if (!fmt.ok()) return fmt.status();

  const std::string& backing = opts.backing_dir;
  const std::string dir = NodeDirPath(backing, opts.node_id);
  Status s = env->CreateDirs(SegmentDirPath(backing, opts.node_id));
  if (!s.ok()) return IsPermissionError(s) ? NotWritable(backing, s) : s;

  const HostIdentity self = opts.self ? *opts.self : HostIdentity::Current();
  auto alive = opts.process_alive ? opts.process_alive : LocalProcessAlive;

  // Previous owner and heartbeat.
  std::optional<OwnerRecord> prev;
  bool owner_unreadable = false;
  {
    std::string text;
    Status r = env->ReadFileToString(OwnerFilePath(backing, opts.node_id), &text);
    if (r.ok()) {
      auto p = OwnerRecord::Parse(text);
      if (p.ok()) {
        prev = *p;
      } else {
        owner_unreadable = true;
      }
    } else if (!r.IsNotFound()) {
      return r;
    }
  }
  std::optional<int64_t> hb_age_ns;  // nullopt = missing/unreadable HEARTBEAT
  {
    std::string text;
    if (env->ReadFileToString(HeartbeatFilePath(backing, opts.node_id), &text).ok()) {
      auto hb = HeartbeatRecord::Parse(text);
      if (hb.ok()) hb_age_ns = WallClockNs() - hb->time_ns;
    }
  }

  // The takeover rule.
  std::string reason;
  const int64_t timeout_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(opts.heartbeat_timeout).count();
  const bool hb_stale = !hb_age_ns || *hb_age_ns > timeout_ns;
  const std::string hb_desc =
      hb_age_ns ? "heartbeat " + FormatAge(*hb_age_ns) + " old" : "no readable heartbeat";
  if (!prev && !owner_unreadable) {
    reason = "fresh";
  } else if (prev && prev->released) {
    reason = "released";
  } else if (prev && prev->owner.host == self.host && prev->owner.boot_id == self.boot_id &&
             !alive(prev->owner)) {
    reason = "owner pid " + std::to_string(prev->owner.pid) + " gone";
  } else if (opts.refuse_running_local_owner && prev && prev->owner.host == self.host &&
             prev->owner.boot_id == self.boot_id) {
    // Alive (checked just above): a running mount, whatever its heartbeat says.
    return Status::Busy("node directory " + dir + " is owned by host=" + prev->owner.host + " pid=" +
                        std::to_string(prev->owner.pid) + " generation=" + std::to_string(prev->generation) +
                        ", a process running on this host (" + hb_desc + "); the owner looks alive");
  } else if (hb_stale) {
    reason = hb_desc;
  } else if (opts.force) {
    reason = "force";
  } else {
    std::string who = prev ? "host=" + prev->owner.host + " pid=" + std::to_string(prev->owner.pid) +
                                 " generation=" + std::to_string(prev->generation)
                           : "an owner with an unreadable OWNER file";
    return Status::Busy("node directory " + dir + " is owned by " + who + ", " + hb_desc + " (timeout " +
                        FormatAge(timeout_ns) + "); the owner looks alive");
  }

  // New generation: above everything this node directory has ever used.
  uint64_t max_gen = prev ? prev->generation : 0;
  {
    std::vector<std::string> names;
    KVFS_RETURN_IF_ERROR(env->GetChildren(dir, &names));
    for (const auto& n : names) {
      uint64_t g;
      if (ParseGenerationLenient(n, "journal-", "", &g) || ParseGenerationLenient(n, "snapshot-", "", &g) ||
          ParseGenerationLenient(n, "claim-", "", &g)) {
        max_gen = std::max(max_gen, g);
      }
    }
    names.clear();
    KVFS_RETURN_IF_ERROR(env->GetChildren(SegmentDirPath(backing, opts.node_id), &names));
    for (const auto& n : names) {
      uint64_t g;
      if (ParseGenerationLenient(n, "", ".kseg", &g)) max_gen = std::max(max_gen, g);
    }
  }

  std::unique_ptr<NodeDir> nd(new NodeDir());
  nd->format_id_ = fmt->id;
  nd->env_ = env;
  nd->backing_ = backing;
  nd->node_ = opts.node_id;
  nd->dir_ = dir;
  nd->generation_ = max_gen + 1;
  nd->reason_ = reason;
  nd->previous_ = prev;
  nd->self_record_.owner = self;
  nd->self_record_.generation = nd->generation_;
  nd->self_record_.acquired_ns = WallClockNs();

  if (opts.claim) {
    s = opts.claim(dir, nd->generation_, nd->self_record_.Serialize());
    if (s.IsExists()) {
      return Status::Busy("node directory " + dir + ": generation " + std::to_string(nd->generation_) +
                          " was claimed by another mount taking it over at the same time (" + s.message() + ")");
    }
    KVFS_RETURN_IF_ERROR(s);
  }
  // HEARTBEAT first, so an OWNER never exists without a fresh heartbeat; then OWNER.
  s = nd->WriteHeartbeat();
  if (s.ok()) s = env->WriteFileAtomic(OwnerFilePath(backing, opts.node_id), nd->self_record_.Serialize());
  if (!s.ok()) return IsPermissionError(s) ? NotWritable(backing, s) : s;
  // Read back: a concurrent takeover by another mount may have replaced OWNER after us.
  KVFS_RETURN_IF_ERROR(nd->CheckOwnership());
  spdlog::info("kvfs: took over node directory {} as generation {} ({})", dir, nd->generation_, reason);
  return nd;
}

NodeDir::~NodeDir() { StopHeartbeat(); }

std::string NodeDir::seg_dir() const { return SegmentDirPath(backing_, node_); }
std::string NodeDir::SegmentPath(uint64_t seq) const {
  return SegmentFilePath(backing_, SegmentId{node_, generation_, seq});
}
std::string NodeDir::JournalPath(uint64_t n) const {
  return JournalFilePath(backing_, node_, generation_, n);
}
std::string NodeDir::SnapshotPath(uint64_t n) const {
  return SnapshotFilePath(backing_, node_, generation_, n);
}

Status NodeDir::WriteHeartbeat() {
  HeartbeatRecord hb;
  hb.time_ns = WallClockNs();
  hb.host = self_record_.owner.host;
  hb.pid = self_record_.owner.pid;
  hb.generation = generation_;
  std::lock_guard<std::mutex> l(mu_);
  if (lost_.load()) return Status::Busy("node directory " + dir_ + " was taken over by another mount");
  return env_->WriteFileAtomic(HeartbeatFilePath(backing_, node_), hb.Serialize());
}

Status NodeDir::Beat() {
  if (lost_.load()) return Status::Busy("node directory " + dir_ + " was taken over by another mount");
  const std::string owner_path = OwnerFilePath(backing_, node_);
  auto st = env_->Stat(owner_path);
  bool recheck = !st.ok();
  {
    std::lock_guard<std::mutex> l(mu_);
    if (st.ok() && (!owner_seen_ || owner_seen_->size != st->size || owner_seen_->mtime_ns != st->mtime_ns)) {
      recheck = true;
    }
  }
  if (recheck) {
    KVFS_RETURN_IF_ERROR(CheckOwnership());  // Busy on a takeover (sets lost_)
    std::lock_guard<std::mutex> l(mu_);
    if (st.ok()) owner_seen_ = *st;
  }
  HeartbeatRecord hb;
  hb.time_ns = WallClockNs();
  hb.host = self_record_.owner.host;
  hb.pid = self_record_.owner.pid;
  hb.generation = generation_;
  const std::string text = hb.Serialize();
  std::lock_guard<std::mutex> l(mu_);
  if (lost_.load()) return Status::Busy("node directory " + dir_ + " was taken over by another mount");
  const std::string path = HeartbeatFilePath(backing_, node_);
  if (!hb_file_) {
    OpenOptions o;
    o.write = true;
    auto f = env_->Open(path, o);
    if (f.status().IsNotFound()) return env_->WriteFileAtomic(path, text);  // re-created next beat's way
    if (!f.ok()) return f.status();
    hb_file_ = std::move(*f);
  }
  Status s = hb_file_->Write(0, text.data(), text.size());
  if (s.ok()) s = hb_file_->Sync();
  if (!s.ok()) hb_file_.reset();  // re-open (after the ownership check) at the next beat
  return s;
}

Status NodeDir::CheckOwnership() {
  std::string text;
  KVFS_RETURN_IF_ERROR(env_->ReadFileToString(OwnerFilePath(backing_, node_), &text));
  auto cur = OwnerRecord::Parse(text);
  if (!cur.ok()) return cur.status();
  const auto& o = cur->owner;
  if (cur->generation != generation_ || o.host != self_record_.owner.host ||
      o.pid != self_record_.owner.pid || o.boot_id != self_record_.owner.boot_id) {
    lost_.store(true);
    return Status::Busy("node directory " + dir_ + " was taken over by host=" + o.host +
                        " pid=" + std::to_string(o.pid) + " generation=" + std::to_string(cur->generation) +
                        " (we were generation " + std::to_string(generation_) + ")");
  }
  return Status::OK();
}

void NodeDir::StartHeartbeat(std::chrono::milliseconds interval) {
  StopHeartbeat();
  heartbeat_ = std::make_unique<Heartbeat>(
      [this]() -> Status {
        if (lost_.load()) return Status::OK();  // already reported once; nothing to write any more
        Status s = Beat();
        if (s.IsBusy()) spdlog::error("kvfs: {}; stopping heartbeat", s.message());
        return s;
      },
      interval);
  heartbeat_->Start();
}

void NodeDir::StopHeartbeat() {
  if (heartbeat_) heartbeat_->Stop();
}

Status NodeDir::Release() {
  StopHeartbeat();
  KVFS_RETURN_IF_ERROR(CheckOwnership());
  OwnerRecord r = self_record_;
  r.released = true;
  std::lock_guard<std::mutex> l(mu_);
  Status s = env_->WriteFileAtomic(OwnerFilePath(backing_, node_), r.Serialize());
  if (s.ok()) spdlog::info("kvfs: released node directory {} (generation {})", dir_, generation_);
  return s;
}

}  // namespace kvfs
