"""--fx-zoo=transformers: every architecture of the installed transformers, built tiny from
its default config with no download. Engine tests on the registry (the export verdict of ten
architectures against torch.export called directly, nothing fetched), then one pytest
session end to end (filters by type and class, the verified use_cache fix in the JSON
report, the skips table of the merge tool, HFTracer on 4.x and the note that replaces it on 5.x)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import optional
import pytest
import torch
from shared_project import SharedProject

from pytest_fxtrace import _compat
from pytest_fxtrace.options import TraceOptions
from pytest_fxtrace.types import Status
from pytest_fxtrace.zoo.registries import build_case, load_registry, run_case, select
from pytest_fxtrace.zoo.transformers_zoo import MAX_PARAMETERS, has_hftracer

transformers = optional.require("transformers")

# text (encoder, decoders), vision (transformer, convolutional), audio (speech encoder),
# encoder-decoders (text, speech) and a text-image dual encoder
ARCHITECTURES = [
    "BertModel",
    "GPT2Model",
    "LlamaModel",
    "T5Model",
    "BartModel",
    "ViTModel",
    "ResNetModel",
    "WhisperModel",
    "Wav2Vec2Model",
    "CLIPModel",
]


@pytest.fixture(scope="module")
def zoo():
    return load_registry("transformers")


@pytest.mark.slow
@pytest.mark.parametrize("name", ARCHITECTURES)
def test_the_export_verdict_is_torch_exports_own_on_the_same_model_and_inputs(zoo, name):
    report = run_case(zoo, "transformers", name, TraceOptions(backend=("export",)))
    case = build_case(zoo, name)  # the same weights and inputs: each step is seeded by the name
    assert sum(p.numel() for p in case.model.parameters()) < MAX_PARAMETERS
    try:
        torch.export.export(case.model, case.args, dict(case.kwargs), strict=False)
    except Exception as exc:  # the check must have failed, on the same error
        assert report.status is Status.UNTRACEABLE, report.describe()
        assert type(exc).__name__ in (report.error or ""), (report.error, exc)
    else:
        assert report.status is Status.PASSED, report.describe()
        return
    if report.suggestion is not None and report.suggestion.verified:  # the registry's one fix
        assert report.suggestion.text.startswith("use_cache=False in its config")


@pytest.mark.slow
def test_the_use_cache_fix_the_zoo_verifies_makes_torch_export_pass(zoo):
    case = build_case(zoo, "LlamaModel")
    with pytest.raises(RuntimeError, match="DynamicCache"):
        torch.export.export(case.model, case.args, dict(case.kwargs), strict=False)
    fixed = zoo.build("LlamaModel", use_cache=False).eval()
    torch.export.export(fixed, case.args, dict(case.kwargs), strict=False)


def test_the_use_cache_fix_reaches_a_composite_models_text_config(zoo):
    # LlavaModel's decoder reads text_config.use_cache: the top-level field alone changes nothing
    if "LlavaModel" not in zoo.names():  # transformers 4.46 (the torch 2.1 floor's) has no LlavaModel
        pytest.skip(f"transformers {transformers.__version__} has no LlavaModel (4.52 added it)")
    model = zoo.build("LlavaModel", use_cache=False)
    assert model.config.use_cache is False and model.config.text_config.use_cache is False


def test_building_fetches_nothing_and_leaves_the_environment_as_it_was(zoo, monkeypatch):
    attempts: list[object] = []

    def refuse(self, address):
        attempts.append(address)
        raise OSError("the test forbids network access")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    # DETR's default backbone is timm's ResNet-50 by name: a download, unless the zoo swaps it
    for name in ("BertModel", "DetrModel"):
        case = build_case(zoo, name)
        assert sum(p.numel() for p in case.model.parameters()) < MAX_PARAMETERS
    assert attempts == []
    assert "HF_HUB_OFFLINE" not in os.environ


def test_models_are_named_by_class_and_selected_by_class_or_type(zoo):
    names = zoo.names()
    assert {"BertModel", "GPT2Model", "WhisperModel"} <= set(names)
    # 253 architectures on transformers 4.46.3 (the torch 2.1 floor's), over 300 on 4.57 and 5.x
    assert len(names) == len(set(names)) > (300 if hasattr(transformers, "LlavaModel") else 200)
    aliases = zoo.aliases()
    assert select(names, ["bert", "GPT2Model"], [], aliases) == ["BertModel", "GPT2Model"]
    assert "LlamaModel" not in select(names, ["llama*"], ["llama"], aliases)  # code_llama shares the class


def test_fx_traces_with_hftracer_on_4x_and_5x_says_once_that_it_is_gone(zoo):
    if has_hftracer():
        assert zoo.options("BertModel") == {"tracer": "transformers.utils.fx:HFTracer"}
        assert zoo.notes(("fx", "export")) == []
    else:
        assert zoo.options("BertModel") == {}
        (note,) = zoo.notes(("fx", "export"))
        assert "has no HFTracer" in note and "--fx-backend=export" in note
    assert zoo.notes(("export",)) == []


def test_a_model_that_cannot_run_is_a_model_error_naming_the_input(zoo, monkeypatch):
    model_class = transformers.BertModel

    def broken(self, *args, **kwargs):
        raise ValueError("You have to specify bbox")

    monkeypatch.setattr(model_class, "forward", broken)
    report = run_case(zoo, "transformers", "BertModel", TraceOptions(backend=("export",)))
    assert report.status is Status.MODEL_ERROR
    assert "example_inputs failed: forward(input_ids (2, 8)) raised ValueError: You have to specify bbox" in report.message
    # each gentler shrink tried, up to the first too large to be worth building
    assert "[gentler shrinks failed too: narrow: forward(input_ids (2, 8)) raised ValueError" in report.message
    assert "widths kept: " in report.message and "M parameters after shrinking its config" in report.message
    assert "layers only" not in report.message


@pytest.mark.skipif(_compat.export_problem() is not None, reason=str(_compat.export_problem()))
def test_a_model_the_tiny_shrink_breaks_is_built_at_the_first_gentler_level_that_runs(zoo, monkeypatch):
    original = transformers.BertModel.__init__

    def refuses_narrow(self, config, *args, **kwargs):  # as a model tying a size the shrink divides
        if config.hidden_size < 64:
            raise ValueError(f"hidden_size {config.hidden_size} is too narrow")
        original(self, config, *args, **kwargs)

    monkeypatch.setattr(transformers.BertModel, "__init__", refuses_narrow)
    report = run_case(zoo, "transformers", "BertModel", TraceOptions(backend=("export",)))
    assert report.status is Status.PASSED, report.describe()
    assert zoo.shrink_level("BertModel") == "narrow"
    assert "built at shrink level 'narrow', the tighter ones failing (tiny: BertModel(config) raised" in report.message
    first, again = build_case(zoo, "BertModel"), build_case(zoo, "BertModel")  # seeded by the name
    weights = zip(first.model.state_dict().values(), again.model.state_dict().values(), strict=True)
    assert all(torch.equal(a, b) for a, b in weights)
    assert sum(p.numel() for p in first.model.parameters()) < MAX_PARAMETERS


def test_an_input_no_rule_makes_stops_the_ladder(zoo, monkeypatch):
    def forward(self, input_ids, mystery):
        return input_ids

    monkeypatch.setattr(transformers.BertModel, "forward", forward)
    report = run_case(zoo, "transformers", "BertModel", TraceOptions(backend=("export",)))
    assert report.status is Status.MODEL_ERROR
    assert "forward() requires 'mystery', which the zoo has no rule to make" in report.message
    assert "gentler shrinks" not in report.message  # no gentler level makes the input


# an input each needs that the zoo once had no rule for (class, the argument)
INPUT_RULES = [
    ("VideoMAEModel", "pixel_values"),  # a clip: (batch, frames, channels, height, width)
    ("DecisionTransformerModel", "returns_to_go"),  # states, actions, returns, timesteps
    ("Siglip2VisionModel", "spatial_shapes"),  # an image as patches, their mask and grid
    ("TimesFmModel", "past_values_padding"),  # a series' padding and frequency
    ("PerceiverModel", "inputs"),  # embeddings d_model wide
    ("XmodModel", "lang_ids"),  # which language's adapters
    ("LxmertModel", "visual_feats"),  # region features beside the text
    ("Blip2QFormerModel", "encoder_hidden_states"),  # the image states its queries attend to
    ("MusicgenModel", "input_ids"),  # built from its own decoder config, a row per codebook
    ("XCLIPModel", "pixel_values"),  # a clip beside the text
    ("VideoLlama3VisionModel", "merge_sizes"),  # patches, their grid and merge size
    ("PeAudioModel", "input_values"),  # mono audio (batch, 1, samples) beside its text
    ("MuseSparkAudioModel", "input_values"),  # whole frames of 1920 samples
    ("KyutaiSpeechToTextModel", "input_ids"),  # a text stream beside each codebook's
    ("FunAsrNanoEncoder", "input_features_mask"),  # frames stacked num_stacked_frames wide, their mask
    ("AudioFlamingo3Encoder", "input_features_mask"),  # an optional mask its code reads
    ("Qwen3ASREncoder", "input_features"),  # whole windows of 2 * n_window frames
    ("GraniteSpeech5Encoder", "input_features"),  # as wide as its first layer (4 stacked frames of mels)
    ("SpeechT5Model", "decoder_input_values"),  # no pre-nets: hidden states in, to both halves
    ("IdeficsModel", "image_attention_mask"),  # a list of images per text, and which tokens see them
    ("MiniCPMOcrVisionModel", "target_sizes"),  # the image's patch grid
    ("Gemma4AudioModel", "input_features"),  # as many mel bins as its first convolution's channels
    ("ClapModel", "input_features"),  # a spectrogram with a channel axis beside the text
    ("PeVideoModel", "pixel_values_videos"),  # a clip beside the text, at its timm tower's fixed image size
    ("Kosmos2Model", "image_embeds_position_mask"),  # which tokens of the text hold the image's queries
    ("Blip2Model", "input_ids"),  # a text that opens with its image's query tokens
    ("Gemma3nAudioEncoder", "audio_mel_mask"),  # mel features input_feat_size wide, no frame padded
]


@pytest.mark.parametrize(("name", "argument"), INPUT_RULES)
def test_inputs_the_model_requires_are_made_from_its_signature_and_config(zoo, name, argument):
    if name not in zoo.names():
        pytest.skip(f"transformers {transformers.__version__} has no {name}")
    if name == "MusicgenModel" and transformers.__version__.startswith("4."):
        pytest.skip("transformers 4.x's MusicgenConfig() has no default sub-configs")
    if name == "PeVideoModel":
        optional.require("timm")  # its vision tower is a timm ViT
    case = build_case(zoo, name)
    assert argument in case.kwargs, sorted(case.kwargs)
    if name in ("VideoMAEModel", "XCLIPModel"):
        assert case.kwargs["pixel_values"].dim() == 5
    if name == "MusicgenModel":
        assert case.kwargs["input_ids"].shape[0] == 2 * case.model.config.num_codebooks
    if name == "ClapModel":
        assert case.kwargs["input_features"].dim() == 4
    if name == "KyutaiSpeechToTextModel":
        assert case.kwargs["input_ids"].shape[-1] == case.model.config.num_codebooks + 1
    if name == "Blip2Model":
        queries = case.model.config.num_query_tokens
        assert (case.kwargs["input_ids"] == case.model.config.image_token_index).sum(1).tolist() == [queries] * 2
    if name == "PeVideoModel":  # PE's ViT takes 336 pixels only: made whole patches of the small image
        from pytest_fxtrace.zoo.hf_inputs import config_values

        size = next(args["img_size"] for args in config_values(case.model.config, "model_args") if "img_size" in args)
        assert tuple(case.kwargs["pixel_values_videos"].shape[-2:]) == tuple(size) < (336, 336)


def test_a_timm_tower_is_shrunk_through_the_arguments_timms_entrypoint_passes():
    optional.require("timm")
    if not hasattr(transformers, "TimmWrapperConfig"):  # transformers 4.46, the torch 2.1 floor's
        pytest.skip(f"transformers {transformers.__version__} has no TimmWrapperConfig (4.48 added it)")
    from pytest_fxtrace.zoo.timm_tower import shrink_timm_towers

    config = transformers.TimmWrapperConfig()  # timm's resnet50: Bottleneck blocks, layers (3, 4, 6, 3)
    changes = {str(c) for c in shrink_timm_towers(config)}
    assert "model_args['layers'] (3, 4, 6, 3) -> (1, 1, 1, 1)" in changes
    with torch.device("meta"):
        model = transformers.TimmWrapperModel(config)
    assert sum(p.numel() for p in model.parameters()) < MAX_PARAMETERS  # 23.5 M before


# -- one session, end to end ------------------------------------------------------------


def in_the_session(test):
    """A test of the session below: slow, and in the worker that runs the session (--dist loadgroup)."""
    return pytest.mark.slow(pytest.mark.xdist_group(__name__)(test))


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    """``--fx-zoo=transformers`` on BERT (selected by its type) and GPT-2 (by its class), with
    export and fx, the JSON report, then the merge tool's skips table of that report."""
    project = SharedProject(tmp_path_factory.mktemp("transformers_zoo"))
    run = project.runpytest_subprocess(
        "-p", "no:cacheprovider", "--fx-zoo=transformers", "--fx-zoo-filter=bert,GPT2Model",
        "--fx-zoo-exclude=gpt-sw3", "--fx-backend=export,fx", "--fx-report=r.json",
    )
    table = subprocess.run(
        [sys.executable, "-m", "pytest_fxtrace.merge", "r.json", "--skips-table"],
        cwd=project.path, capture_output=True, text=True, timeout=120,
    )
    document = json.loads((project.path / "r.json").read_text())
    records = {(r["nodeid"], r["backend"]): r for r in document["results"]}
    return run, records, table


