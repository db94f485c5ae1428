#!/usr/bin/env bash
# Session 12's second GPU-machine call (repo root, carry [".whl", ".peer", ".ab"]):
#   1. peer_decode.sh: Neural (the checkout) against llama.cpp's CUDA build, mirrored, on calibrated,
#      uniform and skewed routing at 18 layers ($PEER_BUDGET_S of the call);
#   2. with what is left, decode_ab.sh's calibrated rows again (old tree .ab/old A, checkout B, A B B A)
#      on the same checkpoints (linked, not rewritten), for more samples of the host-path change.
#   usage: [BUDGET_S=560] [PEER_BUDGET_S=470] bash bench/device/session12_peer.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
T0=$(date +%s)
OUT=${OUT:-/tmp/neural-out}
BUDGET=${BUDGET_S:-560}
ROUTINGS=calibrated,uniform,skewed BUDGET_S=${PEER_BUDGET_S:-470} bash bench/device/peer_decode.sh
LEFT=$(( BUDGET - ($(date +%s) - T0) ))
echo "== calibrated A/B with ${LEFT}s left"
mkdir -p /dev/shm/neural-ab
for v in "" -calibrated -skewed; do ln -sfn "/dev/shm/neural-peer/synth-18l$v" "/dev/shm/neural-ab/synth-18l$v"; done
cp -r /tmp/neural-peer-cache /tmp/neural-ab-cache 2>/dev/null
[ "$LEFT" -gt 60 ] && OUT=/tmp/ab-out ROUTINGS=calibrated BUDGET_S=$(( LEFT - 5 )) bash bench/device/decode_ab.sh
cp /tmp/ab-out/table.md "$OUT/ab-table.md" 2>/dev/null
cp /tmp/ab-out/results.tgz "$OUT/ab-results.tgz" 2>/dev/null
echo "done ($(( $(date +%s) - T0 )) s)"
