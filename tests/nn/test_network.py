"""Networks: layers executed on the tiles against PyTorch, estimate == execute cycles,
liveness and max batch on hand-computed cases, bad input."""
import numpy as np
import pytest

import ipukern as ik
from ipukern import nn

from tests._support.nets import attention_net, tiny_cnn

torch = pytest.importorskip("torch")
F = torch.nn.functional


def T(a):
    return torch.tensor(np.asarray(a, np.float32))


def close(out, ref):
    ref = np.asarray(ref, np.float64)
    assert out.shape == ref.shape
    assert np.abs(out.astype(np.float64) - ref).max() <= 1e-4 * max(np.abs(ref).max(), 1e-6)


def small_cnn():
    net = nn.Network("tiny")
    x = net.input("x", (3, 16, 16))
    y = net.add(nn.Conv2d(3, 8, 3, padding=1), x, name="conv1")
    y = net.add(nn.BatchNorm2d(8), y, name="bn1")
    y = net.add(nn.ReLU(), y, name="relu1")
    z = net.add(nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=True), y, name="dw")
    z = net.add(nn.ReLU6(), z, name="r6")
    y = net.add(nn.Add(), z, y, name="add")
    y = net.add(nn.MaxPool2d(3, 2, 1), y, name="pool")
    y = net.add(nn.AvgPool2d(2, 2), y, name="avg")
    y = net.add(nn.GlobalAvgPool(), y, name="gap")
    y = net.add(nn.Flatten(), y, name="flat")
    y = net.add(nn.Linear(8, 5), y, name="fc")
    net.output(y)
    return net


def small_cnn_torch(p, x):
    h = F.conv2d(x, T(p["conv1.weight"]), padding=1)
    h = F.batch_norm(h, T(p["bn1.running_mean"]), T(p["bn1.running_var"]), T(p["bn1.weight"]),
                     T(p["bn1.bias"]), eps=1e-5)
    h = F.relu(h)
    z = F.relu6(F.conv2d(h, T(p["dw.weight"]), T(p["dw.bias"]), padding=1, groups=8))
    h = F.avg_pool2d(F.max_pool2d(z + h, 3, 2, 1), 2, 2)
    return F.linear(h.mean((2, 3)), T(p["fc.weight"]), T(p["fc.bias"]))


@pytest.mark.parametrize("fold_bn", [True, False])
def test_small_cnn_matches_torch(fold_bn):
    net = small_cnn()
    p = net.init_params(seed=0)
    x = np.random.default_rng(1).standard_normal((2, 3, 16, 16)).astype(np.float32)
    run = nn.run_network(net, x, p, fold_bn=fold_bn)
    close(run.output, small_cnn_torch(p, T(x)).numpy())
    est = nn.estimate_network(net, batch=2, dtype="float32", partials="float", fold_bn=fold_bn)
    assert run.profile.total_cycles == est.total_cycles
    assert [r["cycles"] for r in run.profile.layers] == [r["cycles"] for r in est.layers]
    names = [r["name"] for r in est.layers]
    assert ("conv1+bn1" in names) == fold_bn


def test_params_default_and_determinism():
    net = small_cnn()
    x = np.random.default_rng(2).standard_normal((2, 3, 16, 16)).astype(np.float32)
    a = nn.run_network(net, x)
    b = nn.run_network(net, x, net.init_params(seed=0))
    assert np.array_equal(a.output, b.output)
    ik.set_num_threads(1)
    try:
        c = nn.run_network(net, x)
    finally:
        ik.set_num_threads(None)
    assert np.array_equal(a.output, c.output)


def test_activations_and_se_match_torch():
    net = nn.Network("acts")
    x = net.input("x", (6, 5, 7))
    a = net.add(nn.SiLU(), x, name="silu")
    g = net.add(nn.GlobalAvgPool(), a, name="gap")
    s = net.add(nn.Conv2d(6, 2, 1, bias=True), g, name="fc1")
    s = net.add(nn.Activation("sigmoid"), s, name="sig")
    s = net.add(nn.Conv2d(2, 6, 1, bias=True), s, name="fc2")
    s = net.add(nn.Activation("sigmoid"), s, name="gate")
    y = net.add(nn.ScaleChannels(), a, s, name="se")
    y = net.add(nn.GELU(), y, name="gelu")
    y = net.add(nn.Activation("tanh"), y, name="tanh")
    net.output(y)
    p = net.init_params(seed=3)
    xv = np.random.default_rng(4).standard_normal((3, 6, 5, 7)).astype(np.float32)
    run = nn.run_network(net, xv, p)
    h = F.silu(T(xv))
    s = torch.sigmoid(F.conv2d(h.mean((2, 3), keepdim=True), T(p["fc1.weight"]), T(p["fc1.bias"])))
    s = torch.sigmoid(F.conv2d(s, T(p["fc2.weight"]), T(p["fc2.bias"])))
    ref = torch.tanh(F.gelu(h * s, approximate="tanh"))
    close(run.output, ref.numpy())


