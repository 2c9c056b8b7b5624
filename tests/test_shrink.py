"""How --fx-zoo=transformers shrinks a config (zoo/shrink.py): small, and as consistent as
before. Configs only, no model is built: fast."""

from __future__ import annotations

import optional
import pytest

from pytest_fxtrace.zoo.shrink import (
    EXPERTS_PER_TOKEN,
    LATENT_QUERIES,
    LEVELS,
    MAX_LAYERS,
    POSITIONS,
    QUERIES,
    VOCAB,
    shrink_config,
)

transformers = optional.require("transformers")
NAMED = {level.name: level for level in LEVELS}


def test_a_decoder_keeps_head_size_times_heads_equal_to_its_width_and_its_grouped_query_ratio():
    config = transformers.LlamaConfig(num_key_value_heads=8)
    changes = {c.field: (c.before, c.after) for c in shrink_config(config)}
    assert (config.hidden_size, config.num_attention_heads, config.num_key_value_heads) == (32, 4, 1)
    assert config.head_dim * config.num_attention_heads == config.hidden_size
    assert config.num_attention_heads % config.num_key_value_heads == 0
    assert config.intermediate_size % 8 == 0 and config.intermediate_size < 200
    assert (config.num_hidden_layers, config.vocab_size, config.max_position_embeddings) == (2, VOCAB, POSITIONS)
    assert changes["hidden_size"] == (4096, 32)  # what a model-error names


def test_an_encoder_keeps_its_ratios_widths_divided_by_one_power_of_two():
    config = transformers.BertConfig()
    shrink_config(config)
    assert config.hidden_size % config.num_attention_heads == 0
    assert config.intermediate_size == 4 * config.hidden_size  # 3072 / 768, as before
    assert config.hidden_size <= 64 and config.num_hidden_layers == 2


def test_nested_configs_are_shrunk_and_token_ids_moved_into_the_smaller_vocabulary():
    config = transformers.LlavaConfig()
    before = config.image_token_index
    fields = {c.field for c in shrink_config(config)}
    assert {"text_config.hidden_size", "vision_config.hidden_size", "vision_config.image_size"} <= fields
    assert before >= VOCAB and 0 <= config.image_token_index < config.text_config.vocab_size
    assert config.vision_config.image_size % config.vision_config.patch_size == 0


def test_a_stage_count_is_not_a_layer_count_and_stage_widths_stay_divisible_by_their_heads():
    config = transformers.SwinConfig()
    shrink_config(config)
    assert config.num_layers == len(config.depths) == 4  # Swin's num_layers is len(depths)
    assert all(d == 1 for d in config.depths)
    widths = [config.embed_dim * 2**i for i in range(len(config.depths))]
    assert all(w % h == 0 for w, h in zip(widths, config.num_heads, strict=True))


class HybridConfig:
    """A hybrid model's config as transformers writes one: a kind per layer, and indices."""

    model_type = "hybrid"

    def __init__(self) -> None:
        self.num_hidden_layers = 8
        self.layer_types = ["mamba", "mamba", "mamba", "attention", "mamba", "mamba", "mamba", "attention"]
        self.moe_layer_indices = [5, 7]
        self.hidden_size = 256

    def to_dict(self) -> dict:
        return dict(vars(self))


def test_a_hybrid_model_keeps_a_layer_of_each_kind_and_its_layer_indices_follow():
    config = HybridConfig()
    shrink_config(config)
    assert config.layer_types == ["mamba", "attention", "mamba"]  # layers 0, 3 and 5
    assert config.num_hidden_layers == 3 <= MAX_LAYERS
    assert config.moe_layer_indices == [2]  # layer 5 is now the third; layer 7 is gone


def test_a_timm_backbone_becomes_transformers_resnet_and_nothing_is_pretrained():
    from pytest_fxtrace.zoo.transformers_zoo import TransformersZoo, _no_downloads

    config = transformers.DetrConfig(use_timm_backbone=True, use_pretrained_backbone=True)
    changes = {str(c) for c in _no_downloads(config, TransformersZoo()._configs)}
    assert getattr(config, "use_pretrained_backbone", False) is False
    if getattr(config, "backbone_config", None) is not None:  # transformers 5: a config; 4: a flag
        assert config.backbone_config.model_type == "resnet", changes


