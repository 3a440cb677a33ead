// Holds of peers' segments (docs/semantics.md §6.10 "Across nodes", docs/design.md §6): a node that opens
// a file whose record is in a peer's segment says so on the export, and the peer (the segment's owner)
// does not unlink that segment after dropping it while the holder is live.
//
// Holder side (HoldPeerSegment / UnholdPeerSegment, from PinRecord / UnpinRecord): the first hold of a
// peer segment creates the empty marker <this node>/holds/<owner>/<segment file name> and then reads the
// owner's journal to its end (PeerTailer::PollNow) before the drop is checked in the index; later holds
// of the segment while the marker exists cost no backing operation. The marker is removed
// kPeerHoldLinger after the last hold of the segment is released (SweepPeerHolds, evictor thread), so a
// reader that opens the chunks of one segment one after the other creates it once. At mount the node
// removes its markers of an earlier generation (ClearOwnHoldMarkers); a clean Close removes the rest.
// On an S3 backing a hold makes no marker and reads no journal (no request): the owner could not see a
// marker there (docs/s3.md "What is left"); only the index's DROP check is made.
//
// Owner side (SegmentsHeldByPeers, from UnlinkDue): after the grace period and a durable journal (the
// DROP is durable), before unlinking dropped segments, it lists holds/<this node>/ of every node on the
// export and keeps (re-checked every second) the segments marked by a live node (OWNER active,
// HEARTBEAT younger than 30 s: NodeLooksLive); markers of dead or cleanly unmounted nodes are ignored.
//
// Why that suffices (the race): the owner's order is DROP durable -> list markers -> unlink; the
// holder's is marker created -> owner's journal read to its end -> drop checked. If the holder's read
// does not find the DROP, the DROP was not durable when the read started, so the marker existed before
// the owner's listing, which then sees it (a listing opens the directory: close-to-open on NFS). If it
// finds it, the open answers ENOENT. Assumptions: a journal read sees what the owner made durable (a
// local or POSIX-coherent file system; NFS: --peer-direct-io), a holder's heartbeat stays fresh while it
// holds (a node stalled for 30 s is taken for dead, as by a takeover), and creates are visible to a
// later listing on another client (NFS close-to-open; not with `nocto`).
//
// Thread safety: peer_holds_mu_ guards the map, counts and release times; a PeerHold's mu is held across
// its marker's I/O and the journal read (so a second opener of the segment waits for the first one's
// check); lock order PeerHold::mu -> peer_holds_mu_, never the reverse while doing I/O. cap_mu_ guards
// held_by_peers_ (owner side). Nothing here is called with ns_mu_ or cap_mu_ held.
#include "engine/peer_holds.h"
#include "engine/store_impl.h"

