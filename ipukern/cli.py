"""The ``ipukern`` command line."""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

from .machine import PRESETS

__all__ = ["main"]


def _cmd_info(args: argparse.Namespace) -> int:
    from ._kernels import _exchange
    for spec in PRESETS.values():
        print(spec.describe())
        print()
    print(f"host: {_exchange.max_threads()} threads, OpenMP {'on' if _exchange.has_openmp() else 'off'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ipukern", description="IPU-class tile machine simulator")
    sub = p.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="print the machine presets and their sources")
    info.set_defaults(func=_cmd_info)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
