"""The ``ipukern`` command line.

Subcommands
-----------
``ipukern scaling``  the grouped-conv scaling sweep (IPU model vs GPU model): prints a table,
                     writes ``scaling.csv``, ``scaling.json`` and ``scaling.png``.
``ipukern conv``     estimate (or ``--execute``) one grouped conv2d and print its profile;
                     optional memory heat map / superstep timeline PNGs.
``ipukern matmul``   the same for a matmul (needs ``ipukern.estimate_matmul``).
``ipukern info``     machine presets (and the GPU models) with their sources.

Exit codes: 0 success; 2 usage errors (argparse: bad option, unparsable number, unknown
preset); 1 model errors and unwritable outputs, reported in one line (an impossible layer,
a layer that does not fit the tiles, a missing compiled kernel, --out naming a file).

A progress indicator goes to stderr for work that takes more than about a second, only when
stderr is a terminal (``--progress`` forces it, ``--no-progress`` silences it), so piped
output and files stay clean.
"""
from __future__ import annotations

import argparse
import math
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence, TextIO

from .machine import PRESETS, get_machine
from .memory import TileMemoryError

__all__ = ["main", "build_parser", "Progress"]

#: the datasheet IPU-Exchange figure (GC200 product page), shown next to the brief's default
DATASHEET_EXCHANGE = 8e12


# =========================================================================== progress
class Progress:
    """A dependency-free progress bar / elapsed-time indicator on one stderr line.

    Nothing is drawn for the first ``delay`` seconds, so quick jobs print nothing. Call the
    object as ``progress(done, total, label)`` (the sweep's callback signature); use it as a
    context manager to get a ticking "elapsed" line for a single long call and to clear the
    line at the end.
    """

    def __init__(self, title: str, *, enabled: bool, stream: TextIO | None = None,
                 delay: float = 1.0, width: int = 28):
        self.title = title
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.delay = delay
        self.width = width
        self.t0 = time.perf_counter()
        self._drawn = 0
        self._state: tuple[int, int, str] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def __call__(self, done: int, total: int, label: str = "") -> None:
        self._state = (done, total, label)
        self._draw()

    def _draw(self) -> None:
        if not self.enabled:
            return
        elapsed = time.perf_counter() - self.t0
        if elapsed < self.delay:
            return
        if self._state is None:
            line = f"{self.title} ... {elapsed:.0f} s"
        else:
            done, total, label = self._state
            frac = done / total if total else 1.0
            fill = int(round(self.width * frac))
            eta = elapsed / done * (total - done) if done else float("nan")
            eta_txt = f", ~{eta:.0f} s left" if done and done < total else ""
            line = (f"{self.title} [{'#' * fill}{'.' * (self.width - fill)}] {done}/{total} "
                    f"{elapsed:.0f} s{eta_txt}  {label}")
        with self._lock:
            pad = max(0, self._drawn - len(line))
            self.stream.write("\r" + line + " " * pad)
            self.stream.flush()
            self._drawn = len(line)

    def _tick(self) -> None:
        while not self._stop.wait(0.25):
            self._draw()

    def __enter__(self) -> "Progress":
        if self.enabled:
            self._thread = threading.Thread(target=self._tick, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Stop ticking and erase the line."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            if self._drawn:
                self.stream.write("\r" + " " * self._drawn + "\r")
                self.stream.flush()
                self._drawn = 0


def _progress_enabled(args: argparse.Namespace) -> bool:
    if args.progress is not None:
        return args.progress
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


# =========================================================================== parsing helpers
def _ints(text: str, *, n: int | tuple[int, ...] | None = None) -> list[int]:
    # argparse prefixes the message with the option's name
    try:
        vals = [int(v) for v in text.replace("x", ",").split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    allowed = (n,) if isinstance(n, int) else n
    if allowed is not None and len(vals) not in allowed:
        raise argparse.ArgumentTypeError(
            f"expected {' or '.join(map(str, allowed))} integers, got {text!r}")
    if any(v < 0 for v in vals):
        raise argparse.ArgumentTypeError(f"values must be >= 0, got {text!r}")
    return vals


def _int_list(text: str) -> list[int]:
    return _ints(text)


def _shape(n: int | tuple[int, ...]) -> Callable[[str], list[int]]:
    return lambda text: _ints(text, n=n)


def _cpg_list(text: str) -> list[int | str]:
    out: list[int | str] = []
    for v in text.split(","):
        v = v.strip().lower()
        if not v:
            continue
        if v == "dense":
            out.append("dense")
            continue
        try:
            c = int(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected integers or 'dense', got {v!r}")
        if c < 1:
            raise argparse.ArgumentTypeError(f"channels per group must be >= 1, got {c}")
        out.append(c)
    if not out:
        raise argparse.ArgumentTypeError("empty list")
    return out


def _machine_list(text: str) -> list:
    try:
        return [get_machine(v.strip()) for v in text.split(",") if v.strip()]
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e))


def _gpu_list(text: str) -> list:
    from .gpu import get_gpu
    if text.strip().lower() in ("", "none"):
        return []
    try:
        return [get_gpu(v.strip()) for v in text.split(",") if v.strip()]
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e))


