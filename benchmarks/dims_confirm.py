"""Issue 39's zoo findings of a dimension that does not stay dynamic, reproduced with plain torch.

Each finding ``--fx-zoo=... --fx-backend=export --fx-dynamic=batch[,seq]`` reported (see
benchmarks/README.md, "Zoo mode asking for a dynamic batch") is redone here with torch,
torchvision and transformers only (no import of pytest_fxtrace), the model built as the zoo
builds it:

* torchvision: ``torchvision.models.get_model(name, weights=None)``, eval; optical flow a pair
  of 1x3x128x128 images (``torch.rand``), the batch made 2 by repeating the image, as the
  plugin makes a requested dimension of size 1 before exporting;
* transformers 4.57.6: the type's default config with the fields the zoo's shrink changes
  for that model set to its values (written out below, per model), built ``Model(config)``,
  eval; the inputs the zoo's ``hf_inputs`` gives it (token ids (2, 8), audio features
  (2, 128, width), a (2, 32, 1) history);

each build seeded as the zoo seeds it (``zlib.crc32(b"build:<name>")``), the inputs too
(``b"inputs:<name>"``). Then, under ``torch.no_grad()``:

1. ``torch.export.export(model, args, kwargs, dynamic_shapes=..., strict=False)`` with
   ``torch.export.Dim.AUTO`` at every dimension the zoo run asked for (batch; batch and seq);
2. the program's size for the finding's dimension (its placeholder: a symbol and its range
   in ``ep.range_constraints``, or a number it was fixed to);
3. ``ep.module()`` and eager at the unseen sizes (1, an odd and an even size other than the
   example's, twice the example), every input carrying the dimension cut or repeated to the
   size; each size is ``ok`` (both ran, ``torch.testing.assert_close`` holds), ``program
   raised`` (its error's first line) where eager ran, ``differs``, or ``eager raised``;
4. the statement behind it: every guard torch's shape environment adds during the export
   is recorded (its sympy expression) with the innermost frame of the model's own code on the
   stack at that moment (``ShapeEnv._log_guard``, wrapped for the export only); for each input,
   the first guard on its dimension that is false with every input of the dimension at the
   size (the call as tried; other sizes at the example's) names it;
5. a few more calls where they say more: just below the program's lower bound (is all of
   1..low-1 refused where eager runs?), just past its upper bound (does eager keep the bound
   too?), and each input alone at a refused size when several carry the dimension.

Checked once against the zoo's own build (2026-11-29): the same configs, weights and inputs.

One line per finding: what plain torch did, and whether it agrees with what the plugin
reported (the sizes' results, the verdict, the statement's file and line).

    nice -n 10 python benchmarks/dims_confirm.py            # every finding
    nice -n 10 python benchmarks/dims_confirm.py --only raft_small,BertModel
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import linecache
import logging
import math
import os
import re
import sys
import sysconfig
import time
import traceback
import warnings
import zlib
from collections.abc import Callable, Iterator

import torch

AUTO = torch.export.Dim.AUTO
Call = tuple[tuple[object, ...], dict[str, object]]
Place = tuple[str, int]  # (input, dimension)


# -- the findings, as the plugin reported them ----------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Claim:
    """What the plugin reported of one dimension (its JSON record's ``dims`` entry; the same at
    3921a86 / 49f9ec5 and at 21c5d9d)."""

    verdict: str  # "unsound", "specialized", "constrained"
    sizes: dict[int, str]  # size -> "ok" / "refused" / "differs" / "model-limit"
    statement: dict[str, str]  # input -> "file.py:line" of the statement it names
    value: int | None = None  # a specialized dimension's size
    range: tuple[int, int | None] | None = None


@dataclasses.dataclass(frozen=True)
class Finding:
    model: str  # as the zoo names it
    build: Callable[[], torch.nn.Module]
    inputs: Callable[[], Call]
    requested: dict[str, tuple[int, ...]]  # every dimension the zoo run asked for (Dim.AUTO)
    judged: tuple[Place, ...]  # the finding's dimension, at each input that carries it
    name: str  # batch / seq
    claim: Claim


def seed(model: str, step: str) -> None:
    torch.manual_seed(zlib.crc32(f"{step}:{model}".encode()))


def torchvision_model(name: str) -> Callable[[], torch.nn.Module]:
    def build() -> torch.nn.Module:
        import torchvision

        seed(name, "build")
        return torchvision.models.get_model(name, weights=None).eval()

    return build


def optical_flow_pair(name: str) -> Callable[[], Call]:
    def make() -> Call:
        seed(name, "inputs")
        shape = (1, 3, 128, 128)
        image1, image2 = torch.rand(shape), torch.rand(shape)
        return (resize(image1, 0, 2), resize(image2, 0, 2)), {}  # a batch of 1 is exported at 2

    return make


def hf_model(name: str, config: Callable[[], object]) -> Callable[[], torch.nn.Module]:
    def build() -> torch.nn.Module:
        import transformers

        seed(name, "build")
        return getattr(transformers, name)(config()).eval()

    return build


def hf_inputs(name: str, make: Callable[[], dict[str, torch.Tensor]]) -> Callable[[], Call]:
    def inputs() -> Call:
        seed(name, "inputs")
        return (), make()

    return inputs


def bert_config() -> object:
    from transformers import BertConfig

    return BertConfig(
        vocab_size=128, hidden_size=48, num_attention_heads=3, intermediate_size=192,
        max_position_embeddings=128, num_hidden_layers=2,
    )  # fmt: skip


PARAKEET_ENCODER = dict(
    hidden_size=32, num_attention_heads=1, num_key_value_heads=1, intermediate_size=128,
    subsampling_conv_channels=8, max_position_embeddings=128, num_hidden_layers=2,
)  # fmt: skip


def parakeet_encoder_config() -> object:
    from transformers import ParakeetEncoderConfig

    return ParakeetEncoderConfig(**PARAKEET_ENCODER)


def parakeet_ctc_config() -> object:
    from transformers import ParakeetCTCConfig

    return ParakeetCTCConfig(vocab_size=128, pad_token_id=127, encoder_config=dict(PARAKEET_ENCODER))


def mctct_config() -> object:
    from transformers import MCTCTConfig

    return MCTCTConfig(
        vocab_size=128, hidden_size=48, intermediate_size=192, num_attention_heads=1, attention_head_dim=48,
        max_position_embeddings=128, num_hidden_layers=2,
    )  # fmt: skip


def gemma3n_audio_config() -> object:
    from transformers import Gemma3nAudioConfig

    return Gemma3nAudioConfig(hidden_size=48, vocab_offset=128, conf_num_attention_heads=1, conf_num_hidden_layers=2)


def patchtst_config() -> object:
    from transformers import PatchTSTConfig

    return PatchTSTConfig(d_model=32, num_attention_heads=1, ffn_dim=128, num_hidden_layers=2)


def patchtsmixer_config() -> object:
    from transformers import PatchTSMixerConfig

    return PatchTSMixerConfig(num_layers=2)


def token_ids() -> dict[str, torch.Tensor]:
    return {"input_ids": torch.randint(1, 128, (2, 8))}  # BERT's vocabulary of 128 less its pad id 0


def features(width: int) -> Callable[[], dict[str, torch.Tensor]]:
    return lambda: {"input_features": torch.randn(2, 128, width)}  # (batch, frames, mel bins)


def gemma3n_audio() -> dict[str, torch.Tensor]:
    return {"audio_mel": torch.randn(2, 128, 128), "audio_mel_mask": torch.zeros(2, 128, dtype=torch.bool)}


def history() -> dict[str, torch.Tensor]:
    return {"past_values": torch.randn(2, 32, 1)}  # (batch, context_length, channels)


REFUSED_1 = {1: "refused"}
RAFT_SIZES = {**REFUSED_1, 3: "ok", 4: "ok", 5: "ok"}
AUDIO_SIZES = {**REFUSED_1, 129: "ok", 130: "ok", 256: "ok"}
PATCH_SIZES = {1: "model-limit", 33: "model-limit", 34: "model-limit", 64: "model-limit"}
RAFT_AT = "raft.py:492"
PARAKEET_AT = {"input_features": "modeling_parakeet.py:353"}


def findings() -> list[Finding]:
    raft = [
        Finding(
            name, torchvision_model(name), optical_flow_pair(name), {"image1": (0,), "image2": (0,)},
            (("image1", 0), ("image2", 0)), "batch",
            Claim("unsound", RAFT_SIZES, {"image1": RAFT_AT, "image2": RAFT_AT}, range=(2, None)),
        )
        for name in ("raft_small", "raft_large")
    ]  # fmt: skip
    audio = {"input_features": (0, 1)}
    parakeet = [
        Finding(
            name, hf_model(name, config), hf_inputs(name, features(80)), audio, (("input_features", 1),), "seq",
            Claim("unsound", AUDIO_SIZES, PARAKEET_AT, range=(9, 1024)),
        )
        for name, config in (("ParakeetEncoder", parakeet_encoder_config), ("ParakeetForCTC", parakeet_ctc_config))
    ]  # fmt: skip
    return [
        *raft,
        *parakeet,
        Finding(
            "MCTCTModel", hf_model("MCTCTModel", mctct_config), hf_inputs("MCTCTModel", features(80)), audio,
            (("input_features", 1),), "seq",
            Claim("unsound", AUDIO_SIZES, {"input_features": "modeling_mctct.py:104"}, range=(4, None)),
        ),
        Finding(
            "Gemma3nAudioEncoder", hf_model("Gemma3nAudioEncoder", gemma3n_audio_config),
            hf_inputs("Gemma3nAudioEncoder", gemma3n_audio), {"audio_mel": (0, 1), "audio_mel_mask": (0, 1)},
            (("audio_mel", 1), ("audio_mel_mask", 1)), "seq",
            Claim(
                "unsound", AUDIO_SIZES,
                {"audio_mel": "modeling_gemma3n.py:701", "audio_mel_mask": "modeling_gemma3n.py:772"},
                range=(13, None),
            ),
        ),
        Finding(
            "BertModel", hf_model("BertModel", bert_config), hf_inputs("BertModel", token_ids), {"input_ids": (0, 1)},
            (("input_ids", 1),), "seq",
            Claim(
                "constrained", {1: "ok", 9: "ok", 10: "ok", 16: "ok"}, {"input_ids": "modeling_bert.py:930"},
                range=(2, 128),
            ),
        ),
        Finding(
            "PatchTSTModel", hf_model("PatchTSTModel", patchtst_config), hf_inputs("PatchTSTModel", history),
            {"past_values": (0, 1)}, (("past_values", 1),), "seq",
            Claim("specialized", PATCH_SIZES, {"past_values": "modeling_patchtst.py:340"}, value=32),
        ),
        Finding(
            "PatchTSMixerModel", hf_model("PatchTSMixerModel", patchtsmixer_config),
            hf_inputs("PatchTSMixerModel", history), {"past_values": (0, 1)}, (("past_values", 1),), "seq",
            Claim("specialized", PATCH_SIZES, {"past_values": "modeling_patchtsmixer.py:901"}, value=32),
        ),
    ]  # fmt: skip


# -- plain torch ------------------------------------------------------------------------------------


def probe_sizes(example: int) -> list[int]:
    """1, an odd and an even size other than the example's, and twice it (or one past the even)."""
    odd = example + 1 if example % 2 == 0 else example + 2
    even = example + 2 if example % 2 == 0 else example + 1
    return sorted({size for size in (1, odd, even, max(2 * example, even + 1)) if size != example})


