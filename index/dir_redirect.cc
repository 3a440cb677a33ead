// The redirect rule of directory renames: see dir_redirect.h.
#include "index/dir_redirect.h"

#include <algorithm>
#include <tuple>

namespace kvfs {

void SortDirRenames(std::vector<DirRenameRecord>* records) {
  std::stable_sort(records->begin(), records->end(), [](const DirRenameRecord& a, const DirRenameRecord& b) {
    return std::tie(a.stamp, a.node) < std::tie(b.stamp, b.node);
  });
}

bool RedirectDirPath(std::span<const DirRenameRecord> records, std::string* path, uint64_t stamp,
                     const std::string& node) {
  bool changed = false;
  for (const DirRenameRecord& r : records) {
    if (!(std::tie(stamp, node) < std::tie(r.stamp, r.node))) continue;  // the entry is not older
    if (r.from.empty() || r.from == "/") continue;
    const std::string& p = *path;
    const bool under = p.size() > r.from.size() && p.compare(0, r.from.size(), r.from) == 0 && p[r.from.size()] == '/';
    if (p != r.from && !under) continue;
    *path = r.to + p.substr(r.from.size());
    changed = true;
  }
  return changed;
}

bool RedirectApplyOp(std::span<const DirRenameRecord> records, ApplyOp* op, const std::string& batch_node) {
  switch (op->kind) {
    case ApplyOp::Kind::kSeal:
    case ApplyOp::Kind::kDrop:
    case ApplyOp::Kind::kCut:
    case ApplyOp::Kind::kDirRenameRecord:
      return false;
    default:
      break;
  }
  if (records.empty()) return false;
  const std::string& node = op->node.empty() ? batch_node : op->node;
  bool changed = RedirectDirPath(records, &op->path, op->stamp, node);
  if (op->kind == ApplyOp::Kind::kRename || op->kind == ApplyOp::Kind::kExchange) {
    changed = RedirectDirPath(records, &op->to, op->stamp, node) || changed;
  }
  return changed;
}

}  // namespace kvfs
