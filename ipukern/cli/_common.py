"""Shared pieces of the subcommands: argument types, common options, progress, views."""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Sequence

from .._progress import Progress as Progress  # the subcommands' progress line, re-exported
from .._progress import enabled as progress_on
from ..machine import DATASHEET_EXCHANGE, PRESETS, get_machine, with_exchange_bandwidth


class UsageError(ValueError):
    """A name on the command line that names nothing (an unknown model or system): exit 2,
    as argparse's own usage errors (an unknown preset, option or number), not 1 (a model
    error: a layer that does not fit, an unwritable output)."""


def progress_enabled(args: argparse.Namespace) -> bool:
    """``--progress`` / ``--no-progress``, else ``IPUKERN_PROGRESS``, else stderr a terminal."""
    return progress_on(getattr(args, "progress", None))


# =========================================================================== parsing helpers
def ints(text: str, *, n: int | tuple[int, ...] | None = None) -> list[int]:
    # argparse prefixes the message with the option's name
    try:
        vals = [int(v) for v in text.replace("x", ",").split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    allowed = (n,) if isinstance(n, int) else n
    if allowed is not None and len(vals) not in allowed:
        raise argparse.ArgumentTypeError(
            f"expected {' or '.join(map(str, allowed))} integers, got {text!r}")
    if any(v < 0 for v in vals):
        raise argparse.ArgumentTypeError(f"values must be >= 0, got {text!r}")
    return vals


def int_list(text: str) -> list[int]:
    vals = ints(text)
    if not vals:                  # argparse names the option: "--batch: expected ..."
        raise argparse.ArgumentTypeError(f"expected at least one integer, got {text!r}")
    return vals


def state_dtype_arg(text: str) -> Any:
    """``--optimizer-state-dtype``: "float32", "float16", or one per state slot
    ("float16,float32": LAMB's first moment in half, its second in float)."""
    vals = [v.strip() for v in text.split(",")]
    bad = [v for v in vals if v not in ("float32", "float16")]
    if bad or not vals:
        raise argparse.ArgumentTypeError(f"expected float32, float16 or one of them per optimizer "
                                         f"state slot (e.g. float16,float32), got {text!r}")
    return vals[0] if len(vals) == 1 else tuple(vals)


def add_optimizer(p: argparse.ArgumentParser) -> None:
    """The ``--optimizer`` option of ``ipukern train``, ``compare`` and ``network``."""
    from ..ops import OPTIMIZERS
    p.add_argument("--optimizer", default="sgd_momentum", choices=list(OPTIMIZERS),
                   help="training optimizer: " + ", ".join(OPTIMIZERS) + " (default sgd_momentum; "
                        "lars skips 1-D tensors: biases and norm scales/shifts)")


def add_optimizer_state_dtype(p: argparse.ArgumentParser) -> None:
    """The ``--optimizer-state-dtype`` option of ``ipukern train`` and ``ipukern network``."""
    p.add_argument("--optimizer-state-dtype", type=state_dtype_arg, default="float32", metavar="T[,T]",
                   help="storage type of the optimizer state: float32 (default), float16, or one per "
                        "state slot (float16,float32: LAMB/Adam first moment in half, second in "
                        "float); weights are stored and updated in --dtype (no float32 master copy)")


def _int_at_least_1(text: str, expected: str, what: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{what} must be >= 1, got {n}")
    return n


#: the largest --jobs accepted: far above any one machine's CPUs, far below OS process limits
MAX_JOBS = 1024


def jobs_arg(text: str) -> int:
    """``--jobs``: worker processes, an int in [1, MAX_JOBS] (1 runs in this process)."""
    n = _int_at_least_1(text, "a number of worker processes", "worker processes")
    if n > MAX_JOBS:    # a pool that size cannot start: say so before trying
        raise argparse.ArgumentTypeError(f"worker processes must be at most {MAX_JOBS}, got {n}")
    return n


def shape_arg(n: int | tuple[int, ...]) -> Callable[[str], list[int]]:
    return lambda text: ints(text, n=n)


def cpg_list(text: str) -> list[int | str]:
    out: list[int | str] = []
    for v in text.split(","):
        v = v.strip().lower()
        if not v:
            continue
        if v == "dense":
            out.append("dense")
            continue
        out.append(_int_at_least_1(v, "integers or 'dense'", "channels per group"))
    if not out:
        raise argparse.ArgumentTypeError("empty list")
    return out


def machine_list(text: str) -> list:
    try:
        out = [get_machine(v.strip()) for v in text.split(",") if v.strip()]
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if not out:
        raise argparse.ArgumentTypeError(f"expected a machine preset ({', '.join(PRESETS)}), got {text!r}")
    return out


def one_machine(text: str) -> Any:
    machines = machine_list(text)
    if len(machines) != 1:
        raise argparse.ArgumentTypeError(f"expected one machine preset, got {text!r}")
    return machines[0]


class Outputs:
    """Files a command writes: staged in a private temporary folder while the command
    runs and written to their targets only when every one was written, so a failure (or a
    kill mid-run) leaves nothing next to the targets.

    How a target is written (:func:`write_output`): a new or regular file is replaced
    atomically (a temporary file next to it, renamed over it; through a symlink the file
    it points at is replaced and the link kept); a regular file with several hard links is
    rewritten in place so the links stay one file; anything else that exists (a character
    device such as ``/dev/null``, a FIFO) is written through, never replaced. A FIFO
    blocks until a reader opens it, as with any Unix tool.

    Use :meth:`stage` to get the temporary path to write to, then :meth:`commit`; leaving
    the ``with`` block removes the staged files.
    """

    def __init__(self) -> None:
        self._staged: list[tuple[Path, Path]] = []
        self._dir: str | None = None

    def stage(self, target: str | Path, *, suffix: str | None = None) -> Path:
        """A temporary path for ``target`` (with ``suffix``, e.g. ".png" for matplotlib)."""
        target = Path(target)
        if target.is_dir():
            raise OSError(f"{target} is a directory")
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="ipukern-out-")
        tmp = Path(self._dir) / f"{len(self._staged)}{suffix or target.suffix}"
        tmp.touch()
        self._staged.append((tmp, target))
        return tmp

    def drop(self, *targets: str | Path) -> None:
        """Give up the staged files for these targets (e.g. plots without matplotlib)."""
        names = {str(Path(t)) for t in targets}
        for tmp, target in self._staged:
            if str(target) in names:
                tmp.unlink(missing_ok=True)
        self._staged = [(t, f) for t, f in self._staged if str(f) not in names]

    def commit(self) -> list[Path]:
        """Write every staged file to its target; returns the targets."""
        for _, target in self._staged:
            if target.is_dir():
                raise OSError(f"{target} is a directory")
        for tmp, target in self._staged:
            write_output(target, tmp.read_bytes())
        done = [target for _, target in self._staged]
        self._cleanup()
        return done

    def _cleanup(self) -> None:
        self._staged = []
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> "Outputs":
        return self

    def __exit__(self, *exc: Any) -> None:
        self._cleanup()


def write_output(target: str | Path, data: bytes) -> None:
    """Write ``data`` to ``target`` without destroying what is there (see :class:`Outputs`)."""
    target = Path(target)
    try:
        st = os.stat(target)                      # follows symlinks: the file they name
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise OSError(f"{target} is a directory")
    if st is not None and (not stat.S_ISREG(st.st_mode) or st.st_nlink > 1):
        # a device, FIFO or hard-linked file: write through, never rename over it
        with open(target, "wb") as f:
            f.write(data)
        return
    real = os.path.realpath(target)               # keep a symlink: replace what it names
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(real)}.", dir=os.path.dirname(real))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)             # mkstemp makes 0600; outputs get the usual mode
        os.replace(tmp, real)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def gpu_list(text: str) -> list:
    from ..gpu import get_gpu
    if text.strip().lower() in ("", "none"):
        return []
    try:
        return [get_gpu(v.strip()) for v in text.split(",") if v.strip()]
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def machine_file(text: str) -> Any:
    """A MachineSpec from a TOML machine file (argparse type)."""
    from ..machine import machine_from_toml
    try:
        return machine_from_toml(text)
    except (OSError, ValueError) as e:
        raise argparse.ArgumentTypeError(" ".join(str(e).split())) from None


