"""Named hook points, TransformerLens style, so probes never edit model code.

Every activation worth looking at passes through an identity `HookPoint` with a
stable dotted name (`blocks.3.hook_resid_post`, `blocks.0.attn.hook_pattern`).
`hooks()` attaches functions for the length of a `with` block and always
removes them; `run_with_cache()` records activations, and gradients at the
same sites when asked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn.modules import module as _module

from depthlab.errors import UserError

# fn(tensor, name) -> replacement tensor or None (keep the original).
HookFn = Callable[[torch.Tensor, str], torch.Tensor | None]
Names = Iterable[str] | Callable[[str], bool] | None


def _global_hooks_set() -> bool:
    """True while a hook registered for every module (nn.modules.module.register_module_*)
    exists; HookPoint's fast path must then go through nn.Module's call."""
    return bool(_module._global_forward_hooks or _module._global_forward_pre_hooks)


class HookPoint(nn.Module):
    """An identity layer that marks a place where hooks can read or replace a tensor.

    A model has ~15 hook points per block and nn.Module's call costs a few
    microseconds each, which is a sizeable part of a one-token decode step. So a
    HookPoint with no hook attached returns its input without that call; with any
    hook attached (its own or a global one) it is an ordinary module call.
    """

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self._forward_hooks or self._forward_pre_hooks or _global_hooks_set():
            return super().__call__(x)
        return x

    @property
    def hooked(self) -> bool:
        """True while any hook would see this point: its own or a global module hook
        (the test __call__ makes, inlined there: a decode step calls it ~15 times a block)."""
        return bool(self._forward_hooks or self._forward_pre_hooks or _global_hooks_set())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    @property
    def active(self) -> bool:
        """True while a hook is attached; attention uses it to compute explicit weights."""
        return bool(self._forward_hooks)


@dataclass
class ActivationCache:
    """Activations (detached) and, when requested, gradients, keyed by hook name."""

    acts: dict[str, torch.Tensor] = field(default_factory=dict)
    grads: dict[str, torch.Tensor] = field(default_factory=dict)

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.acts[name]

    def __contains__(self, name: object) -> bool:
        return name in self.acts

    def keys(self) -> list[str]:
        return list(self.acts)


class HookedModule(nn.Module):
    """Mixin for a model whose submodules include `HookPoint`s."""

    def hook_points(self) -> dict[str, HookPoint]:
        return {n: m for n, m in self.named_modules() if isinstance(m, HookPoint)}

    def hook_names(self) -> list[str]:
        return list(self.hook_points())

    def _select(self, names: Names, points: dict[str, HookPoint] | None = None) -> list[str]:
        points = self.hook_points() if points is None else points
        if names is None:
            return list(points)
        if callable(names):
            return [n for n in points if names(n)]
        chosen = list(names)
        for n in chosen:
            if n not in points:
                raise UserError(self._unknown_point(n, points))
        return chosen

    def _unknown_point(self, name: str, points: dict[str, HookPoint]) -> str:
        """Why `name` is no hook point: a module that exists but lacks it says what it is
        and which points it has (a Gated DeltaNet layer asked for attention's pattern);
        else a few examples."""
        owner, _, leaf = name.rpartition(".")
        try:
            module = self.get_submodule(owner) if owner else None
        except AttributeError:
            module = None
        if module is not None:
            own = [n.rpartition(".")[2] for n in points if n.rpartition(".")[0] == owner]
            why = getattr(module, "MISSING_HOOK_WHY", {}).get(leaf, "")
            return (f"unknown hook point {name!r}: {owner} is a {type(module).__name__}"
                    f"{', ' + why if why else ''}; its hook points: {', '.join(own) or 'none'}")
        examples = ", ".join(list(points)[:4])
        return f"unknown hook point {name!r}; examples: {examples} (hook_names() lists all)"

    @contextmanager
    def hooks(
        self,
        fwd: Iterable[tuple[str, HookFn]] = (),
        bwd: Iterable[tuple[str, HookFn]] = (),
    ) -> Iterator[HookedModule]:
        """Attach forward hooks (may replace the tensor) and backward hooks (see the
        gradient arriving at the site) by name; they are removed on exit, even on error."""
        points = self.hook_points()
        fwd, bwd = list(fwd), list(bwd)
        self._select([name for name, _ in fwd + bwd], points)  # check every name in one pass
        handles = []
        try:
            for name, fn in fwd:
                handles.append(points[name].register_forward_hook(_forward_adapter(name, fn)))
            for name, fn in bwd:
                handles.append(points[name].register_forward_hook(_backward_adapter(name, fn)))
            yield self
        finally:
            for handle in handles:
                handle.remove()

    def run_with_cache(
        self,
        *args: object,
        names: Names = None,
        grad_of: Callable[[torch.Tensor], torch.Tensor] | None = None,
        **kwargs: object,
    ) -> tuple[torch.Tensor, ActivationCache]:
        """Run forward and record the named activations.

        With `grad_of` (a function of the output returning a scalar), also run backward
        on that scalar and record the gradient arriving at each named site. Parameter
        gradients accumulate as in any backward pass.
        """
        selected = self._select(names)
        cache = ActivationCache()

        def save(t: torch.Tensor, name: str) -> None:
            cache.acts[name] = t.detach()

        def save_grad(g: torch.Tensor, name: str) -> None:
            cache.grads[name] = g.detach()

        bwd = [(n, save_grad) for n in selected] if grad_of is not None else []
        with torch.set_grad_enabled(grad_of is not None or torch.is_grad_enabled()):
            with self.hooks(fwd=[(n, save) for n in selected], bwd=bwd):
                out = self(*args, **kwargs)
                if grad_of is not None:
                    grad_of(out).backward()
        return out, cache


def _forward_adapter(name: str, fn: HookFn) -> Callable:
    def hook(_module: nn.Module, _inputs: tuple, output: torch.Tensor) -> torch.Tensor | None:
        return fn(output, name)

    return hook


def _backward_adapter(name: str, fn: HookFn) -> Callable:
    def hook(_module: nn.Module, _inputs: tuple, output: torch.Tensor) -> None:
        if output.requires_grad:
            output.register_hook(lambda grad: fn(grad, name))

    return hook
