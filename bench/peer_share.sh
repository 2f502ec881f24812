#!/usr/bin/env bash
# Several QPs to one peer against one (issue 34): host A sends over Q QPs
# (default 4), host B over one, into a shared bottleneck; Jain's index over
# the two hosts' bytes, congestion state per peer (the default) against one
# per QP, and one QP each as the reference.
#   bench/peer_share.sh [sim|wire|incast]...      (default: sim and wire)
# sim:  braid_fabric, k=4 fat tree at 100 Gb/s, NSCC (htsim's profile),
#       hosts 8 (A) and 9 (B) into host 0, 8 MB each, SEEDS (default 1..5);
#       the bytes placed by the first completion (--flow-series).
# wire: scripts/switch-fabric.sh, two pairs (A: 198.18.0.2 -> .1, B: .4 ->
#       .3) through one core link of braid_switch at RATE_MBPS (default
#       300: at 1000 the hosts' one core is near its limit; WRED ECN 3-30 KB), braid_write_bw -s 65536 -D 5 --cc nscc,
#       ROUNDS rounds (default 3) of the three cases alternated; the bytes
#       each server received in the switch's mid-run window (from frame
#       200 x RATE_MBPS to 700 x RATE_MBPS).
# incast: the NCCL plugin's ranks on braid_switch (scripts/nccl-ranks.sh
#       --mode incast): ranks 1 (A) and 2 (B) into rank 0, one receiver
#       for both, through one core link at RATE_MBPS; rank 0 counts each
#       rank's bytes from 1 s in to 0.5 s before the end of a 5 s run. The
#       case where a receiver's credit pacer is shared (CREDIT=1).
# Five processes share two cores on the wire: at 1000 Mb/s single runs
# swing widely (one QP each has given Jain 0.61 to 1.00 here); read the
# medians.
set -euo pipefail
cd "$(dirname "$0")/.."
qps=${QPS:-4}
seeds=${SEEDS:-1 2 3 4 5}
rounds=${ROUNDS:-3}
rate=${RATE_MBPS:-300}
# PDC_SCOPE=peer (sim, wire): each host's QPs on one PDC (--pdc-scope peer).
# CREDIT=1: receiver-driven credit as well (the simulator's nscc-credit profile;
# perftest's --credit on the wire).
credit=${CREDIT:-0}
sim_profile=nscc
wire_credit=()
if [[ $credit == 1 ]]; then
  sim_profile=nscc-credit
  wire_credit=(--credit)
