"""How fedrun's compiled kernels are named and what a failed build says (fedrun/model/native/build.py)."""

import pytest
import torch

from fedrun.model.native import build as native


def test_a_failed_builds_reason_is_the_line_that_says_why():
    ninja_output = ("Error building extension 'x': [1/2] /opt/g++ -MMD -MF k.o.d -fPIC -c k.cpp -o k.o\n"
                    "FAILED: k.o\n/opt/g++ -MMD -MF k.o.d -fPIC -c k.cpp -o k.o\n/bin/sh: 1: /opt/g++: not found\n"
                    "ninja: build stopped: subcommand failed.\n")
    assert native.build_failure(RuntimeError(ninja_output)) == "/bin/sh: 1: /opt/g++: not found"
    compile_error = ninja_output.replace("/bin/sh: 1: /opt/g++: not found",
                                         "In file included from k.cpp:1:\nk.cpp:9:3: error: 'vf' was not declared")
    assert native.build_failure(RuntimeError(compile_error)) == "k.cpp:9:3: error: 'vf' was not declared"
    assert native.build_failure(OSError("ninja is required")) == "ninja is required"


def test_a_build_is_named_by_its_source_its_compiler_and_the_cpu_not_by_its_place(monkeypatch, tmp_path):
    """One build per source text, compiler and CPU: a copy of the source in another checkout shares it (a second
    clone compiles nothing); an edited source, another compiler version or another CPU's instruction sets get a build
    of their own; each kernel its own."""
    source = native.KERNELS / "conv_pool_relu.cpp"
    name = native.build_name(source)
    assert name == native.build_name(source) and name.startswith("fedrun_conv_pool_relu_")
    assert native.build_name(native.KERNELS / "indexed_linear.cpp").startswith("fedrun_indexed_linear_")
    assert set(native.SOURCES) == {p.name for p in native.KERNELS.glob("*.cpp")}  # each kernel says what it is
    copy = tmp_path / "another-clone" / "fedrun" / "kernels" / source.name
    copy.parent.mkdir(parents=True)
    copy.write_bytes(source.read_bytes())
    assert native.build_name(copy) == name
    copy.write_text(copy.read_text() + "\n// edited\n")
    assert native.build_name(copy) != name
    monkeypatch.setattr(native, "compiler", lambda: "c++: g++ (Debian 13.1.0-1) 13.1.0")
    other_compiler = native.build_name(source)
    assert other_compiler != name
    monkeypatch.setattr(native, "_cpu_signature", lambda: "x86_64 flags: avx2 torch 2.14.1")
    assert native.build_name(source) not in (name, other_compiler)


def test_a_built_kernel_loads_whatever_the_path_without_ninja_or_a_compiler(monkeypatch):
    """A kernel built once is imported as it is: with another PATH (an activated venv first, whose ninja differs from
    the system's, or the system's folders alone), nothing is compiled (a build here would fail: torch's loader is
    replaced by one that raises)."""
    import os
    import sys
    from pathlib import Path

    from torch.utils import cpp_extension

    assert native.build_all() == {source: True for source in native.SOURCES}  # built (make setup did it)

    def compile_again(*args, **kwargs):
        raise AssertionError("a kernel was built again")

    for path in (f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", "/usr/bin:/bin"):
        native.forget()
        with monkeypatch.context() as patch:
            patch.setattr(cpp_extension, "load", compile_again)
            patch.setenv("PATH", path)
            for source in native.SOURCES:
                assert native.is_built(source)
                assert native.kernel(source) is not None
    native.forget()


def test_a_build_uses_the_ninja_of_fedruns_dependencies_first():
    """Two ninjas of different versions read each other's build logs as invalid and rebuild: a build puts the pip
    package's first on the PATH, and leaves the PATH as it was after."""
    import os
    import shutil

    import ninja

    before = os.environ["PATH"]
    with native.fedrun_ninja():
        assert os.path.dirname(shutil.which("ninja")) == str(ninja.BIN_DIR)
    assert os.environ["PATH"] == before


def test_a_run_builds_its_missing_kernels_before_its_first_round_and_says_how_long(monkeypatch, tmp_path, caplog):
    """On a CPU, a run whose kernels are not built yet builds them before round 1, at once in one process, after a
    warning with the time it takes (the longest an earlier build here took, else the typical time); built ones, a
    GPU or kernels hardware.native leaves off build nothing."""
    import logging

    from omegaconf import OmegaConf

    calls = []
    monkeypatch.setattr(native, "build_in_a_fresh_process", calls.append)
    hardware = OmegaConf.create({"device": "cpu", "native": True})
    native.prepare(hardware)
    assert calls == []  # built here already
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="fedrun"):
        native.prepare(hardware)
    assert calls == [list(native.SOURCES)]
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "before the first round" in said and f"{max(native.TYPICAL_BUILD_S.values()):.0f} s" in said
    calls.clear()
    monkeypatch.setattr(native, "has_avx512", lambda: False)  # null: no convolution kernels on an AVX2 CPU
    native.prepare(OmegaConf.create({"device": "cpu", "native": None}))
    assert calls == [["indexed_linear.cpp"]]
    calls.clear()
    native.prepare(OmegaConf.create({"device": "cpu", "native": False}))
    native.prepare(OmegaConf.create({"device": "cuda", "native": True}))
    assert calls == []
    record = tmp_path / native.library("indexed_linear.cpp").parent.relative_to(tmp_path).parent / \
        "fedrun_indexed_linear_000000000000" / native.BUILD_TIME_FILE
    record.parent.mkdir(parents=True)
    record.write_text("130.0\n")  # an earlier build of another source text took this long here
    assert native.expected_build_s("indexed_linear.cpp") == 130.0
    assert native.in_words(130.0) == "2.2 minutes"


