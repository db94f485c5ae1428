"""The lab: benchmarks, device scripts, studies and the demo model's training.

Nothing here ships: the app's wheel and the installer carry only app/, engine/, native/, ui/ and
resources/. `neural bench …` and `neural train-demo` import this package lazily from a checkout
(see app/cli/lab.py); results live in bench/results/, device scripts in bench/device/.
"""
