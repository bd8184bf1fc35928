"""Start-up notes: settings that are valid, and faithful to a paper, but likely to surprise someone who did not read
that paper first. Each is one line at the start of a run, and says where to read on.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import OmegaConf

from fedrun.config.compose import CONF_DIR

if TYPE_CHECKING:
    from fedrun.config.settings import RunSettings

SCALING_SELECTORS = ("herd", "random")  # BHerd's eq. 6 and its control: the selected steps applied times E / alpha


@cache
def preset_steps(conf_dir: str = CONF_DIR) -> dict[str, float]:
    """The largest step fedrun's default config and its experiment presets train each model with (the presets that
    name their model): ``fl.lr``, or for BHerd's own presets (``bherd_*``) the step lr x E / alpha they run BHerd
    with at the paper's alpha."""
    from fedrun.algorithms.step_selector.herd import HerdConfig

    root = Path(conf_dir)
    steps: dict[str, float] = {}
    for path, key in [(root / "config.yaml", "model"), *((p, "override /model") for p in
                                                        sorted((root / "experiment").glob("*.yaml")))]:
        node = OmegaConf.to_container(OmegaConf.load(path), resolve=False) or {}
        named = [d[key] for d in node.get("defaults", []) if isinstance(d, dict) and key in d]
        fl = node.get("fl") or {}
        if not named or not isinstance(fl.get("lr"), (int, float)):
            continue
        scale = float(fl.get("local_epochs", 1.0)) / HerdConfig.alpha if path.stem.startswith("bherd_") else 1.0
        steps[named[0]] = max(steps.get(named[0], 0.0), float(fl["lr"]) * scale)
    return steps


def selected_step_note(run: RunSettings) -> str | None:
    """BHerd (Luo et al., eq. 6) applies each client's selected steps times E / alpha, so its effective step is
    lr x E / alpha: at alpha 0.5, twice the lr. A line when that step is above the largest step fedrun's presets
    train this model with (:func:`preset_steps`; past it a model may no longer be stable: LeNet-5 at the default
    experiment's lr), pointing to the paper's setting; None otherwise."""
    selector = run.algo.step_selector
    if selector.name not in SCALING_SELECTORS:
        return None
    scale = float(selector.local_epochs) / float(selector.alpha)
    step, known = float(run.fl.lr) * scale, preset_steps().get(run.model.name)
    if known is None or step <= known:
        return None
    return (f"note: algo/step_selector={selector.name} applies the selected steps times E/alpha (BHerd eq. 6): "
            f"lr x E/alpha = {run.fl.lr:g} x {float(selector.local_epochs):g}/{float(selector.alpha):g} = {step:g}, "
            f"{step / known:.3g}x the largest step fedrun's presets train {run.model.name} with ({known:g}), where it "
            f"may not converge. BHerd's paper setting: experiment=bherd_svm_mnist (or bherd_cnn_cifar10, "
            f"bherd_rnn_imdb); what to expect: results/bherd/README.md")
