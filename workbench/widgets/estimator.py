"""`Estimator`: sliders for batch, precision, optimizer, averaged weights, activation checkpointing, strategy,
devices and hardware; the answer to "does it fit, how long per step and per epoch, which strategy",
recomputed as they move; a button moves the batch to the largest that fits.

    estimator = Estimator(model, sample=torch.zeros(1, 64), samples_per_epoch=50_000)
    estimator          # last expression of a cell
"""

from __future__ import annotations

import contextlib
import html
from typing import Any

import ipywidgets as widgets
import torch
from torch import nn

from workbench._validate import check_int
from workbench.devices.datasheets import DATASHEETS
from workbench.estimate import (
    BatchFit,
    MemoryEstimate,
    estimate_memory,
    forward_flops,
    largest_batch_size,
    profile_model,
    training_flops,
)
from workbench.estimate.hardware import Hardware, hardware_from_datasheet
from workbench.estimate.memory import OPTIMIZERS, PRECISIONS
from workbench.estimate.plan import TrainingEstimate, estimate_training
from workbench.parallel.strategies.registry import STRATEGIES
from workbench.tables import html_table
from workbench.train.activation_checkpointing import ActivationCheckpointing
from workbench.widgets._display import sync_figure_for_display, widget_bundle
from workbench.widgets._figure_widget import FigureWidget

_COMPONENTS = (
    "params",
    "grads",
    "optimizer_state",
    "activations",
    "temporaries",
    "comm_buffers",
    "weight_average",
)
_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#8c564b", "#9467bd", "#17becf")
_EMA_DECAY = 0.999  # any decay: the averaged weights cost the same


