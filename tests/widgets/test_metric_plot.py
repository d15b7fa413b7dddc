from workbench.widgets.metric_plot import MetricPlot


def _fit(plot, steps, ranks=(0,), **values):
    plot.on_fit_start({"start_step": 0})
    for step in range(1, steps + 1):
        for rank in ranks:
            event = {"step": step, "epoch": 0, "loss": 1.0, "rank": rank, "time": 1.0 * step}
            plot.on_step({**event, **{k: v(step, rank) for k, v in values.items()}})
    plot.on_fit_end({"status": "finished"})


def test_every_numeric_field_is_offered_and_the_losses_are_left_to_the_loss_plot():
    plot = MetricPlot()
    _fit(plot, 5, lr=lambda s, r: 0.1, grad_norm=lambda s, r: 1.0 / s, bubble=lambda s, r: 0.25)
    assert plot.metrics == ["lr", "grad_norm", "bubble"]
    assert [label for label, _ in plot.selector.options] == [
        "learning rate",
        "gradient norm (before clipping)",
        "bubble",
    ]
    assert plot.point_counts() == {"learning rate": 5}
    assert list(plot.figure.layout.yaxis.range) == [0.0, 0.2]  # a constant lr is not drawn on the zero line
    plot.selector.value = "grad_norm"
    assert plot.figure.layout.title.text == "gradient norm (before clipping)"
    assert list(plot.figure.data[0].y) == [1.0 / s for s in range(1, 6)]
    assert plot.figure.layout.yaxis.autorange is True  # back to fitting the curve


def test_samples_per_s_gets_a_curve_per_rank_and_the_rest_is_rank_0s():
    plot = MetricPlot()
    _fit(plot, 4, ranks=(0, 1), lr=lambda s, r: 0.1 * (r + 1), samples_per_s=lambda s, r: 100.0 * (r + 1))
    assert plot.point_counts() == {"learning rate": 4}
    assert list(plot.figure.data[0].y) == [0.1] * 4  # rank 0's: the lr is the same on every rank
    plot.selector.value = "samples_per_s"
    assert plot.point_counts() == {"rank 0": 4, "rank 1": 4}
    assert plot.figure.data[0].line.color != plot.figure.data[1].line.color
    assert all(trace.showlegend for trace in plot.figure.data)


def test_a_fresh_fit_starts_over_and_the_choice_is_kept():
    plot = MetricPlot()
    _fit(plot, 3, lr=lambda s, r: 0.1, grad_norm=lambda s, r: 2.0)
    plot.selector.value = "grad_norm"
    _fit(plot, 2, lr=lambda s, r: 0.1, grad_norm=lambda s, r: 3.0)
    assert plot.selector.value == "grad_norm" and plot.point_counts() == {
        "gradient norm (before clipping)": 2
    }
    plot.on_fit_start({"start_step": 2})  # a resumed fit continues the curves
    plot.on_step({"step": 3, "loss": 1.0, "rank": 0, "grad_norm": 4.0})
    plot.flush()
    assert plot.point_counts() == {"gradient norm (before clipping)": 3}
