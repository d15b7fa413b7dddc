"""The training dashboard: progress with ETA, live loss plot, device monitor and controls.

Training runs in a background thread so the notebook stays responsive: the buttons work while it runs.
It drives a `Trainer`, or a `Launch` (data-parallel workers): then the plot shows every rank's loss and
the status line each rank's throughput, and the buttons reach the workers. A memory plot appears once
the trainer reports memory, a "where the time goes" plot once a rank reports its step's phases, and a
pipeline timeline once every stage of a pipeline step has reported.

    dashboard = Dashboard(trainer)           # shows itself when it is the last expression of a cell
    dashboard.start()                        # or press Start
    result = await dashboard.wait_async()    # in a later cell: the buttons keep working, even under Run All
    result = dashboard.wait()                # scripts: blocks, returns the FitResult, re-raises a failure
    result = dashboard.fit()                 # scripts: train on this thread

Why `await` in a notebook: the kernel handles a button click only when no cell is running, or while a
running cell awaits (ipykernel ≥ 7 dispatches widget messages then, ahead of the cells queued by Run All).
A cell blocked in `wait()`, or any busy cell, holds every click until it ends: training goes on unpaused.
"""

from __future__ import annotations

import html
import threading
import time
from typing import Any

import ipywidgets as widgets

from workbench.monitor import DeviceSampler
from workbench.train.events import Callback, Event, evaluation_metrics
from workbench.train.job import Job
from workbench.train.job_runner import JobRunner
from workbench.train.trained_what import trained_text
from workbench.widgets._display import widget_bundle
from workbench.widgets._kernel import acknowledge_widget_message, running_cell_parent
from workbench.widgets.deferred import DeferredCallbacks
from workbench.widgets.device_monitor import DeviceMonitor
from workbench.widgets.loss_plot import LossPlot
from workbench.widgets.memory_plot import MemoryPlot
from workbench.widgets.metric_plot import MetricPlot
from workbench.widgets.pipeline_timeline import PipelineTimeline
from workbench.widgets.step_time_plot import StepTimePlot
from workbench.widgets.throttle import Throttle

PROFILE_STEPS = 5  # steps the Profile button traces
_PUSHES_PER_S = 4  # progress bar and status text, drawn by a timer thread, not the training thread


