// kvfs-bench's profiles: one per connector row of docs/design.md §10 (vLLM, llm-d, LMCache fs and nixl,
// SGLang file and nixl) plus "creates", each the connector's exact syscall sequence for init, store,
// load and one lookup probe (traces in tests/data/traces), issued through tools/bench_io.h. Called by
// RunMode (tools/bench_phases.cc) and main (tools/kvfs_bench.cc, which picks them by name).
//
// Thread safety: Profiles() returns fresh values; store/load/exists run on many threads at once (each
// chunk id on one thread), init on one thread before them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kvfs::bench {

struct Ctx {
  std::string root;
  size_t size = 0;
  uint64_t salt = 0;
};

struct Profile {
  std::string name, what;
  size_t default_size;
  bool stop_at_first_miss;  // lookup: stat until the first miss (llm-d, SGLang file) vs every key
  std::function<void(const Ctx&)> init;
  std::function<void(const Ctx&, uint64_t id, char* buf)> store;  // buf: aligned, size bytes, filled
  std::function<void(const Ctx&, uint64_t id, char* buf)> load;   // fills buf (size bytes)
  std::function<bool(const Ctx&, uint64_t id)> exists;            // one lookup probe
};

// LMCache fs: its 28 B header before the data (a chunk must be larger).
inline constexpr size_t kLmcHeader = 28;

// Every profile, in the order of docs/design.md §10 (--profile all).
std::vector<Profile> Profiles();

}  // namespace kvfs::bench
