// The contract every ObjectStore implementation (blockstore/object_store.h) keeps, as GoogleTest checks:
// run on POSIX by tests/unit/object_store_test.cc and on S3 (Ceph RGW) by tests/s3/s3_client_test.cc.
// store must be empty; scratch_dir is a local directory for a staged file.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "blockstore/env.h"
#include "blockstore/object_store.h"

namespace kvfs {

inline std::string ObjContractRead(ObjectStore* store, const std::string& key, uint64_t off, size_t n,
                                   Status* st = nullptr) {
  std::string buf(n, '\0');
  size_t got = 0;
  Status s = store->Read(key, off, n, buf.data(), &got);
  if (st) *st = s;
  if (!st) {
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  buf.resize(s.ok() ? got : 0);
  return buf;
}

inline void RunObjectStoreContract(ObjectStore* store, const std::string& scratch_dir) {
  SCOPED_TRACE(store->Describe());
  // Whole objects, ranged reads, replacement.
  ASSERT_TRUE(store->Put("nodes/a/HEARTBEAT", "hello", false).ok());
  auto st = store->Stat("nodes/a/HEARTBEAT");
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->size, 5u);
  EXPECT_EQ(st->key, "nodes/a/HEARTBEAT");
  EXPECT_EQ(ObjContractRead(store, "nodes/a/HEARTBEAT", 1, 3), "ell");
  EXPECT_EQ(ObjContractRead(store, "nodes/a/HEARTBEAT", 3, 10), "lo");
  EXPECT_EQ(ObjContractRead(store, "nodes/a/HEARTBEAT", 5, 1), "");
  EXPECT_EQ(ObjContractRead(store, "nodes/a/HEARTBEAT", 100, 1), "");
  ASSERT_TRUE(store->Put("nodes/a/HEARTBEAT", "replaced", false).ok());
  EXPECT_EQ(ObjContractRead(store, "nodes/a/HEARTBEAT", 0, 100), "replaced");

  // if_absent: one creator.
  ASSERT_TRUE(store->Put("nodes/a/claim/00000000000000000002", "node-a", true).ok());
  Status s = store->Put("nodes/a/claim/00000000000000000002", "node-b", true);
  EXPECT_TRUE(s.IsExists()) << s.ToString();
  EXPECT_EQ(ObjContractRead(store, "nodes/a/claim/00000000000000000002", 0, 100), "node-a");
  EXPECT_TRUE(store->AtomicCreate());

  // Missing keys, deletes.
  EXPECT_TRUE(store->Stat("nodes/a/none").status().IsNotFound());
  ObjContractRead(store, "nodes/a/none", 0, 10, &s);
  EXPECT_TRUE(s.IsNotFound()) << s.ToString();
  EXPECT_TRUE(store->Delete("nodes/a/none").ok());
  ASSERT_TRUE(store->Put("nodes/a/gone", "x", false).ok());
  ASSERT_TRUE(store->Delete("nodes/a/gone").ok());
  EXPECT_TRUE(store->Stat("nodes/a/gone").status().IsNotFound());

  // Flat listing in key order, pages after a key.
  std::vector<std::string> keys;
  for (int i = 0; i < 12; ++i) {
    char k[64];
    std::snprintf(k, sizeof k, "nodes/a/journal/%020d-%020d", 3, i * 5);
    keys.push_back(k);
  }
  std::vector<std::string> shuffled = keys;
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(11));
  for (const auto& k : shuffled) ASSERT_TRUE(store->Put(k, k.substr(k.size() - 3), true).ok());
  ASSERT_TRUE(store->Put("nodes/a/journal2/x", "y", false).ok());
  std::vector<std::string> seen;
  std::string after;
  int pages = 0;
  for (;;) {
    auto p = store->List("nodes/a/journal/", after, 5);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    ++pages;
    for (const auto& o : p->objects) {
      seen.push_back(o.key);
      EXPECT_EQ(o.size, 3u);
    }
    if (!p->truncated) break;
    ASSERT_FALSE(p->objects.empty());
    after = p->objects.back().key;
  }
  EXPECT_EQ(seen, keys);
  EXPECT_EQ(pages, 3);
  auto tail = store->List("nodes/a/journal/", keys[8], 100);
  ASSERT_TRUE(tail.ok());
  ASSERT_EQ(tail->objects.size(), 3u);
  EXPECT_EQ(tail->objects[0].key, keys[9]);
  // A prefix that is not a whole directory name matches across directories, as on S3.
  auto both = store->List("nodes/a/journal", "", 100);
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(both->objects.size(), keys.size() + 1);
  EXPECT_EQ(both->objects.back().key, "nodes/a/journal2/x");
  auto none = store->List("nodes/b/", "", 100);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->objects.empty());

  // A staged local file.
  const std::string path = scratch_dir + "/staged.kseg";
  std::string data(3 << 20, '\0');
  std::mt19937 rng(5);
  for (auto& c : data) c = static_cast<char>(rng());
  {
    OpenOptions o;
    o.write = o.create = true;
    auto f = Env::Posix()->Open(path, o);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Write(0, data.data(), data.size()).ok());
  }
  {
    auto f = Env::Posix()->Open(path, OpenOptions{});
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(
        store->PutFile("nodes/a/seg/00000000000000000003-00000000000000000001.kseg", f->get(), data.size())
            .ok());
  }
  EXPECT_TRUE(ObjContractRead(store, "nodes/a/seg/00000000000000000003-00000000000000000001.kseg", 0,
                              data.size() + 10) == data);
  EXPECT_EQ(ObjContractRead(store, "nodes/a/seg/00000000000000000003-00000000000000000001.kseg", 1 << 20, 7),
            data.substr(1 << 20, 7));
  Env::Posix()->Remove(path);

  // Keys that are not keys.
  EXPECT_TRUE(store->Put("/abs", "x", false).IsInvalidArgument());
  EXPECT_TRUE(store->Put("a/../b", "x", false).IsInvalidArgument());
  EXPECT_TRUE(store->Put("a//b", "x", false).IsInvalidArgument());
}

}  // namespace kvfs
