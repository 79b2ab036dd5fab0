"""GPU systems: nodes of identical GPUs on an NVSwitch (or PCIe), joined by compute NICs, with
NCCL's all-reduce (:mod:`.comm`) between them.

NCCL's view of a link. NCCL's topology model does not use the datasheet NVLink rate: it counts
each NVLink at ``SMxx_NVLINK_BW`` GB/s per direction (NCCL ``src/graph/topo.h:19-24`` at the
commit of :data:`~ipukern.gpu.comm.NCCL_COMMIT`: 18 for sm_60, 20 for sm_70 and sm_80, 20.6
for sm_90) where the link signals 20 (NVLink1) or 25 GB/s (NVLink2-4) per direction. A
system's intra-node bus bandwidth for :func:`~ipukern.gpu.comm.all_reduce_seconds` is
therefore the datasheet NVLink rate x that fraction (A100: 12 links x 20 = 240 GB/s of the
300). PCIe is counted as NCCL's ``PCI_BW`` = 12 GB/s per Gen3 x16 (topo.h:25) of its 16 GB/s
(0.75, applied to every PCIe generation: GAP, NCCL scales by the link width and speed the
kernel reports). A NIC is counted at its signalling rate (the IB plugin reports the port
speed), so a node's network bandwidth is NICs x rate.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import Any

from .comm import CollectiveTime, all_reduce_seconds
from .specs import A100_40GB, A100_80GB, H100, GPUSpec, get_gpu

__all__ = ["GPUSystem", "DGX_A100", "DGX_A100_40GB", "DGX_H100", "GPU_SYSTEMS", "get_gpu_system",
           "gpu_all_reduce_seconds", "NCCL_NVLINK_FRACTION", "NCCL_PCIE_FRACTION"]

#: NCCL's per-link NVLink figure / the link's signalling rate per direction, per architecture
#: (topo.h:19-24 SM60 18.0, SM70 20.0, SM80 20.0, SM90 20.6 GB/s; NVLink1 20, NVLink2-4 25 GB/s
#: per link per direction: P100, V100, A100, H100 datasheets). Turing (TITAN RTX's bridge)
#: takes the sm_70 figure (topo.h:279-280: compute capability >= 70). Ada has no NVLink.
NCCL_NVLINK_FRACTION = {"pascal": 18.0 / 20.0, "volta": 20.0 / 25.0, "turing": 20.0 / 25.0,
                        "ampere": 20.0 / 25.0, "ada": 20.0 / 25.0, "hopper": 20.6 / 25.0}
#: NCCL's PCI_BW 12 GB/s for a Gen3 x16 link of 16 GB/s per direction (topo.h:25); GAP for Gen4/5
NCCL_PCIE_FRACTION = 12.0 / 16.0


def _positive_or_none(owner: str, name: str, v: Any) -> None:
    if v is not None and (isinstance(v, bool) or not isinstance(v, Real) or not math.isfinite(v) or v <= 0):
        raise ValueError(f"{owner}.{name} must be a positive finite number of bytes/s or None, got {v!r}")


@dataclass(frozen=True)
class GPUSystem:
    """``nodes`` nodes of ``gpus_per_node`` identical GPUs.

    Inside a node every GPU reaches every other at its full NVLink rate (an NVSwitch), or over
    PCIe when the system has no NVLink; nodes are joined by their compute NICs.

    Parameters
    ----------
    name : str
    gpu : GPUSpec or str
        The GPU (a preset name is resolved with :func:`~ipukern.gpu.get_gpu`).
    gpus_per_node : int
    nodes : int
    nvlink_bytes_per_s : float, optional
        One GPU's NVLink bandwidth per direction over the switch; default the GPU's own
        ``nvlink_bytes_per_s``; a system whose GPUs have none talks over PCIe.
    nic_bytes_per_s : float, optional
        One node's network bandwidth per direction, all its compute NICs together. Required
        when ``nodes > 1``.
    sources : tuple of (str, str)
        Provenance shown by :meth:`describe`.
    """

    name: str
    gpu: GPUSpec
    gpus_per_node: int
    nodes: int = 1
    nvlink_bytes_per_s: float | None = None
    nic_bytes_per_s: float | None = None
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        owner = f"GPUSystem({self.name!r})"
        object.__setattr__(self, "gpu", get_gpu(self.gpu))
        for fname in ("gpus_per_node", "nodes"):
            v = getattr(self, fname)
            if isinstance(v, bool) or not isinstance(v, Integral) or v < 1:
                raise ValueError(f"{owner}.{fname} must be a positive int, got {v!r}")
        _positive_or_none(owner, "nvlink_bytes_per_s", self.nvlink_bytes_per_s)
        _positive_or_none(owner, "nic_bytes_per_s", self.nic_bytes_per_s)
        if self.nodes > 1 and self.nic_bytes_per_s is None:
            raise ValueError(f"{owner}: {self.nodes} nodes need nic_bytes_per_s (NICs x rate per node)")

    @property
    def n_gpus(self) -> int:
        """gpus_per_node x nodes."""
        return self.gpus_per_node * self.nodes

    @property
    def intra_link(self) -> str:
        """``"nvlink"`` or ``"pcie"``: what joins the GPUs of a node."""
        return "pcie" if self._nvlink is None else "nvlink"

    @property
    def _nvlink(self) -> float | None:
        return self.gpu.nvlink_bytes_per_s if self.nvlink_bytes_per_s is None else self.nvlink_bytes_per_s

    @property
    def link_bytes_per_second(self) -> float:
        """One GPU's datasheet intra-node rate per direction (NVLink, else PCIe)."""
        nvlink = self._nvlink
        return self.gpu.pcie_bytes_per_s if nvlink is None else nvlink

    @property
    def nccl_intra_bytes_per_s(self) -> float:
        """The intra-node bus bandwidth NCCL's topology model sees (module docstring)."""
        if self.intra_link == "pcie":
            return self.link_bytes_per_second * NCCL_PCIE_FRACTION
        return self.link_bytes_per_second * NCCL_NVLINK_FRACTION[self.gpu.arch]

    def all_reduce_seconds(self, nbytes: float, n_gpus: int | None = None,
                           algorithm: str = "auto") -> CollectiveTime:
        """NCCL all-reduce of ``nbytes`` per GPU on ``n_gpus`` of the system (default all).

        ``n_gpus`` up to ``gpus_per_node`` use one node; more must be whole nodes.

        Raises
        ------
        ValueError
            ``n_gpus`` < 1, more than the system has, or not whole nodes; bad ``nbytes`` or
            ``algorithm`` (as :func:`~ipukern.gpu.comm.all_reduce_seconds`).
        """
        n = self.n_gpus if n_gpus is None else n_gpus
        if isinstance(n, bool) or not isinstance(n, Integral) or not 1 <= n <= self.n_gpus:
            raise ValueError(f"{self.name} has {self.n_gpus} GPUs; cannot use n_gpus={n!r}")
        if n <= self.gpus_per_node:
            ppn, nodes = int(n), 1
        elif n % self.gpus_per_node:
            raise ValueError(f"{self.name}: n_gpus={n} is not whole nodes of {self.gpus_per_node} GPUs")
        else:
            ppn, nodes = self.gpus_per_node, int(n) // self.gpus_per_node
        return all_reduce_seconds(nbytes, gpus_per_node=ppn, nodes=nodes,
                                  intra_bytes_per_s=self.nccl_intra_bytes_per_s,
                                  inter_bytes_per_s=self.nic_bytes_per_s, algorithm=algorithm,
                                  arch=self.gpu.arch, intra_link=self.intra_link)

    def replace(self, **changes: Any) -> GPUSystem:
        """Copy with some fields changed; the name gets a ``*`` unless one is given."""
        changes.setdefault("name", self.name + "*")
        return dataclasses.replace(self, **changes)

    @classmethod
    def cluster(cls, base: GPUSystem, nodes: int) -> GPUSystem:
        """``nodes`` copies of the one-node system ``base``, named ``"<base>x<nodes>"``.

        Raises
        ------
        ValueError
            ``base`` spans several nodes already, or has no ``nic_bytes_per_s``.
        """
        if base.nodes != 1:
            raise ValueError(f"cluster() wants a one-node base system; {base.name} has {base.nodes} nodes")
        return base.replace(name=f"{base.name}x{nodes}", nodes=nodes)

    def peak_flops(self, dtype: Any = "float16") -> float:
        """Compute peak of all GPUs in FLOP/s (see :meth:`GPUSpec.peak_flops`)."""
        return self.n_gpus * self.gpu.peak_flops(dtype)

    def describe(self) -> str:
        """Multi-line human-readable summary."""
        nic = "n/a" if self.nic_bytes_per_s is None else f"{self.nic_bytes_per_s / 1e9:.0f} GB/s"
        lines = [
            f"{self.name}: {self.nodes} x {self.gpus_per_node} x {self.gpu.name} ({self.n_gpus} GPUs)",
            f"  intra-node           {self.intra_link}, {self.link_bytes_per_second / 1e9:.0f} GB/s per GPU "
            f"per direction (NCCL sees {self.nccl_intra_bytes_per_s / 1e9:.0f})",
            f"  network              {nic} per node per direction",
            f"  FP16 peak            {self.peak_flops('float16') / 1e15:.2f} PFLOP/s",
        ]
        lines += [f"  source: {key}: {src}" for key, src in self.sources]
        return "\n".join(lines)


