// Holds of peers' segments on the export (docs/semantics.md §6.10 "Across nodes"; the protocol and the
// race argument: engine/peer_holds.cc). A node B that has a file of node A's segment open keeps an empty
// marker <backing>/.kvfs/v1/nodes/B/holds/A/<segment file name>; whoever removes A's dropped segment
// files (A's mount after a DROP, `kvfs node purge` of A) asks SegmentsHeldByLivePeers first and keeps
// the ones a live node holds.
//
// Callers: StoreImpl::UnlinkDue (engine/capacity.cc), `kvfs node purge` (tools/node_cmd.cc). Reentrant.
#pragma once

#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "blockstore/env.h"
#include "blockstore/types.h"

namespace kvfs {

// Liveness of a holder: OWNER active and HEARTBEAT younger than this (the takeover rule, design.md §2).
inline constexpr std::chrono::milliseconds kPeerHoldHeartbeatTimeout{30000};

// Which of `segs` (segments of node `owner`) some other live node holds: one listing of the nodes
// directory (`known`: names of an earlier call, not stat'ed again; updated), one listing of
// <node>/holds/<owner>/ per node (NotFound = none), and for a node with a matching marker its OWNER and
// HEARTBEAT (NodeLooksLive). Markers of dead, released or purged nodes hold nothing. *complete = false
// when a listing failed: the caller then treats every segment as held.
std::set<SegmentId> SegmentsHeldByLivePeers(Env* env, const std::string& backing, const std::string& owner,
                                            const std::vector<SegmentId>& segs, bool* complete,
                                            std::vector<std::string>* known = nullptr,
                                            std::vector<std::string>* holders = nullptr);

}  // namespace kvfs
