#!/usr/bin/env bash
# braid_stat reads a running transfer's statistics from another process:
# the sending QP's rate and a line per entropy while it runs, nothing left in
# /dev/shm after it, a device line summing the engines of a device, and the
# object of a killed process reported as exited and removed by --clean.
#   tests/scripts/live_stats.sh <build dir>
set -euo pipefail
build="${1:?build dir}"
cd "$(dirname "$0")/../.."
source scripts/lib/ports.sh
stat="$build/apps/braid_stat"
dir=$(mktemp -d /tmp/braid-live-stats.XXXXXX)
lb=
server=
trap 'kill $lb $server 2>/dev/null || true; rm -rf "$dir"' EXIT
fail() {
  echo "live_stats: $*" >&2
  cat "$dir"/*.out >&2 || true
  exit 1
}

# 1. A transfer under way: the sender's line shows packets sent per second,
# and each of its 16 entropies has a line of its own.
BRAID_BUILD_DIR="$build" BRAID_STATS=1 scripts/loopback.sh --path memif braid_write_bw \
  -s 65536 -D 4 --entropies 16 >"$dir/loopback.out" 2>&1 &
lb=$!
# Wait for the client's timed run (it prints the table header as it starts).
for _ in $(seq 1 400); do grep -q "#bytes" "$dir/loopback.out" && break; sleep 0.05; done
grep -q "#bytes" "$dir/loopback.out" || fail "the transfer did not start"
"$stat" -c 2 -i 0.5 --paths >"$dir/stat.out" 2>&1 || fail "braid_stat failed"
# QP lines: "qpn peer state cc/paths tx retx rx ..."; the sender's tx > 0.
sender=$(awk '$3 == "ok" && $5 != "0" { n++ } END { print n + 0 }' "$dir/stat.out")
[[ "$sender" -ge 1 ]] || fail "no QP line with packets sent"
# Entropy lines of the last print: "port state sent acked ...", 16 of them
# with packets sent, on 16 different ports.
last=$(awk '/rates over/ { block = "" } { block = block $0 "\n" } END { printf "%s", block }' \
  "$dir/stat.out" | awk '$2 ~ /^(good|skip|bad)$/ && $3 != "0" { print $1 }' | sort -u | wc -l)
[[ "$last" -ge 16 ]] || fail "expected 16 entropies carrying packets, saw $last"
wait "$lb" || fail "the transfer failed"
lb=
pids=$(grep -o 'braid-stats\.[0-9]*' "$dir/stat.out" | sort -u | cut -d. -f2)
for p in $pids; do
  ls /dev/shm/braid-stats."$p".* >/dev/null 2>&1 && fail "pid $p left its object in /dev/shm"
done

# 2. Devices of two engines: an object per engine, and a "device" line per
# process summing them (4 QPs over the two engines).
BRAID_BUILD_DIR="$build" BRAID_STATS=1 scripts/loopback.sh --path memif braid_write_bw \
  -s 65536 -D 3 -q 4 --engines 2 >"$dir/loopback2.out" 2>&1 &
lb=$!
for _ in $(seq 1 400); do grep -q "#bytes" "$dir/loopback2.out" && break; sleep 0.05; done
grep -q "#bytes" "$dir/loopback2.out" || fail "the two-engine transfer did not start"
"$stat" -c 1 -i 0.5 >"$dir/stat2.out" 2>&1 || fail "braid_stat failed (two engines)"
devices=$(grep -c '^device .* 2 engines  4 QPs  rx' "$dir/stat2.out" || true)
[[ "$devices" -eq 2 ]] || fail "expected a device line of 2 engines and 4 QPs per side, saw $devices"
wait "$lb" || fail "the two-engine transfer failed"
lb=

# 3. A process killed: its object stays, listed as exited, until --clean.
port=$(tcp_port)
BRAID_STATS=1 "$build/apps/perftest/braid_write_bw" --lcore 0 -p "$port" --timeout 30 \
  --dev-port "net_memif0,role=server,id=0,socket=$dir/m.sock,socket-abstract=no" \
  --ip 198.18.0.1 >"$dir/server.out" 2>&1 &
server=$!
for _ in $(seq 1 400); do ls /dev/shm/braid-stats."$server".* >/dev/null 2>&1 && break; sleep 0.05; done
ls /dev/shm/braid-stats."$server".* >/dev/null 2>&1 || fail "the server published nothing"
"$stat" >"$dir/list.out"
grep -q "braid-stats\.$server\..*198\.18\.0\.1" "$dir/list.out" || fail "the live server is not listed"
kill -9 "$server"
wait "$server" 2>/dev/null || true
server_pid=$server
server=
"$stat" >"$dir/list.out"
grep -q "braid-stats\.$server_pid\..*exited" "$dir/list.out" || fail "the killed server is not listed as exited"
"$stat" --clean >"$dir/clean.out"
grep -q "removed braid-stats\.$server_pid\." "$dir/clean.out" || fail "--clean did not remove it"
ls /dev/shm/braid-stats."$server_pid".* >/dev/null 2>&1 && fail "the object is still there"
cat "$dir/stat.out"
echo "live_stats: ok ($sender sending QP line(s), $last entropies carrying packets)"
