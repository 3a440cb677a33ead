// ReadAdmission: which loaded values earn a place in the LRU (engine/store_data.cc, the read path).
//
// Why: a cold load reads most values once (a connector loading a prefix it never computed here). Putting
// every loaded value into the LRU made each one land in memory the cache had never used (a fresh page
// per 4 KiB until the LRU was full) and pushed out values that are read again. Now a value loaded on a
// miss goes to a small *probation* FIFO; it enters the LRU only when it is read again from its start
// (a second open, not the next FUSE request of the same read), or when it is loaded again soon after it
// left probation (its key is still in the *ghost* list). Values that leave probation unread give their
// memory back to the buffer pool at once, so a stream of once-read values cycles through the same few
// MiB. This is the two-segment idea of SLRU / 2Q (Johnson & Shasha, VLDB 1994: A1in FIFO, A1out ghost
// keys, Am main LRU), with the FIFO holding values by bytes.
//
// The read path (engine/store_data.cc) uses probation only when the LRU is full: while the LRU is
// under 7/8 of its capacity a loaded value goes straight in (caching then evicts nothing, and memory
// the LRU once used is reused through the buffer pool). Measured on the dev VM (vLLM 2.25 MiB, 0 ms,
// 120 chunks): probation always -> cold load 681 MB/s, warm load 852 MB/s; LRU-while-room -> cold
// 547 MB/s, warm 3,600 MB/s (docs/benchmarks.md).
//
// Rules (key = the record's LRU key):
//  * OnLoaded(key, v, from_start): a miss just loaded v. If key is a ghost: remove it, return true
//    (the caller inserts v into the LRU). Else v enters probation (oldest entries leave, their keys
//    become ghosts) with one start if from_start; returns false.
//  * Find(key, from_start): v if key is in probation, else null. A find from the start counts one more
//    start; at two starts the entry leaves probation and *promote is set (the caller inserts v into
//    the LRU). Finds at other offsets are the rest of a read that already started.
//  * Probation holds at most probation_bytes of values (at least the newest entry); ghosts at most
//    ghost_keys keys (FIFO).
//
// Thread safety: every method may be called concurrently (one mutex, no I/O under it).
#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "blockstore/lru_cache.h"

namespace kvfs {

class ReadAdmission {
 public:
  ReadAdmission(uint64_t probation_bytes, size_t ghost_keys);

  bool OnLoaded(const std::string& key, const LruCache::Value& v, bool from_start);
  LruCache::Value Find(const std::string& key, bool from_start, bool* promote);
  // Forgets key (its record is gone or replaced; tests).
  void Erase(const std::string& key);

  uint64_t probation_bytes() const;  // bytes held now
  size_t probation_entries() const;
  size_t ghosts() const;

 private:
  struct Entry {
    std::string key;
    LruCache::Value value;
    uint32_t starts = 0;
  };
  void EvictLocked();
  void AddGhostLocked(const std::string& key);

  const uint64_t max_bytes_;
  const size_t max_ghosts_;
  mutable std::mutex mu_;
  std::list<Entry> fifo_;  // oldest first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  uint64_t bytes_ = 0;
  std::deque<std::string> ghost_fifo_;
  std::unordered_set<std::string> ghosts_;
};

}  // namespace kvfs
