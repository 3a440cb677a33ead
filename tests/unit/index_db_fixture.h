// IndexDbFixture: a gtest fixture holding one IndexDb (index/index_db.h) in a fresh temporary directory,
// removed at tear-down; shared by index_db_test.cc and index_parts_test.cc so both open, reopen and
// populate an index the same way. One test thread uses it at a time (gtest's rule for fixtures).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "index/index_db.h"

namespace kvfs {

class IndexDbFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvfs_index_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = std::string(tmpl) + "/idx";
    Reopen();
  }
  void TearDown() override {
    db_.reset();
    std::filesystem::remove_all(std::filesystem::path(dir_).parent_path());
  }
  // Closes the index (if open) and opens it again as `node`.
  void Reopen(const std::string& node = "n1") {
    db_.reset();
    IndexDbOptions o;
    o.dir = dir_;
    o.node_id = node;
    auto r = IndexDb::Open(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    db_ = std::move(*r);
  }
  // The inode of a new directory parent/name (0 after a failed expectation).
  uint64_t Mkdir(uint64_t parent, const std::string& name) {
    auto r = db_->Mkdir(parent, name, 0755, 0, 0);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->attr.ino : 0;
  }
  // Creates and commits a file at parent/name located at loc (size loc.length).
  Node CommitNew(uint64_t parent, const std::string& name, const Location& loc, uint64_t stamp) {
    auto c = db_->CreateFile(parent, name, 0644, 1000, 1000, true);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    Attr a = c->attr;
    a.size = loc.length;
    auto n = db_->CommitFile(c->attr.ino, loc, a, stamp);
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    return n.ok() ? *n : Node{};
  }

  std::string dir_;
  std::unique_ptr<IndexDb> db_;
};

}  // namespace kvfs