def _bandwidths(text: str) -> list[float | None]:
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
                    f"expected B/s (e.g. 8e12 or 8TB), 'default' or 'both', got {text!r}")
            if not (math.isfinite(bw) and bw > 0):
                raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
            out.append(bw)
    if not out:
        raise argparse.ArgumentTypeError("empty list")
    return out


def _apply_bandwidths(machines: list, bandwidths: list[float | None]) -> list:
    from .scaling import with_exchange_bandwidth
    out = []
    for m in machines:
        for bw in bandwidths:
            v = m if bw is None else with_exchange_bandwidth(m, bw)
            if all(v.name != o.name for o in out):
                out.append(v)
    return out


def _exchange_note(machines: list) -> list[str]:
    """One line per machine: its exchange bandwidth, and for a preset the datasheet figure."""
    lines = []
    for m in machines:
        bw = m.exchange_bandwidth / 1e12
        if PRESETS.get(m.name) == m:
            lines.append(f"{m.name}: exchange {bw:.1f} TB/s (the brief's default; the GC200 "
                         f"datasheet IPU-Exchange is {DATASHEET_EXCHANGE / 1e12:.0f} TB/s: "
                         "--exchange-bandwidth 8e12, or both)")
        else:
            lines.append(f"{m.name}: exchange {bw:.1f} TB/s")
    return lines


