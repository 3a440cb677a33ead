// The redirect rule of directory renames: see dir_redirect.h.
#include "index/dir_redirect.h"

#include <algorithm>
#include <string_view>
#include <tuple>

namespace kvfs {

DirRenameSet::DirRenameSet(std::vector<DirRenameRecord> records) {
  std::erase_if(records, [](const DirRenameRecord& r) {
    if (r.stamp == 0 || r.from.size() < 2 || r.from[0] != '/' || r.from == r.to) return true;
    // An exchange's two ends are both looked up: neither may be the root or lie under the other.
    auto under = [](const std::string& p, const std::string& anc) {
      return p.size() > anc.size() && p.compare(0, anc.size(), anc) == 0 && p[anc.size()] == '/';
    };
    return r.exchange && (r.to.size() < 2 || r.to[0] != '/' || under(r.to, r.from) || under(r.from, r.to));
  });
  std::stable_sort(records.begin(), records.end(), [](const DirRenameRecord& a, const DirRenameRecord& b) {
    return std::tie(a.stamp, a.node) < std::tie(b.stamp, b.node);
  });
  // One RENAME entry is one (stamp, node): the same record from several snapshots counts once.
  records.erase(std::unique(records.begin(), records.end(),
                            [](const DirRenameRecord& a, const DirRenameRecord& b) {
                              return a.stamp == b.stamp && a.node == b.node;
                            }),
                records.end());
  records_ = std::move(records);
  for (size_t i = 0; i < records_.size(); i++) {
    by_from_[records_[i].from].push_back(i);
    if (records_[i].exchange) by_from_[records_[i].to].push_back(i);
  }
}

bool DirRenameSet::RedirectPath(std::string* path, uint64_t stamp, const std::string& node,
                                const DirRenameKeys* reflected, const DirRenameKeys* own_pending) const {
  if (records_.empty()) return false;
  // The first record newer than the entry.
  size_t pos = std::upper_bound(records_.begin(), records_.end(), std::tie(stamp, node),
                                [](const auto& key, const DirRenameRecord& r) {
                                  return key < std::tie(r.stamp, r.node);
                                }) -
               records_.begin();
  bool changed = false;
  while (pos < records_.size()) {
    // The oldest record at or after pos whose source is the path or one of its ancestors.
    size_t best = records_.size();
    const std::string_view p(*path);
    for (size_t k = 1; k <= p.size(); k++) {
      if (k < p.size() && p[k] != '/') continue;
      auto it = by_from_.find(p.substr(0, k));
      if (it == by_from_.end()) continue;
      auto j = std::lower_bound(it->second.begin(), it->second.end(), pos);
      // The entry's own node's never apply (but those pending for it), nor those its path already reflects.
      auto skip = [&](const DirRenameRecord& r) {
        const auto key = std::make_pair(r.stamp, r.node);
        if (r.node == node && !(own_pending && own_pending->count(key))) return true;
        return reflected != nullptr && reflected->count(key) != 0;
      };
      while (j != it->second.end() && skip(records_[*j])) ++j;
      if (j != it->second.end()) best = std::min(best, *j);
    }
    if (best == records_.size()) break;
    const DirRenameRecord& r = records_[best];
    // Which end of the record the path is under (an exchange's either; a rename's `from`).
    const bool under_from = path->size() >= r.from.size() && path->compare(0, r.from.size(), r.from) == 0 &&
                            (path->size() == r.from.size() || (*path)[r.from.size()] == '/');
    if (under_from) {
      *path = r.to + path->substr(r.from.size());
    } else {
      *path = r.from + path->substr(r.to.size());
    }
    changed = true;
    pos = best + 1;
  }
  return changed;
}

bool DirRenameSet::Redirect(ApplyOp* op, const std::string& batch_node, const DirRenameKeys* reflected,
                            const DirRenameKeys* own_pending) const {
  switch (op->kind) {
    case ApplyOp::Kind::kSeal:
    case ApplyOp::Kind::kDrop:
    case ApplyOp::Kind::kCut:
    case ApplyOp::Kind::kDirRenameRecord:
      return false;
    default:
      break;
  }
  if (records_.empty()) return false;
  const std::string& node = op->node.empty() ? batch_node : op->node;
  bool changed = RedirectPath(&op->path, op->stamp, node, reflected, own_pending);
  if (op->kind == ApplyOp::Kind::kRename || op->kind == ApplyOp::Kind::kExchange) {
    changed = RedirectPath(&op->to, op->stamp, node, reflected, own_pending) || changed;
  }
  return changed;
}

}  // namespace kvfs
