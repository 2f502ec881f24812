#!/usr/bin/env bash
# Runs Braid perftest-style tools across braid_switch, a software switch on
# the DPDK datapath: N pairs of hosts (a server and a client each), every
# host on a memif port of the switch, and between them K parallel core links
# chosen by an ECMP hash of each packet's 5-tuple (its entropy).
#   scripts/switch-fabric.sh [--pairs N] [--links K] [--switch "ARGS"] \
#       [--idle-yield N] [--server-core C] [--expect-less-on L] [--expect-fair J] \
#       [--expect-impaired L] [--expect-no-drop L] [--expect-median-queue L:BYTES] \
#       [--pair-args "I:ARGS"]... <tool> [tool arguments...]
# e.g. scripts/switch-fabric.sh --links 2 --switch "--set 'link 1 rate 2000'" \
#        braid_write_bw -s 65536 -D 4 --stats
# --pair-args "I:ARGS": more tool arguments for pair I alone (its server and
# client), e.g. --pair-args "0:-q 4" for four QPs on pair 0.
# Pair i: server 198.18.0.(2i+1) on switch port 2i, client 198.18.0.(2i+2)
# on port 2i+1. The switch runs on core 0, the hosts (servers and clients)
# on core 1 (servers elsewhere with --server-core): the network is not
# starved by its hosts. Two cores: the timings are the VM's, the counters
# are exact.
# Every process yields its core after 16 polls in a row that found no work
# (--idle-yield N; 0: never): with more processes than cores, a round trip
# otherwise waits for time slices (ms), not for the switch's queues.
# Checks, after the run:
#   --expect-less-on L  core link L carried under 0.9x the share of the
#                       data packets that it has of the data flows (the
#                       senders moved traffic off it);
#   --expect-fair J     Jain's index of what the servers received is >= J:
#                       in the window of a mid-run 'stats' of the switch
#                       (--set '@M stats'), else the clients' goodputs;
#   --expect-impaired L core link L ended down or blackholed (the command
#                       took), and if blackholed it dropped frames;
#   --expect-no-drop L  core link L dropped no frame (since the switch's
#                       last 'stats clear', e.g. --set '@N stats clear');
#   --expect-median-queue L:BYTES  half the data frames arriving at core
#                       link L (its busier direction) found at most BYTES
#                       queued there.
# Tools come from $BRAID_BUILD_DIR (default build/release).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/ports.sh
pairs=1
links=2
switch_args=
expect_less_on=
expect_fair=
expect_impaired=
idle_yield=16
server_core=1
expect_no_drop=
expect_median=
declare -A pair_args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --pairs) pairs="$2"; shift 2 ;;
    --links) links="$2"; shift 2 ;;
    --switch) switch_args="$2"; shift 2 ;;
    --expect-less-on) expect_less_on="$2"; shift 2 ;;
    --expect-fair) expect_fair="$2"; shift 2 ;;
    --expect-impaired) expect_impaired="$2"; shift 2 ;;
    --idle-yield) idle_yield="$2"; shift 2 ;;
    --server-core) server_core="$2"; shift 2 ;;
    --expect-no-drop) expect_no_drop="$2"; shift 2 ;;
    --expect-median-queue) expect_median="$2"; shift 2 ;;
    --pair-args) pair_args[${2%%:*}]="${2#*:}"; shift 2 ;;
    *) break ;;
  esac
done
tool="${1:?usage: $0 [--pairs N] [--links K] [--switch ARGS] <tool> [args...]}"
shift
build_dir="${BRAID_BUILD_DIR:-build/release}"
bin="$build_dir/apps/perftest/$tool"
switch_bin="$build_dir/apps/braid_switch"
source scripts/lib/build.sh
braid_need switch-fabric "$bin" "$switch_bin"

run_dir=$(mktemp -d /tmp/braid-switch.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [[ -n "${switch_pid:-}" ]] && kill "$switch_pid" 2>/dev/null || true
  rm -rf "$run_dir"
}
trap cleanup EXIT

hosts=$((2 * pairs))
ports=()
for ((p = 0; p < hosts; ++p)); do
  ports+=(--port "net_memif$p,role=server,id=0,socket=$run_dir/p$p.sock,socket-abstract=no")