def test_building_all_kernels_reports_each_one_and_a_missing_compiler(without_a_compiler):
    """``python -m fedrun.model.native.build`` (``make setup``) builds every kernel at once and says which are there:
    all of them here, none where the compiler is missing (each build fails as without g++)."""
    assert native.build_all() == {source: True for source in native.SOURCES}
    with without_a_compiler():
        assert native.build_all() == {source: False for source in native.SOURCES}


def test_the_fused_convolution_is_on_by_default_only_where_the_cpu_has_avx512(monkeypatch, cfg_factory):
    """hardware.native=null (the default) turns the convolution kernels on where the CPU has AVX-512 (their vector
    width; on an AVX2 CPU they ran slower than oneDNN's layers) and the rows-in-place kernel everywhere; true turns
    every kernel on, false none; a run on an AVX2 CPU builds no convolution kernel."""
    from omegaconf import OmegaConf

    from fedrun.engine.run.simulation import Simulation

    cnn_on_digits = ["data=digits", "model=cnn3", "fl.rounds=1", "hardware.device=cpu"]
    for flags, avx512 in (("fpu sse avx2 fma", False), ("fpu sse avx2 avx512f avx512bw", True)):
        monkeypatch.setattr(native, "_cpu_signature", lambda flags=flags: f"x86_64 flags : {flags} torch x")
        assert native.has_avx512() is avx512
        assert native.kernels_on(None) == {native.FUSED_CONV: avx512, native.INDEXED_ROWS: True}
        assert all(native.kernels_on(True).values()) and not any(native.kernels_on(False).values())
        # CPU code: never for a GPU run, whatever hardware.native says (no build delays its first round)
        assert not any(native.kernels_on(True, "float32", "cuda").values())
        assert not any(native.kernels_on(None, "float32", torch.device("cuda", 0)).values())
        assert Simulation.from_config(cfg_factory(*cnn_on_digits)).model.fused_conv is avx512
        assert Simulation.from_config(cfg_factory(*cnn_on_digits, "hardware.native=true")).model.fused_conv
        assert not Simulation.from_config(cfg_factory(*cnn_on_digits, "hardware.native=false")).model.fused_conv
        hardware = OmegaConf.create({"device": "cpu", "native": None})
        assert ("conv_pool_relu.cpp" in native.wanted(hardware)) is avx512
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")  # torch told to use AVX2 at most: fedrun's defaults follow
    assert not native.has_avx512() and native.kernels_on(None)[native.FUSED_CONV] is False


NATIVE_FAMILIES = {  # every family, on a model whose steps a kernel takes (svm: rows in place; cnn3: the fused layers)
    "fedavg svm": ["model=svm"], "fedprox": ["model=svm", "algo=fedprox"], "scaffold": ["model=svm", "algo=scaffold"],
    "bherd": ["model=svm", "algo=bherd"], "fedgh": ["model=svm", "algo=fedgh"], "dgt": ["model=svm", "algo=dgt"],
    "gift": ["model=svm", "algo=gift", "algo.schedule.tau0=4"], "fednova": ["model=svm", "algo=fednova"],
    "mafsvrg bank": ["model=logreg", "algo=mafsvrg", "algo.bank.threshold=1", "algo.bank.models=2"],
    "fedavg cnn3": ["model=cnn3"],
}


