import threading

import pytest

from workbench.train.events import Callback
from workbench.widgets.memory_plot import MemoryPlot

MIB = 2**20


def _memory(params, grads, optimizer_state, activations, cuda_peak=None):
    return {
        "params": params,
        "grads": grads,
        "optimizer_state": optimizer_state,
        "activations": activations,
        "cuda_peak": cuda_peak,
        "device": "cpu" if cuda_peak is None else "cuda:0",
    }


def _step(rank, memory=None, step=1):
    event = {"step": step, "epoch": 0, "loss": 1.0, "lr": 0.1, "rank": rank}
    if memory is not None:
        event["memory"] = memory
    return event


def _trace(plot, name):
    return next(trace for trace in plot.figure.data if trace.name == name)


def test_is_a_callback_and_displays_as_its_vbox():
    plot = MemoryPlot()
    assert isinstance(plot, Callback)
    bundle = plot._repr_mimebundle_()
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == plot.widget.model_id
    assert bundle["text/plain"] == repr(plot) == "MemoryPlot(no data yet)"
    assert plot.figure in plot.widget.children
    assert "memory per rank" in plot.figure.layout.title.text


def test_one_stacked_bar_per_rank_in_mib_with_exact_bytes_on_hover():
    threads_before = set(threading.enumerate())
    plot = MemoryPlot()
    plot.on_fit_start({"run": "fsdp", "start_step": 0})
    plot.on_step(_step(1, _memory(2 * MIB, 2 * MIB, 4 * MIB, 3 * MIB)))
    plot.on_step(_step(0, _memory(2 * MIB + 512, 2 * MIB, 4 * MIB, MIB)))
    plot.on_step(_step(0, step=2))  # later steps carry no memory
    plot.on_fit_end({"status": "finished"})
    assert plot.figure.layout.barmode == "stack"
    assert plot.bars() == ["rank 0", "rank 1"]
    assert [trace.name for trace in plot.figure.data] == [
        "parameters",
        "gradients",
        "optimizer state",
        "activations",
    ]
    params = _trace(plot, "parameters")
    assert list(params.customdata) == [2 * MIB + 512, 2 * MIB]
    assert list(params.y) == pytest.approx([2 + 512 / MIB, 2.0])
    assert list(_trace(plot, "optimizer state").y) == [4.0, 4.0]
    assert list(_trace(plot, "activations").y) == [1.0, 3.0]
    assert "bytes" in params.hovertemplate and "MiB" in params.hovertemplate
    assert plot.memory()[1] == _memory(2 * MIB, 2 * MIB, 4 * MIB, 3 * MIB)
    assert repr(plot) == "MemoryPlot(2 ranks, rank 0 9.0 MiB, rank 1 11.0 MiB)"
    assert [t for t in threading.enumerate() if t not in threads_before and t.is_alive()] == []


def test_steps_only_buffer_and_the_timer_thread_draws():
    plot = MemoryPlot(max_updates_per_s=20)
    plot.on_step(_step(0, _memory(MIB, MIB, MIB, MIB)))
    assert plot.bars() == []  # nothing drawn on the training thread
    for _ in range(100):
        if plot.bars():
            break
        threading.Event().wait(0.01)
    assert plot.bars() == ["rank 0"]
    plot.on_fit_end({"status": "finished"})


def test_a_reference_bar_comes_first_and_a_label_used_again_replaces_it():
    plot = MemoryPlot()
    plot.add_reference("1 process", _memory(4 * MIB, 4 * MIB, 8 * MIB, 2 * MIB))
    assert plot.bars() == ["1 process"]  # drawn at once
    plot.on_step(_step(0, _memory(2 * MIB, 2 * MIB, 4 * MIB, 2 * MIB)))
    plot.on_step(_step(1, _memory(2 * MIB, 2 * MIB, 4 * MIB, 2 * MIB)))
    plot.add_reference("1 process", _memory(4 * MIB, 4 * MIB, 8 * MIB, 4 * MIB))
    plot.flush()
    assert plot.bars() == ["1 process", "rank 0", "rank 1"]
    assert list(_trace(plot, "activations").y) == [4.0, 2.0, 2.0]
    assert list(plot.memory()) == [0, 1]  # references are not ranks
    assert repr(plot) == "MemoryPlot(2 ranks, rank 0 10.0 MiB, rank 1 10.0 MiB, reference 1 process 20.0 MiB)"


def test_cuda_peaks_are_markers_on_the_ranks_that_measured_one():
    plot = MemoryPlot()
    plot.on_step(_step(0, _memory(MIB, MIB, MIB, MIB)))
    plot.flush()
    assert len(plot.figure.data) == 4  # no marker trace without a peak
    plot.on_step(_step(1, _memory(MIB, MIB, MIB, MIB, cuda_peak=6 * MIB)))
    plot.flush()
    peaks = _trace(plot, "CUDA peak allocated")
    assert peaks.mode == "markers"
    assert list(peaks.x) == ["rank 1"] and list(peaks.y) == [6.0] and list(peaks.customdata) == [6 * MIB]


def test_extra_keys_are_kept_but_not_stacked():
    plot = MemoryPlot()
    plot.on_step(_step(0, {**_memory(MIB, MIB, MIB, MIB), "buckets": 5 * MIB}))
    plot.flush()
    assert plot.memory()[0]["buckets"] == 5 * MIB
    assert len(plot.figure.data) == 4 and repr(plot).endswith("rank 0 4.0 MiB)")


@pytest.mark.parametrize(
    ("memory", "message"),
    [
        ({"params": 1, "grads": 1}, "memory lacks optimizer_state, activations"),
        (_memory(-1, 0, 0, 0), r"memory\['params'\] must be a number ≥ 0"),
        (_memory(0, 0, 0, "1"), r"memory\['activations'\]"),
        (_memory(0, 0, 0, 0, cuda_peak=-5), r"memory\['cuda_peak'\]"),
        ([1, 2, 3, 4], "memory must be a dict"),
    ],
)
def test_bad_memory_dicts_raise_from_events_and_references(memory, message):
    plot = MemoryPlot()
    with pytest.raises(ValueError, match=message):
        plot.on_step(_step(0, memory))
    with pytest.raises(ValueError, match=message):
        plot.add_reference("baseline", memory)
    assert plot.memory() == {}


@pytest.mark.parametrize(
    ("label", "message"), [("", "non-empty"), (" ", "non-empty"), (3, "non-empty"), ("rank 0", "taken")]
)
def test_reference_labels_are_checked(label, message):
    with pytest.raises(ValueError, match=message):
        MemoryPlot().add_reference(label, _memory(0, 0, 0, 0))


@pytest.mark.parametrize("rate", [0, -1, float("inf")])
def test_constructor_arguments_are_checked(rate):
    with pytest.raises(ValueError, match="max_updates_per_s"):
        MemoryPlot(max_updates_per_s=rate)


def test_a_single_process_bar_says_one_process_not_rank_0():
    plot = MemoryPlot()
    plot.on_fit_start({"world_size": 1, "start_step": 0})
    plot.on_step(_step(0, _memory(1, 1, 2, 3)))
    plot.flush()
    assert plot.bars() == ["one process"]
    assert plot.figure.layout.title.text == "memory in a training step"
    plot.on_fit_start({"world_size": 2, "start_step": 0})
    plot.on_step(_step(1, _memory(1, 1, 2, 3)))
    plot.flush()
    assert plot.bars() == ["rank 0", "rank 1"]
    assert plot.figure.layout.title.text == "memory per rank in a training step"
