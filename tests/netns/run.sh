#!/usr/bin/env bash
# Multi-host tests on one machine: 2-4 "hosts" as network namespaces (each rank also in its own IPC
# namespace, so no two hosts can share memory) joined by veth pairs to a bridge in a namespace of its
# own. Runs zcoll-bench's checked collectives across them over tcp, then takes one host's link down
# mid-run and expects the others to fail with a clear error within the timeout. Removes everything
# it made, whatever happens. Traffic stays between these namespaces (10.78.0.0/24).
#
#   tests/netns/run.sh BUILD_DIR          (meson test "netns"; exit 77 = skipped, with the reason)
set -uo pipefail

build=${1:?usage: run.sh BUILD_DIR}
bench=$build/bench/zcoll-bench
tag="zc$$"
sw="${tag}sw"
made=()

skip() { echo "SKIP: $*"; exit 77; }
cleanup() {
  for ns in "${made[@]}"; do ip netns del "$ns" 2>/dev/null; done
}
trap cleanup EXIT

[[ $(id -u) -eq 0 ]] || skip "network namespaces need root"
command -v ip >/dev/null || skip "no ip (iproute2)"
command -v unshare >/dev/null || skip "no unshare (util-linux)"
ip netns add "$sw" 2>/dev/null || skip "cannot create a network namespace here (ip netns add failed)"
made+=("$sw")
ip -n "$sw" link add br0 type bridge || skip "no bridge support in this kernel"
ip -n "$sw" link set br0 up

# host H: namespace ${tag}hH, interface eth$H (10.78.0.H+1) whose peer sits on the bridge.
add_host() {
  local h=$1 ns="${tag}h$1"
  ip netns add "$ns" && made+=("$ns")
  ip link add "${tag}v$h" type veth peer name "${tag}p$h"
  ip link set "${tag}v$h" netns "$ns"
  ip link set "${tag}p$h" netns "$sw"
  ip -n "$ns" link set "${tag}v$h" name "eth$h"
  ip -n "$ns" addr add "10.78.0.$((h + 1))/24" dev "eth$h"
  ip -n "$ns" link set "eth$h" up
  ip -n "$ns" link set lo up
  ip -n "$sw" link set "${tag}p$h" master br0
  ip -n "$sw" link set "${tag}p$h" up
}
for h in 0 1 2 3; do add_host "$h"; done

failures=0
port=$((20000 + $$ % 10000))  # below the ephemeral range (32768-): no connection's local port can hold it

# run_ranks HOSTS RANKS_PER_HOST TIMEOUT_S ARGS... : one zcoll-bench job across the hosts; the output
# of rank 0 in $out; status 0 when every rank succeeded. Each rank has an IPC namespace of its own
# (so zcoll sees HOSTS x RANKS_PER_HOST hosts), unless SHARED_IPC=1: then the ranks of a host share
# one, as the processes of one machine do, and zcoll mixes shm inside a host with the network. UCX is
# held to TCP (UCX_TLS=tcp): the namespaces share /dev/shm and the PID namespace, and UCX would
# otherwise move data between "hosts" through shared memory or CMA.
run_ranks() {
  local hosts=$1 per=$2 limit=$3
  shift 3
  local n=$((hosts * per)) pids=() status=0 shared=${SHARED_IPC:-0}
  port=$((port + 1))
  out=$(mktemp)
  for ((h = 0; h < hosts; h++)); do
    # One shell per host, its ranks started from it: in one IPC namespace (SHARED_IPC=1) or each in its own.
    local host=(ip netns exec "${tag}h$h")
    ((shared)) && host+=(unshare --ipc)
    "${host[@]}" bash -c '
      h=$1 per=$2 n=$3 port=$4 limit=$5 out=$6 interleave=$7 shared=$8; shift 8; pids=()
      for ((l = 0; l < per; l++)); do
        r=$((h * per + l))
        ((interleave)) && r=$((l * n / per + h))  # INTERLEAVE=1: rank r on host r mod HOSTS
        own=(); ((shared)) || own=(unshare --ipc)
        "${own[@]}" env RANK=$r WORLD_SIZE=$n LOCAL_RANK=$l LOCAL_WORLD_SIZE=$per MASTER_ADDR=10.78.0.1 MASTER_PORT=$port \
          ZCOLL_SOCKET_IFNAME="eth$h" UCX_NET_DEVICES="eth$h" UCX_TLS=tcp ZCOLL_CALIBRATE=0 ZCOLL_DEBUG=WARN \
          timeout "$limit" "$@" > "$out.$r" 2>&1 &
        pids+=($!)
      done
      status=0; for p in "${pids[@]}"; do wait "$p" || status=1; done; exit $status' \
      host "$h" "$per" "$n" "$port" "$limit" "$out" "${INTERLEAVE:-0}" "$shared" "$@" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || status=1; done
  cat "$out.0" > "$out"
  for ((i = 1; i < n; i++)); do grep -v '^#\|^ ' "$out.$i" >> "$out" || true; done
  rm -f "$out".*
  return $status
}

