#!/usr/bin/env bash
# prompt A/B on the CPU engine: A = /tmp/nbase (bf16 table: tiles at every group size, as before), B = /tmp/nv16 (registers up to 16)
. /work/main/.venv/bin/activate
cd /tmp/s32
for n in 64 512; do
for side in A B B A; do
  if [ $side = A ]; then pp=/tmp/nbase:/work/main; else pp=/tmp/nv16:/work/main; fi
  PYTHONPATH=$pp python /tmp/pab/run_isa.py auto bench prompt /tmp/neural-peer/synth-120b-shape-4l --backend cpu --threads 2 \
    --tokens $n --warmup 2 --repeats 4 --json 2>/tmp/s32/err-$side.txt >/tmp/s32/out.json
  python -c "
import json; d=json.load(open('/tmp/s32/out.json')); r=d['results'][0]
print($n, '$side', ' '.join(f'{x:.3f}' for x in r['runs_s']), 'tok/s median', round(r['tokens_per_s']['median'],1), r['token_ids_sha256'][:12])"
  grep -o "native: .*" /tmp/s32/err-$side.txt
done
done
