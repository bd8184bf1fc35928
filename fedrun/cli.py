"""The ``fedrun`` command: Hydra composes the config from ``conf/``, and one run goes to Hydra's run directory."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from .engine.simulation import run_experiment
from .errors import FedrunError

CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")
log = logging.getLogger("fedrun")


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def _main(cfg: DictConfig) -> float | None:
    hc = HydraConfig.get()
    group = Path(hc.sweep.dir).name if hc.mode == RunMode.MULTIRUN else None
    try:
        summary = run_experiment(cfg, hc.runtime.output_dir, sweep_group=group)
    except FedrunError as e:
        print(f"fedrun: {e}", file=sys.stderr)
        sys.exit(2)
    return summary.get("final_test_acc")


def main() -> None:
    _main()


if __name__ == "__main__":
    main()
