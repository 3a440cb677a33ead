// Little-endian fixed-width decoding shared by the index's on-disk formats (journal_format.cc,
// snapshot.cc; docs/format.md): one copy, so unity builds (several .cc files compiled as one) see one
// definition. After LevelDB's util/coding.h. Pure functions, thread-safe.
#pragma once

#include <cstdint>

namespace kvfs {

// The n-byte (1..8) little-endian unsigned integer at p. p must hold n readable bytes.
inline uint64_t GetFixed(const char* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

}  // namespace kvfs
