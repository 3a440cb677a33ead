// kvfs-bench's text report and ratios (tools/bench_report.h).
#include "tools/bench_report.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace kvfs::bench {
namespace {

std::string Fmt(double v, int prec = 1) {
  char b[64];
  if (v >= 1e6) std::snprintf(b, sizeof(b), "%.0f", v);
  else std::snprintf(b, sizeof(b), "%.*f", prec, v);
  return b;
}

void PrintVsTmpfs(const json& pj) {
  if (!pj.contains("warm_load_vs_tmpfs")) return;
  const json& v = pj["warm_load_vs_tmpfs"];
  std::printf("   warm load MB/s vs tmpfs (%s MB/s, same chunks, threads, syscalls):", Fmt(v["tmpfs_mb_per_s"].get<double>()).c_str());
  for (const char* m : {"direct", "kvfs"}) {
    if (v.contains(m)) std::printf(" %s %.2fx", m, v[m].get<double>());
  }
  std::printf("\n");
}

}  // namespace

void PrintProfile(const json& pj) {
  bool nfsim = false;  // a mode over kvfs-nfsim (its --latency-us applies); the s3 and tmpfs modes have none
  for (auto& [mode, r] : pj["modes"].items()) nfsim = nfsim || mode == "direct" || mode == "kvfs" || mode == "ceiling";
  std::printf("\n== %s: %s\n   %" PRIu64 " chunks x %" PRIu64 " B, %u threads, hit ratio %.2f", pj["profile"].get<std::string>().c_str(),
              pj["what"].get<std::string>().c_str(), pj["chunks"].get<uint64_t>(), pj["chunk_bytes"].get<uint64_t>(),
              pj["threads"].get<unsigned>(), pj["hit_ratio"].get<double>());
  if (nfsim) std::printf(", %ld us per metadata op", pj["latency_us"].get<long>());
  std::printf("\n");
  const json& m = pj["modes"];
  for (auto& [mode, r] : m.items()) {
    if (!r.value("ok", false)) std::printf("   %s FAILED: %s\n", mode.c_str(), r.value("error", std::string("?")).c_str());
  }
  if (!m.contains("direct") || !m.contains("kvfs") || !m["direct"].value("ok", false) || !m["kvfs"].value("ok", false)) {
    for (auto& [mode, r] : m.items()) {
      if (!r.value("ok", false) || mode.rfind("s3-", 0) == 0) continue;  // the s3 modes: PrintS3
      for (auto& [ph, x] : r["phases"].items()) {
        std::printf("   %-6s %-9s %10s/s %9s MB/s  p50 %s us p99 %s us  backing meta/unit %.2f\n", mode.c_str(),
                    ph.c_str(), Fmt(x["units_per_s"].get<double>()).c_str(), Fmt(x["mb_per_s"].get<double>()).c_str(),
                    Fmt(x["p50_us"].get<double>()).c_str(), Fmt(x["p99_us"].get<double>()).c_str(),
                    x["backing"]["metadata_ops_per_unit"].get<double>());
      }
    }
    PrintVsTmpfs(pj);
    return;
  }
  const json& d = m["direct"]["phases"];
  const json& k = m["kvfs"]["phases"];
  std::printf("   %-26s %14s %14s %8s\n", "", "direct", "kvfs", "kvfs/dir");
  for (const char* ph : {"store", "lookup", "load", "load_full", "warm_load"}) {
    if (!d.contains(ph) || !k.contains(ph)) continue;
    const json& a = d[ph];
    const json& b = k[ph];
    double ua = a["units_per_s"].get<double>(), ub = b["units_per_s"].get<double>();
    std::printf("   %-26s %14s %14s %7.2fx\n", (std::string(ph) + (std::string(ph) == "lookup" ? " probes/s" : " chunks/s")).c_str(),
                Fmt(ua).c_str(), Fmt(ub).c_str(), ua > 0 ? ub / ua : 0);
    if (std::string(ph) != "lookup") {
      double ma = a["mb_per_s"].get<double>(), mb = b["mb_per_s"].get<double>();
      std::printf("   %-26s %14s %14s %7.2fx\n", (std::string(ph) + " MB/s").c_str(), Fmt(ma).c_str(), Fmt(mb).c_str(),
                  ma > 0 ? mb / ma : 0);
    }
    std::printf("   %-26s %14s %14s\n", (std::string(ph) + " p50 / p99 us").c_str(),
                (Fmt(a["p50_us"].get<double>(), 0) + " / " + Fmt(a["p99_us"].get<double>(), 0)).c_str(),
                (Fmt(b["p50_us"].get<double>(), 0) + " / " + Fmt(b["p99_us"].get<double>(), 0)).c_str());
    std::printf("   %-26s %14.3f %14.3f\n", (std::string(ph) + " backing meta/unit").c_str(),
                a["backing"]["metadata_ops_per_unit"].get<double>(), b["backing"]["metadata_ops_per_unit"].get<double>());
    std::printf("   %-26s %14.3f %14.3f\n", (std::string(ph) + " backing syncs/unit").c_str(),
                a["backing"]["syncs_per_unit"].get<double>(), b["backing"]["syncs_per_unit"].get<double>());
    std::printf("   %-26s %14s %14s\n", (std::string(ph) + " backing MB w / r").c_str(),
                (Fmt(a["backing"]["bytes_written"].get<double>() / 1e6, 0) + " / " +
                 Fmt(a["backing"]["bytes_read"].get<double>() / 1e6, 0)).c_str(),
                (Fmt(b["backing"]["bytes_written"].get<double>() / 1e6, 0) + " / " +
                 Fmt(b["backing"]["bytes_read"].get<double>() / 1e6, 0)).c_str());
    if (pj.value("bytes_per_unit", false)) {  // the 2026 profiles: backing bytes per chunk (exact counts)
      std::printf("   %-26s %14s %14s\n", (std::string(ph) + " backing B w / r /unit").c_str(),
                  (Fmt(a["backing"].value("bytes_written_per_unit", 0.0), 0) + " / " +
                   Fmt(a["backing"].value("bytes_read_per_unit", 0.0), 0)).c_str(),
                  (Fmt(b["backing"].value("bytes_written_per_unit", 0.0), 0) + " / " +
                   Fmt(b["backing"].value("bytes_read_per_unit", 0.0), 0)).c_str());
    }
    if (a.contains("cpu_s_per_gb") && b.contains("cpu_s_per_gb")) {
      std::printf("   %-26s %14.2f %14.2f %7.2fx\n", (std::string(ph) + " CPU s/GB (all procs)").c_str(),
                  a["cpu_s_per_gb"].get<double>(), b["cpu_s_per_gb"].get<double>(),
                  a["cpu_s_per_gb"].get<double>() > 0 ? b["cpu_s_per_gb"].get<double>() / a["cpu_s_per_gb"].get<double>() : 0);
    }
  }
  auto types = [](const json& x) {
    std::string s;
    const json& per = x["backing"]["ops_per_unit"];
    for (auto& [t, v] : per.items()) {
      if (t == "read" || t == "write" || t == "forget" || t == "release" || t == "releasedir") continue;
      if (!s.empty()) s += " ";
      char b[64];
      std::snprintf(b, sizeof(b), "%s %.3g", t.c_str(), v.get<double>());
      s += b;
    }
    return s.empty() ? std::string("-") : s;
  };
  for (const char* ph : {"store", "lookup", "load", "load_full", "warm_load"}) {
    if (!d.contains(ph) || !k.contains(ph)) continue;
    std::printf("   backing ops/unit %-9s direct: %s\n", ph, types(d[ph]).c_str());
    std::printf("   %-26s   kvfs: %s\n", "", types(k[ph]).c_str());
  }
  for (const char* ph : {"store", "lookup", "load", "load_full", "warm_load"}) {
    if (!k.contains(ph) || !k[ph].contains("kvfs_fuse_requests_per_unit")) continue;
    std::string s;
    for (auto& [t, v] : k[ph]["kvfs_fuse_requests_per_unit"].items()) {
      char b[64];
      std::snprintf(b, sizeof(b), "%s%s %.3g", s.empty() ? "" : " ", t.c_str(), v.get<double>());
      s += b;
    }
    std::printf("   kvfs FUSE requests/unit %-9s %s\n", ph, s.empty() ? "-" : s.c_str());
  }
  std::printf("   kvfs daemon peak RSS (VmHWM): %.1f MiB\n", m["kvfs"].value("daemon_vmhwm_kb", 0.0) / 1024.0);
  PrintVsTmpfs(pj);
}

