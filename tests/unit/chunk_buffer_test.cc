// ChunkBuffer (fuse/chunk_buffer.h): the staged bytes of a file version.
#include "fuse/chunk_buffer.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace kvfs {
namespace {

std::string Whole(const ChunkBuffer& b) {
  std::string s;
  for (auto p : b.Parts()) s.append(p);
  return s;
}

TEST(ChunkBuffer, WriteReadAcrossChunks) {
  ChunkBuffer b;
  std::string data(ChunkBuffer::kChunk * 2 + 123, '\0');
  std::mt19937 rng(7);
  for (auto& c : data) c = static_cast<char>(rng());
  b.Write(0, data.data(), data.size());
  EXPECT_EQ(b.size(), data.size());
  EXPECT_EQ(b.capacity(), 3 * ChunkBuffer::kChunk);
  EXPECT_EQ(Whole(b), data);
  std::string out(5000, 'x');
  EXPECT_EQ(b.Read(ChunkBuffer::kChunk - 100, 5000, out.data()), 5000u);
  EXPECT_EQ(out, data.substr(ChunkBuffer::kChunk - 100, 5000));
  EXPECT_EQ(b.Read(data.size() - 10, 100, out.data()), 10u);
  EXPECT_EQ(b.Read(data.size(), 100, out.data()), 0u);
  std::vector<iovec> iov;
  EXPECT_EQ(b.Iov(ChunkBuffer::kChunk - 1, 2, &iov), 2u);
  ASSERT_EQ(iov.size(), 2u);
  EXPECT_EQ(iov[0].iov_len, 1u);
  EXPECT_EQ(iov[1].iov_len, 1u);
  EXPECT_EQ(b.Parts().size(), 3u);
}

TEST(ChunkBuffer, GapsAndGrowthAreZeros) {
  ChunkBuffer b;
  b.Write(10, "ab", 2);
  EXPECT_EQ(Whole(b), std::string(10, '\0') + "ab");
  b.Resize(1);  // shrink, then grow again: the old bytes must not come back
  b.Resize(12);
  EXPECT_EQ(Whole(b), std::string(12, '\0'));
  b.Write(0, "xyz", 3);
  b.Write(ChunkBuffer::kChunk + 5, "q", 1);
  std::string want = "xyz" + std::string(ChunkBuffer::kChunk + 2, '\0') + "q";
  EXPECT_EQ(Whole(b), want);
}

TEST(ChunkBuffer, ShrinkFreesChunks) {
  ChunkBuffer b;
  b.Resize(3 * ChunkBuffer::kChunk);
  EXPECT_EQ(b.capacity(), 3 * ChunkBuffer::kChunk);
  b.Resize(ChunkBuffer::kChunk + 1);
  EXPECT_EQ(b.capacity(), 2 * ChunkBuffer::kChunk);
  b.Resize(0);
  EXPECT_EQ(b.capacity(), 0u);
  EXPECT_TRUE(b.Parts().empty());
}

TEST(ChunkBuffer, OverwriteInPlace) {
  ChunkBuffer b;
  b.Write(0, "hello world", 11);
  b.Write(6, "WORLD", 5);
  EXPECT_EQ(Whole(b), "hello WORLD");
  b.Write(11, "!", 1);
  EXPECT_EQ(b.size(), 12u);
}

}  // namespace
}  // namespace kvfs
