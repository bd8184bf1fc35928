"""Checks of a composed config, run once, before any data is loaded or any model is built.

A value's own range is its schema's (the run's sections and the groups: ``fedrun/config/schema.py``; each algorithm
part: ``fedrun/algorithms/<part>/schema.py``). What spans groups (a model against the dataset's inputs, a schedule
against the time model) is declared here, in :data:`REQUIREMENTS`: one function per requirement, each given the
config and the dataset's static description, returning its problem or None. Every problem names the key, the bad
value, the allowed range and a fix; all problems are reported at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from fedrun.algorithms import check_parts
from fedrun.algorithms.schema import is_int
from fedrun.config.schema import section_problems
from fedrun.data import DATASETS
from fedrun.data.base import DatasetSpec
from fedrun.errors import ConfigError
from fedrun.model.zoo import MODELS, check_fit


def validate(cfg) -> None:
    """Every problem of ``cfg`` at once, as one ConfigError; nothing when it can run."""
    problems = section_problems(cfg)  # the run's sections and the typed groups: their schemas' ranges
    problems += check_parts(cfg.algo)  # every part's ranges (its schema) and whether the parts fit together
    spec = DATASETS.get(cfg.data.name)
    if spec is None:
        problems.append(f"data={cfg.data.name!r}: unknown dataset. Fix: choose one of {sorted(DATASETS)}")
    for requirement in REQUIREMENTS:
        if spec is not None or not requirement.needs_data:
            problem = requirement.check(cfg, spec)
            if problem:
                problems.append(problem)
    if problems:
        raise ConfigError(problems)


@dataclass(frozen=True)
class Requirement:
    """A requirement between groups: ``check(cfg, spec)`` gives the problem (key, value, rule, fix) or None;
    ``needs_data``: it reads the dataset's description (skipped when the dataset is unknown: that is said once)."""

    check: Callable[..., str | None]
    needs_data: bool = True


def _problem(key: str, value, rule: str, fix: str) -> str:
    if isinstance(value, str) and rule.startswith(("must be >", "must be in", "must be null or >")):
        rule = rule.replace("must be ", "must be a number ", 1)  # eval.every_s=fast: not a number at all
    return f"{key}={value!r}: {rule}. Fix: {fix}"


def evaluation_grid_needs_simulated_time(cfg, spec: DatasetSpec | None) -> str | None:
    every_s = cfg.eval.every_s
    if every_s is None or (every_s > 0 and cfg.timing.name == "simulated"):
        return None
    return _problem("eval.every_s", every_s, "must be null (evaluate every eval.every rounds) or > 0 seconds of "
                    "simulated time (with timing=simulated)", "eval.every_s=null, or timing=simulated eval.every_s=25")


def augmentation_needs_pixel_images(cfg, spec: DatasetSpec) -> str | None:
    augment = cfg.data.augment
    if augment == "none" or spec.pixel_images:
        return None
    return _problem("data.augment", augment, f"needs images made of uint8 pixels, which data={cfg.data.name} is not "
                    f"(those are {sorted(n for n, s in DATASETS.items() if s.pixel_images)})", "data.augment=none")


def classes_per_client_within_the_datasets(cfg, spec: DatasetSpec) -> str | None:
    p = cfg.partition
    if p.name != "classes":
        return None
    num_classes = spec.meta(cfg.data)[2]
    k = p.classes_per_client
    ks = [k] if is_int(k) else list(k) if hasattr(k, "__len__") else [k]
    if len(ks) in (1, 2) and all(is_int(v) and 1 <= v <= num_classes for v in ks) and ks == sorted(ks):
        return None
    return _problem("partition.classes_per_client", k, f"must be an integer or [lo, hi] within [1, {num_classes}]",
                    "partition.classes_per_client=2")


def natural_partition_needs_users(cfg, spec: DatasetSpec) -> str | None:
    if cfg.partition.name != "natural" or spec.has_users:
        return None
    return (f"partition=natural: data={cfg.data.name} has no users. Fix: use partition=dirichlet, or a dataset with "
            f"users ({sorted(n for n, s in DATASETS.items() if s.has_users)})")


def model_output_matches_the_targets(cfg, spec: DatasetSpec) -> str | None:
    model_spec = MODELS.get(cfg.model.name)
    if model_spec is None or model_spec.sequence_output == spec.sequence_targets:
        return None
    model_says = "predicts a token at every step" if model_spec.sequence_output else "predicts one class"
    data_says = "has a target token at every step" if spec.sequence_targets else "has one class per sample"
    fix = "model=lstm_lm" if spec.sequence_targets else "a classifier, e.g. model=lstm"
    return f"model={cfg.model.name} {model_says} but data={cfg.data.name} {data_says}. Fix: {fix}"


