"""The ``ipukern`` command line.

Subcommands
-----------
``ipukern scaling``  the grouped-conv scaling sweep (IPU model vs GPU model): prints a table,
                     writes ``scaling.csv``, ``scaling.json`` and ``scaling.png``.
``ipukern conv``     estimate (or ``--execute``) one grouped conv2d and print its profile;
                     optional memory heat map / superstep timeline PNGs.
``ipukern matmul``   the same for a matmul (needs ``ipukern.estimate_matmul``).
``ipukern info``     machine presets (and the GPU models) with their sources.
``ipukern train``    training on an IPU system (``estimate_training``): breakdown, CSV/JSON,
                     the pipeline schedule PNG; ``ipukern compare`` IPU systems vs DGX A100.
``ipukern tune``     the fastest training configuration that fits a system (``ipukern.tune``).
``ipukern explore``  networks over machine / system variants (``ipukern.explore``) on Dask, a
                     process pool or serially, resumable; CSV, Parquet, Pareto plot, sensitivity.
``ipukern network``  a zoo network (resnet50, mobilenet_v2, bert_base, ...) on one IPU:
                     per-layer table and totals; CSV, JSON, time-per-layer and memory PNGs.
``ipukern validate`` the model next to published measurements of real IPUs: ratio per point,
                     MAPE / correlation per group; validation.csv, .json and .png.
``ipukern claims``   Graphcore's public claims next to the model: the configuration of both
                     sides, the model's number, model / claim and a verdict per claim.
``ipukern diff``     compare two profiles (``--json`` outputs) per superstep and category.

Exit codes: 0 success; 2 usage errors (argparse: bad option, unparsable number, missing
argument; a name that names nothing: an unknown model, machine preset or system, an input
file that does not exist), in one line naming the command, with a pointer to its ``--help``;
1 model errors and unwritable outputs, reported in one line (an impossible layer,
a layer that does not fit the tiles, a number too large, a missing compiled kernel, --out
naming a file); 130 interrupted (Ctrl-C), also one line. Outputs are written under
temporary names and renamed into place only once all of them are written, so a failure
leaves no partial set of files.

A progress indicator goes to stderr for work that takes more than about a second, only when
stderr is a terminal (``--progress`` forces it, ``--no-progress`` silences it), so piped
output and files stay clean.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import NoReturn, Sequence

from .._files import InputFileNotFound
from ..core import TileMemoryError
from . import claims, diff, explore, info, layer, network, scaling, train, tune, validate
from ._common import Progress, UsageError

__all__ = ["main", "build_parser", "Progress"]

#: subcommand modules, each with ``register(subparsers)``; parser order = help order
COMMANDS = (scaling, layer, info, validate, claims, train, tune, network, explore, diff)


def _installed_version() -> str:
    """The installed distribution's version; the source tree's when not installed."""
    from importlib.metadata import PackageNotFoundError, version

    from .._version import __version__
    try:
        installed = version("ipukern")
    except PackageNotFoundError:
        return __version__
    # a stale install next to a newer source tree (PYTHONPATH): the code that runs wins
    return installed if installed == __version__ else __version__


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line on stderr and exit 2:
    ``ipukern train: error: argument --bn-group: invalid int value: 'abc' (see 'ipukern
    train --help')`` instead of the usage block above the message. Sub-commands' parsers
    are of the same class (``add_subparsers`` makes them with the parent's class)."""

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        ns, extra = self.parse_known_args(args, namespace)
        if extra:
            # argparse reports a sub-command's unknown options from the top parser: name
            # the sub-command instead, as for its other usage errors
            target: argparse.ArgumentParser = self
            for action in self._actions:
                if isinstance(action, argparse._SubParsersAction):
                    target = action.choices.get(getattr(ns, action.dest, None), self)
            target.error(f"unrecognized arguments: {' '.join(extra)}")
        return ns

    def error(self, message: str) -> NoReturn:
        msg = " ".join(message.split())
        self.exit(2, f"{self.prog}: error: {msg} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="ipukern", description="IPU-class tile machine simulator")
    p.add_argument("--version", action="version", version=f"ipukern {_installed_version()}",
                   help="print the version and exit")
    sub = p.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (argparse exits with 2 on usage errors)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except KeyboardInterrupt:
        print("ipukern: interrupted", file=sys.stderr)
        return 130
    # `--json -`: the JSON alone goes to stdout (for pipes and jq); the readable report to stderr
    args.json_stream = sys.stdout
    to_stderr = (contextlib.redirect_stdout(sys.stderr) if getattr(args, "json", None) == "-"
                 else contextlib.nullcontext())
    try:
        with to_stderr:
            return args.func(args)
    except KeyboardInterrupt:
        print(f"ipukern {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`ipukern conv | head`): stop quietly, as other Unix tools do,
        # and keep Python from complaining when it flushes stdout at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141                                    # 128 + SIGPIPE, what a shell reports
    except (UsageError, InputFileNotFound) as e:
        # a name (model, system, input file) that names nothing: a usage error like
        # argparse's own unknown preset or missing --machine-file (exit 2, same form)
        msg = " ".join(str(e).split())
        print(f"ipukern {args.command}: error: {msg} (see 'ipukern {args.command} --help')",
              file=sys.stderr)
        return 2
    except (TileMemoryError, MemoryError, ValueError, TypeError, ArithmeticError, RuntimeError,
            OSError) as e:
        msg = " ".join(str(e).split()) or type(e).__name__
        print(f"ipukern {args.command}: error: {msg}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
