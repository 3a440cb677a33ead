// What this kvfs binary is: its version (CMake's PROJECT_VERSION) and the git commit it was built from
// ("" when unknown: not built from a git checkout), with "-dirty" when the tree had uncommitted changes.
// Shown by `kvfs --version`, `kvfs stats` (version, commit) and /metrics (kvfs_build_info).
//
// The definitions are generated at every build by tools/build_info.cmake (target kvfs_build_info).
// Thread-safe: constant strings.
#pragma once

namespace kvfs {

const char* BuildVersion();
const char* BuildCommit();

}  // namespace kvfs