# =========================================================================== scaling
def _cmd_scaling(args: argparse.Namespace) -> int:
    from . import scaling as sc

    layers: list[sc.ConvLayer] = []
    if args.layer:
        names = [n.strip() for n in args.layer.split(",") if n.strip()]
        if names == ["all"]:
            layers += list(sc.DEFAULT_LAYERS)
        else:
            layers += [sc.get_layer(n) for n in names]
    if args.shape is not None:
        n, c, h, w = args.shape
        layers.append(sc.ConvLayer(args.name, channels=c, height=h, width=w, kernel=args.kernel,
                                   stride=args.stride, padding=args.padding,
                                   out_channels=args.out_channels, batch=n))
    if not layers:
        layers = list(sc.DEFAULT_LAYERS)
    if args.batch is not None:
        batch: Any = args.batch
    elif args.shape is not None and not args.layer:
        batch = None                              # the --shape's own N
    else:
        batch = list(sc.DEFAULT_BATCH)
    machines = _apply_bandwidths(args.machines, args.exchange_bandwidth)
    if args.gpus is None:
        from .gpu import A100_40GB
        args.gpus = [A100_40GB]

    out_dir = Path(args.out)
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"--out {out_dir} exists and is not a directory")
    out_dir.mkdir(parents=True, exist_ok=True)
    if not args.quiet:
        print("ipukern scaling: grouped conv2d throughput vs channels per group "
              f"({args.dtype}, IPU partials {args.partials}, GPU curve {args.gpu_efficiency})")
        for line in _exchange_note(machines):
            print("  " + line)
    with Progress("sweep", enabled=_progress_enabled(args)) as bar:
        result = sc.grouped_conv_sweep(
            layers, channels_per_group=args.cpg, machines=machines, gpus=args.gpus,
            dtype=args.dtype, batch=batch, partials=args.partials,
            gpu_efficiency=args.gpu_efficiency, progress=bar)
    if not result:
        raise ValueError("no (layer, cpg) point to sweep: every requested channels-per-group "
                         "value was skipped (" + "; ".join(
                             f"{s['layer']}: {s['reason']}" for s in result.skipped) + ")")
    print()
    print(result.format_table())
    if result.skipped and not args.quiet:
        by_layer: dict[str, list[int]] = {}
        for s in result.skipped:
            by_layer.setdefault(s["layer"], []).append(s["channels_per_group"])
        print("skipped (channels per group that do not divide the channels): " + "; ".join(
            f"{k} cpg {','.join(map(str, v))}" for k, v in by_layer.items()))
    csv_path = out_dir / "scaling.csv"
    json_path = out_dir / "scaling.json"
    result.to_csv(csv_path)
    result.to_json(json_path)
    written = [csv_path, json_path]
    if not args.no_plot:
        from . import plots
        try:
            written.append(plots.plot_scaling(result, out_dir / "scaling.png"))
        except ImportError:
            print(f"scaling.png not written: {plots.PLOT_INSTALL_HINT}", file=sys.stderr)
    if not args.quiet:
        print(f"\n{len(result)} rows in {result.meta['host_seconds']:.1f} s; wrote "
              + ", ".join(str(p) for p in written))
    return 0


# =========================================================================== conv
def _gpu_compare(est: Any, ipu_tflops: float) -> list[str]:
    return [f"GPU model ({est.gpu}, {est.curve} curve): {est.seconds * 1e6:.2f} us, "
            f"{est.tflops:.2f} TFLOP/s, {est.bound}-bound",
            f"  {est.explain()}",
            f"IPU/GPU throughput ratio: {ipu_tflops / est.tflops:.2f}x"]


def _write_views(profile: Any, args: argparse.Namespace) -> None:
    if args.json:
        Path(args.json).write_text(profile.to_json(indent=1))
        print(f"wrote {args.json}")
    if args.memory_png or args.timeline_png:
        from . import plots
        try:
            if args.memory_png:
                plots.plot_memory_heatmap(profile, args.memory_png)
                print(f"wrote {args.memory_png}")
            if args.timeline_png:
                plots.plot_timeline(profile, args.timeline_png)
                print(f"wrote {args.timeline_png}")
        except ImportError:
            print(f"profile PNGs not written: {plots.PLOT_INSTALL_HINT}", file=sys.stderr)


def _conv_kernel_available() -> bool:
    import importlib.util
    try:
        return importlib.util.find_spec("ipukern._kernels._conv") is not None
    except ImportError:  # pragma: no cover
        return False


def _pair(v: list[int]) -> tuple[int, int]:
    return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])


