"""transformers models as their test suites would check them: HF's own ``HFTracer`` by
the ``tracer`` option, and the default tracer's failure on a transformers model, whose
verified fix is that tracer. transformers is pinned to 4.57.6, the last release with
``transformers.utils.fx`` (5.0 removed HFTracer)."""

from __future__ import annotations

import importlib.util
import json

import optional
import pytest

optional.require("transformers")
if not importlib.util.find_spec("transformers.utils.fx"):
    pytest.skip(
        "transformers.utils.fx (HFTracer) was removed in transformers 5.0; these tests run on 4.x "
        "(tox.ini: the tests and tests-torch21 environments)",
        allow_module_level=True,
    )

USER_TESTS = """
import pytest, torch
from transformers import BertConfig, BertModel

IDS = torch.randint(0, 100, (2, 16), generator=torch.Generator().manual_seed(0))


def tiny_bert():
    config = BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64,
    )
    return BertModel(config).eval()


@pytest.mark.traceable(tracer="transformers.utils.fx:HFTracer")
def test_bert_with_hftracer():
    out = tiny_bert()(input_ids=IDS, attention_mask=torch.ones_like(IDS))
    assert out.last_hidden_state.shape == (2, 16, 32)


@pytest.mark.traceable
def test_bert_with_the_default_tracer():
    tiny_bert()(input_ids=IDS)
"""


@pytest.mark.slow
def test_hf_tracer_checks_a_transformers_model_and_is_the_verified_fix_for_the_default_tracer(
    pytester: pytest.Pytester,
):
    pytester.makepyfile(test_bert=USER_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--fx-report=report.json")
    result.assert_outcomes(passed=1, failed=1)
    # HFTracer keeps placeholders only for the traced inputs: the replay passes those by name
    report = {
        r["nodeid"].rpartition("::")[2]: r
        for r in json.loads((pytester.path / "report.json").read_text())["results"]
    }
    assert report["test_bert_with_hftracer"]["status"] == "passed"
    failed = report["test_bert_with_the_default_tracer"]
    assert (failed["status"], failed["category"]) == ("untraceable", "type-conversion")
    assert failed["location"]["path"].endswith("transformers/models/bert/modeling_bert.py")
    assert failed["suggestion"]["verified"] is True
    assert failed["suggestion"]["options"] == {"tracer": "transformers.utils.fx:HFTracer"}
    result.stdout.fnmatch_lines(
        [
            "*BertModel is not traceable: `buffered_token_type_ids = self.embeddings.token_type_ids[[]:, :seq_length[]]`"
            " at *modeling_bert.py:* converts a traced value to a Python number*",
            "*fix (verified): @pytest.mark.traceable(tracer='transformers.utils.fx:HFTracer')",
        ]
    )
    assert "Traceback" not in result.stdout.str()


def test_hf_tracer_s_own_proxy_is_not_blamed_for_the_model_s_line():
    # FlaubertModel asserts on a traced value: HFTracer's HFProxy.__bool__ hands it on to
    # torch.fx's, which raises inside transformers/utils/fx.py; the line is the model's
    import torch
    from transformers import FlaubertConfig, FlaubertModel

    import pytest_fxtrace

    config = FlaubertConfig(vocab_size=100, emb_dim=32, n_layers=1, n_heads=2, max_position_embeddings=64)
    model = FlaubertModel(config).eval()
    ids = torch.randint(0, 100, (2, 8), generator=torch.Generator().manual_seed(0))
    report = pytest_fxtrace.check_traceable(model, (), {"input_ids": ids}, tracer="transformers.utils.fx:HFTracer")
    assert (report.status, report.category) == ("untraceable", "control-flow"), report.describe()
    assert report.location.path.endswith("transformers/models/flaubert/modeling_flaubert.py"), report.describe()
    assert report.location.source == "assert lengths.max().item() <= slen", report.describe()


def test_an_architecture_hf_tracer_does_not_support_is_said_to_be_so():
    # HFTracer on Whisper fails reading a config attribute its dummy inputs need
    # (input_feat_per_channel); transformers' own symbolic_trace refuses the architecture
    import torch
    from transformers import WhisperConfig, WhisperModel
    from transformers.utils.fx import symbolic_trace

    import pytest_fxtrace

    config = WhisperConfig(
        vocab_size=100, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1, d_model=16,
        encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
        encoder_ffn_dim=16, decoder_ffn_dim=16, num_mel_bins=8, max_source_positions=8, max_target_positions=8,
    )  # fmt: skip
    model = WhisperModel(config).eval()
    with pytest.raises(NotImplementedError, match="Model WhisperModel is not supported yet"):
        symbolic_trace(model, input_names=["input_features", "decoder_input_ids"])
    inputs = {"input_features": torch.randn(1, 8, 16), "decoder_input_ids": torch.tensor([[1, 2]])}
    report = pytest_fxtrace.check_traceable(model, (), inputs, tracer="transformers.utils.fx:HFTracer")
    assert (report.status, report.category) == ("untraceable", "unsupported"), report.describe()
    assert report.message.startswith(
        "WhisperModel is not traceable: is an architecture transformers' HFTracer does not support "
        "(transformers.utils.fx.symbolic_trace refuses it: 'Model WhisperModel is not supported yet')"
    ), report.message
    assert "input_feat_per_channel" in report.describe()  # what tracing it anyway raised
