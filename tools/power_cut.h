// TEST ONLY: simulated power cut and backing failures in the kvfs daemon (tests/integration/crash_test.py).
// With KVFS_TEST_POWER_CUT_SIGNAL=1 in the daemon's environment, every backing request goes through a
// FaultInjectionEnv (blockstore/fault_env.h), and two signals act on it:
//   SIGUSR2  a power cut or an NFS client crash at that moment: new backing requests hang, requests
//            already in flight get kPowerCutGraceMs to finish, every write not yet made durable is dropped
//            (files cut back to their last fdatasync'ed length, files and renames whose directory was not
//            synced undone), and the process _exit()s at once with kPowerCutExitCode, flushing nothing.
//            SIGKILL alone cannot show this: the page cache survives it.
//   SIGUSR1  toggles a backing failure: while on, every backing write and fdatasync fails with EIO
//            (docs/design.md §11 case 9 "a fault-injection switch"); off again, the export works as before.
// Not a user feature; not documented in --help. Called by RunMount (tools/mount_cmd.cc) after the fork.
//
// Thread safety: call StartPowerCutSimulation once, in the process's main thread before any other thread
// starts (they inherit its signal mask); it starts one detached thread that waits for the two signals.
#pragma once

#include "blockstore/env.h"

namespace kvfs::cli {

inline constexpr const char* kPowerCutEnvVar = "KVFS_TEST_POWER_CUT_SIGNAL";
inline constexpr int kPowerCutExitCode = 86;
inline constexpr int kPowerCutGraceMs = 100;

// Blocks SIGUSR1/SIGUSR2 and starts the thread that handles them. Returns the Env the Store must use
// (a FaultInjectionEnv over Env::Posix(), alive until the process exits).
kvfs::Env* StartPowerCutSimulation();

}  // namespace kvfs::cli
