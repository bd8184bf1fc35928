"""Live progress and streaming loggers. The run directory's files are written by :mod:`fedrun.rundir.files`."""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import OmegaConf
from tqdm.auto import tqdm

from fedrun.algorithms import method_name

log = logging.getLogger("fedrun")


class ProgressBar:
    def __init__(self, total: int, enabled: bool, desc: str, initial: int = 0):
        self.bar = tqdm(total=total, desc=desc, unit="round", disable=not enabled, dynamic_ncols=True,
                        initial=initial)

    def update(self, row: dict | None) -> None:
        if row is not None:
            self.bar.set_postfix(acc=f"{row['test_acc']:.4f}", loss=f"{row['train_loss']:.4f}", refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


class WandbLogger:
    """Streams every evaluated round and the config to Weights & Biases. If W&B cannot start, the run goes on with
    its local files and says so once."""

    def __init__(self, cfg, run_dir: Path, sweep_group: str | None):
        self.run = None
        wcfg = cfg.logger
        try:
            import wandb

            kwargs = dict(project=wcfg.project, entity=wcfg.entity, group=wcfg.group or sweep_group,
                          tags=list(wcfg.tags or []), config=OmegaConf.to_container(cfg, resolve=True),
                          dir=str(run_dir), name=f"{method_name(cfg.algo)}-{cfg.data.name}-s{cfg.seed}",
                          reinit="create_new")  # a new run per fedrun run, also several in one process (scripts)
            if wcfg.mode:
                kwargs["mode"] = wcfg.mode
            self.run = wandb.init(**kwargs)
        except Exception as e:  # noqa: BLE001 - any W&B failure must leave the run going
            log.warning("W&B could not start (%s: %s); the run continues with its local files only",
                        type(e).__name__, str(e).splitlines()[0] if str(e) else "")
            self.run = None

    def log(self, row: dict) -> None:
        if self.run is None:
            return
        try:
            self.run.log({k: v for k, v in row.items() if k != "round"}, step=int(row["round"]))
        except Exception as e:  # noqa: BLE001
            log.warning("W&B logging failed (%s); continuing with local files only", e)
            self.run = None

    def finish(self, summary: dict) -> None:
        if self.run is None:
            return
        try:
            for k, v in summary.items():
                if isinstance(v, (int, float, str)) or v is None:
                    self.run.summary[k] = v
            self.run.finish(exit_code=0 if summary.get("status") == "finished" else 1)
        except Exception as e:  # noqa: BLE001
            log.warning("W&B finish failed (%s)", e)

