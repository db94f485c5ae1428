"""``neural bench``: reproducible benchmarks of the engine and of OpenAI-compatible servers.

Speed claims in this project come from here, never from timed tests. Modules:
``engine_bench`` (decode and prompt through the real engine), ``replay`` (saved API requests
against running servers in mirrored order), ``stats`` (medians, spreads, weighted rates),
``environment`` (engine version, device, checkpoint routing), ``context_tokens`` (the
deterministic token sequence the engine benchmarks feed), ``make_requests`` (rebuilds the
shipped request set in ``bench/data/``).
"""
