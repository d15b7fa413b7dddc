import math
import threading
import time

import pytest

from workbench.widgets.device_monitor import DeviceMonitor

GIB = 2**30


def sample(t, gpus=0, cpu_percent=40.0, cores=(30.0, 50.0)):
    return {
        "time": 1_700_000_000.0 + t,
        "cpu": {"percent": cpu_percent, "per_core": list(cores), "ram_used": 8 * GIB, "ram_total": 32 * GIB},
        "gpus": [
            {
                "index": i,
                "name": f"NVIDIA H100 <{i}>",
                "utilization": 80.0 + i,
                "memory_used": (20 + i) * GIB,
                "memory_total": 80 * GIB,
                "power_w": 300.0,
                "temperature_c": 60.0,
                "pcie_tx_bytes_per_s": 1e9,
                "pcie_rx_bytes_per_s": None if i else 2e9,
            }
            for i in range(gpus)
        ],
    }


def _trace(monitor, name):
    return next(trace for trace in monitor.figure.data if trace.name == name)


def test_without_gpus_it_draws_cpu_and_ram():
    monitor = DeviceMonitor()
    for t in range(5):
        monitor.update(sample(t))
    monitor.flush()
    assert monitor.point_counts() == {"CPU": 5, "RAM": 5}
    assert list(_trace(monitor, "CPU").x) == [0.0, 1.0, 2.0, 3.0, 4.0]  # seconds since the first sample
    assert list(_trace(monitor, "RAM").y) == [25.0] * 5
    assert "CPU</b> 40%" in monitor.summary.value and "RAM 8.0 / 32.0 GiB" in monitor.summary.value


def test_two_gpus_get_a_utilisation_and_a_memory_line_each_in_their_panels():
    monitor = DeviceMonitor()
    for t in range(3):
        monitor.update(sample(t, gpus=2))
    monitor.flush()
    assert monitor.point_counts() == {
        "CPU": 3,
        "RAM": 3,
        "GPU 0": 3,
        "GPU 0 memory": 3,
        "GPU 1": 3,
        "GPU 1 memory": 3,
    }
    assert list(_trace(monitor, "GPU 1").y) == [81.0] * 3
    assert list(_trace(monitor, "GPU 1 memory").y) == [100 * 21 / 80] * 3
    utilisation, memory = _trace(monitor, "GPU 0"), _trace(monitor, "GPU 0 memory")
    assert (utilisation.xaxis, memory.xaxis) == ("x", "x2")  # left and right subplot
    assert utilisation.line.color == memory.line.color != _trace(monitor, "GPU 1").line.color
    assert utilisation.legendgroup == memory.legendgroup == "GPU 0"
    summary = monitor.summary.value
    assert "NVIDIA H100 &lt;0&gt;" in summary  # names are escaped
    assert "300 W" in summary and "60 °C" in summary and "PCIe tx 1.00 rx 2.00 GB/s" in summary


def test_only_the_last_window_is_kept_and_shown():
    monitor = DeviceMonitor(window_s=10)
    for t in range(0, 31):
        monitor.update(sample(t))
    monitor.flush()
    assert list(_trace(monitor, "CPU").x) == [float(t) for t in range(20, 31)]
    assert tuple(monitor.figure.layout.xaxis.range) == (20.0, 30.0)
    assert tuple(monitor.figure.layout.xaxis2.range) == (20.0, 30.0)


def test_the_x_range_fits_the_run_until_the_window_is_full():
    monitor = DeviceMonitor(window_s=60)
    monitor.update(sample(0))
    monitor.update(sample(5))
    monitor.flush()
    assert tuple(monitor.figure.layout.xaxis.range) == (0.0, 5.0)  # an 8 s run is not lost in 60 s
    assert tuple(monitor.figure.layout.xaxis2.range) == (0.0, 5.0)  # the rows share the axis