def gpu_one(text: str) -> Any:
    """One GPU preset, or None for 'none' / ''."""
    gpus = gpu_list(text)
    if len(gpus) > 1:
        raise argparse.ArgumentTypeError(f"expected one GPU model, got {text!r}")
    return gpus[0] if gpus else None


def bandwidth_list(text: str) -> list[float | None]:
    """``default`` -> [None] (each machine's own), ``both`` -> [None, 8e12], or numbers in B/s
    (``47.5e12,8e12``; a ``TB`` suffix means 1e12)."""
    out: list[float | None] = []
    for v in text.split(","):
        v = v.strip().lower()
        if not v:
            continue
        if v in ("default", "brief"):
            out.append(None)
        elif v == "both":
            out += [None, DATASHEET_EXCHANGE]
        elif v in ("datasheet",):
            out.append(DATASHEET_EXCHANGE)
        else:
            scale = 1.0
            for suffix in ("tb/s", "tbps", "tb"):
                if v.endswith(suffix):
                    v, scale = v[: -len(suffix)], 1e12
                    break
            try:
                bw = float(v) * scale
            except ValueError:
                raise argparse.ArgumentTypeError(
                    f"expected B/s (e.g. 8e12 or 8TB), 'default' or 'both', got {text!r}") from None
            if not (math.isfinite(bw) and bw > 0):
                raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
            out.append(bw)
    if not out:
        raise argparse.ArgumentTypeError("empty list")
    return out


