"""NCCL collectives on GPUs with NCCL's own cost model, and PyTorch DDP's gradient bucketing.

All-reduce time follows the model NCCL itself uses to choose an algorithm and a protocol
(``ncclTopoTuneModel`` and ``ncclTopoGetAlgoTime`` in ``src/graph/tuning.cc``, and
``topoGetAlgoInfo`` in ``src/enqueue.cc``), derived from NVIDIA/nccl at commit
``5067397c2676d5aed50042fc39e5c8ee96eb0027`` (2026-06, "Merge nccl4py v0.3.1"). Line numbers
below are of that commit. Per algorithm ``a`` (ring, tree) and protocol ``p`` (LL, LL128,
Simple)::

    time_us = latency_us[a][p] + nbytes / (1000 * algbw_GBps[a][p])       # tuning.cc:653

and NCCL runs the (a, p) with the smallest time, ties going to the first in the order tree,
ring and LL, LL128, Simple (enqueue.cc:2035-2044, strict ``<``).

Bandwidth. ``B`` is one GPU's bus bandwidth in GB/s: the intra-node figure on one node;
across nodes a ring is held to the node's NIC bandwidth (each ring channel leaves and enters
every node once, so a node's NICs carry what every GPU link carries), and a tree too, except
that at 2 nodes NCCL lets the tree's intra-node speed reach twice the inter-node one and uses
it (search.cc:1279, tuning.cc:306). Refinements (tuning.cc:327-335), with ``nch`` channels::

    ring LL     min(llMaxBw, 0.5 B)              ring LL128  min(0.92 B, nch x perChRingLL128)
    tree (all)  B' = min(0.92 B, nch x perChTree)
    tree LL     min(B' / 3.8, llMaxBw)           tree LL128  min(B' x (7/9 one node, 120/128
                                                                  more), nch x perChTreeLL128)

then bus -> algorithm bandwidth (tuning.cc:376-382): ring x n / (2 (n - 1)) (so a ring moves
``2 (n-1)/n x nbytes`` over each GPU's link), tree x 0.5. A tree's algorithm bandwidth is also
multiplied by NCCL's per-size correction (tuning.cc:620-627, 639-641).

Channels. NCCL's topology search gives each channel a speed from a fixed list and as many
channels as fit (search.cc:1051-1061, 1170-1174), then doubles the channels at half the speed
when the speed is >= 25 GB/s (``ncclTopoDupChannels``, search.cc:1036-1049). The model takes
the first listed speed <= the per-GPU bandwidth (per NIC, one NIC per GPU, across nodes),
applies the doubling, and counts ``nch = B / speed`` channels; it keeps the given ``B`` where
NCCL's search rounds the channel count down (documented simplification).

Latency (tuning.cc:384-417), with ``n`` ranks, ``ppn`` GPUs per node and ``N`` nodes::

    ring   base + (2(n-1) - 2(N-1)) x max(hw_intra, netOverhead) + 2(N-1) x hw_net
    tree   base + 2 x ((ppn - 1) x hw_intra + floor(log2 N) x hw_net)

``netOverhead`` is 1 us (x3 for Simple) across nodes (tuning.cc:228-233, 404-410); the NIC's
own ``latencyInter`` is 0 (the IB and socket plugins leave it unset: net_ib/init.cc:558,
net_socket.cc:174). With one GPU per node the ring uses the tree's network latency
(tuning.cc:386-388). A multi-node Simple ring's latency is x1.4 (x1.9 before Ampere) when
each channel-rank share is >= 64 B (the "plateau", tuning.cc:647-650).

Protocols. LL128 is on by default only with NVLink inside the node and compute capability
>= 7.0 (tuning.cc:518-536); PCIe-only nodes and Pascal run LL and Simple. NVLS (NVLink SHARP,
Hopper), CollNet and PAT are not modelled: the result is NCCL with ``NCCL_NVLS_ENABLE=0``
and no SHARP network, which on a DGX H100 is slower than NCCL's default for large messages.

GAP: the host CPU. NCCL picks ``llMaxBw`` and the network overhead by CPU vendor across
nodes; the model assumes Intel (llMaxBw 39.0/20.4 GB/s, overhead 1 us). An AMD host (DGX
A100's EPYC) has 22.5/19.0 GB/s and 2 us (tuning.cc:179-182, 230-231).
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np

__all__ = ["CollectiveTime", "all_reduce_seconds", "DDPOverlap", "ddp_exposed_seconds",
           "ALGORITHMS", "PROTOCOLS", "NCCL_COMMIT", "DDP_BUCKET_BYTES", "DDP_FIRST_BUCKET_BYTES"]

NCCL_COMMIT = "5067397c2676d5aed50042fc39e5c8ee96eb0027"
ALGORITHMS = ("auto", "ring", "tree")
#: protocol order of NCCL_PROTO_LL/LL128/SIMPLE = 0/1/2 (src/include/plugin/nccl_tuner.h:38-40)
PROTOCOLS = ("LL", "LL128", "Simple")
_ARCHS = ("pascal", "volta", "turing", "ampere", "ada", "hopper")
_LINKS = ("nvlink", "pcie")

# tuning.cc:151 baseLatencies (us), per protocol (LL, LL128, Simple)
_BASE_LAT_US = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4)}
# tuning.cc:159 (NVLink), :165 (PCI), :171 (NET) hwLatencies (us) per hop
_HW_LAT_US = {
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4)},
    "pcie": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7)},
    "net": {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0)},
}
# tuning.cc:263-266: compute-capability index (Volta for < sm_80, Ampere sm_80..89, Hopper sm_90)
_CC_INDEX = {"pascal": 0, "volta": 0, "turing": 0, "ampere": 1, "ada": 1, "hopper": 2}
_COMPUTE_CAP = {"pascal": 60, "volta": 70, "turing": 75, "ampere": 80, "ada": 89, "hopper": 90}
# GB/s, indexed [cc index][min(nodes, 3) - 1]
_LL_MAX_BW_ONE_NODE = (39.0, 87.7, 141.0)          # tuning.cc:179-181, column N1, by GPU
_LL_MAX_BW_INTEL = (39.0, 39.0, 20.4)              # tuning.cc:179 (Intel row), multi-node
_PER_CH_RING_LL128 = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7))   # :186-188
_PER_CH_TREE_LL128 = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0))   # :193-195
_PER_CH_TREE = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0))         # :200-202
# tuning.cc:623-627 treeCorrectionFactor[protocol][log2(nbytes / 64)], 64 B .. 256 MB
_TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
)
# search.cc:1051-1053 (before sm_90) and :1057-1059 (sm_90) channel speeds, GB/s
_SPEEDS_INTRA = ((40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
                 (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0))
_SPEEDS_INTER = ((48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0,
                  2.4, 1.2, 0.24, 0.12),
                 (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2,
                  0.24, 0.12))
_NET_OVERHEAD_US = 1.0         # tuning.cc:230,232 getNetOverhead: Intel x86 and others 1 us


@dataclass(frozen=True)
class CollectiveTime:
    """Modelled time of one collective and how NCCL would run it.

    Attributes
    ----------
    seconds : float
        latency_s + bandwidth_s.
    algorithm : str
        ``"ring"`` or ``"tree"`` (``"none"`` for one GPU).
    protocol : str
        ``"LL"``, ``"LL128"`` or ``"Simple"`` (``"none"`` for one GPU).
    latency_s : float
        The size-independent term.
    bandwidth_s : float
        nbytes / algorithm bandwidth.
    bus_bytes_per_s : float
        Bus bandwidth in the nccl-tests sense: algorithm bandwidth x 2 (n - 1) / n.
    """

    seconds: float
    algorithm: str
    protocol: str
    latency_s: float
    bandwidth_s: float
    bus_bytes_per_s: float


def _check_count(name: str, v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, Integral):
        raise TypeError(f"{name} must be an int, got {v!r}")
    if v < 1:
        raise ValueError(f"{name} must be >= 1, got {v}")
    return int(v)


def _check_rate(name: str, v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, Real) or not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a positive finite number of bytes/s, got {v!r}")
    return float(v)


def _channel_speed(per_gpu_gbps: float, speeds: Sequence[float], cc: int) -> float:
    """Per-channel speed (GB/s) NCCL's search would settle on (see the module docstring)."""
    speed = next((s for s in speeds if s <= per_gpu_gbps), speeds[-1])
    # search.cc:1039-1040: no doubling below 25 GB/s, nor on sm_90 below 50 GB/s
    if speed >= 25.0 and not (cc > 80 and speed < 50.0):
        speed /= 2
    return speed


