"""fedrun's compiled CPU kernels (``fedrun/model/native/kernels/*.cpp``): built once per source text, compiler, CPU and
torch.

Each kernel is built with the C++ compiler that PyTorch's extensions use (``$CXX``, else ``c++``) for this CPU's
instruction set, by the ``ninja`` of fedrun's own dependencies (the pip package, whatever ninja the PATH finds first:
two ninjas of other versions read each other's build logs as invalid and rebuild), into torch's extension cache
(``$TORCH_EXTENSIONS_DIR``, default ``~/.cache/torch_extensions``). A build is named by what its machine code depends
on (:func:`build_name`), not by the checkout it came from, and a library already built under that name is imported
as it is, without asking ninja: a second clone, a changed PATH or an activated venv reuse it. ``make setup`` (``python
-m fedrun.model.native.build``) builds every kernel ahead; a run on the CPU builds the missing ones before its first
round (:func:`prepare`), saying so and how long it takes. Where one cannot be built, fedrun says why once and its caller
computes the same values with torch's operators instead (``fedrun/model/native/fused_conv.py``,
``fedrun/model/native/indexed_rows.py``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import logging
import os
import platform
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import torch
from filelock import FileLock

log = logging.getLogger("fedrun")
KERNELS = Path(__file__).with_name("kernels")
FUSED_CONV, INDEXED_ROWS = "conv_pool_relu.cpp", "indexed_linear.cpp"
SOURCES = {  # a kernel's source file: what it computes and what runs without it
    FUSED_CONV: ("fused convolution kernels", "the convolutions, poolings and ReLUs run one by one"),
    INDEXED_ROWS: ("kernel for a dense model's first layer on a minibatch's rows in place",
                   "the minibatch is gathered and multiplied by torch"),
}
CFLAGS, LDFLAGS = ["-O3", "-march=native", "-fopenmp"], ["-fopenmp"]
# Seconds a kernel's first build takes when no earlier build on this machine says better: measured with both kernels
# compiling at once on 2 cores (the time ``make setup`` spends); each build records its own (BUILD_TIME_FILE).
TYPICAL_BUILD_S = {"conv_pool_relu.cpp": 80.0, "indexed_linear.cpp": 45.0}
BUILD_TIME_FILE = "fedrun_build_seconds"
BUILD_LOCK = "fedrun.lock"  # fedrun's own, beside torch's ``lock`` (torch takes that one while it compiles)

_FIRST_USE = threading.Lock()  # the loop executor's threads may all ask for a kernel at once: one builds it


def kernel(source: str):
    """The compiled kernel of ``fedrun/model/native/kernels/<source>``, built on first use for this CPU (cached across
    runs and checkouts), or None where it cannot be built (logged once)."""
    with _FIRST_USE:
        return _load(source)


def forget() -> None:
    """Forget the kernels loaded or refused so far: the next use tries again (after a compiler is installed)."""
    _load.cache_clear()
    compiler.cache_clear()
    _cpu_signature.cache_clear()


def _extension_tools():
    quiet = logging.getLogger("torch.utils.cpp_extension")  # its import warns that no CUDA runtime is found
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        from torch.utils import cpp_extension
    finally:
        quiet.setLevel(level)
    return cpp_extension


def library(source: str) -> Path:
    """Where the kernel of ``source`` is (or will be) built: torch's extension cache, under :func:`build_name`."""
    name = build_name(KERNELS / source)
    cpp_extension = _extension_tools()
    return Path(cpp_extension._get_build_directory(name, verbose=False)) / f"{name}{cpp_extension.LIB_EXT}"


def is_built(source: str) -> bool:
    """Whether the kernel of ``source`` is built for this source text, compiler, CPU and torch (nothing to compile)."""
    return library(source).exists()


@functools.cache
def _load(source: str):
    """The kernel, imported where it is built, else built first: the look and the build under one lock per build,
    so that processes asking at once (two checkouts' ``make setup``, a sweep's jobs) build it once and the others
    wait, then import it."""
    lib = library(source)
    with FileLock(lib.parent / BUILD_LOCK):
        return _import_or_build(source, lib)


