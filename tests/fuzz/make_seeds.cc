// Writes the seed corpus of the fuzz targets (tests/data/fuzz/): one well-formed journal entry of each
// op and of each entry version (2: a PUT with its xattr set, 3: a PUT of an extent map, 4: EXCHANGE and a special file, 5: a PUT of
// an extent delta; fuzz_corpus_test checks the coverage) and a few small segment files (sealed,
// unsealed, prefixed with the fix-up byte of FuzzSegment).
//
//   g++ -std=c++20 -I. tests/fuzz/make_seeds.cc index/journal_format.cc build/blockstore/libkvfs_blockstore.a \
//       -luring -lxxhash -lspdlog -lfmt -lcurl -ltinyxml2 -lcrypto -o /tmp/make_seeds && /tmp/make_seeds tests/data/fuzz
#include <cstdio>
#include <filesystem>
#include <memory>
#include <fstream>
#include <string>

#include "blockstore/env.h"
#include "blockstore/extent_map.h"
#include "blockstore/segment_writer.h"
#include "index/journal_format.h"

using namespace kvfs;

static void Write(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::filesystem::path out = argv[1];
  std::filesystem::create_directories(out / "journal_entry");
  std::filesystem::create_directories(out / "segment");
  Location loc;
  loc.segment = SegmentId{"gpu7", 3, 9};
  loc.record_offset = 4096;
  loc.value_offset = 8192;
  loc.length = 70000;
  EntryAttrs a;
  a.mode = 0100644;
  a.uid = 1000;
  a.gid = 1000;
  a.size = 70000;
  const uint64_t st = (1700000000000ull << 16) | 5;
  EntryAttrs fifo = a;
  fifo.mode = 010644;  // S_IFIFO | 0644: a special file's SYMLINK entry (version 4)
  fifo.size = 0;
  const JournalEntry entries[] = {
      JournalEntry::Put("/vllm/layer0/chunk-00ab.bin", loc, a, st),
      JournalEntry::Put("/small", Location{}, a, st, "inline bytes"),
      JournalEntry::Rename("/a.tmp", "/a", loc, st),
      JournalEntry::Unlink("/a", st),
      JournalEntry::Mkdir("/d", a, st),
      JournalEntry::Rmdir("/d", st),
      JournalEntry::Setattr("/a", a, 0x3f, st),
      JournalEntry::Xattr("/a", "user.k", "v", false, st),
      JournalEntry::Seal(loc.segment, st),
      JournalEntry::Drop(loc.segment, st),
      JournalEntry::Move("/a", loc, loc, st),
      JournalEntry::Cut(FileRef{FileRef::Kind::kJournal, "gpu7", 3, 1}, 65536, st),
      JournalEntry::Symlink("/l", "/a", a, st),
      JournalEntry::Exchange("/a", "/b", st),
      JournalEntry::Special("/fifo", fifo, 0, st),
  };
  int i = 0;
  for (const auto& e : entries) {
    std::string enc;
    EncodeJournalEntry(e, &enc);
    char name[64];
    std::snprintf(name, sizeof(name), "seed-%02d-%s", i++, JournalOpName(e.op));
    Write(out / "journal_entry" / name, enc);
  }
  // Entry version 3: a 1 MiB file of two extents over two records and a hole between them.
  Location loc2 = loc;
  loc2.segment.seq = 10;
  ExtentMap m(1 << 20);
  if (!m.Overlay(0, 4096, loc, 0).ok() || !m.Overlay(65536, 8192, loc2, 4096).ok()) return 1;
  EntryAttrs ma = a;
  ma.size = m.size();
  JournalEntry ext = JournalEntry::Put("/slots/file.bin", Location{}, ma, st);
  ext.extents = ExtentMapRef(std::make_shared<const ExtentMap>(m));
  // Entry version 5: the next version as a delta against that one (one 4 KiB page rewritten, a hole
  // punched, the size grown).
  ExtentMap next = m;
  Location loc3 = loc;
  loc3.segment.seq = 11;
  if (!next.Overlay(8192, 4096, loc3, 0).ok()) return 1;
  next.Punch(65536, 4096);
  next.Resize(2 << 20);
  JournalEntry dput = JournalEntry::Put("/slots/file.bin", Location{}, ma, st + 1);
  ExtentDelta d = DiffExtentMaps(m, next);
  d.base_stamp = st;
  d.map_checksum = 0x0123456789abcdefull;
  dput.attrs.size = d.size;
  dput.delta = d;
  // Entry version 2: a PUT with its xattr set (vLLM's checksum xattr on the final name).
  JournalEntry xput = JournalEntry::Put("/vllm/layer0/chunk-00ac.bin", loc, a, st);
  xput.xattrs = std::vector<std::pair<std::string, std::string>>{{"user.vllm_kv_crc32", "1234abcd"}};
  for (const auto& [name, e] : {std::pair<const char*, const JournalEntry*>{"seed-v2-PUT-xattrs", &xput},
                                {"seed-v3-PUT-extents", &ext},
                                {"seed-v5-PUT-delta", &dput}}) {
    std::string enc;
    EncodeJournalEntry(*e, &enc);
    JournalEntry back;
    if (!DecodeJournalEntry(enc, &back).ok()) return 1;  // a seed must be well formed
    Write(out / "journal_entry" / name, enc);
  }
  JournalFileHeader h;
  h.generation = 3;
  h.file_number = 1;
  h.node = "gpu7";
  Write(out / "journal_entry" / "seed-file-header", EncodeJournalFileHeader(h));

  // Segments: 64 KiB segment size, two records, sealed on close; and one left unsealed.
  const std::filesystem::path tmp = std::filesystem::temp_directory_path() / "kvfs-make-seeds";
  std::filesystem::remove_all(tmp);
  for (bool seal : {true, false}) {
    SegmentWriterOptions o;
    o.segment_size = 64 * 1024;
    o.seal_on_close = seal;
    auto w = SegmentWriter::Open(Env::Posix(), (tmp / (seal ? "s" : "u")).string(), "gpu7", 1, o);
    if (!w.ok()) return 1;
    std::string v1(5000, 'x'), v2(100, 'y');
    if (!(*w)->Append("/vllm/k1", st, {v1}).ok() || !(*w)->Append("/vllm/k2", st, {v2}).ok()) return 1;
    if (!(*w)->Close().ok()) return 1;
    std::string bytes;
    if (!Env::Posix()->ReadFileToString((*w)->SegmentPath(1), &bytes).ok()) return 1;
    for (uint8_t fix : {uint8_t{0}, uint8_t{7}}) {
      Write(out / "segment" / (std::string(seal ? "sealed" : "unsealed") + "-fix" + std::to_string(fix)),
            std::string(1, static_cast<char>(fix)) + bytes);
    }
  }
  std::filesystem::remove_all(tmp);
  return 0;
}
