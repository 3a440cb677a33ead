#include "engine/dir_renames.h"

#include <algorithm>
#include <tuple>
#include <utility>

namespace kvfs {

void DirRenameLog::Note(std::string from, std::string to, uint64_t stamp, std::string node) {
  if (from.empty() || from == to || stamp == 0) return;
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> l(mu_);
  ExpireLocked(now);
  Rename r{std::move(from), std::move(to), stamp, std::move(node), now};
  auto pos = std::upper_bound(renames_.begin(), renames_.end(), r, [](const Rename& a, const Rename& b) {
    return std::tie(a.stamp, a.node) < std::tie(b.stamp, b.node);
  });
  renames_.insert(pos, std::move(r));
  while (renames_.size() > kMaxRenames) {
    // The oldest by the time it was noted (usually the front: stamps and noting times agree).
    auto oldest = std::min_element(renames_.begin(), renames_.end(),
                                   [](const Rename& a, const Rename& b) { return a.noted < b.noted; });
    renames_.erase(oldest);
  }
}

void DirRenameLog::ExpireLocked(std::chrono::steady_clock::time_point now) {
  renames_.erase(std::remove_if(renames_.begin(), renames_.end(),
                                [&](const Rename& r) { return now - r.noted > kKeep; }),
                 renames_.end());
}

bool DirRenameLog::RedirectPathLocked(std::string* path, uint64_t stamp, const std::string& node) {
  bool changed = false;
  for (const Rename& r : renames_) {
    if (!(std::tie(stamp, node) < std::tie(r.stamp, r.node))) continue;  // the entry is not older
    const std::string& p = *path;
    const bool under = p.size() > r.from.size() && p.compare(0, r.from.size(), r.from) == 0 && p[r.from.size()] == '/';
    if (p != r.from && !under) continue;
    *path = r.to + p.substr(r.from.size());
    changed = true;
  }
  return changed;
}

bool DirRenameLog::Redirect(ApplyOp* op, const std::string& batch_node) {
  switch (op->kind) {
    case ApplyOp::Kind::kSeal:
    case ApplyOp::Kind::kDrop:
    case ApplyOp::Kind::kCut:
      return false;
    default:
      break;
  }
  std::lock_guard<std::mutex> l(mu_);
  if (renames_.empty()) return false;
  const std::string& node = op->node.empty() ? batch_node : op->node;
  bool changed = RedirectPathLocked(&op->path, op->stamp, node);
  if (op->kind == ApplyOp::Kind::kRename || op->kind == ApplyOp::Kind::kExchange) {
    changed = RedirectPathLocked(&op->to, op->stamp, node) || changed;
  }
  if (changed) ++redirected_;
  return changed;
}

size_t DirRenameLog::size() {
  std::lock_guard<std::mutex> l(mu_);
  return renames_.size();
}

}  // namespace kvfs
