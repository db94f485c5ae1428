#!/usr/bin/env bash
# Where a decode layer's GPU time goes, one call (repo root, carry [".whl"]): bench.gpu.kernel_profile on
# the 18-layer 120b-shape checkpoint's skewed variant (default tiles plain and early, then each tile variant
# in $VARIANTS with the early launch) and on the uniform one (default tiles). One JSON line per run in $OUT.
#   usage: [TOKENS=16] [VARIANTS="qkv_pairs=4 warps=8 ..."] bash bench/device/kernel_profile.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=bench/device/env.sh
. bench/device/env.sh
CK=/dev/shm/neural-ab/synth-18l
CKS=$CK-skewed
[ -f "$CK/SYNTHETIC.json" ] || timeout 200 "$PY" -m app.cli.main synth --preset 120b-shape --layers 18 --seed 1 \
  --jobs 8 --fast --out "$CK" >"$OUT/synth.txt" 2>&1 || { tail "$OUT/synth.txt"; exit 1; }
[ -f "$CKS/SYNTHETIC.json" ] || timeout 120 "$PY" -m app.cli.main synth --like "$CK" --routing static --skew 1.5 \
  --out "$CKS" >>"$OUT/synth.txt" 2>&1
VARIANTS=${VARIANTS:-qkv_pairs=4 qkv_pairs=16 oproj_rows=4 oproj_rows=16 k_block=256 k_block=1024 warps=8 \
warps=2 router_rows=2 router_rows=8 attn_split_full=8,attn_split_sliding=2}
echo "== skewed ($(( $(date +%s) - T0 )) s)"
# shellcheck disable=SC2086
timeout 300 "$PY" -m bench.gpu.kernel_profile "$CKS" "${TOKENS:-16}" $VARIANTS >"$OUT/profile-skewed.jsonl" \
  2>"$OUT/profile-skewed.err" || echo "skewed exited $?"
echo "== uniform ($(( $(date +%s) - T0 )) s)"
timeout 120 "$PY" -m bench.gpu.kernel_profile "$CK" "${TOKENS:-16}" >"$OUT/profile-uniform.jsonl" \
  2>"$OUT/profile-uniform.err" || echo "uniform exited $?"
tail -3 "$OUT"/profile-*.err
"$PY" - "$OUT" <<'PY'
import json, sys, pathlib
for f in sorted(pathlib.Path(sys.argv[1]).glob("profile-*.jsonl")):
    for line in f.read_text().splitlines():
        r = json.loads(line)
        c, g = r["combine_to_topk"] or {}, r["idle_gaps_in_chain"] or {}
        e = r["experts_after_topk"] or {}
        h = {k: round(v, 1) for k, v in r["host_us_per_layer"].items()}
        print(f.stem, r["mode"], r["tiles"], "chain", c.get("mean_us"), "gaps", g.get("mean_us"), "experts", e.get("mean_us"), h)
    print(f.stem, "kernels", json.dumps(json.loads(f.read_text().splitlines()[0])["kernels"]))
PY
echo "done ($(( $(date +%s) - T0 )) s)"
