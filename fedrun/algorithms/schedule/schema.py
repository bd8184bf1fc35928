"""The typed config of each option of algo/schedule: its settings, their defaults and ranges, registered as the schema
its YAML (conf/algo/schedule/) extends. No torch: checking a config needs none."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional


from fedrun.algorithms.schema import PartConfig, is_int, is_number, is_unit, register
from fedrun.config.schema import DEFAULT, Rule


@register
@dataclass
class FixedScheduleConfig(PartConfig):
    part, target, options = "schedule", "fedrun.algorithms.schedule.fixed.FixedSchedule", ("fixed",)
    name: str = "fixed"
    tau: Optional[int] = None  # null: tau_i = floor(E n_i / B)
    switch_round: Optional[int] = None  # from this round on every client takes switch_tau steps (GIFT Fig. 3)
    switch_tau: Optional[int] = None

    def rules(self) -> Iterator[Rule]:
        yield (self.tau is None or (is_int(self.tau) and self.tau >= 1), "tau",
               "must be null (tau_i = floor(E n_i / B)) or an integer >= 1", DEFAULT)
        yield (self.switch_round is None or (is_int(self.switch_round) and self.switch_round >= 2), "switch_round",
               "must be null (no switch) or the round (>= 2) from which every client takes switch_tau steps", DEFAULT)
        yield (self.switch_round is None or (is_int(self.switch_tau) and self.switch_tau >= 1), "switch_tau",
               "must be an integer >= 1 when switch_round is set (GIFT Fig. 3: 1)", "1")


@register
@dataclass
class GIFTConfig(PartConfig):
    part, target, options = "schedule", "fedrun.algorithms.schedule.gift.GIFT", ("gift",)
    name: str = "gift"
    tau0: int = 100  # initial local iterations per round
    beta: float = 0.9  # EMA coefficient of the pooled positive/negative update parts
    patience: int = 2  # halve after this many consecutive rounds without a decrease of C_r
    factor: int = 2  # tau <- floor(tau / factor)
    relax: bool = False  # Sec. 6.4: tau += relax_step after relax_after decreasing rounds, until the first halving
    relax_after: int = 10
    relax_step: int = 5
    warmup: int = 0  # rounds before C_r is compared (0: the paper's rule; the EMAs fill from zero meanwhile)

    def rules(self) -> Iterator[Rule]:
        yield is_int(self.tau0) and self.tau0 >= 1, "tau0", "must be an integer >= 1", DEFAULT
        yield is_unit(self.beta), "beta", "must be in [0, 1)", DEFAULT
        for key, low, fix in (("patience", 1, "2"), ("factor", 2, "2"), ("relax_after", 1, "10"),
                              ("relax_step", 1, "5"), ("warmup", 0, "0")):
            value = getattr(self, key)
            yield is_int(value) and value >= low, key, f"must be an integer >= {low}", fix


@register
@dataclass
class AdaCommConfig(PartConfig):
    part, target, options = "schedule", "fedrun.algorithms.schedule.adacomm.AdaComm", ("adacomm",)
    name: str = "adacomm"
    tau0: int = 100  # initial local iterations (the paper picks it by grid search)
    interval_s: Optional[float] = None  # null: a new tau every round (Paddle); seconds: every interval (timing)
    form: str = "paper"  # paper: sqrt(ratio) * tau0 | paddle: sqrt(ratio * tau0)
    halve_on_plateau: bool = True  # when F did not decrease over an interval, halve tau instead (GIFT Sec. 6.3)
    tau_max: Optional[int] = None  # cap on tau (Paddle uses 16); null: none

    def rules(self) -> Iterator[Rule]:
        yield is_int(self.tau0) and self.tau0 >= 1, "tau0", "must be an integer >= 1", DEFAULT
        yield (self.interval_s is None or (is_number(self.interval_s) and self.interval_s > 0), "interval_s",
               "must be null (every round) or > 0 seconds of simulated time (with timing=simulated)", DEFAULT)
        yield self.form in ("paper", "paddle"), "form", "must be paper or paddle", DEFAULT
        yield (self.tau_max is None or (is_int(self.tau_max) and self.tau_max >= 1), "tau_max",
               "must be null or an integer >= 1", DEFAULT)


@register
@dataclass
class AFLConfig(PartConfig):
    part, target, options = "schedule", "fedrun.algorithms.schedule.afl.AFL", ("afl",)
    name: str = "afl"
    phi: float = 5.0e-5  # control parameter: 5e-5 for CNNs, 0.025 for the smooth SVM (authors' config.py)
    tau_init: int = 1
    tau_max: int = 100
    search_factor: int = 10  # search tau in 1..search_factor * previous tau
    moving_average: float = 0.0  # holding weight of the estimates' moving average (authors' default 0)
    beta_floor: float = 1.0e-5

    def rules(self) -> Iterator[Rule]:
        for key, fix in (("phi", "5e-5"), ("beta_floor", "1e-5")):
            value = getattr(self, key)
            yield is_number(value) and value > 0, key, "must be > 0", fix
        for key, fix in (("tau_init", "1"), ("tau_max", "100"), ("search_factor", "10")):
            value = getattr(self, key)
            yield is_int(value) and value >= 1, key, "must be an integer >= 1", fix
        yield is_unit(self.moving_average), "moving_average", "must be in [0, 1)", DEFAULT
