// kvfs-bench's phases of one profile in one mode (tools/bench_phases.h).
#include "tools/bench_phases.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "blockstore/s3_client.h"
#include "tools/bench_io.h"
#include "tools/bench_stack.h"

namespace kvfs::bench {
namespace {

struct PhaseResult {
  std::string name;
  uint64_t units = 0, bytes = 0;  // units: chunks stored/loaded or keys probed
  double seconds = 0;
  int64_t start_ns = 0, end_ns = 0;  // CLOCK_MONOTONIC: `perf record -k CLOCK_MONOTONIC` + `perf report --time`
  std::vector<uint32_t> op_lat;
  std::map<std::string, std::vector<uint32_t>> sys_lat;
  uint64_t hits = 0;
  json nfs_before, nfs_after;
  json kvfs_before, kvfs_after;
  json s3_before, s3_after;  // s3 modes: S3 requests (Stack::S3Stats)
  double cpu_client = 0, cpu_daemon = 0, cpu_nfsim = 0;  // CPU seconds used during the phase
  std::string daemon;                                    // "kvfs", "ceiling" or "" (direct, tmpfs)
};

std::atomic<uint64_t> g_done{0};
std::atomic<uint64_t> g_total{0};
std::string g_label;
std::mutex g_label_mu;

}  // namespace

void ProgressLoop(std::atomic<bool>* stop, bool tty) {
  while (!stop->load()) {
    if (tty) {
      uint64_t d = g_done.load(), t = std::max<uint64_t>(1, g_total.load());
      int w = 30, fill = static_cast<int>(w * std::min<uint64_t>(d, t) / t);
      std::string label;
      {
        std::lock_guard<std::mutex> g(g_label_mu);
        label = g_label;
      }
      std::fprintf(stderr, "\r\033[K%-34s [%s%s] %" PRIu64 "/%" PRIu64, label.c_str(), std::string(fill, '#').c_str(),
                   std::string(w - fill, '.').c_str(), d, t);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (tty) std::fprintf(stderr, "\r\033[K");
}

void ClearProgressLabel() {
  std::lock_guard<std::mutex> g(g_label_mu);
  g_label.clear();
}

namespace {

uint32_t Pct(std::vector<uint32_t>& v, double p) {
  if (v.empty()) return 0;
  size_t k = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<long>(k), v.end());
  return v[k];
}

void PhaseHook(const Config& cfg, const std::string& label, const std::string& phase, const char* when) {
  if (cfg.phase_hook.empty()) return;
  std::string l = label;
  std::replace(l.begin(), l.end(), '/', ' ');  // "profile mode"
  if (Run({"/bin/sh", "-c", cfg.phase_hook + " " + l + " " + phase + " " + when}) != 0) {
    Fail("--phase-hook failed at " + label + " " + phase + " " + when);
  }
}

// Runs fn(i) for i in [0, n) on `threads` threads (each a contiguous share, like a connector's jobs).
PhaseResult RunPhase(const std::string& name, const std::string& label, uint64_t n, unsigned threads,
                     const std::function<uint64_t(uint64_t, char*)>& fn, size_t bufsize, Stack& stack) {
  PhaseResult r;
  r.name = name;
  {
    std::lock_guard<std::mutex> g(g_label_mu);
    g_label = label + " " + name;
  }
  g_done = 0;
  g_total = n;
  PhaseHook(stack.cfg, label, name, "begin");
  r.nfs_before = stack.NfsStats();
  r.kvfs_before = stack.KvfsStats();
  r.s3_before = stack.S3Stats();
  pid_t nfsim_pid = static_cast<pid_t>(r.nfs_before.value("pid", 0));
  pid_t daemon_pid = stack.DaemonPid();
  r.daemon = stack.DaemonName();
  double c0 = SelfCpuS(), k0 = ProcCpuS(daemon_pid), n0 = ProcCpuS(nfsim_pid);
  std::vector<Recorder> recs(threads);
  std::vector<std::string> errors(threads);
  std::atomic<uint64_t> bytes{0}, hits{0};
  int64_t t0 = NowNs();
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      t_rec = &recs[t];
      AlignedBuf buf(bufsize);
      uint64_t lo = n * t / threads, hi = n * (t + 1) / threads;
      try {
        for (uint64_t i = lo; i < hi; ++i) {
          int64_t s = NowNs();
          uint64_t b = fn(i, buf.p);
          recs[t].ops.push_back(static_cast<uint32_t>(std::min<int64_t>(NowNs() - s, UINT32_MAX)));
          if (b == UINT64_MAX) {
            hits++;
          } else {
            bytes += b;
          }
          g_done++;
        }
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
      t_rec = nullptr;
    });
  }
  for (auto& th : ts) th.join();
  r.start_ns = t0;
  r.end_ns = NowNs();
  r.cpu_client = SelfCpuS() - c0;
  r.cpu_daemon = daemon_pid > 0 ? ProcCpuS(daemon_pid) - k0 : 0;
  r.cpu_nfsim = nfsim_pid > 0 ? ProcCpuS(nfsim_pid) - n0 : 0;
  r.seconds = static_cast<double>(r.end_ns - t0) / 1e9;
  r.nfs_after = stack.NfsStats();
  r.kvfs_after = stack.KvfsStats();
  r.s3_after = stack.S3Stats();
  PhaseHook(stack.cfg, label, name, "end");
  for (auto& e : errors) {
    if (!e.empty()) Fail(name + ": " + e);
  }
  r.units = n;
  r.bytes = bytes;
  r.hits = hits;
  for (auto& rc : recs) {
    r.op_lat.insert(r.op_lat.end(), rc.ops.begin(), rc.ops.end());
    for (auto& [k, v] : rc.sys) r.sys_lat[k].insert(r.sys_lat[k].end(), v.begin(), v.end());
  }
  return r;
}

}  // namespace

