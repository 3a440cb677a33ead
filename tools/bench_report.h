// kvfs-bench's report: the text tables printed per profile (direct vs kvfs per phase, backing operations
// and FUSE requests per unit, warm load vs tmpfs) and the ratios of each run (kvfs vs direct, kvfs vs the
// ceiling, daemon CPU per GB) with their median over --repeat runs. Called by main (tools/kvfs_bench.cc)
// with the JSON RunMode produced (tools/bench_phases.h).
//
// Thread safety: plain functions over their arguments; printing writes stdout.
#pragma once

#include "tools/bench_config.h"

namespace kvfs::bench {

// One run's figures: per phase, units/s per mode, kvfs/direct, kvfs/ceiling, ceiling/direct, daemon CPU
// s/GB of kvfs and of the ceiling and their ratio; -1 where a figure is missing.
json RunRatios(const json& modes);
// Median of each figure over the runs (missing figures left out).
json MedianRatios(const json& runs);

// The table of one profile (pj: the profile's JSON: "modes", "warm_load_vs_tmpfs", ...).
void PrintProfile(const json& pj);
// The S3 table (modes s3-kvfs and s3-object, side by side): per phase the S3 requests per chunk, in all and
// by type, and MB/s (lookup: probes/s); s3-kvfs's store through its unmount. Nothing without an s3 mode.
void PrintS3(const json& pj);
// The ratio table of every run and their median (nothing for one run without a ceiling).
void PrintRuns(const json& pj);

}  // namespace kvfs::bench