@pytest.mark.parametrize("family", list(NATIVE_FAMILIES))
def test_without_native_kernels_every_family_runs_and_equals_the_native_path(cfg_factory, monkeypatch, family):
    """hardware.native=false: no kernel is built, loaded or called (the loader is made to fail), and the rounds equal
    those with every kernel on (hardware.native=true) to float32 rounding."""
    from fedrun.engine.run.simulation import Simulation

    def run(*more):
        sim = Simulation.from_config(cfg_factory("data=digits", "fl.num_clients=6", "fl.clients_per_round=4",
                                                 "fl.batch_size=8",
                                                 "hardware.device=cpu", *NATIVE_FAMILIES[family], *more))
        for rnd in (1, 2):
            sim.run_round(rnd)
        return sim.state.params.clone()

    with_kernels = run("hardware.native=true")
    with monkeypatch.context() as patch:
        def refused(source):
            raise AssertionError(f"hardware.native=false loaded {source}")
        patch.setattr(native, "kernel", refused)
        patch.setattr(native, "_load", refused)
        without = run("hardware.native=false")
    torch.testing.assert_close(without, with_kernels, rtol=1e-4, atol=1e-5)


def test_the_old_kernel_switches_name_their_replacement(tmp_path):
    """hardware.fused_conv and hardware.indexed_rows became hardware.native: typing an old key says so."""
    from tests.conftest import run_cli

    proc = run_cli("hardware.fused_conv=false", "hardware.indexed_rows=true", cwd=tmp_path, check=False)
    assert proc.returncode != 0
    for key in ("hardware.fused_conv", "hardware.indexed_rows"):
        assert f"{key}: this setting is now part of hardware.native" in proc.stderr


def test_make_setup_builds_only_the_kernels_a_run_uses_on_this_cpu_and_says_why_not_the_others(monkeypatch, capsys):
    """On an AVX2 CPU the default hardware.native leaves the convolution kernels off: ``make setup`` (this module's
    main without arguments) does not compile them, and says why; with AVX-512 it builds both; named kernels are
    built as named."""
    asked = []
    monkeypatch.setattr(native, "build_all", lambda sources: asked.append(list(sources)) or dict.fromkeys(sources,
                                                                                                          True))
    monkeypatch.setattr(native, "_cpu_signature", lambda: "x86_64 flags : fpu sse avx2 fma torch x")
    native.main([])
    said = capsys.readouterr().out
    assert asked == [[native.INDEXED_ROWS]] and f"fedrun kernel {native.INDEXED_ROWS}: built" in said
    assert f"fedrun kernel {native.FUSED_CONV}: not built: this CPU has no AVX-512" in said
    assert "hardware.native=true builds it on first use" in said
    monkeypatch.setattr(native, "_cpu_signature", lambda: "x86_64 flags : fpu avx2 avx512f avx512bw torch x")
    native.main([])
    assert asked[-1] == list(native.SOURCES) and "not built" not in capsys.readouterr().out
    native.main([native.FUSED_CONV])
    assert asked[-1] == [native.FUSED_CONV]


def test_processes_asking_at_once_for_a_kernel_not_built_yet_build_it_once(monkeypatch, tmp_path):
    """Three processes (two checkouts' set-up and a run, say) ask for a kernel that is not built: one builds it while
    the others wait for its lock, then import what it built (torch's compiler replaced by one that takes a second
    and counts its builds in a file)."""
    import multiprocessing

    from torch.utils import cpp_extension

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "extensions"))
    builds = tmp_path / "builds"

    def slow_build(name, sources, **kwargs):
        import time

        with builds.open("a") as f:
            f.write(f"{name}\n")
        time.sleep(1.0)
        native.library(native.INDEXED_ROWS).write_text("built")
        return "a module"

    monkeypatch.setattr(cpp_extension, "load", slow_build)
    monkeypatch.setattr(native, "_import", lambda name, lib: "a module")
    native.forget()
    try:
        context = multiprocessing.get_context("fork")  # the patches above go with each child
        children = [context.Process(target=native.kernel, args=(native.INDEXED_ROWS,)) for _ in range(3)]
        for child in children:
            child.start()
        for child in children:
            child.join(60)
        assert [child.exitcode for child in children] == [0, 0, 0]
        assert len(builds.read_text().splitlines()) == 1, "built more than once"
    finally:
        native.forget()
