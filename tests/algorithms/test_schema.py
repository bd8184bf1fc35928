"""The typed configs of the algorithm parts (fedrun/algorithms/schema.py): one place per default, every range
checked before any work, wrong types and unknown keys refused with the fix."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest
import yaml
from conftest import REPO, make_cfg, run_cli

from fedrun.algorithms.schema import SCHEMAS, parse
from fedrun.config.checks import validate
from fedrun.errors import ConfigError

CONF = REPO / "conf" / "algo"


def _options():
    return [(part, path) for part in SCHEMAS for path in sorted((CONF / part).glob("*.yaml"))]


@pytest.mark.parametrize("part,path", _options(), ids=lambda v: v.stem if isinstance(v, Path) else v)
def test_an_option_file_sets_no_default_its_schema_already_has(part, path, cfg_factory):
    """One place per default: an option's YAML names its schema, the class beside the part's own in the module its
    comment gives, and holds only what differs from it (prox: mu)."""
    text = yaml.safe_load(path.read_text())
    schema = SCHEMAS[part][text["name"]]
    assert schema.__name__ in text["defaults"]
    module = schema.target.rsplit(".", 1)[0]
    assert schema.__module__ == module and f"# {module.replace('.', '/')}.py:" in path.read_text()
    defaults = {f.name: f.default for f in dataclasses.fields(schema)}
    for key, value in text.items():
        if key not in ("defaults", "name"):
            assert key in defaults and value != defaults[key], f"{path.name}: {key} repeats the schema's default"
    composed = cfg_factory(f"algo/{part}={path.stem}").algo[part]
    assert set(composed) == set(defaults), "the composed part has exactly its schema's settings"


def _bad_value(field: dataclasses.Field):
    """A value outside every range a part allows for this field (None where the field has no range to break)."""
    kind = typing.get_args(field.type) or (field.type,)
    text = " ".join(str(k) for k in kind)
    if field.name in ("name", "seed") or "bool" in text:
        return None
    if "str" in text:
        return "bogus"
    return -1


@pytest.mark.parametrize("cls", sorted({c for options in SCHEMAS.values() for c in options.values()},
                                       key=lambda c: c.__name__), ids=lambda c: c.__name__)
def test_every_setting_with_a_range_refuses_a_value_outside_it_naming_key_value_and_fix(cls):
    # the interpolated defaults, as a composed config has them
    resolved = {"local_epochs": 1.0, "seed": 0, "rounds": 10, "sampling": "uniform", "rate": None,
                "clients_per_round": 4, "batch_size": 64}
    valid = {f.name: resolved.get(f.name, f.default) for f in dataclasses.fields(cls)} | {"name": cls.options[0]}
    cls(**valid)  # the defaults are in range
    checked = 0
    for field in dataclasses.fields(cls):
        bad = _bad_value(field)
        if bad is None:
            continue
        values = valid | {field.name: bad}
        if field.name in ("switch_round", "switch_tau"):
            values |= {"switch_round": 5, "switch_tau": 1, field.name: bad}  # switch_tau is read only with a switch
        with pytest.raises(ConfigError) as refused:
            cls(**values)
        (problem,) = refused.value.problems
        assert problem.startswith(f"algo.{cls.part}.{field.name}={bad!r}: must be") and "Fix: algo." in problem
        checked += 1
    ranged = [f for f in dataclasses.fields(cls) if _bad_value(f) is not None]
    assert checked == len(ranged)


@pytest.mark.parametrize("overrides,key", [
    (("algo.local.mu=-1",), "algo.local.mu=-1.0"),  # typed: the schema's float
    (("algo=bherd", "algo.step_selector.alpha=-1"), "algo.step_selector.alpha=-1.0"),
    (("algo=perfedavg", "algo.local.variant=so"), "algo.local.variant='so'"),
    (("algo=dgt", "algo.harmonizer.momentum=1.5"), "algo.harmonizer.momentum=1.5"),
    (("algo/server_opt=adam", "algo.server_opt.beta2=1.0"), "algo.server_opt.beta2=1.0"),
    (("algo=gift", "algo.schedule.factor=1"), "algo.schedule.factor=1"),
    (("algo=mafsvrg", "algo.bank.models=0"), "algo.bank.models=0"),
])
def test_a_composed_run_with_a_bad_part_value_is_refused_before_any_work(cfg_factory, overrides, key):
    with pytest.raises(ConfigError) as refused:
        validate(cfg_factory(*overrides))
    assert any(p.startswith(key + ":") for p in refused.value.problems), refused.value.problems


def test_parse_refuses_an_unknown_setting_with_the_nearest_valid_one():
    with pytest.raises(ConfigError, match=r"algo.step_selector.alhpa: algo/step_selector=herd has no such setting; "
                                          r"did you mean algo.step_selector.alpha\?"):
        parse("step_selector", {"name": "herd", "alhpa": 0.5, "local_epochs": 1.0})
    with pytest.raises(ConfigError, match=r"algo/local='nope' is unknown; choose one of .*Fix: algo/local=sgd"):
        parse("local", {"name": "nope"})


def test_the_built_parts_take_the_schemas_values(cfg_factory):
    from fedrun.algorithms import algo_settings, build_algorithm

    algo = build_algorithm(algo_settings(cfg_factory("algo=bherd", "algo.step_selector.alpha=0.3",
                                                     "fl.local_epochs=2").algo))
    assert (algo.step_selector.alpha, algo.step_selector.epochs) == (0.3, 2.0)
    gift = build_algorithm(algo_settings(cfg_factory("algo=gift", "algo.schedule.tau0=40",
                                                     "algo.schedule.relax=true").algo))
    assert (gift.schedule.tau0, gift.schedule.relax, gift.schedule.beta) == (40, True, 0.9)


@pytest.mark.parametrize("args,line", [
    (("algo.local.mu=-1",), "algo.local.mu=-1.0: must be >= 0"),
    (("algo=perfedavg", "algo.local.variant=so"), "algo.local.variant='so': must be fo (first-order) or hf"),
    (("algo.local.mu=abc",), "algo.local.mu=abc: Value 'abc' of type 'str' could not be converted to Float. "
                             "Fix: algo.local.mu=0.0"),
])
def test_the_cli_refuses_a_bad_part_value_with_exit_status_2_and_one_line(tmp_path, args, line):
    proc = run_cli(*args, "data=digits", "model=logreg", "fl.rounds=1", f"hydra.run.dir={tmp_path}/run", cwd=tmp_path,
                   check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.count("\n  - ") <= 1 and line in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "run" / "summary.json").exists()


def test_a_sweep_with_one_bad_job_is_refused_before_any_job_runs(tmp_path):
    proc = run_cli("-m", "data=digits", "model=logreg", "fl.rounds=1", "algo.local.mu=0.1,-1",
                   f"hydra.sweep.dir={tmp_path}/sweep", cwd=tmp_path, check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "job algo.local.mu=-1: algo.local.mu=-1.0: must be >= 0" in proc.stderr
    assert not (tmp_path / "sweep").exists(), "no job ran"


def test_a_presets_grid_is_checked_job_by_job_with_the_command_line_winning():
    from fedrun.cli import CONF_DIR
    from fedrun.config.overrides import check_sweep_jobs

    assert check_sweep_jobs(["-m", "experiment=dgt_mnist"], CONF_DIR) == []  # dgt and none: both valid
    bad = check_sweep_jobs(["-m", "experiment=dgt_mnist", "algo/harmonizer=dgt", "fl.lr=0.1,-0.1"], CONF_DIR)
    assert len(bad) == 1 and bad[0].startswith("job fl.lr=-0.1: fl.lr=-0.1: must be > 0")


def test_the_schemas_own_their_allowed_values_and_check_without_torch_or_the_engine():
    """Every group's and part's range checks run from their schemas alone: in a fresh process, composing the default
    config and checking every section, group and part against its schema imports neither torch nor a module of the
    engine, the data or the model (their allowed values live in the schemas, which those modules import)."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from fedrun.config.compose import compose_config\n"
            "from fedrun.config.settings import typed\n"
            "for overrides in ([], ['partition=case2', 'participation=earliest', 'data=cifar10', 'algo=mafsvrg']):\n"
            "    settings, problems = typed(compose_config(overrides))\n"
            "    assert problems == [] and settings.algo.bank.name in ('none', 'ma'), problems\n"
            "loaded = sorted(m for m in sys.modules if m == 'torch' or m.startswith(('fedrun.engine', 'fedrun.data',"
            " 'fedrun.model')))\n"
            "print(loaded)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_a_fix_that_is_a_default_reads_it_where_it_is_written():
    """A rule whose fix is the key's default (``DEFAULT``) names the value ``conf/`` gives the key (a section's, the
    chosen option's, else the group's default option's) or the part's dataclass gives it; it resolves for every option
    of every group, so no refusal fails for want of a default."""
    from pathlib import Path

    from omegaconf import OmegaConf

    from fedrun.config.schema import CONF_DIR, DEFAULT, GROUPS, SECTIONS, as_override

    cfg = make_cfg()
    for name, cls in SECTIONS.items():
        node = cls(**OmegaConf.to_container(cfg[name], resolve=True))
        for _, key, _, fix in node.rules():
            if fix is DEFAULT:
                assert node.default(key) == cfg[name][key], f"{name}.{key}"
    for group, cls in GROUPS.items():
        for option in sorted(p.stem for p in (Path(CONF_DIR) / group).glob("*.yaml")):
            node = cls(**OmegaConf.to_container(make_cfg(f"{group}={option}")[group], resolve=True))
            for _, key, _, fix in node.rules():
                if fix is DEFAULT:
                    as_override(node.default(key))  # resolves
    problems = SECTIONS["fl"](**{**OmegaConf.to_container(cfg.fl, resolve=True), "batch_size": 0}).problems()
    assert problems == [f"fl.batch_size=0: must be an integer >= 1. Fix: fl.batch_size={cfg.fl.batch_size}"]
