#include "blockstore/extent_map.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <queue>
#include <set>

namespace kvfs {

ExtentMap ExtentMap::FromLocation(const Location& loc, uint64_t size) {
  ExtentMap m(size);
  if (!loc.empty() && size > 0) m.extents_.push_back(Extent{0, std::min(size, loc.length), loc, 0});
  return m;
}

bool ExtentMap::SingleRecord(Location* loc) const {
  if (size_ == 0 && extents_.empty()) {
    *loc = Location{};
    return true;
  }
  if (extents_.size() != 1) return false;
  const Extent& e = extents_[0];
  if (e.file_offset != 0 || e.value_offset != 0 || e.length != size_ || e.record.length != size_) return false;
  *loc = e.record;
  return true;
}

uint64_t ExtentMap::DataBytes() const {
  uint64_t n = 0;
  for (const Extent& e : extents_) n += e.length;
  return n;
}

// In place: only the extents the range touches are replaced (at most two pieces survive: the head of
// the first before off, the tail of the last after end); the rest of the vector is moved, never copied.
void ExtentMap::Punch(uint64_t off, uint64_t len) {
  if (len == 0 || off >= size_) return;
  const uint64_t end = std::min(size_, off + len);
  // The first extent that ends after off; the touched ones run from it while they start before end.
  auto first = std::upper_bound(extents_.begin(), extents_.end(), off,
                                [](uint64_t o, const Extent& e) { return o < e.file_end(); });
  auto last = first;
  while (last != extents_.end() && last->file_offset < end) ++last;
  if (first == last) return;
  std::optional<Extent> head, tail;
  if (first->file_offset < off) {  // the part before the punched range
    head = *first;
    head->length = off - first->file_offset;
  }
  if (const Extent& l = *(last - 1); l.file_end() > end) {  // the part after it
    tail = l;
    tail->file_offset = end;
    tail->value_offset = l.value_offset + (end - l.file_offset);
    tail->length = l.file_end() - end;
  }
  auto pos = extents_.erase(first, last);
  if (tail) pos = extents_.insert(pos, std::move(*tail));
  if (head) extents_.insert(pos, std::move(*head));
}

Status ExtentMap::Overlay(uint64_t file_offset, uint64_t length, const Location& record, uint64_t value_offset) {
  if (length == 0) return Status::OK();
  if (record.empty()) return Status::InvalidArgument("extent map: overlay without a record");
  if (value_offset > record.length || length > record.length - value_offset) {
    return Status::InvalidArgument("extent map: overlay past the record's value");
  }
  if (file_offset + length > size_) size_ = file_offset + length;
  Punch(file_offset, length);
  Extent n{file_offset, length, record, value_offset};
  auto it = std::lower_bound(extents_.begin(), extents_.end(), file_offset,
                             [](const Extent& e, uint64_t off) { return e.file_offset < off; });
  extents_.insert(it, n);
  Normalize();
  return Status::OK();
}

void ExtentMap::Resize(uint64_t n) {
  if (n < size_) {
    Punch(n, size_ - n);
    size_ = n;
  } else {
    size_ = n;  // [old size, n) is a hole
  }
}

void ExtentMap::PushBack(const Extent& e) {
  if (e.length == 0) return;
  if (e.file_end() > size_) size_ = e.file_end();
  if (!extents_.empty()) {
    Extent& p = extents_.back();
    if (p.file_end() == e.file_offset && p.record == e.record && p.value_offset + p.length == e.value_offset) {
      p.length += e.length;
      return;
    }
  }
  extents_.push_back(e);
}

// In place, one pass: the offsets are compared first, so a map with nothing to merge costs a scan
// (Overlay calls it on every write of an extent file: it used to copy the whole map, twice with Punch,
// ~165 us per overlay of an 8,000-extent map).
void ExtentMap::Normalize() {
  if (extents_.size() < 2) return;
  size_t w = 0;
  for (size_t r = 1; r < extents_.size(); ++r) {
    Extent& p = extents_[w];
    Extent& e = extents_[r];
    if (p.file_end() == e.file_offset && p.value_offset + p.length == e.value_offset && p.record == e.record) {
      p.length += e.length;
    } else if (++w != r) {
      extents_[w] = std::move(e);
    }
  }
  extents_.resize(w + 1);
}

std::vector<ExtentMap::Piece> ExtentMap::Pieces(uint64_t off, uint64_t len) const {
  std::vector<Piece> out;
  if (off >= size_ || len == 0) return out;
  const uint64_t end = std::min(size_, off + std::min(len, size_ - off));
  // First extent that ends after off.
  auto it = std::upper_bound(extents_.begin(), extents_.end(), off,
                             [](uint64_t o, const Extent& e) { return o < e.file_end(); });
  uint64_t pos = off;
  while (pos < end) {
    if (it == extents_.end() || it->file_offset >= end) {
      out.push_back(Piece{pos, end - pos, nullptr, 0});
      break;
    }
    if (it->file_offset > pos) {
      out.push_back(Piece{pos, it->file_offset - pos, nullptr, 0});
      pos = it->file_offset;
    }
    const uint64_t stop = std::min(end, it->file_end());
    out.push_back(Piece{pos, stop - pos, &*it, it->value_offset + (pos - it->file_offset)});
    pos = stop;
    ++it;
  }
  return out;
}

uint64_t ExtentMap::NextData(uint64_t off) const {
  for (const Extent& e : extents_) {
    if (e.file_end() > off) return std::max(off, e.file_offset);
  }
  return size_;
}

uint64_t ExtentMap::NextHole(uint64_t off) const {
  uint64_t pos = off;
  for (const Extent& e : extents_) {
    if (e.file_end() <= pos) continue;
    if (e.file_offset > pos) return pos;
    pos = e.file_end();
  }
  return std::min(std::max(pos, off), size_);
}

std::map<std::pair<SegmentId, uint64_t>, uint64_t> ExtentMap::LiveBytesByRecord() const {
  std::map<std::pair<SegmentId, uint64_t>, uint64_t> live;
  for (const Extent& e : extents_) live[{e.record.segment, e.record.record_offset}] += e.length;
  return live;
}

std::vector<Location> ExtentMap::Records() const {
  std::vector<Location> out;
  std::set<std::pair<SegmentId, uint64_t>> seen;
  for (const Extent& e : extents_) {
    if (seen.insert({e.record.segment, e.record.record_offset}).second) out.push_back(e.record);
  }
  return out;
}

Result<size_t> ExtentMap::ReplaceRecord(const Location& old_record, const Location& new_record) {
  if (old_record.length != new_record.length || new_record.empty()) {
    return Status::InvalidArgument("extent map: a moved record must keep its value length");
  }
  size_t n = 0;
  for (Extent& e : extents_) {
    if (e.record == old_record) {
      e.record = new_record;
      n++;
    }
  }
  if (n) Normalize();
  return n;
}

ExtentMapRef NormalizeExtents(ExtentMap m, Location* loc) {
  if (m.SingleRecord(loc)) return {};
  *loc = Location{};
  return ExtentMapRef(std::make_shared<const ExtentMap>(std::move(m)));
}

std::vector<Location> ContentRecords(const Location& loc, const ExtentMapRef& ext) {
  if (ext) return ext->Records();
  if (loc.empty()) return {};
  return {loc};
}

bool ExtentMap::NeedsCompaction(std::vector<Location>* cold) const {
  if (cold) cold->clear();
  bool need = extents_.size() > kMaxExtents;
  const auto live = LiveBytesByRecord();
  for (const Location& r : Records()) {
    const uint64_t l = live.at({r.segment, r.record_offset});
    if (l * kMinLiveFraction < r.length) {
      need = true;
      if (cold) cold->push_back(r);
    }
  }
  return need;
}

std::vector<ExtentMap::Range> ExtentMap::CompactionRanges(const Location& fresh, uint64_t budget) const {
  std::vector<Location> cold;
  NeedsCompaction(&cold);
  const size_t n = extents_.size();
  if (cold.empty() && n <= kJoinExtents) return {};
  using Key = std::pair<SegmentId, uint64_t>;
  auto key = [](const Location& r) { return Key{r.segment, r.record_offset}; };
  // written[i]: extent i is part of the FLUSH record (fresh, or a cold record's); filled[i]: the gap
  // between extents i and i + 1 is written too (zeros). Extents i and i + 1 end up as one extent of
  // the new record when both are written and the gap between them is empty or filled.
  std::vector<char> written(n, 0), filled(n, 0);
  std::map<Key, uint64_t> left;                 // live bytes per record not written (copied) yet
  std::map<Key, std::vector<size_t>> of_record;  // its extents
  uint64_t copied = 0;                           // bytes copied (not fresh): cold extents, joins, gaps
  std::set<Key> cold_keys;
  for (const Location& r : cold) cold_keys.insert(key(r));
  for (size_t i = 0; i < n; ++i) {
    const Location& r = extents_[i].record;
    written[i] = r == fresh || cold_keys.count(key(r)) > 0;
    if (written[i] && r != fresh) copied += extents_[i].length;
    if (!written[i]) left[key(r)] += extents_[i].length;
    of_record[key(r)].push_back(i);
  }
  auto gap = [&](size_t i) { return extents_[i + 1].file_offset - extents_[i].file_end(); };
  auto joined = [&](size_t i) { return written[i] && written[i + 1] && (gap(i) == 0 || filled[i]); };
  size_t count = n;
  for (size_t i = 0; i + 1 < n; ++i) {
    if (joined(i)) count--;
  }
  // Joins: over kMaxExtents, cheapest first down to kMaxExtents - kMaxExtents / 8 whatever they cost
  // (the hard cap); over kJoinExtents, cheapest first down to kJoinExtents / 2 while what they copy
  // (with the cold copies) fits in `budget`. A join's cost is the bytes it copies that are not copied
  // anyway, including the rest of a record it leaves under 1/kMinLiveFraction live (copied too, so the
  // result meets the per-record rule).
  const bool hard = count > kMaxExtents;
  if (hard || count > kJoinExtents) {
    const size_t hard_target = kMaxExtents - kMaxExtents / 8, target = kJoinExtents / 2;
    auto cost = [&](size_t i) {
      return (written[i] ? 0 : extents_[i].length) + (written[i + 1] ? 0 : extents_[i + 1].length) +
             (filled[i] ? 0 : gap(i));
    };
    using Item = std::pair<uint64_t, size_t>;  // (cost, boundary i: between extents i and i + 1)
    std::priority_queue<Item, std::vector<Item>, std::greater<Item>> q;
    for (size_t i = 0; i + 1 < n; ++i) {
      if (!joined(i)) q.push({cost(i), i});
    }
    // Marks extent k written; the boundaries on either side change cost (queued again) or join.
    auto mark = [&](size_t k) {
      if (written[k]) return;
      const bool before_l = k > 0 && joined(k - 1), before_r = k + 1 < n && joined(k);
      written[k] = 1;
      copied += extents_[k].length;
      left[key(extents_[k].record)] -= extents_[k].length;
      if (k > 0) {
        if (joined(k - 1)) count -= !before_l;
        else q.push({cost(k - 1), k - 1});
      }
      if (k + 1 < n) {
        if (joined(k)) count -= !before_r;
        else q.push({cost(k), k});
      }
    };
    while (count > target && !q.empty()) {
      auto [c, i] = q.top();
      q.pop();
      if (joined(i) || cost(i) != c) continue;  // joined meanwhile, or queued again at its new cost
      // The rest of a record this join leaves under 1/kMinLiveFraction live is copied with it.
      std::vector<std::pair<Key, uint64_t>> drop;  // (record, bytes this join copies of it)
      for (size_t k : {i, i + 1}) {
        if (written[k]) continue;
        const Key r = key(extents_[k].record);
        if (!drop.empty() && drop.back().first == r) drop.back().second += extents_[k].length;
        else drop.push_back({r, extents_[k].length});
      }
      uint64_t extra = 0;
      std::vector<Key> rest;
      for (const auto& [r, b] : drop) {
        const uint64_t after = left[r] - b;
        if (after > 0 && after * kMinLiveFraction < extents_[of_record[r][0]].record.length) {
          extra += after;
          rest.push_back(r);
        }
      }
      const bool forced = hard && count > hard_target;
      if (!forced && copied + c + extra > budget) {
        if (copied + c > budget) break;  // nothing queued is cheaper: the budget is spent
        continue;                        // this one drags a whole record along: try the next
      }
      mark(i);
      mark(i + 1);
      if (!filled[i]) {
        filled[i] = 1;
        copied += gap(i);
        if (gap(i) > 0 && joined(i)) count--;
      }
      for (const Key& r : rest) {
        for (size_t k : of_record[r]) mark(k);
      }
    }
  }
  // Nothing beyond the fresh extents: the FLUSH appends them only.
  if (copied == 0) return {};
  // A safety net (the joins above copy the rest of a record they leave cold): any record under
  // 1/kMinLiveFraction live in what stays is copied whole, so the result meets the per-record rule.
  for (size_t i = 0; i < n; ++i) {
    const Location& r = extents_[i].record;
    if (!written[i] && left[key(r)] * kMinLiveFraction < r.length) written[i] = 1;
  }
  std::vector<Range> out;
  auto add = [&](uint64_t off, uint64_t len) {
    if (len == 0) return;
    if (!out.empty() && out.back().offset + out.back().length == off) {
      out.back().length += len;
    } else {
      out.push_back(Range{off, len});
    }
  };
  for (size_t i = 0; i < n; ++i) {
    if (written[i]) add(extents_[i].file_offset, extents_[i].length);
    if (i + 1 < n && filled[i]) add(extents_[i].file_end(), gap(i));
  }
  return out;
}

ExtentMap ExtentMap::WithRangesFrom(const std::vector<Range>& ranges, const Location& record) const {
  ExtentMap out(size_);
  size_t j = 0;
  auto keep_between = [&](uint64_t from, uint64_t to) {  // this map's extents clipped to [from, to)
    while (j < extents_.size() && extents_[j].file_end() <= from) ++j;
    for (size_t k = j; k < extents_.size() && extents_[k].file_offset < to; ++k) {
      const Extent& e = extents_[k];
      const uint64_t s = std::max(e.file_offset, from), t = std::min(e.file_end(), to);
      if (s < t) out.PushBack(Extent{s, t - s, e.record, e.value_offset + (s - e.file_offset)});
    }
  };
  uint64_t at = 0, value_off = 0;
  for (const Range& r : ranges) {
    keep_between(at, r.offset);
    out.PushBack(Extent{r.offset, r.length, record, value_off});
    value_off += r.length;
    at = r.offset + r.length;
  }
  keep_between(at, size_);
  out.Resize(size_);
  return out;
}

Status ExtentMap::Validate() const {
  uint64_t prev_end = 0;
  for (const Extent& e : extents_) {
    if (e.length == 0) return Status::Corruption("extent map: empty extent");
    if (e.record.empty()) return Status::Corruption("extent map: extent without a record");
    if (e.file_offset < prev_end) return Status::Corruption("extent map: extents overlap or are out of order");
    if (e.file_offset > size_ || e.length > size_ - e.file_offset) {
      return Status::Corruption("extent map: extent past the file size");
    }
    if (e.value_offset > e.record.length || e.length > e.record.length - e.value_offset) {
      return Status::Corruption("extent map: extent past its record's value");
    }
    prev_end = e.file_end();
  }
  return Status::OK();
}

std::vector<Location> ExtentDelta::Records() const {
  std::vector<Location> out;
  for (const Piece& p : pieces) {
    if (!p.record.empty() && std::find(out.begin(), out.end(), p.record) == out.end()) out.push_back(p.record);
  }
  return out;
}

Status ExtentDelta::Validate() const {
  uint64_t prev_end = 0;
  for (const Piece& p : pieces) {
    if (p.length == 0) return Status::Corruption("extent delta: empty piece");
    if (p.file_offset < prev_end) return Status::Corruption("extent delta: pieces overlap or are out of order");
    if (p.file_offset > size || p.length > size - p.file_offset) {
      return Status::Corruption("extent delta: piece past the file size");
    }
    if (p.record.empty() && p.value_offset != 0) return Status::Corruption("extent delta: hole with a value offset");
    if (!p.record.empty() &&
        (p.value_offset > p.record.length || p.length > p.record.length - p.value_offset)) {
      return Status::Corruption("extent delta: piece past its record's value");
    }
    prev_end = p.file_end();
  }
  return Status::OK();
}

ExtentDelta DiffExtentMaps(const ExtentMap& base, const ExtentMap& next) {
  ExtentDelta d;
  d.size = next.size();
  ExtentMap b = base;
  b.Resize(next.size());
  const std::vector<ExtentMap::Piece> pb = b.Pieces(0, d.size), pn = next.Pieces(0, d.size);
  size_t i = 0, j = 0;
  uint64_t pos = 0;
  auto emit = [&](uint64_t off, uint64_t len, const Location& rec, uint64_t vo) {
    if (!d.pieces.empty()) {
      ExtentDelta::Piece& p = d.pieces.back();
      if (p.file_end() == off && p.record == rec && (rec.empty() || p.value_offset + p.length == vo)) {
        p.length += len;
        return;
      }
    }
    d.pieces.push_back(ExtentDelta::Piece{off, len, rec, vo});
  };
  while (pos < d.size && i < pb.size() && j < pn.size()) {
    const ExtentMap::Piece& x = pb[i];
    const ExtentMap::Piece& y = pn[j];
    const uint64_t xe = x.file_offset + x.length, ye = y.file_offset + y.length;
    const uint64_t end = std::min(xe, ye);
    const uint64_t xv = x.value_offset + (pos - x.file_offset), yv = y.value_offset + (pos - y.file_offset);
    const bool same = (!x.extent && !y.extent) || (x.extent && y.extent && x.extent->record == y.extent->record && xv == yv);
    if (!same) emit(pos, end - pos, y.extent ? y.extent->record : Location{}, y.extent ? yv : 0);
    pos = end;
    if (xe == end) ++i;
    if (ye == end) ++j;
  }
  return d;
}

Status ApplyExtentDelta(const ExtentMap& base, const ExtentDelta& d, ExtentMap* out) {
  ExtentMap m = base;
  m.Resize(d.size);
  for (const ExtentDelta::Piece& p : d.pieces) {
    if (p.length == 0 || p.file_offset > d.size || p.length > d.size - p.file_offset) {
      return Status::InvalidArgument("extent delta: piece outside the file size");
    }
    if (p.record.empty()) {
      m.Punch(p.file_offset, p.length);
    } else {
      KVFS_RETURN_IF_ERROR(m.Overlay(p.file_offset, p.length, p.record, p.value_offset));
    }
  }
  *out = std::move(m);
  return Status::OK();
}

Status ReadExtents(const ExtentMap& map, uint64_t off, size_t len, char* out, const ExtentFetch& fetch, size_t* got) {
  *got = 0;
  size_t done = 0;
  for (const ExtentMap::Piece& p : map.Pieces(off, len)) {
    if (p.extent == nullptr) {
      std::memset(out + done, 0, p.length);
    } else {
      KVFS_RETURN_IF_ERROR(fetch(p.extent->record, p.value_offset, static_cast<size_t>(p.length), out + done));
    }
    done += p.length;
  }
  *got = done;
  return Status::OK();
}

}  // namespace kvfs
