// ParseSize (tools/size_parse.h): the size syntax of `kvfs mount --cache-size/--segment-size`.
#include "tools/size_parse.h"

#include <gtest/gtest.h>

namespace kvfs {
namespace {

uint64_t P(const char* s) {
  uint64_t v = 0;
  std::string err;
  EXPECT_TRUE(ParseSize(s, &v, &err)) << s << ": " << err;
  return v;
}

bool Bad(const char* s) {
  uint64_t v = 12345;
  std::string err;
  bool ok = ParseSize(s, &v, &err);
  if (!ok) {
    EXPECT_FALSE(err.empty());
    EXPECT_EQ(err.find('\n'), std::string::npos);
    EXPECT_EQ(v, 12345u);  // untouched on error
  }
  return !ok;
}

TEST(SizeParse, PlainBytes) {
  EXPECT_EQ(P("0"), 0u);
  EXPECT_EQ(P("123"), 123u);
  EXPECT_EQ(P("123B"), 123u);
  EXPECT_EQ(P(" 4096 "), 4096u);
  EXPECT_EQ(P("18446744073709551615"), UINT64_MAX);
}

TEST(SizeParse, BinaryUnits) {
  EXPECT_EQ(P("4K"), 4096u);
  EXPECT_EQ(P("4k"), 4096u);
  EXPECT_EQ(P("4KiB"), 4096u);
  EXPECT_EQ(P("256MiB"), 256ull << 20);
  EXPECT_EQ(P("256M"), 256ull << 20);
  EXPECT_EQ(P("256mib"), 256ull << 20);
  EXPECT_EQ(P("1G"), 1ull << 30);
  EXPECT_EQ(P("4GiB"), 4ull << 30);
  EXPECT_EQ(P("4 GiB"), 4ull << 30);
  EXPECT_EQ(P("2T"), 2ull << 40);
  EXPECT_EQ(P("1Pi"), 1ull << 50);
}

TEST(SizeParse, DecimalUnits) {
  EXPECT_EQ(P("1KB"), 1000u);
  EXPECT_EQ(P("1MB"), 1000000u);
  EXPECT_EQ(P("2GB"), 2000000000u);
  EXPECT_EQ(P("1TB"), 1000000000000u);
}

TEST(SizeParse, Fractions) {
  EXPECT_EQ(P("1.5GiB"), 3ull << 29);
  EXPECT_EQ(P("0.5K"), 512u);
  EXPECT_EQ(P("2.25MiB"), 2359296u);  // a vLLM 16-token chunk
}

TEST(SizeParse, Errors) {
  EXPECT_TRUE(Bad(""));
  EXPECT_TRUE(Bad("   "));
  EXPECT_TRUE(Bad("G"));
  EXPECT_TRUE(Bad("-1"));
  EXPECT_TRUE(Bad("-1G"));
  EXPECT_TRUE(Bad("12X"));
  EXPECT_TRUE(Bad("1GiBs"));
  EXPECT_TRUE(Bad("1 2"));
  EXPECT_TRUE(Bad("18446744073709551616"));  // 2^64
  EXPECT_TRUE(Bad("16777216T"));             // 2^64 bytes
  EXPECT_TRUE(Bad("."));
}

}  // namespace
}  // namespace kvfs