def apply_bandwidths(machines: list, bandwidths: list[float | None]) -> list:
    out = []
    for m in machines:
        for bw in bandwidths:
            v = m if bw is None else with_exchange_bandwidth(m, bw)
            if all(v.name != o.name for o in out):
                out.append(v)
    return out


def exchange_note(machines: list) -> list[str]:
    """One line per machine: its exchange bandwidth, and for a preset the datasheet figure."""
    lines = []
    for m in machines:
        bw = m.exchange_bandwidth / 1e12
        if PRESETS.get(m.name) == m:
            lines.append(f"{m.name}: exchange {bw:.1f} TB/s (the default, local-SRAM figure; the GC200 "
                         f"datasheet IPU-Exchange is {DATASHEET_EXCHANGE / 1e12:.0f} TB/s: "
                         "--exchange-bandwidth 8e12, or both)")
        else:
            lines.append(f"{m.name}: exchange {bw:.1f} TB/s")
    return lines


def gpu_compare(est: Any, ipu_tflops: float) -> list[str]:
    return [f"GPU model ({est.gpu}, {est.curve} curve): {est.seconds * 1e6:.2f} us, "
            f"{est.tflops:.2f} TFLOP/s, {est.bound}-bound",
            f"  {est.explain()}",
            f"IPU/GPU throughput ratio: {ipu_tflops / est.tflops:.2f}x"]


def _with_suffix(path: str, suffix: str) -> str:
    if not suffix or path == "-":
        return path
    p = Path(path)
    return str(p.with_name(p.stem + suffix + p.suffix))


#: the plots of a single-op profile: (option, file name ending under --out, plots function)
_PROFILE_PLOTS = (("memory_png", "_memory.png", "plot_memory_heatmap"),
                  ("timeline_png", "_timeline.png", "plot_timeline"),
                  ("activity_png", "_activity.png", "plot_activity"))


def _view_targets(args: argparse.Namespace, suffix: str) -> tuple[list[str], list[str], list]:
    """(JSON paths, trace paths, [(PNG path, plots function)]): the options' own paths, then
    the ``--out DIR`` set (``conv.json``, ``conv.trace.json``, ``conv_memory.png``, ...)."""
    jsons = [_with_suffix(args.json, suffix)] if args.json and args.json != "-" else []
    traces = [_with_suffix(args.trace, suffix)] if args.trace else []
    pngs = [(_with_suffix(getattr(args, opt), suffix), fn) for opt, _, fn in _PROFILE_PLOTS
            if getattr(args, opt)]
    directory = out_dir(args)
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
        stem = str(directory / f"{args.command}{suffix}")
        jsons.append(f"{stem}.json")
        traces.append(f"{stem}.trace.json")
        pngs += [(stem + end, fn) for _, end, fn in _PROFILE_PLOTS]
    return jsons, traces, pngs


