"""Input files the users of SCALE-Sim and Timeloop expect: machine files and layer lists.

**Machine files** (TOML) describe a :class:`~ipukern.machine.MachineSpec` variant::

    # variant.toml: a GC200 with the datasheet exchange and a faster sync
    base = "GC200"                  # start from a preset (optional; default: every field given)
    name = "GC200-fastsync"
    exchange_bandwidth = 8e12       # derived keywords of MachineSpec.replace are accepted
    sync_cycles = 45

    [amp_conv_units]                # optional: "input->partials" = conv units
    "float16->float32" = 8

    [sources]                       # where each changed constant comes from
    sync_cycles = "what-if: half of PopLibs' 90 cycles"

A changed field without an entry in ``[sources]`` is recorded as coming from the file, so
``ipukern info`` and ``describe()`` never show an unsourced constant as if it were the
preset's. :func:`machine_to_toml` writes every field back (a complete file needs no base).

**Layer lists** (CSV, one layer per row, a header row naming the columns) describe the
layers of a sweep: ``name,channels,height,width`` are required; ``kernel, stride, padding,
out_channels, batch, note`` are optional (defaults as in :class:`~ipukern.scaling.ConvLayer`)::

    name,channels,height,width,kernel,stride
    resnext_c128,128,56,56,3,1
    mobilenet_dw,64,112,112,3,2
"""
from __future__ import annotations

import csv
import dataclasses
import io
import math
import sys
from pathlib import Path
from typing import Any, Iterable

from .machine import MachineSpec, get_machine

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 reads TOML with the tomli backport (a dependency there)
    import tomli as tomllib

__all__ = ["machine_from_toml", "machine_to_toml", "read_layers", "write_layers", "LAYER_COLUMNS"]

_DERIVED = ("exchange_bandwidth", "clock_ghz")
_SPECIAL = ("base", "amp_conv_units", "sources")


def _fields() -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(MachineSpec)}


def machine_from_toml(path: str | Path) -> MachineSpec:
    """Read a machine file (see the module docstring).

    Raises
    ------
    ValueError
        Not TOML, an unknown key (the message lists the valid ones), a value of the wrong
        type, or a spec that fails :class:`MachineSpec`'s own checks; the message names
        the file.
    OSError
        The file cannot be read.
    """
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"machine file {path}: not valid TOML ({e})") from None
    fields = _fields()
    settable = [n for n in fields if n not in ("amp_conv_units", "sources")]
    unknown = sorted(set(doc) - set(settable) - set(_DERIVED) - set(_SPECIAL))
    if unknown:
        raise ValueError(f"machine file {path}: unknown key(s) {', '.join(unknown)}; valid keys "
                         f"are {', '.join(list(_SPECIAL) + list(_DERIVED) + settable)}")
    changes: dict[str, Any] = {k: v for k, v in doc.items() if k not in _SPECIAL}
    for k, v in changes.items():
        if isinstance(v, (dict, list)) or isinstance(v, bool):
            raise ValueError(f"machine file {path}: {k} must be a number or string, got {v!r}")
    if "amp_conv_units" in doc:
        amp = doc["amp_conv_units"]
        if not isinstance(amp, dict):
            raise ValueError(f"machine file {path}: [amp_conv_units] must be a table of "
                             '"input->partials" = units')
        units = []
        for key, u in amp.items():
            a, sep, b = key.partition("->")
            if not sep or not isinstance(u, int) or isinstance(u, bool) or u < 0:
                raise ValueError(f"machine file {path}: amp_conv_units entry {key!r} = {u!r}: "
                                 'expected "float16->float32" = <non-negative int>')
            units.append((a.strip(), b.strip(), u))
        changes["amp_conv_units"] = tuple(units)
    sources = doc.get("sources", {})
    if not isinstance(sources, dict) or not all(isinstance(v, str) for v in sources.values()):
        raise ValueError(f"machine file {path}: [sources] must map keys to strings")
    try:
        if "base" in doc:
            base = get_machine(str(doc["base"]))
            spec = base.replace(**{"name": base.name + "-" + path.stem, **changes})
            src = dict(base.sources)
        else:
            missing = [n for n, f in fields.items() if f.default is dataclasses.MISSING
                       and f.default_factory is dataclasses.MISSING and n not in changes]
            if missing:
                raise ValueError(f"no base preset and no value for {', '.join(missing)} "
                                 '(add base = "GC200", or every field)')
            spec = MachineSpec(**_resolve_derived(changes))
            src = {"file": f"machine file {path.name}"}
    except (TypeError, ValueError) as e:
        raise ValueError(f"machine file {path}: {e}") from None
    if "base" in doc:                 # each changed constant names its source or the file
        for k in changes:
            if k != "name":
                src[k] = f"machine file {path.name}"
    src.update(sources)
    return dataclasses.replace(spec, sources=tuple(src.items()))


