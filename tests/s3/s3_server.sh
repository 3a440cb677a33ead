#!/usr/bin/env bash
# A real S3 server for kvfs's tests: Ceph RADOS Gateway (Debian 12: radosgw, ceph-mon, ceph-osd 16.2.15)
# over a one-node cluster (one monitor, one OSD on memstore, i.e. in RAM; no manager, cephx off inside
# the cluster, S3 SigV4 auth on at the gateway), all on loopback, all state under one directory.
#
#   tests/s3/s3_server.sh start DIR   start the cluster and the gateway; creates an S3 user and prints,
#                                     one per line, KEY=VALUE: S3_ENDPOINT (http), S3_TLS_ENDPOINT (https,
#                                     a self-signed certificate: S3_CA_FILE), S3_REGION, AWS_ACCESS_KEY_ID,
#                                     AWS_SECRET_ACCESS_KEY (also written to DIR/env, sourceable).
#                                     Exit 2 (and a message) when the Ceph packages are not installed.
#   tests/s3/s3_server.sh stop DIR    stop exactly the daemons this script started (DIR/*.pid), then
#                                     remove DIR's cluster data.
#   tests/s3/s3_server.sh stop-rgw DIR / start-rgw DIR
#                                     stop / restart only the gateway (the cluster keeps running): the
#                                     tests' "server unreachable" case.
# Pacific's radosgw has no RADOS-less backend (rgw_backend_store / dbstore came with Quincy), hence the
# monitor and OSD. Ports are picked free on 127.0.0.1 at start. Runs as the calling user (root in CI).
# The gateway runs with tcp_nodelay=1: without it beast sends a response's headers and its body as two
# writes and Nagle holds the body until the client's delayed ACK of the headers, 40 ms later, so every
# GET with a body took >= 40 ms (a 50 s fsck test took 8 s with it; the S3 throughput measured before
# 2026-12-07 in docs/benchmarks.md paid that stall per GET).
set -euo pipefail

die() { echo "s3_server: $*" >&2; exit 1; }
cmd=${1:-}; dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || die "usage: $0 start|stop|stop-rgw|start-rgw DIR"
conf=$dir/ceph.conf

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Starts "$@" in the background with its own session, records its pid in DIR/NAME.pid.
spawn() {
  local name=$1; shift
  setsid "$@" >>"$dir/$name.out" 2>&1 < /dev/null &
  echo $! > "$dir/$name.pid"
}

kill_pidfile() {  # NAME: SIGTERM the pid recorded in DIR/NAME.pid, wait up to 10 s, then SIGKILL.
  local f=$dir/$1.pid pid i
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

ceph_() { timeout 30 ceph -c "$conf" "$@"; }

start_rgw() {
  local port tls_port
  # A restarted gateway keeps its ports (clients keep their endpoint).
  if [ -f "$dir/rgw.port" ]; then port=$(cat "$dir/rgw.port"); else port=$(free_port); fi
  if [ -f "$dir/rgw.tls-port" ]; then tls_port=$(cat "$dir/rgw.tls-port"); else tls_port=$(free_port); fi
  spawn rgw radosgw -f -c "$conf" -n client.rgw.test \
    --rgw-frontends "beast tcp_nodelay=1 endpoint=127.0.0.1:$port ssl_endpoint=127.0.0.1:$tls_port \
ssl_certificate=$dir/tls/cert.pem ssl_private_key=$dir/tls/key.pem"
  echo "$port" > "$dir/rgw.port"
  echo "$tls_port" > "$dir/rgw.tls-port"
  # Up when it answers HTTP (anonymous ListBuckets: 200 with an empty list).
  local i
  for ((i = 0; i < 600; i++)); do
    if python3 - "$port" 2>/dev/null <<'PY'; then return 0; fi
import sys, urllib.request
urllib.request.urlopen("http://127.0.0.1:%s/" % sys.argv[1], timeout=2).read()
PY
    kill -0 "$(cat "$dir/rgw.pid")" 2>/dev/null || { tail -n 30 "$dir/rgw.log" "$dir/rgw.out" >&2 || true; die "radosgw exited"; }
    sleep 0.1
  done
  die "radosgw did not answer on 127.0.0.1:$port in 60 s"
}

case "$cmd" in
start)
  for b in ceph-mon ceph-osd radosgw radosgw-admin monmaptool ceph-authtool ceph openssl; do
    command -v "$b" >/dev/null || { echo "s3_server: $b not installed (apt-get install radosgw ceph-mon ceph-osd openssl)" >&2; exit 2; }
  done
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  conf=$dir/ceph.conf
  [ -f "$dir/mon.pid" ] && die "$dir already has a running cluster (stop it first)"
  rm -rf "$dir/mon" "$dir/osd" "$dir/run" "$dir/rgw.port" "$dir/rgw.tls-port" "$dir/tls"
  mkdir -p "$dir/mon" "$dir/osd" "$dir/run"
  fsid=$(python3 -c 'import uuid; print(uuid.uuid4())')
  mon_port=$(free_port)
  cat > "$conf" <<CONF
