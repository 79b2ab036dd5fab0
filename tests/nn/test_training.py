"""Training steps: one executed step equals torch.autograd + torch.optim.SGD; the training
estimate's rows, liveness (optimizer state, recomputation) and op-level consistency."""
import numpy as np
import pytest

import ipukern as ik
from ipukern.nn import train_step
from ipukern.nn.training import training_schedule
from tests._support.nets import tiny_cnn
from tests._support.reference import lars_step


def small_net(c=8, hw=12, classes=5):
    return tiny_cnn(bn=True, c=c, hw=hw, classes=classes)


def _one_step(opt):
    """``(params, x, labels, run)``: one executed step of :func:`small_net` with ``opt``."""
    net = small_net()
    params = net.init_params(seed=0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3, 12, 12)).astype(np.float32)
    labels = rng.integers(0, 5, 4)
    return params, x, labels, train_step(net, x, labels, params, optimizer=opt)


def test_one_sgd_step_equals_torch():
    torch = pytest.importorskip("torch")
    params, x, labels, run = _one_step(ik.Optimizer("sgd", lr=0.1))

    class Ref(torch.nn.Module):
        def __init__(self, c=8, classes=5):
            super().__init__()
            self.conv1 = torch.nn.Conv2d(3, c, 3, padding=1, bias=False)
            self.bn1 = torch.nn.BatchNorm2d(c)
            self.conv2 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
            self.conv3 = torch.nn.Conv2d(c, 2 * c, 3, stride=2, padding=1, groups=2, bias=False)
            self.fc = torch.nn.Linear(2 * c, classes)

        def forward(self, v):
            h = torch.relu(self.bn1(self.conv1(v)))
            h = h + torch.relu(self.conv2(h))
            h = torch.nn.functional.max_pool2d(h, 2)
            h = torch.relu(self.conv3(h)).mean(dim=(2, 3))
            return self.fc(h)

    m = Ref()
    sd = m.state_dict()
    m.load_state_dict({k: torch.tensor(params[k]) if k in params else v for k, v in sd.items()})
    m.train()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    loss = torch.nn.functional.cross_entropy(m(torch.tensor(x)), torch.tensor(labels))
    loss.backward()
    opt.step()
    assert run.loss == pytest.approx(loss.item(), rel=1e-5)
    after = m.state_dict()
    trained = [k for k in params if not k.endswith(("running_mean", "running_var"))]
    assert sorted(run.grads) == sorted(trained)
    for k in trained:
        np.testing.assert_allclose(run.params[k], after[k].numpy(), rtol=1e-5, atol=1e-6, err_msg=k)
    assert run.profile.training and run.profile.total_cycles > 0


def test_lars_network_step_equals_the_reference_and_its_estimate():
    # the executed step's update of every parameter equals float64 LARS over its own
    # gradients (batch norm's scale and shift and the fc bias are 1-D: skipped), and the
    # executed cycles equal the training estimate's, whose update row is the LARS step's
    opt = ik.Optimizer("lars", lr=1.0, weight_decay=1e-2)
    params, _, _, run = _one_step(opt)
    for k, g in run.grads.items():
        ref, (v,) = lars_step(params[k], g, (np.zeros(g.shape),), 1, opt)
        np.testing.assert_allclose(run.params[k], ref, rtol=2e-6, atol=1e-6, err_msg=k)
        np.testing.assert_allclose(run.state[k]["momentum"], v, rtol=2e-6, atol=1e-7, err_msg=k)
    assert run.cycles == run.profile.total_cycles
    row = next(r for r in run.profile.layers if r["name"] == "optimizer (lars)")
    shapes = [params[k].shape for k in run.grads]
    assert row["cycles"] == ik.estimate_optimizer_step(shapes, optimizer=opt).total_cycles


def _rows(prof, pass_):
    return [r for r in prof.layers if r["pass"] == pass_]


def test_training_estimate_rows_match_the_ops():
    net = small_net(c=16, hw=16)
    prof = ik.estimate_network(net, batch=4, dtype="float16", partials="float", training=True,
                               optimizer="adam")
    by_name = {r["name"]: r for r in prof.layers}
    assert {"fwd", "bwd", "wu", "update"} <= {r["pass"] for r in prof.layers}
    # the first conv's input is the network input: no backward-data pass
    assert "conv1.grad_input" not in by_name and "conv1.grad_weight" in by_name
    hp = {"stride": 2, "padding": 1, "groups": 2, "dtype": "float16", "partials": "float"}
    bwd = ik.estimate_conv2d_backward_data((4, 16, 8, 8), (32, 8, 3, 3), **hp)
    wu = ik.estimate_conv2d_backward_weight((4, 16, 8, 8), (32, 8, 3, 3), **hp)
    assert by_name["conv3.grad_input"]["cycles"] == bwd.total_cycles
    assert by_name["conv3.grad_weight"]["cycles"] == wu.total_cycles
    n_params = sum(int(np.prod(s)) for k, s in net.param_shapes().items()
                   if not k.endswith(("running_mean", "running_var")))
    opt = ik.estimate_optimizer_step([s for k, s in net.param_shapes().items()
                                      if not k.endswith(("running_mean", "running_var"))],
                                     optimizer="adam", dtype="float16")
    assert by_name["optimizer (adam)"]["cycles"] == opt.total_cycles
    assert opt.info["parameters"] == n_params
    assert prof.total_cycles == sum(r["cycles"] for r in prof.layers)
    # backward rows run in reverse layer order
    order = [r["name"].split(".")[0] for r in _rows(prof, "bwd") + _rows(prof, "wu")]
    assert order.index("fc") < order.index("conv3") < order.index("conv2")