def resize(tensor: torch.Tensor, dim: int, size: int) -> torch.Tensor:
    """The first ``size`` entries along ``dim``, or the tensor repeated and cut (ids stay ids)."""
    have = tensor.shape[dim]
    if size <= have:
        return tensor.narrow(dim, 0, size).clone()
    repeats = [1] * tensor.dim()
    repeats[dim] = -(-size // have)
    return tensor.repeat(*repeats).narrow(dim, 0, size).clone()


def names_of(model: torch.nn.Module, call: Call) -> dict[str, torch.Tensor]:
    """The call's tensors by forward's argument names (positional ones by their parameter)."""
    import inspect

    parameters = list(inspect.signature(model.forward).parameters)
    args, kwargs = call
    named = {parameters[i]: value for i, value in enumerate(args)}
    named.update(kwargs)
    return {key: value for key, value in named.items() if isinstance(value, torch.Tensor)}


def resized(model: torch.nn.Module, call: Call, places: tuple[Place, ...], size: int) -> Call:
    args, kwargs = call
    positional = list(names_of(model, (args, {})))
    dims: dict[str, list[int]] = {}
    for place, dim in places:
        dims.setdefault(place, []).append(dim)

    def change(name: str, value: object) -> object:
        if isinstance(value, torch.Tensor):
            for dim in dims.get(name, ()):
                value = resize(value, dim, size)
        return value

    new_args = tuple(change(positional[i], value) for i, value in enumerate(args))
    return new_args, {key: change(key, value) for key, value in kwargs.items()}


def dynamic_shapes(model: torch.nn.Module, call: Call, requested: dict[str, tuple[int, ...]]) -> object:
    """export's ``dynamic_shapes``: Dim.AUTO at the requested dimensions, the rest static."""
    args, kwargs = call
    positional = list(names_of(model, (args, {})))
    spec_args = tuple({d: AUTO for d in requested.get(name, ())} or None for name in positional)
    spec_kwargs = {key: {d: AUTO for d in requested.get(key, ())} or None for key in kwargs}
    return spec_args if not kwargs else {**dict(zip(positional, spec_args, strict=True)), **spec_kwargs}


def leaves(value: object) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):  # a transformers ModelOutput is an OrderedDict
        return [t for item in value.values() for t in leaves(item)]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in leaves(item)]
    return []


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"
    return line if len(line) <= 140 else line[:137] + "..."


