// MetricsServer: the opt-in HTTP listener of `kvfs mount --metrics-listen HOST:PORT` that answers
// GET /metrics with the Prometheus text exposition (fuse/stats_render.h). HTTP: cpp-httplib (Debian's
// libcpp-httplib-dev), two worker threads, plain HTTP, no authentication: bind it to loopback or a
// management network (docs/operations.md "Metrics").
//
// Thread safety: Start and Stop from one thread; `render` is called on the server's worker threads.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "blockstore/status.h"

namespace kvfs {

struct ListenAddress {
  std::string host;  // an IPv4/IPv6 address or a host name ("[::1]" is given as "::1")
  int port = 0;      // 1..65535
};

// Parses "HOST:PORT" ("127.0.0.1:9464", "localhost:9464", "[::1]:9464", "0.0.0.0:9464"). False with a
// one-line *err for anything else (missing host or port, port not a number in 1..65535).
bool ParseListenAddress(const std::string& text, ListenAddress* out, std::string* err);

class MetricsServer {
 public:
  MetricsServer();
  ~MetricsServer();  // Stop()
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Binds the socket (so "address in use" is an error of the mount, before it opens the store).
  // InvalidArgument for an address that does not bind (in use, not local, unknown host), with the
  // address and strerror in the message.
  Status Bind(const ListenAddress& addr);
  // Serves GET /metrics (render()'s text) on a thread of its own until Stop. Requires a successful Bind.
  void Serve(std::function<std::string()> render);
  // Stops serving and joins the thread. Idempotent.
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvfs
