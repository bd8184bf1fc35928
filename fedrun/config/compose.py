"""The config a ``fedrun`` command runs, composed in-process, whole or one group's option of it: for scripts, library
use and tests that build one part (a dataset, a partition, a model) without a run. Every default is written once, in
``conf/``; the readers (fedrun/data, fedrun/data/partition.py, fedrun/model/zoo.py, the engine) read keys, never a
fallback of their own, so a part is built from a composed config.
"""

from __future__ import annotations

from functools import lru_cache

from omegaconf import DictConfig, OmegaConf

from fedrun.shipped import folder

CONF_DIR = str(folder("conf"))  # the repository's conf/, or an installed wheel's fedrun/conf/


def compose_config(overrides: list[str], hydra: bool = False) -> DictConfig:
    """The config ``fedrun <overrides>`` would run (without a progress bar); with ``hydra``, Hydra's own node too
    (a preset's sweep grid is ``hydra.sweeper.params``), else a job is one point. A renamed key is read in its old
    spelling, with a FutureWarning."""
    import warnings

    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from fedrun import algorithms  # noqa: F401  (they register the schemas conf/ extends)
    from fedrun.config import schema  # noqa: F401
    from fedrun.config.renames import renamed_overrides

    overrides, notes = renamed_overrides(overrides)
    for note in notes:
        warnings.warn(note, FutureWarning, stacklevel=2)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            return compose("config", overrides=["progress=false", *overrides], return_hydra_config=hydra)
    finally:
        GlobalHydra.instance().clear()


@lru_cache(maxsize=None)
def _option(group: str, name: str) -> dict:
    return OmegaConf.to_container(compose_config([f"{group}={name}"])[group], resolve=True)


def option(group: str, name: str, **values) -> DictConfig:
    """The ``group`` option ``name`` as ``fedrun group=name`` composes it (its YAML's values, on its schema: every
    key a run's reader sees), with ``values`` set on top, typed and checked by the schema (``option("data", "imdb",
    max_len=8)``). Values that other groups would supply through interpolation (a recurrent model's
    ``vocab_size``) are those of the default config's groups; set them in ``values``."""
    from fedrun.config.schema import GROUPS

    return OmegaConf.merge(OmegaConf.structured(GROUPS[group]), _option(group, name), values)