_TORCH = os.path.dirname(torch.__file__) + os.sep  # not torchvision
_STDLIB = sysconfig.get_paths()["stdlib"]
_HERE = os.path.abspath(__file__)


def user_frame() -> traceback.FrameSummary | None:
    """The innermost frame on the stack of code that is not torch's, Python's or this script's."""
    for frame in reversed(traceback.extract_stack()):
        path = frame.filename
        if path.startswith((_TORCH, _STDLIB, "<")) or os.path.abspath(path) == _HERE:
            continue
        return frame
    return None


@contextlib.contextmanager
def recording_guards() -> Iterator[list[tuple[object, traceback.FrameSummary | None]]]:
    """Every guard the shape environment adds within the block (its sympy expression), with the
    model's statement on the stack then; torch's ``ShapeEnv._log_guard`` wrapped for the block."""
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    recorded: list[tuple[object, traceback.FrameSummary | None]] = []
    original = ShapeEnv._log_guard

    def log_guard(self: ShapeEnv, prefix: str, g: object, *args: object, **kwargs: object) -> None:
        recorded.append((g, user_frame()))
        return original(self, prefix, g, *args, **kwargs)

    ShapeEnv._log_guard = log_guard  # type: ignore[method-assign]
    try:
        yield recorded
    finally:
        ShapeEnv._log_guard = original  # type: ignore[method-assign]


