"""Optimizer steps on the tiles against torch.optim (one and two steps) and a float64 LAMB and
LARS (which torch lacks)."""
import numpy as np
import pytest

import ipukern as ik
from ipukern.core.cost import ELEMENTWISE_WORKER_OVERHEAD, SUPERVISOR_OVERHEAD
from ipukern.ops.optim import optimizer_vertex_cycles
from tests._support.reference import lamb_step, lars_step

SHAPES = [(16, 8, 3, 3), (16,), (10, 16), (3,), (300, 7)]


def _data(seed=0):
    rng = np.random.default_rng(seed)
    ps = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    gs = [[rng.standard_normal(s).astype(np.float32) for s in SHAPES] for _ in range(2)]
    return ps, gs


TORCH = [
    ("sgd", {"lr": 0.1}, "SGD", {"lr": 0.1}),
    ("sgd", {"lr": 0.1, "weight_decay": 0.01}, "SGD", {"lr": 0.1, "weight_decay": 0.01}),
    ("sgd_momentum", {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.01}, "SGD",
     {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.01}),
    ("sgd_momentum", {"lr": 0.05, "momentum": 0.8, "dampening": 0.1}, "SGD",
     {"lr": 0.05, "momentum": 0.8, "dampening": 0.1}),
    ("adam", {"lr": 0.01}, "Adam", {"lr": 0.01}),
    ("adam", {"lr": 0.01, "betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.01}, "Adam",
     {"lr": 0.01, "betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.01}),
]


@pytest.mark.parametrize("name,kw,tname,tkw", TORCH, ids=lambda v: str(v) if isinstance(v, str) else "")
def test_equals_torch_optim_over_two_steps(name, kw, tname, tkw):
    torch = pytest.importorskip("torch")
    ps, gs = _data()
    tp = [torch.tensor(p, requires_grad=True) for p in ps]
    topt = getattr(torch.optim, tname)(tp, **tkw)
    opt = ik.Optimizer(name, **kw)
    params, state = ps, None
    for step in (1, 2):
        for t, g in zip(tp, gs[step - 1]):
            t.grad = torch.tensor(g)
        topt.step()
        run = ik.optimizer_step(params, gs[step - 1], state, optimizer=opt, step=step)
        params, state = run.params, run.state
        for a, t in zip(params, tp):
            ref = t.detach().numpy()
            # float32, same operation order: a few ulps of the parameter
            np.testing.assert_allclose(a, ref, rtol=1e-6, atol=1e-7)
        for i, t in enumerate(tp):
            for nm in opt.state_names:
                np.testing.assert_allclose(state[i][nm], topt.state[t][nm].numpy(), rtol=1e-6,
                                           atol=1e-7)
        est = ik.estimate_optimizer_step(SHAPES, optimizer=opt)
        assert est.total_cycles == run.profile.total_cycles > 0


NORM_OPTIMIZERS = [
    (ik.Optimizer("lamb", lr=0.02, weight_decay=0.01), lamb_step, "direction"),
    (ik.Optimizer("lars", lr=2.0, momentum=0.9, weight_decay=5e-3, eta=0.01), lars_step, "norms"),
    (ik.Optimizer("lars", lr=0.5, momentum=0.8, eps=1e-3), lars_step, "norms"),
]


@pytest.mark.parametrize("opt,ref,first", NORM_OPTIMIZERS, ids=["lamb", "lars", "lars-eps-no-wd"])
def test_norm_optimizers_match_float64_reference(opt, ref, first):
    ps, gs = _data(1)
    ps[3][:] = 0                                   # zero norm: trust ratio 1
    ps[2][:] = 0                                   # a 2-D one too (LARS skips 1-D tensors)
    gs[0][4][:] = 0                                # zero gradient norm at step 1: ratio 1
    params, state = ps, None
    sts = [tuple(np.zeros(p.shape) for _ in opt.state_names) for p in ps]
    refs = [p.astype(np.float64) for p in ps]
    for step in (1, 2):
        run = ik.optimizer_step(params, gs[step - 1], state, optimizer=opt, step=step)
        out = [ref(refs[i], gs[step - 1][i], sts[i], step, opt) for i in range(len(ps))]
        refs = [o[0] for o in out]
        sts = [o[1] for o in out]
        params, state = run.params, run.state
        for a, r in zip(params, refs):
            np.testing.assert_allclose(a, r, rtol=2e-6, atol=1e-6)
        for st, r in zip(state, sts):
            for nm, x in zip(opt.state_names, r):
                np.testing.assert_allclose(st[nm], x, rtol=2e-6, atol=1e-7)
        assert ik.estimate_optimizer_step(SHAPES, optimizer=opt).total_cycles == run.profile.total_cycles
    names = [s.name for s in run.profile.supersteps]
    assert names == [f"{opt.name} {first}", f"{opt.name} trust ratio", f"{opt.name} apply"]
    assert run.profile.supersteps[0].bytes_exchanged > 0


def test_lars_skips_one_dimensional_tensors():
    # only 1-D tensors: no norms, no exchange, one momentum update at lr without weight decay
    shapes = [(300,), (7,)]
    opt = ik.Optimizer("lars", lr=0.1, weight_decay=0.5)
    rng = np.random.default_rng(3)
    ps = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    gs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    run = ik.optimizer_step(ps, gs, optimizer=opt)
    assert [s.name for s in run.profile.supersteps] == ["lars apply"]
    for a, p, g in zip(run.params, ps, gs):
        np.testing.assert_allclose(a, p - np.float32(0.1) * g, rtol=1e-6, atol=1e-7)
    from ipukern.ops.optim import lars_adapted
    assert lars_adapted([(3,), (2, 3), (4, 1, 1, 1), ()]).tolist() == [False, True, True, False]


def test_cycle_model_by_hand():
    m = ik.GC200
    # adam, 1200 elements on one tile: 200 per worker = 100 vectors; per vector 4 loads,
    # 3 stores, ops 3 add + 4 mul + sqrt 10 + divide 10 + add 1 + divide 10 + 2 = 40
    cyc = int(optimizer_vertex_cycles(m, ik.Optimizer("adam"), np.array([1200]))[0])
    assert cyc == 6 * (ELEMENTWISE_WORKER_OVERHEAD + 100 * (4 + 3 + 40)) + SUPERVISOR_OVERHEAD
    sgd = int(optimizer_vertex_cycles(m, ik.Optimizer("sgd"), np.array([1200]))[0])
    assert sgd == 6 * (ELEMENTWISE_WORKER_OVERHEAD + 100 * (2 + 1 + 2)) + SUPERVISOR_OVERHEAD
    # lars: norms load w, g and square-add both (2 x (2 + 1)); the update loads w, g, v,
    # stores w, v: wd 2 + v * m 1 + lr * d 1 + add 1 + w - v 1; a skipped tensor has no wd
    lars = ik.Optimizer("lars", weight_decay=1e-4)
    for phase, per_vector in (("lars_norms", 2 + 0 + 6), (None, 3 + 2 + 6), ("lars_plain", 3 + 2 + 4)):
        cyc = int(optimizer_vertex_cycles(m, lars, np.array([1200]), phase)[0])
        assert cyc == 6 * (ELEMENTWISE_WORKER_OVERHEAD + 100 * per_vector) + SUPERVISOR_OVERHEAD


def test_state_location_host_costs_the_host_link():
    shapes = [(4_000_000,), (1000, 1000)]
    chip = ik.estimate_optimizer_step(shapes, optimizer="adam")
    host = ik.estimate_optimizer_step(shapes, optimizer="adam", state_location="host")
    n_bytes = 5_000_000 * 4 * 2
    one_way = int(np.ceil(n_bytes * ik.GC200.clock_hz / ik.GC200.host_bytes_per_second))
    streams = [s for s in host.supersteps if s.category == "host"]
    assert [s.compute_cycles for s in streams] == [one_way, one_way]
    assert host.total_cycles == chip.total_cycles + 2 * (one_way + ik.GC200.sync_cycles)
    sgd = ik.estimate_optimizer_step(shapes, optimizer="sgd", state_location="host")
    assert not [s for s in sgd.supersteps if s.category == "host"]     # no state to stream
    # the state is on the tiles in both cases (transiently when streamed)
    assert chip.memory.by_category["optimizer state"].sum() == n_bytes


def test_estimate_costs_state_larger_than_the_chip():
    # 120 M parameters with Adam: 960 MB of float32 state, more than a GC200 holds. The
    # estimate still costs the update (the network's liveness model reports the overflow);
    # executing it is refused.
    shapes = [(120_000_000,)]
    est = ik.estimate_optimizer_step(shapes, optimizer="adam")
    assert est.total_cycles > 0
    assert est.memory.by_category["optimizer state"].sum() == 120_000_000 * 4 * 2
    assert est.memory.by_category["optimizer state"].max() > ik.GC200.tile_budget_bytes
    half = ik.estimate_optimizer_step([(60_000_000,)], optimizer="adam")
    assert half.total_cycles < est.total_cycles


def test_host_state_executes_identically():
    ps, gs = _data(2)
    a = ik.optimizer_step(ps, gs[0], optimizer="sgd_momentum")
    b = ik.optimizer_step(ps, gs[0], optimizer="sgd_momentum", state_location="host")
    for x, y in zip(a.params, b.params):
        np.testing.assert_array_equal(x, y)
    assert b.profile.total_cycles > a.profile.total_cycles


def test_bad_input():
    p = [np.zeros(4, np.float32)]
    with pytest.raises(ValueError, match="unknown optimizer"):
        ik.optimizer_step(p, p, optimizer="adagrad")
    with pytest.raises(ValueError, match="shape"):
        ik.optimizer_step(p, [np.zeros(5, np.float32)])
    with pytest.raises(TypeError, match="float32"):
        ik.optimizer_step([np.zeros(4, np.float16)], [np.zeros(4, np.float16)])
    with pytest.raises(ValueError, match="state_location"):
        ik.optimizer_step(p, p, state_location="disk")
    with pytest.raises(ValueError, match="exp_avg"):
        ik.optimizer_step(p, p, [{}], optimizer="adam", step=2)
    with pytest.raises(ValueError, match="lr"):
        ik.Optimizer("sgd", lr=-1.0)
    with pytest.raises(ValueError, match="eta"):
        ik.Optimizer("lars", eta=float("nan"))
    with pytest.raises(ValueError, match="eps"):
        ik.Optimizer("lars", eps=-1.0)
    with pytest.raises(ValueError, match="no dampening"):
        ik.Optimizer("lars", dampening=0.1)
    with pytest.raises(ValueError, match="momentum"):
        ik.optimizer_step(p, p, [{"momentum_buffer": p[0]}], optimizer="lars", step=2)
    with pytest.raises(ValueError, match="step"):
        ik.optimizer_step(p, p, step=0)
