// libFuzzer entry point: segment files - header, record header/meta, value, trailer/footer, scan
// (tests/fuzz/fuzz_targets.h).
#include "tests/fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return kvfs::fuzz::FuzzSegment(data, size);
}