check() {  # check NAME HOSTS PER COLL [TRANSPORT]
  local name=$1 hosts=$2 per=$3 coll=$4 transport=${5:-}
  if run_ranks "$hosts" "$per" 120 env ${transport:+ZCOLL_TRANSPORTS=$transport} "$bench" "$coll" -b 8 -e 4M -f 8 -c 1 -n 5 -w 1 -R 1 &&
     grep -q "wrong total: 0" "$out"; then
    echo "ok: $name"
  else
    echo "FAILED: $name"; sed 's/^/    /' "$out" | tail -20; failures=$((failures + 1))
  fi
  rm -f "$out"
}

check "all-reduce, 2 hosts x 1 rank" 2 1 allreduce
check "all-reduce, 4 hosts x 1 rank" 4 1 allreduce
check "all-reduce, 2 hosts x 2 ranks" 2 2 allreduce
for coll in allgather reducescatter broadcast reduce alltoall gather scatter; do
  check "$coll, 3 hosts x 1 rank" 3 1 "$coll"
done
if grep -q "^  ucx  *on" <<< "$(ASAN_OPTIONS=detect_leaks=0 "$build/tools/zcoll-info" 2>/dev/null)"; then
  for coll in allreduce allgather reducescatter broadcast alltoall; do
    check "$coll over ucx, 3 hosts x 1 rank" 3 1 "$coll" ucx
  done
  check "all-reduce over ucx, 2 hosts x 2 ranks" 2 2 allreduce ucx
else
  echo "skipped: ucx (not in this build)"
fi

# Hosts of several ranks: shm between a host's ranks, the network between hosts (one transport
# "shm+tcp", "shm+ucx"), checked element by element; rank 0's log names the transport.
mixed() {  # mixed NAME HOSTS PER COLL WANT [TRANSPORTS]
  local name=$1 hosts=$2 per=$3 coll=$4 want=$5 transports=${6:-}
  if SHARED_IPC=1 run_ranks "$hosts" "$per" 120 env ZCOLL_DEBUG=INFO ZCOLL_DEBUG_SUBSYS=init \
       ${transports:+ZCOLL_TRANSPORTS=$transports} "$bench" "$coll" -b 8 -e 4M -f 8 -c 1 -n 5 -w 1 -R 1 &&
     grep -q "wrong total: 0" "$out" && grep -q "transport $want," "$out"; then
    echo "ok: $name ($(grep -o "communicator ready: [^,]*, transport $want" "$out" | head -1))"
    last_mixed_log=$(grep "communicator ready" "$out")
  else
    echo "FAILED: $name"; grep -v "INFO" "$out" | sed 's/^/    /' | tail -20
    grep -o "transport [a-z+_]*," "$out" | head -2 | sed 's/^/    /'; failures=$((failures + 1))
  fi
  rm -f "$out"
}
mixed "all-reduce, 2 hosts x 2 ranks, shm inside a host" 2 2 allreduce shm+tcp
mixed "all-reduce, 3 hosts x 2 ranks, shm inside a host" 3 2 allreduce shm+tcp
for coll in allgather reducescatter broadcast alltoall; do
  mixed "$coll, 2 hosts x 3 ranks, shm inside a host" 2 3 "$coll" shm+tcp
done
mixed "all-reduce, 2 hosts x 2 ranks, tcp only when asked" 2 2 allreduce tcp tcp

