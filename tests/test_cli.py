"""Tests for the command line (ipukern/cli.py): every command runs in a temp dir through
``main([...])`` and its outputs are parsed back."""
import csv
import importlib.util
import io
import json
import re

import pytest

import ipukern
from ipukern.cli import Progress, main

TINY = ["--shape", "2,16,8,8", "--cpg", "1,3,4,dense", "--no-progress"]


def _has_matplotlib():
    return importlib.util.find_spec("matplotlib") is not None



# ----------------------------------------------------------------------------- scaling
def test_scaling_writes_table_csv_json_png(tmp_path, capsys):
    assert main(["scaling", *TINY, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "exchange 47.5 TB/s" in out and "8 TB/s" in out     # the default and the datasheet's
    table = [line for line in out.splitlines() if line.startswith("custom")]
    assert len(table) == 3                                     # cpg 1, 4, 16*; 3 is skipped
    assert "skipped" in out and "custom cpg 3" in out
    with open(tmp_path / "scaling.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["device"] for r in rows} == {"GC200", "A100_40GB"}
    ipu = [r for r in rows if r["kind"] == "ipu"]
    assert [int(r["channels_per_group"]) for r in ipu] == [1, 4, 16]
    assert all(int(r["batch"]) == 2 for r in rows)             # the --shape's N
    for r in ipu:
        assert int(r["groups"]) * int(r["channels_per_group"]) == 16
        assert float(r["ratio_vs_A100_40GB"]) > 0 and r["method"]
        assert f"{float(r['ratio_vs_A100_40GB']):.2f}x" in out
    doc = json.loads((tmp_path / "scaling.json").read_text())
    assert len(doc["rows"]) == len(rows) == 6
    assert doc["skipped"][0]["channels_per_group"] == 3
    assert doc["meta"]["machines"][0]["exchange_tbps"] == pytest.approx(47.5)
    png = tmp_path / "scaling.png"
    if _has_matplotlib():
        assert png.read_bytes()[:4] == b"\x89PNG"
    else:
        assert not png.exists()


def test_scaling_no_plot(tmp_path):
    assert main(["scaling", *TINY, "--out", str(tmp_path), "--no-plot", "-q"]) == 0
    assert (tmp_path / "scaling.csv").exists() and (tmp_path / "scaling.json").exists()
    assert not (tmp_path / "scaling.png").exists()


def test_scaling_jobs_gives_the_serial_files(tmp_path, capsys):
    for jobs in ("1", "2"):
        out = tmp_path / jobs
        assert main(["scaling", *TINY, "--out", str(out), "--no-plot", "--jobs", jobs]) == 0
        assert ("(serial)" if jobs == "1" else "(executor ProcessPoolExecutor)") in capsys.readouterr().out
    assert (tmp_path / "1" / "scaling.csv").read_text() == (tmp_path / "2" / "scaling.csv").read_text()
    rows = [json.loads((tmp_path / j / "scaling.json").read_text())["rows"] for j in "12"]
    assert rows[0] == rows[1]


def test_scaling_without_matplotlib_still_writes_tables(tmp_path, capsys, no_matplotlib):
    assert main(["scaling", *TINY, "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert 'pip install "ipukern[plot]"' in err
    assert (tmp_path / "scaling.csv").exists() and (tmp_path / "scaling.json").exists()
    assert not (tmp_path / "scaling.png").exists()


def test_scaling_both_exchange_bandwidths_and_two_gpus(tmp_path, capsys):
    args = ["scaling", "--layer", "resnext50_c128", "--batch", "1", "--cpg", "4",
            "--exchange-bandwidth", "both", "--gpus", "A100,V100", "--out", str(tmp_path),
            "--no-plot", "--no-progress"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "GC200-xch8TB: exchange 8.0 TB/s" in out
    doc = json.loads((tmp_path / "scaling.json").read_text())
    devices = [r["device"] for r in doc["rows"]]
    assert devices == ["GC200", "GC200-xch8TB", "A100_40GB", "V100"]
    fast, slow = doc["rows"][0], doc["rows"][1]
    assert slow["exchange_tbps"] == pytest.approx(8.0) and slow["cycles"] >= fast["cycles"]
    for col in ("GC200/A100_40GB", "GC200/V100", "GC200-xch8TB/A100_40GB"):
        assert col in out


def test_scaling_custom_layer_and_default_layers_together(tmp_path):
    args = ["scaling", "--layer", "effnet_b0_dw5", "--shape", "1,8,8,8", "--kernel", "1",
            "--batch", "1", "--cpg", "8", "--gpus", "none", "--out", str(tmp_path),
            "--no-plot", "-q", "--no-progress"]
    assert main(args) == 0
    doc = json.loads((tmp_path / "scaling.json").read_text())
    # 8 channels per group divides both layers (240 = 30 x 8); no GPU: IPU rows only
    assert {(r["layer"], r["kernel"]) for r in doc["rows"]} == {("effnet_b0_dw5", 5), ("custom", 1)}
    assert {r["kind"] for r in doc["rows"]} == {"ipu"}


@pytest.mark.parametrize("args, message", [
    (["--shape", "1,4,2,2", "--kernel", "5", "--padding", "0"], "kernel height 5"),
    (["--shape", "1,6,8,8", "--cpg", "4"], "every requested channels-per-group value was skipped"),
    (["--shape", "0,8,8,8"], "batch must be >= 1"),
])
def test_scaling_model_errors_exit_1_with_one_line(tmp_path, capsys, args, message):
    assert main(["scaling", *args, "--out", str(tmp_path), "--no-progress"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("ipukern scaling: error:") and message in err
    assert "\n" not in err and "Traceback" not in err


def test_scaling_unwritable_out_exit_1(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    assert main(["scaling", *TINY, "--out", str(tmp_path / "file")]) == 1
    assert "exists and is not a directory" in capsys.readouterr().err


@pytest.mark.parametrize("args", [
    ["--machines", "GC9000"], ["--gpus", "B200"], ["--cpg", "x"], ["--shape", "1,2,3"],
    ["--exchange-bandwidth", "fast"], ["--gpu-efficiency", "magic"], ["--bogus"],
])
def test_scaling_usage_errors_exit_2(tmp_path, capsys, args):
    with pytest.raises(SystemExit) as e:
        main(["scaling", *args, "--out", str(tmp_path)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("ipukern scaling: error: ") and err.count("\n") == 1 and "usage:" not in err


# ----------------------------------------------------------------------------- conv
def test_conv_estimate_prints_profile_and_writes_views(tmp_path, capsys):
    js, mem, tl = tmp_path / "p.json", tmp_path / "mem.png", tmp_path / "tl.png"
    args = ["conv", "--shape", "2,32,14,14", "--cpg", "4", "--json", str(js), "--no-progress"]
    if _has_matplotlib():
        args += ["--memory-png", str(mem), "--timeline-png", str(tl)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "estimate mode" in out and "profile N2 C32->32 14x14 k3x3 p1 g8" in out
    assert "IPU/GPU throughput ratio" in out and "A100_40GB" in out
    prof = json.loads(js.read_text())
    assert prof["total_cycles"] > 0 and prof["info"]["layer"].endswith("g8 float16")
    est = ipukern.estimate_conv2d((2, 32, 14, 14), (32, 4, 3, 3), padding=1, groups=8)
    assert prof["total_cycles"] == est.total_cycles
    if _has_matplotlib():
        assert mem.read_bytes()[:4] == b"\x89PNG" and tl.read_bytes()[:4] == b"\x89PNG"


def test_conv_options(capsys):
    args = ["conv", "--shape", "1,16,9,9", "--out-channels", "32", "--kernel", "3,1",
            "--stride", "2", "--padding", "1,0", "--groups", "16", "--dtype", "float32",
            "--exchange-bandwidth", "8e12", "--gpu", "", "--no-progress"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "C16->32 9x9 k3x1 s2 p(1, 0) g16 float32 on GC200-xch8TB" in out
    assert "IPU/GPU" not in out


def test_conv_model_error_exit_1(capsys):
    assert main(["conv", "--shape", "1,6,8,8", "--groups", "4", "--no-progress"]) == 1
    assert "groups=4 does not divide the 6 input channels" in capsys.readouterr().err


def test_conv_execute(capsys):
    if importlib.util.find_spec("ipukern._kernels._conv") is None:
        assert main(["conv", "--shape", "1,8,6,6", "--execute", "--no-progress"]) == 1
        assert "needs the compiled conv kernel" in capsys.readouterr().err
        pytest.skip("ipukern._kernels._conv is not built: only the error path was checked")
    assert main(["conv", "--shape", "1,8,6,6", "--cpg", "2", "--execute", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "executed on random data" in out and "output (1, 8, 6, 6)" in out


# ----------------------------------------------------------------------------- matmul
def test_matmul(tmp_path, capsys):
    js = tmp_path / "m.json"
    assert main(["matmul", "--shape", "64,128,32", "--json", str(js), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "matmul (64x128) @ (128x32)" in out and "IPU/GPU throughput ratio" in out
    assert json.loads(js.read_text())["total_cycles"] > 0


def test_matmul_execute(capsys):
    assert main(["matmul", "--shape", "32,32,32", "--execute", "--no-progress"]) == 0
    assert "executed on random data" in capsys.readouterr().out


# ----------------------------------------------------------------------------- info
def test_info(capsys):
    assert main(["info", "--gpus"]) == 0
    out = capsys.readouterr().out
    for name in ("GC2", "GC200", "BOW", "A100_40GB", "H100"):
        assert name in out
    assert "8 TB/s instead of the default 47.5 TB/s" in out
    assert "prices and power: IPU-M2000" in out and "ipukern info --market" in out


def test_info_market_lists_every_figure_with_its_source(capsys):
    assert main(["info", "--market"]) == 0
    out = capsys.readouterr().out
    assert out.count("      source: ") == len(ipukern.market.figures())
    row = next(ln for ln in out.splitlines() if ln.startswith("IPU-POD16 ") and "4,400 W" in ln)
    assert re.split(r"\s{2,}", row) == ["IPU-POD16", "US$150,000", "IPU-POD16", "4,400 W", "4 x IPU-M2000"]


# ----------------------------------------------------------------------------- progress
def test_progress_bar_draws_and_clears():
    buf = io.StringIO()
    with Progress("sweep", enabled=True, stream=buf, delay=0.0) as bar:
        bar(1, 4, "a")
        bar(4, 4, "b")
    text = buf.getvalue()
    assert "[#######" in text and "1/4" in text and "4/4" in text
    assert text.endswith("\r")                 # the line is erased at the end


def test_progress_bar_disabled_or_quick_prints_nothing():
    buf = io.StringIO()
    with Progress("sweep", enabled=False, stream=buf, delay=0.0) as bar:
        bar(1, 2)
    with Progress("sweep", enabled=True, stream=buf, delay=60.0) as bar:
        bar(1, 2)
    assert buf.getvalue() == ""


# ----------------------------------------------------------------------------- document commands
FAST_NET = ["network", "mobilenet_v1", "--image-size", "32", "--dtype", "float32", "--partials", "float",
            "--no-progress"]
VARIANT_TOML = ('base = "GC200"\nname = "GC200-fastsync"\nsync_cycles = 45\n'
                '[sources]\nsync_cycles = "what-if"\n')


def test_network_json_to_stdout_trace_and_machine_file(tmp_path, capsys):
    mf = tmp_path / "m.toml"
    mf.write_text(VARIANT_TOML)
    trace = tmp_path / "n.trace.json"
    assert main([*FAST_NET, "--batch", "1", "--json", "-", "--trace", str(trace),
                 "--machine-file", str(mf)]) == 0
    cap = capsys.readouterr()
    d = json.loads(cap.out)                          # stdout holds the JSON alone
    assert d["schema"] == "ipukern.network" and d["machine"] == "GC200-fastsync"
    assert "samples/s" in cap.err and f"wrote {trace}" in cap.err
    assert json.loads(trace.read_text())["otherData"]["kind"] == "network"


def test_network_out_must_be_a_directory(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("")
    assert main([*FAST_NET, "--out", str(f)]) == 1
    assert "not a directory" in capsys.readouterr().err


def test_diff_two_networks_and_refuses_mixed_kinds(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main([*FAST_NET, "--batch", "1", "--json", str(a)]) == 0
    assert main([*FAST_NET, "--batch", "2", "--json", str(b)]) == 0
    capsys.readouterr()
    assert main(["diff", str(a), str(b), "--json", "-"]) == 0
    cap = capsys.readouterr()
    d = json.loads(cap.out)
    assert d["kind"] == "network" and d["schema"] == "ipukern.diff" and "per layer pass" in cap.err
    c = tmp_path / "c.json"
    assert main(["matmul", "--shape", "64,64,64", "--gpu", "none", "--json", str(c)]) == 0
    assert json.loads(c.read_text())["schema"] == "ipukern.profile"
    capsys.readouterr()
    assert main(["diff", str(a), str(c)]) == 1
    assert "same kind" in capsys.readouterr().err


def _layer_costs(tmp_path):
    rows = [dict(name=f"l{i}", fwd_cycles=1000, bwd_cycles=2000, wu_cycles=500, n_params=10_000,
                 stash_bytes=4096, out_bytes=2048) for i in range(4)]
    p = tmp_path / "costs.json"
    p.write_text(json.dumps(rows))
    return str(p)


def test_compare_prints_per_dollar_and_per_watt_with_sources(tmp_path, capsys):
    costs = _layer_costs(tmp_path)
    assert main(["compare", "--costs", costs, "--systems", "POD16,POD64", "--json", str(tmp_path / "c.json"),
                 "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "samples/s per $1k" in out and "samples/s per W" in out
    # one footnote per figure, naming the record and its source
    assert "[1] POD16 price: IPU-POD16 US$150,000 (2021-06-30): Graphcore" in out
    assert "[2] POD16 power: 4 x IPU-M2000 4,400 W" in out and "ServeTheHome" in out
    assert "[3] POD64 price: 16 x IPU-M2000 US$519,200" in out
    doc = json.loads((tmp_path / "c.json").read_text())
    pod16 = doc["systems"][0]
    assert pod16["samples_per_second_per_kusd"] == pytest.approx(pod16["samples_per_second"] / 150)
    assert pod16["samples_per_second_per_watt"] == pytest.approx(pod16["samples_per_second"] / 4400)
    assert pod16["samples_per_second_per_musd"] == pytest.approx(pod16["samples_per_second_per_kusd"] * 1e3)
    assert pod16["price"]["source"].startswith("Graphcore") and pod16["power"]["key"] == "4 x IPU-M2000"
    rows = list(csv.DictReader((tmp_path / "o" / "compare.csv").open()))
    assert rows[0]["price_usd"] == "150000.0" and rows[1]["power_w"] == "17600.0"


def test_compare_gpu_systems_take_their_own_figures(capsys):
    assert main(["compare", "resnet8", "--systems", "M2000,DGX_A100_40GB,DGX_H100", "--micro-batch", "4",
                 "--gpu-batch", "32", "--json", "-"]) == 0
    m2000, dgx, h100 = json.loads(capsys.readouterr().out)["systems"]
    assert m2000["price"]["key"] == "IPU-M2000" and m2000["power"]["value"] == 1100
    assert dgx["price"]["key"] == "DGX A100 320G" and dgx["price"]["date"] == "2020-05-14"
    assert dgx["samples_per_second_per_watt"] == pytest.approx(dgx["samples_per_second"] / 6500)
    assert h100["price"] is None and h100["samples_per_second_per_kusd"] is None   # no public price
    assert h100["power"]["key"] == "DGX H100"


def test_compare_a_system_without_a_public_price_shows_a_dash(tmp_path, capsys):
    mf = tmp_path / "m.toml"
    mf.write_text(VARIANT_TOML)
    # a POD16 of a variant chip is not the product the price is for: no figure, not a borrowed one
    assert main(["compare", "--costs", _layer_costs(tmp_path), "--systems", "POD16",
                 "--machine-file", str(mf)]) == 0
    out = capsys.readouterr().out
    assert "POD16 price" not in out and "POD16 power" not in out
    assert main(["compare", "--costs", _layer_costs(tmp_path), "--systems", "POD16",
                 "--prices", "pod16=100000"]) == 0
    assert "given by the user" in capsys.readouterr().out


@pytest.mark.parametrize("prices, word", [("POD16=abc", "NAME=PRICE"), ("POD16=-5", "positive"),
                                          ("POD16=nan", "positive"), ("DGX_A100=1", "not one of --systems")])
def test_compare_bad_prices_one_line(tmp_path, capsys, prices, word):
    rc = main(["compare", "--costs", _layer_costs(tmp_path), "--systems", "POD16", "--prices", prices])
    err = capsys.readouterr().err
    assert rc == 1 and word in err and len(err.strip().splitlines()) == 1


def test_train_writes_into_out_dir_and_traces(tmp_path, capsys):
    costs, out = _layer_costs(tmp_path), tmp_path / "run"
    argv = ["train", "--costs", costs, "--system", "M2000", "--micro-batch", "2",
            "--gradient-accumulation", "4", "--ipus-per-replica", "2", "--pipeline", "l2"]
    assert main([*argv, "--out", str(out), "--json", "-", "--trace", str(tmp_path / "t.json")]) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out)["schema"] == "ipukern.training"
    assert {p.name for p in out.iterdir()} >= {"train.csv", "train.json"}
    threads = [e for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"]
               if e["name"] == "thread_name"]
    assert len(threads) == 2                          # one row per IPU of the replica
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main([*argv, "--out", str(tmp_path), "--json", str(a)]) == 0
    assert main([*argv[:-4], "--ipus-per-replica", "1", "--out", str(tmp_path), "--json", str(b)]) == 0
    capsys.readouterr()
    assert main(["diff", str(a), str(b)]) == 0
    text = capsys.readouterr().out                    # 2 replicas x 2 IPUs vs 4 x 1: the same IPUs
    assert "IPU 3 compute" in text and "only in" not in text


def test_train_machine_file_changes_the_chip(tmp_path, capsys):
    mf = tmp_path / "m.toml"
    mf.write_text(VARIANT_TOML)
    assert main(["train", "--costs", _layer_costs(tmp_path), "--system", "M2000", "--micro-batch", "2",
                 "--machine-file", str(mf), "--out", str(tmp_path), "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["system"] == "IPU-M2000-GC200-fastsync"


def test_compare_needs_no_training_flag_and_marks_overflow(tmp_path, capsys):
    costs = _layer_costs(tmp_path)
    assert main(["compare", "--costs", costs, "--systems", "POD16,POD64", "--prices", "POD16=150000",
                 "--json", "-", "--trace", str(tmp_path / "c.json"), "--out", str(tmp_path / "o")]) == 0
    cap = capsys.readouterr()
    doc = json.loads(cap.out)
    assert doc["schema"] == "ipukern.compare" and [s["system"] for s in doc["systems"]] == ["POD16", "POD64"]
    assert doc["systems"][0]["samples_per_second_per_musd"] > 0 and "fits" in cap.err
    procs = [e for e in json.loads((tmp_path / "c.json").read_text())["traceEvents"]
             if e["name"] == "process_name"]
    assert len(procs) == 2
    assert (tmp_path / "o" / "compare.csv").exists()
    big = tmp_path / "big.json"
    big.write_text(json.dumps([dict(name="l0", fwd_cycles=1000, bwd_cycles=2000, wu_cycles=500,
                                    n_params=10**9, stash_bytes=4096, out_bytes=2048)]))
    assert main(["compare", "--costs", str(big), "--systems", "POD16", "--allow-overflow"]) == 0
    assert "DOES NOT FIT" in capsys.readouterr().out