def test_each_watched_rank_gets_its_cpu_share_and_memory_lines():
    monitor = DeviceMonitor()
    for t in range(3):
        watched = sample(t, gpus=2, cores=(100.0, 100.0, 0.0, 0.0))
        watched["processes"] = [
            {"rank": 0, "pid": 10, "cpu_cores": 1.0, "rss": 2 * GIB, "gpu_index": 0, "gpu_memory": 8 * GIB},
            {"rank": 1, "pid": 11, "cpu_cores": None if t == 0 else 0.5, "rss": 4 * GIB},
        ]
        monitor.update(watched)
    monitor.flush()
    assert list(_trace(monitor, "rank 0 CPU").y) == [25.0] * 3  # 1 core of 4: a quarter of the machine
    assert list(_trace(monitor, "rank 1 CPU").y) == [12.5] * 2  # the first reading primes psutil
    assert list(_trace(monitor, "rank 1 RAM").y) == [100 * 4 / 32] * 3
    assert list(_trace(monitor, "rank 0 GPU 0 memory").y) == [10.0] * 3
    rank0 = _trace(monitor, "rank 0 CPU")
    assert (
        rank0.line.color
        == _trace(monitor, "rank 0 RAM").line.color
        != _trace(monitor, "rank 1 CPU").line.color
    )
    assert (rank0.xaxis, _trace(monitor, "rank 0 RAM").xaxis) == ("x", "x2")
    assert "rank 0 1.00 cores, 2.00 GiB" in monitor.summary.value


def test_with_loss_the_loss_shares_the_seconds_axis_with_the_devices():
    monitor = DeviceMonitor(loss=True)
    start = 1_700_000_000.0
    monitor.on_fit_start({"time": start})
    for i in range(400):  # 2 s of steps at 200 steps/s: thinned to ~20 points a second
        monitor.on_step({"step": i + 1, "loss": 1.0 / (i + 1), "rank": 0, "time": start + i / 200})
        monitor.on_step({"step": i + 1, "loss": 9.0, "rank": 1, "time": start + i / 200})  # rank 0's only
    for t in range(3):
        monitor.update(sample(t))
    monitor.flush()
    loss, cpu = _trace(monitor, "loss"), _trace(monitor, "CPU")
    assert 35 <= len(loss.x) <= 41 and max(loss.y) == 1.0
    assert list(cpu.x) == [0.0, 1.0, 2.0] and loss.x[0] == 0.0  # both from the fit's start
    assert (loss.xaxis, cpu.xaxis, _trace(monitor, "RAM").xaxis) == ("x", "x2", "x3")
    assert [a.text for a in monitor.figure.layout.annotations] == ["loss", "utilization %", "memory used %"]


def test_per_core_lines_are_thin_and_out_of_the_legend():
    monitor = DeviceMonitor(per_core=True)
    monitor.update(sample(0, cores=(10.0, 20.0, 30.0)))
    monitor.flush()
    assert set(monitor.point_counts()) == {"CPU", "RAM", "core 0", "core 1", "core 2"}
    core = _trace(monitor, "core 2")
    assert list(core.y) == [30.0] and core.showlegend is False and core.line.width < 2


def test_missing_values_leave_gaps_rather_than_failing():
    monitor = DeviceMonitor()
    bare = {"time": 5.0, "cpu": {"percent": None, "ram_used": 0, "ram_total": 0}, "gpus": []}
    monitor.update(bare)
    monitor.update({"time": 6.0, "gpus": [{"index": 0, "utilization": None, "memory_total": None}]})
    monitor.flush()
    assert monitor.point_counts() == {}
    assert monitor.summary.value.startswith("<b>GPU 0</b>")


def test_flush_before_any_sample_draws_nothing():
    monitor = DeviceMonitor()
    monitor.flush()
    assert monitor.point_counts() == {}
    assert monitor.summary.value.startswith("waiting")


