"""Settings fedrun renamed or merged into others, and how their old spellings are still read.

A renamed group or key is read in its old spelling wherever a user or an earlier run wrote it: typed on the command
line (accepted for one release, with a note giving today's spelling), in a run's saved ``config.yaml`` and Hydra's
record of its overrides (so the staleness check, resume, ``fedrun-report`` and the paper tables see a run made before
the rename under today's keys) and in its checkpoints (a part's state under the part's new name). A setting merged
into another, whose values differ, is not translated on the command line: typing it names the setting to use.
"""

from __future__ import annotations

# old group or key prefix (dotted) -> today's: the group's options and every key under it move together
RENAMED = {"algo.selector": "algo.step_selector"}
# an algorithm part renamed with its group, by the name its state has in a checkpoint
PARTS_RENAMED = {old.removeprefix("algo."): new.removeprefix("algo.") for old, new in RENAMED.items()
                 if old.startswith("algo.")}
# settings merged into others: what to type instead
REPLACED = {
    "hardware.fused_conv": "hardware.native (true|false|null: every compiled kernel, the fused convolutions included)",
    "hardware.indexed_rows": "hardware.native (true|false|null: every compiled kernel, the rows-in-place one included)",
    "hardware.tf32": "hardware.precision (tf32 for true, float32 for false; bfloat16 too)",
}


def renamed_key(key: str) -> str:
    """A key or group (``algo.selector.alpha``, ``algo/selector``) in today's spelling, in the same form."""
    for old, new in RENAMED.items():
        for sep in (".", "/"):
            was, now = old.replace(".", sep), new.replace(".", sep)
            if key == was or key.startswith(was + "."):
                return now + key[len(was):]
    return key


def renamed_override(override: str) -> str:
    """A command-line override (``+``, ``++`` or ``~`` prefix and value kept) in today's spelling."""
    key, eq, value = override.partition("=")
    bare = key.lstrip("+~")
    return key[:len(key) - len(bare)] + renamed_key(bare) + eq + value


def renamed_overrides(args: list[str]) -> tuple[list[str], list[str]]:
    """The command line in today's spelling, and one note per old spelling it held (flags are left as they are)."""
    out, notes = [], []
    for arg in args:
        new = arg if arg.startswith("-") else renamed_override(arg)
        if new != arg:
            old_key, new_key = arg.split("=", 1)[0].lstrip("+~"), new.split("=", 1)[0].lstrip("+~")
            notes.append(f"{old_key} is now {new_key} (the old spelling is read for this release). "
                         f"Fix: {new}")
        out.append(new)
    return out, notes


def upgraded(config: dict) -> dict:
    """A run's saved config (a plain dict) in today's keys, so that a run made before a rename compares as what it
    computed: renamed groups move (``algo.selector`` to ``algo.step_selector``), and ``hardware.tf32`` (true|false)
    becomes ``hardware.precision`` (tf32|float32)."""
    for old, new in RENAMED.items():
        *path, was = old.split(".")
        now = new.split(".")[-1]
        node = config
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and was in node and now not in node:
            config = _replaced(config, path, {now if k == was else k: v for k, v in node.items()})
    hardware = config.get("hardware")
    if isinstance(hardware, dict) and "tf32" in hardware:
        new_hw = {k: v for k, v in hardware.items() if k != "tf32"}
        new_hw.setdefault("precision", "tf32" if hardware["tf32"] else "float32")
        config = {**config, "hardware": new_hw}
    return config


def _replaced(config: dict, path: list[str], node: dict) -> dict:
    """``config`` with the dict at ``path`` replaced by ``node`` (copies along the path; the input is not changed)."""
    if not path:
        return node
    head, *rest = path
    return {**config, head: _replaced(config[head], rest, node)}


def upgraded_state(saved: dict) -> dict:
    """A checkpoint's server state (plain values) with each renamed part's state under the part's new name."""
    return {PARTS_RENAMED.get(k, k) if PARTS_RENAMED.get(k) not in saved else k: v for k, v in saved.items()}
