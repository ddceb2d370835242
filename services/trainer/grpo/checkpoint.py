"""Checkpoints with exact resume: model and optimizer (DeepSpeed), RNG streams, data position.

DeepSpeed writes each checkpoint into `checkpoints/<tag>/` and only then updates the `latest`
file, so a process killed mid-save resumes from the previous complete checkpoint.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from services.trainer.data import SamplerState


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def tag_for(step: int) -> str:
    return f"step-{step:06d}"


def _has_frozen(engine) -> bool:
    return any(not p.requires_grad for p in engine.module.parameters())


def save(engine, ckpt_dir: Path, step: int, sampler: SamplerState, keep: int, extra: dict | None = None) -> Path:
    """A LoRA run's checkpoint holds the trained tensors alone (the base is the file it was loaded from):
    megabytes instead of the model's gigabytes, small enough to keep with a run's evidence. (DeepSpeed keeps a
    tied LM head too, which named_parameters() lists only as the embedding: SmolLM2's adds 113 MB.)"""
    state = {"step": step, "sampler": asdict(sampler), "rng": rng_state(), **(extra or {})}
    engine.save_checkpoint(str(ckpt_dir), tag=tag_for(step), client_state={"trainer": state},
                           exclude_frozen_parameters=_has_frozen(engine))
    tags = sorted(p for p in ckpt_dir.iterdir() if p.is_dir() and p.name.startswith("step-"))
    for old in tags[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return ckpt_dir / tag_for(step)


def latest_tag(ckpt_dir: Path) -> str | None:
    marker = ckpt_dir / "latest"
    if not marker.exists():
        return None
    tag = marker.read_text().strip()
    return tag if (ckpt_dir / tag).is_dir() else None


def _check_trained_tensors(engine, tag_dir: Path) -> None:
    """A non-strict load ignores names it does not find: a LoRA checkpoint must hold every tensor this engine
    trains and nothing it does not have (another `lora_layers` or target list would otherwise resume from a
    fresh init, silently)."""
    files = sorted(tag_dir.glob("*model_states.pt"))
    if not files:
        return   # ZeRO-3 keeps the tensors in its own files; DeepSpeed's load checks those
    module = torch.load(files[0], map_location="cpu", weights_only=False).get("module") or {}
    trained = {n for n, p in engine.module.named_parameters() if p.requires_grad}
    # DeepSpeed also keeps a frozen tensor that named_parameters() lists under another name (a tied LM head)
    missing = sorted(trained - module.keys())
    unexpected = sorted(module.keys() - engine.module.state_dict().keys())
    if missing or unexpected:
        raise RuntimeError(f"checkpoint {tag_dir} does not hold this run's trained tensors (missing {len(missing)}, "
                           f"e.g. {missing[:2]}; unexpected {len(unexpected)}, e.g. {unexpected[:2]}): was it made "
                           "with another model.lora_layers or lora_target_modules?")


def load(engine, ckpt_dir: Path) -> dict[str, Any] | None:
    """Restore the newest checkpoint into `engine`; returns the trainer state or None."""
    tag = latest_tag(ckpt_dir)
    if tag is None:
        return None
    frozen = _has_frozen(engine)
    if frozen:
        _check_trained_tensors(engine, ckpt_dir / tag)
    # without the frozen base in the file, its tensors are the ones the engine was built with
    path, client = engine.load_checkpoint(str(ckpt_dir), tag=tag, load_optimizer_states=True,
                                          load_lr_scheduler_states=True, load_module_strict=not frozen)
    if path is None:
        raise RuntimeError(f"checkpoint {ckpt_dir / tag} could not be loaded")
    state = client["trainer"]
    set_rng_state(state["rng"])
    state["sampler"] = SamplerState(**state["sampler"])
    return state
