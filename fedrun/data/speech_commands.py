"""Speech Commands v0.02 (Warden 2018), the KeyWord Spotting subset of GIFT Sec. 6.1: the clips of 10 keywords
(yes, no, up, down, left, right, on, off, stop, go), split by the dataset's own ``validation_list.txt`` and
``testing_list.txt`` (train = every other clip of those words; the validation clips are left out).

Each 16 kHz clip is padded or cut to one second and turned into a sequence of frames (25 ms windows every 10 ms, 98
frames) of ``data.features``: ``mfcc`` (the DCT of the log-mel energies, ``data.n_mfcc`` coefficients) or ``logmel``
(``data.n_mels`` log-mel energies). The features are computed once and cached under the data root, keyed by the
settings and the files found. WAV files are read with the standard library (16-bit PCM, as the dataset ships).
"""

from __future__ import annotations

import math
import wave
from pathlib import Path

import numpy as np

from fedrun.errors import DataMissingError
from fedrun.process.lazy import torch
from fedrun.data.base import DatasetSpec, FedDataset, cache_path, load_or_build, source_signature
from fedrun.data.download import fetcher

KEYWORDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
SAMPLE_RATE, WINDOW, HOP, N_FFT = 16000, 400, 160, 512
FRAMES = 1 + (SAMPLE_RATE - WINDOW) // HOP  # 98


def find_dir(root: Path) -> Path | None:
    for d in (root / "speech_commands", root / "speech_commands_v0.02", root):
        if (d / "testing_list.txt").is_file() and all((d / w).is_dir() for w in KEYWORDS):
            return d
    return None


def is_present(root: Path) -> bool:
    return find_dir(root) is not None


def read_wav(path: Path) -> np.ndarray:
    """A clip as float32 in [-1, 1], padded with zeros or cut to one second."""
    with wave.open(str(path), "rb") as w:
        if w.getsampwidth() != 2 or w.getnchannels() != 1 or w.getframerate() != SAMPLE_RATE:
            raise ValueError(f"{path}: expected 16-bit mono PCM at {SAMPLE_RATE} Hz (Speech Commands' format), got "
                             f"{8 * w.getsampwidth()}-bit, {w.getnchannels()} channel(s), {w.getframerate()} Hz")
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0
    out = np.zeros(SAMPLE_RATE, dtype=np.float32)
    out[: min(len(pcm), SAMPLE_RATE)] = pcm[:SAMPLE_RATE]
    return out


