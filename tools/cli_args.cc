// Rewrites of the kvfs command line: config file and mount(8) helper form (tools/cli_args.h).
#include "tools/cli_args.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <iterator>
#include <string>
#include <vector>

namespace kvfs::cli {

bool ExpandConfig(CLI::App* mount, std::vector<std::string>* args, std::string* err) {
  if (args->empty() || (*args)[0] != "mount") return true;
  std::string file;
  for (size_t i = 1; i < args->size(); ++i) {
    const std::string& a = (*args)[i];
    if (a == "--config" && i + 1 < args->size()) file = (*args)[i + 1];
    if (a.rfind("--config=", 0) == 0) file = a.substr(9);
  }
  if (file.empty()) return true;
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigINI().from_file(file);
  } catch (const CLI::Error& e) {
    *err = "config file '" + file + "': " + e.what();
    return false;
  }
  auto given = [&](const std::string& flag) {
    for (size_t i = 1; i < args->size(); ++i) {
      const std::string& a = (*args)[i];
      if (a == flag || a.rfind(flag + "=", 0) == 0) return true;
    }
    return false;
  };
  std::vector<std::string> extra;
  for (const auto& it : items) {
    if (it.name.empty() || it.name == "++" || it.name == "--" || it.name == "config") continue;
    std::string flag = (it.name.size() == 1 ? "-" : "--") + it.name;
    if (given(flag)) continue;
    CLI::Option* opt = mount->get_option_no_throw(flag);
    if (opt == nullptr) {
      *err = "config file '" + file + "': unknown key '" + it.name + "'";
      return false;
    }
    if (opt->get_expected_max() == 0) {  // a flag
      std::string v = it.inputs.empty() ? "true" : it.inputs[0];
      if (v == "true" || v == "1" || v == "yes" || v == "on") extra.push_back(flag);
      else if (!(v == "false" || v == "0" || v == "no" || v == "off")) {
        *err = "config file '" + file + "': '" + it.name + "' must be true or false";
        return false;
      }
      continue;
    }
    // A comma list (o = allow_other,default_permissions) may arrive as several inputs: one argument.
    std::string joined;
    for (const auto& v : it.inputs) joined += (joined.empty() ? "" : ",") + v;
    extra.push_back(flag.size() == 2 ? flag + joined : flag + "=" + joined);
  }
  args->insert(args->begin() + 1, extra.begin(), extra.end());
  return true;
}

