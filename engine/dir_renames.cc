#include "engine/dir_renames.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "index/dir_redirect.h"

namespace kvfs {

void DirRenameLog::Note(std::string from, std::string to, uint64_t stamp, std::string node, bool exchange) {
  if (from.empty() || from == to || stamp == 0) return;
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> l(mu_);
  ExpireLocked(now);
  DirRenameRecord r{std::move(from), std::move(to), stamp, std::move(node), exchange};
  auto pos = std::upper_bound(renames_.begin(), renames_.end(), r, [](const DirRenameRecord& a, const DirRenameRecord& b) {
    return std::tie(a.stamp, a.node) < std::tie(b.stamp, b.node);
  });
  noted_.insert(noted_.begin() + (pos - renames_.begin()), now);
  renames_.insert(pos, std::move(r));
  while (renames_.size() > kMaxRenames) {
    // The oldest by the time it was noted (usually the front: stamps and noting times agree).
    const size_t oldest = std::min_element(noted_.begin(), noted_.end()) - noted_.begin();
    renames_.erase(renames_.begin() + oldest);
    noted_.erase(noted_.begin() + oldest);
  }
  set_dirty_ = true;
}

void DirRenameLog::ExpireLocked(std::chrono::steady_clock::time_point now) {
  size_t out = 0;
  for (size_t i = 0; i < renames_.size(); i++) {
    if (now - noted_[i] > kKeep) continue;
    if (out != i) {
      renames_[out] = std::move(renames_[i]);
      noted_[out] = noted_[i];
    }
    out++;
  }
  if (out == renames_.size()) return;
  renames_.resize(out);
  noted_.resize(out);
  set_dirty_ = true;
}

bool DirRenameLog::Redirect(ApplyOp* op, const std::string& batch_node, const DirRenameKeys* reflected) {
  std::lock_guard<std::mutex> l(mu_);
  if (renames_.empty()) return false;
  if (set_dirty_) {
    set_ = DirRenameSet(renames_);
    set_dirty_ = false;
  }
  const bool changed = set_.Redirect(op, batch_node, reflected);
  if (changed) ++redirected_;
  return changed;
}

size_t DirRenameLog::size() {
  std::lock_guard<std::mutex> l(mu_);
  return renames_.size();
}

}  // namespace kvfs
