import time

import numpy as np
import pytest

from fedrun.config.compose import option
from fedrun.errors import ConfigError
from fedrun.data.partition import make_partition


def labels_like_mnist(n=6000, classes=10, seed=0):
    return np.random.default_rng(seed).integers(0, classes, n)


def part(labels, n, seed=0, users=None, *, name, **values):
    return make_partition(option("partition", name, **values), labels, users, n, seed)


def assert_exact_cover(p, n_samples):
    everything = np.concatenate(p.indices)
    assert len(everything) == n_samples, "sizes must sum to the dataset"
    assert len(np.unique(everything)) == n_samples, "no sample may be on two clients"


@pytest.mark.parametrize("cfg", [dict(name="iid"), dict(name="case1"), dict(name="dirichlet", alpha=0.3),
                                 dict(name="dirichlet", alpha=100.0), dict(name="case2"),
                                 dict(name="classes", classes_per_client=2)])
def test_without_replacement_partitions_cover_each_sample_once(cfg):
    y = labels_like_mnist()
    assert_exact_cover(part(y, 10, **cfg), len(y))


def test_same_seed_same_partition_other_seed_differs():
    y = labels_like_mnist()
    a, b = part(y, 10, seed=1, name="dirichlet", alpha=0.5), part(y, 10, seed=1, name="dirichlet", alpha=0.5)
    c = part(y, 10, seed=2, name="dirichlet", alpha=0.5)
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()


def test_dirichlet_large_alpha_is_close_to_iid():
    y = labels_like_mnist(20000)
    p = part(y, 10, name="dirichlet", alpha=1e4)
    global_mix = np.bincount(y, minlength=10) / len(y)
    hist = p.label_histograms(y, 10)
    mixes = hist / hist.sum(axis=1, keepdims=True)
    assert np.abs(mixes - global_mix).sum(axis=1).max() < 0.05
    assert p.sizes.max() / p.sizes.min() < 1.1


def test_dirichlet_small_alpha_is_skewed():
    y = labels_like_mnist(20000)
    hist = part(y, 10, name="dirichlet", alpha=0.05).label_histograms(y, 10)
    dominant = hist.max(axis=1) / hist.sum(axis=1)
    assert np.median(dominant) > 0.5


def test_dirichlet_1000_clients_alpha_001_is_fast_and_gives_every_client_data():
    y = labels_like_mnist(60000)
    start = time.perf_counter()
    p = part(y, 1000, name="dirichlet", alpha=0.01, min_size=1)
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0, f"took {elapsed:.2f}s"
    assert p.sizes.min() >= 1
    assert_exact_cover(p, len(y))


def test_dirichlet_resample_draws_fixed_share_with_replacement():
    y = labels_like_mnist(10000)
    p = part(y, 100, name="dirichlet_resample", alpha=0.1, client_fraction=0.01)
    assert all(len(ix) == 100 for ix in p.indices)
    assert any(len(np.unique(ix)) < len(ix) for ix in p.indices), "resampling draws with replacement"
    dominant = p.label_histograms(y, 10).max(axis=1) / 100
    assert np.median(dominant) > 0.5  # Dir(0.1) class mixes are skewed


@pytest.mark.parametrize("k", [1, 2, 3])
def test_classes_gives_each_client_exactly_k_classes_and_covers_all(k):
    y = labels_like_mnist()
    p = part(y, 20, name="classes", classes_per_client=k)
    held = p.label_histograms(y, 10) > 0
    assert (held.sum(axis=1) == k).all()
    assert held.any(axis=0).all()


def test_classes_range_draws_between_lo_and_hi():
    y = labels_like_mnist()
    p = part(y, 400, name="classes", classes_per_client=[1, 2])
    counts = (p.label_histograms(y, 10) > 0).sum(axis=1)
    assert set(counts.tolist()) == {1, 2}


