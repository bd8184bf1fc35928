"""The typed config of every algorithm part: its settings, their defaults (this file is the one place they are
written), their allowed ranges, and the part it builds.

Each class is registered in Hydra's ConfigStore as ``algo/<part>/<option>_schema``, the schema its YAML option
(``conf/algo/<part>/<option>.yaml``) extends: Hydra refuses a key the part does not have and a value of the wrong
type while composing, and :func:`parse` refuses a value out of range, each as one line naming the key, the value,
the allowed range and the fix, before any data is loaded.
"""

from __future__ import annotations

import dataclasses
import difflib
import numbers
from dataclasses import dataclass
from typing import Any, ClassVar, Iterator, Optional

from hydra.core.config_store import ConfigStore
from hydra.utils import get_class
from omegaconf import II, DictConfig, OmegaConf

from fedrun.errors import ConfigError
from fedrun.config.schema import Rule, Section

# the choices of the parts' string settings, here so that checking a config needs no torch (fedrun --help, a typo)
SCALINGS = ("features", "none")  # fsvrg: S_i from the features' frequencies, or none
OMEGAS = ("all", "round")  # fsvrg: A from all clients' data, or this round's
DGT_MODES = ("calibrate", "norm_only")
FORMS = ("paper", "adam")  # the bank's central acceleration, eq. 64 as printed or Adam's
GROUPINGS = ("kmeans", "preference")