def write_views(profile: Any, args: argparse.Namespace, *, suffix: str = "") -> None:
    """The files asked for with --json / --trace / --*-png (under exactly the names given; a
    PNG path without an extension still gets PNG data under that name) and ``--out DIR``'s
    set, all or none; ``suffix`` goes before each file's extension (one set of files per
    machine variant)."""
    if args.json == "-":
        args.json_stream.write(profile.to_json(indent=1) + "\n")
        args.json_stream.flush()
    jsons, traces, pngs = _view_targets(args, suffix)
    with Outputs() as out:
        for path in jsons:
            out.stage(path).write_text(profile.to_json(indent=1))
        for path in traces:
            profile.to_trace(out.stage(path))
        if pngs:
            from .. import plots
            try:
                for path, fn in pngs:
                    getattr(plots, fn)(profile, out.stage(path, suffix=".png"))
            except ImportError:
                print(f"profile PNGs not written: {plots.PLOT_INSTALL_HINT}", file=sys.stderr)
                out.drop(*(p for p, _ in pngs))
        for path in out.commit():
            note = " (open it in ui.perfetto.dev or chrome://tracing)" if str(path) in traces else ""
            print(f"wrote {path}{note}")


def add_common(p: argparse.ArgumentParser, *, machine_default: str = "GC200") -> None:
    p.add_argument("--dtype", choices=["float16", "float32"], default="float16",
                   help="input dtype (default float16)")
    add_partials(p, "float")
    p.add_argument("--exchange-bandwidth", type=bandwidth_list, default=[None], metavar="B/s",
                   help="aggregate on-chip exchange bandwidth in B/s: 'default' (47.5e12 on GC200), "
                        "'datasheet' (8e12, the GC200 datasheet's IPU-Exchange figure), a number "
                        "such as 8e12 or 8TB, or 'both' (default and datasheet side by side)")
    p.add_argument("--gpu-efficiency", choices=["cudnn", "optimized"], default="cudnn",
                   help="GPU software the GPU model stands for (default cudnn)")
    add_progress_options(p)


#: why each default (docs/usage.rst, "Defaults"): one op is planned as PopLibs plans it by
#: default; a network or a training step as Graphcore's published runs of it were configured
_PARTIALS_WHY = {
    "float": "default float: PopLibs' default partialsType for convolutions and matmuls "
             "(fp16->fp32 AMP, 125 TFLOP/s on GC200)",
    "half": "default half: the setting of Graphcore's published network runs (MLPerf ResNet-50, "
            "BERT), which ipukern validate compares with; float is PopLibs' single-op default; "
            "float32 inputs accumulate in float either way",
}


def add_partials(p: argparse.ArgumentParser, default: str) -> None:
    """``--partials half|float`` with the documented default of the command's kind: float for
    one op or a sweep of ops, half for networks, training and tuning."""
    p.add_argument("--partials", choices=["float", "half"], default=default,
                   help=f"conv/matmul accumulation dtype ({_PARTIALS_WHY[default]})")


def add_progress_options(p: argparse.ArgumentParser) -> None:
    """The ``--progress`` / ``--no-progress`` pair (default: a progress line on a terminal only)."""
    prog = p.add_mutually_exclusive_group()
    prog.add_argument("--progress", dest="progress", action="store_true", default=None,
                      help="show a progress line on stderr even when it is not a terminal")
    prog.add_argument("--no-progress", dest="progress", action="store_false",
                      help="never show a progress line")


def add_run_options(p: argparse.ArgumentParser) -> None:
    """Options shared by the single-op commands (conv, matmul)."""
    mg = p.add_mutually_exclusive_group()
    mg.add_argument("--machine", type=one_machine, default=PRESETS["GC200"],
                    metavar="NAME", help="IPU preset: GC200 (default), BOW or GC2")
    mg.add_argument("--machine-file", dest="machine", type=machine_file, metavar="FILE.toml",
                    help="a machine described in a TOML file (a preset's variant or a full "
                         "spec; see ipukern.machine)")
    p.add_argument("--execute", action="store_true",
                   help="run on random data instead of estimating; values are not checked")
    p.add_argument("--seed", type=int, default=0, help="random data seed for --execute")
    p.add_argument("--gpu", type=gpu_one, default="A100_40GB", metavar="NAME",
                   help="GPU model to compare with (A100_40GB, A100_80GB, V100, H100, "
                        "TITAN_RTX) or 'none' (default A100_40GB)")


