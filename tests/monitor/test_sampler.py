import itertools
import time

import pytest

from workbench.monitor import DeviceSampler


def _wait_for(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_samples_at_the_interval_and_stops_promptly():
    sampler = DeviceSampler(interval=0.02, history=5)
    seen = []
    sampler.subscribe(seen.append)
    sampler.start()
    _wait_for(lambda: len(seen) >= 8)
    started = time.perf_counter()
    sampler.stop()
    assert time.perf_counter() - started < 1.0 and not sampler.running
    assert len(sampler.samples()) == 5  # bounded history
    assert sampler.latest is sampler.samples()[-1] is seen[-1]
    assert set(seen[0]) == {"time", "cpu", "gpus"} and seen[0]["time"] < seen[-1]["time"]
    assert 0 <= sampler.cpu_fraction < 1 and sampler.wall_seconds > 0


def test_restart_and_idempotent_start():
    sampler = DeviceSampler(interval=0.02)
    sampler.start()
    sampler.start()  # no second thread
    _wait_for(lambda: len(sampler.samples()) >= 1)
    sampler.stop()
    count = len(sampler.samples())
    with sampler:
        _wait_for(lambda: len(sampler.samples()) > count)
    assert not sampler.running


def test_a_failing_subscriber_is_reported_and_sampling_goes_on():
    sampler = DeviceSampler(interval=0.02)

    def broken(sample):
        raise RuntimeError("view is gone")

    good = []
    sampler.subscribe(broken)
    sampler.subscribe(good.append)
    with sampler:
        _wait_for(lambda: len(good) >= 3)
    assert sampler.errors and "RuntimeError: view is gone" in sampler.errors[0]


def test_a_failing_reader_is_reported_and_sampling_goes_on(fake_nvml):
    nvml = fake_nvml([{"name": "H100", "memory": 80 << 30, "capability": (9, 0)}])

    def lost(handle):
        raise RuntimeError("GPU has fallen off the bus")

    nvml.nvmlDeviceGetUtilizationRates = lost  # not an NVMLError, so not a None field
    sampler = DeviceSampler(interval=0.01, nvml=nvml)
    with sampler:
        _wait_for(lambda: len(sampler.errors) >= 3)
        assert sampler.running
    assert sampler.samples() == [] and "sample_once: RuntimeError: GPU has fallen off" in sampler.errors[0]


def test_slow_subscribers_do_not_stretch_the_period():
    sampler = DeviceSampler(interval=0.05)
    seen = []
    sampler.subscribe(lambda sample: (seen.append(sample["time"]), time.sleep(0.04)))
    with sampler:
        _wait_for(lambda: len(seen) >= 8)
    gaps = sorted(b - a for a, b in itertools.pairwise(seen))
    assert gaps[len(gaps) // 2] < 0.07  # a fixed grid: 0.05 s, not 0.05 + 0.04


def test_stop_does_not_wait_out_the_interval_and_a_short_run_still_gets_a_sample():
    sampler = DeviceSampler(interval=30.0)
    seen = []
    sampler.subscribe(seen.append)
    sampler.start()
    started = time.perf_counter()
    sampler.stop()
    assert time.perf_counter() - started < 1.0
    assert len(sampler.samples()) == 1 and seen == sampler.samples()  # published, for the views
    assert 0 < sampler.cpu_seconds < sampler.wall_seconds  # the priming read is counted too


def test_unsubscribe_stops_the_calls():
    sampler = DeviceSampler(interval=0.02)
    seen = []
    unsubscribe = sampler.subscribe(seen.append)
    with sampler:
        _wait_for(lambda: len(seen) >= 1)
        unsubscribe()
        unsubscribe()  # twice is harmless
        count = len(seen)
        time.sleep(0.1)
    assert len(seen) <= count + 1  # at most the sample in flight


def test_gpus_come_from_nvml_and_nvml_is_shut_on_stop(fake_nvml):
    nvml = fake_nvml([{"name": "H100", "memory": 80 << 30, "capability": (9, 0), "util": 97}])
    sampler = DeviceSampler(interval=0.02, nvml=nvml)
    assert sampler.sample_once()["gpus"][0]["utilization"] == 97.0
    with sampler:
        _wait_for(lambda: len(sampler.samples()) >= 2)
    assert not nvml.open and sampler.gpu_unavailable_reason is None


@pytest.mark.parametrize("interval", [0, -1, float("nan"), float("inf"), "1", True])
def test_bad_interval(interval):
    with pytest.raises(ValueError, match="interval must be"):
        DeviceSampler(interval=interval)


def test_bad_history():
    with pytest.raises(ValueError, match="history"):
        DeviceSampler(history=0)


def test_stop_reports_a_thread_that_does_not_end():
    sampler = DeviceSampler(interval=0.01)
    release = []

    def slow(sample):
        while not release:
            time.sleep(0.01)

    sampler.subscribe(slow)
    sampler.start()
    _wait_for(lambda: len(sampler.samples()) >= 1)
    with pytest.raises(TimeoutError, match="did not stop"):
        sampler.stop(timeout=0.05)
    release.append(True)
    sampler.stop()


def test_watched_ranks_are_sampled_by_pid_with_their_gpu_memory_where_nvml_lists_them(fake_nvml):
    import os
    import subprocess
    import sys

    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])  # a worker stand-in: one busy core
    try:
        gpus = [
            {"name": "H100", "memory": 80 << 30, "capability": (9, 0), "processes": {busy.pid: 3 << 30}},
            {"name": "H100", "memory": 80 << 30, "capability": (9, 0), "processes": {99999999: None}},
        ]
        sampler = DeviceSampler(interval=0.2, nvml=fake_nvml(gpus))
        ranks = {0: busy.pid, 1: os.getpid()}
        sampler.watch(lambda: ranks)
        first = sampler.sample_once()["processes"]
        assert [p["cpu_cores"] for p in first] == [None, None]  # psutil is primed by the first reading
        time.sleep(0.5)
        second = {p["rank"]: p for p in sampler.sample_once()["processes"]}
        assert second[0]["pid"] == busy.pid and 0.1 < second[0]["cpu_cores"] < 1.5  # its own, not ours
        assert second[0]["gpu_index"] == 0 and second[0]["gpu_memory"] == 3 << 30
        assert "gpu_index" not in second[1] and second[1]["rss"] > 0
        busy.kill()
        busy.wait()
        ranks = {1: os.getpid()}
        assert [p["rank"] for p in sampler.sample_once()["processes"]] == [1]  # an exited worker drops out
        sampler.watch(None)
        assert "processes" not in sampler.sample_once()
    finally:
        busy.kill()


def test_a_sub_second_run_gets_its_start_and_its_end_so_the_monitor_draws_a_line():
    sampler = DeviceSampler()  # 0.5 s between samples, as a Dashboard's
    with sampler:
        time.sleep(0.45)
    times = [sample["time"] for sample in sampler.samples()]
    assert len(times) >= 2 and times[-1] - times[0] >= 0.2, times  # ~0.1 s in, and at the end
