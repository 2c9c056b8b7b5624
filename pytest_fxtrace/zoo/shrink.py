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
import reprlib
from collections.abc import Iterator
from typing import TypeGuard

from pytest_fxtrace.zoo.shrink_fields import (
    EXPERTS,
    EXPERTS_FIELD,
    EXPERTS_PER_TOKEN,
    FFN_FIELD,
    HEAD_DIM_FIELD,
    HEADS_FIELD,
    IMAGE,
    IMAGE_FIELD,
    KV_HEADS_FIELD,
    LATENT_QUERIES,
    LAYER_INDICES_FIELD,
    LAYERS,
    LAYERS_FIELD,
    MAX_HEADS_DIVISOR,
    MAX_LAYERS,
    MIN_WIDTH,
    NOT_LAYERS_FIELD,
    NOT_WIDTH_FIELD,
    POSITIONS,
    POSITIONS_FIELD,
    QUERIES,
    STAGE_LIST_FIELDS,
    TOPK_FIELD,
    VOCAB,
    VOCAB_FIELD,
    WIDTH_FIELD,
    WIDTH_TARGET,
    config_fields,
    is_config,
    is_int,
    is_int_list,
    pow2_divisor,
)
from pytest_fxtrace.zoo.shrink_rules import (
    attention_layer,
    compound_scaling,
    defaults,
    doubling_stages,
    embedding_grid,
    expert_groups,
    heads_dividing_width,
    indexer,
    kv_shared,
    rope_per_layer_type,
    rope_sections,
    token_ids,
    window,
)

_SHORT = reprlib.Repr()  # a per-layer list of 76 names, shown as its first few
_SHORT.maxlist = _SHORT.maxtuple = 4
_SHORT.maxstring = 40


@dataclasses.dataclass(frozen=True)
class Change:
    """One field a shrink changed: ``text_config.hidden_size 4096 -> 32``."""

    field: str
    before: object
    after: object

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


# a field's small value: a size, or a size per stage
Size = int | list[int] | tuple[int, ...]


