"""`skillos train`'s options to a `TrainConfig` (`TrainConfig.from_options`), without the command."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.trainer.config import TrainConfig, set_path

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "train" / "cpu-tiny.yaml"


def test_options_over_the_file():
    base = TrainConfig.from_yaml(TINY)
    cfg = TrainConfig.from_options(TINY, steps=base.steps + 3, output_dir=Path("/tmp/elsewhere"),
                                   overrides=["rollout.top_k_skills=2", "lambda_cnt=0.5"])
    assert cfg.steps == base.steps + 3 and cfg.output_dir == Path("/tmp/elsewhere")
    assert cfg.rollout.top_k_skills == 2 and cfg.lambda_cnt == 0.5
    assert TrainConfig.from_options(TINY) == base


def test_what_is_refused_says_what_to_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        TrainConfig.from_options(tmp_path / "none.yaml")
    with pytest.raises(ValueError, match="write KEY=VALUE"):
        TrainConfig.from_options(TINY, overrides=["steps"])
    with pytest.raises(ValueError, match="is not a section"):
        TrainConfig.from_options(TINY, overrides=["steps.x=1"])
    with pytest.raises(ValueError, match="temperature"):
        TrainConfig.from_options(TINY, overrides=["temperature=0"])


def test_the_cpu_loop_knobs_are_checked():
    cfg = TrainConfig.from_options(TINY, overrides=["data.reasoning_group_size=[3, 4]", "model.lora_layers=2"])
    assert cfg.data.reasoning_group_size == (3, 4) and cfg.model.lora_layers == 2
    assert TrainConfig.from_yaml(TINY).data.reasoning_group_size == (5, 12)     # Table 4
    with pytest.raises(ValueError, match="2 <= min <= max"):
        TrainConfig.from_options(TINY, overrides=["data.reasoning_group_size=[6, 4]"])
    with pytest.raises(ValueError, match="2 <= min <= max"):
        TrainConfig.from_options(TINY, overrides=["data.reasoning_group_size=[1, 4]"])
    with pytest.raises(ValueError, match="lora_layers"):
        TrainConfig.from_options(TINY, overrides=["model.lora_layers=0"])


def test_set_path_reads_the_value_as_yaml():
    data = {"a": {"b": 1}}
    set_path(data, "a.b=[1, 2]")
    set_path(data, "c=true")
    set_path(data, "d=")
    assert data == {"a": {"b": [1, 2]}, "c": True, "d": ""}
