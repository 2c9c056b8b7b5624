"""After a config's sizes are cut (``zoo/shrink.py``): the rules its fields must keep with each
other, each a function of the fields before (``fields``) and the changes so far (``new``) that
returns more changes -- fields a default config leaves None that its model needs, the experts a
token is routed to within their groups, head counts dividing widths, stage lists doubling, the
per-layer kinds of layer and rope sections, windows, embedding grids and token ids.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_fxtrace.zoo.shrink_fields import (
    EXPERT_GROUPS_FIELD,
    EXPERTS_FIELD,
    EXPERTS_PER_TOKEN,
    HEAD_DIM_FIELD,
    STAGES_WIDTH,
    TOKEN_ID,
    TOPK_FIELD,
    TOPK_GROUPS_FIELD,
    VOCAB,
    is_int,
    is_int_list,
)


def _listed(value: object) -> Sequence[object]:
    """A per-layer list field's items; none when it is unset."""
    return value if isinstance(value, (list, tuple)) else ()


def defaults(fields: dict[str, object], new: dict[str, object]) -> dict[str, object]:
    """Fields a default config leaves None that its model needs: the key/value heads (the
    attention heads, as documented), a head's size (width / heads), a forecaster's horizon
    and context, and the experts a token is routed to."""
    out: dict[str, object] = {}
    if "num_key_value_heads" in fields and fields["num_key_value_heads"] is None:
        heads = new.get("num_attention_heads", fields.get("num_attention_heads"))
        if is_int(heads):
            out["num_key_value_heads"] = heads
    if "vocab_size" in fields and fields["vocab_size"] is None:
        out["vocab_size"] = VOCAB
    if "num_query_tokens" in fields:  # BLIP-2: the text's image (video) tokens, which its code compares ids with
        for key in ("image_token_index", "video_token_index"):
            if key in fields and fields[key] is None:
                out[key] = VOCAB - 1  # an id of every vocabulary the shrink leaves (VOCAB or more)
    if "prediction_length" in fields and fields["prediction_length"] is None:  # a forecaster's horizon
        out["prediction_length"] = 4
    if "context_length" in fields and fields["context_length"] is None and "prediction_length" in fields:
        out["context_length"] = out.get("prediction_length", fields["prediction_length"])  # as documented
    hidden = new.get("hidden_size", fields.get("hidden_size"))
    heads = new.get("num_attention_heads", fields.get("num_attention_heads"))
    if "head_dim" in fields and fields["head_dim"] is None and is_int(hidden) and is_int(heads) and heads > 0:
        out["head_dim"] = hidden // heads  # its code does arithmetic with getattr(config, "head_dim", ...)
    experts = [e for k, v in fields.items() if EXPERTS_FIELD.fullmatch(k) and is_int(e := new.get(k, v))]
    for key, value in fields.items():
        if TOPK_FIELD.fullmatch(key) and value is None and experts:
            out[key] = min(EXPERTS_PER_TOKEN, *experts)
    return out


def kv_shared(fields: dict[str, object], now: dict[str, object], kept: int) -> dict[str, object]:
    """The last layers that reuse an earlier layer's keys and values (Gemma 3n's
    ``num_kv_shared_layers``, 15 of 35): no more than the layers kept past the first of each
    kind, so each kind still has a layer that makes its cache (its config checks it)."""
    shared = fields.get("num_kv_shared_layers")
    if not is_int(shared) or shared == 0:
        return {}
    kinds = len({repr(kind) for kind in _listed(now.get("layer_types"))}) or 1
    small = min(shared, max(0, kept - kinds))
    return {"num_kv_shared_layers": small} if small != shared else {}


def attention_layer(fields: dict[str, object], new: dict[str, object]) -> dict[str, object]:
    """A hybrid config that sizes an attention layer (``num_attention_heads``) but places
    none, every layer linear (Mamba): its last layer made full attention, so both kinds
    its code defines are built and its cache has a layer that counts the tokens seen (the
    default Bamba and GraniteMoeHybrid configs, ``attn_layer_indices`` None and
    ``layer_types`` all ``linear_attention``, fail with their own cache: ``get_seq_length``
    finds no attention layer). A pure Mamba config sizes no attention and is left alone."""
    now = {**fields, **new}
    heads, layers, kinds = now.get("num_attention_heads"), now.get("num_hidden_layers"), now.get("layer_types")
    if not (is_int(heads) and heads > 0 and is_int(layers) and layers > 1):
        return {}
    if "attn_layer_indices" in fields and not now["attn_layer_indices"]:
        return {"attn_layer_indices": [layers - 1]}
    if isinstance(kinds, list) and len(kinds) == layers and set(kinds) == {"linear_attention"}:
        return {"layer_types": [*kinds[:-1], "full_attention"]}
    return {}


