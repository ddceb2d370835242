"""DeepSpeed around the policy: one engine for CPU (CI) and GPU runs.

CPU recipe: DeepSpeed's CPU accelerator (DS_ACCELERATOR=cpu) in a single process with a gloo
process group (RANK=0, WORLD_SIZE=1, LOCAL_RANK=0, MASTER_ADDR/PORT set here when absent), and a
plain torch AdamW as the client optimizer because DeepSpeed's fused/CPU Adam kernels need a
compiler toolchain at first use. On GPUs the launcher (`deepspeed` or `torchrun`) sets the
rank variables and the DeepSpeed-native AdamW (fused, or CPU-Adam when the optimizer is offloaded)
is used.

Each training step is one optimizer step: the step's completions are split into micro-batches,
each micro-batch is a backward pass, and the gradient-accumulation boundary is declared by hand
on the last one (the number of micro-batches varies from step to step).
"""

from __future__ import annotations

import os
from typing import Any

import torch

from services.trainer.config import TrainConfig
from skillos.net import free_port


def on_gpu() -> bool:
    return torch.cuda.is_available()


def prepare_distributed_env() -> None:
    if not on_gpu():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if os.environ["WORLD_SIZE"] == "1" and not os.environ.get("TORCHELASTIC_USE_AGENT_STORE"):
        # a single process hosts its own store: a port of its own, never one inherited from a parent
        # that set these variables for its own process group and may still hold that port (torchrun's
        # agent store is the exception: there the port is the agent's, to connect to)
        os.environ["MASTER_PORT"] = str(free_port())
    else:
        os.environ.setdefault("MASTER_PORT", str(free_port()))


def deepspeed_config(cfg: TrainConfig, torch_adam: bool = False) -> dict[str, Any]:
    """The engine's config. On GPUs the optimizer is DeepSpeed's AdamW: FusedAdam, a CUDA op that is
    JIT-compiled with nvcc at first use; `torch_adam=True` makes it torch.optim.AdamW instead (same
    update, no compile step: bench/bench_trainer.py's default, so a lent machine runs it at once)."""
    ds = cfg.deepspeed
    zero: dict[str, Any] = {"stage": ds.zero_stage}
    if ds.offload_optimizer == "cpu" and ds.zero_stage > 0:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": on_gpu()}
    if ds.offload_param == "cpu" and ds.zero_stage == 3:
        zero["offload_param"] = {"device": "cpu", "pin_memory": on_gpu()}
    conf: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": ds.micro_batch_sequences,
        "gradient_accumulation_steps": 1,           # boundaries are set by hand, see module doc
        "gradient_clipping": cfg.grad_clip,
        "zero_optimization": zero,
        "bf16": {"enabled": cfg.model.dtype == "bf16"},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    if on_gpu():
        conf["optimizer"] = {"type": "AdamW", "params": {"lr": cfg.lr, "weight_decay": cfg.weight_decay,
                                                         "betas": [0.9, 0.999], "eps": 1e-8}}
        if torch_adam:
            conf["optimizer"]["params"]["torch_adam"] = True
    return conf


def build_engine(model: torch.nn.Module, cfg: TrainConfig, torch_adam: bool = False):
    """deepspeed.initialize(...) -> engine (call `engine.module` for the wrapped model); `torch_adam`:
    see `deepspeed_config`."""
    prepare_distributed_env()
    import deepspeed

    if not on_gpu() and os.environ.get("WORLD_SIZE") == "1":
        # One CPU process has no peers to all-reduce with through shared memory; skipping the
        # shm op avoids compiling it with g++ at first use (minutes on 2 cores).
        import importlib

        # (by module path: the attribute deepspeed.comm.torch is the torch package itself)
        importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None
    if not torch.distributed.is_initialized():
        deepspeed.init_distributed(dist_backend="nccl" if on_gpu() else "gloo", verbose=False)
    conf = deepspeed_config(cfg, torch_adam=torch_adam)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = None
    if "optimizer" not in conf:
        optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay,
                                      betas=(0.9, 0.999), eps=1e-8)
    engine, _opt, _, _ = deepspeed.initialize(model=model, model_parameters=params, optimizer=optimizer,
                                              config=conf)
    return engine


def local_grad_norm(model: torch.nn.Module) -> float | None:
    """L2 norm of the gradients held in `.grad` (ZeRO 0/1; None when they are partitioned)."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return None
    return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads])))


def grad_norm(engine, fallback: float | None = None) -> float:
    """DeepSpeed's global grad norm when it computed one (ZeRO 2/3, fp16/bf16), else `fallback`."""
    norm = engine.get_global_grad_norm()
    if norm is None:
        return float("nan") if fallback is None else fallback
    return float(norm.item() if hasattr(norm, "item") else norm)


def close_distributed() -> None:
    """Tear the process group down before the interpreter exits: a gloo group left to the C++
    destructors at exit can abort the rank ("terminate called without an active exception",
    SIGABRT), which torchrun then reports as a failed run though every step had finished."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def rank_world() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1
