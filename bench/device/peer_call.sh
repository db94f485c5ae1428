#!/usr/bin/env bash
# One GPU-machine call around the peer comparison (repo root, carry [".whl", ".peer"], plus ".ab" for AFTER=ab):
#   1. peer_decode.sh: Neural (the checkout) against llama.cpp's CUDA build, mirrored, on calibrated,
#      uniform and skewed routing at 18 layers ($PEER_BUDGET_S of the call);
#   2. with what is left, AFTER=
#      ab      (session 12) decode_ab.sh's calibrated rows (old tree .ab/old A, checkout B, A B B A) on the same
#              checkpoints (linked, not rewritten), for more samples of a host-path change;
#      profile (session 13) bench.gpu.kernel_profile on the skewed checkpoint with the resident experts' tile
#              variants (where the GPU's share of a layer goes once the hot set is in VRAM).
#   usage: [AFTER=ab|profile] [BUDGET_S=560] [PEER_BUDGET_S=470] bash bench/device/peer_call.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
T0=$(date +%s)
OUT=${OUT:-/tmp/neural-out}
BUDGET=${BUDGET_S:-560}
ROUTINGS=calibrated,uniform,skewed BUDGET_S=${PEER_BUDGET_S:-470} bash bench/device/peer_decode.sh
LEFT=$(( BUDGET - ($(date +%s) - T0) ))
echo "== ${AFTER:-ab} with ${LEFT}s left"
if [ "${AFTER:-ab}" = profile ]; then
  export PYTHONPATH="$PWD:/tmp/site"
  [ "$LEFT" -gt 50 ] && timeout $(( LEFT - 5 )) python3 -m bench.gpu.kernel_profile \
    /dev/shm/neural-peer/synth-18l-skewed 16 gu_pairs=4 gu_pairs=16 mx_groups=8 mx_groups=32 down_rows=4 down_rows=16 \
    >"$OUT/profile-experts.jsonl" 2>"$OUT/profile-experts.err"
  python3 - "$OUT/profile-experts.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    k = {n: v["mean_us"] for n, v in r["kernels"].items() if n.startswith(("expert", "oproj", "qkv", "router"))}
    print(r["mode"], r["tiles"], "chain", (r["combine_to_topk"] or {}).get("mean_us"),
          "experts", (r["experts_after_topk"] or {}).get("mean_us"), k)
PY
else
  mkdir -p /dev/shm/neural-ab
  for v in "" -calibrated -skewed; do ln -sfn "/dev/shm/neural-peer/synth-18l$v" "/dev/shm/neural-ab/synth-18l$v"; done
  cp -r /tmp/neural-peer-cache /tmp/neural-ab-cache 2>/dev/null
  [ "$LEFT" -gt 60 ] && OUT=/tmp/ab-out ROUTINGS=calibrated BUDGET_S=$(( LEFT - 5 )) bash bench/device/decode_ab.sh
  cp /tmp/ab-out/table.md "$OUT/ab-table.md" 2>/dev/null
  cp /tmp/ab-out/results.tgz "$OUT/ab-results.tgz" 2>/dev/null
fi
echo "done ($(( $(date +%s) - T0 )) s)"
