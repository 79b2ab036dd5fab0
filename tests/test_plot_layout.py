"""Every plot the docs and the CLI write, rendered: no text is cut at the figure's edge
(each visible text's bounding box lies inside the figure), network plots name their layers,
and the layout engine is matplotlib's constrained layout. matplotlib is an extra: skipped
without it."""
import pytest

import ipukern as ik
from ipukern import plots
from ipukern.scaling import ConvLayer, grouped_conv_sweep

pytest.importorskip("matplotlib")

#: a text may touch the edge by antialiasing, not by more
SLACK_PX = 1.5


def _figure_of(draw):
    """Run ``draw()``; return the matplotlib Figure it saved (the last one), with
    ``fig._cut``: the texts drawn while saving whose bounding box leaves the figure."""
    from matplotlib.figure import Figure
    from matplotlib.text import Text
    from matplotlib.transforms import Bbox
    seen, drawn = [], []
    real_save, real_draw = Figure.savefig, Text.draw

    def save(self, *a, **k):
        drawn.clear()
        seen.append(self)
        return real_save(self, *a, **k)

    def draw_text(self, renderer):
        real_draw(self, renderer)
        # only what is really drawn: matplotlib keeps tick labels outside the view limits
        # as hidden-by-clipping texts that are never rendered
        if self.get_visible() and self.get_text().strip() and self.figure is not None:
            w, h = renderer.get_canvas_width_height()      # the saved image, at savefig's dpi
            drawn.append((self.get_text(), self.get_window_extent(renderer).frozen(),
                          Bbox.from_extents(0, 0, w, h)))

    Figure.savefig, Text.draw = save, draw_text
    try:
        draw()
    finally:
        Figure.savefig, Text.draw = real_save, real_draw
    fig = seen[-1]
    fig._cut = [(text[:60], tuple(round(v) for v in bb.extents), tuple(round(v) for v in fb.extents))
                for text, bb, fb in drawn if _outside(bb, fb)]
    assert drawn, "no text drawn"
    return fig


def _outside(bb, fb):
    return (bb.x0 < fb.x0 - SLACK_PX or bb.y0 < fb.y0 - SLACK_PX or bb.x1 > fb.x1 + SLACK_PX
            or bb.y1 > fb.y1 + SLACK_PX)


def _check(fig):
    assert type(fig.get_layout_engine()).__name__ == "ConstrainedLayoutEngine"
    assert fig._cut == [], f"cut labels in a {fig.get_figwidth()}x{fig.get_figheight()} in figure"


@pytest.fixture(scope="module")
def conv():
    return ik.estimate_conv2d((4, 64, 28, 28), (64, 4, 3, 3), padding=1, groups=16)


@pytest.fixture(scope="module")
def network():
    net = ik.nn.models.MODELS["mobilenet_v1"](image_size=32)
    return ik.nn.estimate_network(net, batch=1, dtype="float32", partials="float")


@pytest.fixture(scope="module")
def training():
    from ipukern.systems import LayerCost
    costs = [LayerCost(name=f"block{i}.conv{j}", fwd_cycles=100_000 * (1 + i), bwd_cycles=200_000 * (1 + i),
                       wu_cycles=10_000, n_params=1 << 20, stash_bytes=2 << 20, out_bytes=1 << 20)
             for i in range(8) for j in range(2)]
    return ik.estimate_training(None, "POD16", micro_batch=4, gradient_accumulation=6,
                                ipus_per_replica=4, pipeline="auto", costs=costs)


@pytest.fixture(scope="module")
def sweep():
    layers = [ConvLayer("head", channels=64, height=8, width=8),
              ConvLayer("other_layer_with_a_long_name", channels=48, height=8, width=8)]
    return grouped_conv_sweep(layers, channels_per_group=(1, 2, 4, "dense"), batch=(1, 2),
                              gpus=("A100_40GB",), executor=None)


def test_conv_views(conv, tmp_path):
    for draw in (plots.plot_memory_heatmap, plots.plot_timeline, plots.plot_activity):
        _check(_figure_of(lambda d=draw: d(conv, tmp_path / "x.png")))


def test_matmul_views(tmp_path):
    prof = ik.estimate_matmul((256, 512), (512, 128))
    for draw in (plots.plot_memory_heatmap, plots.plot_timeline, plots.plot_activity):
        _check(_figure_of(lambda d=draw: d(prof, tmp_path / "x.png")))


