// Writes the seed corpus of the fuzz targets (tests/data/fuzz/): one well-formed journal entry of each
// op and a few small segment files (sealed, unsealed, prefixed with the fix-up byte of FuzzSegment).
//
//   g++ -std=c++20 -I. tests/fuzz/make_seeds.cc index/journal_format.cc build/blockstore/libkvfs_blockstore.a \
//       -luring -lxxhash -lspdlog -lfmt -o /tmp/make_seeds && /tmp/make_seeds tests/data/fuzz
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "blockstore/env.h"
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
  };
  int i = 0;
  for (const auto& e : entries) {
    std::string enc;
    EncodeJournalEntry(e, &enc);
    char name[64];
    std::snprintf(name, sizeof(name), "seed-%02d-%s", i++, JournalOpName(e.op));
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
