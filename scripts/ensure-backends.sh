#!/usr/bin/env bash
# Makes sure the servers the tests talk to are running: Redis on 127.0.0.1:6379 and NATS with
# JetStream on 127.0.0.1:4222 (installed from Debian's packages when missing and running as root),
# Node.js/npm for the MCP reference servers, and Chromium for the browser tests. Safe to run again:
# it starts only what is not answering.
set -euo pipefail

log() { printf 'ensure-backends: %s\n' "$*" >&2; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() {
  for _ in $(seq 1 50); do port_open "$1" && return 0; sleep 0.2; done
  log "nothing answers on 127.0.0.1:$1 after 10s"; return 1
}

# Installs Debian packages when running as root (CI, containers); never through sudo: as another
# user it says what to install and stops, rather than ask for a password or gain privileges.
apt_updated=""
apt_install() {
  if [ "$(id -u)" -ne 0 ]; then
    log "missing: $* — install it (Debian/Ubuntu: apt-get install $*) or start the server yourself, then run this again"
    exit 1
  fi
  if [ -z "$apt_updated" ]; then apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# The binaries are needed even when the servers already run: the multi-process tests and
# bench/load start Redis and NATS servers of their own.
command -v redis-server >/dev/null || { log "installing redis-server"; apt_install redis-server; }
command -v nats-server >/dev/null || { log "installing nats-server"; apt_install nats-server; }

if ! port_open 6379; then
  log "starting redis-server"
  mkdir -p /tmp/hermes-redis
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --dir /tmp/hermes-redis --logfile /tmp/hermes-redis/redis.log
  wait_port 6379
fi

if ! port_open 4222; then
  log "starting nats-server with JetStream"
  mkdir -p /tmp/hermes-nats
  nohup nats-server -a 127.0.0.1 -p 4222 -js -sd /tmp/hermes-nats >/tmp/hermes-nats/nats.log 2>&1 &
  wait_port 4222
fi

if ! command -v npm >/dev/null; then
  log "installing nodejs and npm"
  apt_install nodejs npm
fi
# Headless Chromium for the web console's browser tests (test/browser).
if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
  log "installing chromium"
  apt_install chromium
fi
log "redis, nats, npm and chromium are ready"