bool TranslateMountHelperForm(CLI::App* mount, std::vector<std::string>* args) {
  auto& a = *args;
  static const char* kCommands[] = {"mount", "umount", "stats", "node"};
  if (a.size() < 2 || a[0].empty() || a[0][0] == '-' || a[1].empty() || a[1][0] == '-') return true;
  for (const char* c : kCommands) {
    if (a[0] == c) return true;
  }
  std::vector<std::string> out = {"mount", a[1], "--backing", a[0]};
  std::vector<std::string> fuse;
  auto bad = [](const std::string& m) {
    std::fprintf(stderr, "kvfs: %s\n", m.c_str());
    return false;
  };
  // Every -o list, split at commas, in order.
  std::vector<std::string> raw;
  for (size_t i = 2; i < a.size(); ++i) {
    std::string list;
    if (a[i] == "-o" && i + 1 < a.size()) {
      list = a[++i];
    } else if (a[i].rfind("-o", 0) == 0 && a[i].size() > 2) {
      list = a[i].substr(2);
    } else if (a[i] == "-n" || a[i] == "-s" || a[i] == "-v") {
      continue;  // mount(8) helper flags: no mtab, sloppy, verbose
    } else {
      return bad("unexpected argument '" + a[i] + "' (mount helper form: kvfs SOURCE MOUNTPOINT -o OPTS)");
    }
    size_t p = 0;
    while (p <= list.size()) {
      size_t e = list.find(',', p);
      if (e == std::string::npos) e = list.size();
      if (e > p) raw.push_back(list.substr(p, e - p));
      p = e + 1;
    }
  }
  // mount.fuse3 (as root) appends "dev" unless the options have "nodev", then "suid" unless they have
  // "nosuid": its defaults, not the operator's choice. That tail is dropped, so libfuse's defaults
  // nosuid,nodev apply as they do for `kvfs mount`; a "suid" or "dev" the operator wrote (earlier in
  // the list) is kept and honoured.
  {
    std::vector<std::string> tail;
    auto has = [&](const char* x) { return std::find(raw.begin(), raw.end(), x) != raw.end(); };
    if (!has("nodev")) tail.push_back("dev");
    if (!has("nosuid")) tail.push_back("suid");
    if (!tail.empty() && raw.size() >= tail.size() &&
        std::equal(tail.begin(), tail.end(), raw.end() - static_cast<std::ptrdiff_t>(tail.size()))) {
      raw.resize(raw.size() - tail.size());
    }
  }
  for (std::string opt : raw) {
    // mount(8) keeps "suid" and "dev" to itself (they never reach the helper): kvfs_suid / kvfs_dev ask
    // for them through mount(8) and fstab.
    if (opt == "kvfs_suid" || opt == "kvfs_dev") opt = opt.substr(5);
    static const char* kIgnored[] = {"_netdev", "nofail", "defaults", "rw", "auto", "noauto", "user", "nouser",
                                     "users"};
    if (std::find_if(std::begin(kIgnored), std::end(kIgnored), [&](const char* x) { return opt == x; }) !=
        std::end(kIgnored)) {
      continue;
    }
    size_t eq = opt.find('=');
    std::string key = opt.substr(0, eq), val = eq == std::string::npos ? "" : opt.substr(eq + 1);
    std::replace(key.begin(), key.end(), '_', '-');
    CLI::Option* o = key.size() > 1 && key != "backing" ? mount->get_option_no_throw("--" + key) : nullptr;
    if (o == nullptr) {
      fuse.push_back(opt);
      continue;
    }
    if (o->get_expected_max() == 0) {  // a flag: `splice` or `splice=true|false`
      if (eq == std::string::npos || val == "true" || val == "1" || val == "yes" || val == "on") {
        out.push_back("--" + key);
      } else if (!(val == "false" || val == "0" || val == "no" || val == "off")) {
        return bad("mount option '" + opt + "': must be true or false");
      }
      continue;
    }
    if (eq == std::string::npos || val.empty()) return bad("mount option '" + opt + "' needs a value");
    out.push_back("--" + key);
    out.push_back(val);
  }
  // Generic VFS flags (suid, dev, noexec, ...) do not replace the default FUSE options; any other FUSE
  // option (allow_other, ...) does, as -o does for `kvfs mount`.
  static const char* kGeneric[] = {"dev",   "nodev",   "suid",   "nosuid",     "exec",       "noexec",
                                   "ro",    "atime",   "noatime", "diratime",  "nodiratime", "relatime",
                                   "norelatime", "strictatime", "sync", "async", "dirsync", "lazytime",
                                   "nolazytime"};
  bool only_generic = std::all_of(fuse.begin(), fuse.end(), [&](const std::string& f) {
    return std::find_if(std::begin(kGeneric), std::end(kGeneric), [&](const char* x) { return f == x; }) !=
           std::end(kGeneric);
  });
  if (!fuse.empty() && only_generic) fuse.insert(fuse.begin(), {"allow_other", "default_permissions"});
  if (!fuse.empty()) {
    std::string j;
    for (const auto& f : fuse) j += (j.empty() ? "" : ",") + f;
    out.push_back("-o");
    out.push_back(j);
  }
  // mount(8) helpers are silent on success: no "mounted" line.
  if (std::find(out.begin(), out.end(), "--quiet") == out.end()) out.push_back("--quiet");
  a = std::move(out);
  return true;
}

}  // namespace kvfs::cli