@dataclasses.dataclass
class Program:
    exported: torch.export.ExportedProgram
    sizes: dict[Place, object]  # (input, dim) -> a SymInt or the int it was fixed to
    symbols: dict[Place, object]  # (input, dim) -> the shape environment's symbol created for it
    values: dict[object, int]  # symbol -> its example value
    guards: list[tuple[object, traceback.FrameSummary | None]]


def export(model: torch.nn.Module, call: Call, requested: dict[str, tuple[int, ...]]) -> Program:
    args, kwargs = call
    with recording_guards() as guards:
        exported = torch.export.export(
            model, args, kwargs, dynamic_shapes=dynamic_shapes(model, call, requested), strict=False
        )
    user = set(exported.graph_signature.user_inputs)
    placeholders = [n for n in exported.graph.nodes if n.op == "placeholder" and n.name in user]
    tensors = names_of(model, call)
    sizes = {
        (name, d): size
        for name, node in zip(tensors, placeholders, strict=True)
        for d, size in enumerate(node.meta["val"].shape)
    }
    env = next((s.node.shape_env for s in sizes.values() if isinstance(s, torch.SymInt)), None)
    symbols: dict[Place, object] = {}
    values: dict[object, int] = {}
    if env is not None:
        hints = getattr(env, "backed_var_to_val", None) or getattr(env, "var_to_val", {})
        values = {symbol: int(value) for symbol, value in hints.items()}
        for symbol, sources in env.var_to_sources.items():  # non-strict export: L['image1'].size()[0]
            for source in sources:
                text = source.name if isinstance(source.name, str) else source.name()
                found = re.fullmatch(r"L\['(\w+)'\]\.size\(\)\[(\d+)\]", text)
                if found and found[1] in tensors:
                    symbols.setdefault((found[1], int(found[2])), symbol)
    return Program(exported, sizes, symbols, values, guards)


