// kvfs: mount / umount / stats / node.
//
//   kvfs mount MOUNTPOINT --backing DIR [--node-id ID] [--index-dir DIR] [--cache-size SIZE] [--staging-size SIZE]
//              [--segment-size SIZE] [--foreground] [--threads N] [--group-commit-ms N] [--sync-interval-ms N] [--direct-io]
//              [--force] [--splice] [--peer-poll-ms N] [--peer-direct-io] [-o OPTS]...
//              [--log-level LEVEL] [--config FILE]
//              [--capacity SIZE] [--high-watermark SIZE] [--low-watermark SIZE]
//              [--metrics-listen HOST:PORT]
//              [--checkpoint-entries N] [--checkpoint-interval-ms N] [--peers-publish-ms N]
//              [--backing-mode MODE] [--log-file PATH] [--log-max-size SIZE]
//   kvfs umount MOUNTPOINT [--timeout SECONDS]      (a dead mount of a killed daemon: lazy unmount)
//   kvfs stats MOUNTPOINT [--json]
//   kvfs node list|retire|purge --backing DIR [--node ID] [--json] [--force] [--grace-ms N]
//   kvfs SOURCE MOUNTPOINT -o OPTS                  (mount(8)'s helper form: fstab, mount -t fuse.kvfs)
//
// This file defines the command line (CLI11) and dispatches; each subcommand is a part of its own:
//   mount   tools/mount_cmd.h (the daemon), tools/mount_checks.h (what it refuses), tools/power_cut.h (TEST)
//   umount  tools/umount_cmd.h
//   stats   tools/stats_cmd.h
//   node    tools/node_cmd.h
//   --config and the mount helper form: tools/cli_args.h; shared helpers: tools/cli_util.h
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "tools/build_info.h"
#include "tools/cli_args.h"
#include "tools/cli_parse.h"
#include "tools/cli_util.h"
#include "tools/mount_cmd.h"
#include "tools/node_cmd.h"
#include "tools/stats_cmd.h"
#include "tools/umount_cmd.h"

