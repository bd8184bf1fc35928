"""fedrun's compiled CPU kernels (``fedrun/kernels/*.cpp``): built on first use, once per source, checkout and CPU.

Each kernel is built with the C++ compiler that PyTorch's extensions use (``ninja`` and ``g++``; about half a minute)
for this CPU's instruction set, and cached by torch in ``$TORCH_EXTENSIONS_DIR`` (default
``~/.cache/torch_extensions``). Where one cannot be built, fedrun says why once and its caller computes the same
values with torch's operators instead (``fedrun/fused_conv.py``, ``fedrun/indexed_rows.py``).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import platform
import shutil
import threading
import warnings
from pathlib import Path

import torch

log = logging.getLogger("fedrun")
KERNELS = Path(__file__).with_name("kernels")
SOURCES = {  # a kernel's source file: what it computes, and the hardware option that turns it off
    "conv_pool_relu.cpp": ("fused convolution kernels", "the convolutions, poolings and ReLUs run one by one",
                           "hardware.fused_conv=false"),
    "indexed_linear.cpp": ("kernel for a dense model's first layer on a minibatch's rows in place",
                           "the minibatch is gathered and multiplied by torch", "hardware.indexed_rows=false"),
}


_FIRST_USE = threading.Lock()  # the loop executor's threads may all ask for a kernel at once: one builds it


def kernel(source: str):
    """The compiled kernel of ``fedrun/kernels/<source>``, built on first use for this CPU (cached across runs by
    torch), or None where it cannot be built (logged once)."""
    with _FIRST_USE:
        return _load(source)


def forget() -> None:
    """Forget the kernels loaded or refused so far: the next use tries again (after a compiler is installed)."""
    _load.cache_clear()


@functools.cache
def _load(source: str):
    what, instead, switch = SOURCES[source]
    quiet = logging.getLogger("torch.utils.cpp_extension")  # its import warns that no CUDA runtime is found
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        from torch.utils import cpp_extension
    finally:
        quiet.setLevel(level)

    name = build_name(KERNELS / source)
    if shutil.which("ninja") is None:
        try:
            import ninja  # the pip package's binary (a dependency of fedrun), where no system ninja is on the PATH

            os.environ["PATH"] = os.pathsep.join([ninja.BIN_DIR, os.environ.get("PATH", "")])
        except ImportError:
            pass
    try:
        log.info("loading fedrun's %s from %s (built there for this CPU if it is not yet: once, about half a minute; "
                 "%s skips it)", what, cpp_extension._get_build_directory(name, verbose=False), switch)
        quiet.setLevel(logging.ERROR)  # torch's own notes on the compiler: the failure below says what matters
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. about CUDA: the kernels are for the CPU
            return cpp_extension.load(name, [str(KERNELS / source)], extra_cflags=["-O3", "-march=native", "-fopenmp"],
                                      extra_ldflags=["-fopenmp"], verbose=False)
    except Exception as e:  # no compiler, no ninja, an unsupported platform: torch's operators, as before
        log.warning("fedrun's %s could not be built (%s); %s instead (the same results to float rounding, slower). "
                    "It needs ninja and a C++ compiler (g++; $CXX if set); %s silences this.",
                    what, build_failure(e), instead, switch)
        return None
    finally:
        quiet.setLevel(level)


def build_name(source: Path) -> str:
    """A build's name, keyed by the source's text and place (torch's build files name the source's path: two
    checkouts sharing one build would rebuild it in turn), the CPU and torch (``_cpu_signature``)."""
    key = source.read_bytes() + f"{source.resolve()} {_cpu_signature()}".encode()
    return f"fedrun_{source.stem}_" + hashlib.sha256(key).hexdigest()[:12]


def build_failure(error: Exception) -> str:
    """The line of a failed build's output that says why (a compiler's error, a missing program), not ninja's
    command lines and status."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    said = [line for line in lines if not line.startswith(("[", "FAILED", "ninja:", "Error building"))
            and " -MMD " not in line and " -shared " not in line]
    errors = [line for line in said if "error" in line.lower() or "not found" in line]
    return (errors or said or lines or [type(error).__name__])[0][:300]


def _cpu_signature() -> str:
    """What a kernel's machine code depends on besides its source: the CPU's instruction sets (it is compiled with
    -march=native, so a cache shared by machines of different CPUs keeps one build per CPU) and torch's version."""
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        pass
    return f"{platform.machine()} {flags.strip()} torch {torch.__version__}"


def build_all() -> dict[str, bool]:
    """Build every kernel for this CPU now, one process each (they compile at once; a build is cached, so a second
    call only loads them): ``make setup`` runs this, so that neither a first run nor the test suite waits on the
    compiler. Returns whether each kernel is there."""
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(len(SOURCES)) as pool:
        return dict(zip(SOURCES, pool.map(_built, SOURCES)))


def _built(source: str) -> bool:
    return kernel(source) is not None


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    for source, there in build_all().items():
        print(f"fedrun kernel {source}: {'built' if there else 'not built (see the warning above)'}")
