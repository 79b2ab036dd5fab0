"""Vertex candidates for a conv, best first (``lib/poplin/ConvVertexType.cpp``) and the
combineConvGroups factors (``lib/poplin/ConvPlan.cpp``)."""
from __future__ import annotations

from functools import lru_cache

from ...core.cost import ceil_div
from ...core.tensor import split_candidates
from ...dtypes import DTYPES, canonical_dtype
from ...machine import MachineSpec
from .methods import _FLOAT, _HALF, VertexMethod, _positive_int

__all__ = ["candidate_methods", "combine_group_factors", "direct_output_candidates"]


def combine_group_factors(machine: MachineSpec, in_dtype: str, in_per_group: int,
                          n_groups: int) -> list[int]:
    """combineConvGroups factors F > 1 worth trying (§2.2 item 7, ConvPlan.cpp).

    Only for several groups of 1 input channel (float) or 1-2 (half): powers of two from
    (AMP input elements per load) / Ci up to (weights per conv unit) / Ci, e.g. half Ci=1:
    [4, 8, 16]; half Ci=2: [2, 4, 8]; float Ci=1: [2, 4, 8].

    Parameters
    ----------
    machine : MachineSpec
    in_dtype : str
    in_per_group : int
        Input channels per group of the conv.
    n_groups : int
        Conv groups.

    Returns
    -------
    list of int
        Factors F > 1 (empty when the transform does not apply).
    """
    dt = canonical_dtype(in_dtype)
    ci = _positive_int("in_per_group", in_per_group)
    g = _positive_int("n_groups", n_groups)
    small = ci == 1 or (dt == _HALF and ci == 2)
    if g < 2 or not small:
        return []
    f = max(1, machine.vector_elems(dt) // ci)
    top = machine.amp_in_chans(dt) // ci
    out = []
    while f <= top:
        out.append(f)
        f *= 2
    return out


@lru_cache(maxsize=4096)
def _method(method: str, in_dtype: str, partials_dtype: str, cgpg: int, icpg: int, pcpg: int,
            conv_units: int = 0, slic_chains: int = 0, combine_groups: int = 1) -> VertexMethod:
    """A (frozen, validated) :class:`VertexMethod`, memoised: the candidate lists of every
    conv repeat the same few dozen."""
    return VertexMethod(method, in_dtype, partials_dtype, cgpg, icpg, pcpg,
                        conv_units=conv_units, slic_chains=slic_chains, combine_groups=combine_groups)


def _amp_candidates(machine: MachineSpec, in_dtype: str, partials_dtype: str,
                    combine: int) -> list[VertexMethod]:
    pt = partials_dtype
    on_chip = machine.amp_units(in_dtype, pt)
    if on_chip == 0 and pt == _HALF:
        # no half-partials AMP mode: PopLibs falls back to float partials
        pt = _FLOAT
        on_chip = machine.amp_units(in_dtype, pt)
    if on_chip == 0:
        return []
    wpu = machine.amp_in_chans(in_dtype)
    vw = machine.vector_elems(in_dtype)
    unit_modes = [on_chip] + ([8] if on_chip > 8 else [])
    pcpg_modes = sorted({on_chip, wpu} | ({8} if on_chip > 8 else set()), reverse=True)
    out = []
    for units in unit_modes:
        used_weights = wpu * units // on_chip
        for icpg in range(wpu, 0, -1):
            if wpu % icpg or icpg % vw:
                continue
            for pcpg in pcpg_modes:
                if pcpg not in (units, used_weights) or pcpg % units:
                    continue
                out.append(_method("AMP", in_dtype, pt, 1, icpg, pcpg, units, 0, combine))
    return out


def candidate_methods(machine: MachineSpec, in_dtype: str, partials_dtype: str,
                      in_per_group: int, out_per_group: int, kernel_w: int, stride_w: int,
                      *, n_groups: int = 1) -> list[VertexMethod]:
    """All vertex candidates for a conv, best first (§2.3, ConvVertexType.cpp).

    - AMP: icpg dividing the weights per conv unit in whole 64-bit loads ({16, 8, 4} half,
      {8, 4, 2} float); pcpg = conv units or weights per unit; on a 16-unit AMP also the
      8-unit mode with pcpg 8.
    - SLIC (half inputs, stride_w <= 2): (cgpg, chans) (1,4), (2,2), (4,1), plus (8,1),
      (16,1) with half partials on a 16-unit half->half AMP; 4 chains with half partials on
      such an AMP, 2 chains always.
    - HMAC: icpg from the grain (2 half, 1 float) up to Ci, skipping sizes that do not
      reduce the number of in-groups; pcpg 1 (float partials) or 2 (half).
    - VMAC (half inputs): cgpg 4, plus 8 and 16 with half partials.
    - AMP on combined groups (``combine_groups`` F > 1, see :func:`combine_group_factors`)
      when ``n_groups`` > 1 and Ci is 1 (or 2 for half).

    Candidates are sorted like PopLibs: by useful-MAC bound times (1 - channel padding
    ratio), then less padding, then smaller partials.

    Parameters
    ----------
    machine : MachineSpec
    in_dtype, partials_dtype : str
        Conv input and requested partials types. AMP and SLIC fall back to float partials
        on a machine without a half-partials AMP mode, as PopLibs does.
    in_per_group, out_per_group : int
        Channels per group of the conv.
    kernel_w : int
        Kernel width. It restricts no method (SLIC pads it to a multiple of 4); it is
        validated and kept in the signature for the planner's convenience.
    stride_w : int
        Stride along the width (SLIC needs <= 2).
    n_groups : int
        Conv groups, for the combineConvGroups candidates.

    Returns
    -------
    list of VertexMethod
        Most promising first. Candidates may still be invalid for a particular tile split
        (SLIC: one channel group per tile; VMAC: one output channel per tile).
    """
    args = (machine, in_dtype, partials_dtype, in_per_group, out_per_group, kernel_w, stride_w,
            n_groups)
    try:
        hash(args)
    except TypeError:           # bad arguments: validated (and refused) uncached
        return list(_candidate_methods.__wrapped__(*args))
    return list(_candidate_methods(*args))


@lru_cache(maxsize=512)
def _candidate_methods(machine: MachineSpec, in_dtype: str, partials_dtype: str,
                       in_per_group: int, out_per_group: int, kernel_w: int, stride_w: int,
                       n_groups: int) -> tuple[VertexMethod, ...]:
    """:func:`candidate_methods`, memoised (every plan of a layer shape, its expandDims
    variants and its training passes ask again). Cleared by
    :func:`~ipukern.conv.clear_planner_caches`."""
    dt, pt = canonical_dtype(in_dtype), canonical_dtype(partials_dtype)
    if dt == _FLOAT and pt == _HALF:
        raise ValueError("float32 inputs accumulate in float32; half partials are invalid")
    ci = _positive_int("in_per_group", in_per_group)
    co = _positive_int("out_per_group", out_per_group)
    _positive_int("kernel_w", kernel_w)
    sw = _positive_int("stride_w", stride_w)
    _positive_int("n_groups", n_groups)
    half_in = dt == _HALF
    found: list[VertexMethod] = list(_amp_candidates(machine, dt, pt, 1))
    if half_in and sw <= 2:
        slic_pt = pt if machine.amp_units(_HALF, pt) else _FLOAT
        hh16 = machine.amp_units(_HALF, _HALF) >= 16
        chains = [2] if slic_pt == _FLOAT else ([4] if hh16 else []) + [2]
        groupings = [(1, 4), (2, 2), (4, 1)] + ([(8, 1), (16, 1)]
                                                if slic_pt == _HALF and hh16 else [])
        for ch in chains:
            for cg, c in groupings:
                found.append(_method("SLIC", dt, slic_pt, cg, c, c, 0, ch))
    # HMAC: every icpg (in grains) that lowers the number of in-groups, i.e. the smallest
    # icpg for each distinct ceil(Ci / icpg): O(sqrt(Ci)) of them, enumerated directly
    grain = 2 if half_in else 1
    n_grains = ceil_div(ci, grain)
    for s in split_candidates(n_grains, n_grains):
        found.append(_method("HMAC", dt, pt, 1, int(s) * grain, 2 if pt == _HALF else 1))
    if half_in:
        for cg in [machine.vector_elems(dt)] + ([8, 16] if pt == _HALF else []):
            found.append(_method("VMAC", dt, pt, cg, 1, 1))
    for f in combine_group_factors(machine, dt, ci, n_groups):
        found.extend(_amp_candidates(machine, dt, pt, f))

    unique = list(dict.fromkeys(found))

    def rank(m: VertexMethod) -> tuple[float, float, int]:
        cin, cout = ci * m.combine_groups, co * m.combine_groups
        padded = (ceil_div(cin, m.in_chans_per_group) * m.in_chans_per_group
                  * ceil_div(cout, m.out_chans_per_group) * m.out_chans_per_group)
        padding = (padded - cin * cout) / padded
        return (-m.macs_per_cycle_bound(machine) * (1 - padding), padding,
                DTYPES[m.partials_dtype].itemsize)

    return tuple(sorted(unique, key=rank))


def direct_output_candidates(machine: MachineSpec, in_dtype: str, partials_dtype: str,
                             in_per_group: int, kernel_h: int, kernel_w: int) -> list[VertexMethod]:
    """AMP candidates that write the output type directly although float partials were
    requested (``ConvVertexType.cpp``): with half inputs and float partials, a 1x1 kernel
    whose input channels per group fit one AMP pass (icpg) needs no partial sums at all when
    no reduction follows, so PopLibs also tries the half->half AMP (16 units on Mk2, twice
    the half->float rate). The planner uses them only for splits without an in-channel
    split. The AMP sums in single precision internally and rounds once to half, which is
    exactly what float partials plus a cast give.

    Parameters
    ----------
    machine : MachineSpec
    in_dtype, partials_dtype : str
        The conv's input and requested partials types.
    in_per_group : int
    kernel_h, kernel_w : int

    Returns
    -------
    list of VertexMethod
        half->half AMP methods (empty when the transform does not apply).
    """
    dt, pt = canonical_dtype(in_dtype), canonical_dtype(partials_dtype)
    if (dt, pt) != (_HALF, _FLOAT) or (kernel_h, kernel_w) != (1, 1):
        return []
    if machine.amp_units(_HALF, _HALF) == 0:
        return []
    return [m for m in _amp_candidates(machine, _HALF, _HALF, 1)
            if m.partials_dtype == _HALF and in_per_group <= m.in_chans_per_group]
