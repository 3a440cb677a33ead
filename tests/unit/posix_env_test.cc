// Env::Posix(): errno mapping, batched writes through io_uring, O_DIRECT, counters.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "blockstore/env.h"

namespace kvfs {
namespace {

class PosixEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/var/tmp/kvfs-env-XXXXXX";  // /var/tmp: a disk file system (O_DIRECT works)
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  Env* env_ = Env::Posix();
  std::string dir_;
};

TEST_F(PosixEnvTest, MissingFileIsNotFound) {
  auto f = env_->Open(dir_ + "/nope", OpenOptions{});
  ASSERT_FALSE(f.ok());
  EXPECT_TRUE(f.status().IsNotFound());
  EXPECT_NE(f.status().message().find(dir_ + "/nope"), std::string::npos);
  EXPECT_TRUE(env_->Stat(dir_ + "/nope").status().IsNotFound());
  EXPECT_TRUE(env_->Remove(dir_ + "/nope").IsNotFound());
}

TEST_F(PosixEnvTest, ExclusiveCreateOfExistingFileIsExists) {
  OpenOptions o;
  o.write = o.create = o.exclusive = true;
  ASSERT_TRUE(env_->Open(dir_ + "/f", o).ok());
  auto again = env_->Open(dir_ + "/f", o);
  ASSERT_FALSE(again.ok());
  EXPECT_TRUE(again.status().IsExists());
}

// Ops back to back in the file go out as pwritev calls (IOV_MAX ops at a time; empty ops allowed):
// 2,500 ops of 1..4096 bytes land exactly, counted per op, in one batch. With O_DIRECT: aligned ops
// from different buffers (a record's metadata block and its value chunks) land as one direct write.
TEST_F(PosixEnvTest, ContiguousOpsAreWrittenWhole) {
  EnvCounters& c = env_->counters();
  std::vector<std::string> bufs;
  std::vector<WriteOp> ops;
  std::string want;
  uint64_t off = 0;
  for (int i = 0; i < 2500; ++i) {
    bufs.push_back(std::string(i % 7 == 3 ? 0 : 1 + (i * 37) % 4096, static_cast<char>('a' + i % 26)));
  }
  for (auto& b : bufs) {
    ops.push_back(WriteOp{off, b.data(), b.size()});
    off += b.size();
    want += b;
  }
  OpenOptions o;
  o.write = o.create = true;
  auto f = env_->Open(dir_ + "/contig", o);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const uint64_t writes = c.write, batches = c.write_batches, bytes = c.bytes_written;
  ASSERT_TRUE((*f)->Write(ops).ok());
  EXPECT_EQ(c.write - writes, ops.size());
  EXPECT_EQ(c.write_batches - batches, 1u);
  EXPECT_EQ(c.bytes_written - bytes, want.size());
  std::string got(want.size() + 10, '\0');
  size_t n = 0;
  ASSERT_TRUE((*f)->Read(0, got.size(), got.data(), &n).ok());
  ASSERT_EQ(n, want.size());
  got.resize(n);
  EXPECT_TRUE(got == want);

  struct Free {
    void operator()(char* p) const { free(p); }
  };
  std::vector<std::unique_ptr<char, Free>> blocks;
  std::vector<WriteOp> dops;
  std::string dwant;
  for (size_t i = 0; i < 4; ++i) {
    const size_t len = i == 0 ? 4096 : 1u << 20;
    void* p = nullptr;
    ASSERT_EQ(posix_memalign(&p, 4096, len), 0);
    std::memset(p, static_cast<int>('A' + i), len);
    blocks.emplace_back(static_cast<char*>(p));
    dops.push_back(WriteOp{dwant.size(), p, len});
    dwant.append(static_cast<char*>(p), len);
  }
  OpenOptions od;
  od.write = od.create = od.direct = true;
  auto df = env_->Open(dir_ + "/contig-direct", od);
  ASSERT_TRUE(df.ok()) << df.status().ToString();
  ASSERT_TRUE((*df)->Write(dops).ok());
  EXPECT_EQ(std::filesystem::file_size(dir_ + "/contig-direct"), dwant.size());
  void* rb = nullptr;
  ASSERT_EQ(posix_memalign(&rb, 4096, dwant.size()), 0);
  std::unique_ptr<char, Free> rbuf(static_cast<char*>(rb));
  ASSERT_TRUE((*df)->Read(0, dwant.size(), rbuf.get(), &n).ok());
  ASSERT_EQ(n, dwant.size());
  EXPECT_EQ(0, std::memcmp(rbuf.get(), dwant.data(), n));
}

TEST_F(PosixEnvTest, BatchWriteReadBackAndCounters) {
  EnvCounters& c = env_->counters();
  const uint64_t opens = c.open, closes = c.close, batches = c.write_batches, writes = c.write,
                 bytes = c.bytes_written, syncs = c.sync;
  std::vector<std::string> bufs;
  std::vector<WriteOp> ops;
  for (int i = 0; i < 200; ++i) bufs.push_back(std::string(1000 + i, static_cast<char>('a' + i % 26)));
  uint64_t off = 0, total = 0;
  for (auto& b : bufs) {
    ops.push_back(WriteOp{off, b.data(), b.size()});
    off += b.size() + 7;  // leave holes
    total += b.size();
  }
  {
    OpenOptions o;
    o.write = o.create = true;
    auto f = env_->Open(dir_ + "/batch", o);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_TRUE((*f)->Write(ops).ok());
    ASSERT_TRUE((*f)->Sync().ok());
    auto sz = (*f)->Size();
    ASSERT_TRUE(sz.ok());
    EXPECT_EQ(*sz, ops.back().offset + ops.back().len);
    for (const WriteOp& op : ops) {
      std::string got(op.len, '\0');
      size_t n = 0;
      ASSERT_TRUE((*f)->Read(op.offset, op.len, got.data(), &n).ok());
      ASSERT_EQ(n, op.len);
      ASSERT_EQ(0, std::memcmp(got.data(), op.data, op.len));
    }
    size_t n = 99;
    char b[16];
    ASSERT_TRUE((*f)->Read(*sz + 100, sizeof(b), b, &n).ok());
    EXPECT_EQ(n, 0u);
  }
  EXPECT_EQ(c.open - opens, 1u);
  EXPECT_EQ(c.close - closes, 1u);
  EXPECT_EQ(c.write_batches - batches, 1u);
  EXPECT_EQ(c.write - writes, 200u);
  EXPECT_EQ(c.bytes_written - bytes, total);
  EXPECT_EQ(c.sync - syncs, 1u);
}

TEST_F(PosixEnvTest, DirectIoAlignedBatch) {
  OpenOptions o;
  o.write = o.create = o.direct = true;
  auto f = env_->Open(dir_ + "/direct", o);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  void* raw = nullptr;
  ASSERT_EQ(posix_memalign(&raw, 4096, 3 * 4096), 0);
  std::unique_ptr<char, decltype(&free)> buf(static_cast<char*>(raw), &free);
  for (int i = 0; i < 3 * 4096; ++i) buf.get()[i] = static_cast<char>(i * 7);
  WriteOp ops[2] = {{0, buf.get(), 4096}, {8192, buf.get() + 4096, 8192}};
  ASSERT_TRUE((*f)->Write(ops).ok());
  void* rraw = nullptr;
  ASSERT_EQ(posix_memalign(&rraw, 4096, 8192), 0);
  std::unique_ptr<char, decltype(&free)> rbuf(static_cast<char*>(rraw), &free);
  size_t got = 0;
  ASSERT_TRUE((*f)->Read(8192, 8192, rbuf.get(), &got).ok());
  ASSERT_EQ(got, 8192u);
  EXPECT_EQ(0, std::memcmp(rbuf.get(), buf.get() + 4096, 8192));
}

TEST_F(PosixEnvTest, DirsRenameChildrenStatFs) {
  ASSERT_TRUE(env_->CreateDirs(dir_ + "/a/b/c").ok());
  ASSERT_TRUE(env_->CreateDir(dir_ + "/a/b/c").ok());  // exists: OK
  ASSERT_TRUE(env_->WriteFileAtomic(dir_ + "/a/x", "hello").ok());
  std::string s;
  ASSERT_TRUE(env_->ReadFileToString(dir_ + "/a/x", &s).ok());
  EXPECT_EQ(s, "hello");
  ASSERT_TRUE(env_->Rename(dir_ + "/a/x", dir_ + "/a/y").ok());
  std::vector<std::string> names;
  ASSERT_TRUE(env_->GetChildren(dir_ + "/a", &names).ok());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"b", "y"}));
  auto st = env_->Stat(dir_ + "/a/y");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->size, 5u);
  EXPECT_FALSE(st->is_dir);
  EXPECT_TRUE(env_->Stat(dir_ + "/a/b")->is_dir);
  ASSERT_TRUE(env_->SyncDir(dir_ + "/a").ok());
  ASSERT_TRUE(env_->Remove(dir_ + "/a/b/c").ok());  // empty directory
  uint64_t total = 0, avail = 0;
  ASSERT_TRUE(env_->StatFs(dir_, &total, &avail).ok());
  EXPECT_GT(total, 0u);
  EXPECT_LE(avail, total);
}

