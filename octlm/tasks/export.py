"""``octlm export``: a checkpoint as a Hugging Face Llama model (``--format hf``), or its weights alone under
octlm's names (``--format safetensors``): one ``ExportFormat`` row each, in one table, ``EXPORT_FORMATS``, which the
``--format`` option's choices and help are built from (torch-free at import, so the command line reads it). Adding a
format: its writer and its row here; tests/tasks/test_export.py exports with every row (docs/modules.md, "Families").

octlm's model is Llama's (RMSNorm, rotary, SwiGLU, no biases, tied embeddings) but for one detail: it
rotates interleaved pairs of each head's dimensions, (0, 1), (2, 3), ..., where ``transformers`` rotates
the two halves, (0, hd/2), (1, hd/2 + 1), .... Reordering each head's rows of q and k (octlm's row 2j
becomes row j, row 2j + 1 becomes row hd/2 + j) makes the two compute the same attention: a dot product
does not change when both vectors are permuted alike. ``torch.nn.RMSNorm`` without an ``eps`` uses the
float32 machine epsilon, which ``rms_norm_eps`` repeats.

The checkpoint is loaded as ``sample`` loads it (its experiment, its track, its fingerprints against the
experiment's YAML), the folder is written beside DIR under a temporary name, then renamed into place
(``core.fsutil.folder``, which the trackers' export shares).
Torch, safetensors and tokenizers are imported inside the functions.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from octlm.core.errors import BadInput, Refused
from octlm.core.fsutil import atomic_write
from octlm.core.fsutil.folder import check_folder, publish
from octlm.core.home import Home
from octlm.core.records.freeform import ConfigTree

if TYPE_CHECKING:
    import torch

FLOAT32_EPS = 1.1920928955078125e-07  # torch.finfo(torch.float32).eps: nn.RMSNorm's eps when none is given
LAYER_NAMES = {  # octlm's name inside blocks.N -> transformers' inside model.layers.N
    "attention_norm.weight": "input_layernorm.weight",
    "attention.q.weight": "self_attn.q_proj.weight",
    "attention.k.weight": "self_attn.k_proj.weight",
    "attention.v.weight": "self_attn.v_proj.weight",
    "attention.proj.weight": "self_attn.o_proj.weight",
    "mlp_norm.weight": "post_attention_layernorm.weight",
    "mlp.gate.weight": "mlp.gate_proj.weight",
    "mlp.up.weight": "mlp.up_proj.weight",
    "mlp.down.weight": "mlp.down_proj.weight",
}
TOP_NAMES = {"embedding.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight"}
CARD_METRICS = ("step", "tokens", "train_loss", "eval_loss", "perplexity", "bits_per_byte")


class Exported(TypedDict):
    """What ``octlm export --json`` writes: the checkpoint's step, the format, the folder and the files in it."""

    id: str
    step: int
    format: str  # a name of EXPORT_FORMATS
    dir: str
    files: list[str]
    checkpoint: str  # the checkpoint's path under the home ("" when it lies elsewhere)


class ModelSizes(TypedDict):
    """The model a checkpoint holds, from the config it was trained under."""

    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    context_length: int
    mlp_hidden: int
    rope_base: float
    dropout: float
    id: str
    description: str
    yaml: str


@dataclass(frozen=True)
class Exporting:
    """What a format writes from: the experiment, its checkpoint as ``sample`` loads it, the model's tensors on the
    CPU under octlm's names, and the tokenizer."""

    experiment_id: str
    loaded: Any  # tasks.sample.Loaded
    state: dict[str, torch.Tensor]
    tokenizer: Any  # data.tokenizer.Tokenizer


@dataclass(frozen=True)
class ExportFormat:
    """One member of the family."""

    help: str  # what it writes, in the ``--format`` option's help
    needs: tuple[str, ...]  # the packages it imports (the hf extra's), checked before anything is read
    write: Callable[[Path, Exporting], list[str]]  # writes its files into the folder, returns their names


def check_extra(export_format: str) -> None:
    """BadInput naming the extra to install when a package the format needs is missing."""
    if export_format not in EXPORT_FORMATS:
        raise BadInput(f"--format {export_format}: must be one of {', '.join(EXPORT_FORMATS)}")
    missing = [name for name in EXPORT_FORMATS[export_format].needs if importlib.util.find_spec(name) is None]
    if missing:
        raise BadInput(
            f"export --format {export_format} needs {' and '.join(missing)}: install the hf extra, "
            "pip install 'octlm[hf]' (or pip install -e '.[hf]' in a clone)"
        )