def test_attention_embedding_loss_match_torch():
    B, Tn, D, H = 2, 8, 16, 4
    net = attention_net(B, Tn, D, H)
    p = net.init_params(seed=5)
    rng = np.random.default_rng(6)
    ids = rng.integers(0, 50, (B, Tn))
    labels = rng.integers(0, 3, (B,))
    run = nn.run_network(net, {"ids": ids, "labels": labels}, p)
    e = F.layer_norm(T(p["emb.weight"])[torch.tensor(ids)], (D,), T(p["ln.weight"]), T(p["ln.bias"]))
    mha = torch.nn.MultiheadAttention(D, H, batch_first=True, bias=True)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([T(p["q.weight"]), T(p["k.weight"]), T(p["v.weight"])]))
        mha.in_proj_bias.copy_(torch.cat([T(p["q.bias"]), T(p["k.bias"]), T(p["v.bias"])]))
        mha.out_proj.weight.copy_(T(p["out.weight"]))
        mha.out_proj.bias.copy_(T(p["out.bias"]))
        o = mha(e, e, e, need_weights=False)[0] + e
        logits = F.linear(o.reshape(B, -1), T(p["cls.weight"]), T(p["cls.bias"]))
        loss = F.cross_entropy(logits, torch.tensor(labels))
    close(run.outputs[net.outputs[0]], o.numpy())
    assert abs(float(run.outputs["loss"]) - float(loss)) <= 1e-5 * max(1.0, abs(float(loss)))
    est = nn.estimate_network(net, batch=B, dtype="float32", partials="float")
    assert est.total_cycles == run.profile.total_cycles
    ops = {r["op"] for r in est.layers}
    assert {"embedding", "layernorm", "linear", "permute", "matmul", "softmax",
            "softmax_cross_entropy"} <= ops


def elementwise_chain(per_sample):
    net = nn.Network("chain")
    x = net.input("x", (per_sample,))
    a = net.add(nn.ReLU(), x, name="a")
    b = net.add(nn.ReLU(), a, name="b")
    net.output(b)
    return net


def test_liveness_and_max_batch_by_hand():
    m = ik.GC200
    nt = m.n_tiles
    net = elementwise_chain(nt * 64)
    prof = nn.estimate_network(net, batch=3, dtype="float32", partials="float")
    # every tile holds 64*3 float32 of each tensor: step a holds the input and a (2 * 4 * 192
    # = 1536 B); step b writes b over a, which dies there (768 B); + the reserve
    r = m.reserved_bytes_per_tile
    assert list(prof.step_peak_bytes) == [1536 + r, 768 + r]
    assert prof.memory["peak_bytes"] == 1536 + m.reserved_bytes_per_tile
    # largest B with 2 * 4 * 64 * B + reserve <= tile bytes
    assert prof.memory["max_batch"] == (m.tile_bytes - m.reserved_bytes_per_tile) // 512
    assert prof.fits


def test_liveness_keeps_skip_connection_alive():
    nt = ik.GC200.n_tiles
    net = nn.Network("skip")
    x = net.input("x", (nt,))
    a = net.add(nn.ReLU(), x, name="a")
    b = net.add(nn.ReLU(), a, name="b")
    c = net.add(nn.ReLU(), b, name="c")
    d = net.add(nn.Add(), c, a, name="d")
    net.output(d)
    prof = nn.estimate_network(net, batch=1, dtype="float32", partials="float")
    r = ik.GC200.reserved_bytes_per_tile
    # 4 B per tile per tensor: step a: x + a; b: a + b (a lives on: no in-place); c: a + b
    # (c written over b, which dies); d: a + c + copy of a (d written over c)
    assert [int(v) - r for v in prof.step_peak_bytes] == [8, 8, 8, 12]


