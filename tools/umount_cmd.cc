// `kvfs umount` (tools/umount_cmd.h).
#include "tools/umount_cmd.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "tools/cli_util.h"

namespace kvfs::cli {

int RunUmount(const std::string& mp_in, double timeout_s) {
  struct stat mst;
  const bool dead = stat(mp_in.c_str(), &mst) != 0 && errno == ENOTCONN;  // a mount whose daemon is gone
  if (!dead && !IsDir(mp_in)) Die(kExitUsage, "mountpoint '" + mp_in + "' does not exist");
  std::string mp = RealPath(mp_in);
  if (dead) {
    mp = std::filesystem::absolute(mp_in).lexically_normal().string();
    if (mp.size() > 1 && mp.back() == '/') mp.pop_back();
  }
  if (!IsMountPoint(mp)) Die(kExitUsage, "'" + mp + "' is not mounted");
  std::string pid_s;
  pid_t pid = 0;
  if (ReadXattr(mp, "user.kvfs.pid", &pid_s)) {
    pid = static_cast<pid_t>(std::atoi(pid_s.c_str()));
  } else if (errno == ENOTCONN && MountFsType(mp) == "fuse.kvfs") {
    // The daemon is gone (killed, crashed): the kernel keeps a dead mount that every access fails with
    // "Transport endpoint is not connected". Nothing is left to flush: detach it (lazy unmount).
    pid_t c = fork();
    if (c == 0) {
      execlp("fusermount3", "fusermount3", "-u", "-z", mp.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    int st = 0;
    if (c < 0 || waitpid(c, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 || IsMountPoint(mp)) {
      Die(kExitFail, "'" + mp + "' is a dead kvfs mount (its daemon is gone) and fusermount3 -u -z failed");
    }
    std::fprintf(stderr,
                 "kvfs: '%s' was a dead kvfs mount (its daemon is gone: Transport endpoint is not connected); "
                 "cleared it with a lazy unmount; the next mount recovers the node\n",
                 mp.c_str());
    return 0;
  } else {
    Die(kExitUsage, "'" + mp + "' is not a kvfs mount (no user.kvfs.pid: " + strerror(errno) + ")");
  }
  // fusermount3 -u: a clean (not lazy) unmount; fails with EBUSY while files are open.
  int errp[2];
  if (pipe(errp) != 0) Die(kExitFail, std::string("pipe: ") + strerror(errno));
  pid_t c = fork();
  if (c == 0) {
    dup2(errp[1], 2);
    close(errp[0]);
    execlp("fusermount3", "fusermount3", "-u", mp.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(errp[1]);
  std::string err;
  char buf[512];
  ssize_t n;
  while ((n = read(errp[0], buf, sizeof(buf))) > 0) err.append(buf, static_cast<size_t>(n));
  close(errp[0]);
  int st = 0;
  waitpid(c, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
    Die(kExitFail, "unmount of '" + mp + "' failed: " + (err.empty() ? "fusermount3 error" : err));
  }
  // Wait for the daemon to flush (Store::Close) and exit.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  auto alive = [](pid_t p) {
    if (kill(p, 0) != 0) return false;
    // A zombie (a foreground daemon whose parent has not reaped it yet) has exited: done.
    std::ifstream st("/proc/" + std::to_string(p) + "/stat");
    std::string line;
    std::getline(st, line);
    size_t rp = line.rfind(')');
    return !(rp != std::string::npos && rp + 2 < line.size() && (line[rp + 2] == 'Z' || line[rp + 2] == 'X'));
  };
  while (pid > 0 && alive(pid)) {
    if (std::chrono::steady_clock::now() > deadline) {
      Die(kExitFail, "unmounted, but daemon pid " + std::to_string(pid) + " did not exit within " +
                         std::to_string(static_cast<int>(timeout_s)) + "s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // The daemon's own result (its final flush may have failed, e.g. a full backing store).
  if (pid > 0) {
    const std::string path = CloseStatusPath(pid);
    std::ifstream f(path);
    std::string line;
    if (f && std::getline(f, line)) {
      unlink(path.c_str());
      if (!line.empty()) {
        Die(kExitFail, "unmounted, but the daemon's final flush failed (" + line +
                           "); see its log; run kvfs-fsck before trusting the last writes");
      }
    }
  }
  return 0;
}

}  // namespace kvfs::cli