def export(
    home: Home,
    experiment_id: str,
    output: Path,
    *,
    step: int | None = None,
    export_format: str = "hf",
    force: bool = False,
    warn: Callable[[str], None] = lambda message: None,
) -> Exported:
    """Write the checkpoint (the newest valid one, or the one at ``step``) to the folder ``output``."""
    check_extra(export_format)
    target = Path(os.path.abspath(output))
    check_folder(home.root, target, force)
    from octlm.tasks.sample import load_model  # the checks and loading of `octlm sample`

    loaded, model, tokenizer, _ = load_model(home, experiment_id, step, warn)
    state = {name: tensor.detach().cpu().contiguous() for name, tensor in model.state_dict().items()}
    exporting = Exporting(experiment_id, loaded, state, tokenizer)
    files = publish(target, force, lambda folder: EXPORT_FORMATS[export_format].write(folder, exporting))
    return {
        "id": experiment_id,
        "step": loaded.record.step,
        "format": export_format,
        "dir": str(target),
        "files": sorted(files),
        "checkpoint": str(loaded.path.relative_to(home.root)) if loaded.path.is_relative_to(home.root) else "",
    }


def write_hf(folder: Path, what: Exporting) -> list[str]:
    """A folder ``transformers`` loads: the weights under its names, its configs and tokenizer, a model card."""
    config = model_config(what.loaded.record.config)
    files = [write_weights(folder, hf_state(what.state, config["n_heads"]), {"format": "pt"})]
    files += write_configs(folder, config, what.tokenizer)
    files.append(write_card(folder, what.experiment_id, what.loaded, config, what.tokenizer.bos))
    return files


def write_safetensors(folder: Path, what: Exporting) -> list[str]:
    """The weights alone under octlm's names, with the checkpoint's provenance as the file's metadata."""
    return [write_weights(folder, what.state, _metadata(what.experiment_id, what.loaded))]


# The family's one table: a new format is a writer above and a row here.
EXPORT_FORMATS: dict[str, ExportFormat] = {
    "hf": ExportFormat(
        "a folder transformers loads (weights, config, tokenizer, model card)",
        ("safetensors", "transformers"),
        write_hf,
    ),
    "safetensors": ExportFormat("the weights alone, under octlm's names", ("safetensors",), write_safetensors),
}


# ---------------------------------------------------------------- the files


def model_config(raw: ConfigTree) -> ModelSizes:
    """The sizes of the checkpoint's model, from the config it was trained under."""
    from octlm.config import from_dict

    config = from_dict(raw, "checkpoint")
    model = config.model
    return {
        "vocab_size": config.tokenizer.vocab_size,
        "d_model": model.d_model,
        "n_layers": model.n_layers,
        "n_heads": model.n_heads,
        "context_length": model.context_length,
        "mlp_hidden": config.mlp_hidden,
        "rope_base": float(model.rope_base),
        "dropout": float(model.dropout),
        "id": config.id,
        "description": config.description,
        "yaml": _yaml(config),
    }


def _yaml(config: Any) -> str:
    from octlm.config import to_yaml

    return to_yaml(config)