int main(int argc, char** argv) {
  using namespace kvfs::cli;  // NOLINT: the subcommands (tools/*_cmd.h) and the command-line rewrites
  CLI::App app{"kvfs: a FUSE file system for LLM KV-cache chunk files over a shared export", "kvfs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("kvfs ") + kvfs::BuildVersion() +
                                        (*kvfs::BuildCommit() ? std::string(" (git ") + kvfs::BuildCommit() + ")" : ""));

  MountArgs ma;
  auto* mount = app.add_subcommand("mount", "mount kvfs at MOUNTPOINT over a backing directory");
  std::string config_file;
  mount->add_option("--config", config_file,
                    "read options from a file (INI/TOML, keys = long flag names, e.g. backing=/mnt/novus, "
                    "threads=64, direct-io=true, o=allow_other; a [mount] section is optional); flags on the "
                    "command line win");
  mount->add_option("mountpoint", ma.mountpoint, "where to mount")->required();
  mount->add_option("--backing", ma.backing,
                    "the backing directory (the shared export), or s3://BUCKET/PREFIX (an S3 bucket: with "
                    "--s3-endpoint and --s3-staging)")->required();
  mount->add_option("--s3-endpoint", ma.s3_endpoint, "S3 endpoint URL, e.g. https://s3.example.com:10443");
  mount->add_option("--s3-region", ma.s3_region, "S3 region signed into requests (default us-east-1)");
  mount->add_flag("--s3-path-style", ma.s3_path_style, "path-style S3 URLs (ENDPOINT/BUCKET/KEY) instead of virtual-hosted");
  mount->add_option("--s3-ca", ma.s3_ca, "PEM CA bundle to trust for the S3 endpoint's TLS certificate");
  mount->add_option("--s3-staging", ma.s3_staging,
                    "local directory for what is not in the bucket yet (the active segment, the journal until "
                    "its publication); keep it across restarts: a crash leaves unpublished data there");
  mount->add_option("--s3-read-parts", ma.s3_read_parts,
                    "S3: ranged GETs in flight for one read of at least --s3-read-split-min (parts of at least "
                    "512 KiB; at most 16 extra per mount); 1 = one GET per read (default 4)")
      ->check(CLI::Range(1, 64));
  mount->add_option("--s3-read-split-min", ma.s3_read_split_min,
                    "S3: the smallest read split into --s3-read-parts ranged GETs, e.g. 4MiB (the default: a "
                    "36 MiB value's 4 MiB pieces are split, a 2.25 MiB value is one GET); 0 = split every read "
                    "of at least 2 parts");
  mount->add_option("--seal-after-ms", ma.seal_after_ms,
                    "S3: seal (and upload) the active segment once it has held files this long, so other nodes "
                    "see them within about this bound (default 0: when full, or at unmount)");
  mount->add_option("--link-claims", ma.link_claims,
                    "on|off: link(2) of a file first claims the new name on the export (an exclusive create), "
                    "so that of several nodes linking one name at once exactly one gets 0 (default on; off: "
                    "one node's index decides, two nodes racing may both get 0)")
      ->check(CLI::IsMember({"on", "off"}));
  mount->add_option("--node-id", ma.node_id, "this node's id (default: host name)");
  mount->add_option("--index-dir", ma.index_dir,
                    "local RocksDB index directory (default /var/lib/kvfs/<hash-of-backing>-<node>)");
  mount->add_option("--cache-size", ma.cache_size, "LRU cache of values, e.g. 4GiB (default 1GiB)");
  mount->add_option("--segment-size", ma.segment_size,
                    "segment file size, e.g. 256MiB; default: 1/8 of the export's size (statvfs of --backing, "
                    "or of a smaller --capacity / --high-watermark) rounded down to a power of two, between "
                    "4MiB and 256MiB (32MiB export: 4MiB, 512MiB: 64MiB, 2GiB or more: 256MiB); space comes "
                    "back in whole segments");
  mount->add_option("--staging-size", ma.staging_size,
                    "memory budget for the bytes of files being written, e.g. 4GiB (default 1GiB); over it "
                    "staged bytes spill to the active segment");
  mount->add_option("--max-file-size", ma.max_file_size,
                    "largest file size, e.g. 64GiB (default 16GiB, at most 1TiB); a write or truncate "
                    "beyond it is EFBIG (holes cost neither memory nor export space)");
  mount->add_option("--read-ahead", ma.read_ahead,
                    "read-ahead window of a sequential buffered read(2), e.g. 8MiB (default 4MiB; 0 = the "
                    "kernel's 128KiB for FUSE, which splits such reads into 128KiB requests)");
  mount->add_flag("--foreground,-f", ma.foreground, "stay in the foreground");
  mount->add_flag("--quiet,-q", ma.quiet,
                  "print nothing when mounted (default: one line naming the mount, node, segment size and log)");
  mount->add_option("--threads", ma.threads, "max FUSE worker threads (default 32)");
  mount->add_option("--group-commit-ms", ma.group_commit_ms,
                    "group commit interval in ms: closed files are journaled (visible to peers) this often (default 20)");
  mount->add_option("--sync-interval-ms", ma.sync_interval_ms,
                    "durability interval in ms: segments and journal are fdatasync'd at most this long after a "
                    "group commit; fsync is always durable at once (default 1000; 0 = fdatasync every group commit)");
  mount->add_flag("--direct-io", ma.direct_io, "O_DIRECT for segment writes (the default; kept for old command lines)");
  mount->add_flag("--buffered-segment-writes", ma.buffered_segment_writes,
                  "write segments through the backing's page cache instead of O_DIRECT (one more copy per byte)");
  mount->add_option("--peer-poll-ms", ma.peer_poll_ms, "how often peers' journals are tailed, ms (default 200; 0 = never)");
  mount->add_option("--peer-poll-max-ms", ma.peer_poll_max_ms,
                    "longest wait between polls of an idle peer, ms: the wait doubles from --peer-poll-ms while "
                    "polls find nothing new, and is reset by new entries (and by a lookup miss when above 4 x) "
                    "(default 4 x --peer-poll-ms; 10000 on S3, where each poll is billed requests)");
  mount->add_flag("--peer-direct-io", ma.peer_direct_io,
                  "read peers' journals with O_DIRECT (on by itself when the backing is an NFS mount)");
  mount->add_option("--backing-deadline-ms", ma.backing_deadline_ms,
                    "deadline for every backing-store request; a hung export becomes EIO (default 0 = off)");
  mount->add_flag("--force", ma.force, "take over the node directory even if its owner looks alive");
  mount->add_flag("--splice", ma.splice, "enable FUSE splice read/write/move");
  mount->add_option("-o", ma.fuse_opts,
                    "FUSE mount options, comma separated (default allow_other,default_permissions; "
                    "default_permissions is kept unless no_default_permissions is given)")
      ->delimiter(',')
      ->allow_extra_args(false);  // `-o LIST MOUNTPOINT`: LIST only
  mount->add_option("--log-level", ma.log_level, "trace|debug|info|warn|error|critical|off (default info)");
  mount->add_option("--capacity", ma.capacity,
                    "bound on this node's segment bytes on the export, e.g. 500GiB (default unlimited); "
                    "the oldest segments are evicted");
  mount->add_option("--high-watermark", ma.high_watermark,
                    "global bound on all nodes' segment bytes: over it, each node evicts its share");
  mount->add_option("--low-watermark", ma.low_watermark,
                    "global eviction target (default 7/8 of --high-watermark)");
  mount->add_option("--checkpoint-entries", ma.checkpoint_entries,
                    "write a journal checkpoint (snapshot) after this many journal entries (default "
                    "1000000; 0 = not by count); also at a clean unmount");
  mount->add_option("--checkpoint-interval-ms", ma.checkpoint_interval_ms,
                    "... or this long after the last one if anything was journaled (default 600000; 0 = not by "
                    "time)");
  mount->add_option("--peers-publish-ms", ma.peers_publish_ms,
                    "how often this node's read progress (<node dir>/peers) is rewritten when it moved, ms "
                    "(default 10000); also the journal retirement check period");
  mount->add_option("--backing-mode", ma.backing_mode,
                    "permission bits of the files kvfs creates on the export and in its index dir, octal "
                    "(default 0600: owner only; directories get x where r is set, 0700); e.g. 0640 for a "
                    "group that reads the export");
  mount->add_option("--log-file", ma.log_file,
                    "log file (default for a daemon: <index-dir>.log, next to the index dir; in the foreground: "
                    "stderr); rotated by size");
  mount->add_option("--log-max-size", ma.log_max_size,
                    "rotate the log file at this size, keeping 4 old ones (<log>.1.log ...; default 64MiB)");
  mount->add_option("--verify-copy", ma.verify_copy,
                    "how a value loaded into never-touched memory is verified: auto (default: a few-ms probe at "
                    "mount picks the cheaper), kernel (hash a kernel copy: cheaper where the first touch of a "
                    "page traps to the hypervisor), inplace (hash it where it is)");
  mount->add_option("--metrics-listen", ma.metrics_listen,
                    "serve Prometheus metrics at http://HOST:PORT/metrics, e.g. 127.0.0.1:9464 (default off)");

  std::string ump;
  double utimeout = 120;
  auto* umount = app.add_subcommand("umount", "unmount and wait for the daemon to flush and exit");
  umount->add_option("mountpoint", ump, "the kvfs mount point")->required();
  umount->add_option("--timeout", utimeout, "seconds to wait for the daemon (default 120)")
      ->check(NonNegativeSeconds());

  std::string smp;
  bool sjson = false;
  auto* stats = app.add_subcommand("stats", "print the daemon's counters");
  stats->add_option("mountpoint", smp, "the kvfs mount point")->required();
  stats->add_flag("--json", sjson, "print JSON");

  // `kvfs node list|retire|purge` (tools/node_cmd.h).
  std::string nsub, nbacking, nnode;
  bool njson = false, nforce = false;
  uint32_t ngrace = 8000;
  auto* nodecmd = app.add_subcommand("node", "list, retire or purge the nodes of a backing directory");
  nodecmd->add_option("command", nsub, "list | retire | purge")->required();
  nodecmd->add_option("--backing", nbacking, "the backing directory, or s3://BUCKET/PREFIX (list, retire; with --s3-endpoint)")->required();
  nodecmd->add_option("--node", nnode, "node id (retire, purge)");
  nodecmd->add_flag("--json", njson, "print JSON");
  nodecmd->add_flag("--force", nforce, "retire a node that looks live; purge a released node");
  nodecmd->add_option("--grace-ms", ngrace, "purge: wait between the DROP entries and the removal (default 8000)");
  kvfs::NodeS3Options ns3;
  nodecmd->add_option("--s3-endpoint", ns3.endpoint, "S3 endpoint URL of an s3://BUCKET/PREFIX backing (as kvfs mount)");
  nodecmd->add_option("--s3-region", ns3.region, "S3 region signed into requests (default us-east-1)");
  nodecmd->add_flag("--s3-path-style", ns3.path_style, "path-style S3 URLs (ENDPOINT/BUCKET/KEY)");
  nodecmd->add_option("--s3-ca", ns3.ca, "PEM CA bundle to trust for the S3 endpoint's TLS certificate");
  nodecmd->add_option("--backing-deadline-ms", ns3.deadline_ms, "S3: deadline of each request, retries included (ms)");

  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  if (!TranslateMountHelperForm(mount, &args)) return kExitUsage;  // `kvfs SOURCE MOUNTPOINT -o OPTS`
  if (!args.empty() && args[0] != "mount" && args[0] != "umount" && args[0] != "stats" && args[0] != "node" &&
      args[0][0] != '-') {
    std::fprintf(stderr, "kvfs: unknown command '%s' (use mount, umount, stats or node; see kvfs --help)\n",
                 args[0].c_str());
    return kExitUsage;
  }
  std::string cfg_err;
  if (!ExpandConfig(mount, &args, &cfg_err)) {
    std::fprintf(stderr, "kvfs: %s\n", cfg_err.c_str());
    return kExitUsage;
  }
  if (int rc = Parse(&app, "kvfs", args); rc >= 0) return rc;

  // A path the user may not reach (a directory without search permission, say) is one line and exit 2,
  // never an uncaught std::filesystem exception.
  try {
    if (mount->parsed()) {
      ma.node_id_given = mount->count("--node-id") > 0;
      return RunMount(ma);
    }
    if (umount->parsed()) return RunUmount(ump, utimeout);
    if (stats->parsed()) return RunStats(smp, sjson);
    if (nodecmd->parsed()) return kvfs::RunNodeCommand(nsub, nbacking, nnode, njson, nforce, ngrace, ns3);
  } catch (const std::filesystem::filesystem_error& e) {
    std::fprintf(stderr, "kvfs: %s\n", e.what());
    return kExitUsage;
  }
  return kExitUsage;
}
