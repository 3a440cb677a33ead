// kvfs-bench's profiles: one per connector row of docs/design.md §10 (vLLM, llm-d, LMCache fs and nixl,
// SGLang file and nixl) plus "creates" and the 2026 patterns (docs/benchmarks.md "Profiles"), each the
// connector's exact syscall sequence for init, store, load and one lookup probe (traces in
// tests/data/traces), issued through tools/bench_io.h. Called by RunMode (tools/bench_phases.cc) and
// main (tools/kvfs_bench.cc, which picks them by name).
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
  uint64_t chunks = 0;       // chunks stored per run (--chunks): ids 0..chunks-1
  unsigned ranks = 4;        // vllm-tp-pwrite: writer threads per chunk (--ranks)
  uint64_t file_bytes = 0;   // vllm-slotfile: size of the slot file (--file-bytes; 0 = max(chunks x size, 64 MiB))
  unsigned trie_depth = 16;  // vua-trie: chunks per sequence = deepest level (--trie-depth)
};

struct Profile {
  std::string name, what;
  size_t default_size;
  bool stop_at_first_miss;  // lookup: stat until the first miss (llm-d, SGLang file) vs every key
  std::function<void(const Ctx&)> init;
  std::function<void(const Ctx&, uint64_t id, char* buf)> store;  // buf: aligned, size bytes, filled
  std::function<void(const Ctx&, uint64_t id, char* buf)> load;   // fills buf (size bytes)
  std::function<bool(const Ctx&, uint64_t id)> exists;            // one lookup probe
  // Closes what the profile keeps open across calls (dynamo-g4's fd cache, vllm-slotfile's long-lived
  // fd): called before every client restart and before the stack goes down. Empty for most profiles.
  std::function<void(const Ctx&)> release = nullptr;
  // Prints backing bytes written / read per chunk in the report (the profiles whose cost in bytes, not
  // in metadata operations, is the point: vllm-slotfile's whole-file copy per version).
  bool bytes_per_unit = false;
};

// LMCache fs: its 28 B header before the data (a chunk must be larger).
inline constexpr size_t kLmcHeader = 28;

// Every profile, in the order of docs/design.md §10, then the 2026 patterns (lmcache-link, dynamo-g4,
// vua-trie, vllm-tp-pwrite, vllm-slotfile; docs/benchmarks.md "Profiles") (--profile all).
std::vector<Profile> Profiles();

}  // namespace kvfs::bench
