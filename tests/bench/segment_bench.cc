// Segment writer/reader throughput vs plain write/pread of the same bytes to one file.
//
//   build-seg/tests/kvfs_micro_bench --benchmark_filter='Segment|Plain'
//   (docs/benchmarks.md "Micro-benchmarks" has the figures)
//
// Args: {value bytes, O_DIRECT 0/1}. Files live in a fresh directory under /var/tmp (a disk file system;
// KVFS_BENCH_DIR overrides). Append+Sync = one record then fdatasync per iteration (the worst case for
// group commit: no batching); reads are page-cache hot unless O_DIRECT.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "blockstore/env.h"
#include "blockstore/segment_reader.h"
#include "blockstore/node_dir.h"
#include "blockstore/segment_writer.h"

namespace kvfs {
namespace {

std::string BenchDir() {
  const char* base = getenv("KVFS_BENCH_DIR");
  std::string tmpl = std::string(base ? base : "/var/tmp") + "/kvfs-bench-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) abort();
  return tmpl;
}

std::string Value(size_t n) {
  std::string v(n, '\0');
  std::mt19937_64 rng(n);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t x = rng();
    std::memcpy(&v[i], &x, 8);
  }
  return v;
}

char* AlignedAlloc(size_t n) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, AlignUp(n)) != 0) abort();
  return static_cast<char*>(p);
}

constexpr uint64_t kRotateBytes = 512ull << 20;  // keep disk use bounded

void BM_SegmentAppendSync(benchmark::State& state) {
  const size_t n = state.range(0);
  const bool direct = state.range(1);
  const std::string dir = BenchDir();
  const std::string value = Value(n);
  SegmentWriterOptions o;
  o.direct_io = direct;
  o.segment_size = 64ull << 20;
  auto w = std::move(*SegmentWriter::Open(Env::Posix(), dir, "bench", 1, o));
  uint64_t written = 0;
  for (auto _ : state) {
    auto loc = w->Append("/bench/chunk", 1, {value});
    if (!loc.ok()) state.SkipWithError(loc.status().ToString().c_str());
    Status s = w->Sync();
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    written += n;
    if (written > kRotateBytes) {
      state.PauseTiming();
      for (const auto& sealed : w->TakeSealed()) std::filesystem::remove(w->SegmentPath(sealed.id.seq));
      written = 0;
      state.ResumeTiming();
    }
  }
  state.SetBytesProcessed(state.iterations() * n);
  w->Close();
  std::filesystem::remove_all(dir);
}

void BM_PlainWriteSync(benchmark::State& state) {
  const size_t n = state.range(0);
  const bool direct = state.range(1);
  const std::string dir = BenchDir();
  const std::string path = dir + "/plain";
  char* buf = AlignedAlloc(n);
  std::string v = Value(n);
  std::memcpy(buf, v.data(), n);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | (direct ? O_DIRECT : 0), 0644);
  const size_t wlen = direct ? AlignUp(n) : n;
  uint64_t off = 0;
  for (auto _ : state) {
    if (::pwrite(fd, buf, wlen, static_cast<off_t>(off)) != static_cast<ssize_t>(wlen)) state.SkipWithError("pwrite");
    if (::fdatasync(fd) != 0) state.SkipWithError("fdatasync");
    off += AlignUp(n);
    if (off > kRotateBytes) {
      state.PauseTiming();
      if (::ftruncate(fd, 0) != 0) state.SkipWithError("ftruncate");
      off = 0;
      state.ResumeTiming();
    }
  }
  state.SetBytesProcessed(state.iterations() * n);
  ::close(fd);
  free(buf);
  std::filesystem::remove_all(dir);
}

constexpr int kReadValues = 32;

