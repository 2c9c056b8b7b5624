"""A transformers config shrunk to a tiny model: every size a config names (layers, widths,
heads, vocabulary, positions, images, experts) made small, keeping the config's own
consistency rules.

Widths are divided by one power of two per config (``Shrink.width``), so every relation
between them holds after as before (``hidden_size == heads * head_dim``, ``intermediate_size
== 4 * hidden_size``, a projector's input equal to the vision tower's width); heads by
another (``Shrink.heads``, a power of two dividing every head count, so grouped-query ratios
hold), and a head's size by their quotient. Layer counts and experts are capped, and a
per-layer list (``layer_types``) cut to the layers kept. Token ids past the new vocabulary
are moved into it.

A shrink goes as far as its ``Level`` (``LEVELS``, tightest first): the tiny one divides the
widths down to 32; gentler ones divide them less, or keep them (and the heads) and cut only
layers, experts, vocabularies, positions and images, or only layers and experts.

Knows no transformers: a config is any object whose ``vars()`` hold its fields and whose
nested configs have a ``model_type``; ``shrink_config`` changes it in place and returns what
it changed (``Change``: the field, the value before and after), for a model-error message to
name.
"""

from __future__ import annotations

import dataclasses
import re
import reprlib
from collections.abc import Iterator
from typing import Any, TypeGuard

WIDTH_TARGET = 32  # the main width (hidden_size) is divided down to at least this
MIN_WIDTH = 8
MAX_HEADS_DIVISOR = 8  # 32 heads become 4
LAYERS = 2
MAX_LAYERS = 4  # a hybrid model's kinds of layer, each kept once
EXPERTS = 4
EXPERTS_PER_TOKEN = 2
VOCAB = 128
POSITIONS = 128
QUERIES = 16  # a detector's object queries
LATENT_QUERIES = 4  # an image's latent queries, each a token of the (8-token) text (Kosmos-2, BLIP-2)
STAGES_WIDTH = 256  # a codec's last stage, at most (its first width doubled at each)
IMAGE = 64  # pixels across, at least: a convolutional stem divides it by 32

# field names, matched whole (re.fullmatch), with any prefix before an underscore
_LAYERS = re.compile(r"(?:\w+_)?(?:num_\w*layers|n_layers?|\w*_layers|layers|num_blocks|depth)")
_NOT_LAYERS = re.compile(r"\w*(?:shared|kv_shared|layers_block_type|attn_layer\w*)\w*")
# a count per layer too (Sapiens2's num_key_value_heads_per_layer)
_HEADS = re.compile(r"(?:\w+_)?(?:num_\w*heads|n_heads?|\w*attention_heads|heads|num_kv_heads|n_head_kv)(?:_per_layer)?")
_KV_HEADS = re.compile(r"\w*(?:key_value_heads|kv_heads|n_head_kv)(?:_per_layer)?")
_HEAD_DIM = re.compile(r"(?:\w+_)?(?:head_dim|headdim|d_kv|attention_head_dim|attention_head_size|kv_channels|d_head|dim_head|head_size)")
_WIDTH = re.compile(
    r"(?:\w+_)?(?:hidden_size|d_model|n_embd|embed_dim|embedding_size|hidden_dim|dim|d_embed|projection_dim"
    r"|intermediate_size|ffn_dim|d_ff|n_inner|d_inner|ffn_hidden_size|mlp_dim|dim_feedforward|feedforward_dim"
    r"|hidden_sizes|embed_dims|hidden_channels|channels|embedding_dim|d_latents|conv_dim|dim_ff|dff|proj_size"
    r"|out_channels|in_channels|width|embed_dim_per_stage|neck_hidden_sizes|num_filters|hidden_dims|dims|emb_dim"
    r"|\w*_channels?|\w*_filters|lora_rank|\w*_hidden_size|projection_size|\w*hidden_dimension|upsample_groups"
    r"|\w*d_ssm|coordinate_size|shape_size|\w*_channel_list|num_pos_feats|pooler_output_size)"
)
_NOT_WIDTH = re.compile(
    r"(?:num_channels|input_channels|\w*in_chans|image_channels|audio_channels|num_mel_bins|\w*input_dim|feature_size"
    r"|image_embedding_size|pos_emb_\w+|\w*patch_dim"
    r"|\w*input_feat\w*)"
)
# feed-forward widths: a multiple of 8 (grouped expert matmuls want 16-byte strides)
_FFN = re.compile(r"(?:\w+_)?(?:intermediate_size|ffn_dim|d_ff|n_inner|ffn_hidden_size|mlp_dim|dim_feedforward|dff)")
_EXPERTS = re.compile(r"(?:num_experts|num_local_experts|n_routed_experts|moe_num_experts|num_routed_experts)")
_EXPERT_GROUPS = re.compile(r"(?:n_group|num_expert_groups?|moe_n_group)")  # DeepSeek's groups of experts
_TOPK_GROUPS = re.compile(r"(?:topk_group|moe_topk_group)")
_TOPK = re.compile(r"(?:num_experts_per_tok|num_experts_per_token|moe_top_k|moe_topk|num_selected_experts|moe_k|top_k_experts|n_activated_experts)")
_VOCAB = re.compile(r"\w*vocab\w*")
_POSITIONS = re.compile(r"(?:\w+_)?(?:max_position_embeddings|n_positions|max_positions|max_seq_len|n_ctx|max_\w+_positions)")
TOKEN_ID = re.compile(r"\w*(?:token_id|token_index)")
_IMAGE = re.compile(r"(?:\w+_)?image_size|crop_size|max_img_size")
_PATCH = re.compile(r"(?:\w+_)?patch_size")
_STAGE_LISTS = ("depths", "depth", "hidden_sizes", "embed_dims", "num_heads", "embed_dim")
_LAYER_INDICES = re.compile(r"\w*(?:layer_ids|layers_indices|_indexes|_idxs|layer_indices|block_indexes)")


