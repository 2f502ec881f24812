#!/usr/bin/env bash
# Braid's perftest tools against the raw limit of the same virtual NIC path,
# measured in the same run by bench/raw_blaster.cc (one process per core:
# the server side -- vhost-user / memif server, sink or echo -- on core 0,
# the client side -- virtio-user / memif client, blast or ping -- on core 1,
# with the vdev specs of scripts/loopback.sh).
#   bench/compare_loopback.sh [virtio|memif]
# Needs a release build:
#   cmake --preset release && cmake --build --preset release -j1 \
#     --target braid_raw_blaster braid_write_bw braid_write_lat
# (a) 64 B: raw blast->sink Mpps vs braid_write_bw -s 64 -n 200000 MsgRate
# (b) 64 KiB WRITEs at MTU 1500 (Braid fills 1514 B frames) vs raw 1514 B
#     frames, Gb/s of frame bytes; also raw with --copy (payload written
#     from memory and copied out, as any transport of user data must)
# (c) the same at MTU 9000 (9014 B frames)
# (d) raw ping one-way p50 (RTT/2, 64 B frames) vs braid_write_lat -n 5000
#     t_typical
set -euo pipefail
cd "$(dirname "$0")/.."
path="${1:-virtio}"
build_dir="${BRAID_BUILD_DIR:-build/release}"
raw="$build_dir/bench/braid_raw_blaster"
seconds="${RAW_SECONDS:-2}"
samples="${RAW_SAMPLES:-5000}"
source scripts/lib/build.sh
source scripts/lib/vnic-pair.sh
braid_need compare "$raw" "$build_dir/apps/perftest/braid_write_bw" "$build_dir/apps/perftest/braid_write_lat"
[[ "$path" == virtio || "$path" == memif ]] || { echo "compare: path must be virtio or memif" >&2; exit 2; }

work=$(mktemp -d /tmp/braid-compare.XXXXXX)
trap 'rm -rf "$work"' EXIT

# raw_pair <server mode> <client mode> <extra args...>: prints both RESULT lines.
# RAW_MTU (default 1500) is the ports' MTU.
raw_pair() {
  local smode="$1" cmode="$2" mtu="${RAW_MTU:-1500}"
  shift 2
  local dir sock server_port client_port sport cport
  dir=$(mktemp -d "$work/raw.XXXXXX")
  vnic_pair "$path" "$dir" "$mtu" 1  # sets sock, server_port, client_port
  sport=$server_port
  cport=$client_port
  set -- --mtu "$mtu" "$@"
  taskset -c 0 "$raw" --mode "$smode" --lcore 0 --port "$sport" "$@" >"$dir/server.log" 2>&1 &
  local spid=$!
  for _ in $(seq 1 200); do
    [[ -S "$sock" ]] && break
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.05
  done
  taskset -c 1 "$raw" --mode "$cmode" --lcore 1 --port "$cport" "$@" >"$dir/client.log" 2>&1 || true
  wait "$spid" || true
  grep -h '^RESULT' "$dir/server.log" "$dir/client.log" || {
    echo "compare: raw $smode/$cmode produced no result; logs:" >&2
    tail -n 20 "$dir/server.log" "$dir/client.log" >&2
  }
}

field() { # field <name> <text>: value of name=... in a RESULT line
  grep -o " $1=[^ ]*" <<<"$2" | head -1 | cut -d= -f2
}

braid() { # braid <tool> <args...>: the client's and server's output
  local log="$work/braid.log"
  if ! scripts/loopback.sh --path "$path" "$@" >"$log" 2>&1; then
    echo "compare: loopback $* failed; its output without DPDK's log lines:" >&2
    grep -v '^EAL\|^VHOST_CONFIG\|^TELEMETRY' "$log" | tail -n 40 >&2
  fi
  cat "$log"
}

# First data row whose #bytes column is $1: column $2.
row_col() {
  awk -v s="$1" -v c="$2" '$1 == s && NF >= c && $2 ~ /^[0-9]+$/ { print $c; exit }'
}

# The VM these run on has fast and slow spells that change every number
# several-fold within minutes: each Braid run sits next to its raw
# counterpart, ROUNDS times, and the table gives medians of the values and
# of the per-round ratios (with their range).
rounds="${ROUNDS:-3}"
echo "== path $path: $rounds rounds; raw windows ${seconds}s, $samples ping samples"