@pytest.mark.parametrize("name", ["WhisperConfig"])
def test_audio_inputs_follow_the_shrunk_positions(name):
    from pytest_fxtrace.zoo.hf_inputs import _audio_layouts

    config = getattr(transformers, name)()
    shrink_config(config)
    assert config.max_source_positions <= POSITIONS
    assert _audio_layouts(config, "input_features")[0] == (2, config.num_mel_bins, 2 * config.max_source_positions)


def test_each_gentler_level_of_the_ladder_keeps_more_of_the_config():
    sizes = {}
    for level in LEVELS:
        config = transformers.LlamaConfig()
        shrink_config(config, level)
        sizes[level.name] = (config.hidden_size, config.num_attention_heads, config.vocab_size, config.num_hidden_layers)
    assert sizes["tiny"] == (32, 4, VOCAB, 2)
    assert sizes["narrow"] == (128, 4, VOCAB, 2)  # widths divided by less, heads as at tiny
    assert sizes["widths kept"] == (4096, 32, VOCAB, 2)  # only layers, vocabulary, positions cut
    assert sizes["layers only"] == (4096, 32, 32000, 2)
    assert sizes["two heads"] == sizes["tiny"]  # its heads stay 2 or more at the tiny level
    dino = {}
    for name in ("tiny", "two heads"):
        config = transformers.GroundingDinoConfig()  # its text enhancer halves encoder_attention_heads
        shrink_config(config, NAMED[name])
        dino[name] = (config.encoder_attention_heads, config.d_model)
    assert dino == {"tiny": (1, 32), "two heads": (2, 32)}  # the widths as tiny as before


def test_a_head_size_left_none_is_width_over_heads_for_the_code_that_does_arithmetic_with_it():
    if not hasattr(transformers, "MinistralConfig"):  # transformers 4.46, the torch 2.1 floor's
        pytest.skip(f"transformers {transformers.__version__} has no MinistralConfig")
    config = transformers.MinistralConfig()  # its default head_dim is None, as HunYuan's
    shrink_config(config)
    assert config.head_dim == config.hidden_size // config.num_attention_heads


def test_a_forecasters_context_left_none_is_its_horizon_as_documented():
    config = transformers.TimeSeriesTransformerConfig()
    shrink_config(config)
    assert config.prediction_length and config.context_length == config.prediction_length


def test_a_detectors_object_queries_fit_the_small_images_tokens():
    config = transformers.RTDetrConfig()
    shrink_config(config)
    assert config.num_queries == QUERIES


def test_layers_repeating_a_pattern_of_kinds_keep_one_of_each_kind():
    recurrent = transformers.RecurrentGemmaConfig()
    shrink_config(recurrent)
    assert recurrent.num_hidden_layers == 3 and len(set(recurrent.layers_block_type)) == 2  # recurrent, attention
    jamba = transformers.JambaConfig()  # attention at layer 4 of every 8
    shrink_config(jamba)
    assert jamba.num_hidden_layers <= MAX_LAYERS and "attention" in jamba.layers_block_type
    # a hybrid whose default config places no attention layer (all Mamba), though it sizes one
    hybrids = [getattr(transformers, n)() for n in ("BambaConfig", "GraniteMoeHybridConfig") if hasattr(transformers, n)]
    for hybrid in hybrids:
        if hybrid.layers_block_type is None:  # transformers 4.x's GraniteMoeHybrid names no kinds
            continue
        shrink_config(hybrid)
        assert len(set(hybrid.layers_block_type)) == 2, (type(hybrid).__name__, hybrid.layers_block_type)
    if hasattr(transformers, "Gemma3nTextConfig"):  # its last layers reuse an earlier layer's cache
        gemma = transformers.Gemma3nTextConfig()
        shrink_config(gemma)
        making = gemma.layer_types[: gemma.num_hidden_layers - gemma.num_kv_shared_layers]
        assert set(making) == set(gemma.layer_types)  # each kind still has a layer that makes its cache
    mamba = transformers.MambaConfig()  # a pure Mamba sizes no attention: left so
    shrink_config(mamba)
    assert set(getattr(mamba, "layer_types", None) or ["linear_attention"]) == {"linear_attention"}