def _import_or_build(source: str, lib: Path):
    what, instead = SOURCES[source]
    name = lib.stem
    if lib.exists():
        try:
            with FileLock(lib.parent / "lock"):  # torch's build holds it: a library being linked is waited for
                return _import(name, lib)
        except ImportError as e:  # a damaged file: build it again below
            log.warning("fedrun's %s in %s cannot be loaded (%s); building it again", what, lib, e)
            lib.unlink(missing_ok=True)
    cpp_extension = _extension_tools()
    quiet = logging.getLogger("torch.utils.cpp_extension")
    level = quiet.level
    log.warning("building fedrun's %s for this CPU in %s: once per source, compiler and CPU, about %s here "
                "(`make setup` builds every kernel ahead; hardware.native=false runs without them)", what, lib.parent,
                in_words(expected_build_s(source)))
    started = time.perf_counter()
    try:
        quiet.setLevel(logging.ERROR)  # torch's own notes on the compiler: the failure below says what matters
        with warnings.catch_warnings(), fedrun_ninja():
            warnings.simplefilter("ignore")  # e.g. about CUDA: the kernels are for the CPU
            module = cpp_extension.load(name, [str(KERNELS / source)], extra_cflags=CFLAGS, extra_ldflags=LDFLAGS,
                                        verbose=False)
    except Exception as e:  # no compiler, no ninja, an unsupported platform: torch's operators, as before
        log.warning("fedrun's %s could not be built (%s); %s instead (the same results to float rounding, slower). "
                    "It needs ninja and a C++ compiler (g++; $CXX if set); hardware.native=false silences this.",
                    what, build_failure(e), instead)
        return None
    finally:
        quiet.setLevel(level)
    took = time.perf_counter() - started
    record = lib.parent / BUILD_TIME_FILE
    with contextlib.suppress(OSError):
        if not record.exists():  # the first build's time (not a wait on another process's build, nor a relink)
            record.write_text(f"{took:.1f}\n")
    log.warning("built fedrun's %s in %.0f s", what, took)
    return module