@functools.lru_cache(maxsize=1024)    # pure in its arguments; a step prices ~20 buckets
def _bus_bandwidths(n: int, nodes: int, intra_gbps: float, inter_gbps: float, arch: str,
                    intra_link: str) -> tuple[dict[tuple[str, str], float], float]:
    """NCCL's bus bandwidth (GB/s) per (algorithm, protocol), tuning.cc:306-335, and the
    channel count."""
    cc, ci = _COMPUTE_CAP[arch], _CC_INDEX[arch]
    col = min(nodes, 3) - 1                                            # tuning.cc:267
    ring_b = intra_gbps if nodes == 1 else min(intra_gbps, inter_gbps)
    tree_b = ring_b if nodes != 2 else min(intra_gbps, 2 * inter_gbps)
    if nodes == 1:
        ll_max = _LL_MAX_BW_ONE_NODE[ci]
        nch = ring_b / _channel_speed(ring_b, _SPEEDS_INTRA[cc >= 90], cc)
    else:
        ll_max = _LL_MAX_BW_INTEL[col]
        # GAP: one NIC per GPU (rail-optimised DGX): a channel runs at one GPU's NIC share
        nch = ring_b / _channel_speed(inter_gbps * nodes / n, _SPEEDS_INTER[cc >= 90], cc)
    tree = min(0.92 * tree_b, nch * _PER_CH_TREE[ci][col])            # tuning.cc:330-331
    out = {
        ("ring", "LL"): min(ll_max, 0.5 * ring_b),                     # tuning.cc:327
        ("ring", "LL128"): min(0.92 * ring_b, nch * _PER_CH_RING_LL128[ci][col]),   # :328-329
        ("ring", "Simple"): ring_b,
        ("tree", "LL"): min(tree / 3.8, ll_max),                       # tuning.cc:332
        ("tree", "LL128"): min(tree * (7 / 9 if nodes == 1 else 120 / 128),
                               nch * _PER_CH_TREE_LL128[ci][col]),     # tuning.cc:333-335
        ("tree", "Simple"): tree,
    }
    if intra_link != "nvlink" or cc < 70:                              # tuning.cc:518-536
        del out[("ring", "LL128")], out[("tree", "LL128")]
    return out, nch


