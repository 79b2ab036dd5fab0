"""ipukern._format: the one table and units helper of printed output, and the CLI's
exit-code convention for names that name nothing."""
import pytest

from ipukern._format import MISSING, Rest, fmt_bytes, fmt_num, format_table
from ipukern.cli import main


def test_numbers_and_bytes():
    assert fmt_num(1234567.891) == "1,234,568" and fmt_num(0.5, 2) == "0.50"
    assert fmt_num(None) == MISSING == "-" and fmt_num(12.5, 1, "%") == "12.5%"
    assert fmt_bytes(638976) == "638,976 B"
    assert fmt_bytes(638976, "KiB") == "624.0 KiB" and fmt_bytes(3 * 2**19, "MiB") == "1.5 MiB"
    assert fmt_bytes(None) == MISSING
    with pytest.raises(ValueError, match="unit"):
        fmt_bytes(1, "kB")


def test_table_aligns_text_left_and_numbers_right():
    text = format_table(["name", "tiles", "ratio"], [["gc200", "1,472", "1.03"], ["bow-long", "16", MISSING]])
    assert text.splitlines() == ["name      tiles  ratio",
                                 "gc200     1,472   1.03",
                                 "bow-long     16      -"]


def test_a_rest_cell_is_free_text_that_does_not_widen_its_column():
    rows = [["a", "GC200", "16,032"], ["b", Rest("not modelled: packing of several sequences")],
            ["c", "BOW"]]
    text = format_table(["id", "machine", "model"], rows)
    lines = text.splitlines()
    assert lines[1] == "a   GC200    16,032"
    assert lines[2] == "b   not modelled: packing of several sequences"
    assert lines[3] == "c   BOW"                  # a plain short row is padded


def test_table_errors():
    with pytest.raises(ValueError, match="3 cells for 2 headers"):
        format_table(["a", "b"], [[1, 2, 3]])
    with pytest.raises(ValueError, match="align"):
        format_table(["a", "b"], [[1, 2]], align="lx")


@pytest.mark.parametrize("argv", [["network", "nosuchnet"], ["train", "nosuchnet"],
                                  ["train", "resnet50", "--system", "POD17"],
                                  ["compare", "resnet50", "--systems", "POD17"],
                                  ["tune", "resnet50", "--system", "POD17"],
                                  ["network", "resnet50", "--machine", "GC9"]])
def test_a_name_that_names_nothing_is_a_usage_error(argv, capsys):
    # an unknown model or system exits 2 like an unknown --machine preset (argparse), in one
    # line pointing at the command's --help; model errors (does not fit) stay 1
    try:
        code = main([*argv, "--no-progress"])
    except SystemExit as e:                    # argparse's own usage errors
        code = e.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "--help" in err, err


def test_a_delta_table_has_one_set_of_widths_across_its_sections():
    from ipukern.core import delta, format_delta_sections
    lines = format_delta_sections([("first", [("x", delta(1, 2))], 1.0, False),
                                   ("second", [("a longer name", delta(1_000_000, 3)),
                                               ("same", delta(5, 5))], 1.0, True)], what="note")
    assert lines[1] == "first" and lines[3] == "second" and len(lines) == 5    # "same" dropped
    end = lines[0].index("b / a") + len("b / a")       # the ratio column ends at one place
    assert [len(lines[2]), len(lines[4])] == [end, end], lines
    assert "+1" in lines[2] and "-999,997" in lines[4] and "1,000,000" in lines[4]


def test_the_summaries_print_bytes_grouped_with_their_unit():
    import ipukern as ik
    text = ik.estimate_conv2d((1, 16, 8, 8), (16, 4, 3, 3), padding=1, groups=4).summary()
    header = next(ln for ln in text.splitlines() if ln.lstrip().startswith("#  category"))
    steps = text.splitlines()[text.splitlines().index(header) + 1:][:3]
    start = header.index("exchange") + len("exchange")
    end = header.index("bytes") + len("bytes")
    assert all(s[start:end].strip().endswith(" B") for s in steps), steps
