"""Parameters packed into one contiguous buffer, so that an optimizer step over all of them is one launch.

    flat = FlatParams(params)          # each parameter's data is now a view of flat.param
    flat.grad                          # and each parameter's .grad a view of this buffer
    exp_avg = flat.new_zeros()         # optimizer state laid out the same way; flat.views(exp_avg) per tensor

Autograd adds into an existing ``.grad`` in place, so after backward every gradient already sits in
``flat.grad``: the optimizer reads one buffer whatever the number of tensors. What breaks that is handled,
not assumed: a ``.grad`` that code replaced by its own tensor is copied into the buffer (and re-pointed), a
``.grad`` set to None marks a parameter without a gradient this step (`gradients`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


class FlatParams:
    """One param group's trainable tensors, packed into ``param`` and ``grad`` (float32, one device).

    Args:
        params: the group's parameters; those with ``requires_grad=False`` are left alone (never updated).
        owner: who packs them, for error messages (e.g. ``"FusedAdam"``).

    Raises:
        TypeError: a parameter is not float32.
        ValueError: the parameters are on more than one device, or none needs a gradient.

    Example:
        >>> layer = torch.nn.Linear(3, 2)
        >>> flat = FlatParams(list(layer.parameters()), "example")
        >>> flat.param.shape, layer.weight.data_ptr() == flat.param.data_ptr()
        (torch.Size([8]), True)
        >>> layer(torch.ones(1, 3)).sum().backward(); flat.grad[-2:].tolist()   # the bias's gradient
        [1.0, 1.0]
    """

    def __init__(self, params: Sequence[torch.nn.Parameter], owner: str) -> None:
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError(f"{owner}: no parameter of this group requires a gradient; nothing to optimize")
        for index, p in enumerate(self.params):
            if p.dtype != torch.float32:
                raise TypeError(
                    f"{owner} updates float32 parameters; parameter {index} is {p.dtype} (use .float())"
                )
        devices = sorted({str(p.device) for p in self.params})
        if len(devices) > 1:
            raise ValueError(f"{owner}: a param group must live on one device, got {', '.join(devices)}")
        sizes = [p.numel() for p in self.params]
        self.offsets = [sum(sizes[:i]) for i in range(len(sizes))]
        device = self.params[0].device
        self.param = torch.empty(sum(sizes), dtype=torch.float32, device=device)
        self.grad = torch.zeros(sum(sizes), dtype=torch.float32, device=device)
        with torch.no_grad():
            for p, view in zip(self.params, self.views(self.param), strict=True):
                view.copy_(p)
                p.data = view
            for p, view in zip(self.params, self.views(self.grad), strict=True):
                if p.grad is not None:
                    view.copy_(p.grad)
        self._grad_views = self.views(self.grad)
        self._point_grads()

    def views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """`flat` (laid out as ``param``) cut into one view per parameter, each shaped like it."""
        return [
            flat[offset : offset + p.numel()].view_as(p)
            for offset, p in zip(self.offsets, self.params, strict=True)
        ]

    def new_zeros(self) -> torch.Tensor:
        """A zeroed buffer laid out as ``param`` (optimizer state: one buffer per kind, views per tensor)."""
        return torch.zeros_like(self.param)

    def gradients(self) -> list[bool]:
        """Which parameters have a gradient, with every gradient in ``grad`` on return.

        The usual case (each ``.grad`` still our view, as autograd leaves it) costs one identity check per
        tensor; a ``.grad`` replaced by another tensor is copied in and re-pointed; a None ``.grad`` is False.
        """
        found = []
        for p, view in zip(self.params, self._grad_views, strict=True):
            if p.grad is not view and p.grad is not None:
                with torch.no_grad():
                    view.copy_(p.grad)
                p.grad = view
            elif p.grad is None:
                view.zero_()  # its slot counts nothing in a norm over the whole buffer
            found.append(p.grad is not None)
        return found

    def zero_grad(self) -> None:
        """Zero every gradient in one pass over ``grad``; each ``.grad`` stays (or becomes again) a view."""
        self.grad.zero_()
        self._point_grads()

    def _point_grads(self) -> None:
        for p, view in zip(self.params, self._grad_views, strict=True):
            if p.grad is not view:
                p.grad = view