void PrintS3(const json& pj) {
  const json& m = pj["modes"];
  if (!m.contains("s3-kvfs") && !m.contains("s3-object")) return;
  std::printf("   S3 requests per chunk (by type) and throughput: kvfs over the bucket (s3-kvfs) vs one object per\n"
              "   chunk (s3-object: PUT per store, HEAD per lookup, GET per load)\n");
  auto line = [](const char* label, const char* mode, const json& s3, double rate, const char* unit) {
    std::string types;
    const json per = s3.value("requests_per_unit", json::object());  // a copy: items() of a temporary dangles
    for (auto& [t, v] : per.items()) {
      if (t == "total") continue;
      char b[64];
      std::snprintf(b, sizeof(b), "%s%s %.3g", types.empty() ? "" : " ", t.c_str(), v.get<double>());
      types += b;
    }
    double total = per.value("total", 0.0);
    std::printf("   %-22s %-9s %8.3f req/%s (%s)%s", label, mode, total,
                std::string(label) == "lookup" ? "probe" : "chunk", types.empty() ? "-" : types.c_str(),
                rate >= 0 ? "" : "\n");
    if (rate >= 0) std::printf("  %s %s\n", Fmt(rate).c_str(), unit);
  };
  for (const char* ph : {"store", "lookup", "load", "warm_load"}) {
    for (const char* mode : {"s3-kvfs", "s3-object"}) {
      if (!m.contains(mode) || !m[mode].value("ok", false) || !m[mode]["phases"].contains(ph)) continue;
      const json& x = m[mode]["phases"][ph];
      bool lookup = std::string(ph) == "lookup";
      line(ph, mode + 3, x.value("s3", json::object()),
           x[lookup ? "units_per_s" : "mb_per_s"].get<double>(), lookup ? "probes/s" : "MB/s");
    }
    if (std::string(ph) == "store" && m.contains("s3-kvfs") && m["s3-kvfs"].contains("s3_store_through_unmount")) {
      line("store + unmount", "kvfs", m["s3-kvfs"]["s3_store_through_unmount"], -1, "");
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Ratios per run (kvfs vs direct, kvfs vs the ceiling) and their medians over --repeat runs

namespace {

const char* const kRatioPhases[] = {"store", "lookup", "load", "load_full", "warm_load"};

double PhaseVal(const json& modes, const char* mode, const char* ph, const char* key) {
  if (!modes.contains(mode) || !modes[mode].value("ok", false)) return -1;
  const json& p = modes[mode]["phases"];
  if (!p.contains(ph) || !p[ph].contains(key)) return -1;
  return p[ph][key].get<double>();
}

}  // namespace

json RunRatios(const json& modes) {
  json out = json::object();
  auto ratio = [](double a, double b) { return a >= 0 && b > 0 ? a / b : -1.0; };
  for (const char* ph : kRatioPhases) {
    double d = PhaseVal(modes, "direct", ph, "units_per_s"), c = PhaseVal(modes, "ceiling", ph, "units_per_s"),
           k = PhaseVal(modes, "kvfs", ph, "units_per_s");
    if (d < 0 && c < 0 && k < 0) continue;
    double kc = PhaseVal(modes, "kvfs", ph, "daemon_cpu_s_per_gb"),
           cc = PhaseVal(modes, "ceiling", ph, "daemon_cpu_s_per_gb");
    out[ph] = {{"direct_units_per_s", d}, {"ceiling_units_per_s", c}, {"kvfs_units_per_s", k},
               {"direct_mb_per_s", PhaseVal(modes, "direct", ph, "mb_per_s")},
               {"ceiling_mb_per_s", PhaseVal(modes, "ceiling", ph, "mb_per_s")},
               {"kvfs_mb_per_s", PhaseVal(modes, "kvfs", ph, "mb_per_s")},
               {"kvfs_vs_direct", ratio(k, d)}, {"kvfs_vs_ceiling", ratio(k, c)}, {"ceiling_vs_direct", ratio(c, d)},
               {"kvfs_daemon_cpu_s_per_gb", kc}, {"ceiling_daemon_cpu_s_per_gb", cc},
               {"daemon_cpu_kvfs_vs_ceiling", ratio(kc, cc)}};
  }
  return out;
}

json MedianRatios(const json& runs) {
  json out = json::object();
  for (const char* ph : kRatioPhases) {
    std::map<std::string, std::vector<double>> vals;
    for (auto& r : runs) {
      if (!r["ratios"].contains(ph)) continue;
      for (auto& [k, v] : r["ratios"][ph].items()) {
        if (v.get<double>() >= 0) vals[k].push_back(v.get<double>());
      }
    }
    if (vals.empty()) continue;
    json o;
    for (auto& [k, v] : vals) {
      std::sort(v.begin(), v.end());
      o[k] = v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
    }
    out[ph] = o;
  }
  return out;
}

namespace {

std::string PhaseLabel(const std::string& ph) {
  if (ph == "load") return "cold load, empty cache";
  if (ph == "load_full") return "cold load, full cache";
  if (ph == "warm_load") return "warm load";
  return ph;
}

void PrintRatioTable(const json& r, bool small) {
  auto num = [](double v) { return v < 0 ? std::string("-") : Fmt(v); };
  auto x = [](double v) {
    char b[32];
    if (v < 0) return std::string("-");
    std::snprintf(b, sizeof(b), "%.2fx", v);
    return std::string(b);
  };
  std::printf("     %-34s %12s %12s %12s %9s %9s   %s\n", "", "direct", "ceiling", "kvfs", "kvfs/dir", "kvfs/ceil",
              "daemon CPU s/GB kvfs / ceiling");
  for (const char* ph : kRatioPhases) {
    if (!r.contains(ph)) continue;
    const json& p = r[ph];
    bool units = small || std::string(ph) == "lookup";
    const char* pre = units ? "" : "mb_per_s";
    auto v = [&](const char* mode) {
      return p.value(units ? std::string(mode) + "_units_per_s" : std::string(mode) + "_" + pre, -1.0);
    };
    std::string cpu = "-";
    double kc = p.value("kvfs_daemon_cpu_s_per_gb", -1.0), cc = p.value("ceiling_daemon_cpu_s_per_gb", -1.0);
    if (kc >= 0 || cc >= 0) {
      char b[96];
      std::snprintf(b, sizeof(b), "%s / %s (%s)", kc >= 0 ? Fmt(kc, 2).c_str() : "-", cc >= 0 ? Fmt(cc, 2).c_str() : "-",
                    x(p.value("daemon_cpu_kvfs_vs_ceiling", -1.0)).c_str());
      cpu = b;
    }
    std::string label = PhaseLabel(ph) + (std::string(ph) == "lookup" ? " probes/s" : units ? " chunks/s" : " MB/s");
    std::printf("     %-34s %12s %12s %12s %9s %9s   %s\n", label.c_str(), num(v("direct")).c_str(),
                num(v("ceiling")).c_str(), num(v("kvfs")).c_str(), x(p.value("kvfs_vs_direct", -1.0)).c_str(),
                x(p.value("kvfs_vs_ceiling", -1.0)).c_str(), cpu.c_str());
  }
}

}  // namespace

void PrintRuns(const json& pj) {
  if (!pj.contains("runs")) return;
  const json& runs = pj["runs"];
  if (runs.size() < 2 && !runs[0]["modes"].contains("ceiling")) return;  // the table above says it all
  bool small = pj["chunk_bytes"].get<uint64_t>() < 65536;
  std::printf("   kvfs vs direct and vs the ceiling (kvfs-nfsim at 0 latency over the same directory), %zu run%s:\n",
              runs.size(), runs.size() == 1 ? "" : "s");
  for (size_t i = 0; i < runs.size(); ++i) {
    std::string la;
    for (const char* mode : {"direct", "ceiling", "kvfs", "tmpfs"}) {  // fixed order
      if (!runs[i]["modes"].contains(mode)) continue;
      const json& r = runs[i]["modes"][mode];
      if (!r.contains("loadavg") || !r["loadavg"].contains("end")) continue;
      char b[96];
      std::snprintf(b, sizeof(b), "  %s %.2f -> %.2f", mode, r["loadavg"]["start"]["1m"].get<double>(),
                    r["loadavg"]["end"]["1m"].get<double>());
      la += b;
    }
    std::printf("   run %zu/%zu, load average (1 min) start -> end:%s\n", i + 1, runs.size(), la.c_str());
    PrintRatioTable(runs[i]["ratios"], small);
  }
  if (runs.size() > 1) {
    std::printf("   median of the %zu runs:\n", runs.size());
    PrintRatioTable(pj["median"], small);
  }
}

}  // namespace kvfs::bench