[global]
fsid = $fsid
mon host = v2:127.0.0.1:$mon_port
public network = 127.0.0.0/8
ms bind ipv6 = false
ms bind msgr1 = false
# radosgw asks for a secure (cephx-only) connection to the monitor by default; cephx is off here.
ms mon client mode = crc
ms client mode = crc
ms mon service mode = crc
ms mon cluster mode = crc
ms service mode = crc
ms cluster mode = crc
auth cluster required = none
auth service required = none
auth client required = none
run dir = $dir/run
admin socket = $dir/run/\$name.asok
log file = $dir/\$name.log
pid file = $dir/run/\$name.daemon-pid
keyring = $dir/keyring
debug ms = 0
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon warn on pool no redundancy = false
# The monitor would stop itself below 5% free disk (mon_data_avail_crit); a test cluster holds nothing.
mon data avail crit = 0
mon data avail warn = 0
[mon]
mon data = $dir/mon
mon cluster log file = $dir/mon-cluster.log
[osd]
osd data = $dir/osd
osd objectstore = memstore
memstore device bytes = 2147483648
osd max object name len = 460
osd max object namespace len = 64
[client.rgw.test]
rgw data = $dir/rgw
rgw dns name = localhost
log file = $dir/rgw.log
CONF
  mkdir -p "$dir/rgw"
  ceph-authtool --create-keyring "$dir/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
  ceph-authtool "$dir/keyring" --gen-key -n client.admin --cap mon 'allow *' --cap osd 'allow *' \
    --cap mgr 'allow *' >/dev/null
  monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$mon_port]" "$dir/monmap" >/dev/null
  ceph-mon -c "$conf" --mkfs -i a --monmap "$dir/monmap" --keyring "$dir/keyring" \
    >"$dir/mkfs-mon.out" 2>&1 || { cat "$dir/mkfs-mon.out" >&2; die "ceph-mon --mkfs failed"; }
  spawn mon ceph-mon -f -c "$conf" -i a
  osd_uuid=$(python3 -c 'import uuid; print(uuid.uuid4())')
  osd_id=$(ceph_ osd new "$osd_uuid") || die "ceph osd new failed (monitor not up?)"
  ceph-osd -c "$conf" -i "$osd_id" --mkfs --osd-uuid "$osd_uuid" >"$dir/mkfs-osd.out" 2>&1 \
    || { cat "$dir/mkfs-osd.out" >&2; die "ceph-osd --mkfs failed"; }
  spawn osd ceph-osd -f -c "$conf" -i "$osd_id"
  for ((i = 0; i < 300; i++)); do
    ceph_ osd stat -f json 2>/dev/null | grep -q '"num_up_osds":1' && break
    sleep 0.2
  done
  ceph_ osd stat -f json | grep -q '"num_up_osds":1' || die "the OSD did not come up"
  # A self-signed certificate for the TLS endpoint (127.0.0.1, localhost), its own CA.
  mkdir -p "$dir/tls"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost \
    -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" \
    -keyout "$dir/tls/key.pem" -out "$dir/tls/cert.pem" >"$dir/tls/openssl.out" 2>&1 \
    || { cat "$dir/tls/openssl.out" >&2; die "openssl could not make the test certificate"; }
  start_rgw
  access=KVFSTESTACCESSKEY0001
  secret=kvfs-test-secret-key-000000000000000000001
  radosgw-admin -c "$conf" -n client.rgw.test user create --uid=kvfs-test --display-name=kvfs-test \
    --access-key="$access" --secret-key="$secret" >"$dir/user.json" 2>"$dir/user.err" \
    || { cat "$dir/user.err" >&2; die "radosgw-admin user create failed"; }
  {
    echo "S3_ENDPOINT=http://127.0.0.1:$(cat "$dir/rgw.port")"
    echo "S3_TLS_ENDPOINT=https://127.0.0.1:$(cat "$dir/rgw.tls-port")"
    echo "S3_CA_FILE=$dir/tls/cert.pem"
    echo "S3_REGION=us-east-1"
    echo "AWS_ACCESS_KEY_ID=$access"
    echo "AWS_SECRET_ACCESS_KEY=$secret"
  } | tee "$dir/env"
  ;;
stop-rgw)
  kill_pidfile rgw
  ;;
start-rgw)
  dir=$(cd "$dir" && pwd); conf=$dir/ceph.conf
  [ -f "$dir/rgw.pid" ] && kill -0 "$(cat "$dir/rgw.pid")" 2>/dev/null && die "radosgw already running"
  start_rgw
  ;;
stop)
  [ -d "$dir" ] || exit 0
  kill_pidfile rgw
  kill_pidfile osd
  kill_pidfile mon
  rm -rf "$dir/mon" "$dir/osd" "$dir/run" "$dir/rgw" "$dir/rgw.port" "$dir/rgw.tls-port" "$dir/tls"
  ;;
*) die "unknown command $cmd" ;;
esac