@functools.lru_cache(maxsize=1024)
def _latency_us(algorithm: str, p: int, n: int, nodes: int, intra_link: str) -> float:
    """NCCL's latency (us) of one all-reduce, tuning.cc:384-417."""
    ppn = n // nodes
    lat = _BASE_LAT_US[algorithm][p]
    intra = _HW_LAT_US[intra_link][algorithm][p]
    inter = _HW_LAT_US["net"]["tree" if ppn == 1 else algorithm][p]   # tuning.cc:387-388
    if algorithm == "ring":
        overhead = 0.0 if nodes == 1 else _NET_OVERHEAD_US * (3 if p == 2 else 1)
        inter_steps = 2 * (nodes - 1)
        return lat + (2 * (n - 1) - inter_steps) * max(intra, overhead) + inter_steps * inter
    return lat + 2 * ((ppn - 1) * intra + int(math.log2(nodes)) * inter)


def all_reduce_seconds(nbytes: float, *, gpus_per_node: int, nodes: int = 1,
                       intra_bytes_per_s: float, inter_bytes_per_s: float | None = None,
                       algorithm: str = "auto", arch: str = "ampere",
                       intra_link: str = "nvlink") -> CollectiveTime:
    """NCCL all-reduce of ``nbytes`` per GPU, timed by NCCL's own tuning model.

    Parameters
    ----------
    nbytes : float
        Bytes each GPU contributes (and receives).
    gpus_per_node : int
        GPUs in each node.
    nodes : int
        Nodes.
    intra_bytes_per_s : float
        One GPU's bus bandwidth inside a node, per direction, as NCCL's topology sees it
        (NVLink/NVSwitch, or PCIe).
    inter_bytes_per_s : float, optional
        One node's network bandwidth per direction, all its compute NICs together (NICs x
        rate). Required when ``nodes > 1``.
    algorithm : {"auto", "ring", "tree"}
        ``"auto"`` picks as NCCL does; otherwise the fastest protocol of that algorithm.
    arch : str
        GPU architecture (``pascal`` .. ``hopper``): picks NCCL's per-architecture constants.
    intra_link : {"nvlink", "pcie"}
        What joins the GPUs of a node (sets the per-hop latency and whether LL128 runs).

    Returns
    -------
    CollectiveTime

    Raises
    ------
    ValueError
        Negative or non-finite ``nbytes``, counts < 1, non-positive bandwidths, a missing
        ``inter_bytes_per_s`` on several nodes, or an unknown algorithm, arch or link.
    TypeError
        Non-int counts.
    """
    if isinstance(nbytes, bool) or not isinstance(nbytes, Real) or not math.isfinite(nbytes) or nbytes < 0:
        raise ValueError(f"nbytes must be a finite number >= 0, got {nbytes!r}")
    ppn, nodes = _check_count("gpus_per_node", gpus_per_node), _check_count("nodes", nodes)
    intra = _check_rate("intra_bytes_per_s", intra_bytes_per_s)
    if nodes > 1 and inter_bytes_per_s is None:
        raise ValueError(f"inter_bytes_per_s is needed for {nodes} nodes (NICs x rate per node)")
    inter = intra if inter_bytes_per_s is None else _check_rate("inter_bytes_per_s", inter_bytes_per_s)
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    if arch not in _ARCHS:
        raise ValueError(f"arch must be one of {_ARCHS}, got {arch!r}")
    if intra_link not in _LINKS:
        raise ValueError(f"intra_link must be one of {_LINKS}, got {intra_link!r}")
    n = ppn * nodes
    if n == 1:                                                         # enqueue.cc:1993-1996
        return CollectiveTime(0.0, "none", "none", 0.0, 0.0, math.inf)
    bus, nch = _bus_bandwidths(n, nodes, intra / 1e9, inter / 1e9, arch, intra_link)
    log_size = int(nbytes) >> 6
    log_size = log_size.bit_length() - 1                               # log2i(nBytes >> 6)
    best: tuple[float, str, str, float, float] | None = None
    for a in ("tree", "ring"):                                         # NCCL_ALGO_TREE = 0, RING = 1
        if algorithm not in ("auto", a):
            continue
        for p, proto in enumerate(PROTOCOLS):
            if (a, proto) not in bus:
                continue
            alg_bw = bus[(a, proto)] * (n / (2 * (n - 1)) if a == "ring" else 0.5)   # :376-382
            if a == "tree" and 0 <= log_size < 23:                     # tuning.cc:640-641
                alg_bw *= _TREE_CORRECTION[p][log_size]
            lat = _latency_us(a, p, n, nodes, intra_link)
            if a == "ring" and p == 2 and nodes > 1 and nbytes / (math.ceil(nch) * n) >= 64:
                # tuning.cc:647-650, the ring's "plateau"
                lat *= 1.4 if _COMPUTE_CAP[arch] >= 80 else 1.9
            t_bw = nbytes / (1000 * alg_bw)
            if best is None or lat + t_bw < best[0]:                   # enqueue.cc:2038 strict <
                best = (lat + t_bw, a, proto, lat, alg_bw)
    assert best is not None                                            # Simple always exists
    total_us, a, proto, lat_us, alg_bw = best
    return CollectiveTime(seconds=total_us * 1e-6, algorithm=a, protocol=proto, latency_s=lat_us * 1e-6,
                          bandwidth_s=(total_us - lat_us) * 1e-6,
                          bus_bytes_per_s=alg_bw * 1e9 * 2 * (n - 1) / n)


