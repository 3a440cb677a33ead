// ObjectStore: the object-shaped backing interface of the S3 tier (issue #19, docs/s3.md), with two
// implementations: POSIX (files under a directory, through an Env) and S3 (an S3Client and a key prefix).
//
// Status: a first cut of the interface the engine will use for what it keeps as whole immutable objects
// on the shared tier (sealed segments, journal objects, claims, OWNER/HEARTBEAT, snapshots). Nothing in
// the engine uses it yet; the mount is unchanged. Its contract is tested on both implementations
// (tests/s3/object_store_contract.h: tests/unit/object_store_test.cc on POSIX, tests/s3/ on Ceph RGW).
//
// Keys: '/'-separated relative names ("nodes/a/seg/...kseg"), no leading '/', no "." or ".." parts.
// Listing is flat over whole keys in byte order, as S3's ListObjectsV2.
//
// Errors (blockstore/status.h): a missing key -> NotFound; an if_absent Put on an existing key -> Exists;
// the rest as the implementation's Env or S3Client reports them.
//
// Thread safety: every method is thread-safe. One writer per key is the caller's rule (as today's
// "one writer per file"); if_absent is the only arbitration between writers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "blockstore/env.h"
#include "blockstore/s3_client.h"
#include "blockstore/status.h"

namespace kvfs {

struct ObjectInfo {
  std::string key;
  uint64_t size = 0;
};

struct ObjectPage {
  std::vector<ObjectInfo> objects;  // key order, all > start_after
  bool truncated = false;           // more follow: List again after objects.back().key
};

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;
  // Stores data as the whole object `key`, visible whole or not at all (replacing any old one), or
  // with if_absent only if no object `key` exists (Exists otherwise; exactly one of several racing
  // creators succeeds when AtomicCreate()).
  virtual Status Put(const std::string& key, std::string_view data, bool if_absent) = 0;
  // Stores the first `size` bytes of a local file (a sealed segment staged on disk) as `key`.
  virtual Status PutFile(const std::string& key, BackingFile* file, uint64_t size) = 0;
  // Bytes [offset, offset + n) into buf; *got < n only at the end of the object (0 past it).
  virtual Status Read(const std::string& key, uint64_t offset, size_t n, void* buf, size_t* got) = 0;
  virtual Result<ObjectInfo> Stat(const std::string& key) = 0;
  // OK whether or not it existed.
  virtual Status Delete(const std::string& key) = 0;
  // Keys starting with prefix, strictly after start_after ("" = from the first), at most max_keys.
  virtual Result<ObjectPage> List(const std::string& prefix, const std::string& start_after,
                                  uint32_t max_keys) = 0;
  // Whether if_absent arbitrates between racing creators (docs/s3.md "Conditional writes").
  virtual bool AtomicCreate() const = 0;
  // "posix:ROOT" or "s3://BUCKET/PREFIX", for messages.
  virtual std::string Describe() const = 0;
};

// Objects as files under root ("a/b" -> ROOT/a/b; directories made as needed). Put writes a temporary
// file, syncs it and renames it over the key (then syncs the directory); with if_absent the file is
// created with O_EXCL and written in place, so exactly one creator wins but a reader may see it shorter
// until Put returns. List walks the directories under the prefix's directory and sorts.
std::unique_ptr<ObjectStore> NewPosixObjectStore(Env* env, std::string root);

// Objects as PREFIX + key in the client's bucket (prefix "" or ending in '/'). atomic_create: what
// ProbeConditionalPut found for this server.
std::unique_ptr<ObjectStore> NewS3ObjectStore(std::shared_ptr<S3Client> client, std::string prefix,
                                              bool atomic_create);

// Whether the server honours If-None-Match: * on PUT: puts probe_key twice with it, true when the second
// is refused (Exists), false when it succeeds; deletes probe_key either way. Errors of the PUTs pass on.
Result<bool> ProbeConditionalPut(S3Client* client, const std::string& probe_key);

}  // namespace kvfs
