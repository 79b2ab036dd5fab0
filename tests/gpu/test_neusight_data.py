"""The NeuSight extract (ipukern/gpu/data/neusight/) is whole and says where it came from.

Nothing here reads NeuSight itself (scripts/extract_neusight.py does, from a git mirror CI does
not have): the checks are on the committed CSVs and their README.
"""
import csv
import math
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[2] / "ipukern" / "gpu" / "data" / "neusight"
README = DATA / "README.md"
COMMIT = "6945927d9afcca2b9daf021f8395e53edc5b4eef"

HEADERS = {
    "kernels.csv": "gpu,split,op,B,M,N,K,Cin,Cout,kernel,H,stride,pad,latency_ms,kernel_name,"
                   "n_kernels,source",
    "e2e.csv": "gpu_dir,model,mode,seq,batch,parallel,fusion,num_layer,measured_e2e_ms,measured_fw_ms,"
               "measured_bw_ms,neusight_e2e_ms,roofline_e2e_ms,habitat_e2e_ms,micro_e2e_ms,source",
    "ops.csv": "gpu_dir,config,name,opname,measured_fw_ms,measured_bw_ms,neusight_fw_ms,neusight_bw_ms,"
               "roofline_fw_ms,roofline_bw_ms,habitat_fw_ms,habitat_bw_ms",
    "devices.csv": "config,Device,Dev_Mem,Mem_Bw,Num_Sm,Core_Per_SM,Freq,SingleFLOPs,L2Cache,source",
}
OPGRAPH_HEADER = "Name,OpName,FwOps,BwOps,AccOps,InputShapes,OutputShape"
OPS = {"linear", "bmm", "conv", "add", "mul", "div", "addu", "mulu", "divu", "pow", "powu", "relu",
       "gelu", "tanh", "ln", "softmax"}
DIMS = {"linear": "B M N K", "bmm": "B M N K", "conv": "B Cin Cout kernel H stride pad"}
ALL_DIMS = "B M N K Cin Cout kernel H stride pad".split()
# plain e2e configs without an op graph here: none upstream, or left out for size (README)
NO_OPGRAPH = {"switch4-inf-512-1", "switchxl4-inf-2048-1", "switchxl4-inf-2048-2",
              "switchxl4-inf-512-1", "switchxl4-inf-512-2", "switchxl4-train-512-1",
              "switchxl4-train-512-2"}


def read(path: Path) -> tuple[str, list[dict[str, str]]]:
    text = path.read_text(encoding="utf-8")
    header = text.split("\n", 1)[0]
    with path.open(newline="", encoding="utf-8") as f:
        return header, list(csv.DictReader(f))


def number(text: str) -> float:
    v = float(text)
    assert math.isfinite(v), text
    return v


def positive(text: str) -> bool:
    return number(text) > 0


@pytest.mark.parametrize("name", sorted(HEADERS))
def test_header_is_the_documented_one(name):
    header, rows = read(DATA / name)
    assert header == HEADERS[name]
    assert f"`{header}`" in README.read_text(encoding="utf-8")
    assert rows and all(len(r) == header.count(",") + 1 and None not in r.values() for r in rows)


def test_kernel_rows():
    _, rows = read(DATA / "kernels.csv")
    assert len(rows) > 1000
    for r in rows:
        assert r["source"].startswith("scripts/asplos/data/dataset/") and r["source"].endswith(".csv")
        assert r["split"] in ("train", "test") and f"/{r['split']}/" in r["source"]
        assert r["op"] in OPS
        assert positive(r["latency_ms"]), r
        filled = DIMS.get(r["op"], "B H").split()
        assert all(r[c].isdigit() and int(r[c]) > 0 for c in filled if c != "pad"), r
        assert r["pad"].isdigit() or "pad" not in filled
        assert all(r[c] == "" for c in ALL_DIMS if c not in filled), r
        assert r["kernel_name"] and " " not in r["kernel_name"] and "<" not in r["kernel_name"]
        assert int(r["n_kernels"]) >= 1
    gpus = {r["gpu"] for r in rows}
    assert {"NVIDIA H100 80GB HBM3", "NVIDIA L4", "Tesla V100-PCIE-32GB", "Tesla T4"} <= gpus
    assert len({(r["gpu"], r["op"], r["split"]) for r in rows}) > 100
    # the sampled rows are distinct source rows
    keys = [tuple(r.values()) for r in rows]
    assert len(keys) == len(set(keys))