json S3Delta(const json& after, const json& before, uint64_t units) {
  json out = json::object();
  if (!after.is_object() || !after.contains("requests")) return out;
  json req = json::object(), per = json::object();
  const json b = before.is_object() && before.contains("requests") ? before["requests"] : json::object();
  for (auto& [k, v] : after["requests"].items()) {
    uint64_t x = v.get<uint64_t>() - b.value(k, uint64_t{0});
    if (x == 0 && k != "total") continue;
    req[k] = x;
    per[k] = static_cast<double>(x) / static_cast<double>(std::max<uint64_t>(1, units));
  }
  auto d = [&](const char* k) {
    return after.value(k, uint64_t{0}) - (before.is_object() ? before.value(k, uint64_t{0}) : 0);
  };
  out["requests"] = req;
  out["requests_per_unit"] = per;
  out["bytes_sent"] = d("bytes_sent");
  out["bytes_received"] = d("bytes_received");
  return out;
}

namespace {

json PhaseJson(PhaseResult& r) {
  json j;
  if (r.s3_after.is_object()) j["s3"] = S3Delta(r.s3_after, r.s3_before, r.units);
  j["units"] = r.units;
  j["seconds"] = r.seconds;
  j["monotonic_s"] = {static_cast<double>(r.start_ns) / 1e9, static_cast<double>(r.end_ns) / 1e9};
  j["units_per_s"] = r.seconds > 0 ? static_cast<double>(r.units) / r.seconds : 0;
  j["bytes"] = r.bytes;
  j["mb_per_s"] = r.seconds > 0 ? static_cast<double>(r.bytes) / 1e6 / r.seconds : 0;
  j["p50_us"] = Pct(r.op_lat, 0.5) / 1e3;
  j["p99_us"] = Pct(r.op_lat, 0.99) / 1e3;
  if (r.name == "lookup") j["hits"] = r.hits;
  json sys = json::object();
  for (auto& [k, v] : r.sys_lat) {
    sys[k] = {{"n", v.size()}, {"p50_us", Pct(v, 0.5) / 1e3}, {"p99_us", Pct(v, 0.99) / 1e3}};
  }
  j["syscalls"] = sys;
  // Backing (nfsim) operations during the phase.
  json b;
  const json& a0 = r.nfs_before;
  const json& a1 = r.nfs_after;
  auto d = [&](const char* k) -> uint64_t {
    return a1.value(k, uint64_t{0}) - a0.value(k, uint64_t{0});
  };
  b["metadata_ops"] = d("metadata_ops");
  b["syncs"] = d("syncs");
  b["bytes_written"] = d("bytes_written");
  b["bytes_read"] = d("bytes_read");
  json ops = json::object(), per = json::object();
  if (a1.contains("ops")) {
    for (auto& [k, v] : a1["ops"].items()) {
      uint64_t x = v.get<uint64_t>() - a0["ops"].value(k, uint64_t{0});
      if (x) {
        ops[k] = x;
        per[k] = static_cast<double>(x) / static_cast<double>(std::max<uint64_t>(1, r.units));
      }
    }
  }
  b["ops"] = ops;
  b["ops_per_unit"] = per;
  b["metadata_ops_per_unit"] = static_cast<double>(d("metadata_ops")) / static_cast<double>(std::max<uint64_t>(1, r.units));
  b["syncs_per_unit"] = static_cast<double>(d("syncs")) / static_cast<double>(std::max<uint64_t>(1, r.units));
  b["bytes_written_per_unit"] = static_cast<double>(d("bytes_written")) / static_cast<double>(std::max<uint64_t>(1, r.units));
  b["bytes_read_per_unit"] = static_cast<double>(d("bytes_read")) / static_cast<double>(std::max<uint64_t>(1, r.units));
  j["backing"] = b;
  // CPU seconds the phase cost (clock ticks: 10 ms resolution), and per GB moved: what a CPU-bound run
  // on a shared machine is limited by, less sensitive to the other load than MB/s.
  double gb = static_cast<double>(r.bytes) / 1e9;
  // "daemon": the FUSE daemon between the workload and nfsim (kvfs, or the ceiling's passthrough), from
  // /proc/PID/stat utime + stime.
  j["cpu_s"] = {{"client", r.cpu_client}, {"kvfs", r.daemon == "kvfs" ? r.cpu_daemon : 0.0},
                {"ceiling", r.daemon == "ceiling" ? r.cpu_daemon : 0.0}, {"daemon", r.cpu_daemon},
                {"nfsim", r.cpu_nfsim}, {"total", r.cpu_client + r.cpu_daemon + r.cpu_nfsim}};
  if (gb > 0) j["cpu_s_per_gb"] = (r.cpu_client + r.cpu_daemon + r.cpu_nfsim) / gb;
  if (gb > 0 && !r.daemon.empty()) j["daemon_cpu_s_per_gb"] = r.cpu_daemon / gb;
  if (r.kvfs_after.is_object() && r.kvfs_after.contains("cache_bytes")) {
    j["kvfs_cache_bytes"] = {{"before", r.kvfs_before.is_object() ? r.kvfs_before.value("cache_bytes", uint64_t{0}) : 0},
                             {"after", r.kvfs_after.value("cache_bytes", uint64_t{0})}};
  }
  // kvfs mode: FUSE requests the kvfs daemon served during the phase, per unit (what the kernel could
  // not answer from its caches: e.g. open + read per chunk on a warm load).
  if (r.kvfs_before.is_object() && r.kvfs_after.is_object() && r.kvfs_after.contains("fuse_ops")) {
    json fo = json::object();
    for (auto& [k, v] : r.kvfs_after["fuse_ops"].items()) {
      uint64_t x1 = v.value("count", uint64_t{0});
      uint64_t x0 = r.kvfs_before.contains("fuse_ops") && r.kvfs_before["fuse_ops"].contains(k)
                        ? r.kvfs_before["fuse_ops"][k].value("count", uint64_t{0})
                        : 0;
      if (x1 > x0) fo[k] = static_cast<double>(x1 - x0) / static_cast<double>(std::max<uint64_t>(1, r.units));
    }
    j["kvfs_fuse_requests_per_unit"] = fo;
  }
  return j;
}

}  // namespace

