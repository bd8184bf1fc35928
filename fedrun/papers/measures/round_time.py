"""Whole rounds of ``experiment=fsvrg_mnist`` (400 machines, 20% per round, one pass of single samples) for FSVRG,
MA-FSVRG and GA-FSVRG (bank rounds) under each executor: how long fedrun's own rounds take beside Zhao et al.'s
Table I (fedrun-table fsvrg_round_times)."""

from __future__ import annotations

import time

EXECUTORS = {"vmap": ["hardware.executor=vmap"],
             "vmap_compiled": ["hardware.executor=vmap", "hardware.compile=true"],
             "loop": ["hardware.executor=loop"]}


def measure(repeats: int = 5, algos: tuple[str, ...] = ("fsvrg", "mafsvrg", "gafsvrg"),
            executors: tuple[str, ...] = tuple(EXECUTORS), experiment: str = "fsvrg_mnist") -> list[dict]:
    """One row per (algorithm, executor, repeat): the seconds of one round. The first two rounds (the first bank
    round's start-up, and compilation where it applies) are not timed."""
    from fedrun.config.compose import compose_config
    from fedrun.engine.run.simulation import Simulation
    from fedrun.errors import ConfigError

    if unknown := [e for e in executors if e not in EXECUTORS]:
        raise ConfigError([f"executors={list(unknown)}: use some of {list(EXECUTORS)}"])
    rows = []
    for algo in algos:
        for executor in executors:
            extra = [] if algo == "fsvrg" else ["algo.bank.threshold=1"]
            sim = Simulation.from_config(compose_config([f"experiment={experiment}", f"algo={algo}",
                                                         *EXECUTORS[executor],
                                                         *extra]))
            sim.run_round(1)
            sim.run_round(2)
            for repeat, rnd in enumerate(range(3, 3 + repeats)):
                started = time.perf_counter()
                sim.run_round(rnd)
                rows.append({"algo": algo, "executor": executor, "seed": repeat,
                             "round_s": time.perf_counter() - started})
    return rows