fi
what=("$@")
[[ ${#what[@]} -eq 0 ]] && what=(sim wire)
source scripts/lib/build.sh
build_dir="${BRAID_BUILD_DIR:-build/release}"

# rounds_table <unit> <name of an associative array>: the three cases'
# Jain per round ("scope qps" -> "j j ..."), and each one's median.
rounds_table() {
  local unit=$1 c
  local -n per=$2
  echo "| case | Jain per round | median |"
  echo "|---|---|---|"
  for c in "peer $qps" "qp $qps" "peer 1"; do
    set -- $c
    echo "| $2 $unit against 1, state per $1 | ${per[$c]}| $(tr ' ' '\n' <<<"${per[$c]}" | grep . | median) |"
  done
}

jain() { awk '{ a = $1; b = $2; printf "%.3f", (a + b) * (a + b) / (2 * (a * a + b * b)) }'; }
median() { sort -n | awk '{ x[NR] = $1 } END { printf "%.3f", NR ? x[int((NR + 1) / 2)] : 0 }'; }

sim_case() { # sim_case <scope> <qps> <seed>: "bytes_A bytes_B" by the first completion
  local scope=$1 q=$2 seed=$3 tmp flows=()
  tmp=$(mktemp -d /tmp/peer_share.XXXXXX)
  for ((i = 0; i < q; ++i)); do flows+=(--flow "8 0 $((8 * 1024 * 1024 / q)) 0 -1 $i"); done
  "$build_dir/apps/braid_fabric" -k 4 --scenario flows "${flows[@]}" --flow "9 0 8M" --profile "$sim_profile" \
    --cc-scope "$scope" --pdc-scope "${PDC_SCOPE:-qp}" --seed "$seed" --flow-series "$tmp/series.csv" --sample-us 10 \
    --csv "$tmp/flows.csv" >/dev/null
  # The first flow's end (us), then every flow's bytes at the last sample
  # at or before it: host A's flows are 0..q-1, host B's is q.
  local first
  first=$(awk -F, 'NR > 1 { e = $8 + 0; if (m == 0 || e < m) m = e } END { print m }' "$tmp/flows.csv")
  awk -F, -v first="$first" -v q="$q" '
    NR > 1 && $2 + 0 <= first { if ($3 < q) a[$2] += $4; else b[$2] = $4; t = $2 }
    END { print a[t] + 0, b[t] + 0 }' "$tmp/series.csv"
  rm -rf "$tmp"
}

if [[ " ${what[*]} " == *" sim "* ]]; then
  braid_need peer_share "$build_dir/apps/braid_fabric"
  echo "simulator ($sim_profile, a PDC per ${PDC_SCOPE:-qp}): host A $qps QPs, host B 1, seeds $seeds"
  echo "| case | Jain per seed | median |"
  echo "|---|---|---|"
  for c in "peer $qps" "connection $qps" "peer 1"; do
    set -- $c
    js=()
    for s in $seeds; do js+=("$(sim_case "$1" "$2" "$s" | jain)"); done
    echo "| $2 QPs against 1, state per $1 | ${js[*]} | $(printf '%s\n' "${js[@]}" | median) |"
  done
fi

if [[ " ${what[*]} " == *" incast "* ]]; then
  braid_need peer_share "$build_dir/apps/nccl/braid_nccl_bench" "$build_dir/apps/braid_switch"
  declare -A inc=()
  for ((r = 0; r < rounds; ++r)); do
    for c in "peer $qps" "qp $qps" "peer 1"; do
      set -- $c
      j=$(BRAID_BUILD_DIR="$build_dir" RANKS_SWITCH_ARGS="--core-rate-mbps $rate --core-ecn 3000,30000,1" \
        BRAID_IBV_CC=nscc BRAID_IBV_CC_SCOPE="$1" BRAID_IBV_CREDIT="$credit" \
        BRAID_IBV_LINK_MBPS="$rate" BRAID_IBV_BASE_RTT_US=200 \
        scripts/nccl-ranks.sh --path switch --ranks 3 --mode incast --comms "$2" --seconds 5 2>&1 |
        sed -n 's/^Jain over the sending ranks: \([0-9.]*\)/\1/p')
      inc[$c]+="${j:-0} "
    done
  done
  echo "incast (NCCL ranks, nscc${wire_credit[*]:+, credit}): rank A $qps comms, rank B 1, into one receiver, core link $rate Mb/s, $rounds rounds"
  rounds_table comms inc
fi

if [[ " ${what[*]} " == *" wire "* ]]; then
  braid_need peer_share "$build_dir/apps/perftest/braid_write_bw" "$build_dir/apps/braid_switch"
  declare -A got=()
  for ((r = 0; r < rounds; ++r)); do
    for c in "peer $qps" "qp $qps" "peer 1"; do
      set -- $c
      line=$(scripts/switch-fabric.sh --pairs 2 --links 1 --pair-args "0:-q $2" --expect-fair 0 \
        --switch "--core-rate-mbps $rate --core-ecn 3000,30000,1 --set '@$((rate * 200)) stats clear' --set '@$((rate * 700)) stats'" \
        braid_write_bw -s 65536 -D 5 --cc nscc "${wire_credit[@]}" --cc-scope "$1" --link-mbps "$rate" \
        --pdc-scope "${PDC_SCOPE:-qp}" \
        --base-rtt-us 200 2>&1 |
        sed -n 's/.*in the switch.s window: \([0-9]*\) \([0-9]*\),.*/\1 \2/p')
      got[$c]+="$(jain <<<"${line:-0 0}") "
    done
  done
  echo "wire (nscc${wire_credit[*]:+, credit}, PDC per ${PDC_SCOPE:-qp}): host A $qps QPs, host B 1, core link $rate Mb/s, $rounds rounds"
  rounds_table QPs got
fi