namespace {

// Mode s3-object: LMCache's S3 backend shape, one object per chunk on the same bucket through the bench's
// S3Client (blockstore/s3_client.h): a PUT per store, a HEAD per lookup probe, a GET per load (the whole
// object; warm_load is the same again: no cache in front). Same chunk ids, contents, threads and lookup
// requests as the other modes; every load verified.
json RunObjectMode(const Config& cfg, const Profile& p, size_t size) {
  Stack stack(cfg, p.name + "-s3-object", Mode::kS3Object);
  const std::string label = p.name + "/s3-object";
  json out;
  out["loadavg"] = {{"start", LoadAvg()}};
  try {
    if (!cfg.s3) Fail("s3-object: no --s3 bucket");
    const uint64_t salt = 0x5eed0000ull ^ static_cast<uint64_t>(NowNs());
    auto key = [&](uint64_t id) { return stack.s3_key_prefix + Key(id, salt); };
    const uint64_t n = cfg.chunks;
    json phases;
    auto store = RunPhase("store", label, n, cfg.threads, [&](uint64_t i, char* buf) -> uint64_t {
      Fill(buf, size, i, salt);
      kvfs::Status s = cfg.s3->Put(key(i), std::string_view(buf, size));
      if (!s.ok()) Fail("s3-object store " + key(i) + ": " + s.ToString());
      return size;
    }, size, stack);
    phases["store"] = PhaseJson(store);
    uint64_t batch = cfg.lookup_batch, nreq = std::max<uint64_t>(1, n / batch);
    uint64_t present = static_cast<uint64_t>(cfg.hit_ratio * static_cast<double>(batch));
    std::vector<uint64_t> probe_ids;
    for (uint64_t q = 0; q < nreq; ++q) {
      for (uint64_t k = 0; k < batch; ++k) {
        probe_ids.push_back(k < present ? (q * batch + k) % n : ((1ull << 62) | (q * batch + k)));
        if (p.stop_at_first_miss && k >= present) break;
      }
    }
    auto lookup = RunPhase("lookup", label, probe_ids.size(), 1, [&](uint64_t i, char*) -> uint64_t {
      auto h = cfg.s3->Head(key(probe_ids[i]));
      if (!h.ok() && !h.status().IsNotFound()) Fail("s3-object lookup: " + h.status().ToString());
      bool want = !(probe_ids[i] & (1ull << 62));
      if (h.ok() != want) Fail("s3-object lookup of key " + std::to_string(probe_ids[i]) + ": got " + (h.ok() ? "hit" : "miss"));
      return h.ok() ? UINT64_MAX : 0;
    }, 4096, stack);
    phases["lookup"] = PhaseJson(lookup);
    auto loadfn = [&](uint64_t i, char* buf) -> uint64_t {
      std::memset(buf, 0, 64);
      size_t got = 0;
      kvfs::Status s = cfg.s3->Get(key(i), 0, size, buf, &got);
      if (!s.ok()) Fail("s3-object load " + key(i) + ": " + s.ToString());
      if (got != size) Fail("s3-object load " + key(i) + ": short object (" + std::to_string(got) + " B)");
      Verify(buf, size, i, salt, "chunk " + std::to_string(i));
      return size;
    };
    auto load = RunPhase("load", label, n, cfg.threads, loadfn, size, stack);
    phases["load"] = PhaseJson(load);
    auto warm = RunPhase("warm_load", label, n, cfg.threads, loadfn, size, stack);
    phases["warm_load"] = PhaseJson(warm);
    out["phases"] = phases;
    out["ok"] = true;
  } catch (const std::exception& e) {
    out["ok"] = false;
    out["error"] = e.what();
  }
  DeleteS3Prefix(cfg, stack.s3_key_prefix);
  out["s3_prefix"] = stack.s3_key_prefix;
  out["loadavg"]["end"] = LoadAvg();
  return out;
}

}  // namespace