class VideoConfig:
    """A video model's config as VideoPrism writes one: patches as a tubelet's last sizes."""

    model_type = "video"

    def __init__(self) -> None:
        self.image_size = 288
        self.tubelet_size = [1, 18, 18]
        self.hidden_size = 768

    def to_dict(self) -> dict:
        return dict(vars(self))


def test_a_video_models_frames_are_whole_tubelets():
    config = VideoConfig()
    shrink_config(config)
    assert config.image_size % 18 == 0 and config.image_size <= 288


def test_sizes_the_code_ties_to_a_width_follow_it_groups_windows_and_codebooks():
    mimi = transformers.MimiConfig()  # its upsampling convolution has a group per channel
    shrink_config(mimi)
    assert mimi.upsample_groups == mimi.hidden_size
    assert mimi.vector_quantization_hidden_dimension == mimi.codebook_dim
    if hasattr(transformers, "RadioConfig"):  # a patch's pixels, not a width; its grid of positions neither
        radio = transformers.RadioConfig()
        shrink_config(radio)
        assert radio.patch_dim == radio.num_channels * radio.patch_size**2
    layout = transformers.LayoutLMv3Config()  # x, y, width and height embeddings side by side make the width
    shrink_config(layout)
    assert 4 * layout.coordinate_size + 2 * layout.shape_size == layout.hidden_size
    if hasattr(transformers, "FalconH1Config"):  # its Mamba's inner width is heads x head size
        falcon = transformers.FalconH1Config()
        shrink_config(falcon, NAMED["narrow"])
        assert falcon.mamba_d_ssm == falcon.mamba_n_heads * falcon.mamba_d_head < 1024
    sam = transformers.SamConfig()  # its positional features, half its vision tower's output, feed the prompt encoder
    shrink_config(sam, NAMED["one divisor"])
    assert 2 * sam.vision_config.num_pos_feats == sam.vision_config.output_channels == sam.prompt_encoder_config.hidden_size
    if hasattr(transformers, "Sam2Config"):  # its feature maps reshaped to backbone_feature_sizes: the image over 4, 8, 16
        sam2 = transformers.Sam2Config()
        shrink_config(sam2, NAMED["one divisor"])
        image = sam2.vision_config.backbone_config.image_size
        assert sam2.vision_config.backbone_feature_sizes == [[image[0] // s] * 2 for s in (4, 8, 16)]
    vit = transformers.ViTConfig()  # its pooler's width is its width (VisionTextDualEncoder projects it)
    shrink_config(vit)
    assert getattr(vit, "pooler_output_size", None) in (None, vit.hidden_size)  # transformers 4.46: none
    if hasattr(transformers, "Sapiens2Config"):  # key/value heads per layer, divided as the heads are
        sapiens = transformers.Sapiens2Config()
        shrink_config(sapiens)
        per_layer = sapiens.num_key_value_heads_per_layer
        assert len(per_layer) == sapiens.num_hidden_layers
        assert all(sapiens.num_attention_heads % kv == 0 for kv in per_layer), per_layer
    swin = transformers.SwinConfig()  # its relative-position table is built for the window
    shrink_config(swin)
    assert swin.window_size <= swin.image_size // swin.patch_size // 2 ** (len(swin.depths) - 1)


class GroupNormConfig:
    """A convolutional tower normalised in groups, as Emu3's VQ-VAE writes one."""

    model_type = "groupnorm"

    def __init__(self) -> None:
        self.hidden_size = 1024
        self.base_channels = 256
        self.num_groups = 32

    def to_dict(self) -> dict:
        return dict(vars(self))


def test_a_group_norms_groups_are_divided_with_its_channels():
    config = GroupNormConfig()
    shrink_config(config)
    assert config.base_channels < 256 and config.base_channels % config.num_groups == 0


class Backbone:
    """A backbone nested in a detector's config, as PP-DocLayoutV3's: its own main width."""

    model_type = "backbone"

    def __init__(self) -> None:
        self.embedding_size = 64
        self.stage_out_channels = [128, 512, 1024, 2048]

    def to_dict(self) -> dict:
        return dict(vars(self))


class Detector:
    """The detector: the widths of the backbone's stages it reads, copied into its own config."""

    model_type = "detector"

    def __init__(self) -> None:
        self.d_model = 256
        self.encoder_in_channels = [512, 1024, 2048]
        self.backbone_config = Backbone()

    def to_dict(self) -> dict:
        return dict(vars(self))


def test_one_divisor_level_divides_every_nested_configs_widths_alike():
    by_name = {level.name: level for level in LEVELS}
    tiny, shared = Detector(), Detector()
    shrink_config(tiny, by_name["tiny"])  # each config its own divisor: 8 and 2
    shrink_config(shared, by_name["one divisor"])  # the smaller for both
    assert tiny.encoder_in_channels != tiny.backbone_config.stage_out_channels[1:]
    assert shared.encoder_in_channels == shared.backbone_config.stage_out_channels[1:]
    assert shared.d_model == 128


def test_groups_of_experts_divide_the_fewer_experts_and_a_compound_scaled_network_is_its_base():
    if hasattr(transformers, "DeepseekV3Config"):  # not in transformers 4.46, the torch 2.1 floor's
        deepseek = transformers.DeepseekV3Config()  # 256 experts in 8 groups, the best 4 groups picked
        shrink_config(deepseek)
        experts, groups = deepseek.n_routed_experts, deepseek.n_group
        assert experts % groups == 0 and experts // groups >= EXPERTS_PER_TOKEN
        assert deepseek.topk_group <= groups
    efficientnet = transformers.EfficientNetConfig()  # B7: widths x 2.0, depths x 3.1, last width 2560
    shrink_config(efficientnet, NAMED["widths kept"])
    assert (efficientnet.width_coefficient, efficientnet.depth_coefficient, efficientnet.hidden_dim) == (1.0, 1.0, 1280)


class UnsetConfig:
    """Fields a default config leaves None that its code reads: heads not dividing the width
    (AyaVision's SigLIP), an MLP kind per layer (DeepSeek-OCR 2), a token indexer (Qwen4-Exp)."""

    model_type = "unset"

    def __init__(self) -> None:
        self.hidden_size = 1152
        self.num_attention_heads = 14
        self.num_hidden_layers = 4
        self.mlp_layer_types = None
        self.layer_types = ["linear_attention", "indexed_attention"] * 2
        self.indexer_n_heads = self.indexer_kv_heads = self.indexer_head_dim = None
        self.indexer_budget = self.indexer_compress_ratio = None

    def to_dict(self) -> dict:
        return dict(vars(self))


def test_fields_a_default_config_leaves_unset_are_filled_consistently():
    config = UnsetConfig()
    shrink_config(config)
    assert config.hidden_size % config.num_attention_heads == 0
    assert config.mlp_layer_types == ["dense", "sparse"]
    assert config.indexer_kv_heads == 1 and config.indexer_budget % config.indexer_compress_ratio == 0
    if hasattr(transformers, "CohereCompassTextConfig"):  # rotary parameters per layer type, left {}
        compass = transformers.CohereCompassTextConfig()
        shrink_config(compass)
        assert set(compass.rope_parameters) == set(compass.layer_types)
        for params in compass.rope_parameters.values():  # its sections, half the new head
            assert sum(params["mrope_section"]) == compass.head_dim // 2 and params["rope_type"] == "default"
    blip = transformers.Blip2Config()  # image_token_index None: its code compares ids with it
    shrink_config(blip)
    assert blip.num_query_tokens == LATENT_QUERIES  # 32: as many image tokens in an 8-token text
    assert blip.image_token_index == VOCAB - 1 < blip.text_config.vocab_size
    kosmos = transformers.Kosmos2Config()  # its image's latent queries, tokens of the text too
    shrink_config(kosmos)
    assert kosmos.latent_query_num == LATENT_QUERIES
    rotary = UnsetConfig()  # a rotary decoder works out its head size itself (GLM-4.5V): its heads kept
    rotary.rope_parameters = {"rope_type": "default"}
    shrink_config(rotary)
    assert rotary.num_attention_heads == 14 // 2
