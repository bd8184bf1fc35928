#!/usr/bin/env bash
# What a lent GPU machine needs beside the working tree, in .device/ (ignored; carry it: `run` with carry [".device"]):
# pure-Python copies of Hydra, OmegaConf, ANTLR's runtime and the Hydra launcher plugins from .venv (the machine's
# image has PyTorch, pytest, PyYAML, tqdm and joblib of its own: copies of those would shadow them), MNIST as the idx
# files its loader reads and Fashion-MNIST's (gzipped: the carried paths hold 64 MiB in all). Then, on the machine:
# bash scripts/device/check.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=.venv/bin/python
SITE=$($PY -c "import site; print(site.getsitepackages()[0])")
rm -rf .device && mkdir -p .device/site .device/data/mnist/MNIST/raw
for pkg in hydra omegaconf antlr4 hydra_plugins; do
  cp -r "$SITE/$pkg" .device/site/
done
find .device/site -depth -name '__pycache__' -exec rm -rf {} +
find .device/site -name '*.so' -delete
$PY - <<'PYEOF'
"""MNIST from fedrun's cache as the four idx files (gzipped), the format fedrun/data/mnist.py also reads."""
import gzip, struct
from pathlib import Path
import numpy as np
from fedrun.data.mnist import cache_file
from fedrun.data.base import default_root

arrays = np.load(cache_file(Path(default_root())))
out = Path(".device/data/mnist/MNIST/raw")
for split, prefix in (("train", "train"), ("test", "t10k")):
    x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
    with gzip.open(out / f"{prefix}-images-idx3-ubyte.gz", "wb") as f:
        f.write(struct.pack(">IIII", 2051, len(x), 28, 28) + x.astype(np.uint8).tobytes())
    with gzip.open(out / f"{prefix}-labels-idx1-ubyte.gz", "wb") as f:
        f.write(struct.pack(">II", 2049, len(y)) + y.astype(np.uint8).tobytes())
PYEOF
# Fashion-MNIST's idx files as Debian's dataset-fashion-mnist installs them (DGT's and GIFT's second dataset), if here
if [[ -d /usr/share/datasets/fashion-mnist ]]; then
  mkdir -p .device/data/fashion_mnist && cp /usr/share/datasets/fashion-mnist/*.gz .device/data/fashion_mnist/
fi
# the commit the machine's runs record (it gets the tree without .git): "-dirty" where the tree has changes
commit=$(git rev-parse HEAD)
[[ -z $(git status --porcelain) ]] || commit+=-dirty
echo "$commit" > .device/commit
du -sh .device
