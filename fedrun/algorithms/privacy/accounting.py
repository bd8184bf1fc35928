"""The privacy a run spends, computed by Google's dp-accounting (a maintained library; chosen over Opacus's accountants
because it has both RDP and PLD accountants and an RDP bound for sampling without replacement, the other sampling
fedrun runs).

Each round releases one subsampled Gaussian: the clipped sum of the cohort's updates with noise of standard deviation
z C (z: the whole release's noise multiplier, update and count together under adaptive clipping). Poisson sampling at
rate q is accounted under add/remove-one-client adjacency (RDP or PLD); a fixed-size cohort of K out of N drawn
without replacement under replace-one adjacency (RDP only: dp-accounting's PLD has no bound for it).
"""

from __future__ import annotations

import functools
import logging
import sys
from dataclasses import dataclass


def tame_absl() -> None:
    """dp-accounting's logging (absl), tamed: the RDP accountant warns through it when a fractional order's series
    does not converge and drops that order (epsilon is then taken over the others, still a valid bound): not the
    user's to act on; and absl's handler keeps the sys.stderr of its import and closes it when logging is configured
    again (Hydra does, per run) if sys.stderr has been replaced since: a run in a process whose stderr is redirected
    (a notebook's cell, a test) would close the stream its caller owns. The process's own stderr it never closes."""
    from absl import logging as absl_logging

    logging.getLogger("absl").setLevel(logging.ERROR)
    absl_logging.get_absl_handler().python_handler.stream = sys.__stderr__


if "absl.logging" in sys.modules:  # imported before fedrun (by dp-accounting, say): tamed now
    tame_absl()


@functools.cache
def dp_accounting():
    """The library, imported on first use (checking a config needs none of it), its logging tamed first."""
    tame_absl()
    import dp_accounting as library

    return library


def round_event(sampling: Sampling, population: int, noise_multiplier: float):
    """The dp-accounting event of one round."""
    library = dp_accounting()
    gaussian = library.GaussianDpEvent(noise_multiplier)
    if sampling.name == "poisson":
        return library.PoissonSampledDpEvent(sampling.rate, gaussian)
    if sampling.per_round >= population:  # every client, every round
        return gaussian
    return library.SampledWithoutReplacementDpEvent(population, sampling.per_round, gaussian)


def accountant(name: str, sampling: Sampling):
    """A fresh dp-accounting accountant valid for ``sampling`` (ValueError for PLD with a fixed-size cohort)."""
    library = dp_accounting()
    from dp_accounting import pld, rdp

    if name == "pld":
        if sampling.name != "poisson":
            raise ValueError("the PLD accountant has no bound for cohorts drawn without replacement")
        return pld.PLDAccountant()
    relation = (library.NeighboringRelation.ADD_OR_REMOVE_ONE if sampling.name == "poisson"
                else library.NeighboringRelation.REPLACE_ONE)
    return rdp.RdpAccountant(neighboring_relation=relation)


@functools.lru_cache(maxsize=4096)
def epsilon(name: str, sampling: Sampling, population: int, noise_multiplier: float, rounds: int,
            delta: float) -> float:
    """Epsilon at ``delta`` after ``rounds`` rounds (inf without noise; 0 before any round)."""
    if rounds == 0:
        return 0.0
    if noise_multiplier == 0:
        return float("inf")
    acc = accountant(name, sampling)
    acc.compose(round_event(sampling, population, noise_multiplier), rounds)
    return float(acc.get_epsilon(delta))


def rounds_within(target: float, name: str, sampling: Sampling, population: int, noise_multiplier: float,
                  delta: float, most: int) -> int:
    """The most rounds (up to ``most``) whose epsilon stays within ``target`` (bisection: epsilon grows with rounds)."""
    low, high = 0, most  # epsilon(low) <= target; the answer lies in [low, high]
    while low < high:
        mid = (low + high + 1) // 2
        if epsilon(name, sampling, population, noise_multiplier, mid, delta) <= target:
            low = mid
        else:
            high = mid - 1
    return low


@dataclass(frozen=True)
class Sampling:
    """How the run picks a round's clients, as the accountant needs it: ``poisson`` (each client independently at
    ``rate``) or ``uniform`` (``per_round`` of the population without replacement)."""

    name: str
    rate: float | None
    per_round: int

    def expected(self, population: int) -> float:
        """The expected cohort size: q N, or min(K, N)."""
        return self.rate * population if self.name == "poisson" else float(min(self.per_round, population))
