"""Our plots sync a small loader and name one per-kernel model holding plotly's 5-MB front-end bundle."""

import json

from workbench.widgets import LossPlot
from workbench.widgets._figure_widget import BUNDLE, FigureWidget, PlotlyBundle, bundle_model


def test_a_plot_sends_a_loader_and_the_bundle_model_instead_of_plotlys_bundle():
    state = FigureWidget().get_state()
    assert len(json.dumps(state, default=str)) < 25_000  # plotly's own FigureWidget: ~5 MB
    assert BUNDLE.read_bytes()[:100] not in state["_esm"].encode()
    assert state["_bundle_model"] == bundle_model().model_id


def test_every_plot_of_a_kernel_shares_one_bundle_model_holding_plotlys_bundle():
    first, second = FigureWidget(), LossPlot().figure
    assert isinstance(second, FigureWidget)
    assert first._bundle_model == second._bundle_model
    carrier = bundle_model()
    assert isinstance(carrier, PlotlyBundle) and carrier.bundle == BUNDLE.read_bytes()


def test_a_closed_bundle_model_is_made_again_for_the_next_plot():
    old = bundle_model()
    old_id = old.model_id
    old.close()
    plot = FigureWidget()
    assert plot._bundle_model != old_id and plot._bundle_model == bundle_model().model_id


def test_every_live_plot_draws_tick_labels_without_measuring_them_against_the_page():
    """plotly's default ("hide past div") measures each tick label on every draw: a tenth of a busy page's
    time under a 2-process Launch's Dashboard. The live plots' template turns it off for every axis."""
    from workbench.widgets import (
        DeviceMonitor,
        LossPlot,
        MemoryPlot,
        MetricPlot,
        PipelineTimeline,
        StepTimePlot,
    )

    for plot in (
        LossPlot(),
        MetricPlot(),
        DeviceMonitor(loss=True),
        StepTimePlot(),
        MemoryPlot(),
        PipelineTimeline(),
    ):
        axes = plot.figure.layout.template.layout
        assert (axes.xaxis.ticklabeloverflow, axes.yaxis.ticklabeloverflow) == ("allow", "allow"), plot
        assert axes.plot_bgcolor == "white"  # still plotly_white