def _int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _num(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _unit(v) -> bool:
    """A decay or momentum coefficient: a number in [0, 1)."""
    return _num(v) and 0 <= v < 1


@dataclass
class PartConfig(Section):
    """A part's settings. ``rules`` states the range of each (refused on construction); ``build`` makes the part."""

    part: ClassVar[str]  # the plug point: local, selector, harmonizer, aggregator, server_opt, schedule, bank
    target: ClassVar[str]  # the class this config builds, as a dotted path
    options: ClassVar[tuple[str, ...]]  # the YAML options (conf/algo/<part>/<option>.yaml) this config is the schema of
    name: str

    @property
    def prefix(self) -> str:
        return f"algo.{self.part}"

    def __post_init__(self):
        if self.name not in self.options:
            raise ConfigError([f"algo.{self.part}.name={self.name!r}: must be one of {list(self.options)}. "
                               f"Fix: algo/{self.part}={self.options[0]}"])
        found = self.problems()
        if found:
            raise ConfigError(found)

    def arguments(self) -> dict[str, Any]:
        """The part's constructor arguments: every setting but its name (and the batch order, read by fl.reshuffle)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("name", "reshuffle")}

    def build(self):
        return get_class(self.target)(**self.arguments())


# ---- local rules: what a client computes, with its server-side bookkeeping


@dataclass
class SGDConfig(PartConfig):
    """Local SGD (BHerd eq. 1); mu > 0 adds FedProx's proximal term (mu = 0 is FedAvg)."""

    part, target, options = "local", "fedrun.algorithms.local_sgd.LocalSGD", ("sgd",)
    name: str = "sgd"
    mu: float = 0.0

    def rules(self) -> Iterator[Rule]:
        yield _num(self.mu) and self.mu >= 0, "mu", "must be >= 0 (FedProx's proximal weight; 0: none)", "0.01"


@dataclass
class ScaffoldConfig(SGDConfig):
    part, target, options = "local", "fedrun.algorithms.local_sgd.Scaffold", ("scaffold",)
    name: str = "scaffold"


@dataclass
class FedDynConfig(SGDConfig):
    part, target, options = "local", "fedrun.algorithms.local_sgd.FedDyn", ("feddyn",)
    name: str = "feddyn"
    alpha: float = 0.01  # FedDyn's regulariser weight

    def rules(self) -> Iterator[Rule]:
        yield from super().rules()
        yield _num(self.alpha) and self.alpha > 0, "alpha", "must be > 0 (the server divides by it)", "0.01"


@dataclass
class FedDecorrConfig(SGDConfig):
    part, target, options = "local", "fedrun.algorithms.local_sgd.FedDecorr", ("feddecorr",)
    name: str = "feddecorr"
    beta: float = 0.1  # weight of the decorrelation loss

    def rules(self) -> Iterator[Rule]:
        yield from super().rules()
        yield _num(self.beta) and self.beta >= 0, "beta", "must be >= 0 (0: plain local SGD)", "0.1"


@dataclass
class PerFedAvgConfig(PartConfig):
    part, target, options = "local", "fedrun.algorithms.perfedavg.PerFedAvg", ("perfedavg",)
    name: str = "perfedavg"
    beta: float = 1.0e-3  # the meta step
    variant: str = "fo"  # fo (first-order) | hf (Hessian-free)
    delta: float = 1.0e-3  # the Hessian-free finite difference

    def rules(self) -> Iterator[Rule]:
        yield _num(self.beta) and self.beta > 0, "beta", "must be > 0", "0.001"
        yield self.variant in ("fo", "hf"), "variant", "must be fo (first-order) or hf (Hessian-free)", "fo"
        yield _num(self.delta) and self.delta > 0, "delta", "must be > 0", "0.001"


@dataclass
class MimeConfig(PartConfig):
    part, target, options = "local", "fedrun.algorithms.variance_reduced.MimeSVRG", ("mime",)
    name: str = "mime"
    momentum: float = 0.9
    weighting: str = "uniform"  # how the full gradients are averaged into c: uniform (paper) | samples (fedjax)

    def rules(self) -> Iterator[Rule]:
        yield _unit(self.momentum), "momentum", "must be in [0, 1)", "0.9"
        yield self.weighting in ("uniform", "samples"), "weighting", "must be uniform or samples", "uniform"


@dataclass
class LoSACConfig(PartConfig):
    part, target, options = "local", "fedrun.algorithms.variance_reduced.LoSAC", ("losac",)
    name: str = "losac"


@dataclass
class FSVRGConfig(PartConfig):
    part, target, options = "local", "fedrun.algorithms.fsvrg.FSVRG", ("fsvrg",)
    name: str = "fsvrg"
    # features: Lambda_i and A_r from the clients' non-zero feature counts (model=logreg) | none: identity
    scaling: str = "features"
    omega: str = "all"  # A_r of eq. 59 counts omega^j over all machines (as printed) | round: the round's clients

    def rules(self) -> Iterator[Rule]:
        yield self.scaling in SCALINGS, "scaling", f"must be one of {SCALINGS}", "features"
        yield self.omega in OMEGAS, "omega", f"must be one of {OMEGAS}", "all"


# ---- selectors: which local steps a client's update is made of


@dataclass
class AllStepsConfig(PartConfig):
    part, target, options = "selector", "fedrun.algorithms.parts.AllSteps", ("all",)
    name: str = "all"
    reshuffle: bool = True  # default of fl.reshuffle: random reshuffling, as the BHerd paper's baselines

    def arguments(self) -> dict[str, Any]:
        return {}


@dataclass
class HerdConfig(PartConfig):
    part, target, options = "selector", "fedrun.algorithms.selection.Herd", ("herd",)
    name: str = "herd"
    alpha: float = 0.5  # BHerd's alpha, the fraction of steps sent (the Dirichlet alpha is partition.alpha)
    local_epochs: float = II("fl.local_epochs")  # E of eq. 6
    reshuffle: bool = False  # default of fl.reshuffle: BHerd Sec. III-A, a fixed order (Fig. 7: fl.reshuffle=true)

    def rules(self) -> Iterator[Rule]:
        yield (_num(self.alpha) and 0 < self.alpha <= 1, "alpha",
               "must be in (0, 1] (the fraction of each client's steps that is sent; 1: every step, FedAvg)", "0.5")
        yield _num(self.local_epochs) and self.local_epochs > 0, "local_epochs", "must be > 0", "${fl.local_epochs}"


@dataclass
class GraBConfig(HerdConfig):
    part, target, options = "selector", "fedrun.algorithms.selection.GraB", ("grab",)
    name: str = "grab"


@dataclass
class RandomSubsetConfig(HerdConfig):
    """The control of herding: as many steps, taken at random."""

    part, target, options = "selector", "fedrun.algorithms.selection.RandomSubset", ("random",)
    name: str = "random"
    seed: int = II("seed")

    def rules(self) -> Iterator[Rule]:
        yield from super().rules()
        yield _int(self.seed), "seed", "must be an integer", "${seed}"


# ---- harmonizers: act on the round's stacked updates before aggregation


@dataclass
class NoHarmonizerConfig(PartConfig):
    part, target, options = "harmonizer", "fedrun.algorithms.parts.NoHarmonizer", ("none",)
    name: str = "none"


@dataclass
class FedGHConfig(PartConfig):
    part, target, options = "harmonizer", "fedrun.algorithms.harmonize.FedGH", ("fedgh",)
    name: str = "fedgh"
    seed: int = II("seed")  # the random order in which conflicting pairs are projected

    def rules(self) -> Iterator[Rule]:
        yield _int(self.seed), "seed", "must be an integer", "${seed}"


@dataclass
class DGTConfig(PartConfig):
    part, target, options = "harmonizer", "fedrun.algorithms.harmonize.DGT", ("dgt",)
    name: str = "dgt"
    momentum: float = 0.5  # of each client's baseline
    # calibrate (DGT) | norm_only: the control, the clients' own updates scaled so that the aggregate is as long as
    # DGT's (a longer server step without DGT's directions)
    mode: str = "calibrate"

    def rules(self) -> Iterator[Rule]:
        yield _unit(self.momentum), "momentum", "must be in [0, 1)", "0.5"
        yield self.mode in DGT_MODES, "mode", f"must be one of {DGT_MODES}", "calibrate"


# ---- aggregators


@dataclass
class MeanConfig(PartConfig):
    """The weighted mean of the updates: ``samples``: p_i = n_i / n (NOTES.md 'Common'); ``uniform``: p_i = 1/K
    (Per-FedAvg, FedDyn and DGT's Algorithm 1 as printed)."""

    part, target, options = "aggregator", "fedrun.algorithms.aggregate.WeightedMean", ("mean",)
    name: str = "mean"
    weighting: str = "samples"

    def rules(self) -> Iterator[Rule]:
        yield self.weighting in ("samples", "uniform"), "weighting", "must be samples or uniform", "samples"


@dataclass
class FedNovaConfig(MeanConfig):
    part, target, options = "aggregator", "fedrun.algorithms.aggregate.FedNova", ("fednova",)
    name: str = "fednova"


# ---- server optimisers


def _server_lr(lr) -> Rule:
    return _num(lr) and lr > 0, "lr", "must be > 0 (1 with sgd: the plain average)", "1.0"


@dataclass
class ServerSGDConfig(PartConfig):
    part, target, options = "server_opt", "fedrun.algorithms.server_opt.ServerSGD", ("sgd",)
    name: str = "sgd"
    lr: float = 1.0

    def rules(self) -> Iterator[Rule]:
        yield _server_lr(self.lr)


@dataclass
class ServerMomentumConfig(ServerSGDConfig):
    part, target, options = "server_opt", "fedrun.algorithms.server_opt.ServerMomentum", ("avgm",)
    name: str = "avgm"
    momentum: float = 0.9

    def rules(self) -> Iterator[Rule]:
        yield from super().rules()
        yield _unit(self.momentum), "momentum", "must be in [0, 1)", "0.9"


@dataclass
class ServerAdaptiveConfig(PartConfig):
    """FedAdagrad, FedAdam, FedYogi (Reddi et al.)."""

    part, target, options = "server_opt", "fedrun.algorithms.server_opt.ServerAdaptive", ("adagrad", "adam", "yogi")
    name: str = "adam"
    lr: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.99
    tau: float = 1.0e-3  # the adaptivity
    bias_correction: bool = False  # true: the authors' code (Keras) variant
    adagrad_momentum: bool = True  # false: Keras Adagrad (beta1 = 0)

    def arguments(self) -> dict[str, Any]:
        return {"kind": self.name, **super().arguments()}

    def rules(self) -> Iterator[Rule]:
        yield _num(self.lr) and self.lr > 0, "lr", "must be > 0", "0.01"
        yield _unit(self.beta1), "beta1", "must be in [0, 1)", "0.9"
        yield _unit(self.beta2), "beta2", "must be in [0, 1)", "0.99"
        yield _num(self.tau) and self.tau > 0, "tau", "must be > 0", "0.001"


# ---- schedules: local steps per round


@dataclass
class FixedScheduleConfig(PartConfig):
    part, target, options = "schedule", "fedrun.algorithms.schedule.FixedSchedule", ("fixed",)
    name: str = "fixed"
    tau: Optional[int] = None  # null: tau_i = floor(E n_i / B)
    switch_round: Optional[int] = None  # from this round on every client takes switch_tau steps (GIFT Fig. 3)
    switch_tau: Optional[int] = None

    def rules(self) -> Iterator[Rule]:
        yield (self.tau is None or (_int(self.tau) and self.tau >= 1), "tau",
               "must be null (tau_i = floor(E n_i / B)) or an integer >= 1", "null")
        yield (self.switch_round is None or (_int(self.switch_round) and self.switch_round >= 2), "switch_round",
               "must be null (no switch) or the round (>= 2) from which every client takes switch_tau steps", "null")
        yield (self.switch_round is None or (_int(self.switch_tau) and self.switch_tau >= 1), "switch_tau",
               "must be an integer >= 1 when switch_round is set (GIFT Fig. 3: 1)", "1")


@dataclass
class GIFTConfig(PartConfig):
    part, target, options = "schedule", "fedrun.algorithms.schedule.GIFT", ("gift",)
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
        yield _int(self.tau0) and self.tau0 >= 1, "tau0", "must be an integer >= 1", "100"
        yield _unit(self.beta), "beta", "must be in [0, 1)", "0.9"
        for key, low, fix in (("patience", 1, "2"), ("factor", 2, "2"), ("relax_after", 1, "10"),
                              ("relax_step", 1, "5"), ("warmup", 0, "0")):
            value = getattr(self, key)
            yield _int(value) and value >= low, key, f"must be an integer >= {low}", fix


@dataclass
class AdaCommConfig(PartConfig):
    part, target, options = "schedule", "fedrun.algorithms.schedule.AdaComm", ("adacomm",)
    name: str = "adacomm"
    tau0: int = 100  # initial local iterations (the paper picks it by grid search)
    interval_s: Optional[float] = None  # null: a new tau every round (Paddle); seconds: every interval (timing)
    form: str = "paper"  # paper: sqrt(ratio) * tau0 | paddle: sqrt(ratio * tau0)
    halve_on_plateau: bool = True  # when F did not decrease over an interval, halve tau instead (GIFT Sec. 6.3)
    tau_max: Optional[int] = None  # cap on tau (Paddle uses 16); null: none

    def rules(self) -> Iterator[Rule]:
        yield _int(self.tau0) and self.tau0 >= 1, "tau0", "must be an integer >= 1", "100"
        yield (self.interval_s is None or (_num(self.interval_s) and self.interval_s > 0), "interval_s",
               "must be null (every round) or > 0 seconds of simulated time (with timing=simulated)", "null")
        yield self.form in ("paper", "paddle"), "form", "must be paper or paddle", "paper"
        yield (self.tau_max is None or (_int(self.tau_max) and self.tau_max >= 1), "tau_max",
               "must be null or an integer >= 1", "null")


@dataclass
class AFLConfig(PartConfig):
    part, target, options = "schedule", "fedrun.algorithms.schedule.AFL", ("afl",)
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
            yield _num(value) and value > 0, key, "must be > 0", fix
        for key, fix in (("tau_init", "1"), ("tau_max", "100"), ("search_factor", "10")):
            value = getattr(self, key)
            yield _int(value) and value >= 1, key, "must be an integer >= 1", fix
        yield _unit(self.moving_average), "moving_average", "must be in [0, 1)", "0.0"


# ---- the model bank of MA-/GA-FSVRG


@dataclass
class NoBankConfig(PartConfig):
    """One global model."""

    part, target, options = "bank", "fedrun.algorithms.bank.ModelBank", ("none",)
    name: str = "none"

    def arguments(self) -> dict[str, Any]:  # a bank of one model: the bank's settings are never read
        return BankConfig().arguments() | {"kind": "none"}


@dataclass
class BankConfig(PartConfig):
    """MA-/GA-FSVRG's C diversified global models (Zhao et al.)."""

    part, target, options = "bank", "fedrun.algorithms.bank.ModelBank", ("ma",)
    name: str = "ma"
    models: int = 4  # C, the number of diversified global models
    threshold: int = 4  # T: rounds 1..T train one model (plain FSVRG), the bank starts at round T + 1
    alpha_g: float = 0.02  # alpha_g^0 of eq. 64
    beta1: float = 0.0  # first-moment decay (eq. 62); the MNIST figures use 0.0, CIFAR-10 0.9
    beta2: float = 0.999  # second-moment decay (eq. 63)
    eps: float = 1.0e-8  # epsilon of eq. 64
    form: str = "adam"  # adam: Adam's bias-corrected step on eqs. 62-63's moments | paper: eq. 64 as printed
    kmeans_eps: float = 1.0e-4  # the eq. 42 stopping sum
    kmeans_max_iter: int = 100
    center_seeds: bool = False  # eqs. 39/53 as printed (anchors projected uncentred); true: centred like the clients
    grouping: str = "kmeans"  # kmeans (Zhao et al.) | preference: each client grouped with the model it preferred

    def arguments(self) -> dict[str, Any]:
        return {"kind": self.name, "ga_step": None, **super().arguments()}  # MA has no GA step

    def rules(self) -> Iterator[Rule]:
        yield (_int(self.models) and self.models >= 1, "models",
               "must be an integer >= 1 (C; 4 in Zhao et al.'s MNIST runs)", "4")
        yield _int(self.threshold) and self.threshold >= 0, "threshold", "must be an integer >= 0", "4"
        yield _num(self.alpha_g) and self.alpha_g >= 0, "alpha_g", "must be >= 0 (0: no central acceleration)", "0.02"
        yield _unit(self.beta1), "beta1", "must be in [0, 1)", "0.0"
        yield _unit(self.beta2), "beta2", "must be in [0, 1)", "0.999"
        yield _num(self.eps) and self.eps > 0, "eps", "must be > 0", "1e-8"
        yield self.form in FORMS, "form", f"must be one of {FORMS}", "adam"
        yield _num(self.kmeans_eps) and self.kmeans_eps > 0, "kmeans_eps", "must be > 0", "1e-4"
        yield _int(self.kmeans_max_iter) and self.kmeans_max_iter >= 1, "kmeans_max_iter", "must be an integer >= 1", \
            "100"
        yield self.grouping in GROUPINGS, "grouping", f"must be one of {GROUPINGS}", "kmeans"


@dataclass
class GABankConfig(BankConfig):
    part, target, options = "bank", "fedrun.algorithms.bank.ModelBank", ("ga",)
    name: str = "ga"
    ga_step: Optional[float] = None  # eq. 58's step; null: the clients' mean alpha_l / n_i x mean local steps

    def rules(self) -> Iterator[Rule]:
        yield from super().rules()
        yield (self.ga_step is None or (_num(self.ga_step) and self.ga_step > 0), "ga_step",
               "must be null (from the clients' steps) or > 0", "null")


SCHEMAS: dict[str, dict[str, type[PartConfig]]] = {}


def register(cls: type[PartConfig]) -> type[PartConfig]:
    """Make ``cls``'s options choosable as ``algo/<part>=<option>``: its schema goes to ConfigStore (as
    ``algo/<part>/<option>_schema``, for the option's YAML to extend) and to :func:`parse`. A new part is a module
    with its class and config, registered when imported, plus one YAML (docs/adding-a-part.md)."""
    for option in cls.options:
        SCHEMAS.setdefault(cls.part, {})[option] = cls
        ConfigStore.instance().store(group=f"algo/{cls.part}", name=f"{option}_schema", node=cls)
    return cls


for _cls in (SGDConfig, ScaffoldConfig, FedDynConfig, FedDecorrConfig, PerFedAvgConfig, MimeConfig, LoSACConfig,
             FSVRGConfig, AllStepsConfig, HerdConfig, GraBConfig, RandomSubsetConfig, NoHarmonizerConfig,
             FedGHConfig, DGTConfig, MeanConfig, FedNovaConfig, ServerSGDConfig, ServerMomentumConfig,
             ServerAdaptiveConfig, FixedScheduleConfig, GIFTConfig, AdaCommConfig, AFLConfig, NoBankConfig, BankConfig,
             GABankConfig):
    register(_cls)


def parse(part: str, node) -> PartConfig:
    """The typed config of one part from its composed node (``cfg.algo.<part>``); ConfigError naming the bad key(s)."""
    values = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node)
    name = values.get("name")
    options = SCHEMAS[part]
    if name not in options:
        raise ConfigError([f"algo/{part}={name!r} is unknown; choose one of {sorted(options)}. "
                           f"Fix: algo/{part}={next(iter(options))}"])
    cls = options[name]
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - fields)
    if unknown:
        raise ConfigError([f"algo.{part}.{key}: algo/{part}={name} has no such setting"
                           + (f"; did you mean algo.{part}.{match[0]}?" if (match := difflib.get_close_matches(
                               key, sorted(fields), n=1, cutoff=0.5)) else f"; its settings are {sorted(fields)}")
                           for key in unknown])
    return cls(**values)


def make(part: str, name: str, **settings):
    """The part ``name`` of ``part`` with its schema's defaults and ``settings``, checked like a composed config's
    (for code and tests that build a part without one; an interpolated default, e.g. a selector's local_epochs, must
    be given)."""
    return parse(part, {"name": name, **settings}).build()


def schema_keys() -> frozenset[str]:
    """Every dotted key that some part's schema defines (``algo.local.mu``, ...)."""
    return frozenset(f"algo.{part}.{f.name}" for part, options in SCHEMAS.items() for cls in options.values()
                     for f in dataclasses.fields(cls))