_SHORT = reprlib.Repr()  # a per-layer list of 76 names, shown as its first few
_SHORT.maxlist = _SHORT.maxtuple = 4
_SHORT.maxstring = 40


@dataclasses.dataclass(frozen=True)
class Change:
    """One field a shrink changed: ``text_config.hidden_size 4096 -> 32``."""

    field: str
    before: Any
    after: Any

    def __str__(self) -> str:
        return f"{self.field} {_SHORT.repr(self.before)} -> {_SHORT.repr(self.after)}"


@dataclasses.dataclass(frozen=True)
class Level:
    """How far a shrink goes: ``width_target`` the main width is divided down to (None:
    every width, head count and head size kept), ``sizes`` whether vocabularies, positions
    and images are cut too, ``shared`` whether every nested config's widths are divided by
    one divisor (the smallest of theirs: a width one config copies from another, as
    Blip-2's Q-Former ``encoder_hidden_size`` from its vision tower, still equals it),
    ``min_heads`` the fewest heads a head count of 2 or more is divided down to (a model
    whose code halves a count, GroundingDINO's text enhancer, needs 2).
    Layers and experts are cut at every level."""

    name: str
    width_target: int | None
    sizes: bool = True
    shared: bool = False
    min_heads: int = 1


# the ladder, tightest first: a model whose tiny config fails to build or run is tried with
# the next (wider heads and widths keep more of the ties its code makes between sizes)
LEVELS = (
    Level("tiny", WIDTH_TARGET),
    Level("one divisor", WIDTH_TARGET, shared=True),
    Level("two heads", WIDTH_TARGET, min_heads=2),
    Level("narrow", 4 * WIDTH_TARGET),
    Level("widths kept", None),
    Level("layers only", None, sizes=False),
)


@dataclasses.dataclass(frozen=True)
class Shrink:
    """The divisors of one config: ``width`` for every width, ``heads`` for every head
    count (``width // heads`` for a head's size)."""

    width: int
    heads: int
    sizes: bool = True  # vocabularies, positions, images cut
    widths: bool = True  # widths, heads and head sizes divided (False: kept as they are)


def is_config(value: Any) -> bool:
    return hasattr(value, "model_type") and hasattr(value, "to_dict") and not isinstance(value, type)