def add_views(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", metavar="PATH",
                   help="write the profile as JSON ('-': to stdout, the report then goes to stderr)")
    p.add_argument("--trace", metavar="PATH",
                   help="write a Chrome/Perfetto trace-event JSON of every superstep, per "
                        "group of 32 tiles (open in ui.perfetto.dev)")
    p.add_argument("--memory-png", metavar="PATH",
                   help="write a per-tile memory heat map (the suffix picks PNG, PDF or SVG)")
    p.add_argument("--timeline-png", metavar="PATH",
                   help="write a superstep timeline (the suffix picks PNG, PDF or SVG)")
    p.add_argument("--activity-png", metavar="PATH",
                   help="write tiles busy/idle and the compute imbalance per superstep "
                        "(the suffix picks PNG, PDF or SVG)")
    p.add_argument("--out", metavar="DIR",
                   help=f"write {p.prog.split()[-1]}.json, {p.prog.split()[-1]}.trace.json and the memory, "
                        "timeline and activity PNGs into this directory (default: no files)")


# =========================================================================== document commands
def add_machine_options(p: argparse.ArgumentParser, *, default: Any = PRESETS["GC200"],
                        what: str = "IPU preset: GC200 (default), BOW or GC2") -> None:
    """``--machine NAME`` / ``--machine-file FILE.toml`` (one of them), as the single-op commands."""
    mg = p.add_mutually_exclusive_group()
    mg.add_argument("--machine", type=one_machine, default=default, metavar="NAME", help=what)
    mg.add_argument("--machine-file", dest="machine", type=machine_file, metavar="FILE.toml",
                    help="a machine described in a TOML file (a preset's variant or a full spec; "
                         "see ipukern.machine)")


def add_document_views(p: argparse.ArgumentParser, *, out_files: str) -> None:
    """``--json PATH|-``, ``--trace PATH`` and ``--out DIR`` of the commands whose result is a
    document (network, train, compare); ``out_files`` says what ``--out`` holds."""
    p.add_argument("--json", metavar="PATH",
                   help="write the result as JSON ('-': to stdout, the report then goes to stderr)")
    p.add_argument("--trace", metavar="PATH",
                   help="write a Chrome/Perfetto trace-event JSON (open in ui.perfetto.dev)")
    p.add_argument("--out", metavar="DIR",
                   help=f"write {out_files} into this directory (default: no files)")


def out_dir(args: argparse.Namespace) -> Path | None:
    """``--out`` as a directory (made when missing); an existing file is refused up front,
    before any long work."""
    if not getattr(args, "out", None):
        return None
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise OSError(f"--out {out} exists and is not a directory")
    return out


#: a file a command writes: (path, writer(path), is_plot); plots are skipped without matplotlib
OutFile = tuple[Path, Callable[[Path], Any], bool]


def write_documents(args: argparse.Namespace, to_json: Callable[[], str],
                    to_trace: Callable[[Path], Any] | None, files: Sequence[OutFile] = ()) -> None:
    """``--json`` (``-``: stdout), ``--trace`` and the ``--out`` files, all or none (staged,
    then renamed into place); one ``wrote`` line per file, on the report's stream."""
    if args.json == "-":
        args.json_stream.write(to_json() + "\n")
        args.json_stream.flush()
    want: list[OutFile] = list(files)
    if args.json and args.json != "-":
        want.append((Path(args.json), lambda p: p.write_text(to_json()), False))
    if args.trace and to_trace is not None:
        want.append((Path(args.trace), to_trace, False))
    directory = out_dir(args)
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
    missing_plots = False
    with Outputs() as out:
        for path, writer, is_plot in want:
            try:
                writer(out.stage(path))
            except ImportError:
                if not is_plot:
                    raise
                out.drop(path)
                missing_plots = True
        if missing_plots:
            from ..plots import PLOT_INSTALL_HINT
            print(f"plots not written: {PLOT_INSTALL_HINT}")
        trace = str(args.trace) if args.trace else None
        for path in out.commit():
            note = " (open it in ui.perfetto.dev or chrome://tracing)" if str(path) == trace else ""
            print(f"wrote {path}{note}")
