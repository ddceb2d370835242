"""What the weight-sync tests compare a server against: the trainer-side model's next-token log-probs."""

from __future__ import annotations

import torch

from services.trainer.grpo.policy import load_policy


@torch.no_grad()
def trainer_side(model, ids: list[int]) -> torch.Tensor:
    model.eval()
    return model(input_ids=torch.tensor([ids])).logits[0, -1].float().log_softmax(-1)


def moved(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b))


def smollm2_copy(tmp_path_factory):
    """SmolLM2 converted once (GGUF -> HF safetensors) into a fresh folder; the test modules' ``cache`` fixture."""
    path = tmp_path_factory.mktemp("model") / "smollm2"
    load_policy(cache_dir=path)
    return path
