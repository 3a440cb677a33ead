// ObjectStore's POSIX and S3 implementations. See object_store.h.
#include "blockstore/object_store.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <utility>

namespace kvfs {

namespace {

// Temporary files of Put: "<key>.objtmp-<pid>-<n>"; List never shows them.
constexpr std::string_view kObjTmpMark = ".objtmp-";

Status ObjCheckKey(const std::string& key) {
  if (key.empty() || key.front() == '/' || key.back() == '/' || key.find("//") != std::string::npos) {
    return Status::InvalidArgument("object key '" + key + "': empty, or a leading, trailing or double '/'");
  }
  size_t start = 0;
  while (start <= key.size()) {
    size_t end = key.find('/', start);
    if (end == std::string::npos) end = key.size();
    const std::string_view part(key.data() + start, end - start);
    if (part == "." || part == "..")
      return Status::InvalidArgument("object key '" + key + "': a . or .. part");
    if (part.find(kObjTmpMark) != std::string_view::npos) {
      return Status::InvalidArgument("object key '" + key + "': contains the temporary-file mark");
    }
    start = end + 1;
  }
  return Status::OK();
}

std::string ObjParentDir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

class PosixObjectStore : public ObjectStore {
 public:
  PosixObjectStore(Env* env, std::string root) : env_(env), root_(std::move(root)) {
    while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
  }

  Status Put(const std::string& key, std::string_view data, bool if_absent) override {
    KVFS_RETURN_IF_ERROR(ObjCheckKey(key));
    const std::string path = Path(key);
    KVFS_RETURN_IF_ERROR(env_->CreateDirs(ObjParentDir(path)));
    if (if_absent) {
      OpenOptions o;
      o.write = o.create = o.exclusive = true;
      auto f = env_->Open(path, o);
      if (!f.ok()) return f.status();  // Exists when the key exists
      if (!data.empty()) KVFS_RETURN_IF_ERROR((*f)->Write(0, data.data(), data.size()));
      KVFS_RETURN_IF_ERROR((*f)->Sync());
      return env_->SyncDir(ObjParentDir(path));
    }
    return WriteThenRename(path, [&](BackingFile* f) -> Status {
      return data.empty() ? Status::OK() : f->Write(0, data.data(), data.size());
    });
  }

