#!/usr/bin/env python3
"""The cudnn grouped-conv curve's error on the measurements it was derived from, priced with
the kernel model's structure.

Usage::

    PYTHONPATH=. python scripts/check_grouped_curve.py /path/to/grouped_conv_bench/git-dir

Dataset A is ``runs/titanrtx_2D.txt`` of github.com/sara-nl/grouped_conv_bench at commit
``COMMIT`` (GPL-3.0; read with ``git show``, nothing of it is copied into ipukern): one
``nn.Conv2d(C, C, 3, padding=1, groups=g)`` training step per row on a TITAN RTX, FP32,
NCHW, reported as images/s. A step there is the forward conv, the weight gradient (the
input needs no gradient) and about 10 element-wise passes over one activation
(``ipukern.gpu.model``, "Calibration of the cudnn curve"). This prices each row as the
kernel model does (:func:`ipukern.gpu.kernels.conv_kernels` for ``forward`` and ``wgrad``,
grouped kernels on the curve, the wgrad at ``GROUPED_WGRAD_TO_FORWARD`` times the forward;
dense rows as implicit GEMM / Winograd) plus the passes at 85% of the DRAM bandwidth, and
prints the error per channels-per-group. The curve points are medians of these rows, so
this is an in-sample error: how far single shapes sit from the curve.
"""
from __future__ import annotations

import math
import subprocess
import sys
from collections import defaultdict

from ipukern.conv import ConvParams
from ipukern.gpu import get_gpu
from ipukern.gpu.kernels import conv_kernels, kernel_seconds

COMMIT = "3c59b593c9bb5c012e242291b28c63442c9c87dc"
PASSES, PASS_EFFICIENCY = 10, 0.85      # the curve derivation's element-wise passes


def rows(git_dir: str) -> list[tuple[int, int, int, int, int, float]]:
    """(batch, C, groups, H, W, img/s) per line of runs/titanrtx_2D.txt at COMMIT."""
    text = subprocess.run(["git", "--git-dir", git_dir, "show", f"{COMMIT}:runs/titanrtx_2D.txt"],
                          check=True, capture_output=True, text=True).stdout
    out = []
    for line in text.split("\n"):
        if line.strip():
            _, b, cin, cout, k, g, h, w, ips = line.split()
            assert cin == cout and k == "3", line
            out.append((int(b), int(cin), int(g), int(h), int(w), float(ips)))
    return out


def step_seconds(b: int, c: int, g: int, h: int, w: int) -> float:
    gpu = get_gpu("TITAN_RTX")
    p = ConvParams(batch=b, in_channels=c, out_channels=c, in_h=h, in_w=w, kernel_h=3, kernel_w=3,
                   padding=(1, 1), groups=g, dtype="float32")
    conv = sum(kernel_seconds(kc, gpu, "float32").seconds
               for phase in ("forward", "wgrad") for kc in conv_kernels(p, phase, gpu, "float32"))
    act = b * c * h * w * 4
    return conv + PASSES * act / (PASS_EFFICIENCY * gpu.hbm_bandwidth)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.split("\n\n")[1].strip(), file=sys.stderr)
        return 2
    by_cpg: dict[str, list[float]] = defaultdict(list)
    for b, c, g, h, w, ips in rows(argv[0]):
        model = step_seconds(b, c, g, h, w)
        measured = b / ips
        key = "dense" if g == 1 else f"{c // g}"
        by_cpg[key].append(model / measured)
    print("cpg     rows  MAPE   geomean model/measured")
    order = sorted((k for k in by_cpg if k != "dense"), key=int) + ["dense"]
    every = [r for k in order if k != "dense" for r in by_cpg[k]]
    for k in order + ["grouped"]:
        rs = every if k == "grouped" else by_cpg[k]
        mape = 100 * sum(abs(r - 1) for r in rs) / len(rs)
        geo = math.exp(sum(math.log(r) for r in rs) / len(rs))
        print(f"{k:7s} {len(rs):4d}  {mape:5.1f}%  {geo:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
