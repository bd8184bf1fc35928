"""``fedrun-data``: which datasets are present, where fedrun looks, and how to get the rest."""

from __future__ import annotations

import argparse
import sys


from fedrun.errors import FedrunError
from fedrun.data import DATASETS, resolve_root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fedrun-data", description=__doc__)
    parser.add_argument("--root", default=None, help="data root (default: $FEDRUN_DATA or ~/.cache/fedrun)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="show each dataset, whether it is present, and how to get it")
    fetch = sub.add_parser("fetch", help="download and cache a dataset that can be fetched")
    fetch.add_argument("name", choices=sorted(DATASETS))
    args = parser.parse_args(argv)
    root = resolve_root(args.root)
    if args.cmd == "list":
        print(f"data root: {root}")
        for name, spec in DATASETS.items():
            present = spec.is_present(root)
            print(f"{name:18s} {'present' if present else 'missing':8s} {spec.description}")
            if not present:
                print(f"{'':27s}{spec.how_to_get.format(root=root)}")
        return 0
    spec = DATASETS[args.name]
    if spec.fetch is None:
        if spec.is_present(root):
            print(f"{args.name}: present ({spec.how_to_get.format(root=root)})")
            return 0
        print(f"fedrun-data: {args.name} cannot be fetched automatically. {spec.how_to_get.format(root=root)}",
              file=sys.stderr)
        return 2
    if spec.is_present(root):
        print(f"{args.name}: already present under {root}")
        return 0
    try:
        spec.fetch(root)
    except FedrunError as e:
        print(f"fedrun-data: {e}", file=sys.stderr)
        return 1
    print(f"{args.name}: fetched and verified under {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
