"""Checks of a composed config, run before any data is loaded or any model is built.

Every problem names the key, the bad value, the allowed range and a fix; all problems are reported at once.
"""

from __future__ import annotations

import numbers

import torch

from fedrun.algorithms import check_parts
from fedrun.data import DATASETS
from fedrun.errors import ConfigError
from fedrun.model.zoo import MODELS, check_fit
from fedrun.config.schema import section_problems


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def validate(cfg) -> None:
    problems: list[str] = []

    def need(ok: bool, key: str, value, rule: str, fix: str) -> None:
        if not ok:
            if isinstance(value, str) and rule.startswith(("must be >", "must be in", "must be null or >")):
                rule = rule.replace("must be ", "must be a number ", 1)  # fl.lr=fast: not a number at all
            problems.append(f"{key}={value!r}: {rule}. Fix: {fix}")

    problems += section_problems(cfg)  # the run's sections and the typed groups: their schemas' ranges
    every_s = cfg.eval.every_s
    need(every_s is None or (every_s > 0 and cfg.timing.name == "simulated"),
         "eval.every_s", every_s, "must be null (evaluate every eval.every rounds) or > 0 seconds of simulated time "
         "(with timing=simulated)", "eval.every_s=null, or timing=simulated eval.every_s=25")

    # data, partition and model: from the dataset's static description, nothing is loaded
    data_name = cfg.data.name
    spec = DATASETS.get(data_name)
    if spec is None:
        problems.append(f"data={data_name!r}: unknown dataset. Fix: choose one of {sorted(DATASETS)}")
    p = cfg.partition  # its options' own ranges are their schemas' (fedrun/config/schema.py); here: against the data
    augment = cfg.data.augment  # its own range is its schema's (fedrun/config/schema.py)
    if augment != "none" and spec is not None:
        need(spec.pixel_images, "data.augment", augment, f"needs images made of uint8 pixels, which "
             f"data={data_name} is not (those are {sorted(n for n, s in DATASETS.items() if s.pixel_images)})",
             "data.augment=none")
    if spec is not None:
        kind, shape, num_classes = spec.meta(cfg.data)
        if p.name == "classes":
            k = p.classes_per_client
            ks = [k] if _is_int(k) else list(k) if hasattr(k, "__len__") else [k]
            need(len(ks) in (1, 2) and all(_is_int(v) and 1 <= v <= num_classes for v in ks) and ks == sorted(ks),
                 "partition.classes_per_client", k, f"must be an integer or [lo, hi] within [1, {num_classes}]",
                 "partition.classes_per_client=2")
        if p.name == "natural" and not spec.has_users:
            problems.append(f"partition=natural: data={data_name} has no users. Fix: use partition=dirichlet, or a "
                            f"dataset with users ({sorted(n for n, s in DATASETS.items() if s.has_users)})")
        model_spec = MODELS.get(cfg.model.name)
        if model_spec is not None and model_spec.sequence_output != spec.sequence_targets:
            model_says = "predicts a token at every step" if model_spec.sequence_output else "predicts one class"
            data_says = "has a target token at every step" if spec.sequence_targets else "has one class per sample"
            fix = "model=lstm_lm" if spec.sequence_targets else "a classifier, e.g. model=lstm"
            problems.append(f"model={cfg.model.name} {model_says} but data={data_name} {data_says}. Fix: {fix}")
        if spec.sequence_targets and p.name not in ("natural", "iid"):
            problems.append(f"partition={p.name}: data={data_name} has next-word targets, not classes, to partition "
                            "by. Fix: partition=natural (its users) or partition=iid")
        local = cfg.algo.local
        if (local.name == "fsvrg" and local.scaling == "features" and model_spec is not None
                and model_spec.parameter_features is None):
            mapped = sorted(n for n, m in MODELS.items() if m.parameter_features is not None)
            problems.append(f"algo.local.scaling=features with model={cfg.model.name}: FSVRG's Lambda_i and A_r scale "
                            "each parameter by its input feature's counts, which only a model that maps parameters to "
                            f"features one to one has ({', '.join(mapped)}). Fix: model={mapped[0]}, or "
                            "algo.local.scaling=none")
        why = check_fit(cfg.model.name, kind, shape, data_name)
        if why:
            problems.append(f"{why}. Fix: choose a model that fits (model=...)")
        elif kind == "tokens" and "vocab_size" in cfg.model and cfg.model.vocab_size is None:
            problems.append(f"model.vocab_size=None: model={cfg.model.name} embeds data={data_name}'s token ids, so it "
                            "needs the vocabulary's size (it follows data.vocab_size, which this dataset does not "
                            "set). Fix: model.vocab_size=<the number of token ids>, e.g. model.vocab_size=80 for "
                            "LEAF Shakespeare's characters")

    problems += check_parts(cfg.algo)  # every part's ranges (its schema) and whether the parts fit together
    timing = cfg.timing  # (participation, timing, hardware and logger have their ranges in fedrun/config/schema.py)
    sched = cfg.algo.schedule
    simulated = timing.name == "simulated"
    # each part's own ranges are its schema's (fedrun/algorithms/<part>/schema.py, via check_parts); here: what a
    # schedule needs from other groups
    if sched.name == "afl":
        need(simulated and timing.budget_s is not None, "algo/schedule", "afl",
             "needs the time model and a budget (AFL picks tau from the per-step and per-round times within R)",
             "timing=simulated timing.budget_s=<seconds>")
    if sched.name == "adacomm":
        need(sched.interval_s is None or simulated, "algo.schedule.interval_s", sched.interval_s,
             "must be null (every round) or > 0 seconds of simulated time (with timing=simulated)",
             "algo.schedule.interval_s=null, or timing=simulated")
    if cfg.hardware.device == "cuda" and not torch.cuda.is_available():
        problems.append("hardware.device='cuda': no CUDA device is visible. Fix: hardware=cpu or hardware=auto")
    if problems:
        raise ConfigError(problems)
