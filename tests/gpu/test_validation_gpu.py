"""``ipukern validate --gpu``: held-out protocol, the peer table, the fit's determinism."""
import json

import numpy as np
import pytest

from ipukern.cli import main
from ipukern.gpu import fit
from ipukern.gpu.measured import load_measured_kernels, predict_seconds
from ipukern.gpu.traces import LAYER_BOUNDS, trace_configs, trace_step
from ipukern.gpu.specs import H100
from ipukern.validation.gpu import gpu_report


@pytest.fixture(scope="module")
def report():
    return gpu_report(mlperf=False)


def test_every_measured_row_is_priced():
    rows = load_measured_kernels()
    assert len(rows) == 5911
    assert all(predict_seconds(r) > 0 for r in rows[:: 37])


def test_held_out_rows_are_never_fitted(report):
    train = set(fit.training_rows("gemm")) | set(fit.training_rows("vector"))
    assert all(r.split == "train" and r.gpu.name not in ("H100", "L4") and r.op != "conv" for r in train)
    for g in report.kernels:
        if g.gpu in ("H100", "L4") or g.split == "test" or g.op_class == "conv":
            assert not g.fitted, g


def test_h100_gemm_error_is_reported_and_small(report):
    # the target for held-out rows; a regression guard on a deterministic figure
    h100 = {g.op_class: g for g in report.kernels if g.gpu == "H100"}
    assert set(h100) == {"linear", "bmm"} and h100["linear"].rows == h100["bmm"].rows == 400
    assert h100["linear"].mape < 15 and h100["bmm"].mape < 15


def test_end_to_end_peer_table(report):
    assert len(report.e2e) == 70 and len(report.skipped) == 36
    for r in report.e2e:
        assert r.model_ms > 0 and r.measured_ms > 0
    s = report.summary()
    assert s["e2e_rows"] == 70 and 0 <= s["e2e_within_15pct"] <= 70
    assert s["e2e_neusight_mape"] > 0
    back = json.loads(report.to_json())
    assert back["summary"]["e2e_rows"] == 70


def test_per_op_peer_table(report):
    # every held-out GPU of ops.csv, the same rows for every method, only the classes compared
    groups = {(g.gpu, g.op_class): g for g in report.ops}
    assert {g for g, _ in groups} == {"H100", "L4", "A100_PCIE_80GB"}
    assert {c for _, c in groups} == {"linear", "bmm", "layernorm", "softmax"}
    assert report.ops_left_out > 0 and all(g.rows > 0 for g in report.ops)
    assert all(np.isfinite([g.mape, g.neusight_mape, g.roofline_mape, g.habitat_mape]).all()
               for g in report.ops)
    assert "Per op" in report.format_table() and "per_op_mape" in report.summary()


def test_node_seconds_is_host_then_kernels():
    from ipukern.gpu.calibration import EAGER_HOST_S
    from ipukern.gpu.kernels import KernelCall, kernel_seconds
    from ipukern.gpu.traces import node_seconds
    name = "bert_encoder_layer_0_attention_self_query"
    t = node_seconds("bert_large-train-512-2", name, H100)
    k = kernel_seconds(KernelCall("gemm", "linear", m=1024, n=1024, k=1024), H100, "float32").seconds
    assert t == pytest.approx(EAGER_HOST_S + k, rel=1e-12)
    assert node_seconds("bert_large-train-512-2", name, H100, backward=True) > t
    with pytest.raises(ValueError, match="has no node 'nope'"):
        node_seconds("bert_large-train-512-2", "nope", H100)


def test_trace_layers_repeat():
    cfg = "bert_large-train-512-8"
    assert cfg in trace_configs() and set(LAYER_BOUNDS) >= {c.split("-")[0] for c in trace_configs()}
    one, two = (trace_step(cfg, n, H100, training=True) for n in (1, 2))
    three = trace_step(cfg, 3, H100, training=True)
    # each extra layer costs the same (the host is never the bottleneck at this size)
    assert three.seconds - two.seconds == pytest.approx(two.seconds - one.seconds, rel=1e-6)
    with pytest.raises(ValueError, match="no NeuSight op graph"):
        trace_step("resnet50-train-224-8", 1, H100, training=True)


def test_nelder_mead_finds_a_quadratic_minimum():
    target = np.array([1.0, -2.0])
    x, v = fit.nelder_mead(lambda x: float(np.sum((x - target) ** 2)), [0.0, 0.0], max_iter=500)
    assert np.allclose(x, [1.0, -2.0], atol=1e-3) and v < 1e-6


def test_fit_is_deterministic():
    rows = fit.training_rows("vector")[:40]
    a = fit.fit_memory(rows, max_iter=8)
    b = fit.fit_memory(rows, max_iter=8)
    assert a == b
    with pytest.raises(ValueError, match="kind must be"):
        fit.training_rows("conv")


def test_cli(tmp_path, capsys):
    assert main(["validate", "--gpu", "--out", str(tmp_path), "-q"]) == 0
    out = capsys.readouterr().out
    assert "End to end" in out and "MLPerf Training DGX A100" in out
    assert (tmp_path / "gpu_validation.csv").is_file() and (tmp_path / "gpu_validation.json").is_file()
    assert main(["validate", "--gpu", "--systems"]) != 0
