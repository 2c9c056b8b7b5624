"""Inputs for a transformers model, from the model itself: its ``main_input_name``, the
arguments its ``forward`` requires, and the sizes its (shrunk) config names; a decoder's
input ids for an encoder-decoder.

A model may take more than one layout under one name (``input_values``: raw audio
``(batch, samples)`` for wav2vec2, a spectrogram ``(batch, frames, bins)`` for AST), so
``candidates`` gives each layout that fits, most likely first; the registry keeps the
first the model runs on. Knows no pytest and no backend.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pytest_fxtrace.zoo.shrink import config_fields, nested_configs
from pytest_fxtrace.zoo.shrink_fields import TOKEN_ID

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

BATCH = 2
TOKENS = 8
DECODER_TOKENS = 4
FRAMES = 32  # spectrogram frames
SAMPLES = 3840  # raw audio: 0.24 s at 16 kHz, 12 frames of wav2vec2's 320-sample stride, 2 of MuseSpark's 1920


def config_values(config: object, key: str) -> list[Any]:
    """Every value of ``key`` in ``config`` and its nested configs, outermost first."""
    return [value for node in nested_configs(config) if (value := getattr(node, key, None)) is not None]


def _first(config: object, key: str, default: object) -> Any:
    values = config_values(config, key)
    return values[0] if values else default


def token_ids(model: PreTrainedModel, shape: tuple[int, ...]) -> torch.Tensor:
    """Random ids the model embeds, none of them a special token of its config (an image
    token would ask for an image)."""
    import torch

    try:
        embeddings = model.get_input_embeddings()
    except (AttributeError, NotImplementedError):  # a dual encoder: no one embedding
        embeddings = None
    vocab = getattr(embeddings, "num_embeddings", None) or _first(model.config, "vocab_size", 100)
    special: set[int] = set()
    for node in nested_configs(model.config):
        for key, value in config_fields(node).items():
            if TOKEN_ID.fullmatch(key):
                special.update(v for v in (value if isinstance(value, (list, tuple)) else [value]) if isinstance(v, int))
    allowed = torch.tensor([i for i in range(min(int(vocab), 1000)) if i not in special] or [0])
    return allowed[torch.randint(0, len(allowed), shape)]


def _image_size(config: object) -> tuple[int, int]:
    size = _first(config, "image_size", None) or _first(config, "crop_size", None) or _tower_image(config) or 64
    if isinstance(size, (list, tuple)):
        return int(size[0]), int(size[-1])
    if isinstance(size, dict):
        return int(size.get("height", 64)), int(size.get("width", 64))
    return int(size), int(size)


def _tower_image(config: object) -> Any:
    """The fixed image size of a timm tower (``model_args['img_size']``, PE's ViT), or None."""
    towers = [args for args in config_values(config, "model_args") if isinstance(args, dict)]
    return next((args["img_size"] for args in towers if args.get("img_size")), None)  # an int or (height, width)


def pixel_values(config: object) -> torch.Tensor:
    import torch

    channels = _first(config, "num_channels", 3)
    height, width = _image_size(config)
    return torch.randn(BATCH, int(channels), height, width)


def video_frames(config: object) -> int | None:
    """The frames a video model's config says a clip has, or None for an image model."""
    frames = _first(config, "num_frames", None) or _first(config, "frames_per_clip", None)
    return int(frames) if isinstance(frames, int) and frames > 0 else None


def video_values(config: object) -> torch.Tensor:
    """A clip as video models take one: (batch, frames, channels, height, width)."""
    import torch

    channels = _first(config, "num_channels", 3)
    height, width = _image_size(config)
    return torch.randn(BATCH, video_frames(config) or 4, int(channels), height, width)


def _audio_layouts(config: object, name: str) -> list[tuple[int, ...]]:
    """The shapes ``input_features`` / ``input_values`` may have for this config."""
    mels = _first(config, "num_mel_bins", None)
    source = _first(config, "max_source_positions", None)
    layouts: list[tuple[int, ...]] = []
    frames = FRAMES * 4
    if name == "input_features":
        if mels and source:  # Whisper: exactly twice the encoder's positions
            layouts.append((BATCH, mels, 2 * source))
        stack = _first(config, "num_stacked_frames", None)  # Fun-ASR: frames stacked, mels times that wide
        if mels and stack:
            layouts.append((BATCH, FRAMES, mels * stack))
        stacked = _first(config, "feature_projection_input_dim", None)  # w2v-BERT: frames stacked in pairs
        if stacked:
            layouts.append((BATCH, FRAMES * 4, stacked))
        per_channel = _first(config, "input_feat_per_channel", None)
        if per_channel:
            layouts.append((BATCH, FRAMES * 4, per_channel * _first(config, "input_channels", 1)))
        size = _first(config, "feature_size", None) or mels or 80
        layouts += [(BATCH, frames, size), (BATCH, size, frames)]
        convs = _first(config, "subsampling_conv_channels", None)  # Gemma 4: as many mel bins as its first
        if isinstance(convs, (list, tuple)) and convs and isinstance(convs[0], int):  # conv's channels
            layouts.append((BATCH, frames, convs[0]))
        window = _first(config, "n_window", None)  # Qwen3-ASR reads frames in windows of 2 * n_window
        if isinstance(window, int) and window > 0:
            layouts += [(BATCH, size, 2 * window), (BATCH, 2 * window, size)]
    else:
        length = _first(config, "max_length", None)
        if mels and isinstance(length, int) and length < 4096:  # AST: a spectrogram
            layouts.append((BATCH, length, mels))
        layouts.append((BATCH, SAMPLES))
        channels = _first(config, "audio_channels", None) or 1
        layouts.append((BATCH, channels, SAMPLES))
    return list(dict.fromkeys(layouts))


def first_layer_layout(model: PreTrainedModel) -> list[tuple[int, ...]]:
    """Features as wide as the model's first layer takes them (a Linear: (batch, frames,
    in_features); a Conv1d: (batch, in_channels, frames)), for a model whose input width
    its code ties to a constant (Granite Speech: 4 stacked frames of its mel bins)."""
    import torch

    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            return [(BATCH, FRAMES * 4, module.in_features)]
        if isinstance(module, torch.nn.Conv1d):
            return [(BATCH, module.in_channels, FRAMES * 4)]
    return []


def main_input(model: PreTrainedModel) -> list[tuple[str, torch.Tensor | None]]:
    """(description, value) for each layout of the model's main input."""
    import torch

    name = model.main_input_name
    name = name[0] if isinstance(name, (list, tuple)) else name
    config = model.config
    if name == "input_ids":  # MusicGen's decoder: a row per codebook of each batch item
        codebooks = _first(config, "num_codebooks", None)
        rows = [BATCH * int(codebooks)] if isinstance(codebooks, int) and codebooks > 1 else []
        out: list[tuple[str, torch.Tensor | None]] = [(name, token_ids(model, (n, TOKENS))) for n in (BATCH, *rows)]
        return out + [(name, ids) for ids in _streams(model, codebooks)]
    if name == "pixel_values":  # a video model's clip first (TimeSformer, VideoMAE), an image, a pair
        video = [(name, video_values(config))] if video_frames(config) else []
        image = pixel_values(config)
        return [*video, (name, image), (name, torch.stack([image, image], dim=1))]  # LightGlue: 2 to match
    if name in ("inputs_embeds", "inputs"):  # embeddings made elsewhere (Perceiver's inputs: d_model wide)
        width = _first(config, "d_model", None) or _first(config, "hidden_size", 32)
        return [(name, torch.randn(BATCH, TOKENS, int(width)))]
    if name == "latents":  # a codec's decoder: (batch, hidden_size, frames)
        return [(name, torch.randn(BATCH, int(_first(config, "hidden_size", 32)), 4))]
    if name == "pixel_values_videos":
        return [(name, video_values(config))]
    if name == "states":
        return [(name, torch.randn(BATCH, TOKENS, int(_first(config, "state_dim", 4))))]
    if name in ("input_features", "input_values"):
        layouts = _audio_layouts(config, name)
        if name == "input_features":
            layouts += [shape for shape in first_layer_layout(model) if shape not in layouts]
        else:  # no speech pre-net (SpeechT5Model): its own hidden states; a codec's decoder: latents
            width = int(_first(config, "hidden_size", 32))
            layouts += [(BATCH, TOKENS, width), (BATCH, width, TOKENS)]
        return [(name, torch.randn(shape)) for shape in layouts]
    if name == "past_values":
        return [(name, past_values(config))]
    if name == "audio_mel":  # Gemma 3n's audio tower: (batch, frames, input_feat_size mel bins)
        return [(name, torch.randn(BATCH, FRAMES * 4, int(_first(config, "input_feat_size", 80))))]
    return [(name, None)]


def _streams(model: PreTrainedModel, codebooks: object) -> list[torch.Tensor]:
    """Kyutai's ids: a text stream beside each codebook's, ``(batch, tokens, codebooks + 1)``,
    each id inside the smallest vocabulary (each stream's is offset into one embedding)."""
    if not (isinstance(codebooks, int) and codebooks > 1):
        return []
    sizes = [v for key in ("vocab_size", "codebook_vocab_size") for v in config_values(model.config, key) if isinstance(v, int)]
    return [token_ids(model, (BATCH, TOKENS, codebooks + 1)) % min(sizes or [100])]


def _time_series_length(config: object) -> tuple[int, int]:
    """(steps of history, steps to forecast) of a time-series config."""
    horizon = int(_first(config, "prediction_length", None) or 4)
    context = int(_first(config, "context_length", None) or horizon)
    lags = _first(config, "lags_sequence", None) or [0]
    return context + max(lags), horizon


def past_values(config: object) -> torch.Tensor:
    import torch

    history, _ = _time_series_length(config)
    channels = _first(config, "num_input_channels", None)
    if channels is not None:  # PatchTST: (batch, steps, channels)
        return torch.randn(BATCH, history, int(channels))
    size = int(_first(config, "input_size", 1) or 1)  # a univariate series is (batch, steps)
    return torch.randn(BATCH, history) if size == 1 else torch.randn(BATCH, history, size)


def _time_features(config: object, future: bool) -> torch.Tensor:
    import torch

    history, horizon = _time_series_length(config)
    features = int(_first(config, "num_time_features", 0) or 0) + int(_first(config, "num_dynamic_real_features", 0) or 0)
    return torch.randn(BATCH, horizon if future else history, features)  # none: (batch, steps, 0)


def vision_patches(config: object) -> dict[str, torch.Tensor]:
    """A Qwen-style vision tower's input: an image as a flat sequence of patches and its
    (frames, rows, columns) grid, two merge units a side."""
    import torch

    patch = int(_first(config, "patch_size", 14))
    temporal = int(_first(config, "temporal_patch_size", None) or _first(config, "patch_temporal", 1) or 1)
    merge = int(_first(config, "spatial_merge_size", 1) or 1)
    channels = int(_first(config, "in_channels", None) or _first(config, "num_channels", 3))
    side = 2 * merge
    grid = torch.tensor([[1, side, side]])
    return {"flat": torch.randn(side * side, channels * temporal * patch * patch), "grid": grid}


# forward arguments a model may require besides its main input
_REQUIRED: dict[str, Callable[[PreTrainedModel, dict[str, torch.Tensor]], torch.Tensor]] = {
    "attention_mask": lambda model, given: _ones_like_main(given),
    "token_type_ids": lambda model, given: _ones_like_main(given).zero_(),
    "decoder_input_ids": lambda model, given: token_ids(model, (BATCH, DECODER_TOKENS)),
    "input_ids": lambda model, given: _text_ids(model),
    "pixel_values": lambda model, given: (video_values if video_frames(model.config) else pixel_values)(model.config),
    "bbox": lambda model, given: _boxes(),
    "past_time_features": lambda model, given: _time_features(model.config, future=False),
    "past_observed_mask": lambda model, given: torch_ones_like(given["past_values"]),
    "past_values_padding": lambda model, given: torch_ones_like(given["past_values"]).long().zero_(),
    "freq": lambda model, given: _ones_like_main(given)[:, :1].zero_(),  # (batch, 1), as TimesFM reads it
    "qformer_input_ids": lambda model, given: token_ids(model, (BATCH, TOKENS)),
    "task_inputs": lambda model, given: token_ids(model, (BATCH, int(_first(model.config, "task_seq_len", TOKENS)))),
    "query_embeds": lambda model, given: _floats(BATCH, TOKENS, int(_first(model.config, "hidden_size", 32))),
    "input_features_mask": lambda model, given: _frames_mask(model.config, given.get("input_features")),
    "input_values": lambda model, given: _floats(BATCH, 1, SAMPLES),  # a codec's mono audio beside its main input
    "input_features": lambda model, given: _floats(*_audio_layouts(model.config, "input_features")[0]),
    "pixel_values_videos": lambda model, given: video_values(model.config),  # PE Video: a clip beside its text
    "image_embeds_position_mask": lambda model, given: _latent_positions(model.config, given),
    # Gemma 3n: True marks a padded frame (its model passes ~input_features_mask): none padded
    "audio_mel_mask": lambda model, given: torch_ones_like(given["audio_mel"][..., 0]).bool().logical_not(),
    "lang_ids": lambda model, given: _ones_like_main(given)[:, 0].zero_(),  # X-MOD: the first language's adapters
    "visual_feats": lambda model, given: _floats(BATCH, TOKENS, int(_first(model.config, "visual_feat_dim", 32))),
    "visual_pos": lambda model, given: torch_ones_like(_floats(BATCH, TOKENS, int(_first(model.config, "visual_pos_dim", 4)))),
    "encoder_hidden_states": lambda model, given: _floats(BATCH, TOKENS, _encoder_width(model.config)),
    # SpeechT5Model with no pre-nets: the decoder's hidden states
    "target_sizes": lambda model, given: _patch_grid(model.config),
    "decoder_input_values": lambda model, given: _floats(BATCH, DECODER_TOKENS, int(_first(model.config, "hidden_size", 32))),
    "actions": lambda model, given: _floats(BATCH, TOKENS, int(_first(model.config, "act_dim", 4))),
    "rewards": lambda model, given: _floats(BATCH, TOKENS, 1),
    "returns_to_go": lambda model, given: _floats(BATCH, TOKENS, 1),
    "timesteps": lambda model, given: _ones_like_main(given).cumsum(1) - 1,
    "future_values": lambda model, given: _future_values(model.config, given),
    "future_time_features": lambda model, given: _time_features(model.config, future=True),
}
# the inputs of another modality a model may take beside its main one (CLIP: text and images)
_ALSO = (
    "input_ids", "pixel_values", "bbox", "decoder_input_ids", "future_values", "future_time_features",
    "actions", "rewards", "returns_to_go", "timesteps", "input_features", "lang_ids", "visual_feats", "visual_pos",
    "encoder_hidden_states", "input_features_mask", "decoder_input_values", "target_sizes",
    "image_embeds_position_mask",
)


def _text_ids(model: PreTrainedModel) -> torch.Tensor:
    """Token ids beside another modality: BLIP-2's text opens with its image's
    ``num_query_tokens`` image (video) tokens, as its processor writes it."""
    ids = token_ids(model, (BATCH, TOKENS))
    queries = _first(model.config, "num_query_tokens", None)
    token = _first(model.config, "image_token_index", None)
    token = token if token is not None else _first(model.config, "video_token_index", None)
    if isinstance(queries, int) and isinstance(token, int) and 0 < queries < TOKENS:
        ids[:, :queries] = token
    return ids


def _latent_positions(config: object, given: dict[str, torch.Tensor]) -> torch.Tensor:
    """Which tokens of the text hold the image's ``latent_query_num`` latent queries
    (Kosmos-2's ``image_embeds_position_mask``): those after the first."""
    ids = _ones_like_main(given).zero_()
    count = int(_first(config, "latent_query_num", 0) or 0)
    ids[:, 1 : 1 + count] = 1
    return ids


def _patch_grid(config: object) -> torch.Tensor:
    """An image's patches down and across (MiniCPM's ``target_sizes``), (1, 2): its
    position ids are the one image's, added to each image of the batch."""
    import torch

    height, width = _image_size(config)
    patch = int(_first(config, "patch_size", 14))
    return torch.tensor([[height // patch, width // patch]])


def _encoder_width(config: object) -> int:
    """The width of the encoder states a cross-attending model reads (BLIP-2's Q-Former)."""
    return int(_first(config, "encoder_hidden_size", None) or _first(config, "hidden_size", 32))


def _floats(*shape: int) -> torch.Tensor:
    import torch

    return torch.randn(shape)


def _frames_mask(config: object, features: torch.Tensor | None) -> torch.Tensor:
    """A mask of every frame of ``features`` (batch, frames, bins) or (batch, bins, frames)."""
    import torch

    if features is None:
        return torch.ones(BATCH, FRAMES * 4, dtype=torch.long)
    bins = _first(config, "num_mel_bins", None) or _first(config, "feature_size", None)
    frames = features.shape[2] if features.shape[1] == bins else features.shape[1]
    return torch.ones(features.shape[0], frames, dtype=torch.long)


def torch_ones_like(value: torch.Tensor) -> torch.Tensor:
    import torch

    return torch.ones_like(value)


def _future_values(config: object, given: dict[str, torch.Tensor]) -> torch.Tensor:
    import torch

    _, horizon = _time_series_length(config)
    past = given.get("past_values")
    shape = (BATCH, horizon, *past.shape[2:]) if past is not None else (BATCH, horizon)
    return torch.randn(shape)


def _ones_like_main(given: dict[str, torch.Tensor]) -> torch.Tensor:
    import torch

    ids = given.get("input_ids")
    return torch.ones(ids.shape[:2] if ids is not None else (BATCH, TOKENS), dtype=torch.long)


def _boxes() -> torch.Tensor:
    import torch

    corners = torch.randint(0, 500, (BATCH, TOKENS, 2))
    return torch.cat([corners, corners + torch.randint(1, 500, (BATCH, TOKENS, 2))], dim=-1)


def forward_parameters(model: PreTrainedModel) -> dict[str, inspect.Parameter]:
    parameters = list(inspect.signature(model.forward).parameters.values())
    return {p.name: p for p in parameters if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}


class MissingInput(Exception):
    """The model's forward requires an argument no rule makes."""


def candidates(model: PreTrainedModel) -> list[dict[str, torch.Tensor]]:
    """Keyword inputs for ``model``'s forward, one dict per layout worth trying, most
    likely first; MissingInput naming an argument it requires that nothing here makes."""
    parameters = forward_parameters(model)
    patched = _patch_layouts(model, parameters)
    if patched and "input_ids" not in patched[0]:  # a vision tower: its layouts of patches
        return patched
    out = []
    for name, value in main_input(model):
        if value is None:
            raise MissingInput(f"its main input {name!r} (main_input_name) has no rule to make it")
        if name not in parameters and "hidden_states" in parameters:  # VibeVoice's tokenizer halves
            name = "hidden_states"
        given = {name: value}
        for param in parameters.values():
            required = param.default is inspect.Parameter.empty
            wanted = param.name == "decoder_input_ids" and getattr(model.config, "is_encoder_decoder", False)
            if (required or wanted) and param.name not in given:
                make = _REQUIRED.get(param.name)
                if make is None:
                    raise MissingInput(f"forward() requires {param.name!r}, which the zoo has no rule to make")
                given[param.name] = make(model, given)
        out.append(given)
        also = {n: _REQUIRED[n](model, given) for n in _ALSO if n in parameters and n not in given}
        if also:
            out.append({**given, **also})
        images = also.get("pixel_values")
        if images is not None and images.dim() == 4:  # IDEFICS: a list of images per text, (batch, images, ...)
            listed = {**given, **also, "pixel_values": images.unsqueeze(1)}
            if "image_attention_mask" in parameters:  # each token sees the one image
                listed["image_attention_mask"] = _ones_like_main(given).unsqueeze(-1)
            out.append(listed)
        features = also.get("input_features")
        if features is not None and features.dim() == 3:  # CLAP: a spectrogram with a channel axis
            out.append({**given, **also, "input_features": features.unsqueeze(1)})
    return out + patched  # SigLIP 2's text and patches, last


def _patch_layouts(model: PreTrainedModel, parameters: dict[str, inspect.Parameter]) -> list[dict[str, torch.Tensor]]:
    """The inputs of a tower that takes an image as a sequence of patches: a Qwen-style
    vision tower (patches, flat or each an image as Kimi-K2.5's, and their grid), SigLIP 2
    (patches, their mask and the grid, beside token ids where it takes them); none for any
    other model."""
    grid = next((n for n in ("grid_thw", "image_grid_thw") if n in parameters), None)
    if grid is not None and "input_ids" not in parameters:
        made = vision_patches(model.config)
        main = next(n for n in ("hidden_states", "pixel_values") if n in parameters)
        out: dict[str, torch.Tensor] = {main: made["flat"], grid: made["grid"]}
        if "merge_sizes" in parameters:  # VideoLLaMA 3: each image's merge size
            out["merge_sizes"] = made["grid"][:, 0] * int(_first(model.config, "spatial_merge_size", 1) or 1)
        patch = int(_first(model.config, "patch_size", 14))
        count, width = made["flat"].shape
        if width % (patch * patch) == 0:
            return [out, {**out, main: made["flat"].reshape(count, width // (patch * patch), patch, patch)}]
        return [out]
    if "spatial_shapes" in parameters and "pixel_attention_mask" in parameters:
        out = flat_patches(model.config)
        if "input_ids" in parameters:
            out["input_ids"] = token_ids(model, (BATCH, TOKENS))
        return [out]
    return []


def flat_patches(config: object) -> dict[str, torch.Tensor]:
    """SigLIP 2's image input: ``num_patches`` patches on a square grid, all valid."""
    import torch

    patch = int(_first(config, "patch_size", 16))
    count = int(_first(config, "num_patches", 16))
    side = max(1, int(count**0.5))
    channels = int(_first(config, "num_channels", 3))
    return {
        "pixel_values": torch.randn(BATCH, side * side, channels * patch * patch),
        "pixel_attention_mask": torch.ones(BATCH, side * side, dtype=torch.long),
        "spatial_shapes": torch.tensor([[side, side]] * BATCH),
    }


def describe(inputs: Mapping[str, object]) -> str:
    """``input_ids (2, 8), decoder_input_ids (2, 4)``: what a model was given."""
    return ", ".join(f"{k} {tuple(v.shape)}" if hasattr(v, "shape") else f"{k}={v!r}" for k, v in inputs.items())
