// kvfs-bench's stack of mounts and process measurements (tools/bench_stack.h).
#include "tools/bench_stack.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "blockstore/s3_client.h"
#include "tools/bench_io.h"

namespace kvfs::bench {

int Run(const std::vector<std::string>& argv, bool quiet) {
  pid_t p = fork();
  if (p == 0) {
    if (quiet) {
      int dn = ::open("/dev/null", O_WRONLY);
      dup2(dn, 1);
    }
    std::vector<char*> a;
    for (auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    execvp(a[0], a.data());
    _exit(127);
  }
  int st = 0;
  waitpid(p, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

bool IsMounted(const std::string& mp) {
  std::ifstream f("/proc/self/mounts");
  std::string dev, dir, rest;
  std::string want = fs::weakly_canonical(mp).string();
  while (f >> dev >> dir && std::getline(f, rest)) {
    if (dir == want) return true;
  }
  return false;
}

std::string GetXattr(const std::string& path, const char* name) {
  std::vector<char> buf(1 << 16);
  for (int i = 0; i < 4; ++i) {
    ssize_t n = getxattr(path.c_str(), name, buf.data(), buf.size());
    if (n >= 0) return std::string(buf.data(), static_cast<size_t>(n));
    if (errno != ERANGE) return "";
    buf.resize(buf.size() * 4);
  }
  return "";
}

uint64_t VmHwmKb(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10);
  }
  return 0;
}

json LoadAvg() {
  std::ifstream f("/proc/loadavg");
  double a = 0, b = 0, c = 0;
  f >> a >> b >> c;
  return {{"1m", a}, {"5m", b}, {"15m", c}};
}

double ProcCpuS(pid_t pid) {
  if (pid <= 0) return 0;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return 0;
  size_t rp = line.rfind(')');  // comm may contain spaces
  if (rp == std::string::npos) return 0;
  std::istringstream in(line.substr(rp + 2));
  std::string x;
  unsigned long long utime = 0, stime = 0;
  for (int field = 3; field <= 15 && in >> x; ++field) {
    if (field == 14) utime = std::strtoull(x.c_str(), nullptr, 10);
    if (field == 15) stime = std::strtoull(x.c_str(), nullptr, 10);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double SelfCpuS() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto tv = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return tv(ru.ru_utime) + tv(ru.ru_stime);
}

Stack::Stack(const Config& c, const std::string& name, Mode m)
    : cfg(c),
      kvfs_mode(m == Mode::kKvfs || m == Mode::kS3Kvfs),
      tmpfs_mode(m == Mode::kTmpfs),
      ceiling_mode(m == Mode::kCeiling),
      s3_mode(m == Mode::kS3Kvfs),
      s3_object_mode(m == Mode::kS3Object) {
  // tmpfs: a private directory of the tmpfs (pid in the name: concurrent runs do not collide).
  base = tmpfs_mode ? c.tmpfs + "/kvfs-bench-" + std::to_string(getpid()) + "-" + name : c.work + "/" + name;
  src = base + "/src";
  nfs = base + "/nfs";
  kv = base + "/kv";
  idx = base + "/idx";
  ceil = base + "/ceil";
  staging = base + "/staging";
  // A fresh key prefix per run (pid in it: concurrent or repeated runs never share a FORMAT or a key).
  s3_key_prefix = c.s3_prefix + "kvfs-bench-" + std::to_string(getpid()) + "-" + name + "-" +
                  std::to_string(NowNs() % 1000000007) + "/";
}

json S3ClientCounters(const Config& cfg) {
  if (!cfg.s3) return json();
  const kvfs::S3Counters& c = cfg.s3->counters();
  json req = json::object();
  for (size_t i = 0; i < kvfs::S3Counters::kOps; ++i) {
    req[kvfs::S3OpName(static_cast<kvfs::S3Op>(i))] = c.requests[i].load();
  }
  req["total"] = c.TotalRequests();
  return {{"requests", req}, {"bytes_sent", c.bytes_sent.load()}, {"bytes_received", c.bytes_received.load()}};
}

void DeleteS3Prefix(const Config& cfg, const std::string& key_prefix) {
  if (!cfg.s3 || cfg.s3_keep || key_prefix.empty()) return;
  std::string after;
  for (int page = 0; page < 100000; ++page) {
    auto l = cfg.s3->List(key_prefix, after);
    for (int retry = 0; retry < 3 && !l.ok(); ++retry) {
      usleep(500000);
      l = cfg.s3->List(key_prefix, after);
    }
    if (!l.ok()) {
      std::fprintf(stderr, "kvfs-bench: cleanup of s3 prefix %s: %s\n", key_prefix.c_str(), l.status().ToString().c_str());
      return;
    }
    for (auto& o : l->objects) (void)cfg.s3->Delete(o.key);
    if (!l->truncated || l->objects.empty()) return;
    after = l->objects.back().key;
  }
}

json Stack::S3Stats() const {
  if (s3_object_mode) return S3ClientCounters(cfg);
  if (!s3_mode) return json();
  json k = KvfsStats();
  return k.is_object() && k.contains("s3") ? k["s3"] : json();
}

void Stack::MountNfs() {
  std::vector<std::string> a = {Tool("kvfs-nfsim"), src, nfs, "--latency-us", std::to_string(cfg.latency_us),
                                "--data-mbps", std::to_string(cfg.data_mbps)};
  for (auto& x : cfg.nfsim_args) a.push_back(x);
  if (Run(a) != 0) Fail("kvfs-nfsim mount failed");
  for (int i = 0; i < 100 && !IsMounted(nfs); ++i) usleep(20000);
}

void Stack::MountKvfs() {
  std::vector<std::string> a = {Tool("kvfs"), "mount", kv, "--backing", nfs + "/kvfs-backing",
                                "--index-dir", idx, "--node-id", "bench", "--log-level", "warn"};
  if (s3_mode) {
    // The unmount logs the daemon's S3 counters at level info (Down reads them).
    std::string key = s3_key_prefix.substr(0, s3_key_prefix.size() - 1);
    a = {Tool("kvfs"), "mount", kv, "--backing", "s3://" + cfg.s3_bucket + "/" + key, "--s3-endpoint",
         cfg.s3_endpoint, "--s3-region", cfg.s3_region, "--s3-staging", staging, "--index-dir", idx,
         "--node-id", "bench", "--log-level", "info", "--log-file", base + "/kvfs.log"};
    if (cfg.s3_path_style) a.push_back("--s3-path-style");
    if (!cfg.s3_ca.empty()) a.insert(a.end(), {"--s3-ca", cfg.s3_ca});
  }
  for (auto& x : cfg.kvfs_args) a.push_back(x);
  if (Run(a) != 0) Fail("kvfs mount failed");
  kvfs_pid = static_cast<pid_t>(std::atoi(GetXattr(kv, "user.kvfs.pid").c_str()));
}

void Stack::MountCeiling() {
  std::vector<std::string> a = {Tool("kvfs-nfsim"), nfs + "/ceiling-backing", ceil, "--latency-us", "0"};
  for (auto& x : cfg.ceiling_args) a.push_back(x);
  if (Run(a) != 0) Fail("ceiling mount (kvfs-nfsim --latency-us 0) failed");
  for (int i = 0; i < 100 && !IsMounted(ceil); ++i) usleep(20000);
  std::string s = GetXattr(ceil, "user.nfsim.stats");
  json j = s.empty() ? json::object() : json::parse(s, nullptr, false);
  ceiling_pid = j.is_object() ? static_cast<pid_t>(j.value("pid", 0)) : 0;
  if (ceiling_pid <= 0) Fail("ceiling mount: no pid in user.nfsim.stats");
}

void Stack::Up() {
  Down();
  fs::remove_all(base);
  if (tmpfs_mode) {
    fs::create_directories(base + "/direct");
    return;
  }
  if (s3_object_mode) return;  // no mount: the bench's client writes the objects
  if (s3_mode) {
    fs::create_directories(kv);
    fs::create_directories(idx);
    fs::create_directories(staging);
    MountKvfs();
    return;
  }
  fs::create_directories(src);
  fs::create_directories(nfs);
  fs::create_directories(kv);
  fs::create_directories(idx);
  fs::create_directories(src + "/direct");
  fs::create_directories(src + "/kvfs-backing");
  if (ceiling_mode) {
    fs::create_directories(ceil);
    fs::create_directories(src + "/ceiling-backing");
  }
  MountNfs();
  if (kvfs_mode) MountKvfs();
  if (ceiling_mode) MountCeiling();
}

namespace {

// The S3 counters of the last unmount in a kvfs log ("kvfs: s3: ... requests put=P get=G head=H delete=D
// list=L multipart=C/U/F total=T; bytes sent S received R"), S3ClientCounters' shape; null if none.
json UnmountS3Counters(const std::string& log) {
  std::ifstream f(log);
  std::string line, last;
  while (std::getline(f, line)) {
    if (line.find("kvfs: s3:") != std::string::npos && line.find("requests put=") != std::string::npos) last = line;
  }
  if (last.empty()) return json();
  auto num = [&](const std::string& k) -> uint64_t {
    size_t p = last.find(" " + k);
    return p == std::string::npos ? 0 : std::strtoull(last.c_str() + p + 1 + k.size(), nullptr, 10);
  };
  json req = {{"put", num("put=")}, {"get", num("get=")}, {"head", num("head=")}, {"delete", num("delete=")},
              {"list", num("list=")}, {"total", num("total=")}};
  size_t mp = last.find(" multipart=");
  if (mp != std::string::npos) {
    unsigned long long c = 0, u = 0, e = 0;
    if (std::sscanf(last.c_str() + mp, " multipart=%llu/%llu/%llu", &c, &u, &e) == 3) {
      req["create_multipart"] = c;
      req["upload_part"] = u;
      req["complete_multipart"] = e;
    }
  }
  return {{"requests", req}, {"bytes_sent", num("sent ")}, {"bytes_received", num("received ")}};
}

}  // namespace

void Stack::Down() {
  if (tmpfs_mode || s3_object_mode) return;
  if (kvfs_mode && IsMounted(kv)) {
    if (kvfs_pid > 0) hwm_kb = std::max(hwm_kb, VmHwmKb(kvfs_pid));
    if (Run({Tool("kvfs"), "umount", kv}) != 0) Run({"fusermount3", "-u", kv});
    // nfs/ is busy until the kvfs daemon has closed its store (final commits, snapshot): wait for it to
    // exit (up to 60 s) before unmounting the stand-in, as for the ceiling daemon below. Without it a
    // loaded 2-core CI machine saw "Device or resource busy" on nfs/ (bench_smoke_test, vua-trie).
    for (int i = 0; i < 3000 && kvfs_pid > 0 && kill(kvfs_pid, 0) == 0; ++i) usleep(20000);
    kvfs_pid = 0;
    if (s3_mode) last_unmount_s3 = UnmountS3Counters(base + "/kvfs.log");
  }
  if (ceiling_mode && IsMounted(ceil)) {
    if (ceiling_pid > 0) hwm_kb = std::max(hwm_kb, VmHwmKb(ceiling_pid));
    for (int i = 0; i < 50 && Run({"fusermount3", "-u", ceil}) != 0; ++i) usleep(100000);
    // nfs/ is busy until the ceiling daemon has closed its backing fds: wait for it to exit.
    for (int i = 0; i < 100 && ceiling_pid > 0 && kill(ceiling_pid, 0) == 0; ++i) usleep(20000);
    ceiling_pid = 0;
  }
  if (IsMounted(nfs)) {
    for (int i = 0; i < 50 && Run({"fusermount3", "-u", nfs}) != 0; ++i) usleep(100000);
  }
}

void Stack::Remount() {
  if (tmpfs_mode || s3_object_mode) return;  // tmpfs's pages are the data / no client cache
  Down();
  if (!s3_mode) MountNfs();
  if (kvfs_mode) MountKvfs();
  if (ceiling_mode) MountCeiling();
}

json Stack::NfsStats() const {
  if (tmpfs_mode || s3_mode || s3_object_mode) return json::object();
  std::string s = GetXattr(nfs, "user.nfsim.stats");
  return s.empty() ? json::object() : json::parse(s);
}

json Stack::KvfsStats() const {
  if (!kvfs_mode) return json();
  std::string s = GetXattr(kv, "user.kvfs.stats");
  return s.empty() ? json() : json::parse(s, nullptr, false);
}

}  // namespace kvfs::bench
