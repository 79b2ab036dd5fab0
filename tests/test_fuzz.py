"""Fuzz suite: the public API driven with hostile inputs, as a user would not.

Hypothesis draws the inputs here; a worker process (spawned, so a segfault or abort cannot
take the test runner down) calls the targets in ``tests/_support/fuzz_targets.py``: raw
exchange tables (checked and ``validate=False``), grids and halos, sends, tile functions,
MachineSpec fields, machine files, op shapes and values, ``available_memory_proportion`` on
tiny tiles, pods and their collectives, and the command line. Each call must end in
a result that matches an independent reference or in an allowed, clear error
(ValueError, TypeError, TileMemoryError); a crash, a hang, another exception type or a
wrong answer fails the test with the input that caused it (shrunk by hypothesis).

Budget: the "ci" hypothesis profile (``CI`` set, 25 derandomized examples per target) keeps
the whole file around a minute on 2 cores; without ``CI`` the "dev" profile draws 50 random
ones. ``IPUKERN_FUZZ_STATS=1`` prints how many calls ended in each outcome (with ``-s``).
"""
from __future__ import annotations

import os

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests._support.fuzz_worker import Worker  # noqa: E402

CALL_TIMEOUT = 120          # s; the first call compiles or loads the tile functions


@pytest.fixture(scope="module")
def worker():
    w = Worker(timeout=CALL_TIMEOUT)
    yield w
    w.close()
    if os.environ.get("IPUKERN_FUZZ_STATS"):
        print("\nfuzz outcomes:", STATS)


STATS: dict = {}


def check(worker, name, *args):
    status, kind, detail = worker.call(name, *args)
    STATS.setdefault(name, {}).setdefault(status if status != "allowed" else kind, 0)
    STATS[name][status if status != "allowed" else kind] += 1
    assert status in ("ok", "allowed"), f"{name}{args!r}: {status} {kind}\n{detail}"
    if status == "allowed":
        assert detail.strip(), f"{name}{args!r}: {kind} without a message"
    return status


FUZZ = settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
                deadline=None)

#: integers users should not pass: negative, at and past the int64 edge, past a tile
NASTY_INTS = st.one_of(st.integers(-8, 700), st.sampled_from(
    [2**31, 600_000, 638_976, 2**62, 2**63 - 8, 2**63 - 1, 2**63, 2**64, -2**63, -2**63 - 1]))


@st.composite
def copy_tables(draw):
    """A device size and a copy table: mostly plausible rows (in range, sometimes
    overlapping), some with nasty integers."""
    n_tiles, alloc = draw(st.integers(1, 8)), draw(st.integers(0, 256))
    tile = st.integers(0, n_tiles - 1)

    @st.composite
    def plausible(d):
        so, do = d(st.integers(0, alloc)), d(st.integers(0, alloc))
        nb = d(st.integers(0, max(0, alloc - max(so, do))))
        return d(tile), so, d(tile), do, nb

    rows = draw(st.lists(st.one_of(plausible(), plausible(), st.tuples(*[NASTY_INTS] * 5)), max_size=6))
    return n_tiles, alloc, rows


@FUZZ
@given(case=copy_tables(), seed=st.integers(0, 9), validate=st.booleans())
def test_fuzz_device_exchange(worker, case, seed, validate):
    check(worker, "exchange_table", *case, seed, validate)