def _import(name: str, lib: Path):
    """The Python module of an extension library already built (what torch's loader does once ninja is done)."""
    spec = importlib.util.spec_from_file_location(name, lib)
    if spec is None or spec.loader is None:
        raise ImportError(f"not a Python extension: {lib}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def fedrun_ninja():
    """The PATH with the pip package's ninja (a dependency of fedrun, so one version on every machine) before any
    other, for the duration of a build; the PATH as it was when there is no such package."""
    try:
        import ninja

        bin_dir = str(ninja.BIN_DIR)
    except (ImportError, AttributeError):
        yield
        return
    before = os.environ.get("PATH", "")
    os.environ["PATH"] = os.pathsep.join([bin_dir, before])
    try:
        yield
    finally:
        os.environ["PATH"] = before


def expected_build_s(source: str) -> float:
    """How long a build of ``source`` takes here: the longest an earlier build of it on this machine took (of any
    source text; each build records its time), else TYPICAL_BUILD_S."""
    stem = Path(source).stem
    root = library(source).parent.parent
    took = []
    for record in root.glob(f"fedrun_{stem}_*/{BUILD_TIME_FILE}"):
        with contextlib.suppress(OSError, ValueError):
            took.append(float(record.read_text()))
    return max(took) if took else TYPICAL_BUILD_S.get(source, 60.0)


def in_words(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 100 else f"{seconds / 60:.1f} minutes"


def build_name(source: Path) -> str:
    """A build's name, keyed by everything its machine code depends on: the source's text, the compiler (its
    version), the flags, the CPU's instruction sets and torch (``_cpu_signature``). Not by the source's place: two
    checkouts of the same source share one build."""
    key = source.read_bytes() + f"{compiler()} {' '.join(CFLAGS + LDFLAGS)} {_cpu_signature()}".encode()
    return f"fedrun_{source.stem}_" + hashlib.sha256(key).hexdigest()[:12]


@functools.cache
def compiler() -> str:
    """The C++ compiler torch's extensions build with and its version (the first line of ``--version``), or its name
    alone when it cannot be asked (a build then fails and says why)."""
    cxx = os.environ.get("CXX", "c++")
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return cxx
    return f"{cxx}: {(out.splitlines() or [''])[0]}"


def build_failure(error: Exception) -> str:
    """The line of a failed build's output that says why (a compiler's error, a missing program), not ninja's
    command lines and status."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    said = [line for line in lines if not line.startswith(("[", "FAILED", "ninja:", "Error building"))
            and " -MMD " not in line and " -shared " not in line]
    errors = [line for line in said if "error" in line.lower() or "not found" in line]
    return (errors or said or lines or [type(error).__name__])[0][:300]


@functools.cache
def _cpu_signature() -> str:
    """What a kernel's machine code depends on besides its source and compiler: the CPU's instruction sets (it is
    compiled with -march=native, so a cache shared by machines of different CPUs keeps one build per CPU) and torch's
    version."""
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        pass
    return f"{platform.machine()} {flags.strip()} torch {torch.__version__}"


def has_avx512() -> bool:
    """Whether this CPU has AVX-512 (its foundation), the vector width the fused convolution kernels are written for,
    and torch is let use it: where PyTorch's own switch ``ATEN_CPU_CAPABILITY`` caps torch at AVX2 or below, fedrun's
    defaults follow it as on an AVX2 CPU."""
    capped = os.environ.get("ATEN_CPU_CAPABILITY", "").lower() in ("default", "avx2", "zvector", "vsx")
    return not capped and " avx512f " in f" {_cpu_signature()} "


def kernels_on(native: bool | None, precision: str = "float32", device: torch.device | str = "cpu"
               ) -> dict[str, bool]:
    """``hardware.native`` resolved to each kernel: false, none; true, all; null (the default), those that pay on
    this CPU: the convolution kernels only where it has AVX-512 (on an AVX2 CPU their 16-float vectors are split in
    two and they ran slower than oneDNN's layers). None under a reduced ``hardware.precision``: they compute in
    float32 only, whatever autocast asks; and none for a run on another ``device`` than the CPU (they are CPU code,
    and building one would only delay a GPU run's first round)."""
    if native is False or precision != "float32" or torch.device(device).type != "cpu":
        return dict.fromkeys(SOURCES, False)
    return {FUSED_CONV: native is True or has_avx512(), INDEXED_ROWS: True}


def wanted(hardware) -> list[str]:
    """The kernels a run with these ``hardware`` settings may use: those ``hardware.native`` turns on, on a CPU."""
    on_cpu = hardware.device == "cpu" or (hardware.device == "auto" and not torch.cuda.is_available())
    if not on_cpu:
        return []
    native, precision = getattr(hardware, "native", None), getattr(hardware, "precision", "float32")
    return [source for source, on in kernels_on(native, precision).items() if on]


def prepare(hardware) -> None:
    """Before a run's first round: build the kernels it may use that are not built yet, all at once in a fresh
    process (``python -m fedrun.model.native.build``), so that no round waits on a compiler unannounced."""
    missing = [source for source in wanted(hardware) if not is_built(source)]
    if not missing:
        return
    log.warning("fedrun's compiled CPU kernels are not built for this machine yet: building %s now, before the "
                "first round (once; about %s, they compile at once; `make setup` builds them ahead)",
                ", ".join(missing), in_words(max(map(expected_build_s, missing))))
    build_in_a_fresh_process(missing)


def build_in_a_fresh_process(sources: list[str]) -> None:
    """``python -m fedrun.model.native.build <sources>``: the builds run at once, in a process with nothing else
    loaded."""
    subprocess.run([sys.executable, "-m", "fedrun.model.native.build", *sources], check=False)


def build_all(sources: list[str] | None = None) -> dict[str, bool]:
    """Build every kernel (or those named) for this CPU now, one process each (they compile at once; a build is
    cached, so a second call only loads them): ``make setup`` runs this, so that neither a first run nor the test
    suite waits on the compiler. Returns whether each kernel is there."""
    from concurrent.futures import ProcessPoolExecutor

    sources = list(sources or SOURCES)
    with ProcessPoolExecutor(len(sources)) as pool:
        return dict(zip(sources, pool.map(_built, sources)))


def _built(source: str) -> bool:
    return kernel(source) is not None


def default_kernels() -> tuple[list[str], dict[str, str]]:
    """The kernels a run's default ``hardware.native`` uses on this CPU (what ``make setup`` builds), and why each
    other one is left out."""
    on = kernels_on(None)
    left_out = {source: "this CPU has no AVX-512, where the default hardware.native leaves it off (slower than "
                        "oneDNN's layers here); hardware.native=true builds it on first use"
                for source, used in on.items() if not used}
    return [source for source, used in on.items() if used], left_out


def main(argv: list[str]) -> None:
    """``python -m fedrun.model.native.build [SOURCE ...]``: the kernels named, or those the default settings use
    here, built now; each one's outcome said."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    sources, left_out = (argv, {}) if argv else default_kernels()
    for source, there in (build_all(sources) if sources else {}).items():
        print(f"fedrun kernel {source}: {'built' if there else 'not built (see the warning above)'}")
    for source, why in left_out.items():
        print(f"fedrun kernel {source}: not built: {why}")


if __name__ == "__main__":
    main(sys.argv[1:])
