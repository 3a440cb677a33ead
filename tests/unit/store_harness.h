// Shared helpers of the Store tests (store_test.cc, fsck_test.cc, corruption_test.cc, store_fault_test.cc,
// ...): a Store over a temp backing directory (mkdtemp under /var/tmp, removed at the end; no background
// peer polls), files written as the FUSE layer does, byte flipping, and self-describing contents (the
// name and a checksum inside every value).
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <xxhash.h>

#include "blockstore/node_dir.h"
#include "index/journal.h"
#include "engine/store.h"

namespace kvfs::testing_harness {

namespace fs = std::filesystem;

// Content of `n` bytes that names its file and carries a checksum: "<name>|<xxh64 hex>|" + pattern.
inline std::string Content(const std::string& name, size_t n, uint64_t seed) {
  std::string body(n, '\0');
  std::mt19937_64 rng(seed ^ XXH64(name.data(), name.size(), 0));
  for (size_t i = 0; i < n; i += 8) {
    uint64_t x = rng();
    memcpy(&body[i], &x, std::min<size_t>(8, n - i));
  }
  std::string head = name + "|";
  if (head.size() <= n) memcpy(&body[0], head.data(), head.size());
  return body;
}

class StoreHarness : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/var/tmp/kvfs-harness-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    backing_ = root_ + "/backing";
    index_ = root_ + "/index";
    fs::create_directories(backing_);
  }
  void TearDown() override {
    store_.reset();
    fs::remove_all(root_);
  }
  StoreOptions Options(Env* env = nullptr) {
    StoreOptions o;
    o.backing_dir = backing_;
    o.index_dir = index_;
    o.node_id = node_;
    o.segment_size = segment_size_;
    o.checkpoint_on_close = checkpoint_on_close_;
    o.cache_size = 64ull << 20;
    o.group_commit_interval_ms = 5;
    o.force_takeover = true;
    o.peer_poll_ms = 0;
    o.heartbeat_interval_ms = heartbeat_interval_ms_;
    o.sync_interval_ms = sync_interval_ms_;
    o.env = env;
    return o;
  }
  void OpenStore(Env* env = nullptr) {
    auto s = Store::Open(Options(env));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
  }
  void CloseStore() {
    ASSERT_TRUE(store_->Close().ok());
    store_.reset();
  }
  // Staged create, record, commit (as the FUSE layer does). Returns the committed location.
  Location WriteFile(const std::string& name, const std::string& content, Status* err = nullptr,
                     uint64_t parent = kRootIno) {
    auto n = store_->CreateFile(parent, name, S_IFREG | 0644, 0, 0, false);
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    if (!n.ok()) return {};
    Location loc;
    if (!content.empty()) {
      auto l = store_->WriteRecord(n->attr.ino, {content});
      if (!l.ok()) {
        if (err) *err = l.status();
        else ADD_FAILURE() << l.status().ToString();
        return {};
      }
      loc = *l;
    }
    Attr a = n->attr;
    a.size = content.size();
    Status s = store_->CommitFile(n->attr.ino, loc, a);
    if (err) *err = s;
    else EXPECT_TRUE(s.ok()) << s.ToString();
    return loc;
  }
  // Whole content; *st = the first error (NotFound if the name is absent).
  std::string ReadAll(const std::string& name, Status* st = nullptr) {
    Status dummy;
    if (!st) st = &dummy;
    *st = Status::OK();
    auto n = store_->Lookup(kRootIno, name);
    if (!n.ok()) {
      *st = n.status();
      return "";
    }
    std::string out(n->attr.size, '\0');
    size_t got = 0;
    if (n->attr.size) *st = store_->Read(n->location, 0, out.size(), out.data(), &got);
    if (st->ok() && got != out.size()) *st = Status::Corruption("short read");
    return st->ok() ? out : "";
  }
  std::vector<std::string> List() {
    std::vector<std::string> names;
    EXPECT_TRUE(store_->ReadDir(kRootIno, 0, [&](const DirEntry& e) {
      names.push_back(e.name);
      return true;
    }).ok());
    return names;
  }
  std::string NodeDir() const { return NodeDirPath(backing_, node_); }
  std::string SegPath(const Location& l) const { return SegmentFilePath(backing_, l.segment); }
  std::vector<std::string> JournalPaths() const {
    std::vector<JournalFile> files;
    EXPECT_TRUE(ListJournalFiles(Env::Posix(), NodeDir(), &files).ok());
    std::vector<std::string> out;
    for (auto& f : files) out.push_back(f.path);
    return out;
  }
  std::vector<std::string> SegmentPaths() const {
    std::vector<std::string> out;
    for (auto& e : fs::directory_iterator(SegmentDirPath(backing_, node_))) {
      if (e.path().extension() == ".kseg") out.push_back(e.path().string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  static void FlipByte(const std::string& path, uint64_t offset, uint8_t mask = 0x5a) {
    int fd = open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0) << path;
    uint8_t b = 0;
    ASSERT_EQ(pread(fd, &b, 1, static_cast<off_t>(offset)), 1) << path << " @" << offset;
    b ^= mask;
    ASSERT_EQ(pwrite(fd, &b, 1, static_cast<off_t>(offset)), 1);
    close(fd);
  }
  static void AppendBytes(const std::string& path, const std::string& bytes) {
    int fd = open(path.c_str(), O_WRONLY | O_APPEND);
    ASSERT_GE(fd, 0) << path;
    ASSERT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    close(fd);
  }

  std::string root_, backing_, index_;
  std::string node_ = "node-a";
  uint64_t segment_size_ = 4ull << 20;
  bool checkpoint_on_close_ = true;  // false: a rebuild reads the journals, not a snapshot
  uint32_t heartbeat_interval_ms_ = StoreOptions().heartbeat_interval_ms;
  // 0: every group commit fdatasyncs (what most tests assume: a file is durable one round after its
  // commit); tests of visibility rounds set it (StoreOptions' default is 1000).
  uint32_t sync_interval_ms_ = 0;
  std::unique_ptr<Store> store_;
};

}  // namespace kvfs::testing_harness