def mel_filterbank(n_mels: int, n_fft: int = N_FFT, rate: int = SAMPLE_RATE) -> torch.Tensor:
    """Triangular filters (n_mels, n_fft // 2 + 1) evenly spaced on the HTK mel scale, 0 Hz to Nyquist."""
    def mel(f):
        return 2595.0 * np.log10(1.0 + f / 700.0)

    hz = 700.0 * (10 ** (np.linspace(mel(0.0), mel(rate / 2), n_mels + 2) / 2595.0) - 1.0)
    bins = np.linspace(0, rate / 2, n_fft // 2 + 1)
    lo, mid, hi = hz[:-2, None], hz[1:-1, None], hz[2:, None]
    fb = np.maximum(0.0, np.minimum((bins - lo) / (mid - lo), (hi - bins) / (hi - mid)))
    return torch.from_numpy(fb).float()


def dct_matrix(n_out: int, n_in: int) -> torch.Tensor:
    """Orthonormal DCT-II (n_out, n_in)."""
    n = torch.arange(n_in, dtype=torch.float64)
    k = torch.arange(n_out, dtype=torch.float64)[:, None]
    m = torch.cos(math.pi / n_in * (n + 0.5) * k) * math.sqrt(2.0 / n_in)
    m[0] /= math.sqrt(2.0)
    return m.float()


def features(clips: torch.Tensor, kind: str = "mfcc", n_mels: int = 40, n_mfcc: int = 40) -> torch.Tensor:
    """(N, 16000) clips -> (N, 98, F) frames: log-mel energies (F = n_mels) or their MFCCs (F = n_mfcc)."""
    frames = clips.unfold(1, WINDOW, HOP) * torch.hann_window(WINDOW, periodic=True)
    power = torch.fft.rfft(frames, n=N_FFT).abs() ** 2 / N_FFT
    logmel = torch.log(power @ mel_filterbank(n_mels).T + 1e-6)
    return logmel if kind == "logmel" else logmel @ dct_matrix(n_mfcc, n_mels).T


def clip_lists(d: Path) -> dict[str, list[str]]:
    """Relative paths of the keyword clips per split (train: neither in the validation nor the testing list)."""
    def listed(name: str) -> set[str]:
        path = d / name
        return set(path.read_text().split()) if path.exists() else set()

    test, val = listed("testing_list.txt"), listed("validation_list.txt")
    every = sorted(f"{w}/{f.name}" for w in KEYWORDS for f in (d / w).glob("*.wav"))
    return {"train": [c for c in every if c not in test and c not in val], "test": [c for c in every if c in test]}


def load(root: Path, cfg) -> FedDataset:
    d = find_dir(root)
    if d is None:
        raise DataMissingError(SPEC.how_to_get.format(root=root))
    kind, n_mels, n_mfcc = str(cfg.features), int(cfg.n_mels), int(cfg.n_mfcc)
    lists = clip_lists(d)

    def build():
        out = {}
        for split, clips in lists.items():
            feats = [features(torch.from_numpy(np.stack([read_wav(d / c) for c in clips[s : s + 512]])), kind,
                              n_mels, n_mfcc).numpy() for s in range(0, len(clips), 512)]
            out[f"x_{split}"] = np.concatenate(feats) if feats else np.zeros((0, FRAMES, n_mfcc), np.float32)
            out[f"y_{split}"] = np.asarray([KEYWORDS.index(c.split("/")[0]) for c in clips], dtype=np.int64)
        return out

    sources = [d / c for clips in lists.values() for c in clips] + [d / "testing_list.txt", d / "validation_list.txt"]
    settings = {"source": source_signature(sources), "features": kind, "n_mels": n_mels, "n_mfcc": n_mfcc,
                "version": 2}
    a = load_or_build(cache_path(root / "speech_commands" / "cache", "kws", settings), build)
    x_train, x_test = torch.from_numpy(a["x_train"]), torch.from_numpy(a["x_test"])
    mean, std = x_train.mean(dim=(0, 1)), x_train.std(dim=(0, 1)).clamp_min(1e-6)  # per coefficient, from train
    return FedDataset("speech_commands", (x_train - mean) / std, torch.from_numpy(a["y_train"]), (x_test - mean) / std,
                      torch.from_numpy(a["y_test"]), num_classes=len(KEYWORDS), input_kind="sequence", source=str(d))


def _meta(cfg):
    width = int(cfg.n_mels) if cfg.features == "logmel" else int(cfg.n_mfcc)
    return "sequence", (FRAMES, width), len(KEYWORDS)


SPEC = DatasetSpec(
    name="speech_commands",
    description="Speech Commands v0.02, the 10-keyword KWS subset: 98 frames of MFCC or log-mel features, 10 classes",
    meta=_meta,
    load=load,
    is_present=is_present,
    fetch=fetcher("speech_commands"),
    how_to_get=(
        "Speech Commands was not found in {root}/speech_commands/. Download speech_commands_v0.02.tar.gz from "
        "http://download.tensorflow.org/data/speech_commands_v0.02.tar.gz and unpack it into {root}/speech_commands/ "
        "so that {root}/speech_commands/yes/*.wav, .../no/*.wav (and the other keyword folders), "
        "validation_list.txt and testing_list.txt are there; on a machine that reaches download.tensorflow.org, "
        "`fedrun-data fetch speech_commands` does this (SHA-256-checked)."
    ),
)
