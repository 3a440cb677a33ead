// What `kvfs mount` refuses (exit 2, one line) or warns about before anything touches the backing or
// node directory: sizes (SizeOrDie, CheckSizes), the -o list as libfuse parses it (CheckFuseOptions) and
// what would make the FUSE mount itself fail (FuseMountProblem). Called by RunMount (tools/mount_cmd.cc);
// docs/operations.md "Sizing" lists the rules.
//
// Thread safety: call from the main thread before the Store opens (CheckFuseOptions swaps libfuse's
// process-wide log function for the duration of the call).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/mount_cmd.h"

namespace kvfs::cli {

// The size in `text` (tools/size_parse.h syntax); exit(2) naming `what` when it does not parse.
uint64_t SizeOrDie(const std::string& what, const std::string& text);

// `b` for a person: "512 bytes", "4.0 MiB", "1.5 GiB" (one decimal from KiB on).
std::string HumanSize(uint64_t b);

// " (a number without a unit is bytes: write e.g. 500GiB)" when `text` has no unit: `--capacity 500` is
// 500 bytes. `unit` is the suggestion: MiB for sizes where text + GiB would be refused in turn
// (`--segment-size 100` -> 100MiB, not 100GiB, over the 64 GiB limit).
std::string BareHint(const std::string& text, const char* unit = "GiB");

// Sizes that cannot work are usage errors (exit 2, one line); merely unusual ones are warned about.
//   segment size      at most kMaxSegmentSize; over 4 GiB warned (eviction frees whole segments)
//   cache, staging    at most the machine's memory; over half of it warned (also their sum)
//   capacity, high    at least kMinSegments segments (eviction keeps one segment of headroom and
//   watermark         drops whole segments: below that every write empties the cache); under
//                     kFewSegments segments warned; any size option below 1 MiB without a unit warned
inline constexpr uint64_t kMaxSegmentSize = 64ull << 30;
inline constexpr uint64_t kMinSegments = 2, kFewSegments = 8;
void CheckSizes(const MountArgs& a, uint64_t segment, uint64_t cache, uint64_t staging, uint64_t capacity,
                uint64_t high);

// The -o list as libfuse will parse it at mount time, checked now (before the node directory is taken
// over): a throwaway fuse_session_new with no operations parses every option and mounts nothing.
// False with libfuse's complaint, on one line, in *err.
bool CheckFuseOptions(const std::vector<std::string>& opts, std::string* err);

// Why FUSE cannot be mounted here, checked before the store opens (which takes a new node generation
// and may create the index): "" when it looks mountable. As root the kernel device must open; a
// non-root user mounts through the setuid fusermount3, which refuses allow_other unless /etc/fuse.conf
// says user_allow_other, and a mountpoint the user cannot write.
std::string FuseMountProblem(const std::vector<std::string>& fopts, const std::string& mountpoint);

}  // namespace kvfs::cli
