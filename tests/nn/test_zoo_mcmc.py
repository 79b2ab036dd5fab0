"""The HMC sampler step of the zoo (ipukern.nn.zoo_mcmc.hmc_logistic) executed on the tiles
equals a float64 NumPy leapfrog of TFP's order (fp32: max error <= 1e-4 of the largest
magnitude, the zoo bound), and its gradient path equals PyTorch autograd of the log
posterior."""
import numpy as np
import pytest

import ipukern as ik
from ipukern.gpu import estimate_network_gpu
from ipukern.nn.zoo_mcmc import hmc_logistic

SMALL = ik.GC200.replace(n_tiles=92)
#: (n_data, n_features, leapfrog_steps, chains, step_size, prior_scale, problems)
SHAPES = [(60, 5, 3, 4, 0.05, 1.0, 1), (37, 9, 1, 1, 0.02, 2.0, 1), (128, 25, 4, 16, 0.01, 0.5, 2)]


def close(got, want):
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-4 * max(np.abs(want).max(), 1e-6)


def grad_log_posterior(x, y, theta, prior_var):
    """float64 ``X^T (y - sigmoid(X theta)) - theta / sigma^2`` per chain column."""
    return x.T @ (y - 1.0 / (1.0 + np.exp(-(x @ theta)))) - theta / prior_var


def reference_step(x, y, theta, p, g, eps, prior_var, steps):
    """TFP's SimpleLeapfrogIntegrator in float64, then the kinetic energies."""
    k0 = 0.5 * (p * p).sum(0, keepdims=True)
    p = p + 0.5 * eps * g
    for _ in range(steps):
        theta = theta + eps * p
        g = grad_log_posterior(x, y, theta, prior_var)
        p = p + eps * g
    p = p - 0.5 * eps * g
    return theta, p, g, k0, 0.5 * (p * p).sum(0, keepdims=True)


def feeds(n, d, c, problems, prior_var, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((problems, n, d)).astype(np.float32)
    labels = (rng.random((problems, n, 1)) < 0.5).astype(np.float32)
    theta = (0.1 * rng.standard_normal((problems, d, c))).astype(np.float32)
    p = rng.standard_normal((problems, d, c)).astype(np.float32)
    g = np.stack([grad_log_posterior(x[b].astype(np.float64), labels[b].astype(np.float64),
                                     theta[b].astype(np.float64), prior_var) for b in range(problems)])
    return {"x": x, "y": np.repeat(labels, c, axis=2), "theta": theta, "momentum": p,
            "grad": g.astype(np.float32), "half": np.full((problems, 1, d), 0.5, np.float32)}


@pytest.mark.parametrize("shape", SHAPES)
def test_hmc_step_equals_float64_leapfrog(shape):
    n, d, steps, c, eps, scale, problems = shape
    net = hmc_logistic(n, d, steps, c, step_size=eps, prior_scale=scale)
    f = feeds(n, d, c, problems, scale ** 2)
    run = ik.run_network(net, f, {}, machine=SMALL)
    last = f"leapfrog{steps - 1}"
    names = (f"{last}.theta", "momentum_new", f"{last}.grad", "kinetic0", "kinetic1")
    for b in range(problems):
        want = reference_step(*(f[k][b].astype(np.float64) for k in ("x", "y", "theta", "momentum", "grad")),
                              eps, scale ** 2, steps)
        for name, w in zip(names, want):
            close(run.outputs[name][b], w)
    assert run.profile.total_cycles == ik.estimate_network(net, batch=problems, dtype="float32",
                                                           partials="float", machine=SMALL).total_cycles


@pytest.mark.parametrize("shape", SHAPES[:2])
def test_gradient_path_equals_torch_autograd(shape):
    torch = pytest.importorskip("torch")
    n, d, steps, c, eps, scale, _ = shape
    net = hmc_logistic(n, d, steps, c, step_size=eps, prior_scale=scale)
    net.output("leapfrog0.theta", "leapfrog0.grad")
    f = feeds(n, d, c, 1, scale ** 2, seed=3)
    run = ik.run_network(net, f, {}, machine=SMALL)
    theta = torch.tensor(run.outputs["leapfrog0.theta"][0].astype(np.float64), requires_grad=True)
    z = torch.tensor(f["x"][0].astype(np.float64)) @ theta
    y = torch.tensor(f["y"][0].astype(np.float64))
    # the log posterior TFP differentiates: Bernoulli(logits=z) log-likelihood + normal prior
    log_post = (y * z - torch.nn.functional.softplus(z)).sum() - (theta ** 2).sum() / (2 * scale ** 2)
    (want,) = torch.autograd.grad(log_post, theta)
    close(run.outputs["leapfrog0.grad"][0], want.numpy())


def test_hmc_step_structure_and_pricing():
    steps = 3
    net = hmc_logistic(200, 25, steps, 8)
    assert net.n_params == 0
    ops = [layer.op for _, layer in net.layers]
    # two matmuls over the data per gradient, one reduction matmul per kinetic energy
    assert ops.count("matmul") == 2 * steps + 2 and ops.count("permute") == 1
    shapes = net.shapes(1)
    assert shapes["leapfrog0.grad.logits"] == (1, 200, 8) and shapes["kinetic1"] == (1, 1, 8)
    ipu = ik.estimate_network(net, batch=1)
    gpu = estimate_network_gpu(net, 1, "DGX_A100", n_gpus=1, stack="cuda-graphs")
    assert ipu.total_cycles > 0 and gpu.step_seconds > 0
    assert sum(row["kernels"] for row in gpu.layers if row["op"] == "matmul") == 2 * steps + 2
    # one more leapfrog step costs more on both sides
    ipu4 = ik.estimate_network(hmc_logistic(200, 25, steps + 1, 8), batch=1)
    assert ipu4.total_cycles > ipu.total_cycles


@pytest.mark.parametrize("kw, match", [
    ({"leapfrog_steps": 0}, "leapfrog_steps must be a positive int, got 0"),
    ({"chains": True}, "chains must be a positive int, got True"),
    ({"n_data": 2.5}, "n_data must be a positive int"),
    ({"step_size": -0.1}, "step_size must be a positive finite number, got -0.1"),
    ({"prior_scale": float("inf")}, "prior_scale must be a positive finite number"),
])
def test_bad_arguments_name_the_field(kw, match):
    with pytest.raises(ValueError, match=match):
        hmc_logistic(**kw)


def test_hmc_step_is_thread_count_independent():
    net = hmc_logistic(96, 7, 2, 5, step_size=0.03)
    f = feeds(96, 7, 5, 1, 1.0, seed=5)
    runs = []
    try:
        for n in (1, 2):
            ik.set_num_threads(n)
            runs.append(ik.run_network(net, f, {}, machine=SMALL))
    finally:
        ik.set_num_threads(None)
    for name in net.outputs:
        assert np.array_equal(runs[0].outputs[name], runs[1].outputs[name]), name
    assert runs[0].profile.total_cycles == runs[1].profile.total_cycles


def test_huge_leapfrog_count_is_refused_before_building():
    # the step is unrolled: 2**70 steps must be a clear error, not a network built for ever
    with pytest.raises(ValueError, match="leapfrog_steps must be a positive int, got 1180591620717411303424"):
        ik.models.hmc_logistic(leapfrog_steps=2**70)