def next_word_targets_are_not_partitioned_by_class(cfg, spec: DatasetSpec) -> str | None:
    name = cfg.partition.name
    if not spec.sequence_targets or name in ("natural", "iid"):
        return None
    return (f"partition={name}: data={cfg.data.name} has next-word targets, not classes, to partition by. "
            "Fix: partition=natural (its users) or partition=iid")


def fsvrg_feature_scaling_needs_a_feature_model(cfg, spec: DatasetSpec | None) -> str | None:
    local, model_spec = cfg.algo.local, MODELS.get(cfg.model.name)
    if not (local.name == "fsvrg" and local.scaling == "features" and model_spec is not None
            and model_spec.parameter_features is None):
        return None
    mapped = sorted(n for n, m in MODELS.items() if m.parameter_features is not None)
    return (f"algo.local.scaling=features with model={cfg.model.name}: FSVRG's Lambda_i and A_r scale each parameter "
            "by its input feature's counts, which only a model that maps parameters to features one to one has "
            f"({', '.join(mapped)}). Fix: model={mapped[0]}, or algo.local.scaling=none")


def model_fits_the_inputs(cfg, spec: DatasetSpec) -> str | None:
    kind, shape, _ = spec.meta(cfg.data)
    why = check_fit(cfg.model.name, kind, shape, cfg.data.name)
    if why:
        return f"{why}. Fix: choose a model that fits (model=...)"
    if kind == "tokens" and "vocab_size" in cfg.model and cfg.model.vocab_size is None:
        return (f"model.vocab_size=None: model={cfg.model.name} embeds data={cfg.data.name}'s token ids, so it needs "
                "the vocabulary's size (it follows data.vocab_size, which this dataset does not set). Fix: "
                "model.vocab_size=<the number of token ids>, e.g. model.vocab_size=80 for LEAF Shakespeare's "
                "characters")
    return None


def afl_needs_the_time_model_and_a_budget(cfg, spec: DatasetSpec | None) -> str | None:
    timing = cfg.timing
    if cfg.algo.schedule.name != "afl" or (timing.name == "simulated" and timing.budget_s is not None):
        return None
    return _problem("algo/schedule", "afl", "needs the time model and a budget (AFL picks tau from the per-step and "
                    "per-round times within R)", "timing=simulated timing.budget_s=<seconds>")


def adacomm_interval_needs_simulated_time(cfg, spec: DatasetSpec | None) -> str | None:
    sched = cfg.algo.schedule
    if sched.name != "adacomm" or sched.interval_s is None or cfg.timing.name == "simulated":
        return None
    return _problem("algo.schedule.interval_s", sched.interval_s, "must be null (every round) or > 0 seconds of "
                    "simulated time (with timing=simulated)", "algo.schedule.interval_s=null, or timing=simulated")


def a_cuda_device_is_visible(cfg, spec: DatasetSpec | None) -> str | None:
    if cfg.hardware.device != "cuda" or torch.cuda.is_available():
        return None
    return "hardware.device='cuda': no CUDA device is visible. Fix: hardware=cpu or hardware=auto"


def reuse_names_a_folder(cfg, spec: DatasetSpec | None) -> str | None:
    if cfg.reuse is None or Path(cfg.reuse).is_dir():
        return None
    return _problem("reuse", cfg.reuse, "must be null or a folder that exists",
                    "name the folder that holds the runs to copy (a sweep's, or fedrun-table's --runs), or reuse=null")


# every requirement that spans groups, in the order their problems are listed
REQUIREMENTS: tuple[Requirement, ...] = (
    Requirement(evaluation_grid_needs_simulated_time, needs_data=False),
    Requirement(augmentation_needs_pixel_images),
    Requirement(classes_per_client_within_the_datasets),
    Requirement(natural_partition_needs_users),
    Requirement(model_output_matches_the_targets),
    Requirement(next_word_targets_are_not_partitioned_by_class),
    Requirement(fsvrg_feature_scaling_needs_a_feature_model, needs_data=False),
    Requirement(model_fits_the_inputs),
    Requirement(afl_needs_the_time_model_and_a_budget, needs_data=False),
    Requirement(adacomm_interval_needs_simulated_time, needs_data=False),
    Requirement(a_cuda_device_is_visible, needs_data=False),
    Requirement(reuse_names_a_folder, needs_data=False),
)
