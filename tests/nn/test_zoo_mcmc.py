"""The HMC sampler step of the zoo (ipukern.nn.zoo_mcmc.hmc_logistic) executed on the tiles
equals a float64 NumPy HMC step of TFP's order, leapfrog and Metropolis accept (fp32: max
error <= 1e-4 of the largest magnitude, the zoo bound), and its gradient and log-probability
paths equal PyTorch autograd of the log posterior."""
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


def log_posterior(x, y, theta, prior_var):
    """float64 ``sum_n (y z - softplus(z)) - |theta|^2 / (2 sigma^2)`` per chain (1, chains)."""
    z = x @ theta
    return ((y * z - np.logaddexp(0.0, z)).sum(0, keepdims=True)
            - (theta * theta).sum(0, keepdims=True) / (2 * prior_var))


def reference_step(x, y, theta, p, g, eps, prior_var, steps):
    """TFP's SimpleLeapfrogIntegrator in float64, then the kinetic energies and the proposal's
    log posterior."""
    k0 = 0.5 * (p * p).sum(0, keepdims=True)
    p = p + 0.5 * eps * g
    for _ in range(steps):
        theta = theta + eps * p
        g = grad_log_posterior(x, y, theta, prior_var)
        p = p + eps * g
    p = p - 0.5 * eps * g
    return theta, p, g, k0, 0.5 * (p * p).sum(0, keepdims=True), log_posterior(x, y, theta, prior_var)