done
eval "extra=($switch_args)"
"$switch_bin" --lcore 0 --idle-yield "$idle_yield" --links "$links" "${ports[@]}" "${extra[@]}" --control "$run_dir/ctl" \
  >"$run_dir/switch.log" 2>&1 &
switch_pid=$!
for _ in $(seq 1 400); do
  grep -q "ready" "$run_dir/switch.log" 2>/dev/null && break
  kill -0 "$switch_pid" 2>/dev/null || break
  sleep 0.05
done
grep -q "ready" "$run_dir/switch.log" || { echo "switch-fabric: the switch did not start:" >&2; cat "$run_dir/switch.log" >&2; exit 1; }

host_port() {  # <switch port>: the host's side of it
  printf "net_memif0,role=client,id=0,socket=%s/p%d.sock,socket-abstract=no,mac=02:00:c6:12:00:%02x" \
    "$run_dir" "$1" $(($1 + 1))
}
common=(--timeout 60 --idle-yield "$idle_yield")
for ((i = 0; i < pairs; ++i)); do
  tcp=$(tcp_port)
  eval "mine=(${pair_args[$i]:-})"
  "$bin" "${common[@]}" -p "$tcp" --lcore "$server_core" --dev-port "$(host_port $((2 * i)))" \
    --ip "198.18.0.$((2 * i + 1))" "$@" "${mine[@]}" >"$run_dir/server$i.log" 2>&1 &
  pids+=($!)
  echo "$tcp" >"$run_dir/tcp$i"
done
# The servers listen before their clients connect (each client retries
# its TCP connection until --timeout).
client_pids=()
for ((i = 0; i < pairs; ++i)); do
  eval "mine=(${pair_args[$i]:-})"
  "$bin" "${common[@]}" -p "$(cat "$run_dir/tcp$i")" --lcore 1 --dev-port "$(host_port $((2 * i + 1)))" \
    --ip "198.18.0.$((2 * i + 2))" "$@" "${mine[@]}" 127.0.0.1 >"$run_dir/client$i.log" 2>&1 &
  client_pids+=($!)
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
pids=()
kill -INT "$switch_pid" 2>/dev/null || echo "switch-fabric: the switch had stopped before the tools" >&2
wait "$switch_pid" || { echo "switch-fabric: the switch failed (status $?)" >&2; rc=1; }
switch_pid=
for ((i = 0; i < pairs; ++i)); do
  echo "---- pair $i: client (198.18.0.$((2 * i + 2))) ----"
  cat "$run_dir/client$i.log"
  echo "---- pair $i: server (198.18.0.$((2 * i + 1))) ----"
  cat "$run_dir/server$i.log"
done
echo "---- switch ----"
cat "$run_dir/switch.log"
[[ $rc -eq 0 ]] || { echo "switch-fabric: a tool or the switch failed" >&2; exit 1; }

# "link K to higher ports: sent N packets (B bytes, D data), dropped X, ...,
# F data flows", and the same "to lower ports": a core link's two directions.
# busier_direction K: the line of link K's direction that carried more data.
busier_direction() {
  grep "^link $1 to " "$run_dir/switch.log" |
    awk '{ match($0, /[0-9]+ data\)/); d = substr($0, RSTART, RLENGTH - 6) + 0
           if (NR == 1 || d > best) { best = d; line = $0 } }
         END { print line }'
}
# link_dropped K: frames link K dropped, both directions.
link_dropped() {
  grep "^link $1 to " "$run_dir/switch.log" | sed -n 's/.*dropped \([0-9]*\),.*/\1/p' |
    awk '{ s += $1 } END { print s + 0 }'
}
if [[ -n "$expect_less_on" ]]; then
  awk -v l="$expect_less_on" '
    $1 == "link" {
      k = $2
      match($0, /[0-9]+ data\)/); d = substr($0, RSTART, RLENGTH - 6)
      match($0, /[0-9]+ data flows/); f = substr($0, RSTART, RLENGTH - 11)
      dp[k] += d; fl[k] += f; tp += d; tf += f
    }
    END {
      if (tp == 0 || tf == 0) { print "switch-fabric: no data on the core links"; exit 1 }
      ps = dp[l] / tp; fs = fl[l] / tf
      printf "switch-fabric: link %d carried %.1f%% of the data packets, with %.1f%% of the data flows (%.2fx)\n", l, 100 * ps, 100 * fs, ps / fs
      if (!(ps < 0.9 * fs)) { print "switch-fabric: traffic was not moved off it (wanted under 0.9x)"; exit 1 }
    }' "$run_dir/switch.log" || exit 1
