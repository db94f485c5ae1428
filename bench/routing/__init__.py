"""Routing studies: LRU/Belady replay of expert traces (``replay_sim``), the engine's admission
replayed on a trace (``policy_replay``) and the calibrated text decoded through the engine
(``calibrated_decode``, a device script). The calibrated workload itself is
engine/synth/calibrated.py (it writes checkpoints)."""
