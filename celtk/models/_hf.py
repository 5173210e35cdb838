"""Read an HF model (config, tokenizer, weights) so that every way a model directory can be wrong
is one :class:`ModelSourceError` naming the file, not a transformers traceback."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import torch

from celtk.errors import ModelSourceError
from celtk.models._arch import unsupported
from celtk.registry import annotation_names

if TYPE_CHECKING:  # transformers loads when a model is read, not with this module
    from transformers import PretrainedConfig, PreTrainedModel, PreTrainedTokenizerBase

__getattr__ = annotation_names(dict.fromkeys(  # what the type checks under pytest resolve on first need
    ("PretrainedConfig", "PreTrainedModel", "PreTrainedTokenizerBase"), "transformers"))


def one_line(error: BaseException) -> str:
    """An exception's text on one line (transformers' messages span several)."""
    return re.sub(r"\s+", " ", str(error)).strip() or type(error).__name__


def read_config(target: str, source: str) -> PretrainedConfig:
    """The ``PretrainedConfig`` of ``target`` (a directory or a hub id), typed by transformers.

    Raises:
        ArchitectureError: the model type is one transformers does not know, or has no causal LM.
        ModelSourceError: config.json is unreadable, has no model type, or a value of the wrong type.
    """
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoConfig, PretrainedConfig

    # every model type transformers knows; a table it does not mark exported (unused-ignore: for plain mypy)
    from transformers.models.auto.configuration_auto import (  # type: ignore[attr-defined, unused-ignore]
        CONFIG_MAPPING_NAMES,
    )
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    where = f"the config.json of {source!r} ({target})"
    try:
        config_dict, _ = PretrainedConfig.get_config_dict(target)
    except OSError as error:
        raise ModelSourceError(f"Could not load model {source!r} from {target}: {one_line(error)}") from None
    if not isinstance(config_dict, dict):
        raise ModelSourceError(f"{where} holds a {type(config_dict).__name__}, not an object of settings; "
                               "copy the model's config.json again.")
    model_type = config_dict.get("model_type")
    architecture = (config_dict.get("architectures") or [f"model type {model_type!r}"])[0]
    if not isinstance(model_type, str) or not model_type:
        raise ModelSourceError(f"{where} has no model_type; an HF config.json names its model type "
                               "(e.g. \"model_type\": \"llama\"). Copy the model's config.json again.")
    if model_type not in CONFIG_MAPPING_NAMES:
        raise unsupported(str(architecture), f"this transformers does not know its model type {model_type!r}")
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise unsupported(str(architecture), f"model type {model_type!r} has no causal language model in transformers")
    try:
        config: PretrainedConfig = AutoConfig.from_pretrained(target)
        return config
    except (StrictDataclassError, TypeError, ValueError, KeyError) as error:
        raise ModelSourceError(f"{where} has a wrong value: {one_line(error)}. Fix that value "
                               "or copy the model's config.json again.") from None


def read_hf_model(target: str, source: str, dtype: torch.dtype) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """(HF causal LM, tokenizer) of ``target``; config first, then tokenizer, then weights."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = read_config(target, source)
    try:
        tokenizer = AutoTokenizer.from_pretrained(target)
    except (OSError, ValueError, TypeError, KeyError) as error:
        raise ModelSourceError(f"Model {source!r} has no usable tokenizer in {target} ({one_line(error)[:300]}); "
                               "copy the same model's tokenizer files (tokenizer.json, tokenizer_config.json) "
                               "beside its config.json.") from None
    try:
        model = AutoModelForCausalLM.from_pretrained(target, config=config, dtype=dtype)
    except OSError as error:
        raise ModelSourceError(f"Could not load model {source!r} from {target}: {one_line(error)}") from None
    except (RuntimeError, ValueError) as error:  # sizes in config.json that no weights (or tensor) can have
        raise ModelSourceError(f"Could not build model {source!r} from {target}: {one_line(error)[:300]}. "
                               "config.json and the weights must describe the same model; copy them again.") from None
    return model, tokenizer