  Status PutFile(const std::string& key, BackingFile* file, uint64_t size) override {
    KVFS_RETURN_IF_ERROR(ObjCheckKey(key));
    const std::string path = Path(key);
    KVFS_RETURN_IF_ERROR(env_->CreateDirs(ObjParentDir(path)));
    return WriteThenRename(path, [&](BackingFile* out) -> Status {
      std::string buf(std::min<uint64_t>(size, 4u << 20), '\0');
      uint64_t off = 0;
      while (off < size) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), size - off));
        size_t got = 0;
        KVFS_RETURN_IF_ERROR(file->Read(off, n, buf.data(), &got));
        if (got == 0) {
          return Status::IOError("copy of " + file->path() + ": file ends at " + std::to_string(off) +
                                 ", before the " + std::to_string(size) + " bytes to store");
        }
        KVFS_RETURN_IF_ERROR(out->Write(off, buf.data(), got));
        off += got;
      }
      return Status::OK();
    });
  }

  Status Read(const std::string& key, uint64_t offset, size_t n, void* buf, size_t* got) override {
    *got = 0;
    KVFS_RETURN_IF_ERROR(ObjCheckKey(key));
    auto f = env_->Open(Path(key), OpenOptions{});
    if (!f.ok()) return f.status();
    size_t done = 0;
    while (done < n) {
      size_t g = 0;
      KVFS_RETURN_IF_ERROR((*f)->Read(offset + done, n - done, static_cast<char*>(buf) + done, &g));
      if (g == 0) break;
      done += g;
    }
    *got = done;
    return Status::OK();
  }

  Result<ObjectInfo> Stat(const std::string& key) override {
    KVFS_RETURN_IF_ERROR(ObjCheckKey(key));
    auto st = env_->Stat(Path(key));
    if (!st.ok()) return st.status();
    if (st->is_dir) return Status::NotFound("object " + key + " in " + Describe() + ": a directory");
    return ObjectInfo{key, st->size};
  }

  Status Delete(const std::string& key) override {
    KVFS_RETURN_IF_ERROR(ObjCheckKey(key));
    Status s = env_->Remove(Path(key));
    return s.IsNotFound() ? Status::OK() : s;
  }

  Result<ObjectPage> List(const std::string& prefix, const std::string& start_after,
                          uint32_t max_keys) override {
    // Every key under the directory part of the prefix, then the same filter S3 applies.
    const size_t slash = prefix.find_last_of('/');
    const std::string dir_key = slash == std::string::npos ? "" : prefix.substr(0, slash);
    std::vector<ObjectInfo> all;
    KVFS_RETURN_IF_ERROR(Walk(dir_key, &all));
    std::sort(all.begin(), all.end(), [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
    ObjectPage page;
    for (auto& o : all) {
      if (o.key.compare(0, prefix.size(), prefix) != 0 || o.key <= start_after) continue;
      if (page.objects.size() == std::max<uint32_t>(max_keys, 1)) {
        page.truncated = true;
        break;
      }
      page.objects.push_back(std::move(o));
    }
    return page;
  }

  bool AtomicCreate() const override { return true; }  // O_EXCL (NFSv3+ creates it atomically too)
  std::string Describe() const override { return "posix:" + root_; }

 private:
  std::string Path(const std::string& key) const { return root_ + "/" + key; }

  template <class Fill>
  Status WriteThenRename(const std::string& path, Fill fill) {
    static std::atomic<uint64_t> seq{0};
    const std::string tmp =
        path + std::string(kObjTmpMark) + std::to_string(getpid()) + "-" + std::to_string(seq.fetch_add(1));
    Status s;
    {
      OpenOptions o;
      o.write = o.create = o.exclusive = true;
      auto f = env_->Open(tmp, o);
      if (!f.ok()) return f.status();
      s = fill(f->get());
      if (s.ok()) s = (*f)->Sync();
    }
    if (s.ok()) s = env_->Rename(tmp, path);
    if (!s.ok()) {
      env_->Remove(tmp);
      return s;
    }
    return env_->SyncDir(ObjParentDir(path));
  }

  // Appends every object (regular file, not a temporary) under dir_key ("" = the root), recursively.
  Status Walk(const std::string& dir_key, std::vector<ObjectInfo>* out) {
    const std::string dir = dir_key.empty() ? root_ : Path(dir_key);
    std::vector<std::string> names;
    Status s = env_->GetChildren(dir, &names);
    if (s.IsNotFound()) return Status::OK();
    KVFS_RETURN_IF_ERROR(s);
    for (const auto& name : names) {
      if (name.find(kObjTmpMark) != std::string::npos) continue;
      const std::string key = dir_key.empty() ? name : dir_key + "/" + name;
      auto st = env_->Stat(Path(key));
      if (!st.ok()) {
        if (st.status().IsNotFound()) continue;  // removed meanwhile
        return st.status();
      }
      if (st->is_dir) {
        KVFS_RETURN_IF_ERROR(Walk(key, out));
      } else {
        out->push_back(ObjectInfo{key, st->size});
      }
    }
    return Status::OK();
  }

  Env* env_;
  std::string root_;
};

class S3ObjectStore : public ObjectStore {
 public:
  S3ObjectStore(std::shared_ptr<S3Client> client, std::string prefix, bool atomic_create)
      : client_(std::move(client)), prefix_(std::move(prefix)), atomic_create_(atomic_create) {}

  Status Put(const std::string& key, std::string_view data, bool if_absent) override {
    KVFS_RETURN_IF_ERROR(ObjCheckKey(key));
    S3PutOptions o;
    o.if_none_match = if_absent;
    // A conditional object is always one PUT: some servers (Ceph RGW 16.2) ignore the condition on
    // CompleteMultipartUpload.
    if (if_absent && data.size() >= client_->config().multipart_threshold) {
      return Status::InvalidArgument("s3: an if_absent object must be below the multipart threshold");
    }
    return client_->Put(prefix_ + key, data, o);
  }
  Status PutFile(const std::string& key, BackingFile* file, uint64_t size) override {
    KVFS_RETURN_IF_ERROR(ObjCheckKey(key));
    return client_->PutFile(prefix_ + key, file, size);
  }
  Status Read(const std::string& key, uint64_t offset, size_t n, void* buf, size_t* got) override {
    *got = 0;
    KVFS_RETURN_IF_ERROR(ObjCheckKey(key));
    return client_->Get(prefix_ + key, offset, n, buf, got);
  }
  Result<ObjectInfo> Stat(const std::string& key) override {
    KVFS_RETURN_IF_ERROR(ObjCheckKey(key));
    auto h = client_->Head(prefix_ + key);
    if (!h.ok()) return h.status();
    return ObjectInfo{key, h->size};
  }
  Status Delete(const std::string& key) override {
    KVFS_RETURN_IF_ERROR(ObjCheckKey(key));
    return client_->Delete(prefix_ + key);
  }
  Result<ObjectPage> List(const std::string& prefix, const std::string& start_after,
                          uint32_t max_keys) override {
    // start_after below the prefix (or empty) lists from the prefix's first key.
    const std::string after = start_after.empty() ? "" : prefix_ + start_after;
    auto p = client_->List(prefix_ + prefix, after, max_keys);
    if (!p.ok()) return p.status();
    ObjectPage page;
    page.truncated = p->truncated;
    for (auto& o : p->objects) page.objects.push_back(ObjectInfo{o.key.substr(prefix_.size()), o.size});
    return page;
  }
  bool AtomicCreate() const override { return atomic_create_; }
  std::string Describe() const override { return "s3://" + client_->config().bucket + "/" + prefix_; }

 private:
  std::shared_ptr<S3Client> client_;
  std::string prefix_;
  bool atomic_create_;
};

}  // namespace

std::unique_ptr<ObjectStore> NewPosixObjectStore(Env* env, std::string root) {
  return std::make_unique<PosixObjectStore>(env, std::move(root));
}

std::unique_ptr<ObjectStore> NewS3ObjectStore(std::shared_ptr<S3Client> client, std::string prefix,
                                              bool atomic_create) {
  return std::make_unique<S3ObjectStore>(std::move(client), std::move(prefix), atomic_create);
}

Result<bool> ProbeConditionalPut(S3Client* client, const std::string& probe_key) {
  S3PutOptions o;
  o.if_none_match = true;
  // A leftover of an interrupted probe would make the first PUT fail: start clean.
  KVFS_RETURN_IF_ERROR(client->Delete(probe_key));
  KVFS_RETURN_IF_ERROR(client->Put(probe_key, "1", o));
  Status second = client->Put(probe_key, "2", o);
  Status del = client->Delete(probe_key);
  if (second.IsExists()) {
    KVFS_RETURN_IF_ERROR(del);
    return true;
  }
  KVFS_RETURN_IF_ERROR(second);
  KVFS_RETURN_IF_ERROR(del);
  return false;
}

}  // namespace kvfs
