// MountFuseOptions: the FUSE "-o" options `kvfs mount` passes to the kernel (docs/design.md §8).
//
//   no -o at all                      -> allow_other,default_permissions
//   -o LIST                           -> LIST, plus default_permissions unless LIST already has it
//   -o ...,no_default_permissions,... -> LIST without it and without default_permissions (the only way
//                                        to turn the kernel's permission checks off: KV caches hold users'
//                                        prompts, so `-o allow_other` alone must not open them to all)
// The atime flags libfuse 3.14 does not know (relatime, norelatime, strictatime, diratime, nodiratime,
// lazytime, nolazytime) are dropped: FUSE inodes never take the kernel's atime updates, kvfs keeps atime
// itself (relatime unless noatime or ro, tools/mount_cmd.cc), so they change nothing, and fstab lines
// carry them. Empty entries are dropped; order is kept. no_default_permissions is kvfs's own key (libfuse has no
// negative form); it never reaches libfuse.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

namespace kvfs {

inline constexpr const char* kNoDefaultPermissions = "no_default_permissions";

inline std::vector<std::string> MountFuseOptions(const std::vector<std::string>& given) {
  std::vector<std::string> out;
  bool opt_out = false, has_dp = false;
  static const char* kAtimeFlags[] = {"relatime", "norelatime", "strictatime", "diratime",
                                      "nodiratime", "lazytime", "nolazytime"};
  for (const auto& o : given) {
    if (o.empty()) continue;
    if (std::find(std::begin(kAtimeFlags), std::end(kAtimeFlags), o) != std::end(kAtimeFlags)) continue;
    if (o == kNoDefaultPermissions) {
      opt_out = true;
      continue;
    }
    if (o == "default_permissions") has_dp = true;
    out.push_back(o);
  }
  if (given.empty() || (out.empty() && !opt_out)) return {"allow_other", "default_permissions"};
  if (opt_out) {
    out.erase(std::remove(out.begin(), out.end(), "default_permissions"), out.end());
  } else if (!has_dp) {
    out.push_back("default_permissions");
  }
  return out;
}

}  // namespace kvfs