def expert_groups(fields: dict[str, object], new: dict[str, object]) -> dict[str, object]:
    """DeepSeek-style routing picks the best groups of experts, then the best experts in
    them: the groups divide the (fewer) experts, ``EXPERTS_PER_TOKEN`` or more each, and no
    more groups are picked than there are."""
    experts = [e for k, v in fields.items() if EXPERTS_FIELD.fullmatch(k) and is_int(e := new.get(k, v))]
    if not experts:
        return {}
    out: dict[str, int] = {}
    for key, value in fields.items():
        if EXPERT_GROUPS_FIELD.fullmatch(key) and is_int(value) and value > 1:
            groups = max(1, min(value, min(experts) // EXPERTS_PER_TOKEN))
            while min(experts) % groups:
                groups -= 1
            out[key] = groups
    for key, value in fields.items():
        if TOPK_GROUPS_FIELD.fullmatch(key) and is_int(value) and out:
            out[key] = min(value, *out.values())
    return {k: v for k, v in out.items() if v != fields[k]}


def heads_dividing_width(fields: dict[str, object], new: dict[str, object]) -> dict[str, object]:
    """Attention heads that divide the width, where the config names no head size and no
    rotary embedding (an encoder such as SigLIP checks that its heads divide its width; a
    rotary decoder works out its head size itself, GLM-4.5V's 32 wide with 12 heads): the
    most up to its count (a default SigLIP tower of 1152 wide with 14 heads, AyaVision's,
    is 36 wide with 6 at the tiny level)."""
    now = {**fields, **new}
    hidden, heads = now.get("hidden_size"), now.get("num_attention_heads")
    if any(HEAD_DIM_FIELD.fullmatch(k) and is_int(v) or k.startswith("rope_") and v for k, v in now.items()):
        return {}
    if not (is_int(hidden) and is_int(heads) and 0 < heads and hidden % heads):
        return {}
    return {"num_attention_heads": max(d for d in range(1, heads + 1) if hidden % d == 0)}


def indexer(fields: dict[str, object], new: dict[str, object]) -> dict[str, object]:
    """A token indexer (Qwen4-Exp's QSA) its ``indexed_attention`` layers build but its
    default config leaves unset, set as its config's checks require: the attention's
    heads and head size, one key head, blocks of 4 tokens and a budget of 2 blocks."""
    keys = ("indexer_n_heads", "indexer_kv_heads", "indexer_head_dim", "indexer_budget", "indexer_compress_ratio")
    now = {**fields, **new}
    indexed = any("indexed" in str(kind) for kind in _listed(now.get("layer_types")))
    if not indexed or any(now.get(k) is not None for k in keys) or not all(k in fields for k in keys):
        return {}
    heads, dim = now.get("num_attention_heads"), head_dim(now)
    if not (is_int(heads) and dim):
        return {}
    return dict(zip(keys, (heads, 1, dim, 8, 4), strict=True))


def doubling_stages(now: dict[str, object]) -> dict[str, object]:
    """A codec's first width (``num_filters``), doubled at each of its down- or upsampling
    stages: no wider than ``STAGES_WIDTH`` at its last (VibeVoice's 6 stages: 32 -> 1024)."""
    filters = now.get("num_filters")
    ratios = now.get("downsampling_ratios") or now.get("upsampling_ratios")
    if not (is_int(filters) and is_int_list(ratios)):
        return {}
    small = min(filters, max(2, STAGES_WIDTH >> len(ratios)))
    return {"num_filters": small} if small != filters else {}


def compound_scaling(now: dict[str, object]) -> dict[str, object]:
    """EfficientNet's compound scaling (B7: widths x 2.0, depths x 3.1) undone, to the base
    network's sizes (B0's): the coefficients 1, and its last width (``hidden_dim``,
    ``round_filters(1280)``: 1280 times the width coefficient) divided with them."""
    out: dict[str, object] = {}
    depth, width = now.get("depth_coefficient"), now.get("width_coefficient")
    if isinstance(depth, (int, float)) and depth > 1:
        out["depth_coefficient"] = 1.0
    if isinstance(width, (int, float)) and width > 1:
        out["width_coefficient"] = 1.0
        if is_int(last := now.get("hidden_dim")):
            out["hidden_dim"] = max(1, round(last / width))
    return out


def rope_per_layer_type(config: object, now: dict[str, object]) -> dict[str, object]:
    """Rotary parameters left empty (``{}``) by a config with ``layer_types``, whose
    ``convert_rope_params_to_dict`` takes them per layer type (its keys the types) and whose
    model reads ``rope_parameters[layer_type]``: each type's default rotary embedding
    (CohereCompass' text config; its model raises KeyError 'full_attention' on ``{}``)."""
    rope, kinds = now.get("rope_parameters"), now.get("layer_types")
    if rope != {} or not (isinstance(kinds, list) and kinds and all(isinstance(k, str) for k in kinds)):
        return {}
    if "convert_rope_params_to_dict" not in vars(type(config)):  # the per-type form is its own
        return {}
    theta = float(getattr(config, "default_theta", 10_000.0))
    return {"rope_parameters": {kind: {"rope_type": "default", "rope_theta": theta} for kind in dict.fromkeys(kinds)}}


def rope_sections(config: object, fields: dict[str, object], new: dict[str, object]) -> dict[str, object]:
    """A multimodal rotary embedding's sections (``mrope_section``, summing to half a
    head) scaled with the head; where the config leaves them to its model's code (GLM-4V's
    ``[8, 12, 12]`` for a 128-wide head, by ``ignore_keys_at_rope_validation``), written for
    the new head; in each layer type's parameters where they are per type (CohereCompass)."""
    key = "rope_parameters" if isinstance(fields.get("rope_parameters"), dict) else "rope_scaling"
    rope = new.get(key, fields.get(key))
    before, after = head_dim(fields), head_dim({**fields, **new})
    if not isinstance(rope, dict) or not after or before == after:
        return {}
    if rope and all(isinstance(v, dict) for v in rope.values()):  # per layer type
        per_type = {kind: sections(config, params, before, after) for kind, params in rope.items()}
        return {key: per_type} if per_type != rope else {}
    scaled = sections(config, rope, before, after)
    return {key: scaled} if scaled != rope else {}


def sections(config: object, rope: dict[str, object], before: int | None, after: int) -> dict[str, object]:
    """``rope`` with its ``mrope_section`` for a head of ``after`` (``before`` wide before)."""
    sections = rope.get("mrope_section")
    if is_int_list(sections) and before:
        scaled = [max(1, s * after // before) for s in sections]
        scaled[-1] = max(1, after // 2 - sum(scaled[:-1]))
    elif sections is None and "mrope_section" in (getattr(config, "ignore_keys_at_rope_validation", None) or ()):
        half = after // 2
        scaled = [half - 2 * (half // 3), half // 3, half // 3]
    else:
        return rope
    return {**rope, "mrope_section": scaled}


def window(fields: dict[str, object], new: dict[str, object]) -> dict[str, object]:
    """Swin's attention window no wider than its last stage's patches on the small image:
    its relative-position table is built for the window, its windows clipped to the stage."""
    now = {**fields, **new}
    window, depths, image, patch = (now.get(k) for k in ("window_size", "depths", "image_size", "patch_size"))
    if not (is_int(window) and is_int_list(depths) and is_int(image) and is_int(patch) and patch > 0):
        return {}
    last = image // patch // 2 ** (len(depths) - 1)
    return {"window_size": max(1, last)} if 0 < last < window else {}


def embedding_grid(fields: dict[str, object], new: dict[str, object]) -> dict[str, object]:
    """SAM's ``image_embedding_size``: the patches across its (smaller) image."""
    now = {**fields, **new}
    size, image, patch = (now.get(k) for k in ("image_embedding_size", "image_size", "patch_size"))
    if not (is_int(size) and is_int(image) and is_int(patch) and patch > 0) or size == image // patch:
        return {}
    return {"image_embedding_size": image // patch}


def head_dim(fields: dict[str, object]) -> int | None:
    if is_int(dim := fields.get("head_dim")):
        return int(dim)
    hidden, heads = fields.get("hidden_size"), fields.get("num_attention_heads")
    return hidden // heads if is_int(hidden) and is_int(heads) and heads else None


def token_ids(fields: dict[str, object], vocab: int | None) -> dict[str, object]:
    """Token ids past the vocabulary moved to its last ids, each to its own."""
    if vocab is None:
        return {}
    out: dict[str, object] = {}
    moved: dict[int, int] = {}
    for key, value in fields.items():
        if not TOKEN_ID.fullmatch(key):
            continue
        if is_int(value) and value >= vocab:
            out[key] = moved.setdefault(value, vocab - 1 - len(moved))
        elif is_int_list(value) and max(value) >= vocab:
            out[key] = type(value)(moved.setdefault(v, vocab - 1 - len(moved)) if v >= vocab else v for v in value)
    return out
