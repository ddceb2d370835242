"""A peft LoRA adapter as a llama.cpp adapter GGUF, so llama-server can sample from the policy being trained:
``llama-server --model BASE.gguf --lora ADAPTER.gguf`` over the very GGUF the trainer dequantised its base from.

llama.cpp's own ``convert_lora_to_gguf.py`` needs the base model as an HF folder and its converter classes;
the trainer has the base as a GGUF and the adapter as tensors. What llama.cpp reads of an adapter is small:
``general.type = adapter``, ``adapter.type = lora``, ``adapter.lora.alpha`` (scale = alpha / rank, as peft's),
the base's ``general.architecture``, and per adapted weight ``<gguf name>.lora_a`` ([r, in] in torch order) and
``.lora_b`` ([out, r]), named after the base's tensors with gguf's own HF-to-GGUF name map.

One layout detail: for the ``llama`` architecture (SmolLM2) the HF→GGUF conversion stores Q and K permuted for
llama.cpp's RoPE (convert_hf_to_gguf's ``LlamaModel.permute``), and transformers un-permutes them when it loads
the GGUF. W = B·A, so the adapter's rows must be permuted alike: ``lora_b`` of q/k gets the same permutation.
Architectures without it (qwen2, qwen3) are written as they are; others are refused rather than guessed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import gguf
import numpy as np
import torch

# architectures whose GGUF q/k rows are permuted relative to HF (True) or stored as HF has them (False)
PERMUTES_QK = {"llama": True, "qwen2": False, "qwen3": False}

_ADAPTER_KEY = re.compile(r"^(?:base_model\.model\.)?(?P<module>.+)\.lora_(?P<ab>[AB])(?:\.[^.]+)?\.weight$")


class LoraExportError(ValueError):
    """The adapter or its base cannot be written as a llama.cpp adapter."""


def base_shape(base_gguf: Path) -> dict:
    """What the conversion needs from the base GGUF's header: architecture, blocks, heads."""
    reader = gguf.GGUFReader(str(base_gguf))

    def field(key: str):
        f = reader.fields.get(key)
        if f is None:
            raise LoraExportError(f"{base_gguf} has no {key}")
        return f.contents()

    arch = field("general.architecture")
    heads = field(f"{arch}.attention.head_count")
    kv = reader.fields.get(f"{arch}.attention.head_count_kv")
    return {"arch": arch, "blocks": int(field(f"{arch}.block_count")), "heads": int(heads),
            "kv_heads": int(kv.contents()) if kv is not None else int(heads)}


def permute(weights: torch.Tensor, n_head: int) -> torch.Tensor:
    """convert_hf_to_gguf's LlamaModel.permute on the output rows (``n_head``: the kv heads for K)."""
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


def adapter_tensors(state: dict[str, torch.Tensor], shape: dict) -> dict[str, np.ndarray]:
    """GGUF name -> array for each LoRA A/B tensor of a peft state dict (saved or gathered names)."""
    arch = shape["arch"]
    if arch not in PERMUTES_QK:
        raise LoraExportError(f"architecture {arch!r}: its q/k layout in GGUF is not known here "
                              f"(known: {', '.join(sorted(PERMUTES_QK))})")
    names = gguf.get_tensor_name_map(next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch),
                                     shape["blocks"])
    out: dict[str, np.ndarray] = {}
    for key, tensor in state.items():
        m = _ADAPTER_KEY.match(key)
        if m is None:
            continue
        module = m["module"]
        target = names.get_name(module + ".weight", try_suffixes=(".weight",))
        if target is None:
            raise LoraExportError(f"{key}: no GGUF tensor of {arch} corresponds to {module}")
        data = tensor.detach().to(torch.float32).cpu()
        if m["ab"] == "B" and PERMUTES_QK[arch]:
            if module.endswith("q_proj"):
                data = permute(data, shape["heads"])
            elif module.endswith("k_proj"):
                data = permute(data, shape["kv_heads"])
        out[f"{target}.lora_{m['ab'].lower()}"] = data.contiguous().numpy()
    if not out:
        raise LoraExportError("the state dict holds no LoRA tensors (lora_A / lora_B)")
    unpaired = {n.rsplit(".", 1)[0] for n in out} - {n.rsplit(".", 1)[0] for n in out if n.endswith("lora_a")
                                                       and n[:-1] + "b" in out}
    if unpaired:
        raise LoraExportError(f"LoRA tensors without their other half: {sorted(unpaired)[:3]}")
    return out


def write_adapter_gguf(model, base_gguf: Path, path: Path, state: dict[str, torch.Tensor] | None = None) -> Path:
    """Write ``model``'s LoRA adapter (a peft model; ``state``: its gathered tensors under ZeRO-3) as a llama.cpp
    adapter for ``base_gguf`` at ``path``, beside and renamed into place (a server never reads a torn file)."""
    config = model.peft_config.get("default") if hasattr(model, "peft_config") else None
    if config is None:
        raise LoraExportError("not a peft model with a 'default' LoRA adapter (model.lora=true)")
    if getattr(config, "use_rslora", False) or getattr(config, "use_dora", False):
        raise LoraExportError("rsLoRA / DoRA scale differently from llama.cpp's alpha / rank")
    if state is None:
        from peft import get_peft_model_state_dict
        state = get_peft_model_state_dict(model)
    shape = base_shape(base_gguf)
    tensors = adapter_tensors(state, shape)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".incoming")
    writer = gguf.GGUFWriter(str(tmp), arch=shape["arch"])
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(config.lora_alpha))
    for name, data in tensors.items():
        writer.add_tensor(name, data)
    return _finish(writer, tmp, path)


FLOAT_TYPES = {"f32": (np.float32, gguf.LlamaFileType.ALL_F32), "f16": (np.float16, gguf.LlamaFileType.MOSTLY_F16)}


def float_base_gguf(base_gguf: Path, path: Path, dtype: str = "f32") -> Path:
    """A copy of ``base_gguf`` with its tensors dequantised to F32 (or F16; vectors such as the norms stay F32, as
    llama.cpp wants them): the weights the trainer holds (transformers dequantises the same blocks), so the served
    policy differs from the trainer's by float rounding only, not by llama.cpp's quantized matmuls. Larger and
    slower to sample from than the quantized file; written once."""
    if path.exists():
        return path
    np_type, file_type = FLOAT_TYPES[dtype]
    reader = gguf.GGUFReader(str(base_gguf))
    arch = reader.fields["general.architecture"].contents()
    tmp = path.with_name(path.name + ".incoming")
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(tmp), arch=arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = field.contents()
        if key == "general.file_type":
            value = int(file_type)
        sub = field.types[1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, value, field.types[0], sub_type=sub)
    for t in reader.tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type).reshape([int(d) for d in reversed(t.shape)])
        writer.add_tensor(t.name, data.astype(np_type if data.ndim > 1 else np.float32))
    return _finish(writer, tmp, path)


def _finish(writer: gguf.GGUFWriter, tmp: Path, path: Path) -> Path:
    """Write out what ``writer`` holds into ``tmp``, then rename it into place: a reader never sees a torn file."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, path)
    return path
