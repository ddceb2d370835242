"""Full tensors out of a ZeRO-3 model, for the weight sync (`sync.py`).

Under ZeRO-3 every rank holds a 1/world slice of each parameter (`p.ds_tensor`); `p.data` is an
empty placeholder outside a forward pass, so `state_dict()` / `save_pretrained` would write
nothing useful. `gathered_state_dict` all-gathers one module's own parameters at a time with
`deepspeed.zero.GatheredParameters(..., modifier_rank=None)` (DeepSpeed's documented context: all
ranks gather, nothing is broadcast back on exit because nobody modifies them): the peak extra
device memory is one layer, not the model, and rank 0 copies each tensor to CPU while it is whole.

It is a collective: every rank must call it, with the same model and filter, in the same order.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def is_zero3(model: torch.nn.Module) -> bool:
    """Parameters converted by ZeRO-3 carry a `ds_id` (and `ds_numel`, `ds_status`, `ds_tensor`)."""
    return any(hasattr(p, "ds_id") for p in model.parameters())


def _rank() -> int:
    dist = torch.distributed
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


@torch.no_grad()
def gathered_state_dict(model: torch.nn.Module,
                        keep: Callable[[str], bool] = lambda name: True) -> dict[str, torch.Tensor] | None:
    """On rank 0: {name: full CPU tensor} for the state-dict entries `keep(name)` accepts (names as
    in `model.state_dict()`); None on the other ranks. Every rank must call it (see module doc)."""
    import deepspeed

    rank0 = _rank() == 0
    out: dict[str, torch.Tensor] = {}
    seen: dict[int, torch.Tensor] = {}    # tied weights (SmolLM2's lm_head = embed_tokens): gathered once
    for prefix, module in model.named_modules():
        prefix = f"{prefix}." if prefix else ""
        params = [(prefix + n, p) for n, p in module.named_parameters(recurse=False) if keep(prefix + n)]
        todo = [p for _, p in params if id(p) not in seen]
        # the same list on every rank (same model, same filter): the all-gathers line up
        with deepspeed.zero.GatheredParameters(todo, modifier_rank=None, enabled=bool(todo)):
            for name, p in params:
                if id(p) not in seen:
                    seen[id(p)] = p.detach().to("cpu", copy=True) if rank0 else None
                out[name] = seen[id(p)]
        # buffers are not partitioned by ZeRO-3: every rank has them whole; only persistent ones
        # belong in a checkpoint (rotary inv_freq and the like are recomputed at load)
        for n, b in module.named_buffers(recurse=False):
            if n not in module._non_persistent_buffers_set and keep(prefix + n) and rank0:
                out[prefix + n] = b.detach().to("cpu", copy=True)
    return out if rank0 else None
