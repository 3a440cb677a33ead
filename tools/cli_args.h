// Rewrites of the kvfs command line before CLI11 parses it (called by main, tools/kvfs_main.cc):
//   ExpandConfig              `kvfs mount ... --config FILE`: the file's keys as flags
//   TranslateMountHelperForm  mount(8)'s `kvfs SOURCE MOUNTPOINT -o OPTS` (fstab, mount -t fuse.kvfs) as
//                             `kvfs mount MOUNTPOINT --backing SOURCE ...`
// Both look the flags up in the `mount` subcommand's CLI11 definition, so a new flag of `kvfs mount` is
// accepted in a config file and in fstab without a change here.
//
// Thread safety: single-threaded CLI code.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace kvfs::cli {

// CLI11 2.1 reads a config file only for the top-level app, so `kvfs mount ... --config FILE` is
// expanded here: every key of FILE that is not given on the command line becomes "--key=value" ("-oVALUE"
// for o; flags: "--key" when true), in one argument each so that no value list can swallow the
// mountpoint that follows. Unknown keys then fail like unknown flags.
bool ExpandConfig(CLI::App* mount, std::vector<std::string>* args, std::string* err);

// mount(8) integration: mount.fuse3 runs `kvfs SOURCE MOUNTPOINT -o OPTS` for the type fuse.kvfs (an
// /etc/fstab line `/mnt/novus /mnt/novus-kv fuse.kvfs _netdev,node_id=gpu7 0 0`, or `mount -t fuse.kvfs`).
// Rewrites that form into `mount MOUNTPOINT --backing SOURCE ...`: an OPTS key that names a long flag of
// `kvfs mount` (node_id or node-id -> --node-id; flags without a value or =true/false) becomes that flag;
// mount(8)'s own options (_netdev, nofail, defaults, rw, auto, noauto, user, nouser, users) are dropped;
// everything else goes to FUSE as -o (none left, or only generic VFS flags such as suid,noexec: plus the
// default allow_other,default_permissions). The "dev,suid" mount.fuse3 appends is dropped: such a mount
// is nosuid,nodev like `kvfs mount`, unless the operator wrote suid / dev (kvfs_suid / kvfs_dev through
// mount(8), which does not pass suid and dev on to the helper).
// Leaves `args` alone unless args[0] and args[1] are both not commands and not flags. False (message
// printed) for a malformed call.
bool TranslateMountHelperForm(CLI::App* mount, std::vector<std::string>* args);

}  // namespace kvfs::cli
