"""The clients as devices on the simulated clock: each one's compute speed and link (``devices``), when it is online
(``availability``), and, for a round's sampled clients, who reports, who drops out and who is cut, with the compute
that was lost.

Every client's time in a round (``timing=simulated``, GIFT's model made per client): the model comes down, the
client takes tau_i local steps of its own step time, the update goes up. A transfer takes max(k copies over the
server's link, one copy over the client's own link), k the clients sampled. Every random choice is a function of
(seed, client) or (seed, round, client), so runs of different algorithms see the same devices, windows and failures.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fedrun.data.safe_pickle import load_numpy_pickle
from fedrun.errors import ConfigError

_SPEED, _LINK, _ONLINE, _FAIL = 0x5EED, 0x11AC, 0x0A11, 0xFA11
# FedScale's completion time: a step costs 3 x (B samples x the trace's inference ms per sample): forward and a
# backward of about twice its cost (fedscale/cloud/internal/client_metadata.py)
FEDSCALE_PASSES = 3.0


@dataclass(frozen=True)
class Devices:
    """Each client's seconds per local step, as a factor of the base device's (``timing.step_time_s``, or this
    machine's measured step), and its link in Mbit/s."""

    step_factor: np.ndarray  # (N,)
    link_mbps: np.ndarray  # (N,)

    @classmethod
    def build(cls, devices, timing, num_clients: int, batch_size: int, seed: int) -> Devices:
        """``devices=same``: every client the base device; ``lognormal``: factors exp(sigma Z) (median 1) for the step
        time and the link, drawn per client; ``trace``: read from ``devices.trace``."""
        link = float(timing.bandwidth_mbps or 1.0)
        if devices.name == "lognormal":
            speed = np.random.default_rng([seed, _SPEED]).standard_normal(num_clients)
            links = np.random.default_rng([seed, _LINK]).standard_normal(num_clients)
            return cls(np.exp(float(devices.speed_sigma) * speed), link * np.exp(float(devices.link_sigma) * links))
        if devices.name == "trace":
            if timing.step_time_s is None:
                raise ConfigError(["devices=trace: the trace gives each client's seconds per step, which need "
                                   "timing.step_time_s as the base device's. Fix: timing.step_time_s=<seconds>"])
            step_s, mbps = read_device_trace(Path(devices.trace), batch_size)
            rows = np.arange(num_clients) % len(step_s)  # client i takes the trace's row i (mod its length)
            return cls(step_s[rows] / float(timing.step_time_s), mbps[rows])
        return cls(np.ones(num_clients), np.full(num_clients, link))


def read_device_trace(path: Path, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(seconds per step, link Mbit/s) per trace row. A CSV with a header ``client,step_s,mbps`` (one row a
    client, in order of ``client``), or FedScale's device-capacity pickle (``client_device_capacity``: client id ->
    {'computation': inference ms per sample, 'communication': kbit/s}), read as FedScale reads it: a step of B samples
    takes 3 B computation / 1000 s, and the link is communication / 1000 Mbit/s, in order of client id."""
    if path.suffix == ".csv":
        rows = read_csv_trace(path, ("client", "step_s", "mbps"))
        rows.sort(key=lambda r: r[0])
        return np.array([r[1] for r in rows]), np.array([r[2] for r in rows])
    capacity = _fedscale_pickle(path, ("computation", "communication"))
    ids = sorted(capacity)
    step_s = np.array([FEDSCALE_PASSES * batch_size * float(capacity[i]["computation"]) / 1000 for i in ids])
    return step_s, np.array([float(capacity[i]["communication"]) / 1000 for i in ids])


def read_csv_trace(path: Path, columns: tuple[str, ...]) -> list[tuple]:
    """The rows of a CSV trace whose header is ``columns`` (the first an integer client id, the rest numbers >= 0);
    a malformed line is refused with the file and its line number."""
    if not path.is_file():
        raise ConfigError([f"trace {path}: no such file. Fix: the path of a CSV with the header "
                           f"{','.join(columns)} (docs/simulated-clock.md)"])
    with path.open(newline="") as f:
        lines = list(csv.reader(f))
    if not lines or [c.strip() for c in lines[0]] != list(columns):
        raise ConfigError([f"{path}:1: the header must be {','.join(columns)}"])
    rows = []
    for number, line in enumerate(lines[1:], start=2):
        if not line or not "".join(line).strip():
            continue
        try:
            if len(line) != len(columns):
                raise ValueError(f"{len(line)} fields, not {len(columns)}")
            values = (int(line[0]), *(float(v) for v in line[1:]))
            if values[0] < 0 or any(not math.isfinite(v) or v < 0 for v in values[1:]):
                raise ValueError("a negative or non-finite value")
        except ValueError as e:
            raise ConfigError([f"{path}:{number}: {','.join(line)!r} is not {','.join(columns)} ({e})"]) from None
        rows.append(values)
    if not rows:
        raise ConfigError([f"{path}: no rows after the header"])
    return rows


def _fedscale_pickle(path: Path, keys: tuple[str, ...]) -> dict:
    """A FedScale trace (a pickled dict: client id -> dict holding ``keys``), read without running code from it."""
    if not path.is_file():
        raise ConfigError([f"trace {path}: no such file. Fix: a FedScale trace pickle, or a CSV "
                           "(docs/simulated-clock.md)"])
    data = load_numpy_pickle(path.read_bytes())
    bad = next((k for k, v in data.items() if not isinstance(v, dict) or not set(keys) <= v.keys()), None) \
        if isinstance(data, dict) and data else "the file"
    if bad is not None:
        raise ConfigError([f"{path}: client {bad!r} has no {list(keys)}: not a FedScale trace of this kind"])
    return data


@dataclass
class Availability:
    """When each client is online. ``always``; ``markov``: on and off periods alternate, exponential with the given
    means, each client starting in the stationary state; ``trace``: windows [start, end) of simulated seconds per client
    (a CSV ``client,start_s,end_s``, or FedScale's ``client_behave_trace``: 'active' and 'inactive' times repeating
    every 'finish_time'). Clients without a trace row are never online."""

    kind: str
    num_clients: int
    seed: int = 0
    mean_on: float = 1.0
    mean_off: float = 1.0
    windows: dict[int, list[tuple[float, float]]] = field(default_factory=dict)  # client -> [(start, end)]
    period: dict[int, float] = field(default_factory=dict)  # client -> the trace's repeat period (FedScale)
    _draws: dict = field(default_factory=dict, repr=False)  # markov: per client, its generator and switch times

    @classmethod
    def build(cls, availability, num_clients: int, seed: int) -> Availability:
        if availability.name == "markov":
            return cls("markov", num_clients, seed, float(availability.mean_online_s),
                       float(availability.mean_offline_s))
        if availability.name == "trace":
            windows, period = read_availability_trace(Path(availability.trace))
            return cls("trace", num_clients, seed, windows=windows, period=period)
        return cls("always", num_clients, seed)

    def _switches(self, client: int, until: float) -> list[float]:
        """Markov: the client's switch times up to past ``until``; it is online before the first if it starts online,
        and every switch flips it."""
        if client not in self._draws:
            rng = np.random.default_rng([self.seed, _ONLINE, client])
            starts_on = rng.random() < self.mean_on / (self.mean_on + self.mean_off)
            self._draws[client] = (rng, starts_on, [])
        rng, starts_on, times = self._draws[client]
        on = starts_on if len(times) % 2 == 0 else not starts_on
        while not times or times[-1] <= until:
            last = times[-1] if times else 0.0
            times.append(last + rng.exponential(self.mean_on if on else self.mean_off))
            on = not on
        return times

    def window(self, client: int, t: float) -> tuple[bool, float]:
        """(whether ``client`` is online at ``t``, when that ends: the next switch; inf when it never does)."""
        if self.kind == "always":
            return True, math.inf
        if self.kind == "markov":
            times = self._switches(client, t)
            k = int(np.searchsorted(times, t, side="right"))  # switches at or before t
            starts_on = self._draws[client][1]
            return (starts_on if k % 2 == 0 else not starts_on), times[k]
        period = self.period.get(client)
        base = math.floor(t / period) * period if period else 0.0
        local = t - base
        for start, end in self.windows.get(client, []):
            if start <= local < end:
                return True, base + end
        nxt = [base + s for s, _ in self.windows.get(client, []) if s > local]
        if period and self.windows.get(client):
            nxt.append(base + period + self.windows[client][0][0])
        return False, min(nxt, default=math.inf)

    def online(self, t: float) -> np.ndarray:
        """The clients online at ``t`` (sorted ids)."""
        if self.kind == "always":
            return np.arange(self.num_clients)
        return np.array([c for c in range(self.num_clients) if self.window(c, t)[0]], dtype=np.int64)

    def next_online(self, t: float) -> float:
        """When the first offline client comes online after ``t`` (inf if none ever does)."""
        return min((self.window(c, t)[1] for c in range(self.num_clients) if not self.window(c, t)[0]),
                   default=math.inf)


def read_availability_trace(path: Path) -> tuple[dict[int, list[tuple[float, float]]], dict[int, float]]:
    """Online windows per client from a CSV ``client,start_s,end_s`` (absolute simulated seconds) or FedScale's
    behaviour pickle (client id -> {'active': [...], 'inactive': [...], 'finish_time': T}: online in [active[k],
    inactive[k]], repeating every T; fedrun's client i is the trace's i-th client in order of id)."""
    windows: dict[int, list[tuple[float, float]]] = {}
    if path.suffix == ".csv":
        for client, start, end in read_csv_trace(path, ("client", "start_s", "end_s")):
            if end <= start:
                raise ConfigError([f"{path}: client {client}'s window {start},{end} ends before it starts"])
            windows.setdefault(client, []).append((start, end))
        return {c: sorted(w) for c, w in windows.items()}, {}
    behave = _fedscale_pickle(path, ("active", "inactive", "finish_time"))
    period = {}
    for i, key in enumerate(sorted(behave)):
        trace = behave[key]
        windows[i] = sorted(zip(map(float, trace["active"]), map(float, trace["inactive"])))
        period[i] = float(trace["finish_time"])
    return windows, period


@dataclass
class Arrivals:
    """What the sampled clients of one round did on the clock: ``kept`` the ids that report (sorted), ``wait_s`` how
    long the server waited (the last kept report; when none reported, until the last sampled client arrived or went
    offline), and what metrics.csv logs of them."""

    kept: np.ndarray
    wait_s: float
    logged: dict[str, float]


def failures(sampled: np.ndarray, probability: float, seed: int, round_: int, num_clients: int) -> np.ndarray:
    """Which of ``sampled`` fail this round (each with ``probability``, a function of (seed, round, client))."""
    if probability <= 0:
        return np.zeros(len(sampled), dtype=bool)
    return np.random.default_rng([seed, _FAIL, round_]).random(num_clients)[sampled] < probability


def arrivals(sampled: np.ndarray, compute_s: np.ndarray, transfer_s: np.ndarray, offline_in: np.ndarray,
             failed: np.ndarray, keep: int | None) -> Arrivals:
    """Who of ``sampled`` reports: each would arrive after transfer (down) + compute + transfer (up); one that
    fails (``failed``) or goes offline before it arrives (``offline_in``, seconds from the round's start) drops out;
    of those that arrive, the first ``keep`` (over-selection; None: all) report and the rest are cut when the K-th
    arrives. Lost compute: the whole of a failed client's (its update is lost on the way), an offline client's up
    to going offline, a cut client's up to the cut."""
    arrive = transfer_s + compute_s + transfer_s
    dropped = failed | (offline_in < arrive)
    order = np.argsort(np.where(dropped, np.inf, arrive), kind="stable")
    arrived = order[: int((~dropped).sum())]
    kept = arrived if keep is None else arrived[:keep]
    cut = arrived[len(kept):]
    if len(kept):
        wait = float(arrive[kept].max())
    else:
        wait = float(np.minimum(arrive, offline_in).max(initial=0.0))
    lost = np.where(failed, compute_s, np.clip(np.minimum(compute_s, offline_in - transfer_s), 0, None))[dropped]
    lost_cut = np.clip(np.minimum(compute_s[cut], wait - transfer_s[cut]), 0, None)
    return Arrivals(np.sort(sampled[kept]), wait, {
        "clients_sampled": float(len(sampled)), "clients_reported": float(len(kept)),
        "clients_dropped": float(dropped.sum()), "clients_cut": float(len(cut)),
        "wasted_compute_s": float(lost.sum() + lost_cut.sum())})