@pytest.mark.parametrize("size", ["page", "column", "double"])
def test_scaling_plot(sweep, tmp_path, size):
    fig = _figure_of(lambda: plots.plot_scaling(sweep, tmp_path / "s.png", size=size))
    _check(fig)
    if size == "column":                 # a paper column: not taller than a page's text block
        assert fig.get_figheight() <= 9.0


def test_scaling_dense_point_is_not_joined(sweep, tmp_path):
    # the dense point (cpg 64 / 48) stands alone: the line stops at the last grouped point
    fig = _figure_of(lambda: plots.plot_scaling(sweep, tmp_path / "s.png"))
    for ln in fig.axes[0].get_lines():
        xs = list(ln.get_xdata())
        if len(xs) > 1:
            assert max(xs) <= 4


def test_network_views_name_their_layers(network, tmp_path):
    for draw in (plots.plot_network_layers, plots.plot_network_memory):
        fig = _figure_of(lambda d=draw: d(network, tmp_path / "n.png"))
        _check(fig)
        ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
        names = [r["name"] for r in network.layers]
        assert ticks and all(any(n.startswith(t.rstrip("…")) for n in names) for t in ticks)
        assert len(ticks) == len(names)        # 57 layers: every one is named


def test_network_views_of_a_training_step(tmp_path):
    net = ik.nn.models.MODELS["mobilenet_v1"](image_size=32)
    prof = ik.nn.estimate_network(net, batch=1, dtype="float32", partials="float", training=True)
    for draw in (plots.plot_network_layers, plots.plot_network_memory):
        _check(_figure_of(lambda d=draw: d(prof, tmp_path / "t.png")))


def test_pipeline_schedule(training, tmp_path):
    fig = _figure_of(lambda: plots.pipeline_schedule_png(training, tmp_path / "train.png"))
    _check(fig)
    assert fig.get_figheight() >= 2.5


def test_pipeline_schedule_of_one_stage(tmp_path):
    from ipukern.systems import LayerCost
    costs = [LayerCost(name=f"l{i}", fwd_cycles=100_000, bwd_cycles=200_000, wu_cycles=10_000,
                       n_params=1 << 18, stash_bytes=1 << 20, out_bytes=1 << 20) for i in range(4)]
    est = ik.estimate_training(None, "POD16", micro_batch=4, costs=costs)
    fig = _figure_of(lambda: plots.pipeline_schedule_png(est, tmp_path / "train.png"))
    _check(fig)          # was 1200 x 180 px with its x label cut


def test_activity_counts_exchanging_tiles(conv, tmp_path):
    fig = _figure_of(lambda: plots.plot_activity(conv, tmp_path / "a.png"))
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert "tiles exchanging" in labels and "tiles idle" not in labels


@pytest.mark.slow
def test_validation_plot(tmp_path):
    # every group, as docs/validation.png (ipukern validate) draws them
    from ipukern import validation
    from ipukern.validation.plot import plot_validation
    res = validation.run()
    _check(_figure_of(lambda: plot_validation(res, tmp_path / "v.png")))


def test_pareto_plot(tmp_path):
    from ipukern.design_space.pareto import plot_pareto
    rows = [{"network": net, "total_sram_bytes": p, "clock_hz": w * 1e6, "samples_per_second": s,
             "status": "ok"}
            for net in ("resnet50", "bert_base") for p, w, s in
            ((1e5, 300, 1e3), (2e5, 600, 3e3), (4e5, 1200, 4e3))]
    _check(_figure_of(lambda: plot_pareto(rows, tmp_path / "p.png")))


def test_every_plot_function_is_checked_here():
    """A new plot cannot escape the cut-label check: each drawing function of ipukern.plots
    (``plot_*`` and ``*_png``), ``plot_validation`` and ``plot_pareto`` is drawn in this file."""
    import inspect
    from pathlib import Path
    here = Path(__file__).read_text(encoding="utf-8").split("def test_every_plot_function_is_checked_here")[0]
    names = {n for n, f in inspect.getmembers(plots, inspect.isfunction)
             if f.__module__ == plots.__name__ and (n.startswith("plot_") or n.endswith("_png"))}
    names |= {"plot_validation", "plot_pareto"}
    missing = sorted(n for n in names if f"{n}(" not in here and f"plots.{n}" not in here)
    assert not missing, f"plots never checked for cut labels: {missing}"
