#include "tools/metrics_server.h"

#include <httplib.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <thread>

namespace kvfs {

bool ParseListenAddress(const std::string& text, ListenAddress* out, std::string* err) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos) {
    *err = "'" + text + "' is not HOST:PORT (e.g. 127.0.0.1:9464)";
    return false;
  }
  std::string host = text.substr(0, colon), port = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  else if (host.find(':') != std::string::npos) {
    *err = "'" + text + "': write an IPv6 address in brackets, e.g. [::1]:9464";
    return false;
  }
  if (host.empty()) {
    *err = "'" + text + "' has no host (e.g. 127.0.0.1:9464, or 0.0.0.0:9464 for every interface)";
    return false;
  }
  int p = 0;
  auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (port.empty() || ec != std::errc() || ptr != port.data() + port.size() || p < 1 || p > 65535) {
    *err = "'" + text + "': port must be a number from 1 to 65535";
    return false;
  }
  out->host = host;
  out->port = p;
  return true;
}

struct MetricsServer::Impl {
  httplib::Server server;
  std::thread thread;
  bool bound = false;
};

MetricsServer::MetricsServer() : impl_(std::make_unique<Impl>()) {}
MetricsServer::~MetricsServer() { Stop(); }

Status MetricsServer::Bind(const ListenAddress& addr) {
  auto& sv = impl_->server;
  sv.new_task_queue = [] { return new httplib::ThreadPool(2); };
  // SO_REUSEADDR only (httplib's default adds SO_REUSEPORT, which would let a second daemon share the
  // port silently instead of failing).
  sv.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  sv.set_read_timeout(5, 0);
  sv.set_write_timeout(5, 0);
  errno = 0;
  if (!sv.bind_to_port(addr.host, addr.port)) {
    const int e = errno;
    return Status::InvalidArgument("--metrics-listen " + addr.host + ":" + std::to_string(addr.port) +
                                   ": cannot listen (" + (e ? std::strerror(e) : "unknown host or address") +
                                   ")");
  }
  impl_->bound = true;
  return Status::OK();
}

void MetricsServer::Serve(std::function<std::string()> render) {
  if (!impl_->bound || impl_->thread.joinable()) return;
  auto& sv = impl_->server;
  sv.Get("/metrics", [render](const httplib::Request&, httplib::Response& res) {
    res.set_content(render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  sv.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("kvfs metrics: GET /metrics\n", "text/plain; charset=utf-8");
  });
  impl_->thread = std::thread([this] {
    if (!impl_->server.listen_after_bind()) spdlog::error("metrics listener stopped with an error");
  });
}

void MetricsServer::Stop() {
  if (!impl_->thread.joinable()) return;
  // stop() is a no-op until the listener thread has started its loop: wait for that (bounded).
  for (int i = 0; i < 1000 && !impl_->server.is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  impl_->server.stop();
  impl_->thread.join();
}

}  // namespace kvfs
