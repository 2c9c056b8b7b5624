"""Which fields of a transformers config name which size (``zoo/shrink.py`` cuts them, the
rules in ``zoo/shrink_rules.py`` keep them consistent), the sizes they are cut to, and the small
readers both use. Knows no transformers: a config is any object whose ``vars()`` hold its fields.
"""

from __future__ import annotations

import re
from typing import TypeGuard

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
LAYERS_FIELD = re.compile(r"(?:\w+_)?(?:num_\w*layers|n_layers?|\w*_layers|layers|num_blocks|depth)")
NOT_LAYERS_FIELD = re.compile(r"\w*(?:shared|kv_shared|layers_block_type|attn_layer\w*)\w*")
# a count per layer too (Sapiens2's num_key_value_heads_per_layer)
HEADS_FIELD = re.compile(r"(?:\w+_)?(?:num_\w*heads|n_heads?|\w*attention_heads|heads|num_kv_heads|n_head_kv)(?:_per_layer)?")
KV_HEADS_FIELD = re.compile(r"\w*(?:key_value_heads|kv_heads|n_head_kv)(?:_per_layer)?")
HEAD_DIM_FIELD = re.compile(r"(?:\w+_)?(?:head_dim|headdim|d_kv|attention_head_dim|attention_head_size|kv_channels|d_head|dim_head|head_size)")
WIDTH_FIELD = re.compile(
    r"(?:\w+_)?(?:hidden_size|d_model|n_embd|embed_dim|embedding_size|hidden_dim|dim|d_embed|projection_dim"
    r"|intermediate_size|ffn_dim|d_ff|n_inner|d_inner|ffn_hidden_size|mlp_dim|dim_feedforward|feedforward_dim"
    r"|hidden_sizes|embed_dims|hidden_channels|channels|embedding_dim|d_latents|conv_dim|dim_ff|dff|proj_size"
    r"|out_channels|in_channels|width|embed_dim_per_stage|neck_hidden_sizes|num_filters|hidden_dims|dims|emb_dim"
    r"|\w*_channels?|\w*_filters|lora_rank|\w*_hidden_size|projection_size|\w*hidden_dimension|upsample_groups"
    r"|\w*d_ssm|coordinate_size|shape_size|\w*_channel_list|num_pos_feats|pooler_output_size)"
)
NOT_WIDTH_FIELD = re.compile(
    r"(?:num_channels|input_channels|\w*in_chans|image_channels|audio_channels|num_mel_bins|\w*input_dim|feature_size"
    r"|image_embedding_size|pos_emb_\w+|\w*patch_dim"
    r"|\w*input_feat\w*)"
)
# feed-forward widths: a multiple of 8 (grouped expert matmuls want 16-byte strides)
FFN_FIELD = re.compile(r"(?:\w+_)?(?:intermediate_size|ffn_dim|d_ff|n_inner|ffn_hidden_size|mlp_dim|dim_feedforward|dff)")
EXPERTS_FIELD = re.compile(r"(?:num_experts|num_local_experts|n_routed_experts|moe_num_experts|num_routed_experts)")
EXPERT_GROUPS_FIELD = re.compile(r"(?:n_group|num_expert_groups?|moe_n_group)")  # DeepSeek's groups of experts
TOPK_GROUPS_FIELD = re.compile(r"(?:topk_group|moe_topk_group)")
TOPK_FIELD = re.compile(r"(?:num_experts_per_tok|num_experts_per_token|moe_top_k|moe_topk|num_selected_experts|moe_k|top_k_experts|n_activated_experts)")
VOCAB_FIELD = re.compile(r"\w*vocab\w*")
POSITIONS_FIELD = re.compile(r"(?:\w+_)?(?:max_position_embeddings|n_positions|max_positions|max_seq_len|n_ctx|max_\w+_positions)")
TOKEN_ID = re.compile(r"\w*(?:token_id|token_index)")
IMAGE_FIELD = re.compile(r"(?:\w+_)?image_size|crop_size|max_img_size")
PATCH_FIELD = re.compile(r"(?:\w+_)?patch_size")
STAGE_LIST_FIELDS = ("depths", "depth", "hidden_sizes", "embed_dims", "num_heads", "embed_dim")
LAYER_INDICES_FIELD = re.compile(r"\w*(?:layer_ids|layers_indices|_indexes|_idxs|layer_indices|block_indexes)")


def is_config(value: object) -> bool:
    return hasattr(value, "model_type") and hasattr(value, "to_dict") and not isinstance(value, type)


def is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def is_int_list(value: object) -> TypeGuard[list[int] | tuple[int, ...]]:
    return isinstance(value, (list, tuple)) and bool(value) and all(is_int(v) for v in value)


def pow2_divisor(values: list[int], limit: int) -> int:
    """The largest power of two up to ``limit`` dividing every value."""
    divisor = 1
    while divisor * 2 <= limit and all(v % (divisor * 2) == 0 for v in values):
        divisor *= 2
    return divisor


def config_fields(config: object) -> dict[str, object]:
    return {k: v for k, v in vars(config).items() if not k.startswith("_")}