def failing_statement(
    program: Program, places: tuple[Place, ...], size: int, naming: Place | None = None
) -> tuple[str, str] | None:
    """(the first recorded guard false with every one of ``places`` at ``size`` and the other
    sizes at the example's, where it was added); with ``naming``, the first such guard on that
    input's dimension."""
    values = dict(program.values)
    for place in places:
        symbol = program.symbols.get(place)
        if symbol is None:
            return None
        values[symbol] = size
    import sympy

    own = program.symbols.get(naming) if naming is not None else None
    for guard, frame in program.guards:
        if own is not None and own not in guard.free_symbols:  # type: ignore[attr-defined]
            continue
        try:
            result = guard.xreplace({k: sympy.Integer(v) for k, v in values.items()})  # type: ignore[attr-defined]
        except Exception:
            continue
        if result is sympy.false:
            where = f"{os.path.basename(frame.filename)}:{frame.lineno}" if frame is not None else "?"
            return str(guard), where
    return None


def statement_text(program: Program, where: str) -> str:
    """The source line at ``where`` (``file.py:line``): a recorded guard's, else a loaded module's."""
    base, _, line = where.rpartition(":")
    files = [frame.filename for _guard, frame in program.guards if frame is not None]
    files += [str(getattr(module, "__file__", "") or "") for module in list(sys.modules.values())]
    for path in files:
        if os.path.basename(path) == base and line.isdigit():
            return linecache.getline(path, int(line)).strip()
    return ""


def run_size(model: torch.nn.Module, program: Program, call: Call, name: str, both: bool = False) -> tuple[str, str]:
    """(result, detail) of eager and the program on one call: ok, refused, differs, model-limit
    (with ``both``, a model-limit's detail says what the program did there too)."""
    args, kwargs = call
    seed(name, "check")
    try:
        expected = model(*args, **kwargs)
    except Exception as exc:
        if not both:
            return "model-limit", first_line(exc)
        try:
            program.exported.module()(*args, **kwargs)
            also = "the program ran"
        except Exception as error:
            also = f"the program raised {first_line(error)}"
        return "model-limit", f"{first_line(exc)}; {also}"
    seed(name, "check")
    try:
        actual = program.exported.module()(*args, **kwargs)
    except Exception as exc:
        return "refused", first_line(exc)
    got, want = leaves(actual), leaves(expected)
    if len(got) != len(want):
        return "differs", f"{len(got)} output tensors, eager {len(want)}"
    for a, e in zip(got, want, strict=True):
        try:
            torch.testing.assert_close(a, e)
        except AssertionError as exc:
            return "differs", first_line(exc)
    return "ok", ""


WORDS = {"ok": "ok", "refused": "program raised", "differs": "differs", "model-limit": "eager raised"}


def range_of(program: Program, size: object) -> tuple[int, int | None] | None:
    for symbol, bounds in program.exported.range_constraints.items():
        if str(symbol) == str(size):
            upper = bounds.upper
            return int(bounds.lower), (int(upper) if math.isfinite(float(upper)) else None)
    return None


def fixed_to(size: object) -> int | None:
    """The number the program fixed a dimension to (an int, or a SymInt that is one), else None."""
    if isinstance(size, int):
        return size
    value = size.node.maybe_as_int() if isinstance(size, torch.SymInt) else None
    return int(value) if value is not None else None