// Issue #17: what kvfs creates on the export is owner-only unless --backing-mode says otherwise.
TEST_F(PosixEnvTest, CreatesOwnerOnlyFilesAndDirsByDefault) {
  const mode_t old_umask = umask(0);  // the modes themselves, not the test runner's umask
  auto mode_of = [](const std::string& p) {
    struct stat st {};
    EXPECT_EQ(stat(p.c_str(), &st), 0) << p;
    return st.st_mode & 07777;
  };
  OpenOptions o;
  o.write = o.create = true;
  ASSERT_TRUE(env_->CreateDirs(dir_ + "/a/b").ok());
  ASSERT_TRUE(env_->Open(dir_ + "/a/b/seg", o).ok());
  ASSERT_TRUE(env_->WriteFileAtomic(dir_ + "/a/OWNER", "x=1\n").ok());
  EXPECT_EQ(mode_of(dir_ + "/a"), 0700u);
  EXPECT_EQ(mode_of(dir_ + "/a/b"), 0700u);
  EXPECT_EQ(mode_of(dir_ + "/a/b/seg"), 0600u);
  EXPECT_EQ(mode_of(dir_ + "/a/OWNER"), 0600u);

  auto m = ParseBackingMode("0640");
  ASSERT_TRUE(m.ok());
  const BackingModes saved = GetBackingModes();
  SetBackingModes(*m);
  ASSERT_TRUE(env_->CreateDirs(dir_ + "/g").ok());
  ASSERT_TRUE(env_->Open(dir_ + "/g/seg", o).ok());
  SetBackingModes(saved);
  umask(old_umask);
  EXPECT_EQ(mode_of(dir_ + "/g"), 0750u);
  EXPECT_EQ(mode_of(dir_ + "/g/seg"), 0640u);
}

TEST(BackingModeTest, Parse) {
  auto m = ParseBackingMode("640");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->file, 0640u);
  EXPECT_EQ(m->dir, 0750u);
  m = ParseBackingMode("0666");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->dir, 0777u);
  m = ParseBackingMode("0700");  // never executable files; the directory keeps x
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->file, 0600u);
  EXPECT_EQ(m->dir, 0700u);
  for (const char* bad : {"", "0400", "0060", "4600", "0x1ff", "rw-r-----", "06000"}) {
    auto b = ParseBackingMode(bad);
    EXPECT_FALSE(b.ok()) << bad;
    if (!b.ok()) {
      EXPECT_TRUE(b.status().IsInvalidArgument()) << bad;
    }
  }
}

}  // namespace
}  // namespace kvfs