# =========================================================================== PyTorch DDP
#: torch/nn/parallel/distributed.py: DistributedDataParallel(bucket_cap_mb=25), turned into
#: bytes as ``int(bucket_cap_mb * 1024 * 1024)``
DDP_BUCKET_BYTES = 25 * 2**20
#: torch/nn/parallel/distributed.py ``_DEFAULT_FIRST_BUCKET_BYTES`` =
#: ``dist._DEFAULT_FIRST_BUCKET_BYTES`` (c10d reducer.hpp ``kDefaultFirstBucketBytes``, 1 MiB)
DDP_FIRST_BUCKET_BYTES = 2**20


@dataclass(frozen=True)
class DDPOverlap:
    """PyTorch DDP's bucketed gradient all-reduce against the backward pass.

    Attributes
    ----------
    backward_s : float
        When the last gradient is ready (seconds from the start of backward).
    comm_s : float
        Sum of the buckets' all-reduce times.
    finish_s : float
        When the last bucket's all-reduce ends (``backward_s`` with no buckets).
    exposed_s : float
        ``max(0, finish_s - backward_s)``: the all-reduce time the backward pass does not hide.
    buckets : int
        Buckets formed.
    """

    backward_s: float
    comm_s: float
    finish_s: float
    exposed_s: float
    buckets: int