def _int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _ints(value: Any) -> TypeGuard[list[int] | tuple[int, ...]]:
    return isinstance(value, (list, tuple)) and bool(value) and all(_int(v) for v in value)


def _pow2_divisor(values: list[int], limit: int) -> int:
    """The largest power of two up to ``limit`` dividing every value."""
    divisor = 1
    while divisor * 2 <= limit and all(v % (divisor * 2) == 0 for v in values):
        divisor *= 2
    return divisor


def config_fields(config: Any) -> dict[str, Any]:
    return {k: v for k, v in vars(config).items() if not k.startswith("_")}


def plan(config: Any, level: Level = LEVELS[0], width: int | None = None) -> Shrink:
    """The divisors for ``config`` (its own fields, not its nested configs) at ``level``;
    ``width``: the width divisor to use (one for a whole tree of configs) instead of its own."""
    if level.width_target is None:
        return Shrink(width=1, heads=1, sizes=level.sizes, widths=False)
    fields = config_fields(config)
    # key/value heads follow (a fraction of the heads, at least one): they do not limit the divisor
    heads = [v for k, v in fields.items() if _HEADS.fullmatch(k) and not _KV_HEADS.fullmatch(k) and _int(v) and v > 0]
    heads += [x for k, v in fields.items() if _HEADS.fullmatch(k) and _ints(v) for x in v if x > 0]
    head_divisor = _pow2_divisor(heads, MAX_HEADS_DIVISOR) if heads else 1
    while head_divisor > 1 and any(1 < h < level.min_heads * head_divisor for h in heads):
        head_divisor //= 2
    width = width_divisor(config, level.width_target) if width is None else width
    # a head's size is divided by width / heads: it must stay a whole, even number
    dims = [v for k, v in fields.items() if _HEAD_DIM.fullmatch(k) and _int(v) and v > 0]
    while head_divisor > 1 and width % head_divisor == 0 and any(
        (d * head_divisor) % width or (d * head_divisor // width) % 2 for d in dims
    ):
        head_divisor //= 2
    return Shrink(width=width, heads=head_divisor, sizes=level.sizes)


def width_divisor(config: Any, target: int) -> int:
    """The power of two dividing ``config``'s main width down to ``target`` or just above."""
    fields = config_fields(config)
    keys: tuple[str, ...] = ("embed_dim",) if _ints(fields.get("depths")) else ()  # Swin: the first stage's width
    keys += ("hidden_size", "d_model", "n_embd", "embed_dim", "dim", "embedding_size", "hidden_dim")
    main = next((fields[k] for k in keys if _int(fields.get(k)) and fields[k] > 0), None)
    if main is None:  # XLM's emb_dim, a codec's channels: the widest width, or a stage list's narrowest
        widths = [v for k, v in fields.items() if _WIDTH.fullmatch(k) and not _NOT_WIDTH.fullmatch(k) and _int(v)]
        lists = [v for k, v in fields.items() if _WIDTH.fullmatch(k) and _ints(v)]
        main = max(widths) if widths else min(lists[0]) if lists else target
    width = 1
    while main // (width * 2) >= target and main % (width * 2) == 0:
        width *= 2
    return width


def _walk(config: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``config`` and every config nested in it, with its field path."""
    yield prefix, config
    for key, value in config_fields(config).items():
        if is_config(value):
            yield from _walk(value, f"{prefix}{key}.")
        elif isinstance(value, (list, tuple)) and value and all(is_config(v) for v in value):
            for index, item in enumerate(value):
                yield from _walk(item, f"{prefix}{key}[{index}].")


def nested_configs(config: Any) -> Iterator[Any]:
    """``config`` and every config nested in it, outermost first."""
    return (node for _, node in _walk(config))


def shrink_config(config: Any, level: Level = LEVELS[0]) -> list[Change]:
    """Shrink ``config`` and its nested configs in place, as far as ``level`` goes; the
    fields changed.

    Example::

        changes = shrink_config(transformers.LlamaConfig())
        [str(c) for c in changes][:2]  # ['hidden_size 4096 -> 32', 'intermediate_size 11008 -> 88']
    """
    changes: list[Change] = []
    nodes = list(_walk(config))
    width = None
    if level.shared and level.width_target is not None:
        # a config with no width to divide (a composite's own fields) does not hold the others back
        width = min((d for _, node in nodes if (d := width_divisor(node, level.width_target)) > 1), default=1)
    for prefix, node in nodes:
        changes.extend(_shrink_one(node, prefix, level, width))
    if not level.sizes:
        return changes
    for prefix, node in nodes:  # once every image is small: grids of features its code reshapes to
        changes.extend(_feature_grids(node, prefix, changes))
    for prefix, node in nodes:  # once every vocabulary is small: a composite's ids index its text model's
        vocabs = [v for _, n in _walk(node) if _int(v := getattr(n, "vocab_size", None)) and v > 0]
        moved = _token_ids(config_fields(node), vocabs[0] if vocabs else None)
        for key, after in moved.items():
            changes.append(Change(prefix + key, getattr(node, key), after))
            setattr(node, key, after)
    return changes


def _feature_grids(node: Any, prefix: str, changes: list[Change]) -> list[Change]:
    """Feature maps' sizes (SAM 2's ``backbone_feature_sizes``, ``[[256, 256], [128,
    128], [64, 64]]``: its 1024-pixel image over 4, 8 and 16) scaled as the image of this
    config or one nested in it was (its code reshapes each map to them)."""
    images = [c for c in changes if c.field.startswith(prefix) and _IMAGE.fullmatch(c.field.rpartition(".")[2])]
    before, after = (images[0].before, images[0].after) if images else (None, None)
    before, after = (b[0] if _ints(b) else b for b in (before, after))
    if not (_int(before) and _int(after) and 0 < after < before):
        return []
    out = []
    for key, value in config_fields(node).items():
        if key.endswith("feature_sizes") and isinstance(value, list) and value and all(_ints(v) for v in value):
            grids = [type(v)(max(1, x * after // before) for x in v) for v in value]
            out.append(Change(prefix + key, value, grids))
            setattr(node, key, grids)
    return out


def _shrink_one(config: Any, prefix: str, level: Level, width: int | None) -> list[Change]:
    how = plan(config, level, width)
    fields = config_fields(config)
    kept = _kept_layers(fields)
    new: dict[str, Any] = {}
    for key, value in fields.items():
        after = _shrunk(key, value, how, fields)
        if after is not None and after != value:
            new[key] = after
    new.update(_defaults(fields, new))
    new.update(_expert_groups(fields, new))
    new.update(_compound_scaling({**fields, **new}))
    new.update(_doubling_stages({**fields, **new}))
    new.update(_heads_dividing_width(fields, new))
    new.update(_indexer(fields, new))
    if kept is not None:
        new.update(_per_layer({**fields, **new}, *kept))  # a per-layer list of heads cut once divided
        if "layer_types" in fields and fields["layer_types"] is None:  # LFM2-MoE's default: its code indexes it
            new["layer_types"] = ["full_attention"] * len(kept[1])
        if "mlp_layer_types" in fields and fields["mlp_layer_types"] is None:  # DeepSeek-OCR 2's, as documented
            new["mlp_layer_types"] = ["dense"] + ["sparse"] * (len(kept[1]) - 1)
        new.update(_kv_shared(fields, {**fields, **new}, len(kept[1])))
    new.update(_attention_layer(fields, new))
    new.update(_rope_per_layer_type(config, {**fields, **new}))
    new.update(_rope_sections(config, fields, new))
    new.update(_window(fields, new))
    new.update(_embedding_grid(fields, new))
    changes = []
    for key, after in new.items():
        changes.append(Change(prefix + key, fields[key], after))
        setattr(config, key, after)
    return changes


def _is_layer_count(key: str, value: Any, fields: dict[str, Any] | None = None) -> bool:
    """A count of layers; not a count of stages (Swin's ``num_layers``, ``len(depths)``)."""
    if not (_int(value) and value > 0 and _LAYERS.fullmatch(key) and not _NOT_LAYERS.fullmatch(key)):
        return False
    stages = [len(v) for k, v in (fields or {}).items() if k in _STAGE_LISTS and isinstance(v, (list, tuple))]
    return value not in stages


def _shrunk(key: str, value: Any, how: Shrink, fields: dict[str, Any]) -> Any:
    """The small value of one field, or None to keep it."""
    if _ints(value) and key in ("depths", "depth") or key.endswith("_depths") or key == "num_layers_per_stage":
        return type(value)(min(v, 1) for v in value) if _ints(value) else None
    if _EXPERTS.fullmatch(key) and _int(value) and value > 0:
        return min(value, EXPERTS)
    if _TOPK.fullmatch(key) and _int(value) and value > 0:
        return min(value, EXPERTS_PER_TOKEN)
    if how.widths:
        small = _narrowed(key, value, how)
        if small is not None:
            return small
    if not how.sizes:
        return None
    if _VOCAB.fullmatch(key) and _int(value) and value > VOCAB:
        return VOCAB
    if _POSITIONS.fullmatch(key) and _int(value) and value > POSITIONS:
        return POSITIONS
    if key == "num_queries" and _int(value) and value > QUERIES:  # a detector's top-k of a small image's tokens
        return QUERIES
    if key in ("latent_query_num", "num_query_tokens") and _int(value) and value > LATENT_QUERIES:
        return LATENT_QUERIES  # tokens of the text hold them (Kosmos-2's latent queries, BLIP-2's Q-Former's)
    if _IMAGE.fullmatch(key):
        return _image_size(key, value, fields)
    if key == "visual_prompt_size" and _int(fields.get("max_img_size")):  # TVP's pad, cut with its image
        return max(1, value * _image_size("max_img_size", fields["max_img_size"], fields) // fields["max_img_size"])
    return None


def _narrowed(key: str, value: Any, how: Shrink) -> Any:
    """A head size, head count or width divided by the plan's divisors, or None."""
    if _HEAD_DIM.fullmatch(key) and _int(value) and value > 0:
        return max(2, value * how.heads // how.width)
    if _HEADS.fullmatch(key):
        if _int(value) and value > 0:
            return max(1, value // how.heads)
        if _ints(value):
            return type(value)(max(1, v // how.heads) for v in value)
    if key in ("num_groups", "norm_num_groups") and _int(value) and value > 1:  # a GroupNorm's: channels / groups kept
        return max(1, value // how.width)
    if _WIDTH.fullmatch(key) and not _NOT_WIDTH.fullmatch(key):
        if _int(value) and value > 1:
            small = max(MIN_WIDTH if value >= MIN_WIDTH else value, value // how.width)
            return -(-small // 8) * 8 if _FFN.fullmatch(key) else small
        if _ints(value):
            return type(value)(max(MIN_WIDTH if v >= MIN_WIDTH else v, v // how.width) for v in value)
    return None


def _image_size(key: str, value: Any, fields: dict[str, Any]) -> Any:
    own = key.replace("image_size", "patch_size") if key.endswith("image_size") else "patch_size"
    patch: Any = fields.get(own, fields.get("patch_size"))
    patch = patch if patch is not None else fields.get("tubelet_size")  # a video's (frames, rows, columns)
    patch = patch[-1] if _ints(patch) else patch
    target = patch * -(-IMAGE // patch) if _int(patch) and patch > 0 else IMAGE  # whole patches
    if _int(value):
        return min(value, target)
    if _ints(value):
        return type(value)(min(v, target) for v in value)
    return None


def _kept_layers(fields: dict[str, Any]) -> tuple[int, list[int]] | None:
    """(the layer count, the layers kept): the first ``LAYERS``, and the first of each kind
    a per-layer list or a list of layer indices names (a hybrid model keeps an attention
    layer and a Mamba layer), at most ``MAX_LAYERS``."""
    counts = [v for k, v in fields.items() if _is_layer_count(k, v, fields)]
    if not counts:
        return None
    total = max(counts)
    kept: list[int] = []
    for key, value in fields.items():
        if _is_per_layer(key, value, total):
            firsts: dict[str, int] = {}
            for index, item in enumerate(value):
                firsts.setdefault(repr(item), index)
            kept += firsts.values()
        elif _LAYER_INDICES.fullmatch(key) and _ints(value) and 0 <= min(value) < total:
            kept.append(min(value))
        elif _is_cycle(value, total):  # RecurrentGemma's ("recurrent", "recurrent", "attention") repeated
            kept += range(max({repr(item): i for i, item in reversed(list(enumerate(value)))}.values()) + 1)
    kept = sorted(set(kept))[:MAX_LAYERS]
    for index in range(total):
        if len(kept) >= min(LAYERS, total):
            break
        if index not in kept:
            kept.append(index)
    return total, sorted(kept)


def _is_cycle(value: Any, total: int) -> bool:
    """A pattern of layer kinds the layers repeat: the layers kept are a prefix of it."""
    return (
        isinstance(value, (list, tuple))
        and 1 < len(value) < total
        and all(isinstance(v, str) for v in value)
        and len(set(value)) > 1
    )


def _is_per_layer(key: str, value: Any, total: int) -> bool:
    return isinstance(value, (list, tuple)) and len(value) == total > 1 and not _LAYER_INDICES.fullmatch(key)


def _per_layer(fields: dict[str, Any], total: int, kept: list[int]) -> dict[str, Any]:
    """The layer counts, the lists with a value per layer and the lists of layer indices,
    for the layers kept."""
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if _is_layer_count(key, value, fields):
            out[key] = len(kept) if value == total else min(value, len(kept))
        elif _is_per_layer(key, value, total):
            out[key] = type(value)(value[i] for i in kept)
        elif _LAYER_INDICES.fullmatch(key) and _ints(value) and max(value) >= len(kept):
            out[key] = type(value)(kept.index(i) for i in value if i in kept) or type(value)([len(kept) - 1])
        elif key.endswith("_period") and _int(value) and _int(offset := fields.get(key[:-7] + "_offset")):
            if offset >= len(kept):  # Jamba: attention at layer 4 of every 8; now at 0 of every 2
                out[key], out[key[:-7] + "_offset"] = len(kept), offset % len(kept)
    return {k: v for k, v in out.items() if v != fields[k]}


def _defaults(fields: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Fields a default config leaves None that its model needs: the key/value heads (the
    attention heads, as documented), a head's size (width / heads), a forecaster's horizon
    and context, and the experts a token is routed to."""
    out: dict[str, Any] = {}
    if "num_key_value_heads" in fields and fields["num_key_value_heads"] is None:
        heads = new.get("num_attention_heads", fields.get("num_attention_heads"))
        if _int(heads):
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
    if "head_dim" in fields and fields["head_dim"] is None and _int(hidden) and _int(heads) and heads > 0:
        out["head_dim"] = hidden // heads  # its code does arithmetic with getattr(config, "head_dim", ...)
    experts = [new.get(k, v) for k, v in fields.items() if _EXPERTS.fullmatch(k) and _int(new.get(k, v))]
    for key, value in fields.items():
        if _TOPK.fullmatch(key) and value is None and experts:
            out[key] = min(EXPERTS_PER_TOKEN, *experts)
    return out


def _kv_shared(fields: dict[str, Any], now: dict[str, Any], kept: int) -> dict[str, Any]:
    """The last layers that reuse an earlier layer's keys and values (Gemma 3n's
    ``num_kv_shared_layers``, 15 of 35): no more than the layers kept past the first of each
    kind, so each kind still has a layer that makes its cache (its config checks it)."""
    shared = fields.get("num_kv_shared_layers")
    if not _int(shared) or shared == 0:
        return {}
    kinds = len({repr(kind) for kind in now.get("layer_types") or ()}) or 1
    small = min(shared, max(0, kept - kinds))
    return {"num_kv_shared_layers": small} if small != shared else {}


def _attention_layer(fields: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A hybrid config that sizes an attention layer (``num_attention_heads``) but places
    none, every layer linear (Mamba): its last layer made full attention, so both kinds
    its code defines are built and its cache has a layer that counts the tokens seen (the
    default Bamba and GraniteMoeHybrid configs, ``attn_layer_indices`` None and
    ``layer_types`` all ``linear_attention``, fail with their own cache: ``get_seq_length``
    finds no attention layer). A pure Mamba config sizes no attention and is left alone."""
    now = {**fields, **new}
    heads, layers, kinds = now.get("num_attention_heads"), now.get("num_hidden_layers"), now.get("layer_types")
    if not (_int(heads) and heads > 0 and _int(layers) and layers > 1):
        return {}
    if "attn_layer_indices" in fields and not now["attn_layer_indices"]:
        return {"attn_layer_indices": [layers - 1]}
    if isinstance(kinds, list) and len(kinds) == layers and set(kinds) == {"linear_attention"}:
        return {"layer_types": [*kinds[:-1], "full_attention"]}
    return {}


def _expert_groups(fields: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """DeepSeek-style routing picks the best groups of experts, then the best experts in
    them: the groups divide the (fewer) experts, ``EXPERTS_PER_TOKEN`` or more each, and no
    more groups are picked than there are."""
    experts = [new.get(k, v) for k, v in fields.items() if _EXPERTS.fullmatch(k) and _int(new.get(k, v))]
    if not experts:
        return {}
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if _EXPERT_GROUPS.fullmatch(key) and _int(value) and value > 1:
            groups = max(1, min(value, min(experts) // EXPERTS_PER_TOKEN))
            while min(experts) % groups:
                groups -= 1
            out[key] = groups
    for key, value in fields.items():
        if _TOPK_GROUPS.fullmatch(key) and _int(value) and out:
            out[key] = min(value, *out.values())
    return {k: v for k, v in out.items() if v != fields[k]}


def _heads_dividing_width(fields: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Attention heads that divide the width, where the config names no head size and no
    rotary embedding (an encoder such as SigLIP checks that its heads divide its width; a
    rotary decoder works out its head size itself, GLM-4.5V's 32 wide with 12 heads): the
    most up to its count (a default SigLIP tower of 1152 wide with 14 heads, AyaVision's,
    is 36 wide with 6 at the tiny level)."""
    now = {**fields, **new}
    hidden, heads = now.get("hidden_size"), now.get("num_attention_heads")
    if any(_HEAD_DIM.fullmatch(k) and _int(v) or k.startswith("rope_") and v for k, v in now.items()):
        return {}
    if not (_int(hidden) and _int(heads) and 0 < heads and hidden % heads):
        return {}
    return {"num_attention_heads": max(d for d in range(1, heads + 1) if hidden % d == 0)}


def _indexer(fields: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A token indexer (Qwen4-Exp's QSA) its ``indexed_attention`` layers build but its
    default config leaves unset, set as its config's checks require: the attention's
    heads and head size, one key head, blocks of 4 tokens and a budget of 2 blocks."""
    keys = ("indexer_n_heads", "indexer_kv_heads", "indexer_head_dim", "indexer_budget", "indexer_compress_ratio")
    now = {**fields, **new}
    indexed = any("indexed" in str(kind) for kind in now.get("layer_types") or ())
    if not indexed or any(now.get(k) is not None for k in keys) or not all(k in fields for k in keys):
        return {}
    heads, dim = now.get("num_attention_heads"), _head_dim(now)
    if not (_int(heads) and dim):
        return {}
    return dict(zip(keys, (heads, 1, dim, 8, 4), strict=True))


def _doubling_stages(now: dict[str, Any]) -> dict[str, Any]:
    """A codec's first width (``num_filters``), doubled at each of its down- or upsampling
    stages: no wider than ``STAGES_WIDTH`` at its last (VibeVoice's 6 stages: 32 -> 1024)."""
    filters = now.get("num_filters")
    ratios = now.get("downsampling_ratios") or now.get("upsampling_ratios")
    if not (_int(filters) and _ints(ratios)):
        return {}
    small = min(filters, max(2, STAGES_WIDTH >> len(ratios)))
    return {"num_filters": small} if small != filters else {}


def _compound_scaling(now: dict[str, Any]) -> dict[str, Any]:
    """EfficientNet's compound scaling (B7: widths x 2.0, depths x 3.1) undone, to the base
    network's sizes (B0's): the coefficients 1, and its last width (``hidden_dim``,
    ``round_filters(1280)``: 1280 times the width coefficient) divided with them."""
    out: dict[str, Any] = {}
    depth, width = now.get("depth_coefficient"), now.get("width_coefficient")
    if isinstance(depth, (int, float)) and depth > 1:
        out["depth_coefficient"] = 1.0
    if isinstance(width, (int, float)) and width > 1:
        out["width_coefficient"] = 1.0
        if _int(now.get("hidden_dim")):
            out["hidden_dim"] = max(1, round(now["hidden_dim"] / width))
    return out


def _rope_per_layer_type(config: Any, now: dict[str, Any]) -> dict[str, Any]:
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


def _rope_sections(config: Any, fields: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A multimodal rotary embedding's sections (``mrope_section``, summing to half a
    head) scaled with the head; where the config leaves them to its model's code (GLM-4V's
    ``[8, 12, 12]`` for a 128-wide head, by ``ignore_keys_at_rope_validation``), written for
    the new head; in each layer type's parameters where they are per type (CohereCompass)."""
    key = "rope_parameters" if isinstance(fields.get("rope_parameters"), dict) else "rope_scaling"
    rope = new.get(key, fields.get(key))
    before, after = _head_dim(fields), _head_dim({**fields, **new})
    if not isinstance(rope, dict) or not after or before == after:
        return {}
    if rope and all(isinstance(v, dict) for v in rope.values()):  # per layer type
        per_type = {kind: _sections(config, params, before, after) for kind, params in rope.items()}
        return {key: per_type} if per_type != rope else {}
    scaled = _sections(config, rope, before, after)
    return {key: scaled} if scaled != rope else {}


def _sections(config: Any, rope: dict[str, Any], before: int | None, after: int) -> dict[str, Any]:
    """``rope`` with its ``mrope_section`` for a head of ``after`` (``before`` wide before)."""
    sections = rope.get("mrope_section")
    if _ints(sections) and before:
        scaled = [max(1, s * after // before) for s in sections]
        scaled[-1] = max(1, after // 2 - sum(scaled[:-1]))
    elif sections is None and "mrope_section" in (getattr(config, "ignore_keys_at_rope_validation", None) or ()):
        half = after // 2
        scaled = [half - 2 * (half // 3), half // 3, half // 3]
    else:
        return rope
    return {**rope, "mrope_section": scaled}


def _window(fields: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Swin's attention window no wider than its last stage's patches on the small image:
    its relative-position table is built for the window, its windows clipped to the stage."""
    now = {**fields, **new}
    window, depths, image, patch = (now.get(k) for k in ("window_size", "depths", "image_size", "patch_size"))
    if not (_int(window) and _ints(depths) and _int(image) and _int(patch) and patch > 0):
        return {}
    last = image // patch // 2 ** (len(depths) - 1)
    return {"window_size": max(1, last)} if 0 < last < window else {}


def _embedding_grid(fields: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """SAM's ``image_embedding_size``: the patches across its (smaller) image."""
    now = {**fields, **new}
    size, image, patch = (now.get(k) for k in ("image_embedding_size", "image_size", "patch_size"))
    if not (_int(size) and _int(image) and _int(patch) and patch > 0) or size == image // patch:
        return {}
    return {"image_embedding_size": image // patch}


def _head_dim(fields: dict[str, Any]) -> int | None:
    if _int(fields.get("head_dim")):
        return int(fields["head_dim"])
    hidden, heads = fields.get("hidden_size"), fields.get("num_attention_heads")
    return hidden // heads if _int(hidden) and _int(heads) and heads else None


def _token_ids(fields: dict[str, Any], vocab: int | None) -> dict[str, Any]:
    """Token ids past the vocabulary moved to its last ids, each to its own."""
    if vocab is None:
        return {}
    out: dict[str, Any] = {}
    moved: dict[int, int] = {}
    for key, value in fields.items():
        if not TOKEN_ID.fullmatch(key):
            continue
        if _int(value) and value >= vocab:
            out[key] = moved.setdefault(value, vocab - 1 - len(moved))
        elif _ints(value) and max(value) >= vocab:
            out[key] = type(value)(moved.setdefault(v, vocab - 1 - len(moved)) if v >= vocab else v for v in value)
    return out