need() { # need <name> <value> <log text>: the value, or the output and exit
  if [[ -z "$2" ]]; then
    echo "compare: no value for $1; output follows" >&2
    echo "$3" >&2
    exit 1
  fi
  echo "$2"
}
# raw_measure <name> <mode: sink|ping> <field> <raw_pair arguments...>: the
# field of the sink's (or pinger's) RESULT line. A raw pair that ends without
# one (a blaster or sink that lost its peer at start: seen once over memif
# with copies) is run again, up to 3 times, before the script gives up.
raw_measure() {
  local name="$1" mode="$2" key="$3" out v try
  shift 3
  for try in 1 2 3; do
    out=$(raw_pair "$@")
    v=$(field "$key" "$(grep "mode=$mode" <<<"$out")")
    if [[ -n "$v" ]]; then
      echo "$v"
      return
    fi
    echo "compare: raw $name gave no value (try $try of 3); its output:" >&2
    echo "$out" >&2
  done
  need "$name" "" "$out"
}
results="$work/results"
: >"$results"
for round in $(seq 1 "$rounds"); do
  rv=$(raw_measure raw64 sink mpps sink blast --size 64 --seconds "$seconds")
  out=$(braid braid_write_bw -s 64 -n 200000)
  b=$(need braid64 "$(row_col 64 5 <<<"$out")" "$out")
  echo "rate $rv $b" >>"$results"

  for mtu in 1500 9000; do
    frame=$((mtu + 14))
    rv=$(RAW_MTU=$mtu raw_measure "raw$frame" sink gbps sink blast --size "$frame" --seconds "$seconds")
    rawc=$(RAW_MTU=$mtu raw_measure "raw${frame}copy" sink gbps sink blast --size "$frame" \
      --seconds "$seconds" --copy 1)
    out=$(braid braid_write_bw -s 65536 -n 20000 --link-mtu "$mtu")
    mib=$(need "braid64k$mtu" "$(row_col 65536 4 <<<"$out")" "$out")
    echo "goodput$mtu $rv $(awk -v m="$mib" 'BEGIN { printf "%.3f", m * 8 * 1048576 / 1e9 }') $rawc" >>"$results"
  done

  rv=$(raw_measure rawping ping p50_us echo ping --size 64 --samples "$samples")
  out=$(braid braid_write_lat -n 5000)
  b=$(need braidlat "$(row_col 2 5 <<<"$out")" "$out")
  echo "latency $rv $b" >>"$results"
  echo "round $round: $(tail -n 4 "$results" | tr '\n' ' ')"
done

# Medians over the rounds; for goodput, ratios against raw frame bytes
# (Braid's frames carry 1416 / 8916 payload bytes of 1514 / 9014) and
# against raw with copies.
python3 - "$path" "$results" <<'PY'
import statistics, sys
path, results = sys.argv[1], sys.argv[2]
rows = {}
for line in open(results):
    k, *v = line.split()
    rows.setdefault(k, []).append([float(x) for x in v])
med = lambda xs: statistics.median(xs)
def span(xs): return f"{100*min(xs):.0f}-{100*max(xs):.0f}%"
print(f"\n| path {path} ({len(rows['rate'])} rounds, medians) | raw | Braid | ratio (range) | goal | met |")
print("|---|---|---|---|---|---|")
r = rows["rate"]; q = [b / a for a, b in r]
print(f"| 64 B rate (Mpps) | {med([a for a, _ in r]):.2f} | {med([b for _, b in r]):.2f} | "
      f"{100*med(q):.0f}% ({span(q)}) | >= 50% | {'yes' if med(q) >= 0.5 else 'no'} |")
for mtu in (1500, 9000):
    g = rows[f"goodput{mtu}"]
    q = [b / a for a, b, _ in g]; qc = [b / c for _, b, c in g]
    print(f"| 64 KiB WRITE at MTU {mtu} vs {mtu+14} B frames (Gb/s); raw with copies | "
          f"{med([a for a, _, _ in g]):.1f}; {med([c for _, _, c in g]):.1f} | {med([b for _, b, _ in g]):.1f} | "
          f"{100*med(q):.0f}% ({span(q)}); {100*med(qc):.0f}% of copying raw | >= 70% | {'yes' if med(q) >= 0.7 else 'no'} |")
l = rows["latency"]; d = [b - a for a, b in l]
print(f"| latency (us): raw one-way p50 vs write_lat t_typical | {med([a for a, _ in l]):.2f} | "
      f"{med([b for _, b in l]):.2f} | {med(d):+.2f} us ({min(d):+.2f}..{max(d):+.2f}) | <= +0.3 us | {'yes' if med(d) <= 0.3 else 'no'} |")
PY