class Estimator:
    """Estimate memory, communication and time for a model under each strategy, with sliders.

    Args:
        model: the model (profiled once with one forward of `sample`).
        sample: one input sample with its batch dimension (e.g. ``torch.zeros(1, 64)``).
        samples_per_epoch: training samples per epoch (for the epoch time).
        hardware: choices by name (default: every GPU datasheet); add measured ones with
            `workbench.estimate.hardware.hardware_from_benchmark`.
        batch_size, precision, optimizer, strategy, devices, hardware_name: starting values.
        averaged_weights: start with the "averaged weights" box ticked: the moving average of the weights
            that ``TrainConfig(ema_decay=...)`` keeps, one more fp32 copy of the parameters.
        recomputed_blocks: start with the "activation checkpointing" box ticked: the model's repeated blocks
            recomputed in backward (``TrainConfig(activation_checkpointing="blocks")``): their activations
            leave the memory (traced strategies only), their forward adds to the step's FLOPs. A model
            without repeated blocks has the box disabled.
        method: how memory is estimated (`workbench.estimate.estimate_memory`): ``"auto"`` traces a step of
            `model` (single, DDP, FSDP; checked against real small steps), ``"analytic"`` the rules only.
            The answer says which, with its uncertainty.

    Example:
        >>> from workbench import models
        >>> estimator = Estimator(models.mlp(64, 10), torch.zeros(1, 64), samples_per_epoch=1_437)
        >>> result = estimator.estimate()
        >>> result.strategy, result.fits
        ('single', True)
        >>> estimator.strategy.value = "ddp"; estimator.devices.value = 4
        >>> estimator.estimate().comm.sent_bytes > 0
        True
    """

    def __init__(
        self,
        model: nn.Module,
        sample: torch.Tensor,
        *,
        samples_per_epoch: int,
        hardware: dict[str, Hardware] | None = None,
        batch_size: int = 64,
        precision: str = "fp32",
        optimizer: str = "adam",
        strategy: str = "single",
        devices: int = 1,
        hardware_name: str | None = None,
        method: str = "auto",
        averaged_weights: bool = False,
        recomputed_blocks: bool = False,
    ) -> None:
        self.model, self.sample, self.method = model, sample, method
        self._memory: dict[tuple, MemoryEstimate] = {}  # the estimates so far, by slider values
        self.profile = profile_model(model, sample)
        self.flops_per_sample = training_flops(model, sample) / len(sample)
        try:  # with the repeated blocks recomputed in backward: their forward once more
            blocks = ActivationCheckpointing(model, "blocks").modules(model)
        except ValueError:  # none
            recomputing = None
        else:
            recomputing = self.flops_per_sample + forward_flops(model, sample, within=blocks) / len(sample)
        self._recomputing_flops_per_sample = recomputing
        self.samples_per_epoch = check_int("samples_per_epoch", samples_per_epoch, minimum=1)
        self.hardware = (
            hardware
            if hardware is not None
            else {name: hardware_from_datasheet(sheet) for name, sheet in DATASHEETS.items()}
        )
        if not self.hardware:
            raise ValueError("hardware must name at least one device")
        names = list(self.hardware)
        if hardware_name is not None and hardware_name not in self.hardware:
            raise ValueError(f"hardware_name={hardware_name!r} is not known; allowed values: {names}")
        style = {"description_width": "110px"}
        self.batch_size = widgets.IntSlider(
            batch_size, min=1, max=4096, description="batch / device", style=style
        )
        self.precision = widgets.Dropdown(
            options=list(PRECISIONS), value=precision, description="precision", style=style
        )
        self.optimizer = widgets.Dropdown(
            options=list(OPTIMIZERS), value=optimizer, description="optimizer", style=style
        )
        self.strategy = widgets.Dropdown(
            options=list(STRATEGIES), value=strategy, description="strategy", style=style
        )
        self.averaged_weights = widgets.Checkbox(
            bool(averaged_weights), description="averaged weights (ema_decay)", style=style
        )
        self.recomputed_blocks = widgets.Checkbox(
            bool(recomputed_blocks) and recomputing is not None,
            description="activation checkpointing (blocks)"
            if recomputing
            else "no repeated blocks to recompute",
            disabled=recomputing is None,
            style=style,
        )
        self.devices = widgets.IntSlider(devices, min=1, max=64, description="devices", style=style)
        self.device = widgets.Dropdown(
            options=names, value=hardware_name or names[0], description="hardware", style=style
        )
        self.answer = widgets.HTML()
        self.largest_button = widgets.Button(description="largest batch that fits", layout={"width": "200px"})
        self.largest_answer = widgets.HTML()
        self.largest_button.on_click(lambda _: self._find_largest_batch_clicked())
        self.figure = FigureWidget(
            layout={
                "height": 330,
                "barmode": "stack",
                "title": {"text": "memory per device by strategy"},
                "yaxis": {"title": {"text": "GiB"}},
                "margin": {"l": 60, "r": 20, "t": 40, "b": 40},
                "template": "plotly_white",
            }
        )
        controls = [self.batch_size, self.precision, self.optimizer, self.averaged_weights]
        controls += [self.recomputed_blocks, self.strategy, self.devices, self.device]
        for control in controls:
            control.observe(lambda _: self.update(), names="value")
        largest = widgets.HBox([self.largest_button, self.largest_answer])
        columns = widgets.HBox([widgets.VBox(controls[:5]), widgets.VBox([*controls[5:], largest])])
        self.widget = widgets.VBox([columns, self.answer, self.figure])
        self.update()

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        sync_figure_for_display(self.figure)
        return widget_bundle(self.widget, repr(self), **kwargs)

    def __repr__(self) -> str:
        try:
            result = self.estimate()
        except ValueError as error:  # the controls' combination cannot be: the answer says why
            return f"Estimator({self.strategy.value} on {self.devices.value}: not possible: {error})"
        verdict = "fits" if result.fits else "does not fit"
        return f"Estimator({result.strategy} on {result.devices} × {result.hardware.name}: {verdict})"

    def estimate(self, strategy: str | None = None, devices: int | None = None) -> TrainingEstimate:
        """The estimate at the current slider values (optionally another strategy or device count)."""
        strategy, devices = strategy or self.strategy.value, devices or self.devices.value
        recomputing = self.recomputed_blocks.value
        return estimate_training(
            self.profile,
            self._recomputing_flops_per_sample if recomputing else self.flops_per_sample,
            self.samples_per_epoch,
            self.hardware[self.device.value],
            batch_size=self.batch_size.value,
            precision=self.precision.value,
            optimizer=self.optimizer.value,
            strategy=strategy,
            devices=devices,
            memory=self.memory(strategy, devices),
        )

    def memory(self, strategy: str, devices: int) -> MemoryEstimate:
        """Memory per device at the current sliders (traced where `method` allows; each answer kept)."""
        averaged, recomputing = self.averaged_weights.value, self.recomputed_blocks.value
        key = (self.batch_size.value, self.precision.value, self.optimizer.value, averaged, recomputing)
        key += (strategy, devices)
        if key not in self._memory:
            options = self._memory_options(strategy, devices)
            self._memory[key] = estimate_memory(self.model, batch_size=self.batch_size.value, **options)
        return self._memory[key]

    def find_largest_batch(self) -> BatchFit:
        """Move the batch slider to the largest batch per device that fits the hardware at the other
        settings (`workbench.estimate.largest_batch_size`; what the "largest batch that fits" button does)
        and say so under the controls."""
        self.largest_button.disabled, self.largest_answer.value = True, "<i>estimating…</i>"
        try:
            memory_bytes = self.hardware[self.device.value].memory_bytes
            options = self._memory_options(self.strategy.value, self.devices.value)
            fit = largest_batch_size(self.model, memory_bytes=memory_bytes, **options)
        except ValueError as error:
            self.largest_answer.value = f'<span style="color:#a40000">{html.escape(str(error))}</span>'
            raise
        finally:
            self.largest_button.disabled = False
        self.largest_answer.value = html.escape(fit.describe())
        if fit.batch_size:
            self.batch_size.max = max(self.batch_size.max, fit.batch_size)
            self.batch_size.value = fit.batch_size
        return fit

    def _memory_options(self, strategy: str, devices: int) -> dict[str, Any]:
        """`estimate_memory`'s arguments at the current controls, but the batch."""
        return {
            "sample": self.sample,
            "precision": self.precision.value,
            "optimizer": self.optimizer.value,
            "momentum": 0.9 if self.optimizer.value == "sgd" else 0.0,
            "strategy": strategy,
            "devices": devices,
            "method": self.method,
            "ema_decay": _EMA_DECAY if self.averaged_weights.value else None,
            "activation_checkpointing": "blocks" if self.recomputed_blocks.value else None,
        }

    def update(self) -> None:
        """Recompute the answer and the chart from the sliders (called when one moves)."""
        try:
            result = self.estimate()
        except ValueError as error:
            self.answer.value = f'<p style="color:#a40000"><b>Not possible</b>: {html.escape(str(error))}</p>'
        else:
            self.answer.value = _answer_html(result)
        self._draw_strategies()

    def _find_largest_batch_clicked(self) -> None:
        with contextlib.suppress(ValueError):  # said beside the button
            self.find_largest_batch()

    def _draw_strategies(self) -> None:
        per_strategy = {}
        for strategy in STRATEGIES:
            devices = 1 if strategy == "single" else max(self.devices.value, 2)
            try:
                per_strategy[f"{strategy} ×{devices}"] = self.estimate(strategy, devices).memory
            except ValueError:
                continue
        names = list(per_strategy)
        limit = self.hardware[self.device.value].memory_bytes / 2**30
        with self.figure.batch_update():
            self.figure.data = ()
            for component, color in zip(_COMPONENTS, _COLORS, strict=True):
                if component == "weight_average" and not self.averaged_weights.value:
                    continue
                values = [getattr(m, component) / 2**30 for m in per_strategy.values()]
                self.figure.add_bar(x=names, y=values, name=component.replace("_", " "), marker_color=color)
            line = {"dash": "dash", "color": "#a40000"}
            self.figure.layout.shapes = [
                {
                    "type": "line",
                    "xref": "paper",
                    "x0": 0,
                    "x1": 1,
                    "yref": "y",
                    "y0": limit,
                    "y1": limit,
                    "line": line,
                }
            ]
            self.figure.layout.annotations = [
                {
                    "xref": "paper",
                    "x": 1,
                    "yref": "y",
                    "y": limit,
                    "text": f"{self.device.value}: {limit:.0f} GiB",
                    "showarrow": False,
                    "xanchor": "right",
                    "yanchor": "bottom",
                    "font": {"color": "#a40000"},
                }
            ]


