"""Conv programs built and run for the fusion and reduction tests (tests/core/test_fused_*.py,
test_shadow.py, tests/conv/test_multistage_reduce.py): the 96- and 128-tile machines, the fused
conv cases, a plan run against float64, and a program run with and without fusion."""
from __future__ import annotations

import numpy as np

import ipukern as ik
from ipukern.conv import build_conv_program
from ipukern.conv.estimators import candidate_methods
from ipukern.conv.layout import Split
from ipukern.conv.params import ConvParams
from ipukern.conv import ConvPlan, plan_conv
from ipukern.core.host import fused
from ipukern.core.host import run as host_run
from ipukern.core.program import Program

GC200_96 = ik.GC200.replace(n_tiles=96, name="GC200-96")
GC200_128 = ik.GC200.replace(n_tiles=128, name="GC200-128")


#: conv cases with a fused exchange (name: ConvParams.from_shapes arguments)
CONV_CASES = {
    "plain 3x3 padded": dict(i=(2, 16, 9, 9), w=(24, 16, 3, 3), padding=1),
    "grouped strided": dict(i=(2, 24, 11, 10), w=(36, 6, 3, 3), stride=2, padding=1, groups=4),
    "depthwise": dict(i=(2, 32, 8, 8), w=(32, 1, 3, 3), padding=1, groups=32),
    "dilated": dict(i=(1, 8, 12, 12), w=(16, 8, 3, 3), dilation=2, padding=2),
    "1x1 strided": dict(i=(3, 40, 7, 7), w=(24, 40, 1, 1), stride=2),
    "5x3 uneven stride": dict(i=(2, 12, 13, 9), w=(20, 12, 5, 3), stride=(2, 1), padding=(2, 1)),
    "fp16 half partials": dict(i=(2, 32, 6, 6), w=(40, 32, 3, 3), padding=1, dtype="float16",
                               partials="half"),
    "fp16 float partials": dict(i=(2, 16, 7, 5), w=(16, 16, 1, 1), dtype="float16"),
    "wide input (partials)": dict(i=(1, 2048, 3, 3), w=(64, 2048, 1, 1)),
}


def conv_program(case: str):
    """The conv program of ``CONV_CASES[case]`` on GC200_96 with a bias, its inputs written."""
    c = dict(CONV_CASES[case])
    p = ConvParams.from_shapes(c.pop("i"), c.pop("w"), **c)
    cp = build_conv_program(plan_conv(p, GC200_96, bias=True))
    rng = np.random.default_rng(len(case))
    cp.write_inputs(rng.standard_normal(p.input_shape).astype(p.dtype),
                    rng.standard_normal(p.weight_shape).astype(p.dtype),
                    rng.standard_normal(p.out_channels).astype(p.dtype))
    return cp


def run_plan(p, split, serial=1, machine=GC200_128, seed=0):
    """Build and run (execute and estimate, equal cycles) the AMP plan of ``p`` with ``split``
    and ``serial`` slices on random inputs; (plan, conv program, profile, output, float64
    reference, float64 sum of |products|) for the accuracy bounds."""
    amp = next(c for c in candidate_methods(machine, p.dtype, p.partials, p.in_per_group,
                                            p.out_per_group, p.kernel_w, p.stride[1])
               if c.method == "AMP" and c.partials_dtype == p.partials)
    split = Split(**{**split.__dict__, "in_grain": amp.in_chans_per_group,
                     "out_grain": amp.out_chans_per_group})
    plan = ConvPlan(params=p, machine=machine, method=amp, split=split, serial=serial,
                    bias=False, estimated_cycles=0, estimated_bytes_per_tile=0)
    cp = build_conv_program(plan)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(p.input_shape).astype(p.dtype)
    w = rng.standard_normal(p.weight_shape).astype(p.dtype)
    cp.write_inputs(x, w)
    run = cp.device.run(cp.program, "execute")
    est = cp.device.run(cp.program, "estimate")
    assert est.total_cycles == run.total_cycles
    y = cp.device.read(cp.y).astype(np.float64)
    # float64 reference of the same values: a 1x1 conv over one row is a matmul
    xs, ws = x.astype(np.float64), w.astype(np.float64)
    ref = np.einsum("nchw,kc->nkhw", xs, ws[:, :, 0, 0])
    mag = np.einsum("nchw,kc->nkhw", np.abs(xs), np.abs(ws[:, :, 0, 0]))
    return plan, cp, run, y, ref, mag


def unwritten(program: Program, shape: tuple) -> np.ndarray:
    """Mask of the arena bytes fusion leaves unwritten: the receive buffers of the partials
    exchanges a :class:`~ipukern.core.host.fused_reduce.ReduceStep` skips, and the windows and
    weights a :class:`~ipukern.core.host.fused.FusedStep` receives into its shadow rows
    (nothing else reads them)."""
    mask = np.zeros(shape, bool)
    for i in range(len(program.steps)):
        f = host_run.fused_step(program, i)
        if f is not None:
            for t, o, n in zip(*f.unwritten):
                mask[t, o:o + n] = True
    return mask


def two_ways(program: Program, data: np.ndarray, threads=(1, 2, 3)) -> list[np.ndarray]:
    """The arena after the program run without fusion, then with fusion at each thread
    count, every run from the same starting bytes; the bytes fusion leaves unwritten
    (:func:`unwritten`) zeroed in every result. Shadow rows are poisoned before every run
    (a vertex reading a byte no copy put there changes the result), and each fused
    configuration runs twice (the second run finds the first one's shadow rows)."""
    start = data.copy()
    skip = unwritten(program, data.shape)
    out = []
    old_poison, fused.FusedStep.poison_shadow = fused.FusedStep.poison_shadow, True
    try:
        for flag, n in [(False, 1)] + [(True, n) for n in threads]:
            for _ in range(2 if flag else 1):
                data[...] = start
                old, fused.FUSED_EXCHANGE = fused.FUSED_EXCHANGE, flag
                try:
                    host_run.execute(program, data, n)
                finally:
                    fused.FUSED_EXCHANGE = old
                out.append(np.where(skip, 0, data))
    finally:
        fused.FusedStep.poison_shadow = old_poison
    return out
