"""Read back the records of an offline W&B run file (``run-*.wandb``) for tests.

The file is a 7-byte header (":W&B", magic 0xBEE1, version) followed by LevelDB-log framed protobuf records in
32 KiB blocks: crc32c (4 bytes), length (2, little-endian), type (1: full, 2: first, 3: middle, 4: last)."""

from __future__ import annotations

import json
from pathlib import Path

from wandb.proto import wandb_internal_pb2

BLOCK = 32768
HEADER = 7


def records(path: Path):
    raw = Path(path).read_bytes()
    assert raw[:4] == b":W&B", f"{path} is not a W&B run file"
    pos, pending = HEADER, b""
    while pos + 7 <= len(raw):
        left_in_block = BLOCK - pos % BLOCK
        if left_in_block < 7:
            pos += left_in_block
            continue
        length = int.from_bytes(raw[pos + 4 : pos + 6], "little")
        kind = raw[pos + 6]
        data = raw[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            continue
        if kind == 1:
            yield _parse(data)
        elif kind == 2:
            pending = data
        elif kind == 3:
            pending += data
        elif kind == 4:
            yield _parse(pending + data)
            pending = b""


def _parse(data: bytes):
    rec = wandb_internal_pb2.Record()
    rec.ParseFromString(data)
    return rec


def history(path: Path) -> list[dict]:
    rows = []
    for rec in records(path):
        if rec.WhichOneof("record_type") == "history":
            rows.append({(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in rec.history.item})
    return rows


def config(path: Path) -> dict:
    out = {}
    for rec in records(path):
        kind = rec.WhichOneof("record_type")
        updates = rec.config.update if kind == "config" else rec.run.config.update if kind == "run" else []
        for u in updates:
            out[u.key or "/".join(u.nested_key)] = json.loads(u.value_json)
    return out