def _as_vector(name: str, values: Sequence[float] | np.ndarray) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a sequence of numbers, got {type(values).__name__}") from None
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    bad = ~np.isfinite(arr) | (arr < 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{name}[{i}] must be a finite number >= 0, got {arr[i]!r}")
    return arr


def _bucket_ends(sizes: np.ndarray, first_cap: float, cap: float) -> np.ndarray:
    """Index one past the last tensor of each bucket. A bucket closes at the first tensor that
    brings it to >= its cap (c10d reducer.cpp ``compute_bucket_assignment_by_size``)."""
    csum = np.cumsum(sizes)
    ends, start, base, limit = [], 0, 0.0, first_cap
    while start < len(sizes):
        end = int(np.searchsorted(csum, base + limit, side="left")) + 1
        end = min(max(end, start + 1), len(sizes))
        ends.append(end)
        start, base, limit = end, float(csum[end - 1]), cap
    return np.asarray(ends, dtype=np.intp)


def ddp_exposed_seconds(grad_ready_s: Sequence[float] | np.ndarray, grad_bytes: Sequence[float] | np.ndarray,
                        *, all_reduce: Callable[[float], float], bucket_bytes: float = DDP_BUCKET_BYTES,
                        first_bucket_bytes: float = DDP_FIRST_BUCKET_BYTES) -> DDPOverlap:
    """How much of DDP's gradient all-reduce the backward pass leaves exposed.

    Gradients fill buckets in the order backward produces them: the first bucket up to
    ``first_bucket_bytes``, later ones up to ``bucket_bytes`` (a bucket closes with the tensor
    that reaches its cap). A bucket's all-reduce starts when its last gradient is ready and
    the previous bucket's all-reduce has finished (one NCCL stream)::

        finish[k] = max(ready[k], finish[k-1]) + all_reduce(bytes[k])

    Parameters
    ----------
    grad_ready_s : sequence of float, shape (n_params,)
        Seconds from backward start at which each gradient is ready, in production order.
    grad_bytes : sequence of float, shape (n_params,)
        Each gradient's size in bytes.
    all_reduce : callable
        Bytes -> seconds of one all-reduce (e.g. a :class:`GPUSystem`'s
        ``all_reduce_seconds`` wrapped to return ``.seconds``).
    bucket_bytes, first_bucket_bytes : float
        Bucket caps (PyTorch's defaults: 25 MiB and 1 MiB).

    Returns
    -------
    DDPOverlap

    Raises
    ------
    ValueError
        Lengths differ, negative or non-finite entries, non-positive caps, or ``all_reduce``
        returned a negative or non-finite time.
    TypeError
        ``all_reduce`` is not callable, or the inputs are not numeric.
    """
    ready, sizes = _as_vector("grad_ready_s", grad_ready_s), _as_vector("grad_bytes", grad_bytes)
    if ready.shape != sizes.shape:
        raise ValueError(f"grad_ready_s and grad_bytes differ in length: {ready.size} vs {sizes.size}")
    if not callable(all_reduce):
        raise TypeError(f"all_reduce must be a callable bytes -> seconds, got {type(all_reduce).__name__}")
    _check_rate("bucket_bytes", bucket_bytes)
    _check_rate("first_bucket_bytes", first_bucket_bytes)
    if ready.size == 0:
        return DDPOverlap(0.0, 0.0, 0.0, 0.0, 0)
    ends = _bucket_ends(sizes, float(first_bucket_bytes), float(bucket_bytes))
    starts = np.concatenate(([0], ends[:-1]))
    bucket_ready = np.maximum.reduceat(ready, starts)
    bucket_size = np.add.reduceat(sizes, starts)
    comm = np.array([all_reduce(float(b)) for b in bucket_size], dtype=np.float64)
    bad = ~np.isfinite(comm) | (comm < 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"all_reduce({bucket_size[i]:.0f}) returned {float(comm[i])!r}; "
                         "expected seconds >= 0")
    # finish[k] = max(ready[k], finish[k-1]) + d[k] unrolled: C[k] + max_{j<=k}(ready[j] - C[j-1])
    c = np.cumsum(comm)
    finish = c + np.maximum.accumulate(bucket_ready - (c - comm))
    backward = float(ready.max())
    finish_s = float(finish[-1])
    return DDPOverlap(backward_s=backward, comm_s=float(c[-1]), finish_s=finish_s,
                      exposed_s=max(0.0, finish_s - backward), buckets=int(ends.size))