@in_the_session
def test_the_session_checks_the_selected_architectures_by_class(session):
    run, records, _ = session
    assert sorted({nodeid for nodeid, _ in records}) == ["zoo/transformers::BertModel", "zoo/transformers::GPT2Model"]
    assert records["zoo/transformers::BertModel", "export"]["status"] == "passed", run.stdout.str()[-3000:]


@in_the_session
def test_a_cache_output_export_cannot_take_is_a_finding_with_its_verified_fix(session):
    run, records, _ = session
    gpt2 = records["zoo/transformers::GPT2Model", "export"]
    assert (gpt2["status"], gpt2["category"]) == ("untraceable", "unsupported")
    assert gpt2["suggestion"]["verified"] is True
    assert gpt2["suggestion"]["text"].startswith("use_cache=False in its config")
    assert "fix (verified): use_cache=False in its config" in run.stdout.str()
    assert "Traceback" not in run.stdout.str()


@in_the_session
def test_the_skips_table_has_a_row_per_failing_check(session):
    _, records, table = session
    assert table.returncode == 1, table.stderr  # a check failed, as the pytest run did
    lines = table.stdout.splitlines()
    assert lines[0] == "| class | backend | category | file:line | submodule | reason | verified fix |"
    row = next(line for line in lines if line.startswith("| `GPT2Model` | export |"))
    assert "| unsupported |" in row and "DynamicCache" in row and "use_cache=False" in row
    failing = [r for r in records.values() if r["status"] != "passed"]
    assert len(lines) == 2 + len(failing)


@in_the_session
def test_fx_uses_hftracer_on_4x_and_says_once_on_5x_that_it_is_gone(session):
    run, records, _ = session
    if has_hftracer():
        assert records["zoo/transformers::BertModel", "fx"]["status"] == "passed", run.stdout.str()[-3000:]
    else:
        assert run.stdout.str().count("has no HFTracer") == 1, run.stdout.str()[-3000:]
