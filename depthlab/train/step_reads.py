"""When the training loop reads a step's loss and gradient norm into Python.

A read (`.item()`) on CUDA waits until the GPU has finished everything queued, so reading
every step stalls the host between steps. On CPU ops run synchronously and a read is
free. So the loop reads every step on CPU (the progress bar and `on_step` see every
loss, and a non-finite loss or gradient norm stops the run before that step's update),
and elsewhere only on steps that need the values: logging, checkpoint, evaluation and
probe steps, the last step, and a stop.

Between reads, the first step whose loss or gradient norm is not finite is remembered
on the device, without a sync, and the next read reports it. The bound: divergence is
found at most `log_every - 1` steps after it happens (the updates of those steps are
applied to weights that are then discarded), always before a checkpoint is written, and
reported at the step it happened.
"""

from __future__ import annotations

import math

import torch


def read_every_step(device: torch.device) -> bool:
    return device.type == "cpu"


class StepReads:
    def __init__(self, device: torch.device) -> None:
        self.every_step = read_every_step(device)
        self._first_bad = torch.zeros((), dtype=torch.long, device=device)  # 0: none yet
        self.loss: float | None = None  # the values at the latest read
        self.grad_norm: float | None = None
        self.step = 0  # the step of the latest read

    def record(self, step: int, loss: torch.Tensor, grad_norm: torch.Tensor) -> None:
        """Remember `step` if it is the first with a non-finite loss or gradient norm."""
        if self.every_step:
            return  # read() sees every step's values
        bad = ~(torch.isfinite(loss) & torch.isfinite(grad_norm))
        self._first_bad = torch.where(bad & (self._first_bad == 0), step, self._first_bad)

    def read(self, step: int, loss: torch.Tensor,
             grad_norm: torch.Tensor) -> tuple[str, int] | None:
        """Read this step's values; (what diverged, at which step) or None when all the
        steps since the previous read had finite values."""
        self.loss, self.grad_norm, self.step = loss.item(), grad_norm.item(), step
        first_bad = step if self.every_step else int(self._first_bad)
        if first_bad == step:
            if not math.isfinite(self.loss):
                return f"loss is {self.loss}", step
            if not math.isfinite(self.grad_norm):
                return f"gradient norm is {self.grad_norm}", step
        elif first_bad:
            return f"loss or gradient norm (read at step {step}) went non-finite", first_bad
        return None