def confirm(finding: Finding) -> tuple[str, list[str], bool]:
    """(the finding's line, detail lines, agrees)."""
    quiet = io.StringIO()
    with torch.no_grad(), contextlib.redirect_stdout(quiet), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = finding.build()
        call = finding.inputs()
        program = export(model, call, finding.requested)
        first = finding.judged[0]
        example = names_of(model, call)[first[0]].shape[first[1]]
        size_of = program.sizes[first]
        value = fixed_to(size_of)
        fixed = value is not None
        span = None if fixed else range_of(program, size_of)
        results = {}
        for size in probe_sizes(example):
            results[size] = run_size(model, program, resized(model, call, finding.judged, size), finding.model)
        extra: list[str] = []
        bad = [s for s, (r, _) in results.items() if r in ("refused", "differs")]
        if span is not None and bad and span[0] > 2:  # the whole span below the program's range
            below = span[0] - 1
            result, detail = run_size(model, program, resized(model, call, finding.judged, below), finding.model)
            extra.append(f"also at {below} (below the program's {span[0]}): {WORDS[result]} {detail}".rstrip())
        if bad and len(finding.judged) > 1:  # each input alone at the size, the others at the example's
            for place in finding.judged:
                result, detail = run_size(model, program, resized(model, call, (place,), bad[0]), finding.model)
                own = program.sizes[place]
                bounds = range_of(program, own)
                own_text = f"{own} range {bounds[0]}..{bounds[1] or 'inf'}" if bounds else str(own)
                extra.append(f"`{place[0]}` alone at {bad[0]}: {WORDS[result]} {detail}".rstrip() + f" (its size: {own_text})")
        if span is not None and span[1] is not None:  # past the program's upper bound: does eager keep it?
            past = span[1] + 1
            past_call = resized(model, call, finding.judged, past)
            result, detail = run_size(model, program, past_call, finding.model, both=True)
            extra.append(f"also at {past} (past the program's {span[1]}): {WORDS[result]} {detail}".rstrip())
    # the verdict plain torch gives, as the plugin's words go
    if fixed:
        verdict = "specialized"
    elif bad:
        verdict = "unsound"
    elif span is not None and span[1] is not None:
        verdict = "constrained"
    else:
        verdict = "dynamic"
    at = bad[0] if bad else (span[1] + 1 if verdict == "constrained" and span and span[1] else min(results))
    together = failing_statement(program, finding.judged, at)
    statements: dict[str, str] = {}  # input -> the statement of the first guard on its dimension the size breaks
    for place in finding.judged:
        found = failing_statement(program, finding.judged, at, naming=place)
        statements[place[0]] = found[1] if found else "no guard on it"
    # agreement with the plugin's record
    claim = finding.claim
    disagreements = []
    if verdict != claim.verdict:
        disagreements.append(f"verdict {verdict}, plugin {claim.verdict}")
    if fixed and claim.value is not None and value != claim.value:
        disagreements.append(f"fixed to {value}, plugin {claim.value}")
    if not fixed and claim.range is not None and span != claim.range:
        disagreements.append(f"range {span}, plugin {claim.range}")
    for size, (result, _) in results.items():
        if claim.sizes.get(size) != result:
            disagreements.append(f"size {size}: {result}, plugin {claim.sizes.get(size, 'not tried')}")
    for place, where in claim.statement.items():
        if statements.get(place) != where:
            text = statement_text(program, where)
            disagreements.append(
                f"`{place}` statement: {statements.get(place)}, plugin {where}" + (f" (`{text}`)" if text else "")
            )
    # the line
    dims = ", ".join(f"{p}[{d}]" for p, d in finding.judged)
    if fixed:
        kept = f"fixed to {value}"
    else:
        kept = f"{size_of} range {span[0]}..{span[1] if span[1] is not None else 'inf'}" if span else f"{size_of}"
    shown: set[str] = set()  # each kind of result's detail once
    parts = []
    for size, (result, detail) in results.items():
        parts.append(f"{size} {WORDS[result]}" + (f" ({detail})" if detail and result not in shown else ""))
        shown.add(result)
    tried = "; ".join(parts)
    where = ", ".join(f"`{p}` {w}" for p, w in statements.items())
    agrees = not disagreements
    line = (
        f"{finding.model} {finding.name} ({dims}, example {example}): program {kept}; {tried}; "
        f"=> {verdict} at {where} -- {'AGREES' if agrees else 'DISAGREES: ' + '; '.join(disagreements)}"
    )
    if together is not None:
        text = statement_text(program, together[1])
        extra.insert(0, f"the first guard size {at} breaks: {together[0]} at {together[1]} `{text}`")
    return line, extra, agrees


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated model names (default: every finding)")
    options = parser.parse_args(argv)
    wanted = {n.strip() for n in options.only.split(",") if n.strip()}
    logging.getLogger("torch").setLevel(logging.ERROR)
    import torchvision
    import transformers

    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, transformers {transformers.__version__}")
    start, agreed, total = time.perf_counter(), 0, 0
    for finding in findings():
        if wanted and finding.model not in wanted:
            continue
        begun = time.perf_counter()
        try:
            line, extra, agrees = confirm(finding)
        except Exception as exc:
            line, extra, agrees = f"{finding.model}: could not be checked: {first_line(exc)} -- DISAGREES", [], False
        total += 1
        agreed += agrees
        print(f"{line} [{time.perf_counter() - begun:.1f} s]")
        for text in extra:
            print(f"    {text}")
        sys.stdout.flush()
    print(f"{agreed} of {total} findings agree with plain torch; {time.perf_counter() - start:.1f} s")
    return 0 if agreed == total else 1


if __name__ == "__main__":
    sys.exit(main())
