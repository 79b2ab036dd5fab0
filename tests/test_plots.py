"""Tests for the PNG views (ipukern/plots.py): they draw from real estimate profiles and
sweeps and write non-empty PNGs; without matplotlib they fail with the install hint."""

import pytest

import ipukern as ik
from ipukern import plots
from ipukern.scaling import ConvLayer, grouped_conv_sweep

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def profile():
    return ik.estimate_conv2d((4, 64, 28, 28), (64, 4, 3, 3), padding=1, groups=16)


def _png(path):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 10_000
    return data



def test_tile_grid_shape():
    assert plots.tile_grid_shape(1472) == (32, 46)
    assert plots.tile_grid_shape(1216) == (32, 38)
    assert plots.tile_grid_shape(16) == (4, 4)
    assert plots.tile_grid_shape(1) == (1, 1)
    rows, cols = plots.tile_grid_shape(1009)          # prime: ragged last row
    assert cols == 32 and rows * cols >= 1009
    with pytest.raises(ValueError):
        plots.tile_grid_shape(0)


def test_memory_heatmap(profile, tmp_path):
    pytest.importorskip("matplotlib")
    out = plots.plot_memory_heatmap(profile, tmp_path / "mem.png")
    assert out == tmp_path / "mem.png"
    _png(out)
    _png(plots.plot_memory_heatmap(profile.memory, tmp_path / "mem_tile.png", scale="tile"))
    with pytest.raises(ValueError, match="scale"):
        plots.plot_memory_heatmap(profile, tmp_path / "x.png", scale="log")


def test_memory_heatmap_needs_a_report(tmp_path):
    pytest.importorskip("matplotlib")
    with pytest.raises(ValueError, match="memory report"):
        plots.plot_memory_heatmap(object(), tmp_path / "x.png")


def test_timeline(profile, tmp_path):
    pytest.importorskip("matplotlib")
    _png(plots.plot_timeline(profile, tmp_path / "tl.png"))
    _png(plots.plot_timeline(profile, tmp_path / "tl1.png", max_supersteps=1))


def test_scaling_plot(tmp_path):
    pytest.importorskip("matplotlib")
    layer = ConvLayer("t", channels=16, height=8, width=8)
    rows = grouped_conv_sweep(layer, channels_per_group=(1, 4, "dense"), batch=(1, 2),
                              gpus=("A100_40GB", "V100"))
    _png(plots.plot_scaling(rows, tmp_path / "s.png"))
    only_gpu = grouped_conv_sweep(layer, channels_per_group=(1, 16), batch=1, machines=())
    _png(plots.plot_scaling(only_gpu, tmp_path / "g.png"))
    with pytest.raises(ValueError, match="no rows"):
        plots.plot_scaling([], tmp_path / "e.png")


def test_without_matplotlib_the_error_says_how_to_install(profile, tmp_path, no_matplotlib):
    assert not plots.have_matplotlib()
    with pytest.raises(ImportError, match=r'pip install "ipukern\[plot\]"'):
        plots.plot_timeline(profile, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_activity_plot(profile, tmp_path):
    pytest.importorskip("matplotlib")
    _png(plots.plot_activity(profile, tmp_path / "act.png"))


@pytest.mark.parametrize("suffix, magic", [(".pdf", b"%PDF"), (".svg", b"<?xml")])
def test_vector_formats(profile, tmp_path, suffix, magic):
    pytest.importorskip("matplotlib")
    out = plots.plot_timeline(profile, tmp_path / f"tl{suffix}")
    assert out.read_bytes()[:len(magic)] == magic



def _drawn_figure(draw):
    """Run ``draw()`` and return its result and the matplotlib Figure it saved."""
    from matplotlib.figure import Figure

    captured = {}
    real_savefig = Figure.savefig

    def spy(self, *a, **k):
        captured["fig"] = self
        return real_savefig(self, *a, **k)

    Figure.savefig = spy
    try:
        result = draw()
    finally:
        Figure.savefig = real_savefig
    return result, captured["fig"]


def test_paper_scaling_plot_styles(tmp_path):
    """Every layer has its own marker and an Okabe-Ito colour; the first layer is on top."""
    pytest.importorskip("matplotlib")

    layers = [ConvLayer(f"l{i}", channels=16, height=8, width=8) for i in range(3)]
    rows = grouped_conv_sweep(layers, channels_per_group=(1, 4), batch=1, gpus=("A100_40GB",))
    out, fig = _drawn_figure(lambda: plots.plot_scaling(rows, tmp_path / "s.pdf", size="column"))
    assert out.read_bytes()[:4] == b"%PDF"
    assert fig.get_figwidth() == pytest.approx(3.5)
    ratio_ax = fig.axes[1]
    lines = [ln for ln in ratio_ax.get_lines() if ln.get_marker() not in ("*", "None", "")]
    markers = {ln.get_marker() for ln in lines}
    colours = {ln.get_color() for ln in lines}
    assert len(markers) == 3 and colours <= set(plots.OKABE_ITO)
    first = [ln for ln in lines if ln.get_color() == plots.OKABE_ITO[0]]
    assert min(ln.get_zorder() for ln in first) > max(ln.get_zorder() for ln in lines
                                                      if ln.get_color() != plots.OKABE_ITO[0])
    with pytest.raises(ValueError, match="size"):
        plots.plot_scaling(rows, tmp_path / "x.png", size="poster")


def test_coinciding_layers_stay_visible(tmp_path):
    """A layer drawn below another has larger markers and a wider line (a visible ring)."""
    pytest.importorskip("matplotlib")

    same = [ConvLayer(n, channels=16, height=8, width=8) for n in ("head", "twin")]
    rows = grouped_conv_sweep(same, channels_per_group=(1, 4), batch=1, gpus=("A100_40GB",))
    _, fig = _drawn_figure(lambda: plots.plot_scaling(rows, tmp_path / "s.png"))
    lines = [ln for ln in fig.axes[1].get_lines() if ln.get_marker() not in ("*", "None", "")]
    head = next(ln for ln in lines if ln.get_color() == plots.OKABE_ITO[0])
    twin = next(ln for ln in lines if ln.get_color() == plots.OKABE_ITO[1])
    assert head.get_zorder() > twin.get_zorder()
    assert twin.get_markersize() > head.get_markersize() and twin.get_linewidth() > head.get_linewidth()