@pytest.mark.parametrize("n", [2, 5, 6, 15])
def test_case2_first_half_iid_rest_disjoint_label_sets(n):
    y = labels_like_mnist()
    p = part(y, n, name="case2")
    n_iid = -(-n // 2)
    hist = p.label_histograms(y, 10)
    assert (hist[:n_iid] > 0).all(), "the first ceil(N/2) clients are IID: they hold every label"
    assert abs(hist[:n_iid].sum() - len(y) // 2) <= 1
    rest = hist[n_iid:] > 0
    if len(rest) <= 10:
        assert (rest.sum(axis=0) == 1).all(), "each label on exactly one of the non-IID clients"
    sizes = rest.sum(axis=1)
    assert sizes.max() - sizes.min() <= 1, "labels dealt as evenly as possible"


def test_case2_n5_blocks_and_round_robin():
    y = labels_like_mnist()
    blocks = part(y, 5, name="case2", label_deal="blocks").label_histograms(y, 10) > 0
    assert np.flatnonzero(blocks[3]).tolist() == [0, 1, 2, 3, 4]
    assert np.flatnonzero(blocks[4]).tolist() == [5, 6, 7, 8, 9]
    rr = part(y, 5, name="case2", label_deal="round_robin").label_histograms(y, 10) > 0
    assert np.flatnonzero(rr[3]).tolist() == [0, 2, 4, 6, 8]


def mnist_labels():
    from fedrun.data import load_dataset

    return load_dataset(option("data", "mnist", normalize="unit")).y_train.numpy()


def test_case2_task_deal_gives_one_client_every_even_digit_and_the_other_every_odd_one_on_mnist():
    y = mnist_labels()
    p = make_partition(option("partition", "case2", label_deal="task"), y, None, 5, 0, y % 2)
    assert_exact_cover(p, len(y))
    parity = [np.unique(y[ix] % 2).tolist() for ix in p.indices]
    assert parity[:3] == [[0, 1]] * 3, "the IID half holds both task classes"
    assert parity[3:] == [[0], [1]], "client 4 all even, client 5 all odd"
    assert sum(len(ix) for ix in p.indices[:3]) == len(y) // 2
    # today's digit blocks give the same two clients both parities (57% and 40% even on MNIST)
    blocks = make_partition(option("partition", "case2"), y, None, 5, 0, y % 2)
    assert all(0.3 < np.mean(y[ix] % 2 == 0) < 0.7 for ix in blocks.indices[3:])
    # more clients than task classes: the label clients take the task classes in turn and share them evenly
    p10 = make_partition(option("partition", "case2", label_deal="task"), y, None, 10, 0, y % 2)
    assert [np.unique(y[ix] % 2).tolist() for ix in p10.indices[5:]] == [[0], [1], [0], [1], [0]]
    even = [len(ix) for ix in p10.indices[5:] if y[ix[0]] % 2 == 0]
    assert max(even) - min(even) <= 1


def test_case2_split_by_labels_is_wang_et_al_case_4():
    y = labels_like_mnist()
    p = part(y, 5, name="case2", split="labels", label_deal="round_robin")
    assert_exact_cover(p, len(y))
    held = [np.unique(y[ix]).tolist() for ix in p.indices]
    assert held[:3] == [[0, 1, 2, 3, 4]] * 3, "digits 0-4 IID over the first three clients"
    assert held[3:] == [[5, 7, 9], [6, 8]]
    sizes = [len(ix) for ix in p.indices[:3]]
    assert max(sizes) - min(sizes) <= 1
    task = make_partition(option("partition", "case2", split="labels", label_deal="task"), y, None, 5, 0,
                          y % 2)
    assert sorted(map(len, task.indices[3:])) == sorted(map(len, p.indices[3:])), "even/odd: the same two groups"
    with pytest.raises(ConfigError, match="partition.split"):
        part(y, 5, name="case2", split="halves")


def test_case3_is_an_alias_of_case2_that_says_so():
    y = labels_like_mnist()
    a, b = part(y, 5, name="case2"), part(y, 5, name="case3")
    assert a.fingerprint() == b.fingerprint()
    assert "alias" in b.layout


def test_natural_keeps_users_intact():
    y = labels_like_mnist(300)
    users = np.repeat(np.arange(30), 10)
    p = part(y, 30, users=users, name="natural")
    for uid, ix in enumerate(p.indices):
        assert (users[ix] == uid).all() and len(ix) == 10
    with pytest.raises(ConfigError, match="exceeds the 30 users"):
        part(y, 31, users=users, name="natural")


def test_partition_json_records_sizes_and_histograms():
    y = labels_like_mnist()
    p = part(y, 4, name="dirichlet", alpha=0.5)
    info = p.to_json(y, 10)
    assert [c["num_samples"] for c in info["clients"]] == p.sizes.tolist()
    assert sum(sum(c["label_counts"]) for c in info["clients"]) == len(y)
    assert "4 clients" in p.summary(y, 10)
