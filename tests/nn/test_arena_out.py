"""Conv outputs read by the next conv straight from their program's arena
(:mod:`ipukern.nn.arena_out`): the same bits as copying every output out first, at every
thread count, when every conv keeps its output (so programs run again before their kept
outputs are read and must copy them out first), and from several threads at once."""
import contextlib

import numpy as np
import pytest

import ipukern as ik
from ipukern.nn import program as C
from ipukern.nn import plan_context
from ipukern.nn.arena_out import ArenaOutput
from ipukern.nn.host.arenas import ARENAS
from ipukern.nn.compile import compile_network
from ipukern.nn.layout import Rearrangement, Resident, linear_layout
from tests._support.threads import race


@contextlib.contextmanager
def _copy_out_path(prog):
    """Execute as before the arena reads and the buffer pool: every output copied out into
    a fresh zeroed buffer."""
    saved_keep = [(s, s.keep) for s in prog.steps]
    saved_pool = C.pooled
    C.pooled = contextlib.nullcontext
    try:
        for s in prog.steps:
            s.keep = False
        yield
    finally:
        C.pooled = saved_pool
        for s, k in saved_keep:
            s.keep = k


@contextlib.contextmanager
def _keep_all(prog):
    """Every conv keeps its output, whoever reads it and whatever runs in between."""
    saved = [(s, s.keep) for s in prog.steps]
    try:
        for s in prog.steps:
            s.keep = bool(s.plan.info.get("keeps"))
        yield
    finally:
        for s, k in saved:
            s.keep = k


def _setup(model, size=32, batch=2, seed=4):
    net = ik.models.MODELS[model](image_size=size)
    params = net.init_params(seed=0)
    prog = compile_network(net, batch, plan_context("float32", "float", ik.GC200))
    x = np.random.default_rng(seed).standard_normal((batch, 3, size, size)).astype(np.float32)
    return net, params, prog, {net.inputs[0]: x}


def _out(prog, feeds, params):
    outs = prog.execute(feeds, params)
    return {k: v.view(np.uint32).copy() for k, v in outs.items()}


@pytest.mark.parametrize("model", ["mobilenet_v2", "resnet50"])
def test_kept_outputs_equal_copy_out(model):
    net, params, prog, feeds = _setup(model)
    assert any(s.keep for s in prog.steps)
    with _copy_out_path(prog):
        want = _out(prog, feeds, params)
    try:
        for n in (1, 2, 3):
            ik.set_num_threads(n)
            got = _out(prog, feeds, params)
            assert all(np.array_equal(got[k], want[k]) for k in want)
            with _keep_all(prog):
                got = _out(prog, feeds, params)
            assert all(np.array_equal(got[k], want[k]) for k in want)
    finally:
        ik.set_num_threads(None)


@pytest.mark.parametrize("model", ["mobilenet_v2", "resnet50"])
def test_pooled_arenas_hold_nothing_a_run_reads(model):
    """Every run writes all the arena bytes it reads: with each leased arena filled with
    0xFF first, the outputs are those of the copy-out path, bit for bit."""
    net, params, prog, feeds = _setup(model)
    with _copy_out_path(prog):
        want = _out(prog, feeds, params)
    ARENAS.poison = True
    try:
        got = _out(prog, feeds, params)
    finally:
        ARENAS.poison = False
    assert all(np.array_equal(got[k], want[k]) for k in want)


def test_kept_only_for_a_single_conv_reader():
    net, params, prog, feeds = _setup("resnet50")
    readers = {}
    for i, s in enumerate(prog.steps):
        for src in s.srcs:
            readers.setdefault(src, []).append(i)
    for s in prog.steps:
        if s.keep:
            node = s.node
            r = readers[node]
            if prog.steps[r[0]].fused:
                node = prog.steps[r[0]].node
                r = readers[node]
            assert len(r) == 1 and prog.steps[r[0]].plan.op in ("conv2d", "matmul")
            assert prog.steps[r[0]].plan.info["program"] is not s.plan.info["program"]
    # a block output read by the next block and the residual add is copied out
    assert not all(s.keep for s in prog.steps if s.plan.op == "conv2d")


def test_kept_output_survives_its_program_running_again():
    net, params, prog, feeds = _setup("mobilenet_v2")
    step = next(s for s in prog.steps if s.keep)
    nt = ik.GC200.n_tiles
    src = linear_layout(step.in_shapes[0], "float32", nt)
    rearr = Rearrangement(ik.GC200, src, step.plan.inputs[0])
    prm = step.params(params, C.param_index(params))
    rng = np.random.default_rng(1)
    x1, x2 = (Resident.from_host(src, nt, rng.standard_normal(step.in_shapes[0]).astype(np.float32))
              for _ in range(2))
    want = step.plan.run([x1], [rearr], prm).to_host()
    kept = step.plan.run([x1], [rearr], prm, keep=True)
    assert isinstance(kept, ArenaOutput) and kept.in_arena
    other = step.plan.run([x2], [rearr], prm).to_host()       # runs on another arena
    assert kept.in_arena and not np.array_equal(other, want)
    # every pooled arena then holds a kept output: the next run copies the oldest out
    more = [step.plan.run([x2], [rearr], prm, keep=True) for _ in range(ARENAS.max_idle)]
    assert not kept.in_arena and all(k.in_arena for k in more[1:])
    assert np.array_equal(kept.to_host().view(np.uint32), want.view(np.uint32))
    assert all(np.array_equal(k.to_host(), other) for k in more)
    with pytest.raises(AttributeError):
        kept.data = np.zeros(1, np.uint8)


def test_pooled_arenas_touched_once():
    """A network's convs share the pooled arenas: a ResNet's run leaves no arena of their
    own on its programs' devices, and the pool holds a few arenas, each as long as the
    largest program needs."""
    net, params, prog, feeds = _setup("resnet50")
    ARENAS.clear()
    _out(prog, feeds, params)
    progs = prog._programs()
    need = max(p.device.memory.high_water for p in progs)
    nt = ik.GC200.n_tiles
    assert len(progs) > 10
    assert 2 <= ARENAS.nbytes() // (nt * need) <= ARENAS.max_idle
    assert all(p.device.arena_bytes == 0 for p in progs)    # none kept between runs


def test_concurrent_networks_sharing_programs():
    net, params, prog, feeds = _setup("mobilenet_v2")
    rng = np.random.default_rng(9)
    feeds_list = [{net.inputs[0]: rng.standard_normal((2, 3, 32, 32)).astype(np.float32)}
                  for _ in range(3)]
    with _copy_out_path(prog):
        want = [_out(prog, f, params) for f in feeds_list]
    got, errors = race(lambda f: _out(prog, f, params), [(f,) for f in feeds_list])
    assert not errors
    for g, w in zip(got, want):
        assert all(np.array_equal(g[k], w[k]) for k in w)