def feeds(n, d, c, problems, prior_var, seed=0, eps=0.01, steps=1):
    """Random problems; each chain's ``log u`` is 1 below the float64 log accept ratio on
    even chains (accepted) and 1 above it on odd ones (rejected), so the decision is clear of
    float32 rounding."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((problems, n, d)).astype(np.float32)
    labels = (rng.random((problems, n, 1)) < 0.5).astype(np.float32)
    theta = (0.1 * rng.standard_normal((problems, d, c))).astype(np.float32)
    p = rng.standard_normal((problems, d, c)).astype(np.float32)
    f = {"x": x, "y": np.repeat(labels, c, axis=2), "theta": theta, "momentum": p,
         "half": np.full((problems, 1, d), 0.5, np.float32), "ones": np.ones((problems, 1, n), np.float32),
         "ones_state": np.ones((problems, d, 1), np.float32)}
    f64 = [{k: f[k][b].astype(np.float64) for k in ("x", "y", "theta")} for b in range(problems)]
    f["grad"] = np.stack([grad_log_posterior(v["x"], v["y"], v["theta"], prior_var) for v in f64]
                         ).astype(np.float32)
    f["log_prob"] = np.stack([log_posterior(v["x"], v["y"], v["theta"], prior_var) for v in f64]
                             ).astype(np.float32)
    side = np.where(np.arange(c) % 2 == 0, -1.0, 1.0)
    f["log_u"] = np.stack([reference_accept(f, b, eps, prior_var, steps)[0] + side for b in range(problems)]
                          ).astype(np.float32)
    return f


def reference_accept(f, b, eps, prior_var, steps):
    """The float64 step of problem ``b``: (log accept ratio, proposal outputs)."""
    v = {k: f[k][b].astype(np.float64) for k in ("x", "y", "theta", "momentum", "grad", "log_prob")}
    out = reference_step(v["x"], v["y"], v["theta"], v["momentum"], v["grad"], eps, prior_var, steps)
    theta, p, g, k0, k1, lp1 = out
    return (lp1 - v["log_prob"]) + (k0 - k1), out


@pytest.mark.parametrize("shape", SHAPES)
def test_hmc_step_equals_float64_hmc(shape):
    n, d, steps, c, eps, scale, problems = shape
    net = hmc_logistic(n, d, steps, c, step_size=eps, prior_scale=scale)
    f = feeds(n, d, c, problems, scale ** 2, eps=eps, steps=steps)
    run = ik.run_network(net, f, {}, machine=SMALL)
    last = f"leapfrog{steps - 1}"
    names = (f"{last}.theta", "momentum_new", f"{last}.grad", "kinetic0", "kinetic1")
    for b in range(problems):
        ratio, want = reference_accept(f, b, eps, scale ** 2, steps)
        for name, w in zip(names, want):
            close(run.outputs[name][b], w)
        # the ratio is a difference of log posteriors: its error is relative to their size
        lp_size = np.abs(f["log_prob"][b]).max()
        assert np.abs(run.outputs["log_accept_ratio"][b] - ratio).max() <= 1e-4 * lp_size
        accept = np.arange(c) % 2 == 0                 # as feeds() placed log u
        assert np.array_equal(f["log_u"][b][0] < run.outputs["log_accept_ratio"][b][0], accept)
        # the chosen values are the proposal's or the current state's, bit for bit
        for nxt, prop, cur in (("next_theta", f"{last}.theta", f["theta"][b]),
                               ("next_grad", f"{last}.grad", f["grad"][b])):
            assert np.array_equal(run.outputs[nxt][b], np.where(accept, run.outputs[prop][b], cur))
        close(run.outputs["next_log_prob"][b], np.where(accept, want[5], f["log_prob"][b]))
    assert run.profile.total_cycles == ik.estimate_network(net, batch=problems, dtype="float32",
                                                           partials="float", machine=SMALL).total_cycles


@pytest.mark.parametrize("shape", SHAPES[:2])
def test_gradient_path_equals_torch_autograd(shape):
    torch = pytest.importorskip("torch")
    n, d, steps, c, eps, scale, _ = shape
    net = hmc_logistic(n, d, steps, c, step_size=eps, prior_scale=scale)
    net.output("leapfrog0.theta", "leapfrog0.grad", "leapfrog0.log_prob")
    f = feeds(n, d, c, 1, scale ** 2, seed=3, eps=eps, steps=steps)
    run = ik.run_network(net, f, {}, machine=SMALL)
    theta = torch.tensor(run.outputs["leapfrog0.theta"][0].astype(np.float64), requires_grad=True)
    z = torch.tensor(f["x"][0].astype(np.float64)) @ theta
    y = torch.tensor(f["y"][0].astype(np.float64))
    # the log posterior TFP differentiates: Bernoulli(logits=z) log-likelihood + normal prior
    per_chain = (y * z - torch.nn.functional.softplus(z)).sum(0) - (theta ** 2).sum(0) / (2 * scale ** 2)
    (want,) = torch.autograd.grad(per_chain.sum(), theta)
    close(run.outputs["leapfrog0.grad"][0], want.numpy())
    close(run.outputs["leapfrog0.log_prob"][0], per_chain.detach().numpy()[None, :])


def test_hmc_step_structure_and_pricing():
    steps = 3
    net = hmc_logistic(200, 25, steps, 8)
    assert net.n_params == 0
    ops = [layer.op for _, layer in net.layers]
    # per leapfrog step two matmuls over the data for the gradient and two reductions for the
    # log posterior; one reduction per kinetic energy; two broadcasts of the accept
    assert ops.count("matmul") == 4 * steps + 4 and ops.count("permute") == 1
    assert ops.count("softplus") == steps and ops.count("select") == 3
    shapes = net.shapes(1)
    assert shapes["leapfrog0.grad.logits"] == (1, 200, 8) and shapes["kinetic1"] == (1, 1, 8)
    assert shapes["accept.ratio"] == (1, 25, 8) and shapes["next_log_prob"] == (1, 1, 8)
    ipu = ik.estimate_network(net, batch=1)
    gpu = estimate_network_gpu(net, 1, "DGX_A100", n_gpus=1, stack="cuda-graphs")
    assert ipu.total_cycles > 0 and gpu.step_seconds > 0
    assert sum(row["kernels"] for row in gpu.layers if row["op"] == "matmul") == 4 * steps + 4
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
    f = feeds(96, 7, 5, 1, 1.0, seed=5, eps=0.03, steps=2)
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