json RunMode(const Config& cfg, const Profile& p, size_t size, const std::string& mode) {
  if (mode == "s3-object") return RunObjectMode(cfg, p, size);
  Mode m = mode == "kvfs"      ? Mode::kKvfs
           : mode == "tmpfs"   ? Mode::kTmpfs
           : mode == "ceiling" ? Mode::kCeiling
           : mode == "s3-kvfs" ? Mode::kS3Kvfs
                               : Mode::kDirect;
  bool kvfs = m == Mode::kKvfs || m == Mode::kS3Kvfs;
  Stack stack(cfg, p.name + "-" + mode, m);
  std::string label = p.name + "/" + mode;
  json out;
  out["loadavg"] = {{"start", LoadAvg()}};
  try {
    stack.Up();
    Ctx c{stack.Root(), size, 0x5eed0000ull ^ static_cast<uint64_t>(NowNs())};
    c.chunks = cfg.chunks;
    c.ranks = cfg.ranks;
    c.file_bytes = cfg.file_bytes;
    c.trie_depth = cfg.trie_depth;
    {
      Recorder rec;
      t_rec = &rec;
      p.init(c);
      t_rec = nullptr;
    }
    uint64_t n = cfg.chunks;
    json phases;
    auto store = RunPhase("store", label, n, cfg.threads, [&](uint64_t i, char* buf) -> uint64_t {
      Fill(buf, size, i, c.salt);
      p.store(c, i, buf);
      return size;
    }, size, stack);
    phases["store"] = PhaseJson(store);
    // Lookup: requests of lookup_batch keys; the first hit_ratio of each request were stored, the rest
    // were never stored (a cold request's tail). One lookup thread, as the connectors do.
    uint64_t batch = cfg.lookup_batch, nreq = std::max<uint64_t>(1, n / batch);
    uint64_t present = static_cast<uint64_t>(cfg.hit_ratio * static_cast<double>(batch));
    std::vector<uint64_t> probe_ids;
    for (uint64_t q = 0; q < nreq; ++q) {
      for (uint64_t k = 0; k < batch; ++k) {
        uint64_t id = k < present ? (q * batch + k) % n : ((1ull << 62) | (q * batch + k));
        probe_ids.push_back(id);
        if (p.stop_at_first_miss && k >= present) break;  // stops at the first miss
      }
    }
    auto lookup = RunPhase("lookup", label, probe_ids.size(), 1, [&](uint64_t i, char*) -> uint64_t {
      bool hit = p.exists(c, probe_ids[i]);
      bool want = !(probe_ids[i] & (1ull << 62));
      if (hit != want) Fail("lookup of key " + std::to_string(probe_ids[i]) + ": got " + (hit ? "hit" : "miss"));
      return hit ? UINT64_MAX : 0;
    }, 4096, stack);
    phases["lookup"] = PhaseJson(lookup);
    json remount_stats;
    if (cfg.cold_load) {
      if (p.release) p.release(c);  // what the profile keeps open (fd caches) closes before the restart
      if (kvfs) out["kvfs_stats_before_remount"] = stack.KvfsStats();
      stack.Remount();
      c.root = stack.Root();
      if (m == Mode::kS3Kvfs && stack.last_unmount_s3.is_object()) {
        // What storing cost in all, through the unmount that uploads the last segment and publishes the
        // journal: from the store phase's start to the unmount's counters (the lookups' few requests in).
        out["s3_store_through_unmount"] = S3Delta(stack.last_unmount_s3, store.s3_before, n);
      }
    }
    auto loadfn = [&](uint64_t i, char* buf) -> uint64_t {
      std::memset(buf, 0, 64);
      p.load(c, i, buf);
      Verify(buf, size, i, c.salt, "chunk " + std::to_string(i));
      return size;
    };
    auto load = RunPhase("load", label, n, cfg.threads, loadfn, size, stack);
    phases["load"] = PhaseJson(load);
    auto warm = RunPhase("warm_load", label, n, cfg.threads, loadfn, size, stack);
    phases["warm_load"] = PhaseJson(warm);
    // Cold load with a full cache: another client restart, then (kvfs mode) other files loaded until
    // kvfs's value cache is full, then all N chunks again, so every value is loaded while the cache
    // evicts. direct and ceiling have no bounded cache of their own: theirs is a second cold load.
    int64_t fill = cfg.fill_bytes < 0 ? static_cast<int64_t>(KvfsCacheBytes(cfg) / 4 * 5) : cfg.fill_bytes;
    if (cfg.cold_load && fill > 0 && m != Mode::kTmpfs) {
      const uint64_t cache = KvfsCacheBytes(cfg);
      const size_t fsz = std::clamp<uint64_t>(cache / 64, 64 << 10, 4 << 20) / 4096 * 4096;
      const uint64_t nf = (static_cast<uint64_t>(fill) + fsz - 1) / fsz;
      auto fill_path = [&](uint64_t i) { return c.root + "/.bench-fill/f" + std::to_string(i); };
      if (kvfs) {
        if (int e = MkdirE(c.root + "/.bench-fill", 0777); e && e != EEXIST) Fail("mkdir .bench-fill");
        RunPhase("fill_store", label, nf, cfg.threads, [&](uint64_t i, char* buf) -> uint64_t {
          Fill(buf, fsz, (1ull << 61) | i, c.salt);
          int fd = Open(fill_path(i), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
          if (fd < 0) FailErrno("open " + fill_path(i));
          WriteAll(fd, buf, fsz);
          CloseOk(fd);
          return fsz;
        }, fsz, stack);
      }
      if (p.release) p.release(c);
      stack.Remount();
      c.root = stack.Root();
      if (kvfs) {
        RunPhase("fill_load", label, nf, cfg.threads, [&](uint64_t i, char* buf) -> uint64_t {
          int fd = Open(fill_path(i), O_RDONLY | O_DIRECT | O_CLOEXEC);
          if (fd < 0) FailErrno("open " + fill_path(i));
          ReadExact(fd, buf, fsz, fill_path(i));
          CloseOk(fd);
          Verify(buf, fsz, (1ull << 61) | i, c.salt, "fill file " + std::to_string(i));
          return fsz;
        }, fsz, stack);
        json ks = stack.KvfsStats();
        out["fill"] = {{"files", nf}, {"file_bytes", fsz}, {"cache_size", cache},
                       {"cache_bytes_after_fill", ks.is_object() ? ks.value("cache_bytes", uint64_t{0}) : 0}};
      }
      auto full = RunPhase("load_full", label, n, cfg.threads, loadfn, size, stack);
      phases["load_full"] = PhaseJson(full);
    }
    out["phases"] = phases;
    if (p.release) p.release(c);
    if (kvfs) {
      out["kvfs_stats"] = stack.KvfsStats();
      stack.hwm_kb = std::max(stack.hwm_kb, VmHwmKb(stack.kvfs_pid));
    }
    out["nfsim_total"] = stack.NfsStats();
    if (m == Mode::kCeiling) stack.hwm_kb = std::max(stack.hwm_kb, VmHwmKb(stack.ceiling_pid));
    stack.Down();
    if (kvfs || m == Mode::kCeiling) out["daemon_vmhwm_kb"] = stack.hwm_kb;
    out["ok"] = true;
  } catch (const std::exception& e) {
    out["ok"] = false;
    out["error"] = e.what();
    if (p.release) {
      try {
        p.release(Ctx{});
      } catch (const std::exception&) {  // a close that fails after a failure: the stack goes down anyway
      }
    }
    stack.Down();
  }
  fs::remove_all(stack.base);
  if (m == Mode::kS3Kvfs) {
    DeleteS3Prefix(cfg, stack.s3_key_prefix);
    out["s3_prefix"] = stack.s3_key_prefix;
  }
  out["loadavg"]["end"] = LoadAvg();
  return out;
}

}  // namespace kvfs::bench