def test_samples_from_a_sampler_thread_are_drawn_by_the_timer():
    monitor = DeviceMonitor(max_updates_per_s=20)
    thread = threading.Thread(target=lambda: [monitor.update(sample(t, gpus=1)) for t in range(50)])
    thread.start()
    thread.join()
    deadline = time.monotonic() + 3
    while monitor.point_counts().get("GPU 0", 0) < 50 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert monitor.point_counts()["GPU 0"] == 50
    monitor.detach()


class FakeSampler:
    def __init__(self):
        self.subscribers = []

    def subscribe(self, callback):
        self.subscribers.append(callback)
        return lambda: self.subscribers.remove(callback)

    def emit(self, item):
        for callback in list(self.subscribers):
            callback(item)


def test_attach_subscribes_and_detach_unsubscribes_and_draws():
    sampler, other = FakeSampler(), FakeSampler()
    threads_before = set(threading.enumerate())
    monitor = DeviceMonitor()
    monitor.attach(sampler)
    sampler.emit(sample(0))
    monitor.attach(other)  # moves: one sampler at a time
    assert sampler.subscribers == [] and other.subscribers == [monitor.update]
    other.emit(sample(1))
    monitor.detach()
    assert other.subscribers == []
    assert monitor.point_counts() == {"CPU": 2, "RAM": 2}
    assert [t for t in threading.enumerate() if t not in threads_before and t.is_alive()] == []
    monitor.detach()  # a second detach does nothing


def test_displays_as_its_vbox():
    monitor = DeviceMonitor()
    bundle = monitor._repr_mimebundle_()
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == monitor.widget.model_id


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"window_s": 0}, "window_s"),
        ({"window_s": -1}, "window_s"),
        ({"window_s": math.inf}, "window_s"),
        ({"max_updates_per_s": 0}, "max_updates_per_s"),
        ({"max_updates_per_s": math.nan}, "max_updates_per_s"),
    ],
)
def test_constructor_arguments_are_checked(kwargs, field):
    with pytest.raises(ValueError, match=field):
        DeviceMonitor(**kwargs)


def test_start_samples_on_its_own_and_stop_ends_it_and_a_second_start_replaces_the_first():
    import time

    monitor = DeviceMonitor()
    assert monitor.start(interval=0.05) is monitor and monitor.running
    first = monitor._own_sampler
    monitor.start(interval=0.05)
    assert not first.running and monitor.running  # one sampler at a time
    time.sleep(0.3)
    monitor.stop()
    assert not monitor.running
    count = monitor.point_counts()["CPU"]
    time.sleep(0.2)
    monitor.flush()
    assert count >= 2 and monitor.point_counts()["CPU"] == count  # nothing after stop
    monitor.stop()  # twice is fine


def test_the_loss_line_does_not_take_the_devices_colours():
    with_loss, without = DeviceMonitor(loss=True), DeviceMonitor()
    with_loss.on_fit_start({"time": 1_700_000_000.0})
    with_loss.on_step({"step": 1, "loss": 1.0, "rank": 0, "time": 1_700_000_000.0})
    for monitor in (with_loss, without):
        monitor.update(sample(0, gpus=1))
        monitor.flush()
    for line in ("CPU", "GPU 0"):
        assert _trace(with_loss, line).line.color == _trace(without, line).line.color


def test_a_sampled_line_shows_a_marker_per_sample_only_while_it_is_short():
    """A lone sample draws no line, so a short run gets markers; a marker per sample of a long run was much of
    a busy page's drawing time, so it then draws a line only."""
    from workbench.widgets.device_monitor import MARKED_POINTS

    monitor = DeviceMonitor(window_s=1000)
    monitor.update(sample(0))
    monitor.flush()
    assert _trace(monitor, "CPU").mode == "lines+markers"
    for t in range(1, MARKED_POINTS + 1):
        monitor.update(sample(t))
    monitor.flush()
    assert len(_trace(monitor, "CPU").x) == MARKED_POINTS + 1
    assert _trace(monitor, "CPU").mode == "lines"
