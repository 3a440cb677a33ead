// ParseSize: byte sizes as the kvfs command line takes them.
//
//   "123"                       -> 123 bytes
//   "4K" "4k" "4KiB" "4kib"     -> 4 * 1024          (K, M, G, T, P with or without "iB": binary)
//   "256MiB" "256M"             -> 256 * 2^20
//   "1G" "1GiB"                 -> 2^30
//   "1KB" "1MB" "1GB" "1TB"     -> decimal (1000^n), as disk vendors and dd(1) use them
//   "1.5GiB"                    -> 1.5 * 2^30 rounded down to a whole byte
// Whitespace between number and unit is allowed. Errors (empty, negative, unknown unit, overflow of
// 64 bits) return false and set *err to a one-line reason.
#pragma once

#include <cctype>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvfs {

inline bool ParseSize(std::string_view text, uint64_t* out, std::string* err) {
  auto fail = [&](const std::string& why) {
    if (err) *err = "invalid size '" + std::string(text) + "': " + why;
    return false;
  };
  size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  size_t start = i;
  uint64_t whole = 0;
  bool digits = false;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    digits = true;
    uint64_t d = static_cast<uint64_t>(text[i] - '0');
    if (whole > (UINT64_MAX - d) / 10) return fail("too large");
    whole = whole * 10 + d;
  }
  double frac = 0;
  bool has_frac = false;
  if (i < text.size() && text[i] == '.') {
    ++i;
    double scale = 0.1;
    for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
      digits = true;
      has_frac = true;
      frac += scale * (text[i] - '0');
      scale /= 10;
    }
  }
  if (!digits || (i > start && text[start] == '.' && whole == 0 && !has_frac)) {
    return fail(start < text.size() && text[start] == '-' ? "must not be negative" : "expected a number");
  }
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  std::string unit;
  for (; i < text.size(); ++i) unit.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(text[i]))));
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.back()))) unit.pop_back();
  uint64_t mult = 1;
  if (!unit.empty() && unit != "b") {
    static const char kUnits[] = "kmgtp";
    char c = unit[0];
    size_t pos = std::string_view(kUnits).find(c);
    if (pos == std::string_view::npos) return fail("unknown unit '" + unit + "' (use K, M, G, T, KiB, MiB, GiB, KB, MB...)");
    std::string rest = unit.substr(1);
    uint64_t base;
    if (rest.empty() || rest == "i" || rest == "ib") base = 1024;
    else if (rest == "b") base = 1000;
    else return fail("unknown unit '" + unit + "'");
    for (size_t k = 0; k <= pos; ++k) mult *= base;
  }
  if (whole > UINT64_MAX / mult) return fail("too large");
  uint64_t v = whole * mult;
  if (has_frac) {
    long double extra = static_cast<long double>(frac) * static_cast<long double>(mult);
    if (static_cast<long double>(UINT64_MAX - v) < extra) return fail("too large");
    v += static_cast<uint64_t>(std::floor(extra));
  }
  *out = v;
  return true;
}

}  // namespace kvfs
