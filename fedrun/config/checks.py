"""Checks of a composed config, run once, before any data is loaded or any model is built.

A value's own range is its schema's (the run's sections and the groups: ``fedrun/config/schema.py``; each algorithm
part: its config beside its class, ``fedrun/algorithms/<part>/<module>.py``). What spans groups (a model against the
dataset's inputs, a schedule against the time model) is declared here, in :data:`REQUIREMENTS`: one function per
requirement, each given the typed settings and the dataset's static description, returning its problem or None.
Every problem names the key, the bad value, the allowed range and a fix; all problems are reported at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from fedrun.algorithms import check_parts
from fedrun.algorithms.part_config import is_int
from fedrun.config.settings import Kept, RunSettings, key_of, resolved, typed
from fedrun.data import DATASETS
from fedrun.data.base import DatasetSpec
from fedrun.errors import ConfigError
from fedrun.model.zoo import MODELS, check_fit


def validate(cfg) -> RunSettings:
    """The run's typed settings (:class:`~fedrun.config.settings.RunSettings`), or every problem of ``cfg`` at once
    as one ConfigError. Each rule runs once per config in a process: a config checked before (the command line's
    check, then the run) is not checked again."""
    values = resolved(cfg)
    key = key_of(values)
    if key in _VALID:
        return _VALID[key]
    run, found = typed(values)
    problems = list(found)  # the sections', the groups' and each part's ranges
    if run is None:
        raise ConfigError(problems)
    if not found:
        problems += check_parts(run.algo)  # whether the parts fit together
    spec = DATASETS.get(run.data.name)
    if spec is None:
        problems.append(f"data={run.data.name!r}: unknown dataset. Fix: choose one of {sorted(DATASETS)}")
    for requirement in REQUIREMENTS:
        if spec is not None or not requirement.needs_data:
            problem = requirement.check(run, spec)
            if problem:
                problems.append(problem)
    if problems:
        raise ConfigError(problems)
    return _VALID.keep(key, run)


_VALID = Kept()


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
    if kind == "tokens" and cfg.model.vocab_size is None:
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


def devices_run_on_the_simulated_clock(cfg, spec: DatasetSpec | None) -> str | None:
    """Unequal devices and availability are times on the simulated clock; availability and over-selection decide who
    reports before training, so they need the step time given, not measured after."""
    timing, part = cfg.timing, cfg.participation
    if cfg.devices.name != "same" and timing.name != "simulated":
        return _problem("devices", cfg.devices.name, "gives each client a speed on the simulated clock",
                        "timing=simulated (with timing.step_time_s, the base device's seconds per step)")
    needs_step = [f"availability={cfg.availability.name}"] if cfg.availability.name != "always" else []
    if cfg.algo.asynchrony.name != "none":
        needs_step.append(f"algo/asynchrony={cfg.algo.asynchrony.name}")
    if part.name != "earliest" and part.over_selection:
        needs_step.append(f"participation.over_selection={part.over_selection}")
    if needs_step and (timing.name != "simulated" or timing.step_time_s is None):
        return (f"{' and '.join(needs_step)}: decides who reports by each client's simulated time before the round "
                "trains, so the step time must be given, not measured. Fix: timing=simulated "
                "timing.step_time_s=<seconds per local step>")
    return None


def participation_options_fit_its_sampling(cfg, spec: DatasetSpec | None) -> str | None:
    part = cfg.participation
    if part.name == "poisson" and part.over_selection:
        return _problem("participation.over_selection", part.over_selection, "must be 0 with participation=poisson "
                        "(over-selection keeps the first K of ceil((1 + beta) K): Poisson sampling has no K)",
                        "participation=uniform, or participation.over_selection=0")
    if part.name == "earliest" and cfg.availability.name != "always":
        return _problem("availability", cfg.availability.name, "cannot combine with participation=earliest (GIFT's "
                        "earliest reporters are drawn from every client by report delays)",
                        "participation=uniform, or availability=always")
    return None


def an_asynchronous_server_samples_uniformly(cfg, spec: DatasetSpec | None) -> str | None:
    part = cfg.participation
    if cfg.algo.asynchrony.name == "none" or (part.name == "uniform" and not part.dropout and not part.over_selection):
        return None
    return _problem("participation", part.name, f"must be uniform, with no dropout or over-selection, under "
                    f"algo/asynchrony={cfg.algo.asynchrony.name} (a client starts whenever one arrives, drawn among "
                    "the online idle clients; dropouts are not yet defined for it)",
                    "participation=uniform participation.dropout=0 participation.over_selection=0")


def the_time_model_of_a_schedule_has_one_device(cfg, spec: DatasetSpec | None) -> str | None:
    if cfg.algo.schedule.name != "afl" or cfg.devices.name == "same":
        return None
    return _problem("devices", cfg.devices.name, "cannot combine with algo/schedule=afl (AFL's time model has one "
                    "step time for every client)", "devices=same")


def a_bank_needs_every_sampled_client(cfg, spec: DatasetSpec | None) -> str | None:
    part = cfg.participation
    partial = part.name == "poisson" or cfg.availability.name != "always" or (
        part.name != "earliest" and (part.dropout or part.over_selection))
    if cfg.algo.bank.name == "none" or not partial:
        return None
    return _problem("algo/bank", cfg.algo.bank.name, "needs a fixed cohort that all report (its rounds group the "
                    "sampled clients' models)", "participation=uniform with no dropout or over-selection, "
                    "availability=always")


def privacy_is_accounted_for_the_sampling(cfg, spec: DatasetSpec | None) -> str | None:
    """DP-FedAvg's accountant bounds a uniformly random cohort: Poisson (RDP or PLD) or fixed-size without
    replacement (RDP); GIFT's earliest reporters are chosen by the clients' delays, not by a sampler it accounts."""
    privacy = cfg.algo.privacy
    if privacy.name == "none":
        return None
    if cfg.participation.name == "earliest":
        return _problem("participation", "earliest", f"cannot be accounted under algo/privacy={privacy.name} (the "
                        "server keeps the first reporters, which the accountant's sampling does not describe)",
                        "participation=poisson participation.rate=<q>, or participation=uniform")
    if cfg.availability.name != "always" or cfg.participation.over_selection:
        return _problem("algo/privacy", privacy.name, "is accounted for uniformly random cohorts; availability and "
                        "over-selection choose clients by their devices, which the accountant does not describe",
                        "availability=always and participation.over_selection=0 (dropouts are allowed: they are "
                        "independent of the data, and the accounting at the sampling rate bounds them)")
    if privacy.accountant == "pld" and cfg.participation.name != "poisson":
        return _problem("algo.privacy.accountant", "pld", f"has no bound for participation={cfg.participation.name} "
                        "(a fixed-size cohort drawn without replacement; dp-accounting's PLD covers Poisson sampling)",
                        "participation=poisson participation.rate=<q>, or algo.privacy.accountant=rdp")
    return None


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
    Requirement(devices_run_on_the_simulated_clock, needs_data=False),
    Requirement(participation_options_fit_its_sampling, needs_data=False),
    Requirement(an_asynchronous_server_samples_uniformly, needs_data=False),
    Requirement(the_time_model_of_a_schedule_has_one_device, needs_data=False),
    Requirement(a_bank_needs_every_sampled_client, needs_data=False),
    Requirement(privacy_is_accounted_for_the_sampling, needs_data=False),
    Requirement(a_cuda_device_is_visible, needs_data=False),
    Requirement(reuse_names_a_folder, needs_data=False),
)
