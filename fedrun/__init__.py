"""fedrun: a Hydra-configured federated-learning experiment runner."""

import os

__version__ = "0.1.0"

# OpenMP threads that wait for work sleep rather than spin (unless the user chose otherwise). torch's CPU operators
# run in OpenMP's threads; a spinning thread holds its core while another process needs it, so one busy process
# beside fedrun slowed each of its many small parallel operators severalfold, while on a quiet machine sleeping costs
# a little (scripts/bench/busy_cpu_bench.py; OMP_WAIT_POLICY=ACTIVE spins). OpenMP reads this once, when torch loads:
# fedrun is imported first by its commands.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