def _resolve_derived(changes: dict[str, Any]) -> dict[str, Any]:
    """Turn exchange_bandwidth / clock_ghz into fields for a spec built from scratch."""
    out = dict(changes)
    if "clock_ghz" in out:
        out["clock_hz"] = float(out.pop("clock_ghz")) * 1e9
    if "exchange_bandwidth" in out:
        out["exchange_bytes_per_cycle"] = (float(out.pop("exchange_bandwidth"))
                                           / (out["n_tiles"] * out["clock_hz"]))
    return out


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"cannot write {v} to TOML")
        return repr(v)
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def machine_to_toml(spec: MachineSpec, path: str | Path | None = None) -> str:
    """Every field of ``spec`` as a machine file (no base needed); written to ``path``
    when given. :func:`machine_from_toml` reads it back to an equal spec."""
    lines = [f"# ipukern machine file: {spec.name}"]
    for f in dataclasses.fields(MachineSpec):
        if f.name in ("amp_conv_units", "sources"):
            continue
        lines.append(f"{f.name} = {_toml_value(getattr(spec, f.name))}")
    lines += ["", "[amp_conv_units]"]
    lines += [f'"{a}->{b}" = {u}' for a, b, u in spec.amp_conv_units]
    lines += ["", "[sources]"]
    lines += [f"{_toml_value(k)} = {_toml_value(v)}" for k, v in spec.sources]
    text = "\n".join(lines) + "\n"
    if path is not None:
        Path(path).write_text(text, encoding="utf-8")
    return text


# =========================================================================== layer lists
LAYER_COLUMNS = ("name", "channels", "height", "width", "kernel", "stride", "padding",
                 "out_channels", "batch", "note")
_REQUIRED = ("name", "channels", "height", "width")


def read_layers(path: str | Path) -> list:
    """Read a layer list (CSV with a header; see the module docstring).

    Returns
    -------
    list of ConvLayer

    Raises
    ------
    ValueError
        Missing or unknown columns, a non-integer value, a duplicate name, an impossible
        layer, or an empty list; the message names the file and the line.
    """
    from .scaling import ConvLayer

    path = Path(path)
    text = path.read_text(encoding="utf-8")
    rows = [r for r in csv.reader(io.StringIO(text)) if r and not r[0].lstrip().startswith("#")]
    if not rows:
        raise ValueError(f"layer list {path}: empty (expected a header row and one layer per row)")
    header = [h.strip().lower() for h in rows[0]]
    missing = [c for c in _REQUIRED if c not in header]
    unknown = [c for c in header if c not in LAYER_COLUMNS]
    if missing or unknown:
        raise ValueError(f"layer list {path}: " + "; ".join(
            ([f"missing column(s) {', '.join(missing)}"] if missing else [])
            + ([f"unknown column(s) {', '.join(unknown)}"] if unknown else []))
            + f" (columns: {', '.join(LAYER_COLUMNS)}; the first row is the header)")
    layers, seen = [], set()
    for lineno, row in enumerate(rows[1:], start=2):
        if len(row) > len(header):
            raise ValueError(f"layer list {path} line {lineno}: {len(row)} values for "
                             f"{len(header)} columns")
        kw: dict[str, Any] = {}
        for col, val in zip(header, row):
            val = val.strip()
            if val == "":
                continue
            if col in ("name", "note"):
                kw[col] = val
                continue
            try:
                kw[col] = int(val)
            except ValueError:
                raise ValueError(f"layer list {path} line {lineno}: {col} must be an integer, "
                                 f"got {val!r}") from None
        if "name" not in kw:
            raise ValueError(f"layer list {path} line {lineno}: no name")
        if kw["name"] in seen:
            raise ValueError(f"layer list {path} line {lineno}: duplicate layer name {kw['name']!r}")
        seen.add(kw["name"])
        try:
            layers.append(ConvLayer(**kw))
        except (TypeError, ValueError) as e:
            raise ValueError(f"layer list {path} line {lineno}: {e}") from None
    if not layers:
        raise ValueError(f"layer list {path}: no layers after the header")
    return layers


def write_layers(layers: Iterable[Any], path: str | Path | None = None) -> str:
    """Write layers as a layer list (all columns); :func:`read_layers` reads it back."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(LAYER_COLUMNS)
    for layer in layers:
        w.writerow([getattr(layer, c) for c in LAYER_COLUMNS])
    text = buf.getvalue()
    if path is not None:
        Path(path).write_text(text, encoding="utf-8")
    return text
