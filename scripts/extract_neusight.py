#!/usr/bin/env python3
"""Extract the NeuSight GPU measurements ipukern validates its GPU model against.

Usage::

    python scripts/extract_neusight.py /path/to/NeuSight/git-dir

Reads one fixed commit of github.com/sitar-lab/NeuSight (MIT licence) with ``git show`` and
writes the small CSVs of ``ipukern/gpu/data/neusight/`` (see the README there). Standard
library only; the output depends only on the commit, so re-running it regenerates every CSV
byte for byte. Numbers are copied as the text NeuSight wrote, never re-formatted.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import subprocess
import sys
from pathlib import Path

COMMIT = "6945927d9afcca2b9daf021f8395e53edc5b4eef"
OUT = Path(__file__).resolve().parent.parent / "ipukern" / "gpu" / "data" / "neusight"

DATASET = "scripts/asplos/data/dataset"
LABEL = "scripts/asplos/label"
PRED = "scripts/asplos/results/prediction"
OPGRAPH = "scripts/asplos/results/opgraph"

OPS = ["linear", "bmm", "conv", "add", "mul", "div", "addu", "mulu", "divu", "pow", "powu",
       "relu", "gelu", "tanh", "ln", "softmax"]
MM_OPS = {"linear", "bmm"}
# test files in the order they are read; a row (its line text) already taken from an
# earlier file is not taken again: vec.csv is exactly elem.csv + ln.csv + softmax.csv, and
# habitat.csv is the same blob as vec.csv
TEST_FILES = ["linear", "bmm", "elem", "ln", "softmax", "vec", "habitat"]
# the held-out GPUs whose single-kernel rows are kept most densely
HELD_OUT = {"NVIDIA H100 80GB HBM3", "NVIDIA L4"}
CAP_HELD_OUT = 400   # rows per (gpu, op, split) for HELD_OUT
# rows per (gpu, op, split) for every other GPU: fewer than the 200 first planned, to keep
# the package data under about 1.5 MB; matmul and conv shapes vary more than vector ones
CAP_OTHER_MM = 50    # linear, bmm, conv
CAP_OTHER_VEC = 15   # the 13 vector ops
METHODS = ["neusight", "roofline", "habitat", "micro"]
OPS_GPU_DIRS = ["NVIDIA_H100_80GB_HBM3", "NVIDIA_L4", "NVIDIA_A100_80GB_PCIe"]
OPS_METHODS = ["neusight", "roofline", "habitat"]
SKIP_OPNAMES = {"misc", "output", "getitem"}
# op graphs larger than this are left out of the package (the Switch-Transformer graphs,
# about 1 MB each, against about 15 kB for every other model); the README lists them
OPGRAPH_MAX_SOURCE_BYTES = 100_000

KERNEL_COLS = ["gpu", "split", "op", "B", "M", "N", "K", "Cin", "Cout", "kernel", "H", "stride",
               "pad", "latency_ms", "kernel_name", "n_kernels", "source"]
E2E_COLS = ["gpu_dir", "model", "mode", "seq", "batch", "parallel", "fusion", "num_layer",
            "measured_e2e_ms", "measured_fw_ms", "measured_bw_ms", "neusight_e2e_ms",
            "roofline_e2e_ms", "habitat_e2e_ms", "micro_e2e_ms", "source"]
OPGRAPH_COLS = ["Name", "OpName", "FwOps", "BwOps", "AccOps", "InputShapes", "OutputShape"]
OPS_COLS = ["gpu_dir", "config", "name", "opname", "measured_fw_ms", "measured_bw_ms",
            "neusight_fw_ms", "neusight_bw_ms", "roofline_fw_ms", "roofline_bw_ms",
            "habitat_fw_ms", "habitat_bw_ms"]
DEVICE_COLS = ["config", "Device", "Dev_Mem", "Mem_Bw", "Num_Sm", "Core_Per_SM", "Freq",
               "SingleFLOPs", "L2Cache", "source"]


class Repo:
    def __init__(self, git_dir: str):
        self.git_dir = git_dir
        self._tree = None

    def _git(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", self.git_dir, *args], capture_output=True, check=False)

    def tree(self) -> dict[str, tuple[str, int | None]]:
        """path -> (blob id, size or None when the blob is absent from the snapshot)."""
        if self._tree is None:
            res = self._git("ls-tree", "-r", "-l", "-z", COMMIT)
            if res.returncode != 0:
                sys.exit(f"git ls-tree {COMMIT} failed: {res.stderr.decode()}")
            self._tree = {}
            for entry in res.stdout.decode().split("\0"):
                if not entry:
                    continue
                meta, path = entry.split("\t", 1)
                _mode, kind, blob, size = meta.split()
                if kind == "blob":
                    self._tree[path] = (blob, int(size) if size.isdigit() else None)
        return self._tree

    def ls(self, prefix: str, suffix: str = "") -> list[str]:
        return sorted(p for p in self.tree() if p.startswith(prefix) and p.endswith(suffix))

    def show(self, path: str) -> str | None:
        """The file's text, or None when it is not in the commit or its blob is absent."""
        if path not in self.tree():
            return None
        res = self._git("show", f"{COMMIT}:{path}")
        if res.returncode != 0:
            return None
        return res.stdout.decode("utf-8")