class Dashboard(Callback):
    """Start/pause/stop a `Trainer` from a notebook and watch it: progress, loss curves, device use.

    Below the controls: the loss curves (`loss_plot`), a metric chosen from a dropdown (`metric_plot`:
    learning rate, gradient norm, each rank's samples/s, evaluation metrics) and `device_monitor`: the loss,
    device utilisation and memory on one axis of seconds, with a line per worker for a `Launch`.
    `memory_plot` (a `MemoryPlot`), `step_time_plot` (a `StepTimePlot`: where each rank's step time goes)
    and `timeline` (a `PipelineTimeline`) join below the other views when they first have something to
    draw: the first ``memory`` event, the first ``step_time``, the first pipeline step whose every stage
    reported its ``timeline``. The views get the training events from a timer thread (the training
    thread only queues them: `workbench.widgets.deferred`).

    Args:
        trainer: the job to drive, a `workbench.train.Job`: a `Trainer`, or a `workbench.parallel.Launch`;
            the dashboard subscribes to its events and uses its control.
        loss_plot: a `LossPlot` to draw into (share one between dashboards to overlay runs).
        monitor: sample CPU/GPU use while training (a `DeviceSampler` at `sample_interval` seconds).
        sample_interval: seconds between device samples (default 0.5, i.e. 2 Hz).

    Controls act at the next step boundary: Pause holds training, Stop finishes the current step and
    saves a checkpoint (when the trainer has a run name), Apply sets the learning rate and clipping.

    Example:
        >>> from workbench.presets import build_experiment
        >>> from workbench.train import Trainer
        >>> e = build_experiment("regression-linear", n_samples=2000, epochs=1)
        >>> dashboard = Dashboard(Trainer(e.model, e.loss_fn, e.splits, e.config), monitor=False)
        >>> dashboard.fit().status
        'finished'
        >>> dashboard.progress.value == dashboard.progress.max
        True
    """

    shows_progress = True  # its bar and status line: the trainer shows no bar of its own

    def __init__(
        self,
        trainer: Job,
        *,
        loss_plot: LossPlot | None = None,
        monitor: bool = True,
        sample_interval: float = 0.5,
    ) -> None:
        if not isinstance(trainer, Job):
            raise TypeError(
                "Dashboard drives a training job (a Trainer or a Launch: anything with config, control, "
                "step, total_steps, add_callback, fit, terminate and describe), got "
                f"{type(trainer).__name__}; "
                "build one with Trainer(model, loss_fn, splits, config) or Launch(fn, nprocs)"
            )
        self.trainer = trainer
        self.control = trainer.control
        self.loss_plot = loss_plot if loss_plot is not None else LossPlot()
        self.metric_plot = MetricPlot()
        self.sampler = DeviceSampler(interval=sample_interval) if monitor else None
        self.device_monitor = DeviceMonitor(loss=True) if monitor else None
        if self.sampler is not None and trainer.worker_pids() is not None:  # workers: sample each too
            self.sampler.watch(lambda: trainer.worker_pids() or {})
        # the training thread, wait/wait_async and interrupts: the runner's; this class draws and forwards
        self.runner = JobRunner(trainer, before=self._begin, after=self._end)
        self._latest: Event | None = None
        self._last_eval: dict[str, Event] = {}
        self._early_stop: Event | None = None  # the fit's end said how early stopping ended it
        self._rank_rates: dict[int, float] = {}  # rank → samples/s at its last logged step
        self._profile: Event | None = None  # the last profile rank 0 reported (its step event's "profile")
        self._state = "ready"
        self._throttle = Throttle(lambda: self._push(self._live_state()), max_per_s=_PUSHES_PER_S)
        self._started_at = 0.0
        self._paused_at: float | None = None  # when Pause was pressed; None while not paused
        self._paused_s = 0.0  # time spent paused this run: not counted in steps/s and the ETA
        self._start_step = 0
        self._total_steps = trainer.total_steps
        self.memory_plot = MemoryPlot()
        self.step_time_plot = StepTimePlot()
        self.timeline = PipelineTimeline()
        self._awaiting_cell: dict[str, Any] | None = None  # the cell in wait_async, while it awaits
        self._views_lock = threading.Lock()  # the VBox's children: the timer and training threads add views
        self._build_widgets()
        # the training thread only queues events; a timer thread hands them to the views (widgets/deferred.py)
        views = [self.loss_plot, self.metric_plot, self.memory_plot, self.step_time_plot, self.timeline]
        views += [self.device_monitor, self]
        self.views = DeferredCallbacks([v for v in views if v is not None], on_error=self._show_view_error)
        trainer.add_callback(self.views)

    # ------------------------------------------------------------------ widgets

    def _build_widgets(self) -> None:
        config = self.trainer.config
        self.progress = widgets.IntProgress(
            value=self.trainer.step,
            min=0,
            max=self._total_steps or 1,
            description="steps",
            layout=widgets.Layout(width="60%"),
        )
        self.status = widgets.HTML(value=self._status_text("ready"))
        self.status.add_class("workbench-status")
        self.start_button = widgets.Button(description="Start", icon="play", button_style="success")
        self.pause_button = widgets.ToggleButton(description="Pause", icon="pause", disabled=True)
        self.stop_button = widgets.Button(
            description="Stop", icon="stop", button_style="danger", disabled=True
        )
        self.lr_input = widgets.FloatText(
            value=config.optimizer.lr, description="lr", step=None, layout=widgets.Layout(width="180px")
        )
        self.lr_input.add_class("workbench-lr")
        self.clip_input = widgets.FloatText(
            value=config.clip_norm, description="clip norm", layout=widgets.Layout(width="180px")
        )
        self.apply_button = widgets.Button(
            description="Apply", tooltip="use lr and clip norm from the next step"
        )
        self.profile_button = widgets.Button(
            description="Profile",
            icon="clock",
            disabled=True,
            tooltip=f"record a torch.profiler trace of the next {PROFILE_STEPS} steps on every rank",
        )
        self.profile_info = widgets.HTML(value="")
        self.profile_info.add_class("workbench-profile")
        self.error = widgets.HTML(value="")
        self.placement = widgets.HTML(value=self.trainer.describe())
        self.start_button.on_click(lambda _: self.start())
        self.pause_button.observe(self._on_pause_toggle, names="value")
        for synced in (self.pause_button, self.lr_input, self.clip_input):  # see widgets/_kernel.py
            synced.observe(lambda _: acknowledge_widget_message(self._awaiting_cell), names="value")
        self.stop_button.on_click(lambda _: self.stop())
        self.apply_button.on_click(lambda _: self.apply_settings())
        self.profile_button.on_click(lambda _: self.request_profile())
        buttons = [self.start_button, self.pause_button, self.stop_button, self.lr_input, self.clip_input]
        rows = [
            widgets.HBox([self.progress, self.status]),
            self.placement,
            widgets.HBox([*buttons, self.apply_button, self.profile_button]),
            self.profile_info,
            self.error,
            self.loss_plot.widget,
            self.metric_plot.widget,
        ]
        if self.device_monitor is not None:
            rows.append(self.device_monitor.widget)
        self.widget = widgets.VBox(rows)
        self.widget.add_class("workbench-dashboard")

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        views = (self.loss_plot, self.metric_plot, self.device_monitor, self.memory_plot, self.step_time_plot)
        for view in (*views, self.timeline):
            if view is not None:
                view.sync_for_display()
        return widget_bundle(self.widget, repr(self), **kwargs)

    def __repr__(self) -> str:
        step = self._latest["step"] if self._latest is not None else self.trainer.step
        return f"Dashboard({self._state}, step {step}/{self._total_steps}, {self.trainer.describe()})"

    # ------------------------------------------------------------------ actions

    @property
    def running(self) -> bool:
        """True while the training thread runs."""
        return self.runner.running

    def start(self, resume: bool = False) -> None:
        """Train in a background thread (the Start button); `resume` as in `Trainer.fit`."""
        self.runner.start(resume)

    def _begin(self) -> None:
        self._latest, self._rank_rates, self._last_eval, self._profile = None, {}, {}, None
        self._early_stop = None
        self.profile_info.value = ""
        self.error.value = ""
        self._set_running_buttons(True)
        if self.sampler is not None and self.device_monitor is not None:
            self._unsubscribe = self.sampler.subscribe(self.device_monitor.update)
            self.sampler.start()

    def _end(self) -> None:
        self._stop_sampler()
        self._set_running_buttons(False)

    def stop(self) -> None:
        """Finish the current step, save a checkpoint, end training (the Stop button)."""
        self.control.stop()

    def apply_settings(self) -> None:
        """Send the lr and clip-norm fields to the loop (the Apply button); bad values show as an error."""
        try:
            self.control.set_lr(self.lr_input.value)
            self.control.set_clipping(norm=self.clip_input.value)
        except ValueError as error:
            self._show_error(f"not applied: {error}")
            return
        self.error.value = ""

    def request_profile(self, steps: int = PROFILE_STEPS) -> None:
        """Trace the next `steps` steps with torch.profiler on every rank (the Profile button); the trace
        goes to the run directory (``profile/rank<R>.json``) and the top operators show below the buttons."""
        self.control.profile(steps)
        self.profile_info.value = f"<small>profiling the next {steps} steps…</small>"

    def wait(self, timeout: float | None = None) -> Any:
        """Block until training ends; return its `FitResult` (a Launch: rank 0's value) or raise its error.

        In a notebook use ``await dashboard.wait_async()`` instead: while `wait` blocks, the kernel cannot
        handle the buttons. Interrupting stops training at the next step boundary; a `Launch` whose workers
        do not get there within 5 s is terminated.
        """
        return self.runner.wait(timeout)

    async def wait_async(self, timeout: float | None = None) -> Any:
        """`wait` for a notebook cell (``result = await dashboard.wait_async()``): the buttons keep working.

        While the cell awaits, the kernel handles widget messages, so Pause, Stop and Apply act at once,
        also under Run All, where the cells below wait their turn. Interrupting the kernel stops training
        as in `wait`.
        """
        self._set_awaiting_cell(running_cell_parent())
        try:
            return await self.runner.wait_async(timeout)
        finally:
            self._set_awaiting_cell(None)

    def _set_awaiting_cell(self, parent: dict[str, Any] | None) -> None:
        """Who the widgets' acknowledgements say "busy" for again (see widgets/_kernel.py)."""
        self._awaiting_cell = self.loss_plot.awaiting_cell = self.metric_plot.awaiting_cell = parent

    def fit(self, resume: bool = False) -> Any:
        """Train on the calling thread with the dashboard attached; blocks, returns or raises.

        The progress bar and plots update as usual, but in a notebook the buttons only act while training
        runs in the background (`start`), which runs as fast on CPU: it first frees the calling thread's idle
        OpenMP team, which made torch 2-4x slower on a second thread (`workbench.devices.openmp`).
        """
        return self.runner.run_here(resume)

    def close(self) -> None:
        """Stop training and sampling and close the widgets."""
        self.control.stop()
        self.runner.join()
        self._stop_sampler()
        self.widget.close()

    def _stop_sampler(self) -> None:
        if self.sampler is not None and self.sampler.running:
            self.sampler.stop()
            self._unsubscribe()
            if self.device_monitor is not None:
                self.device_monitor.flush()  # the last samples, though the monitor's timer may not have

    def _on_pause_toggle(self, change: dict[str, Any]) -> None:
        if change["new"]:
            self.control.pause()
            self._paused_at = time.perf_counter()
            self.pause_button.description, self.pause_button.icon = "Resume", "play"
        else:
            self.control.resume()
            if self._paused_at is not None:
                self._paused_s += time.perf_counter() - self._paused_at
                self._paused_at = None
            self.pause_button.description, self.pause_button.icon = "Pause", "pause"
        if self._state in ("running", "paused"):
            self._push(self._live_state())  # a paused loop sends no events: say so now

    def _live_state(self) -> str:
        return "paused" if self.control.paused else "running"

    def _set_running_buttons(self, running: bool) -> None:
        self.start_button.disabled = running
        self.stop_button.disabled = not running
        self.pause_button.disabled = not running
        self.profile_button.disabled = not running
        if not running and self.pause_button.value:
            self.pause_button.value = False

    def _show_error(self, message: str) -> None:
        self.error.value = (
            '<div style="color:#a40000;background:#fdecea;padding:6px;border-left:4px solid #a40000;'
            f'white-space:pre-wrap"><b>Error</b>: {html.escape(message)}</div>'
        )

    def _show_view_error(self, view: Callback, error: Exception) -> None:
        self._show_error(f"{type(view).__name__} could not draw: {type(error).__name__}: {error}")

    # ------------------------------------------------------------------ events (the views' timer thread)

    def on_fit_start(self, info: Event) -> None:
        self._total_steps = info["total_steps"]
        if "launch" in info or "strategy" in info:
            where = info.get("launch") or info["strategy"]
            what = f" · {trained_text(info)}" if "model" in info and "samples" in info else ""
            self.placement.value = f"<small>{html.escape(where + what)}</small>"
        self._start_step = info["start_step"]
        self._started_at = time.perf_counter()
        self._paused_s = 0.0
        if self._paused_at is not None:  # paused before the first step
            self._paused_at = self._started_at
        self.progress.max = self._total_steps or max(self._start_step, 1)  # None: length unknown
        self.progress.value = self._start_step
        self.status.value = self._status_text("running")

    def on_step(self, metrics: Event) -> None:
        rank = metrics.get("rank", 0)
        if metrics.get("samples_per_s") is not None:
            self._rank_rates[rank] = metrics["samples_per_s"]
        if rank == 0:
            self._latest = metrics
            if "profile" in metrics:
                self._profile = metrics["profile"]
        self._throttle.poke()

    def on_eval(self, metrics: Event) -> None:
        self._last_eval[metrics["split"]] = metrics

    def on_fit_end(self, summary: Event) -> None:
        self._throttle.stop()
        self._early_stop = summary.get("early_stopping")
        if self._early_stop and "val" in summary:  # the best epoch's: the model now has its weights
            self._last_eval["val"] = summary["val"]
        self._push(summary["status"])
        if self._early_stop and self._early_stop.get("stopped"):
            self.progress.max = max(self.progress.value, 1)  # done: the patience ran out before the epochs
        if summary["error"]:
            self._show_error(f"training failed at step {summary['step']}: {summary['error']}")

    def _push(self, state: str) -> None:
        if self._latest is not None:
            if self._total_steps is None:  # an epoch of unknown length: the bar follows the steps done
                self.progress.max = max(self._latest["step"], 1)
            self.progress.value = self._latest["step"]
        self.status.value = self._status_text(state)
        if self._profile is not None:
            self.profile_info.value = _profile_text(self._profile)
        self._show_new_views()

    def _show_new_views(self) -> None:
        """Append the memory plot, step-time plot and pipeline timeline once they hold data (drawn first:
        never empty)."""
        with self._views_lock:
            for view, has_data in (
                (self.memory_plot, self.memory_plot.memory),  # a rank reported its memory
                (self.step_time_plot, self.step_time_plot.parts),  # a rank reported where its time went
                (self.timeline, self.timeline.latest),  # every stage of a step reported its spans
            ):
                if view.widget not in self.widget.children and has_data():
                    view.flush()
                    view.sync_for_display()  # shown in a container: its browser view starts from this state
                    self.widget.children = (*self.widget.children, view.widget)

    def _status_text(self, state: str) -> str:
        self._state = state
        parts = [f"<b>{state}</b>"]
        latest = self._latest
        if latest is not None:
            total = "?" if self._total_steps is None else self._total_steps
            parts.append(f"step {latest['step']}/{total}, epoch {latest['epoch']}")  # 0-based, as logged
            parts.append(f"loss {latest['loss']:.4g}, lr {latest['lr']:.3g}")
            elapsed = self._training_seconds()
            done = latest["step"] - self._start_step
            if done > 0 and state == "running" and self._total_steps is not None:
                eta = elapsed / done * (self._total_steps - latest["step"])
                parts.append(f"{done / elapsed:.0f} steps/s, ETA {_clock(eta)}")
            elif done > 0 and state == "running":
                parts.append(f"{done / elapsed:.0f} steps/s, epoch length unknown")
            elif state != "running":
                parts.append(f"{_clock(elapsed)} elapsed")
        if len(self._rank_rates) > 1:
            rates = sorted(self._rank_rates.items())
            each = ", ".join(f"rank {rank} {rate:.0f}" for rank, rate in rates)
            parts.append(f"samples/s {each} (total {sum(r for _, r in rates):.0f})")
        early = self._early_stop
        if early and state != "running":
            how = "stopped early" if early.get("stopped") else "early stopping"
            step = f" (step {early['best_step']})" if early.get("best_step") is not None else ""
            best = f"best val {early['metric']} {early['best']:.4g} at epoch {early['best_epoch']}{step}"
            parts.append(f"{how}: {best}{', the model has its weights' if early.get('restored') else ''}")
        for split, metrics in self._last_eval.items():
            shown = ", ".join(f"{k} {v:.4f}" for k, v in evaluation_metrics(metrics).items())
            parts.append(f"{split}: {shown}")
        return " · ".join(parts)

    def _training_seconds(self) -> float:
        """Seconds since the fit started, less the time spent paused."""
        now = time.perf_counter()
        paused = self._paused_s + (now - self._paused_at if self._paused_at is not None else 0.0)
        return now - self._started_at - paused


def _profile_text(profile: Event) -> str:
    """The Profile button's answer: which steps, where the trace is, the top operators."""
    first, last = profile["steps"]
    where = profile["trace"]
    trace = (
        f"trace <code>{html.escape(where)}</code> (ui.perfetto.dev)" if where else "no run directory: no file"
    )
    top = ", ".join(html.escape(name) for name in profile["top_ops"])
    return f"<small>profiled steps {first}–{last} (rank 0): {trace}; top operators: {top}</small>"


def _clock(seconds: float) -> str:
    seconds = max(round(seconds), 0)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