def halves(weight: Any, n_heads: int) -> Any:
    """q or k rows of each head from octlm's interleaved pairs to transformers' halves."""
    rows, width = weight.shape
    head_dim = rows // n_heads
    return weight.view(n_heads, head_dim // 2, 2, width).transpose(1, 2).reshape(rows, width).contiguous()


def hf_state(state: dict[str, torch.Tensor], n_heads: int) -> dict[str, torch.Tensor]:
    """octlm's state dict under transformers' names (the tied output head is the embedding: not stored)."""
    out = {}
    for name, tensor in state.items():
        if name in TOP_NAMES:
            out[TOP_NAMES[name]] = tensor
            continue
        prefix, _, rest = name.partition(".")
        index, _, inner = rest.partition(".")
        if prefix != "blocks" or not index.isdigit() or inner not in LAYER_NAMES:
            raise Refused(f"the checkpoint holds {name}, which has no Llama counterpart: it cannot be exported")
        is_qk = inner in ("attention.q.weight", "attention.k.weight")
        out[f"model.layers.{index}.{LAYER_NAMES[inner]}"] = halves(tensor, n_heads) if is_qk else tensor
    return out


def write_weights(folder: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> str:
    from safetensors.torch import save

    atomic_write(folder / "model.safetensors", save(tensors, metadata=metadata))
    return "model.safetensors"


def _metadata(experiment_id: str, loaded: Any) -> dict[str, str]:
    prints = loaded.record.fingerprints
    return {
        "format": "pt",
        "octlm_experiment": experiment_id,
        "octlm_step": str(loaded.record.step),
        "octlm_config_fingerprint": prints.config,
        "octlm_data_hash": prints.data,
        "octlm_tokenizer_hash": prints.tokenizer,
    }


def _json(folder: Path, name: str, value: Mapping[str, object]) -> str:
    atomic_write(folder / name, (json.dumps(value, indent=2) + "\n").encode("utf-8"))
    return name


def llama_config(config: ModelSizes, tokenizer: Any) -> dict[str, object]:
    """config.json: ``rope_theta`` both at the top (transformers 4, converters) and in ``rope_parameters``
    (transformers 5)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": config["vocab_size"],
        "hidden_size": config["d_model"],
        "intermediate_size": config["mlp_hidden"],
        "num_hidden_layers": config["n_layers"],
        "num_attention_heads": config["n_heads"],
        "num_key_value_heads": config["n_heads"],
        "head_dim": config["d_model"] // config["n_heads"],
        "hidden_act": "silu",
        "max_position_embeddings": config["context_length"],
        "rms_norm_eps": FLOAT32_EPS,
        "rope_theta": config["rope_base"],
        "rope_parameters": {"rope_type": "default", "rope_theta": config["rope_base"]},
        "attention_bias": False,
        "mlp_bias": False,
        "attention_dropout": config["dropout"],
        "tie_word_embeddings": True,
        "bos_token_id": tokenizer.bos_id,
        "eos_token_id": tokenizer.eos_id,
        "pad_token_id": tokenizer.pad_id,
        "torch_dtype": "float32",
        "use_cache": True,
    }


def write_configs(folder: Path, config: ModelSizes, tokenizer: Any) -> list[str]:
    """config.json, generation_config.json, tokenizer.json (the experiment's, octlm's BPE or the file brought along
    in ``tokenizer.file`` with the pad octlm added to it, if any, and a post-processor that puts the bos token first,
    as octlm does with a prompt) and tokenizer_config.json."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import processors

    ids = {"bos_token_id": tokenizer.bos_id, "eos_token_id": tokenizer.eos_id, "pad_token_id": tokenizer.pad_id}
    inner, bos = HFTokenizer.from_str(tokenizer.inner.to_str()), tokenizer.bos
    inner.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tokenizer.bos_id)]
    )
    atomic_write(folder / "tokenizer.json", inner.to_str(pretty=True).encode("utf-8"))
    settings = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": tokenizer.bos,
        "eos_token": tokenizer.eos,
        "pad_token": tokenizer.pad,
        "model_max_length": config["context_length"],
        "clean_up_tokenization_spaces": False,
    }
    return [
        _json(folder, "config.json", llama_config(config, tokenizer)),
        _json(folder, "generation_config.json", ids),
        "tokenizer.json",
        _json(folder, "tokenizer_config.json", settings),
    ]


def write_card(folder: Path, experiment_id: str, loaded: Any, config: ModelSizes, bos: str) -> str:
    """README.md: what the model is, where it came from (fingerprints), its metrics, how to load it."""
    record, prints = loaded.record, loaded.record.fingerprints
    metrics = "\n".join(f"| {key} | {record.metrics[key]} |" for key in CARD_METRICS if key in record.metrics)
    lines = [
        "---",
        "library_name: transformers",
        "tags: [octlm, llama]",
        "---",
        "",
        f"# {experiment_id} at step {record.step}",
        "",
        config["description"] or "(no description)",
        "",
        f"A Llama-architecture model ({config['n_layers']} layers, d_model {config['d_model']}, "
        f"{config['n_heads']} heads, context {config['context_length']} tokens) trained with octlm and exported "
        f"from its checkpoint `{loaded.path.name}` (step {record.step}, {record.tokens:,} tokens).",
        "",
        "| fingerprint | sha256 |",
        "|---|---|",
        f"| config | {prints.config} |",
        f"| data | {prints.data} |",
        f"| tokenizer | {prints.tokenizer} |",
        "",
        "Metrics at the checkpoint:",
        "",
        "| metric | value |",
        "|---|---|",
        metrics,
        "",
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "",
        'model = AutoModelForCausalLM.from_pretrained("path/to/this/folder")',
        'tokenizer = AutoTokenizer.from_pretrained("path/to/this/folder")',
        f'ids = tokenizer("def ", return_tensors="pt").input_ids  # {bos} first, as octlm encodes a prompt',
        "print(tokenizer.decode(model.generate(ids, max_new_tokens=20, do_sample=False)[0], skip_special_tokens=True))",
        "```",
        "",
        f"The tokenizer puts `{bos}` before a text, as octlm does; octlm keeps only the last "
        f"{config['context_length']} tokens as context, so generate within that length to get its results.",
        "",
        "The config it was trained under:",
        "",
        "```yaml",
        config["yaml"].rstrip("\n"),
        "```",
        "",
    ]
    atomic_write(folder / "README.md", "\n".join(lines).encode("utf-8"))
    return "README.md"
