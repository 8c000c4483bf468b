#!/usr/bin/env bash
# Every collective (float sum), checked element by element by zcoll-bench, over each network transport forced
# on this host (ZCOLL_TRANSPORTS=tcp, =ucx over loopback), with 2 and 3 ranks (processes); then every
# type x op of all-reduce/reduce-scatter/all-gather and a ring of send/recv with each buffer registered
# (zcollCommRegister) around its call (collective_check: ucx sends stable buffers in place).
#
#   tests/transport/run.sh BUILD_DIR TRANSPORT      (meson test "transport tcp" / "transport ucx")
set -uo pipefail
build=${1:?usage: run.sh BUILD_DIR TRANSPORT}
transport=${2:?usage: run.sh BUILD_DIR TRANSPORT}
run=$build/tools/zcoll-run
bench=$build/bench/zcoll-bench
info=$(ASAN_OPTIONS=detect_leaks=0 "$build/tools/zcoll-info" 2>/dev/null)  # under LSan, hwloc's plugins "leak" and lose its output
if ! grep -q "^  $transport  *on" <<< "$info"; then
  echo "SKIP: this build has no $transport transport ($(grep "^  $transport " <<< "$info"))"
  exit 77
fi
export ZCOLL_TRANSPORTS=$transport ZCOLL_CALIBRATE=0 ZCOLL_DEBUG=WARN UCX_NET_DEVICES=lo
failures=0
for n in 2 3; do
  for coll in allreduce allgather reducescatter broadcast reduce alltoall gather scatter barrier; do
    out=$("$run" -n "$n" "$bench" "$coll" -b 8 -e 4M -f 8 -c 1 -n 3 -w 1 -R 1 2>&1)
    if [[ $? -eq 0 ]] && grep -q "wrong total: 0" <<< "$out"; then
      echo "ok: $transport $n ranks $coll"
    else
      echo "FAILED: $transport $n ranks $coll"; sed 's/^/    /' <<< "$out" | tail -15; failures=$((failures + 1))
    fi
  done
done
for n in 2 3; do
  out=$(COLLECTIVE_CHECK_REGISTER=1 ZCOLL_CHUNK_SIZE=16K "$run" -n "$n" "$build/tests/collective_check" 2>&1)
  if [[ $? -eq 0 ]] && [[ $(grep -c ", 0 wrong" <<< "$out") -eq $((4 * n)) ]]; then
    echo "ok: $transport $n ranks, registered buffers: $(grep -o 'rank 0 of [0-9]*: [a-z]*: [0-9]* cases, 0 wrong' <<< "$out" | sed 's/rank 0 of [0-9]*: //' | tr '\n' ' ')"
  else
    echo "FAILED: $transport $n ranks, registered buffers"; sed 's/^/    /' <<< "$out" | tail -15; failures=$((failures + 1))
  fi
done
# tcp keeps the slots of ZCOLL_SOCKET_MEMORY's worth of peers: at 1M (one peer's) every op at 4 ranks
# gives back and retouches slots, and must still be right.
if [[ $transport == tcp ]]; then
  for coll in alltoall allreduce allgather; do
    out=$(ZCOLL_SOCKET_MEMORY=1M "$run" -n 4 "$bench" "$coll" -b 8 -e 4M -f 8 -c 1 -n 3 -w 1 -R 1 2>&1)
    if [[ $? -eq 0 ]] && grep -q "wrong total: 0" <<< "$out"; then
      echo "ok: tcp 4 ranks $coll, one peer's slots kept"
    else
      echo "FAILED: tcp 4 ranks $coll, one peer's slots kept"; sed 's/^/    /' <<< "$out" | tail -15; failures=$((failures + 1))
    fi
  done
fi
echo "$transport: $failures failure(s)"
((failures == 0))