def _answer_html(result: TrainingEstimate) -> str:
    gib = 2**30
    memory = result.memory
    verdict = "fits" if result.fits else "does NOT fit"
    rows = [
        *((name.replace("_", " "), f"{value / gib:.3f} GiB") for name, value in _memory_parts(memory)),
        (
            "total per device",
            f"{memory.total / gib:.3f} GiB of {result.hardware.memory_bytes / gib:.0f}: {verdict}",
        ),
        ("memory estimate", _memory_basis(memory, result.hardware)),
        ("sent per step per device", f"{result.comm.sent_bytes / 2**20:.2f} MiB ({result.comm.detail})"),
        (
            "step time",
            f"{1e3 * result.time.step_s:.3f} ms ({result.time.bound}-bound; compute "
            f"{1e3 * result.time.compute_s:.3f} ms, memory {1e3 * result.time.memory_s:.3f} ms, "
            f"communication {1e3 * result.time.comm_s:.3f} ms)",
        ),
        ("epoch", f"{result.steps_per_epoch} steps, {result.epoch_s:.2f} s"),
    ]
    caption = f"{result.strategy} on {result.devices} × {result.hardware.name}"
    return html_table(("estimate", "value"), rows, caption=caption)


def _memory_basis(memory: MemoryEstimate, hardware: Hardware) -> str:
    """How sure the memory figure is; for a GPU, whether the real steps that checked it ran on one (a
    CPU's cannot see what cuDNN and cuBLAS allocate: an H100 held 2.7× a GRU's CPU-made estimate)."""
    if not (hardware.gpu and memory.checked_on == "cpu"):
        return memory.describe()
    return (
        f"{memory.describe()}, on this CPU; a GPU's cuDNN and cuBLAS workspaces are not in it (estimate with "
        "the model on a GPU to count them)"
    )


def _memory_parts(memory: MemoryEstimate) -> list[tuple[str, int]]:
    return [
        (name, getattr(memory, name))
        for name in _COMPONENTS
        if name != "weight_average" or memory.weight_average
    ]