def _cmd_conv(args: argparse.Namespace) -> int:
    import numpy as np

    from . import ops
    from .gpu import estimate_conv
    from .params import ConvParams

    n, c, h, w = args.shape
    k = args.kernel if len(args.kernel) == 2 else args.kernel * 2
    if args.groups is not None and args.cpg is not None:
        raise ValueError("give --groups or --cpg, not both")
    if args.cpg is not None:
        if args.cpg < 1 or c % args.cpg:
            raise ValueError(f"--cpg {args.cpg} does not divide the {c} input channels")
        groups = c // args.cpg
    else:
        groups = args.groups if args.groups is not None else 1
    out_c = args.out_channels if args.out_channels is not None else c
    if groups < 1 or c % groups:
        raise ValueError(f"groups={groups} does not divide the {c} input channels")
    padding = args.padding if args.padding is not None else [k[0] // 2, k[1] // 2]
    machine = _apply_bandwidths([args.machine], args.exchange_bandwidth)[0]
    params = ConvParams.from_shapes((n, c, h, w), (out_c, c // groups, k[0], k[1]),
                                    stride=_pair(args.stride), padding=_pair(padding),
                                    dilation=_pair(args.dilation), groups=groups,
                                    dtype=args.dtype, partials=args.partials)
    kw = dict(stride=params.stride, padding=params.padding, dilation=params.dilation,
              groups=groups, machine=machine, partials=args.partials, method=args.method)
    with Progress("conv", enabled=_progress_enabled(args)):
        if args.execute:
            if not _conv_kernel_available():
                raise RuntimeError("conv --execute needs the compiled conv kernel "
                                   "(ipukern._kernels._conv), which this build does not have; "
                                   "run without --execute to estimate")
            rng = np.random.default_rng(args.seed)
            dt = np.dtype(params.dtype)
            x = rng.standard_normal(params.input_shape).astype(dt)
            wt = rng.standard_normal(params.weight_shape).astype(dt)
            b = rng.standard_normal(params.out_channels).astype(dt) if args.bias else None
            run = ops.conv.conv2d(x, wt, b, **kw)
            profile = run.profile
        else:
            profile = ops.conv.estimate_conv2d(params.input_shape, params.weight_shape,
                                               dtype=params.dtype, bias=args.bias, **kw)
    mode = "executed on random data" if args.execute else "estimate mode (no data touched)"
    print(f"conv2d {params.describe()} on {machine.name}: {mode}")
    print(profile.summary())
    if args.execute:
        out = run.output
        print(f"output {out.shape} {out.dtype}: mean {float(np.mean(out, dtype=np.float64)):.4g}, "
              f"mean |y| {float(np.mean(np.abs(out), dtype=np.float64)):.4g} (values not checked)")
    if args.gpu:
        print()
        for line in _gpu_compare(estimate_conv(params, args.gpu, efficiency=args.gpu_efficiency),
                                 profile.tflops):
            print(line)
    _write_views(profile, args)
    return 0


# =========================================================================== matmul
def _cmd_matmul(args: argparse.Namespace) -> int:
    import numpy as np

    import ipukern

    m, k, n = args.shape
    if min(m, k, n) < 1:
        raise ValueError(f"matmul sizes must be >= 1, got {m}x{k}x{n}")
    needed = "matmul" if args.execute else "estimate_matmul"
    fn = getattr(ipukern, needed, None)
    if fn is None:
        raise RuntimeError(f"ipukern matmul needs ipukern.{needed} (issue 4), which this "
                           "version of ipukern does not have yet")
    machine = _apply_bandwidths([args.machine], args.exchange_bandwidth)[0]
    with Progress("matmul", enabled=_progress_enabled(args)):
        if args.execute:
            rng = np.random.default_rng(args.seed)
            a = rng.standard_normal((m, k)).astype(args.dtype)
            b = rng.standard_normal((k, n)).astype(args.dtype)
            run = fn(a, b, machine=machine, partials=args.partials)
            profile = run.profile
        else:
            profile = fn((m, k), (k, n), dtype=args.dtype, machine=machine,
                         partials=args.partials)
    mode = "executed on random data" if args.execute else "estimate mode (no data touched)"
    print(f"matmul ({m}x{k}) @ ({k}x{n}) {args.dtype} on {machine.name}: {mode}")
    print(profile.summary())
    if args.gpu:
        from .gpu import estimate_matmul as gpu_matmul
        print()
        for line in _gpu_compare(gpu_matmul(m, k, n, dtype=args.dtype, gpu=args.gpu,
                                            efficiency=args.gpu_efficiency), profile.tflops):
            print(line)
    _write_views(profile, args)
    return 0


# =========================================================================== info
def _cmd_info(args: argparse.Namespace) -> int:
    from ._kernels import _exchange
    from .gpu import GPU_PRESETS
    for spec in PRESETS.values():
        print(spec.describe())
        print()
    print(f"datasheet exchange variant: GC200 with --exchange-bandwidth 8e12 "
          f"({DATASHEET_EXCHANGE / 1e12:.0f} TB/s instead of the brief's "
          f"{PRESETS['GC200'].exchange_bandwidth / 1e12:.1f} TB/s)")
    print()
    if args.gpus:
        for g in GPU_PRESETS.values():
            print(g.describe())
            print()
    else:
        print("GPU models: " + ", ".join(GPU_PRESETS) + " (ipukern info --gpus for details)")
    print(f"host: {_exchange.max_threads()} threads, OpenMP {'on' if _exchange.has_openmp() else 'off'}")
    return 0


# =========================================================================== parser
def _add_common(p: argparse.ArgumentParser, *, machine_default: str = "GC200") -> None:
    p.add_argument("--dtype", choices=["float16", "float32"], default="float16",
                   help="input dtype (default float16)")
    p.add_argument("--partials", choices=["float", "half"], default="float",
                   help="IPU accumulation dtype (default float: fp16->fp32 AMP, 125 TFLOP/s on GC200)")
    p.add_argument("--exchange-bandwidth", type=_bandwidths, default=[None], metavar="B/s",
                   help="aggregate on-chip exchange bandwidth: 'default' (the brief's 47.5e12 on "
                        "GC200), a number such as 8e12 (the datasheet IPU-Exchange figure), or "
                        "'both' (default and 8e12 side by side)")
    p.add_argument("--gpu-efficiency", choices=["cudnn", "optimized"], default="cudnn",
                   help="GPU software the GPU model stands for (default cudnn)")
    prog = p.add_mutually_exclusive_group()
    prog.add_argument("--progress", dest="progress", action="store_true", default=None,
                      help="show a progress line on stderr even when it is not a terminal")
    prog.add_argument("--no-progress", dest="progress", action="store_false",
                      help="never show a progress line")


def _add_run_options(p: argparse.ArgumentParser) -> None:
    """Options shared by the single-op commands (conv, matmul)."""
    p.add_argument("--machine", type=lambda v: _machine_list(v)[0], default=PRESETS["GC200"])
    p.add_argument("--execute", action="store_true",
                   help="run on random data instead of estimating; values are not checked")
    p.add_argument("--seed", type=int, default=0, help="random data seed for --execute")
    p.add_argument("--gpu", default="A100_40GB",
                   help="GPU model to compare with, or '' for none (default A100_40GB)")


def _add_views(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", metavar="PATH", help="write the profile as JSON")
    p.add_argument("--memory-png", metavar="PATH", help="write a per-tile memory heat map (PNG)")
    p.add_argument("--timeline-png", metavar="PATH", help="write a superstep timeline (PNG)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ipukern", description="IPU-class tile machine simulator")
    sub = p.add_subparsers(dest="command", required=True)

    # ---- scaling
    s = sub.add_parser(
        "scaling", help="grouped-conv throughput vs channels per group, IPU vs GPU",
        description="Sweep channels per group for grouped 3x3/5x5 conv layers on the simulated "
                    "IPU (estimate mode) and the GPU model; print a table and write "
                    "scaling.csv, scaling.json and scaling.png into --out.")
    s.add_argument("--layer", metavar="NAMES",
                   help="comma-separated default layers (resnext50_c128, resnext50_c256, "
                        "effnet_b0_dw3, effnet_b0_dw5, mobilenet_v1_dw_s2) or 'all' "
                        "(default: all, unless --shape is given)")
    s.add_argument("--shape", type=_shape(4), metavar="N,C,H,W",
                   help="a custom layer instead of (or, with --layer, besides) the defaults; "
                        "N is its batch unless --batch is given")
    s.add_argument("--name", default="custom", help="name of the --shape layer (default custom)")
    s.add_argument("--kernel", type=int, default=3, help="--shape layer kernel size (default 3)")
    s.add_argument("--stride", type=int, default=1, help="--shape layer stride (default 1)")
    s.add_argument("--padding", type=int, default=None,
                   help="--shape layer padding (default kernel // 2)")
    s.add_argument("--out-channels", type=int, default=None,
                   help="--shape layer output channels (default C)")
    s.add_argument("--batch", type=_int_list, default=None, metavar="N[,N...]",
                   help="batch sizes (default 1,32)")
    s.add_argument("--cpg", type=_cpg_list, default=[1, 2, 4, 8, 16, 32, 64, "dense"],
                   metavar="LIST", help="input channels per group, integers or 'dense' "
                                        "(default 1,2,4,8,16,32,64,dense); values that do not "
                                        "divide a layer's channels are skipped")
    s.add_argument("--machines", type=_machine_list, default=[PRESETS["GC200"]],
                   metavar="NAMES", help="IPU presets, e.g. GC200,BOW,GC2 (default GC200)")
    s.add_argument("--gpus", type=_gpu_list, default=None, metavar="NAMES",
                   help="GPU models, e.g. A100_40GB,V100,H100 or 'none' (default A100_40GB)")
    s.add_argument("--out", default=".", metavar="DIR", help="output directory (default .)")
    s.add_argument("--no-plot", action="store_true", help="do not draw scaling.png")
    s.add_argument("-q", "--quiet", action="store_true", help="print only the table")
    _add_common(s)
    s.set_defaults(func=_cmd_scaling)

    # ---- conv
    c = sub.add_parser("conv", help="estimate (or --execute) one grouped conv2d, print its profile",
                       description="Plan one grouped conv2d on the simulated IPU and print the "
                                   "profile (supersteps, cycles, memory) and the GPU model's "
                                   "figure. Example: the ResNeXt-50 grouped layer is "
                                   "--shape 1,128,56,56 --cpg 4.")
    c.add_argument("--shape", type=_shape(4), default=[1, 128, 56, 56],
                   metavar="N,C,H,W", help="input shape (default 1,128,56,56)")
    c.add_argument("--out-channels", type=int, default=None, help="output channels (default C)")
    c.add_argument("--kernel", type=_shape((1, 2)), default=[3], metavar="K[,K]",
                   help="kernel size (default 3)")
    c.add_argument("--stride", type=_shape((1, 2)), default=[1], metavar="S[,S]")
    c.add_argument("--padding", type=_shape((1, 2)), default=None, metavar="P[,P]",
                   help="padding (default kernel // 2)")
    c.add_argument("--dilation", type=_shape((1, 2)), default=[1], metavar="D[,D]")
    g = c.add_mutually_exclusive_group()
    g.add_argument("--groups", type=int, default=None, help="groups (default 1)")
    g.add_argument("--cpg", type=int, default=None, help="input channels per group")
    c.add_argument("--method", choices=["AMP", "SLIC", "VMAC", "HMAC"], default=None,
                   help="force a vertex method (default: the planner's choice)")
    c.add_argument("--bias", action="store_true", help="include a bias add")
    _add_run_options(c)
    _add_common(c)
    _add_views(c)
    c.set_defaults(func=_cmd_conv)

    # ---- matmul
    m = sub.add_parser("matmul", help="estimate (or --execute) one matmul, print its profile")
    m.add_argument("--shape", type=_shape(3), default=[1024, 1024, 1024],
                   metavar="M,K,N", help="(M x K) @ (K x N) (default 1024,1024,1024)")
    _add_run_options(m)
    _add_common(m)
    _add_views(m)
    m.set_defaults(func=_cmd_matmul)

    # ---- info
    info = sub.add_parser("info", help="print the machine presets and their sources")
    info.add_argument("--gpus", action="store_true", help="also describe the GPU models")
    info.set_defaults(func=_cmd_info)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (argparse exits with 2 on usage errors)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (TileMemoryError, ValueError, RuntimeError, OSError) as e:
        msg = " ".join(str(e).split())
        print(f"ipukern {args.command}: error: {msg}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