def test_e2e_rows():
    _, rows = read(DATA / "e2e.csv")
    assert len(rows) > 50
    for r in rows:
        assert r["source"].startswith(f"scripts/asplos/label/{r['gpu_dir']}/")
        assert r["source"].endswith(".json")
        assert not r["gpu_dir"].startswith("AMD")
        assert r["fusion"] in ("true", "false") and r["mode"] in ("train", "inf")
        assert positive(r["measured_e2e_ms"]), r
        for c in ("measured_fw_ms", "measured_bw_ms", "neusight_e2e_ms", "roofline_e2e_ms",
                  "habitat_e2e_ms", "micro_e2e_ms"):
            assert r[c] == "" or number(r[c]) >= 0, (c, r)
        if r["mode"] == "train" and not r["parallel"]:
            assert positive(r["measured_fw_ms"]) and positive(r["measured_bw_ms"]), r
    assert {r["parallel"] for r in rows} >= {"", "dp4", "tp4", "pp4_1"}


def plain_configs() -> set[str]:
    _, rows = read(DATA / "e2e.csv")
    return {f"{r['model']}-{r['mode']}-{r['seq']}-{r['batch']}" for r in rows
            if not r["parallel"] and r["fusion"] == "false"}


def test_every_plain_e2e_config_has_an_opgraph():
    have = {p.stem for p in (DATA / "opgraph").glob("*.csv")}
    assert have == plain_configs() - NO_OPGRAPH
    readme = README.read_text(encoding="utf-8")
    assert all(f"`{c}`" in readme or c.rsplit("-", 1)[0] in readme for c in NO_OPGRAPH)
    for path in sorted((DATA / "opgraph").glob("*.csv")):
        header, rows = read(path)
        assert header == OPGRAPH_HEADER, path.name
        assert rows and len({r["Name"] for r in rows}) == len(rows), path.name


def test_ops_rows():
    _, rows = read(DATA / "ops.csv")
    assert len(rows) > 500
    graphs = {}
    for r in rows:
        if r["config"] not in graphs:
            _, g = read(DATA / "opgraph" / f"{r['config']}.csv")
            graphs[r["config"]] = {n["Name"]: n["OpName"] for n in g}
        assert graphs[r["config"]][r["name"]] == r["opname"]
        assert r["opname"] not in ("misc", "output", "getitem")
        assert positive(r["measured_fw_ms"]), r
        for c in list(r)[5:]:
            assert number(r[c]) >= 0, (c, r)
    assert {r["gpu_dir"] for r in rows} >= {"NVIDIA_H100_80GB_HBM3", "NVIDIA_L4"}


def test_device_rows():
    _, rows = read(DATA / "devices.csv")
    for r in rows:
        assert r["source"] and all(p.endswith(f"/{r['config']}.json") for p in r["source"].split(";"))
        assert all(positive(r[c]) for c in list(r)[2:-1])
        # FP32 peak = SMs x cores x 2 x MHz, but for the two the README names
        if r["config"] not in ("NVIDIA_H100_80GB_HBM3_TP", "Tesla_P100-PCIE-16GB"):
            peak = int(r["Num_Sm"]) * int(r["Core_Per_SM"]) * 2 * int(r["Freq"]) / 1000
            assert abs(peak - int(r["SingleFLOPs"])) < 1, r
    assert {"NVIDIA_H100_80GB_HBM3", "NVIDIA_L4"} <= {r["config"] for r in rows}


def test_readme_names_commit_licence_and_paper():
    readme = README.read_text(encoding="utf-8")
    assert COMMIT in readme
    assert "Copyright (c) 2025 Georgia Institute of Technology and Microsoft Corporation" in readme
    assert "MIT License" in readme and "ASPLOS 2025" in readme
    assert "scripts/extract_neusight.py" in readme


def test_package_data_is_small():
    files = [p for p in DATA.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) < 1_600_000
