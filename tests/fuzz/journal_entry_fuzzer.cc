// libFuzzer entry point: peers' journal entries (tests/fuzz/fuzz_targets.h).
#include "tests/fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return kvfs::fuzz::FuzzJournalEntry(data, size);
}