def test_inplace_elementwise_lowers_peak_by_its_output_and_runs_in_place():
    """An element-wise op whose input dies there writes over it: the peak drops by exactly
    that op's output bytes, and execution (which reuses the buffer) still computes the
    right values, leaving tensors that live on (skip connections, outputs) untouched."""
    nt = ik.GC200.n_tiles
    n = nt * 16                          # 16 float32 = 64 B per tile per tensor
    net = nn.Network("inplace")
    x = net.input("x", (n,))
    a = net.add(nn.ReLU(), x, name="a")          # x is a network input: not overwritten
    b = net.add(nn.SiLU(), a, name="b")          # a lives on (read by d): not overwritten
    c = net.add(nn.ReLU6(), b, name="c")         # b dies here: c written over b
    d = net.add(nn.Add(), c, a, name="d")        # c dies here: d written over c
    e = net.add(nn.Tanh(), d, name="e")          # d is a network output: not overwritten
    net.output(e)
    net.output(d)
    prog = nn.compile_network(net, 1, nn.plan_context("float32", "float", ik.GC200))
    assert [s.inplace for s in prog.steps] == [False, False, True, True, False]
    prof = nn.estimate_network(net, batch=1, dtype="float32", partials="float")
    r = ik.GC200.reserved_bytes_per_tile
    # 64 B per tensor per tile without in-place: a: x + a; b: a + b; c: a + b + c;
    # d: a + c + d + copy of a; e: d + e. In place, c and d add no buffer of their own.
    before = [128, 128, 192, 256, 128]
    saved = [0, 0, 64, 64, 0]
    assert [int(v) - r for v in prof.step_peak_bytes] == [p - s for p, s in zip(before, saved)]
    assert prof.memory["peak_bytes"] - r == 256 - 64
    xs = np.random.default_rng(3).standard_normal((2, n)).astype(np.float32) * 4
    run = nn.run_network(net, xs)
    ra = np.maximum(xs.astype(np.float64), 0)
    rd = np.clip(ra / (1 + np.exp(-ra)), 0, 6) + ra
    assert np.abs(run.outputs["d"] - rd).max() <= 1e-5 * np.abs(rd).max()
    assert np.abs(run.outputs["e"] - np.tanh(rd)).max() <= 1e-5
    est2 = nn.estimate_network(net, batch=2, dtype="float32", partials="float")
    assert run.profile.total_cycles == est2.total_cycles
    assert list(run.profile.step_peak_bytes) == list(est2.step_peak_bytes)


def test_overflow_raises_and_reports():
    net = elementwise_chain(ik.GC200.n_tiles * 64)
    with pytest.raises(ik.TileMemoryError, match=r"layer '.*' .* tile \d+ needs .* budget"):
        nn.estimate_network(net, batch=2000, dtype="float32", partials="float")
    prof = nn.estimate_network(net, batch=2000, dtype="float32", partials="float", allow_overflow=True)
    assert not prof.fits and prof.memory["peak_bytes"] > prof.memory["budget_bytes"]


def test_bad_input_errors():
    net = small_cnn()
    with pytest.raises(ValueError, match=r"input 'x' must have shape \(batch, 3, 16, 16\)"):
        nn.run_network(net, np.zeros((2, 3, 8, 8), np.float32))
    with pytest.raises(ValueError, match="missing parameter 'conv1.weight'"):
        nn.run_network(net, np.zeros((2, 3, 16, 16), np.float32), {})
    with pytest.raises(ValueError, match="layer 'bad'.*expects 3 input channels"):
        net.add(nn.Conv2d(3, 4, 3), "relu1", name="bad")
    with pytest.raises(ValueError, match="batch must be a positive int"):
        nn.estimate_network(net, batch=0)
    with pytest.raises(ValueError, match="already has a tensor named 'conv1'"):
        net.add(nn.ReLU(), "x", name="conv1")
    with pytest.raises(ValueError, match="unknown tensor"):
        net.add(nn.ReLU(), "nope")


def test_profile_outputs(tmp_path):
    net = small_cnn()
    prof = nn.estimate_network(net, batch=2)
    assert prof.samples_per_second == pytest.approx(2 / prof.seconds)
    assert 0 < prof.utilisation < 1 and prof.tflops > 0
    assert sum(r["share"] for r in prof.layers) == pytest.approx(1.0)
    text = prof.summary()
    assert "conv1+bn1" in text and "samples/s" in text
    prof.to_csv(tmp_path / "p.csv")
    assert (tmp_path / "p.csv").read_text().count("\n") == len(prof.layers) + 1
    import json
    d = json.loads(prof.to_json())
    assert d["total_cycles"] == prof.total_cycles and len(d["layers"]) == len(prof.layers)


def test_same_shape_layers_share_plans():
    net = nn.Network("rep")
    x = net.input("x", (8, 8, 8))
    for i in range(3):
        x = net.add(nn.Conv2d(8, 8, 3, padding=1), x, name=f"c{i}")
    net.output(x)
    prog = nn.compile_network(net, 2, nn.PlanContext(ik.GC200, "float16", "float16"))
    assert prog.steps[0].plan is prog.steps[1].plan is prog.steps[2].plan


