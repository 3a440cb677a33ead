#include "engine/read_admission.h"

namespace kvfs {

ReadAdmission::ReadAdmission(uint64_t probation_bytes, size_t ghost_keys)
    : max_bytes_(probation_bytes), max_ghosts_(ghost_keys) {}

bool ReadAdmission::OnLoaded(const std::string& key, const LruCache::Value& v, bool from_start) {
  std::lock_guard<std::mutex> g(mu_);
  if (ghosts_.erase(key) > 0) {
    // The FIFO keeps the key; it is skipped (and dropped) when it reaches the front of ghost_fifo_.
    return true;
  }
  if (auto it = index_.find(key); it != index_.end()) {  // a racing load of the same value
    if (from_start) it->second->starts++;
    return false;
  }
  fifo_.push_back(Entry{key, v, from_start ? 1u : 0u});
  index_.emplace(key, std::prev(fifo_.end()));
  bytes_ += v ? v->size() : 0;
  EvictLocked();
  return false;
}

LruCache::Value ReadAdmission::Find(const std::string& key, bool from_start, bool* promote) {
  *promote = false;
  std::lock_guard<std::mutex> g(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  auto e = it->second;
  LruCache::Value v = e->value;
  if (from_start && ++e->starts >= 2) {
    *promote = true;
    bytes_ -= v ? v->size() : 0;
    fifo_.erase(e);
    index_.erase(it);
  }
  return v;
}

void ReadAdmission::Erase(const std::string& key) {
  std::lock_guard<std::mutex> g(mu_);
  ghosts_.erase(key);
  auto it = index_.find(key);
  if (it == index_.end()) return;
  bytes_ -= it->second->value ? it->second->value->size() : 0;
  fifo_.erase(it->second);
  index_.erase(it);
}

void ReadAdmission::EvictLocked() {
  // Keep the newest entry even when it alone is over the budget: the rest of its read needs it.
  while (bytes_ > max_bytes_ && fifo_.size() > 1) {
    Entry& old = fifo_.front();
    bytes_ -= old.value ? old.value->size() : 0;
    AddGhostLocked(old.key);
    index_.erase(old.key);
    fifo_.pop_front();  // the value's memory goes back to the buffer pool when its last reader lets go
  }
}

void ReadAdmission::AddGhostLocked(const std::string& key) {
  if (max_ghosts_ == 0) return;
  if (!ghosts_.insert(key).second) return;
  ghost_fifo_.push_back(key);
  while (ghost_fifo_.size() > max_ghosts_) {
    ghosts_.erase(ghost_fifo_.front());
    ghost_fifo_.pop_front();
  }
}

uint64_t ReadAdmission::probation_bytes() const {
  std::lock_guard<std::mutex> g(mu_);
  return bytes_;
}

size_t ReadAdmission::probation_entries() const {
  std::lock_guard<std::mutex> g(mu_);
  return fifo_.size();
}

size_t ReadAdmission::ghosts() const {
  std::lock_guard<std::mutex> g(mu_);
  return ghosts_.size();
}

}  // namespace kvfs