def plan(config: object, level: Level = LEVELS[0], width: int | None = None) -> Shrink:
    """The divisors for ``config`` (its own fields, not its nested configs) at ``level``;
    ``width``: the width divisor to use (one for a whole tree of configs) instead of its own."""
    if level.width_target is None:
        return Shrink(width=1, heads=1, sizes=level.sizes, widths=False)
    fields = config_fields(config)
    # key/value heads follow (a fraction of the heads, at least one): they do not limit the divisor
    heads = [v for k, v in fields.items() if HEADS_FIELD.fullmatch(k) and not KV_HEADS_FIELD.fullmatch(k) and is_int(v) and v > 0]
    heads += [x for k, v in fields.items() if HEADS_FIELD.fullmatch(k) and is_int_list(v) for x in v if x > 0]
    head_divisor = pow2_divisor(heads, MAX_HEADS_DIVISOR) if heads else 1
    while head_divisor > 1 and any(1 < h < level.min_heads * head_divisor for h in heads):
        head_divisor //= 2
    width = width_divisor(config, level.width_target) if width is None else width
    # a head's size is divided by width / heads: it must stay a whole, even number
    dims = [v for k, v in fields.items() if HEAD_DIM_FIELD.fullmatch(k) and is_int(v) and v > 0]
    while head_divisor > 1 and width % head_divisor == 0 and any(
        (d * head_divisor) % width or (d * head_divisor // width) % 2 for d in dims
    ):
        head_divisor //= 2
    return Shrink(width=width, heads=head_divisor, sizes=level.sizes)


def width_divisor(config: object, target: int) -> int:
    """The power of two dividing ``config``'s main width down to ``target`` or just above."""
    fields = config_fields(config)
    keys: tuple[str, ...] = ("embed_dim",) if is_int_list(fields.get("depths")) else ()  # Swin: the first stage's width
    keys += ("hidden_size", "d_model", "n_embd", "embed_dim", "dim", "embedding_size", "hidden_dim")
    main = next((v for k in keys if is_int(v := fields.get(k)) and v > 0), None)
    if main is None:  # XLM's emb_dim, a codec's channels: the widest width, or a stage list's narrowest
        widths = [v for k, v in fields.items() if WIDTH_FIELD.fullmatch(k) and not NOT_WIDTH_FIELD.fullmatch(k) and is_int(v)]
        lists = [v for k, v in fields.items() if WIDTH_FIELD.fullmatch(k) and is_int_list(v)]
        main = max(widths) if widths else min(lists[0]) if lists else target
    width = 1
    while main // (width * 2) >= target and main % (width * 2) == 0:
        width *= 2
    return width


def _walk(config: object, prefix: str = "") -> Iterator[tuple[str, object]]:
    """``config`` and every config nested in it, with its field path."""
    yield prefix, config
    for key, value in config_fields(config).items():
        if is_config(value):
            yield from _walk(value, f"{prefix}{key}.")
        elif isinstance(value, (list, tuple)) and value and all(is_config(v) for v in value):
            for index, item in enumerate(value):
                yield from _walk(item, f"{prefix}{key}[{index}].")


def nested_configs(config: object) -> Iterator[object]:
    """``config`` and every config nested in it, outermost first."""
    return (node for _, node in _walk(config))


def shrink_config(config: object, level: Level = LEVELS[0]) -> list[Change]:
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
        vocabs = [v for _, n in _walk(node) if is_int(v := getattr(n, "vocab_size", None)) and v > 0]
        moved = token_ids(config_fields(node), vocabs[0] if vocabs else None)
        for key, after in moved.items():
            changes.append(Change(prefix + key, getattr(node, key), after))
            setattr(node, key, after)
    return changes


def _feature_grids(node: object, prefix: str, changes: list[Change]) -> list[Change]:
    """Feature maps' sizes (SAM 2's ``backbone_feature_sizes``, ``[[256, 256], [128,
    128], [64, 64]]``: its 1024-pixel image over 4, 8 and 16) scaled as the image of this
    config or one nested in it was (its code reshapes each map to them)."""
    images = [c for c in changes if c.field.startswith(prefix) and IMAGE_FIELD.fullmatch(c.field.rpartition(".")[2])]
    before, after = (images[0].before, images[0].after) if images else (None, None)
    before, after = (b[0] if is_int_list(b) else b for b in (before, after))
    if not (is_int(before) and is_int(after) and 0 < after < before):
        return []
    out = []
    for key, value in config_fields(node).items():
        if key.endswith("feature_sizes") and isinstance(value, list) and value and all(is_int_list(v) for v in value):
            grids = [type(v)(max(1, x * after // before) for x in v) for v in value]
            out.append(Change(prefix + key, value, grids))
            setattr(node, key, grids)
    return out


def _shrink_one(config: object, prefix: str, level: Level, width: int | None) -> list[Change]:
    how = plan(config, level, width)
    fields = config_fields(config)
    kept = _kept_layers(fields)
    new: dict[str, object] = {}
    for key, value in fields.items():
        small = _shrunk(key, value, how, fields)
        if small is not None and small != value:
            new[key] = small
    new.update(defaults(fields, new))
    new.update(expert_groups(fields, new))
    new.update(compound_scaling({**fields, **new}))
    new.update(doubling_stages({**fields, **new}))
    new.update(heads_dividing_width(fields, new))
    new.update(indexer(fields, new))
    if kept is not None:
        new.update(_per_layer({**fields, **new}, *kept))  # a per-layer list of heads cut once divided
        if "layer_types" in fields and fields["layer_types"] is None:  # LFM2-MoE's default: its code indexes it
            new["layer_types"] = ["full_attention"] * len(kept[1])
        if "mlp_layer_types" in fields and fields["mlp_layer_types"] is None:  # DeepSeek-OCR 2's, as documented
            new["mlp_layer_types"] = ["dense"] + ["sparse"] * (len(kept[1]) - 1)
        new.update(kv_shared(fields, {**fields, **new}, len(kept[1])))
    new.update(attention_layer(fields, new))
    new.update(rope_per_layer_type(config, {**fields, **new}))
    new.update(rope_sections(config, fields, new))
    new.update(window(fields, new))
    new.update(embedding_grid(fields, new))
    changes = []
    for key, after in new.items():
        changes.append(Change(prefix + key, fields[key], after))
        setattr(config, key, after)
    return changes


def _is_layer_count(value: object, key: str, fields: dict[str, object] | None = None) -> TypeGuard[int]:
    """A count of layers; not a count of stages (Swin's ``num_layers``, ``len(depths)``)."""
    if not (is_int(value) and value > 0 and LAYERS_FIELD.fullmatch(key) and not NOT_LAYERS_FIELD.fullmatch(key)):
        return False
    stages = [len(v) for k, v in (fields or {}).items() if k in STAGE_LIST_FIELDS and isinstance(v, (list, tuple))]
    return value not in stages


def _shrunk(key: str, value: object, how: Shrink, fields: dict[str, object]) -> Size | None:
    """The small value of one field, or None to keep it."""
    if is_int_list(value) and key in ("depths", "depth") or key.endswith("_depths") or key == "num_layers_per_stage":
        return type(value)(min(v, 1) for v in value) if is_int_list(value) else None
    if EXPERTS_FIELD.fullmatch(key) and is_int(value) and value > 0:
        return min(value, EXPERTS)
    if TOPK_FIELD.fullmatch(key) and is_int(value) and value > 0:
        return min(value, EXPERTS_PER_TOKEN)
    if how.widths:
        small = _narrowed(key, value, how)
        if small is not None:
            return small
    if not how.sizes:
        return None
    if VOCAB_FIELD.fullmatch(key) and is_int(value) and value > VOCAB:
        return VOCAB
    if POSITIONS_FIELD.fullmatch(key) and is_int(value) and value > POSITIONS:
        return POSITIONS
    if key == "num_queries" and is_int(value) and value > QUERIES:  # a detector's top-k of a small image's tokens
        return QUERIES
    if key in ("latent_query_num", "num_query_tokens") and is_int(value) and value > LATENT_QUERIES:
        return LATENT_QUERIES  # tokens of the text hold them (Kosmos-2's latent queries, BLIP-2's Q-Former's)
    if IMAGE_FIELD.fullmatch(key):
        return _image_size(key, value, fields)
    if key == "visual_prompt_size" and is_int(value) and is_int(image := fields.get("max_img_size")):
        small = _image_size("max_img_size", image, fields)  # TVP's pad, cut with its image
        return max(1, value * small // image) if is_int(small) else None
    return None


def _narrowed(key: str, value: object, how: Shrink) -> Size | None:
    """A head size, head count or width divided by the plan's divisors, or None."""
    if HEAD_DIM_FIELD.fullmatch(key) and is_int(value) and value > 0:
        return max(2, value * how.heads // how.width)
    if HEADS_FIELD.fullmatch(key):
        if is_int(value) and value > 0:
            return max(1, value // how.heads)
        if is_int_list(value):
            return type(value)(max(1, v // how.heads) for v in value)
    if key in ("num_groups", "norm_num_groups") and is_int(value) and value > 1:  # a GroupNorm's: channels / groups kept
        return max(1, value // how.width)
    if WIDTH_FIELD.fullmatch(key) and not NOT_WIDTH_FIELD.fullmatch(key):
        if is_int(value) and value > 1:
            small = max(MIN_WIDTH if value >= MIN_WIDTH else value, value // how.width)
            return -(-small // 8) * 8 if FFN_FIELD.fullmatch(key) else small
        if is_int_list(value):
            return type(value)(max(MIN_WIDTH if v >= MIN_WIDTH else v, v // how.width) for v in value)
    return None


def _image_size(key: str, value: object, fields: dict[str, object]) -> Size | None:
    own = key.replace("image_size", "patch_size") if key.endswith("image_size") else "patch_size"
    patch = fields.get(own, fields.get("patch_size"))
    patch = patch if patch is not None else fields.get("tubelet_size")  # a video's (frames, rows, columns)
    patch = patch[-1] if is_int_list(patch) else patch
    target = patch * -(-IMAGE // patch) if is_int(patch) and patch > 0 else IMAGE  # whole patches
    if is_int(value):
        return min(value, target)
    if is_int_list(value):
        return type(value)(min(v, target) for v in value)
    return None


def _kept_layers(fields: dict[str, object]) -> tuple[int, list[int]] | None:
    """(the layer count, the layers kept): the first ``LAYERS``, and the first of each kind
    a per-layer list or a list of layer indices names (a hybrid model keeps an attention
    layer and a Mamba layer), at most ``MAX_LAYERS``."""
    counts = [v for k, v in fields.items() if _is_layer_count(v, k, fields)]
    if not counts:
        return None
    total = max(counts)
    kept: list[int] = []
    for key, value in fields.items():
        if _is_per_layer(value, key, total):
            firsts: dict[str, int] = {}
            for index, item in enumerate(value):
                firsts.setdefault(repr(item), index)
            kept += firsts.values()
        elif LAYER_INDICES_FIELD.fullmatch(key) and is_int_list(value) and 0 <= min(value) < total:
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


def _is_cycle(value: object, total: int) -> TypeGuard[list[str] | tuple[str, ...]]:
    """A pattern of layer kinds the layers repeat: the layers kept are a prefix of it."""
    return (
        isinstance(value, (list, tuple))
        and 1 < len(value) < total
        and all(isinstance(v, str) for v in value)
        and len(set(value)) > 1
    )


def _is_per_layer(value: object, key: str, total: int) -> TypeGuard[list[object] | tuple[object, ...]]:
    return isinstance(value, (list, tuple)) and len(value) == total > 1 and not LAYER_INDICES_FIELD.fullmatch(key)


def _per_layer(fields: dict[str, object], total: int, kept: list[int]) -> dict[str, object]:
    """The layer counts, the lists with a value per layer and the lists of layer indices,
    for the layers kept."""
    out: dict[str, object] = {}
    for key, value in fields.items():
        if _is_layer_count(value, key, fields):
            out[key] = len(kept) if value == total else min(value, len(kept))
        elif _is_per_layer(value, key, total):
            out[key] = type(value)(value[i] for i in kept)
        elif LAYER_INDICES_FIELD.fullmatch(key) and is_int_list(value) and max(value) >= len(kept):
            out[key] = type(value)(kept.index(i) for i in value if i in kept) or type(value)([len(kept) - 1])
        elif key.endswith("_period") and is_int(value) and is_int(offset := fields.get(key[:-7] + "_offset")):
            if offset >= len(kept):  # Jamba: attention at layer 4 of every 8; now at 0 of every 2
                out[key], out[key[:-7] + "_offset"] = len(kept), offset % len(kept)
    return {k: v for k, v in out.items() if v != fields[k]}


