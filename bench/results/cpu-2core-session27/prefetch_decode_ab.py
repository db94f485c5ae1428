import sys, time
from engine.session import Engine
from engine.settings import EngineSettings
from engine.types import Done, GenerationParams
from native.kernel import load_kernel
eng = Engine.load(sys.argv[1], EngineSettings(backend="cpu", cpu_threads=2))
k = load_kernel()
sp = eng.special
ban = tuple((t, -100.0) for t in sorted({sp.return_, sp.call, sp.endoftext}))
prompt = list(range(100, 108))
def run(n):
    params = GenerationParams(max_tokens=n, temperature=0.0, seed=0, logit_bias=ban)
    d = next(ev for ev in eng.complete(list(prompt), params) if isinstance(ev, Done))
    return d.usage.completion_tokens / d.usage.decode_seconds
run(32); run(128); run(128)
for rnd in range(3):
    for pf in (4096, 0, 0, 4096):
        k.set_prefetch(pf or 8192)  # 0: the default, read back below
        assert pf or k.prefetch == 8192
        print(pf, round(run(128), 2), flush=True)