#: NVIDIA DGX A100 as MLPerf Training v1.0/v1.1 ran it: 8 x A100-SXM4-80GB (the 640 GB system).
DGX_A100 = GPUSystem(
    "DGX_A100", A100_80GB, 8,
    nvlink_bytes_per_s=300e9,           # DGX A100 datasheet: 6 NVSwitch, NVLink3 600 GB/s bidir per GPU
    # DGX A100 datasheet: 8 x 200 Gb/s HDR InfiniBand compute NICs (/ 8 bits per byte)
    nic_bytes_per_s=8 * 200e9 / 8,
    sources=(("GPUs", "8 x A100 SXM4 80 GB (DGX A100 640GB datasheet; MLPerf v1.0 system JSON)"),
             ("NVSwitch", "6 NVSwitch, NVLink3 600 GB/s bidirectional per GPU (DGX A100 datasheet)"),
             ("network", "8 x ConnectX-6 200 Gb/s HDR InfiniBand (DGX A100 datasheet)"),
             ("all-reduce", "NCCL's tuning model (ipukern.gpu.comm)")),
)
#: the original DGX A100 (320 GB): 8 x A100-SXM4-40GB, otherwise as :data:`DGX_A100`
DGX_A100_40GB = DGX_A100.replace(
    name="DGX_A100_40GB", gpu=A100_40GB,
    sources=(("GPUs", "8 x A100 SXM4 40 GB (DGX A100 320GB datasheet)"),) + DGX_A100.sources[1:],
)
#: NVIDIA DGX H100: 8 x H100 SXM5, 4 NVSwitch
DGX_H100 = GPUSystem(
    "DGX_H100", H100, 8,
    nvlink_bytes_per_s=450e9,           # DGX H100 datasheet: NVLink4 900 GB/s bidirectional per GPU
    # DGX H100 datasheet: 8 x 400 Gb/s NDR ConnectX-7 compute NICs (/ 8 bits per byte)
    nic_bytes_per_s=8 * 400e9 / 8,
    sources=(("GPUs", "8 x H100 SXM5 80 GB (DGX H100 datasheet)"),
             ("NVSwitch", "4 NVSwitch, NVLink4 900 GB/s bidirectional per GPU (DGX H100 datasheet)"),
             ("network", "8 x ConnectX-7 400 Gb/s NDR InfiniBand (DGX H100 datasheet)"),
             ("all-reduce", "NCCL's tuning model without NVLS (ipukern.gpu.comm)")),
)
GPU_SYSTEMS: dict[str, GPUSystem] = {s.name: s for s in (DGX_A100, DGX_A100_40GB, DGX_H100)}
#: MLPerf's name for the 80 GB DGX A100 (ipukern/validation/published_systems.csv)
_SYSTEM_ALIASES = {"DGX_A100_80GB": "DGX_A100"}


