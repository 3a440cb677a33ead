// `kvfs node list | retire | purge`: see and manage the node directories of one backing directory
// (docs/design.md §2 and §5; rules in docs/operations.md "Several nodes").
//
// States (from OWNER, HEARTBEAT, RETIRED and PURGED in <backing>/.kvfs/v1/nodes/<node>/):
//   live      OWNER state=active and HEARTBEAT younger than kNodeHeartbeatTimeoutMs (and, when OWNER
//             names this host and boot id, its pid still runs)
//   released  OWNER state=released: unmounted cleanly; it may come back (a pod restart)
//   dead      OWNER state=active but the heartbeat is stale or missing (or the owner pid is gone on
//             this host): a crashed or unreachable mount
//   retired   not live and a RETIRED mark exists (`kvfs node retire`): an operator says it will not
//             come back under this id; its data stays readable by every peer
//   purged    `kvfs node purge` removed its data; only OWNER (state=released, the last generation) and
//             PURGED are left, so a later mount under the same id starts above every generation its
//             peers have read
//
// list:   one line (or JSON object) per node: id, state, heartbeat age, generation, owner host/pid,
//         journal and segment bytes (stat sizes: on NFS they may lag by the attribute-cache timeout).
// retire: writes RETIRED; refused (exit 2) while the node is live unless force.
// purge:  refused (exit 2) while the node is live (force does not override that); a released node
//         needs retire first or force. Takes the node directory over (a new generation, through the
//         normal takeover rule, so a mount that started meanwhile wins), journals DROP{segment} for every
//         segment it has, waits grace_ms so that peers apply the DROPs (their names of that node become
//         ENOENT), then removes segments, journals, snapshots and the other files, and leaves OWNER
//         (released) + PURGED.
//
// Exit codes: 0 done, 1 I/O failure, 2 usage (unknown subcommand, bad backing dir or node, refused).
// Thread safety: single-threaded CLI code.
#pragma once

#include <cstdint>
#include <string>

namespace kvfs {

inline constexpr int64_t kNodeHeartbeatTimeoutMs = 30000;  // = NodeDirOptions::heartbeat_timeout

// How to reach an s3://BUCKET/PREFIX backing (as kvfs mount takes it; credentials from the environment
// or the shared credentials file). list and retire work on it (through the mount's S3TierEnv over a
// temporary, empty staging directory: everything read comes from the bucket, RETIRED is PUT); purge does
// not yet (exit 2).
struct NodeS3Options {
  std::string endpoint, region = "us-east-1", ca;
  bool path_style = false;
  uint32_t deadline_ms = 0;  // 0: the client's default (60 s per call)
};

// sub: "list" | "retire" | "purge"; node: required for retire/purge, ignored for list.
// grace_ms (purge): time between the DROP entries and the removal of the files; the default covers
// peers polling at the default 200 ms with the full 16x idle back-off, twice.
int RunNodeCommand(const std::string& sub, const std::string& backing, const std::string& node, bool json,
                   bool force, uint32_t grace_ms = 8000, const NodeS3Options& s3 = {});

}  // namespace kvfs