// Writes kReadValues values of n bytes into segment 1-1 under dir (locations into *locs) and opens it
// for reading (O_DIRECT if direct).
std::unique_ptr<BackingFile> WriteReadSegment(const std::string& dir, size_t n, bool direct,
                                                   std::vector<Location>* locs) {
  const std::string value = Value(n);
  {
    auto w = std::move(*SegmentWriter::Open(Env::Posix(), dir, "bench", 1, SegmentWriterOptions{}));
    for (int i = 0; i < kReadValues; ++i) locs->push_back(*w->Append("/bench/chunk" + std::to_string(i), 1, {value}));
    w->Close();
  }
  OpenOptions oo;
  oo.direct = direct;
  return std::move(*Env::Posix()->Open(dir + "/" + SegmentFileName(1, 1), oo));
}

void BM_SegmentReadValue(benchmark::State& state) {
  const size_t n = state.range(0);
  const bool direct = state.range(1);
  const std::string dir = BenchDir();
  std::vector<Location> locs;
  auto f = WriteReadSegment(dir, n, direct, &locs);
  char* out = AlignedAlloc(n);
  size_t i = 0;
  for (auto _ : state) {
    size_t got = 0;
    Status s = ReadValue(f.get(), locs[i++ % locs.size()], 0, n, out, &got);
    if (!s.ok() || got != n) state.SkipWithError(s.ToString().c_str());
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(state.iterations() * n);
  free(out);
  f.reset();
  std::filesystem::remove_all(dir);
}

// The Store's cache-miss load: the whole value (metadata + value in one read into a fresh aligned
// ValueBuffer, verified in place), as StoreImpl::LoadValue does.
void BM_SegmentLoadWholeValue(benchmark::State& state) {
  const size_t n = state.range(0);
  const bool direct = state.range(1);
  const std::string dir = BenchDir();
  std::vector<Location> locs;
  auto f = WriteReadSegment(dir, n, direct, &locs);
  size_t i = 0;
  for (auto _ : state) {
    auto v = LoadWholeValue(f.get(), locs[i++ % locs.size()]);
    if (!v.ok() || (*v)->size() != n) state.SkipWithError(v.status().ToString().c_str());
    benchmark::DoNotOptimize(v);
  }
  state.SetBytesProcessed(state.iterations() * n);
  f.reset();
  std::filesystem::remove_all(dir);
}

void BM_PlainPread(benchmark::State& state) {
  const size_t n = state.range(0);
  const bool direct = state.range(1);
  const std::string dir = BenchDir();
  const std::string path = dir + "/plain";
  char* buf = AlignedAlloc(n);
  std::string v = Value(n);
  std::memcpy(buf, v.data(), n);
  {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    for (int i = 0; i < kReadValues; ++i) {
      if (::pwrite(fd, buf, n, static_cast<off_t>(i * AlignUp(n))) != static_cast<ssize_t>(n)) abort();
    }
    ::fsync(fd);
    ::close(fd);
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
  size_t i = 0;
  for (auto _ : state) {
    const off_t off = static_cast<off_t>((i++ % kReadValues) * AlignUp(n));
    if (::pread(fd, buf, direct ? AlignUp(n) : n, off) < static_cast<ssize_t>(n)) state.SkipWithError("pread");
    benchmark::DoNotOptimize(buf);
  }
  state.SetBytesProcessed(state.iterations() * n);
  ::close(fd);
  free(buf);
  std::filesystem::remove_all(dir);
}

void Args(benchmark::internal::Benchmark* b) {
  for (int64_t size : {147456, 2359296}) {
    for (int64_t direct : {0, 1}) b->Args({size, direct});
  }
  b->ArgNames({"bytes", "direct"})->UseRealTime();
}

BENCHMARK(BM_SegmentAppendSync)->Apply(Args);
BENCHMARK(BM_PlainWriteSync)->Apply(Args);
BENCHMARK(BM_SegmentReadValue)->Apply(Args);
BENCHMARK(BM_SegmentLoadWholeValue)->Apply(Args);
BENCHMARK(BM_PlainPread)->Apply(Args);

}  // namespace
}  // namespace kvfs