namespace kvfs {
namespace {

// A marker stays this long after the last hold of its segment is released (a reader loading the chunks
// of one segment one by one creates it once).
constexpr auto kPeerHoldLinger = std::chrono::seconds(5);

}  // namespace

Status StoreImpl::HoldPeerSegment(const SegmentId& seg) {
  std::shared_ptr<PeerHold> h;
  {
    std::lock_guard<std::mutex> l(peer_holds_mu_);
    auto& slot = peer_holds_[seg];
    if (!slot) slot = std::make_shared<PeerHold>();
    slot->count++;
    h = slot;
  }
  {
    std::lock_guard<std::mutex> g(h->mu);
    // On an S3 backing (opts_.tier) the markers would stay in this node's staging directory, which the
    // owner never lists (docs/s3.md): neither a marker nor the read of the owner's journal (a LIST, a
    // whole --backing-deadline-ms each under a frozen gateway, before the open's own read) buys the
    // guarantee there, so the hold costs no request; a segment the owner dropped then reads NotFound.
    if (!h->marker && !opts_.tier) {
      const std::string owner_dir = HoldDirPath(opts_.backing_dir, opts_.node_id, seg.node);
      bool made;
      {
        std::lock_guard<std::mutex> l(peer_holds_mu_);
        made = hold_dirs_made_.count(seg.node) > 0;
      }
      Status s;
      if (!made) {
        s = env_->CreateDir(HoldsDirPath(opts_.backing_dir, opts_.node_id));
        if (s.ok()) s = env_->CreateDir(owner_dir);
        if (s.ok()) {
          std::lock_guard<std::mutex> l(peer_holds_mu_);
          hold_dirs_made_.insert(seg.node);
        }
      }
      if (s.ok()) {
        OpenOptions o;
        o.write = true;
        o.create = true;
        auto f = env_->Open(owner_dir + "/" + SegmentFileName(seg.generation, seg.seq), o);
        s = f.status();
      }
      if (s.ok()) {
        h->marker = true;
        peer_hold_markers_++;
        peer_hold_markers_created_++;
        // The owner makes its DROP durable before it lists the markers: a DROP this read does not find
        // was not durable when the marker already existed, so the owner's listing sees the marker.
        if (tailer_) s = tailer_->PollNow(seg.node);
      }
      if (!s.ok()) {
        // No marker (full export?) or the owner's journal could not be read: the hold goes on without
        // the guarantee (the peer may unlink the segment; reads then answer ENOENT, never wrong bytes).
        peer_hold_checks_failed_++;
        LogLimited(spdlog::level::warn, LogKey("peer-hold", s),
                   "kvfs: holding segment {}/{}-{} of peer {}: {} (its owner may unlink it under open handles)",
                   seg.node, seg.generation, seg.seq, seg.node, ErrnoText(s));
      }
    }
  }
  auto st = index_->GetSegment(seg);
  if (st.ok() && st->state == SegmentState::kDropped) {
    UnholdPeerSegment(seg);
    return Status::NotFound("segment dropped (evicted)");
  }
  return Status::OK();
}

void StoreImpl::UnholdPeerSegment(const SegmentId& seg) {
  std::lock_guard<std::mutex> l(peer_holds_mu_);
  auto it = peer_holds_.find(seg);
  if (it == peer_holds_.end() || it->second->count == 0) return;
  if (--it->second->count == 0) it->second->released = std::chrono::steady_clock::now();
}

void StoreImpl::SweepPeerHolds(bool all) {
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::pair<SegmentId, std::shared_ptr<PeerHold>>> due;
  {
    std::lock_guard<std::mutex> l(peer_holds_mu_);
    for (const auto& [seg, h] : peer_holds_) {
      if (h->count == 0 && (all || now - h->released >= kPeerHoldLinger)) due.emplace_back(seg, h);
    }
  }
  for (const auto& [seg, h] : due) {
    std::lock_guard<std::mutex> g(h->mu);
    {
      std::lock_guard<std::mutex> l(peer_holds_mu_);
      if (h->count != 0) continue;  // held again meanwhile
    }
    if (h->marker) {
      const std::string path =
          HoldDirPath(opts_.backing_dir, opts_.node_id, seg.node) + "/" + SegmentFileName(seg.generation, seg.seq);
      Status r = env_->Remove(path);
      if (!r.ok() && !r.IsNotFound()) {
        LogLimited(spdlog::level::warn, LogKey("peer-hold-remove", r), "kvfs: removing hold marker {}: {}", path,
                   ErrnoText(r));
        continue;  // retried at the next sweep
      }
      h->marker = false;
      peer_hold_markers_--;
    }
    std::lock_guard<std::mutex> l(peer_holds_mu_);
    auto it = peer_holds_.find(seg);
    // Erased only after its marker is gone: a new hold then makes a new entry and a new marker.
    if (it != peer_holds_.end() && it->second == h && h->count == 0) peer_holds_.erase(it);
  }
}

void StoreImpl::ClearOwnHoldMarkers() {
  const std::string holds = HoldsDirPath(opts_.backing_dir, opts_.node_id);
  std::vector<std::string> owners;
  if (!env_->GetChildren(holds, &owners).ok()) return;  // NotFound: none
  uint64_t removed = 0;
  for (const auto& owner : owners) {
    std::vector<std::string> names;
    if (!env_->GetChildren(holds + "/" + owner, &names).ok()) continue;
    for (const auto& n : names) {
      if (env_->Remove(holds + "/" + owner + "/" + n).ok()) removed++;
    }
  }
  if (removed) spdlog::info("kvfs: removed {} hold marker(s) of peers' segments left by an earlier mount", removed);
}

std::set<SegmentId> SegmentsHeldByLivePeers(Env* env, const std::string& backing, const std::string& owner,
                                            const std::vector<SegmentId>& segs, bool* complete,
                                            std::vector<std::string>* known, std::vector<std::string>* holders) {
  *complete = true;
  std::set<SegmentId> held;
  if (segs.empty()) return held;
  std::map<std::string, SegmentId> wanted;  // marker name -> segment
  for (const auto& id : segs) wanted.emplace(SegmentFileName(id.generation, id.seq), id);
  auto nodes = ListNodes(env, backing, known);
  if (!nodes.ok()) {
    *complete = false;
    return held;
  }
  if (known) *known = *nodes;
  for (const auto& node : *nodes) {
    if (node == owner) continue;
    std::vector<std::string> names;
    Status s = env->GetChildren(HoldDirPath(backing, node, owner), &names);
    if (s.IsNotFound()) continue;
    if (!s.ok()) {
      *complete = false;
      continue;
    }
    std::vector<SegmentId> hits;
    for (const auto& n : names) {
      auto w = wanted.find(n);
      if (w != wanted.end()) hits.push_back(w->second);
    }
    if (hits.empty()) continue;
    // Markers of a dead (or cleanly unmounted) node hold nothing: its handles are gone.
    if (!NodeLooksLive(env, backing, node, kPeerHoldHeartbeatTimeout)) continue;
    held.insert(hits.begin(), hits.end());
    if (holders) holders->push_back(node);
  }
  return held;
}

std::set<SegmentId> StoreImpl::SegmentsHeldByPeers(const std::vector<SegmentId>& segs, bool* complete) {
  return SegmentsHeldByLivePeers(env_, opts_.backing_dir, opts_.node_id, segs, complete, &hold_check_nodes_);
}

}  // namespace kvfs