fi
if [[ -n "$expect_no_drop" ]]; then
  line=$(busier_direction "$expect_no_drop")
  dropped=$(link_dropped "$expect_no_drop")
  echo "switch-fabric: link $expect_no_drop dropped ${dropped:-?} frames; $(grep -o 'queue found by data p50 [0-9]* p99 [0-9]* bytes' <<<"$line")"
  [[ "${dropped:-1}" -eq 0 ]] || { echo "switch-fabric: the queue overflowed" >&2; exit 1; }
fi
if [[ -n "$expect_median" ]]; then
  l=${expect_median%%:*}
  want=${expect_median#*:}
  line=$(busier_direction "$l")
  p50=$(sed -n 's/.*queue found by data p50 \([0-9]*\) .*/\1/p' <<<"$line")
  echo "switch-fabric: half the data frames found at most ${p50:-?} bytes queued on link $l"
  [[ -n "$p50" && "$p50" -le "$want" ]] || { echo "switch-fabric: the queue stood above $want bytes" >&2; exit 1; }
fi
if [[ -n "$expect_impaired" ]]; then
  line=$(busier_direction "$expect_impaired")
  dropped=$(link_dropped "$expect_impaired")
  echo "switch-fabric: link $expect_impaired dropped ${dropped:-0} frames"
  case "$line" in
    *"(down)") ;;
    *"(blackhole)") [[ "${dropped:-0}" -gt 0 ]] || { echo "switch-fabric: the blackhole got nothing" >&2; exit 1; } ;;
    *) echo "switch-fabric: link $expect_impaired was not impaired" >&2; exit 1 ;;
  esac
fi
if [[ -n "$expect_fair" ]]; then
  # Each client times its own run, from its own start: their goodputs
  # compare different windows. A 'stats' the switch printed mid-run
  # (--set '@M stats', after an '@N stats clear') counts what every server
  # port received in one window while all ran; that is what is checked
  # when there is one.
  for ((i = 0; i < pairs; ++i)); do
    awk '$1 ~ /^[0-9]+$/ && NF >= 5 { print $4; exit }' "$run_dir/client$i.log"
  done | awk '{ x[NR] = $1; s += $1; q += $1 * $1 }
    END {
      if (NR == 0 || q == 0) { print "switch-fabric: no goodput"; exit }
      printf "switch-fabric: goodputs"; for (i = 1; i <= NR; ++i) printf " %s", x[i]
      printf " MiB/s, Jain %.4f\n", s * s / (NR * q)
    }'
  window=$(awk -v pairs="$pairs" '
    /stopped after/ { exit }
    $1 == "port" { p = $2; sub(":", "", p); if (p % 2 == 0 && p / 2 < pairs) { match($0, /[0-9]+ bytes/); b[p / 2] = substr($0, RSTART, RLENGTH - 6); n++ } }
    END { if (n >= pairs) for (i = 0; i < pairs; ++i) printf "%s ", b[i] }' "$run_dir/switch.log")
  if [[ -n "$window" ]]; then
    echo "$window" | awk -v want="$expect_fair" '{
      for (i = 1; i <= NF; ++i) { s += $i; q += $i * $i }
      if (q == 0) { print "switch-fabric: no bytes to the servers in the window"; exit 1 }
      j = s * s / (NF * q)
      printf "switch-fabric: bytes to each server in the switch'"'"'s window:"
      for (i = 1; i <= NF; ++i) printf " %d", $i
      printf ", Jain %.4f\n", j
      if (j < want) { print "switch-fabric: less fair than " want; exit 1 }
    }' || exit 1
  else
    for ((i = 0; i < pairs; ++i)); do
      awk '$1 ~ /^[0-9]+$/ && NF >= 5 { print $4; exit }' "$run_dir/client$i.log"
    done | awk -v want="$expect_fair" '
      { x[NR] = $1; s += $1; q += $1 * $1 }
      END {
        if (NR == 0 || q == 0) exit 1
        if (s * s / (NR * q) < want) { print "switch-fabric: less fair than " want; exit 1 }
      }' || exit 1
  fi
fi