def test_optimizer_state_liveness_by_hand():
    net = small_net()
    ctx = ik.nn.layers.PlanContext(ik.GC200, "float16", "float16")
    rows_c, live_c, w, _, _ = training_schedule(net, 4, ctx, optimizer="adam")
    rows_h, live_h, _, _, _ = training_schedule(net, 4, ctx, optimizer="adam", state_location="host")
    state = (w * 4 * 2) // 2                # two float32 moments per float16 weight
    opt_row = len(rows_c) - 1
    assert rows_c[opt_row].op == "optimizer"
    np.testing.assert_array_equal(live_c[:opt_row] - live_h[:opt_row],
                                  np.broadcast_to(state, live_c[:opt_row].shape))
    np.testing.assert_array_equal(live_c[opt_row], live_h[opt_row])
    # weight gradients are live from their weight-update row to the optimizer
    wu = [i for i, r in enumerate(rows_c) if r.pass_ == "wu"]
    assert wu and all(rows_c[i].fwd_step >= 0 for i in wu)


def test_recompute_lowers_memory_and_raises_cycles():
    net = small_net(c=16, hw=32)
    kw = {"batch": 32, "dtype": "float32", "partials": "float", "training": True, "optimizer": "sgd",
          "allow_overflow": True}
    base = ik.estimate_network(net, **kw)
    rc = ik.estimate_network(net, recompute=["relu1", "pool"], **kw)
    assert rc.total_cycles > base.total_cycles
    assert rc.step_peak_bytes.max() < base.step_peak_bytes.max()
    assert any(r["name"].endswith("(recompute)") for r in rc.layers)
    with pytest.raises(ValueError, match="checkpoint 'nope'"):
        ik.estimate_network(net, recompute=["nope"], **kw)


def test_bad_training_options():
    net = small_net()
    with pytest.raises(ValueError, match="unknown optimizer"):
        ik.estimate_network(net, batch=2, training=True, optimizer="adagrad")
    with pytest.raises(ValueError, match="state_location"):
        ik.estimate_network(net, batch=2, training=True, state_location="disk")


def test_stash_holds_only_what_a_backward_pass_reads_by_hand():
    # tiny_cnn: conv1 bn1 relu1 conv2 relu2 res(add) pool(max) conv3 relu3 gap flat fc loss.
    # After the forward a tensor is kept only if a backward pass reads it (PopLibs): conv1's
    # input x and bn1's input conv1 (calculateWeightDeltas / batchNormGradients read their
    # inputs), every ReLU's output (nonLinearityInputGradient reads the output), res and pool
    # (maxPoolInputGradient reads input and output; conv3 its input), flat (fc) and fc (the
    # loss). Not kept: bn1, conv2 and conv3 (read by a ReLU's forward only), gap (a view).
    net = small_net()
    ctx = ik.nn.layers.PlanContext(ik.GC200, "float16", "float16")
    rows, live, w, _, _ = training_schedule(net, 4, ctx, optimizer=None)
    prog = ik.nn.compile.compile_network(net, 4, ctx, fold_bn=False)
    b = {n: lay.bytes_per_tile(ik.GC200.n_tiles) for n, lay in prog.layouts.items() if lay is not None}
    first_bwd = next(k for k, r in enumerate(rows) if r.pass_ != "fwd")
    stash = ["x", "conv1", "relu1", "relu2", "res", "pool", "relu3", "flat", "fc"]
    # plus the loss gradient (the gradient of fc's output), produced at this row
    want = sum(b[n] for n in stash) + b["fc"]
    np.testing.assert_array_equal(live[first_bwd] - rows[first_bwd].own - w, want)
    # a forward row's own buffers hold its output: at conv1's row only x is live besides
    np.testing.assert_array_equal(live[0] - rows[0].own - w, b["x"])
    # bn1's output lives from the row after bn1 to relu1's forward, then dies
    k = {r.name: i for i, r in enumerate(rows) if r.pass_ == "fwd"}
    np.testing.assert_array_equal(live[k["relu1"]] - rows[k["relu1"]].own - w,
                                  b["x"] + b["conv1"] + b["bn1"])


def test_busiest_tile_bytes_by_kind_sum_to_the_peak():
    # the profile says what the busiest tile holds at the busiest step, and it adds up
    net = small_net()
    prof = ik.estimate_network(net, batch=4, dtype="float16", partials="float16", training=True,
                               optimizer="sgd_momentum", allow_overflow=True)
    mem = prof.memory
    kinds = mem["tile_bytes_by_kind"]
    assert list(kinds) == list(ik.nn.training.KINDS)
    assert sum(kinds.values()) == mem["peak_bytes"]
    assert kinds["weights"] == mem["weights_bytes"] and kinds["reserve"] == mem["reserve_bytes"]
    # one float32 momentum word per float16 weight, on chip for the whole step
    assert kinds["optimizer state"] == 2 * kinds["weights"] and kinds["in-flight stashes"] == 0
    ctx = ik.nn.layers.PlanContext(ik.GC200, "float16", "float16")
    rows, *_ = training_schedule(net, 4, ctx, optimizer="sgd_momentum")
    assert kinds["working buffers"] == rows[mem["busiest_step"]].own[mem["busiest_tile"]]
    assert "busiest tile: " in prof.summary()
