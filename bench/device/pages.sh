#!/usr/bin/env bash
# Does the page size of the expert mapping matter on the H200 host? One device call (repo root, carry [".whl"]):
# 1. the machine's THP settings and mounts ($OUT/machine.txt);
# 2. bench.kernel.page_bench at 8 threads: one 4 GiB store behind tmpfs 4 KiB pages, a collapsed tmpfs copy mapped
#    2 MiB-aligned, a disk copy, anonymous memory with and without THP (DRAM probe, kernel, DMA);
# 3. calibrated decode (18 layers, 12 GiB, 8 threads, pool scaled as peer_decode.sh), A B B A:
#    A = the checkpoint in tmpfs mapped as today (huge_pages=false), B = huge_pages=true on a copy collapsed into
#    2 MiB pages (a collapsed file must be mapped aligned: a plain mapping of one ran at half speed on the 2-core VM);
# 4. bench.kernel.capture_cost at 8 threads (what copy-on-compute admission costs this host's kernel).
#   usage: [BUDGET_S=580] [TOKENS=128] bash bench/device/pages.sh      results: $OUT/table.md, *.json, pages.log
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
BUDGET_S=${BUDGET_S:-580}
# shellcheck source=bench/device/env.sh
. bench/device/env.sh
LOG=$OUT/pages.log
{ uname -a; for f in enabled shmem_enabled defrag; do echo "thp $f: $(cat /sys/kernel/mm/transparent_hugepage/$f)"; done
  mount | grep -E " / | /tmp | /dev/shm "; df -h / /tmp /dev/shm; free -g; nproc
  lscpu | grep -E "Model name|L3|NUMA node"; } >"$OUT/machine.txt" 2>&1
head -8 "$OUT/machine.txt"
echo "== page_bench ($(( $(date +%s) - T0 )) s)" | tee -a "$LOG"
timeout 200 "$PY" -m bench.kernel.page_bench --threads 8 --store-gib 4 --rounds 3 --seconds 2 >"$OUT/page_bench.txt" \
  2>>"$LOG" || echo "page_bench exited $?" | tee -a "$LOG"
cat "$OUT/page_bench.txt"
export NEURAL_CACHE_DIR=/tmp/neural-pages-cache
CK=/dev/shm/neural-ab/synth-18l
CKC=$CK-calibrated
CKH=$CKC-huge
TOKENS=${TOKENS:-128}
[ -f "$CK/SYNTHETIC.json" ] || timeout 200 "$PY" -m app.cli.main synth --preset 120b-shape --layers 18 \
  --seed 1 --jobs 8 --fast --out "$CK" >"$OUT/synth.txt" 2>&1 || { tail "$OUT/synth.txt"; exit 1; }
[ -f "$CKC/SYNTHETIC.json" ] || timeout 120 "$PY" -m app.cli.main synth --like "$CK" --routing calibrated \
  --out "$CKC" >>"$OUT/synth.txt" 2>&1 || { tail "$OUT/synth.txt"; exit 1; }
mkdir -p "$CKH"
for f in "$CKC"/*; do [ -e "$CKH/$(basename "$f")" ] || cat "$f" >"$CKH/$(basename "$f")"; done
rm -rf "$CK"  # the uniform checkpoint is only the calibrated one's source: free its RAM
echo "== collapse ($(( $(date +%s) - T0 )) s)" | tee -a "$LOG"
"$PY" -m bench.kernel.page_bench --collapse "$CKH" --threads 8 >"$OUT/collapse.txt" 2>>"$LOG" \
  || echo "collapse exited $?" | tee -a "$LOG"
tail -2 "$OUT/collapse.txt"
grep -i shmemhuge /proc/meminfo | tee -a "$LOG"
POOL=$(scaled_pool 18)
run() {  # NAME CKPT HUGE
  local l
  l=$(left)
  [ "$l" -lt 45 ] && { echo "skip $1: ${l}s left" | tee -a "$LOG"; return; }
  rm -f "$NEURAL_CACHE_DIR"/hotset-*.npy
  echo "== $1 ($(( $(date +%s) - T0 )) s)" | tee -a "$LOG"
  timeout "$(( l < 120 ? l : 120 ))" "$PY" -m bench.routing.calibrated_tg "$2" --depth 2048 --warmup 16 \
    --tokens "$TOKENS" --backend gpu --budget-gib 12 --threads 8 --context 16384 --set "pool_gib=$POOL" \
    --set "huge_pages=$3" >"$OUT/$1.json" 2>>"$LOG" || echo "$1 exited $?" | tee -a "$LOG"
}
run calibrated-A1 "$CKC" false
run calibrated-B1 "$CKH" true
run calibrated-B2 "$CKH" true
run calibrated-A2 "$CKC" false
if [ "$(left)" -gt 70 ]; then
  echo "== capture_cost ($(( $(date +%s) - T0 )) s)" | tee -a "$LOG"
  timeout "$(( $(left) - 10 ))" "$PY" -m bench.kernel.capture_cost --threads 8 --store-gib 4 --rounds 6 \
    >"$OUT/capture_cost.txt" 2>>"$LOG" || echo "capture_cost exited $?" | tee -a "$LOG"
  cat "$OUT/capture_cost.txt"
fi
"$PY" - "$OUT" <<'PY' | tee "$OUT/table.md"
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
print("| run | tok/s | hit | CPU experts/token | huge-mapped GiB | prompt s | phases ms per token |")
print("|---|---:|---:|---:|---:|---:|---|")
for f in sorted(out.glob("calibrated-*.json"), key=lambda p: p.stat().st_mtime):
    try:
        d = json.loads(f.read_text().strip().splitlines()[-1])
        ph = ", ".join(f"{k} {v:.3f}" for k, v in d["phases_ms"].items())
        print(f"| {f.stem} | {d['tok_s_MEASURED']:.2f} | {d['vram_hit_rate_MEASURED']:.3f} | "
              f"{d['cpu_experts_per_token']:.2f} | {d['huge_mapped_gib']} | {d['prompt_s']} | {ph} |")
    except (OSError, ValueError, KeyError, IndexError) as e:
        print(f"| {f.stem} | - | - | - | - | - | no result ({e!r}) |")
PY
echo "done ($(( $(date +%s) - T0 )) s)" | tee -a "$LOG"