@st.composite
def grids(draw):
    """A machine size, an array shape and a grid over it: usually valid, sometimes not."""
    h, w = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    n_tiles = draw(st.integers(1, 16))
    if draw(st.integers(0, 4)):
        gy = draw(st.integers(1, min(h, n_tiles)))
        gx = draw(st.integers(1, max(1, min(w, n_tiles // gy))))
        halo = draw(st.integers(0, 2))
    else:
        gy, gx, halo = draw(st.integers(0, 6)), draw(st.integers(0, 6)), draw(st.integers(-1, 4))
    return n_tiles, (h, w), (gy, gx), halo


@FUZZ
@given(case=grids(), pad=st.floats(-4, 4, width=32), corners=st.booleans(), seed=st.integers(0, 9))
def test_fuzz_graph_halo(worker, case, pad, corners, seed):
    n_tiles, shape, grid, halo = case
    check(worker, "graph_program", n_tiles, shape, grid, halo, pad, corners, seed)


def mostly(plausible, nasty, one_in: int = 6):
    """``plausible`` values, and ``nasty`` ones about once in ``one_in`` draws."""
    return st.integers(0, one_in - 1).flatmap(lambda k: nasty if k == 0 else plausible)


@st.composite
def sends(draw):
    n_tiles, n = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    tile = mostly(st.integers(0, n_tiles - 1), st.integers(-2, 8))
    start = mostly(st.integers(0, n), NASTY_INTS)
    n_elems = mostly(st.one_of(st.none(), st.integers(0, n)), NASTY_INTS)
    return (n_tiles, n, draw(tile), draw(tile), draw(start), draw(start), draw(n_elems))


@FUZZ
@given(case=sends())
def test_fuzz_graph_send(worker, case):
    check(worker, "graph_send", *case)


@FUZZ
@given(n_tiles=st.integers(1, 8), n=st.integers(1, 40), index=st.integers(-60, 60),
       negative_at=st.one_of(st.none(), st.integers(0, 100)), threads=st.integers(1, 2))
def test_fuzz_tile_functions(worker, n_tiles, n, index, negative_at, threads):
    check(worker, "tile_functions", n_tiles, n, index, negative_at, threads)


SPEC_FIELDS = ["n_tiles", "tile_bytes", "n_workers", "vector_width_bits", "exchange_bytes_per_cycle",
               "n_links", "link_bytes_per_second", "clock_hz", "sync_cycles", "reserved_bytes_per_tile",
               "tiles_per_exchange_bus", "exchange_bandwidth", "clock_ghz"]
ODD_VALUES = st.one_of(st.integers(-3, 4096), st.sampled_from([True, False, 24, 48, 10**6, 2**70]),
                       st.floats(allow_nan=True, allow_infinity=True), st.none(), st.just("8"))


@FUZZ
@given(field=st.sampled_from(SPEC_FIELDS), value=ODD_VALUES)
def test_fuzz_machine_spec(worker, field, value):
    check(worker, "machine_spec", field, value)


DIMS = mostly(st.integers(1, 12), st.one_of(
    st.integers(0, 70), st.sampled_from([2**31, 2**63, -1, True]),
    st.floats(0, 10).filter(lambda f: f != int(f))), one_in=12)


@FUZZ
@given(kind=st.sampled_from(["matmul", "conv"]), a=st.lists(DIMS, min_size=1, max_size=5),
       b=st.lists(DIMS, min_size=1, max_size=5),
       extra=st.fixed_dictionaries({}, optional={
           "stride": st.one_of(DIMS, st.tuples(DIMS, DIMS)), "padding": st.one_of(DIMS, st.just("same")),
           "dilation": DIMS, "groups": DIMS}))
def test_fuzz_estimate_shapes(worker, kind, a, b, extra):
    if kind == "matmul" and len(a) >= 2 and len(b) >= 2 and extra:
        b = b[:-2] + [a[-1], b[-1]]                  # usually a valid inner dimension
    if kind == "conv" and len(a) == 4 and len(b) == 4 and extra:
        b = [b[0], a[1], b[2], b[3]]                 # channels agree (groups 1)
    check(worker, "op_shapes", kind, a, b, extra)


@FUZZ
@given(kind=st.sampled_from(["matmul", "conv"]), m=st.integers(1, 9), k=st.integers(1, 9),
       n=st.integers(1, 9), order=st.sampled_from(["<f4", ">f4"]), seed=st.integers(0, 99))
def test_fuzz_op_values(worker, kind, m, k, n, order, seed):
    if kind == "matmul":
        check(worker, "op_values", kind, (m, k), (k, n), order, seed)
    else:
        check(worker, "op_values", kind, (1, k, m + 2, n + 2), (m, k, 3, 3), order, seed)


TOML_VALUES = st.sampled_from(["1", "0", "-1", "1472", "2.5", "1e-300", "1e309", "nan", "inf", "true",
                               '"x"', '"GC200"', '"BOW"', "[1, 2]", "[[1]]", "[]", "{}", "{a = 1}",
                               "9223372036854775808", "1_000_000", '""', "[[1, 2, 3]]"])
TOML_KEYS = st.sampled_from(SPEC_FIELDS + ["base", "name", "amp_conv_units", "coeff_load_bytes_per_cycle",
                                           "nonsense", "sources"])


@FUZZ
@given(lines=st.lists(st.tuples(TOML_KEYS, TOML_VALUES), max_size=4, unique_by=lambda kv: kv[0]),
       head=st.sampled_from(['base = "GC200"\n'] * 4 + ['base = "BOW"\n', "", "[section]\n", "x = \n",
                             "= 1\n", "base = 1\nbase = 2\n", "\x00"]),
       conv=st.booleans())
def test_fuzz_machine_file(worker, lines, head, conv):
    text = head + "".join(f"{k} = {v}\n" for k, v in lines if not (k == "base" and "base" in head))
    check(worker, "machine_file", text, conv)


@FUZZ
@given(amp=st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                     st.sampled_from([True, False, 1, 0, None, "0.6", 1e-9, 1e-300, 5e-324, 1.0, 0.6])),
       tile_bytes=st.one_of(st.integers(1, 4096), st.just(638_976)),
       c=st.integers(1, 16), hw=st.integers(1, 14), k=st.integers(1, 16))
def test_fuzz_conv_memory(worker, amp, tile_bytes, c, hw, k):
    check(worker, "conv_memory", amp, tile_bytes, (1, c, hw, hw), (k, c, 3, 3))


@FUZZ
@given(n=st.one_of(st.integers(-2, 300),
                   st.sampled_from([512, 4096, 16_384, 16_448, 64 * 4096, 2**70, True])),
       op=st.sampled_from(["all_reduce", "reduce_scatter", "all_gather", "broadcast", "nonsense"]),
       nbytes=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-1, 2**64)),
       domain=st.sampled_from([64, 4, 16, 0, -1]))
def test_fuzz_system_collective(worker, n, op, nbytes, domain):
    check(worker, "system_collective", n, op, nbytes, domain)


CLI_VALUES = st.sampled_from(["", "0", "1", "-1", "3", "8", "1,2", "99999999999999999999", "abc", "nan",
                              "GC200", "gc2", "BOW,GC200", "2,3,5,7", "1,1,4,4", "4,4,4", "AMP", "x"])
CLI_OPTIONS = st.sampled_from(["--shape", "--kernel", "--stride", "--padding", "--dilation", "--groups",
                               "--cpg", "--out-channels", "--machine", "--method", "--dtype", "--seed",
                               "--exchange-bandwidth", "--gpu"])


@FUZZ
@given(command=st.sampled_from(["conv", "matmul", "info"]),
       options=st.lists(st.tuples(CLI_OPTIONS, CLI_VALUES), max_size=4), execute=st.booleans())
def test_fuzz_cli(worker, command, options, execute):
    argv = [command] + [x for pair in options for x in pair]
    if execute and command != "info":
        argv.append("--execute")
    if command in ("conv", "matmul") and not any(o == "--shape" for o, _ in options):
        argv += ["--shape", "1,4,6,6" if command == "conv" else "4,4,4"]
    check(worker, "cli", argv)


def test_worker_reports_a_crash_instead_of_dying_with_it(worker):
    """The harness itself: a segfault in the worker is a failed check, not a dead runner."""
    status, _, detail = worker.call("crash_for_the_harness_test")
    assert status == "crash" and "exit code" in detail
    assert worker.call("machine_spec", "n_tiles", 4)[0] == "ok"      # a fresh worker answers
