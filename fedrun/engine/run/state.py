"""What a run's rounds change, in one place: the global model, every part's state and the clients' persistent state.

A round reads a :class:`ServerState` and leaves a new one; a checkpoint saves it as plain values (tensors, numbers,
strings, None and containers of them, read back with ``torch.load(weights_only=True)``). Settings, execution settings
included (``hardware.gram_block``), are never part of it: they come from the run's config.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import torch

from fedrun.algorithms.stateful import STATEFUL_PARTS
from fedrun.algorithms.base import State
from fedrun.config.renames import upgraded_state
from fedrun.errors import ConfigError


# what a checkpoint of an earlier fedrun may lack (they take their initial values)
ADDED_SINCE = {"clients", "sim_time", "privacy", "asynchrony"}


@dataclass
class ServerState:
    """The global model w_t and its buffers, then each part's state under the part's name: the server optimiser's
    (momentum, Adam's moments), the local rule's server side (SCAFFOLD's c, FedDyn's h, FSVRG's omega), the step
    selector's (GraB's stale means), the harmoniser's (DGT's baselines), the privacy mechanism's (DP-FedAvg's clip
    norm and rounds released), the schedule's (GIFT's EMAs and tau), the bank's (MA-/GA-FSVRG's models), the
    asynchronous server's (the clients in flight and their models); ``clients``, each client's persistent state by id
    (SCAFFOLD's c_i, FSVRG's statics); ``sim_time``, the simulated seconds so far (``timing=simulated``)."""

    params: torch.Tensor
    buffers: dict[str, torch.Tensor]
    server_opt: State
    local: State
    step_selector: State
    harmonizer: State
    privacy: State
    schedule: State
    bank: State
    asynchrony: State
    clients: dict[int, State] = field(default_factory=dict)
    sim_time: float = 0.0

    def to_plain(self) -> dict:
        """The state as a dict of plain values (what a checkpoint holds); refuses a part state that is not plain."""
        plain = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, value in plain.items():
            if not _plain(value):
                raise TypeError(f"ServerState.{name} cannot be checkpointed: keep tensors, numbers, strings, None and "
                                "dicts or lists of them")
        return plain

    @classmethod
    def from_plain(cls, saved: dict, device: torch.device, initial: ServerState) -> ServerState:
        """The state a checkpoint holds, on ``device``. Checkpoints of fedrun before this class (their keys
        ``server_state``, ``rule_state``, ``client_states`` and ``parts``) are read too: each part's state there is
        the same dict of values; a part renamed since is read under its new name; keys a part no longer has are
        dropped and those it gained keep ``initial``'s values."""
        saved = upgraded_state(saved if "server_opt" in saved else _from_before_server_state(saved))
        names = {f.name for f in fields(cls)}
        missing = names - saved.keys() - ADDED_SINCE
        if missing:
            raise ConfigError([f"resume=true: the checkpoint has no {sorted(missing)}: it was not written by fedrun. "
                               "Fix: start the run in a new directory"])
        values = {}
        for name in names:
            value = saved.get(name, getattr(initial, name))
            if name in STATEFUL_PARTS:  # a part's keys as the part declares them today
                start = getattr(initial, name)
                value = {k: value.get(k, v) for k, v in start.items()} if isinstance(start, dict) and start else value
            values[name] = to_device(value, device)
        values["clients"] = {int(c): s for c, s in values["clients"].items()}
        values["sim_time"] = float(values["sim_time"])
        return cls(**values)


def _from_before_server_state(saved: dict) -> dict:
    """A checkpoint of the format before :class:`ServerState` in today's names."""
    try:
        return {"params": saved["params"], "buffers": saved["buffers"], "server_opt": saved["server_state"],
                "local": saved["rule_state"], "clients": saved["client_states"], "sim_time": saved["sim_time"],
                **{part: upgraded_state(saved["parts"]).get(part, {}) for part in STATEFUL_PARTS}}
    except KeyError as e:
        raise ConfigError([f"resume=true: the checkpoint has no {e.args[0]!r}: it is of a format fedrun cannot read. "
                           "Fix: start the run in a new directory"]) from None


def _plain(v) -> bool:
    if v is None or isinstance(v, (bool, int, float, str, torch.Tensor)):
        return True
    if isinstance(v, dict):
        return all(isinstance(k, (int, str)) and _plain(x) for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return all(_plain(x) for x in v)
    return False


def to_device(tree, device: torch.device):
    """Every tensor of a nested dict/list/tuple moved to ``device``."""
    if isinstance(tree, torch.Tensor):
        return tree.to(device)
    if isinstance(tree, dict):
        return {k: to_device(v, device) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(to_device(v, device) for v in tree)
    return tree