# The hierarchical algorithms (all-reduce: shm reduce-scatter, all-reduce across hosts, shm
# all-gather; all-gather and reduce-scatter: across hosts, then inside each host), forced: every
# type x op, in and out of place, counts 0, 1, 37 and several 16 KiB chunks plus a remainder, element
# by element (tests/proc/collective_check.cpp) at 2x2, 2x3 and 3x2 ranks; and zcoll-bench's sizes.
for shape in "2 2" "2 3" "3 2"; do
  name="hier all-reduce, reduce-scatter, all-gather, ${shape/ /x} ranks, every type x op"
  if SHARED_IPC=1 run_ranks ${shape% *} ${shape#* } 300 env ZCOLL_ALGO=hier ZCOLL_CHUNK_SIZE=16K \
       "$build/tests/collective_check" && ! grep -q ", [1-9][0-9]* wrong" "$out" &&
     [[ $(grep -c ", 0 wrong (algorithm: hier)" "$out") == $((${shape% *} * ${shape#* } * 3)) ]]; then
    echo "ok: $name (every rank: $(grep "rank 0 of" "$out" | grep -o '[a-z]*: [0-9]* cases, 0 wrong' | paste -sd, -))"
  else
    echo "FAILED: $name"; sed 's/^/    /' "$out" | tail -10; failures=$((failures + 1))
  fi
  rm -f "$out"
  for coll in allreduce allgather reducescatter; do
    if SHARED_IPC=1 run_ranks ${shape% *} ${shape#* } 120 env ZCOLL_ALGO=hier "$bench" $coll -b 8 -e 4M -f 8 \
         -c 1 -n 2 -w 1 -R 1 && grep -q "wrong total: 0" "$out" && grep -q " hier *$" "$out"; then
      echo "ok: hier $coll through zcoll-bench, ${shape/ /x} ranks"
    else
      echo "FAILED: hier $coll through zcoll-bench, ${shape/ /x} ranks"; sed 's/^/    /' "$out" | tail -10
      failures=$((failures + 1))
    fi
    rm -f "$out"
  done
done
# Ranks placed round-robin over the hosts (rank r on host r mod 2): hosts are not rank blocks.
if INTERLEAVE=1 SHARED_IPC=1 run_ranks 2 2 300 env ZCOLL_ALGO=hier ZCOLL_CHUNK_SIZE=16K "$build/tests/collective_check" &&
   ! grep -q ", [1-9][0-9]* wrong" "$out" && [[ $(grep -c ", 0 wrong (algorithm: hier)" "$out") == 12 ]]; then
  echo "ok: hier, 2x2 ranks placed round-robin over the hosts, every type x op"
else
  echo "FAILED: hier, 2x2 ranks placed round-robin"; sed 's/^/    /' "$out" | tail -10; failures=$((failures + 1))
fi
rm -f "$out"
if grep -q "^  ucx  *on" <<< "$(ASAN_OPTIONS=detect_leaks=0 "$build/tools/zcoll-info" 2>/dev/null)"; then
  mixed "all-reduce, 2 hosts x 2 ranks, shm beside ucx" 2 2 allreduce shm+ucx shm,ucx
fi

# A host whose link goes down: the others fail within the timeout (3 s) with a clear error.
start=$(date +%s)
( sleep 2; ip -n "${tag}h1" link set eth1 down ) &
downer=$!
if run_ranks 2 1 60 env ZCOLL_TIMEOUT_S=3 "$bench" allreduce -b 64M -e 64M -n 100000 -w 1 -R 1 -c 0 -B 64G -S 600; then
  echo "FAILED: link down: the job succeeded"; failures=$((failures + 1))
else
  took=$(($(date +%s) - start))
  if ((took <= 20)) && grep -qi "timeout\|timed out\|peer" "$out"; then
    echo "ok: link down: the job failed after ${took}s: $(grep -i 'timeout\|timed out\|peer' "$out" | head -1)"
  else
    echo "FAILED: link down: ${took}s, no clear error:"; sed 's/^/    /' "$out" | tail -10; failures=$((failures + 1))
  fi
fi
wait "$downer" 2>/dev/null
rm -f "$out"

# 128 processes over 4 namespaces (tools/scale-probe): created, a barrier and a checked all-reduce,
# and each rank's descriptors follow the peers it talks to (the table's "descriptors" max), not N.
root=$(cd "$(dirname "$0")/../.." && pwd)
if row=$("$root/tools/scale-probe" -n 128 --hosts 4 --build "$build" 2>&1 | grep '^| 128 '); then
  fds=$(awk -F'|' '{split($8, a, "/"); print a[2] + 0}' <<< "$row")
  if grep -q '| yes |$' <<< "$row" && ((fds < 48)); then
    echo "ok: 128 processes over 4 namespaces: $row"
  else
    echo "FAILED: 128 processes over 4 namespaces: $row"; failures=$((failures + 1))
  fi
else
  echo "FAILED: 128 processes over 4 namespaces: no result"; failures=$((failures + 1))
fi
echo "netns: $failures failure(s)"
((failures == 0))
