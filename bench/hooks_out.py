"""A depthlab model with its hook points compiled out: the baseline that shows what the
hook points cost a training step when no hook is attached.

`compile_out(model)` rewrites the forward of every Block, Attention and the Transformer
(and its embed/unembed) from their source with each `self.hook_NAME(expr)` replaced by
`expr`, and binds the rewritten methods to those modules of this one model. Nothing else
changes: the same code, minus the calls. bench/nanogpt_step.py times the course step both
ways, interleaved.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types

from torch import nn

from depthlab.model.attention import Attention
from depthlab.model.transformer import Block, Transformer


class _DropHooks(ast.NodeTransformer):
    def visit_Call(self, node: ast.Call) -> ast.AST:  # noqa: N802 (ast's visitor name)
        self.generic_visit(node)
        f = node.func
        if (isinstance(f, ast.Attribute) and f.attr.startswith("hook_")
                and isinstance(f.value, ast.Name) and f.value.id == "self" and len(node.args) == 1):
            return node.args[0]
        return node


def _rewritten(cls: type, name: str) -> types.FunctionType:
    """cls.name's source with the hook calls dropped, compiled in its module's globals."""
    fn = getattr(cls, name)
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    tree = ast.fix_missing_locations(_DropHooks().visit(tree))
    scope: dict = {}
    exec(compile(tree, inspect.getsourcefile(fn), "exec"), fn.__globals__, scope)  # noqa: S102
    return scope[name]


PLAN = {Block: ("forward",), Attention: ("forward",),
        Transformer: ("forward", "embed", "unembed")}


def compile_out(model: nn.Module) -> nn.Module:
    """model, its forwards rebound without hook calls (see the module docstring)."""
    methods = {(cls, name): _rewritten(cls, name) for cls, names in PLAN.items() for name in names}
    for m in model.modules():
        for (cls, name), fn in methods.items():
            if type(m) is cls:
                setattr(m, name, types.MethodType(fn, m))
    return model
