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


def save(engine, ckpt_dir: Path, step: int, sampler: SamplerState, keep: int, extra: dict | None = None) -> Path:
    state = {"step": step, "sampler": asdict(sampler), "rng": rng_state(), **(extra or {})}
    engine.save_checkpoint(str(ckpt_dir), tag=tag_for(step), client_state={"trainer": state})
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


def load(engine, ckpt_dir: Path) -> dict[str, Any] | None:
    """Restore the newest checkpoint into `engine`; returns the trainer state or None."""
    tag = latest_tag(ckpt_dir)
    if tag is None:
        return None
    path, client = engine.load_checkpoint(str(ckpt_dir), tag=tag, load_optimizer_states=True,
                                          load_lr_scheduler_states=True)
    if path is None:
        raise RuntimeError(f"checkpoint {ckpt_dir / tag} could not be loaded")
    state = client["trainer"]
    set_rng_state(state["rng"])
    state["sampler"] = SamplerState(**state["sampler"])
    return state