def read_rows(text: str, path: str) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """Header and (line text, fields) per data line; every row must be one physical line."""
    lines = text.splitlines()
    header = next(csv.reader([lines[0]]))
    rows = []
    for line in lines[1:]:
        if not line:
            continue
        fields = next(csv.reader([line]))
        if len(fields) != len(header):
            sys.exit(f"{path}: a row does not have {len(header)} fields: {line[:80]}")
        rows.append((line, fields))
    return header, rows


def read_dicts(text: str, path: str) -> list[dict[str, str]]:
    header, rows = read_rows(text, path)
    return [dict(zip(header, fields)) for _line, fields in rows]


def write_csv(path: Path, cols: list[str], rows: list[list[str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    w.writerows(rows)
    path.write_bytes(buf.getvalue().encode("utf-8"))


def short_kernel(name: str) -> str:
    """Leading identifier of a kernel name: no `void`, namespaces, template or call arguments.

    `cutlass::Kernel<cutlass_80_simt_sgemm_...>` is named by its template argument."""
    s = name.strip().replace("(anonymous namespace)::", "")
    if s.startswith("void "):
        s = s[5:]
    base, first_arg, depth, arg_done = [], [], 0, False
    for ch in s:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
            arg_done = arg_done or depth == 0
        elif depth == 0:
            if ch == "(":
                break
            base.append(ch)
        elif depth == 1 and not arg_done:
            if ch == ",":
                arg_done = True
            else:
                first_arg.append(ch)
    ident = "".join(base).strip().split("::")[-1]
    arg = "".join(first_arg).strip()
    if ident in ("Kernel", "Kernel2") and arg:
        ident = arg.split("::")[-1]
    return ident


def positive_finite(text: str) -> bool:
    try:
        v = float(text)
    except ValueError:
        return False
    return math.isfinite(v) and v > 0


def kernel_row(d: dict[str, str], split: str, source: str) -> list[str]:
    op = d["OPName"]
    dims = dict.fromkeys(["B", "M", "N", "K", "Cin", "Cout", "kernel", "H", "stride", "pad"], "")
    if op in MM_OPS:
        for c in "BMNK":
            dims[c] = d[c]
    elif op == "conv":
        dims.update(B=d["B"], Cin=d["Input_Channel"], Cout=d["Output_Channel"],
                    kernel=d["Kernel_Szie"], H=d["Input_Size"], stride=d["Stride"],
                    pad=d["Padding"])
    else:
        dims.update(B=d["B"], H=d["H"])
    for v in dims.values():
        if v and not v.isdigit():
            sys.exit(f"{source}: non-integer dimension {v!r}")
    kernels = d.get("Kernels")
    n_kernels = len([k for k in kernels.split(";") if k.strip()]) if kernels else 1
    return [d["Device"], split, op, *dims.values(), d["Latency"], short_kernel(d["Kernel Name"]),
            str(n_kernels), source]


def sample(rows: list[tuple[str, list[str]]], cap: int) -> list[tuple[str, list[str]]]:
    """The first `cap` rows by sha1 of the row's original line text."""
    keyed = sorted(rows, key=lambda r: (hashlib.sha1(r[0].encode("utf-8")).hexdigest(), r[0]))
    return keyed[:cap]


def kernel_sources(repo: Repo) -> list[tuple[str, str]]:
    """(split, path) of every single-kernel source file, in reading order."""
    out = []
    for op in OPS:
        for path in repo.ls(f"{DATASET}/train/collect/{op}/p2.1.0/", ".csv"):
            out.append(("train", path))
    blobs = set()
    for name in TEST_FILES:
        path = f"{DATASET}/test/{name}.csv"
        blob = repo.tree()[path][0]
        if blob not in blobs:  # habitat.csv is vec.csv's blob
            blobs.add(blob)
            out.append(("test", path))
    return out


def extract_kernels(repo: Repo, report: dict) -> list[list[str]]:
    groups: dict[tuple[str, str, str], list] = {}
    seen: set[tuple[str, str]] = set()
    dropped: dict[str, int] = {}
    for split, path in kernel_sources(repo):
        text = repo.show(path)
        if text is None:
            sys.exit(f"{path}: not readable at {COMMIT}")
        header, rows = read_rows(text, path)
        for line, fields in rows:
            if (split, line) in seen:
                continue
            seen.add((split, line))
            d = dict(zip(header, fields))
            if d["OPName"] not in OPS:
                sys.exit(f"{path}: unknown OPName {d['OPName']!r}")
            if not positive_finite(d["Latency"]):
                dropped[path] = dropped.get(path, 0) + 1
                continue
            groups.setdefault((d["Device"], d["OPName"], split), []).append((line, d, path))
    out = []
    counts = {}
    for (gpu, op, split), rows in groups.items():
        if gpu in HELD_OUT:
            cap = CAP_HELD_OUT
        else:
            cap = CAP_OTHER_MM if op in MM_OPS or op == "conv" else CAP_OTHER_VEC
        chosen = sample([(line, (d, path)) for line, d, path in rows], cap)
        counts[(gpu, op, split)] = (len(chosen), len(rows))
        out.extend(kernel_row(d, split, path) for _line, (d, path) in chosen)

    def order(r):
        dims = tuple(int(v) if v else -1 for v in r[3:13])
        return (r[1] != "train", r[0], OPS.index(r[2]), dims, float(r[13]), r[16])
    out.sort(key=order)
    report["kernels"] = counts
    report["kernels_dropped"] = dropped
    return out


def parse_config(stem: str) -> dict[str, str]:
    parts = stem.split("-")
    fusion = parts[-1] == "fusion"
    if fusion:
        parts = parts[:-1]
    if len(parts) not in (4, 5):
        sys.exit(f"unexpected label name {stem!r}")
    model, mode, seq, batch = parts[:4]
    return {"model": model, "mode": mode, "seq": seq, "batch": batch,
            "parallel": parts[4] if len(parts) == 5 else "", "fusion": "true" if fusion else "false"}


def load_json_text(text: str) -> dict:
    """JSON with numbers kept as their source text."""
    return json.loads(text, parse_float=str, parse_int=str)


def nvidia_label_dirs(repo: Repo) -> list[str]:
    dirs = sorted({p.split("/")[3] for p in repo.ls(f"{LABEL}/")})
    return [d for d in dirs if not d.startswith("AMD")]


def extract_e2e(repo: Repo) -> list[list[str]]:
    out = []
    for gdir in nvidia_label_dirs(repo):
        for path in repo.ls(f"{LABEL}/{gdir}/", ".json"):
            stem = path.rsplit("/", 1)[1][:-5]
            cfg = parse_config(stem)
            m = load_json_text(repo.show(path))
            preds = []
            for method in METHODS:
                text = repo.show(f"{PRED}/{gdir}/{method}/{stem}.json")
                preds.append(load_json_text(text)["e2e_latency"] if text is not None else "")
            out.append([gdir, cfg["model"], cfg["mode"], cfg["seq"], cfg["batch"], cfg["parallel"],
                        cfg["fusion"], m["num_layer"], m["e2e_latency"], m["fw_latency"],
                        m["bwall_latency"], *preds, path])
    return out


def plain_configs(e2e: list[list[str]]) -> list[str]:
    names = {f"{r[1]}-{r[2]}-{r[3]}-{r[4]}" for r in e2e if not r[5] and r[6] == "false"}
    return sorted(names)


def opgraph_rows(repo: Repo, config: str) -> list[dict[str, str]] | None:
    path = f"{OPGRAPH}/{config}.csv"
    text = repo.show(path)
    return None if text is None else read_dicts(text, path)


def extract_opgraphs(repo: Repo, e2e: list[list[str]], report: dict) -> dict[str, list[list[str]]]:
    out, missing, omitted = {}, [], []
    for config in plain_configs(e2e):
        path = f"{OPGRAPH}/{config}.csv"
        entry = repo.tree().get(path)
        if entry is None or entry[1] is None:
            missing.append(config)
            continue
        if entry[1] > OPGRAPH_MAX_SOURCE_BYTES:
            omitted.append(config)
            continue
        out[config] = [[d[c] for c in OPGRAPH_COLS] for d in opgraph_rows(repo, config)]
    report["opgraph_missing"] = missing
    report["opgraph_omitted"] = omitted
    return out


def extract_ops(repo: Repo, report: dict) -> list[list[str]]:
    out, skipped = [], []
    for gdir in OPS_GPU_DIRS:
        for path in repo.ls(f"{LABEL}/{gdir}/", ".csv"):
            config = path.rsplit("/", 1)[1][:-4]
            cfg = parse_config(config)
            if cfg["parallel"] or cfg["fusion"] == "true":
                continue
            graph = opgraph_rows(repo, config)
            text = repo.show(path)
            if graph is None or text is None:
                skipped.append(f"{gdir}/{config}")
                continue
            opname = {d["Name"]: d["OpName"] for d in graph}
            preds = {}
            for method in OPS_METHODS:
                ptext = repo.show(f"{PRED}/{gdir}/{method}/{config}.csv")
                rows = read_dicts(ptext, method) if ptext is not None else []
                preds[method] = {d["Name"]: d for d in rows}
            for d in read_dicts(text, path):
                name = d["Name"]
                op = opname.get(name)
                if op is None or op in SKIP_OPNAMES:
                    continue
                row = [gdir, config, name, op, d["fw_latency"], d["bw_latency"]]
                for method in OPS_METHODS:
                    p = preds[method].get(name)
                    row += [p["fw_latency"], p["bw_latency"]] if p else ["", ""]
                out.append(row)
    report["ops_skipped"] = skipped
    return out


def extract_devices(repo: Repo) -> list[list[str]]:
    paths = (repo.ls("scripts/asplos/data/device_configs/", ".json")
             + repo.ls(f"{DATASET}/train/device_configs/", ".json")
             + repo.ls(f"{DATASET}/test/device_configs/", ".json"))
    by_key: dict[tuple, list[str]] = {}
    for path in paths:
        config = path.rsplit("/", 1)[1][:-5]
        if config.startswith("AMD"):
            continue
        d = load_json_text(repo.show(path))
        extra = set(d) - set(DEVICE_COLS)
        if extra:
            sys.exit(f"{path}: fields {sorted(extra)} not in the devices.csv header")
        key = (config, *(d.get(c, "") for c in DEVICE_COLS[1:-1]))
        by_key.setdefault(key, []).append(path)
    return [[*key, ";".join(srcs)] for key, srcs in sorted(by_key.items())]


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        sys.exit(__doc__)
    repo = Repo(argv[1])
    report: dict = {}
    kernels = extract_kernels(repo, report)
    e2e = extract_e2e(repo)
    graphs = extract_opgraphs(repo, e2e, report)
    ops = extract_ops(repo, report)
    devices = extract_devices(repo)

    graph_dir = OUT / "opgraph"
    for old in graph_dir.glob("*.csv"):
        old.unlink()
    write_csv(OUT / "kernels.csv", KERNEL_COLS, kernels)
    write_csv(OUT / "e2e.csv", E2E_COLS, e2e)
    for config, rows in graphs.items():
        write_csv(graph_dir / f"{config}.csv", OPGRAPH_COLS, rows)
    write_csv(OUT / "ops.csv", OPS_COLS, ops)
    write_csv(OUT / "devices.csv", DEVICE_COLS, devices)

    print(f"kernels.csv {len(kernels)} rows; e2e.csv {len(e2e)}; ops.csv {len(ops)}; "
          f"devices.csv {len(devices)}; opgraphs {len(graphs)}")
    for (gpu, op, split), (kept, total) in sorted(report["kernels"].items()):
        print(f"  {split:5s} {gpu:24s} {op:8s} {kept:4d} of {total}")
    print("dropped (non-positive or non-finite latency):", report["kernels_dropped"] or "none")
    print("opgraph missing upstream:", report["opgraph_missing"])
    print("opgraph omitted for size:", report["opgraph_omitted"])
    print("ops.csv configs skipped (no label CSV or no op graph):", report["ops_skipped"])


if __name__ == "__main__":
    main(sys.argv)
