// TEST ONLY: simulated power cut and backing failures (tools/power_cut.h).
#include "tools/power_cut.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "blockstore/fault_env.h"

namespace kvfs::cli {

kvfs::Env* StartPowerCutSimulation() {
  static kvfs::FaultInjectionEnv* env = new kvfs::FaultInjectionEnv(kvfs::Env::Posix());
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGUSR2);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    bool failing = false;
    std::vector<int> rules;
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) continue;
      if (sig == SIGUSR1) {
        failing = !failing;
        if (failing) {
          rules = {env->FailWrites(EIO), env->FailSyncs(EIO)};
        } else {
          for (int id : rules) env->RemoveFault(id);
          rules.clear();
        }
        std::fprintf(stderr, "kvfs: TEST backing failure switch %s\n", failing ? "ON (EIO)" : "off");
        continue;
      }
      break;  // SIGUSR2
    }
    env->Hang(std::chrono::hours(24), kvfs::kFaultAll);  // freeze: nothing new reaches the disk
    std::this_thread::sleep_for(std::chrono::milliseconds(kPowerCutGraceMs));
    kvfs::Status s = env->DropUnsyncedData();
    std::fprintf(stderr, "kvfs: TEST power cut: unsynced backing writes dropped (%s); exiting\n",
                 s.ToString().c_str());
    _exit(kPowerCutExitCode);
  }).detach();
  return env;
}

}  // namespace kvfs::cli