def get_gpu_system(s: GPUSystem | str) -> GPUSystem:
    """Resolve a preset name (case-insensitive, ``-`` = ``_``) or pass a GPUSystem through.

    Raises
    ------
    ValueError
        Unknown name (the message lists the presets).
    """
    if isinstance(s, GPUSystem):
        return s
    if isinstance(s, str):
        key = s.strip().upper().replace("-", "_")
        key = _SYSTEM_ALIASES.get(key, key)
        if key in GPU_SYSTEMS:
            return GPU_SYSTEMS[key]
    raise ValueError(f"unknown GPU system {s!r}; presets are {sorted(GPU_SYSTEMS)}")


def gpu_all_reduce_seconds(system: GPUSystem | str, nbytes: float, n_gpus: int | None = None) -> float:
    """Seconds of an NCCL all-reduce of ``nbytes`` per GPU (:meth:`GPUSystem.all_reduce_seconds`).

    ``n_gpus`` <= 1 takes no time, as before the NCCL model.
    """
    system = get_gpu_system(system)
    if isinstance(nbytes, bool) or not isinstance(nbytes, Real) or not math.isfinite(nbytes) or nbytes < 0:
        raise ValueError(f"nbytes must be a finite number >= 0, got {nbytes!r}")
    if n_gpus is not None and not isinstance(n_gpus, bool) and isinstance(n_gpus, Integral) and n_gpus <= 1:
        return 0.0
    return system.all_reduce_seconds(nbytes, n_gpus).seconds