def test_cli_network_small(tmp_path, capsys):
    from ipukern.cli import main
    rc = main(["network", "mobilenet_v1", "--batch", "1", "--image-size", "32", "--dtype", "float32",
               "--partials", "float", "--out", str(tmp_path), "--no-progress"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "samples/s" in text and "model.1.0" in text and "time by category" in text
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["mobilenet_v1_b1.csv", "mobilenet_v1_b1.json", "mobilenet_v1_b1_layers.png",
                     "mobilenet_v1_b1_memory.png"]


def test_cli_network_training(tmp_path, capsys):
    """``ipukern network --training`` writes the training step the API estimates: same JSON, the
    three passes per conv, the recomputed forward rows and the optimizer's update row."""
    import csv
    import json

    from ipukern.cli import main
    argv = ["network", "mobilenet_v1", "--batch", "2", "--image-size", "32", "--training",
            "--recompute", "auto", "--optimizer", "adam", "--out", str(tmp_path), "--no-progress"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "training step" in text and "optimizer (adam)" in text
    stem = tmp_path / "mobilenet_v1_b2_train"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"{stem.name}{s}" for s in (".csv", ".json", "_layers.png", "_memory.png")]
    # the API with the same arguments (warm plan cache: cheap) gives the file's JSON exactly
    prof = nn.estimate_network(ik.models.mobilenet_v1(image_size=32), batch=2, dtype="float16",
                               partials="half", training=True, recompute="auto", optimizer="adam")
    assert json.loads(stem.with_suffix(".json").read_text()) == json.loads(prof.to_json(indent=1))
    rows = list(csv.DictReader(stem.with_suffix(".csv").open()))
    assert len(rows) == len(prof.layers)
    passes = {r["pass"] for r in rows}
    assert {"fwd", "bwd", "wu", "update"} <= passes
    convs = {r["name"] for r in rows if r["op"] == "conv2d" and r["pass"] == "fwd"
             and "(recompute)" not in r["name"]}
    grads = {r["name"].rsplit(".grad_", 1)[0] for r in rows if ".grad_weight" in r["name"]}
    assert convs == grads                                   # every conv has its weight update
    assert any("(recompute)" in r["name"] for r in rows)
    assert sum(int(r["cycles"]) for r in rows) == prof.total_cycles


def test_cli_network_training_errors(capsys):
    from ipukern.cli import main
    assert main(["network", "mobilenet_v1", "--image-size", "32", "--training", "--recompute",
                 "nosuchlayer", "--no-progress"]) == 1
    err = capsys.readouterr().err.strip()
    assert "nosuchlayer" in err and len(err.splitlines()) == 1
    with pytest.raises(SystemExit) as exc:                  # argparse: usage line, status 2
        main(["network", "mobilenet_v1", "--image-size", "32", "--optimizer", "rmsprop"])
    assert exc.value.code == 2 and "invalid choice: 'rmsprop'" in capsys.readouterr().err


def test_cli_network_errors(capsys):
    from ipukern.cli import main
    assert main(["network", "nosuchnet", "--no-progress"]) == 2     # a usage error, as an unknown --machine
    assert "unknown model 'nosuchnet'" in capsys.readouterr().err
    assert main(["network", "bert_base", "--image-size", "32", "--no-progress"]) == 1


def test_training_needs_the_training_passes():
    net = small_cnn()
    try:
        import ipukern.nn.training  # noqa: F401
    except ImportError:
        with pytest.raises(NotImplementedError, match="training"):
            nn.estimate_network(net, batch=2, training=True)
    with pytest.raises(ValueError, match="recompute"):
        nn.estimate_network(net, batch=2, recompute=["conv1"])


def test_run_network_labels_its_progress_line_with_layers_planned_and_run(monkeypatch):
    """The first run of a network can take seconds: its progress line (drawn after a second,
    per IPUKERN_PROGRESS or a terminal) names the layer being planned, then run."""
    from ipukern import _memo
    from ipukern.nn import program
    labels = []
    monkeypatch.setattr(program._progress, "note", labels.append)
    _memo.clear_all()
    net = tiny_cnn(loss=False)
    ik.run_network(net, np.zeros((1, 3, 8, 8), np.float32), cache=False)
    n = sum(1 for node in net.nodes.values() if node.layer is not None)
    assert labels[0] == f"planning layer 1/{n}"
    assert any(s.startswith("running layer 1/") for s in labels)
    assert labels[-1].startswith("running layer ") and "/" in labels[-1]
