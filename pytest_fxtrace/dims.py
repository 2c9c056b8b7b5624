"""Dimensions a user asks to stay dynamic, and what a check found of each (issue 39).

``dynamic=`` takes, besides ``None`` / ``False`` / ``True``, the structure of torch's
``dynamic_shapes`` keyed by ``forward``'s argument names, a name (or a ``torch.export.Dim``,
whose ``min`` / ``max`` are kept) per dimension::

    @pytest.mark.traceable(backend="export", dynamic={"x": {0: "batch"}})
    @pytest.mark.traceable(backend="export", dynamic={"input_ids": {0: "batch", 1: "seq"}})

or, from the command line, the ini file and zoo mode, presets mapped to dimensions by each
input's layout (``--fx-dynamic=batch``, ``batch,seq``, ``spatial``; see ``preset_dims``).

Each requested dimension gets a ``DimVerdict``: ``dynamic`` (its range), ``specialized`` (the
value the program fixed it to, and the user's statement that did), ``constrained`` (a range or
a multiple eager itself keeps: a table's length, a reshape), or ``unsound`` (the program refuses
a size eager runs, or answers otherwise) -- after the program and eager ran at sizes no recorded
call had (``probe_sizes``). ``specialized`` and ``unsound`` fail the check.

Plain data and parsing: imports neither torch nor pytest (the JSON report, the xdist controller
and ``python -m pytest_fxtrace.merge`` read the verdicts).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence

from pytest_fxtrace.types import Location

PRESETS = ("batch", "seq", "spatial")  # --fx-dynamic=batch,seq; what each maps to: preset_dims

# a dimension's verdict (the JSON ids)
DYNAMIC, SPECIALIZED, CONSTRAINED, UNSOUND = "dynamic", "specialized", "constrained", "unsound"
FAILING = frozenset({SPECIALIZED, UNSOUND})

# what one unseen size did (``SizeResult.result``)
OK = "ok"  # the program ran and matched eager, values and shape
REFUSED = "refused"  # the program raised where eager ran
DIFFERS = "differs"  # both ran, the answers differ
MODEL_LIMIT = "model-limit"  # eager itself raised: the model's own limit, not a finding
# torch.compile ran it and matched eager, but compiled the model again for it: past size 1
# (which Dynamo always specializes), the dimension is held to the range the failed guard kept
RECOMPILED = "recompiled"


class DimError(ValueError):
    """A ``dynamic=`` value that names no argument or dimension of the model (a usage error)."""


@dataclasses.dataclass(frozen=True)
class DimSpec:
    """One dimension asked to stay dynamic: the input (a ``forward`` argument, or a place in it
    as ``leaves`` names them: ``images[0]``), the dimension, its name, and the range asked."""

    input: str
    dim: int
    name: str
    min: int | None = None
    max: int | None = None

    def __str__(self) -> str:
        return f"`{self.input}` dim {self.dim} ({self.name})"


@dataclasses.dataclass(frozen=True)
class DimRequest:
    """What ``dynamic=`` asked for beyond True / False / None: dimensions by argument name
    (``specs``), or presets mapped by layout once the inputs are known (``presets``)."""

    specs: tuple[DimSpec, ...] = ()
    presets: tuple[str, ...] = ()

    def to_json(self) -> object:
        """The option as a report's options and a fix's marker text show it."""
        if self.presets:
            return ",".join(self.presets)
        found: dict[str, dict[int, object]] = {}
        for spec in self.specs:
            value: object = spec.name
            if spec.min is not None or spec.max is not None:
                value = {"name": spec.name, "min": spec.min, "max": spec.max}
            found.setdefault(spec.input, {})[spec.dim] = value
        return found


@dataclasses.dataclass(frozen=True)
class SizeResult:
    """One unseen size tried: the size, and what the program did there against eager."""

    size: int
    result: str  # OK, REFUSED, DIFFERS, MODEL_LIMIT, RECOMPILED
    detail: str = ""  # the guard that refused it, the difference, eager's error; not in JSON

    def to_json(self) -> dict[str, object]:
        return {"size": self.size, "result": self.result}


@dataclasses.dataclass(frozen=True)
class DimVerdict:
    """What a check found of one requested dimension (the record's ``dims`` entry)."""

    spec: DimSpec
    verdict: str  # DYNAMIC, SPECIALIZED, CONSTRAINED, UNSOUND
    value: int | None = None  # the size a specialized dimension was fixed to
    range: tuple[int, int | None] | None = None  # the program's range of it (None upper: unbounded)
    multiple_of: int | None = None
    location: Location | None = None  # the statement that pinned, constrained or broke it
    sizes: tuple[SizeResult, ...] = ()
    guard: str = ""  # torch's words for the guard behind a refusal or a constraint
    # a constrained dimension as torch.export.Dim writes it (paste-ready), and whether export
    # took the whole request so (``verified``); not in the JSON record
    as_dim: str = ""
    as_dim_verified: bool = False
    graph: str = "the program"  # what ran at the sizes, in the message: "the compiled model"

    @property
    def failing(self) -> bool:
        return self.verdict in FAILING

    def line(self) -> str:
        """One line of the terminal message."""
        what = {
            DYNAMIC: lambda: f"dynamic, {_range_text(self.range)}",
            SPECIALIZED: lambda: f"specialized to {self.value}",
            CONSTRAINED: lambda: "constrained, " + ", ".join(self._constraint()),
            UNSOUND: lambda: "unsound: " + self._unsound(),
        }[self.verdict]()
        where = f" by `{self.location.source}` at {self.location}" if self.location is not None else ""
        if self.location is None and self.guard and self.guard not in what:
            if self.verdict == CONSTRAINED:
                where = f" (torch's guard: {self.guard})"  # a statement of torch's own, not the user's
            elif self.verdict == SPECIALIZED:
                where = f" ({self.guard})"  # fixed by a conversion (ONNX), not by a statement
        if self.verdict == UNSOUND and self.location is not None:
            where = f", at `{self.location.source}` ({self.location})"
        tried = ", ".join(f"{s.size} {s.result}" for s in self.sizes)
        spelled = ""
        if self.as_dim:
            spelled = f"; as a Dim: {self.as_dim}" + (" (exported so: verified)" if self.as_dim_verified else "")
        return f"{self.spec}: {what}{where}" + (f"; sizes tried: {tried}" if tried else "") + spelled

    def summary(self) -> str:
        """The verdict in a few words, for the failure's first line (``line`` has the rest)."""
        what = {SPECIALIZED: f"specialized to {self.value}", UNSOUND: "unsound"}.get(self.verdict, self.verdict)
        where = f" at `{self.location.source}` ({self.location})" if self.location is not None else ""
        return f"{self.spec} {what}{where}"

    def _constraint(self) -> list[str]:
        parts = [_range_text(self.range)] if self.range is not None else []
        if self.multiple_of:
            parts.append(f"a multiple of {self.multiple_of}")
        again = [str(s.size) for s in self.sizes if s.result == RECOMPILED and s.size >= 2]
        if again:
            guard = f" ({self.guard})" if self.guard else ""
            parts.append(f"compiled again at size {', '.join(again)}{guard}")
        return parts or [_range_text(self.range)]

    def _unsound(self) -> str:
        refused = [s for s in self.sizes if s.result == REFUSED]
        differs = [s for s in self.sizes if s.result == DIFFERS]
        parts = []
        if refused:
            guard = f" ({self.guard})" if self.guard else ""
            parts.append(f"{self.graph} refuses size {', '.join(str(s.size) for s in refused)}, which eager runs{guard}")
        if differs:
            detail = differs[0].detail
            parts.append(
                f"{self.graph} answers otherwise than eager at size {', '.join(str(s.size) for s in differs)}"
                + (f" ({detail})" if detail else "")
            )
        return "; ".join(parts)

    def to_json(self) -> dict[str, object]:
        location = self.location
        return {
            "input": self.spec.input,
            "dim": self.spec.dim,
            "name": self.spec.name,
            "verdict": self.verdict,
            "value": self.value,
            "range": list(self.range) if self.range is not None else None,
            "multiple_of": self.multiple_of,
            "path": location.path if location is not None else None,
            "line": location.line if location is not None else None,
            "statement": location.source if location is not None else None,
            "sizes": [size.to_json() for size in self.sizes],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> DimVerdict:
        path, line = data.get("path"), data.get("line")
        location = None
        if isinstance(path, str) and isinstance(line, int):
            location = Location(path, line, str(data.get("statement") or ""))
        raw_range = data.get("range")
        span = None
        if isinstance(raw_range, list) and len(raw_range) == 2 and isinstance(raw_range[0], int):
            span = (raw_range[0], raw_range[1] if isinstance(raw_range[1], int) else None)
        sizes = data.get("sizes")
        value, multiple, dim = data.get("value"), data.get("multiple_of"), data.get("dim")
        return cls(
            DimSpec(str(data.get("input", "")), dim if isinstance(dim, int) else 0, str(data.get("name", ""))),
            str(data.get("verdict", "")),
            value if isinstance(value, int) else None,
            span,
            multiple if isinstance(multiple, int) else None,
            location,
            tuple(
                SizeResult(int(s["size"]), str(s["result"]))
                for s in sizes if isinstance(s, Mapping) and isinstance(s.get("size"), int)
            ) if isinstance(sizes, list) else (),
        )  # fmt: skip


def _range_text(span: tuple[int, int | None] | None) -> str:
    if span is None:
        return "range unknown"
    low, high = span
    return f"range {low}..{high if high is not None else 'inf'}"


# the change in code for a dimension pinned or broken at a statement, by what the statement does
_CODE_FIXES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bint\(\s*\w+(\.\w+)*\.(shape|size)\b"), "keep the size symbolic: use `x.shape[i]` as it is, not `int(...)` of it"),
    (re.compile(r"\.(view|reshape|expand|repeat)\([^)]*\b\d+\b"), "write the size from the input (`x.shape[0]`, or -1 for one dimension) instead of the literal number"),
    (re.compile(r"\btorch\.(ones|zeros|full|empty|randn|rand|arange)\([^)]*\b\d+\b"), "make the tensor from the input's size: `x.new_ones(x.shape)`, `torch.zeros_like(x)`, `torch.arange(x.shape[1])`"),
    (re.compile(r"\[[^\]]*:\s*\d+\s*\]"), "slice by the input's size (`self.pos[:, : x.shape[1]]`) instead of a literal bound"),
    (re.compile(r"^\s*(if|elif|while)\b.*\.(shape|size)\b"), "no branch on a size: the same code for every size (or torch.cond), so the program keeps one path that is right at each"),
)


def dims_failure(verdicts: Sequence[DimVerdict]) -> tuple[str, DimVerdict] | None:
    """(the failure's words after "<Model> exported, but ", its first failing dimension) when a
    dimension is ``specialized`` or ``unsound``; None when every one holds."""
    failing = [verdict for verdict in verdicts if verdict.failing]
    if not failing:
        return None
    count = f"{len(failing)} of {len(verdicts)} dimensions asked to stay dynamic do not"
    if len(verdicts) == 1:
        count = "the dimension asked to stay dynamic does not"
    return f"{count}: " + "; ".join(verdict.summary() for verdict in failing), failing[0]


# the statement is none of the above: what holds for any (the size is what was asked dynamic)
_ANY_STATEMENT = (
    "write the statement so it holds at every size of the dimension: sizes read from the input "
    "(`x.shape[i]`, -1), no literal size, no branch on a size, nothing that assumes a size of at least 2"
)


def dim_code_fix(verdict: DimVerdict) -> str:
    """The change in code for a specialized or unsound dimension, from its statement
    (``view(4, -1)`` -> a size from the input; ``torch.ones(8, 16)`` -> ``x.new_ones``), else
    what holds for any statement (never ``dynamic=False``: the user asked for the dimension)."""
    statement = verdict.location.source if verdict.location is not None else ""
    for pattern, fix in _CODE_FIXES:
        if pattern.search(statement):
            return f"{fix} (`{statement.strip()}`)"
    return _ANY_STATEMENT + (f" (`{statement.strip()}`)" if statement.strip() else "")


# -- the option ----------------------------------------------------------------------------


def parse_request(value: object, what: str) -> DimRequest:
    """``dynamic=`` as a ``DimRequest``: a preset string (``"batch"``, ``"batch,seq"``) or a
    mapping of argument name -> {dimension: name or Dim} / a sequence with a name, Dim or
    None per dimension. Raises ``DimError`` naming what is wrong and what it takes."""
    if isinstance(value, str):
        presets = tuple(p.strip().lower() for p in value.split(",") if p.strip())
        unknown = [p for p in presets if p not in PRESETS]
        if not presets or unknown:
            raise DimError(
                f"{what}: unknown preset {', '.join(map(repr, unknown)) or repr(value)}; expected "
                f"auto, true, false, or presets among {', '.join(PRESETS)} (e.g. --fx-dynamic=batch,seq)"
            )
        return DimRequest(presets=tuple(dict.fromkeys(presets)))
    if not isinstance(value, Mapping) or not value:
        raise DimError(
            f"{what}: expected None, True, False, a preset ('batch', 'batch,seq', 'spatial') or a dict "
            f"of forward's argument names -> {{dimension: name}} (dynamic={{'x': {{0: 'batch'}}}}), got {value!r}"
        )
    specs: list[DimSpec] = []
    for argument, dims in value.items():
        if not isinstance(argument, str):
            raise DimError(f"{what}: argument names are strings, got {argument!r}")
        pairs: Iterable[tuple[object, object]]
        if isinstance(dims, Mapping):
            pairs = dims.items()
        elif isinstance(dims, Sequence) and not isinstance(dims, str):
            pairs = enumerate(dims)
        else:
            raise DimError(
                f"{what}: {argument!r} takes a dict of dimension -> name ({{0: 'batch'}}) or a list with "
                f"a name or None per dimension, got {dims!r}"
            )
        for dim, named in pairs:
            if named is None:
                continue
            if isinstance(dim, bool) or not isinstance(dim, int) or dim < 0:
                raise DimError(f"{what}: {argument!r}: a dimension is a whole number of at least 0, got {dim!r}")
            specs.append(_spec(argument, dim, named, what))
    if not specs:
        raise DimError(f"{what}: no dimension asked to be dynamic in {value!r}")
    return DimRequest(specs=tuple(specs))


def _spec(argument: str, dim: int, named: object, what: str) -> DimSpec:
    if isinstance(named, str) and named.strip():
        return DimSpec(argument, dim, named.strip())
    if isinstance(named, Mapping):  # the JSON form (DimRequest.to_json)
        low, high = named.get("min"), named.get("max")
        return DimSpec(argument, dim, str(named.get("name") or f"{argument}_{dim}"), _bound(low), _bound(high))
    # a torch.export.Dim (a class with __name__, min, max) or Dim.AUTO / Dim.DYNAMIC (an enum)
    name = getattr(named, "__name__", None)
    if isinstance(name, str) and hasattr(named, "min") and hasattr(named, "max"):
        low, high = getattr(named, "min", None), getattr(named, "max", None)
        return DimSpec(argument, dim, name, _bound(low, floor=True), _bound(high))
    if type(named).__name__ == "_DimHint" or str(named).endswith(("AUTO", "DYNAMIC")):
        return DimSpec(argument, dim, f"{argument}_{dim}")
    raise DimError(
        f"{what}: {argument!r} dimension {dim}: expected a name ('batch') or a torch.export.Dim, got {named!r}"
    )


def _bound(value: object, floor: bool = False) -> int | None:
    """A range bound as a user gave it; a Dim's defaults (0 / 2 below, a huge int above) are
    no bound asked for."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    if value >= 2**31 - 1 or floor and value <= 0:
        return None
    return value


# -- which dimensions, for a call -----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Input:
    """One input value of a call as the request sees it: its place, shape and dtype name."""

    place: str
    shape: tuple[int, ...]
    dtype: str  # "float32", "int64", "bool", ...


_TOKEN_NAMES = ("input_ids", "attention_mask", "token_type_ids", "position_ids", "labels", "decoder_input_ids")


def preset_dims(presets: Sequence[str], inputs: Sequence[Input]) -> list[DimSpec]:
    """The dimensions presets stand for, by each input's layout:

    * ``batch``: dimension 0 of every tensor input;
    * ``seq``: dimension 1 of token ids and masks (a 2-d integer or boolean tensor, or a
      transformers input by name: ``input_ids``, ``attention_mask``, ...) and of a 3-d float
      sequence (batch, length, features);
    * ``spatial``: dimensions 2 and 3 (``height``, ``width``) of a 4-d image batch.

    Raises ``DimError`` for a preset no input has."""
    found: list[DimSpec] = []
    for preset in presets:
        before = len(found)
        for leaf in inputs:
            rank, integer = len(leaf.shape), not leaf.dtype.startswith(("float", "bfloat", "complex"))
            last = leaf.place.rpartition("[")[2].strip("'\"]") or leaf.place
            if preset == "batch" and rank >= 1:
                found.append(DimSpec(leaf.place, 0, "batch"))
            elif preset == "seq" and rank >= 2 and (
                last in _TOKEN_NAMES or (rank == 2 and integer) or (rank == 3 and not integer)
            ):
                found.append(DimSpec(leaf.place, 1, "seq"))
            elif preset == "spatial" and rank == 4 and not integer:
                found.extend([DimSpec(leaf.place, 2, "height"), DimSpec(leaf.place, 3, "width")])
        if len(found) == before:
            shown = ", ".join(f"{leaf.place} {leaf.dtype}{list(leaf.shape)}" for leaf in inputs) or "none"
            raise DimError(f"dynamic={preset!r}: no input has a {preset} dimension (tensor inputs: {shown})")
    return found


def requested_dims(request: DimRequest, inputs: Sequence[Input], arguments: Sequence[str]) -> list[DimSpec]:
    """The request's dimensions for a call's ``inputs``; ``arguments``: forward's parameter
    names. An argument forward does not take, one the call did not pass as a tensor, or a
    dimension past a tensor's rank is a ``DimError`` that names it and what there is."""
    if request.presets:
        return preset_dims(request.presets, inputs)
    by_place = {leaf.place: leaf for leaf in inputs}
    for spec in request.specs:
        leaf = by_place.get(spec.input)
        if leaf is None:
            if spec.input not in arguments:
                known = ", ".join(arguments) or "none"
                raise DimError(f"dynamic: forward takes no argument {spec.input!r} (its arguments: {known})")
            tensors = ", ".join(p for p in by_place if p.startswith(spec.input)) or "none"
            raise DimError(
                f"dynamic: {spec.input!r} is not a tensor in the recorded call (tensor places under it: {tensors})"
            )
        if spec.dim >= len(leaf.shape):
            raise DimError(
                f"dynamic: {spec.input!r} has {len(leaf.shape)} dimensions (shape {list(leaf.shape)}), "
                f"so no dimension {spec.dim}"
            )
    return list(request.specs)


def probe_sizes(example: int, low: int | None = None, high: int | None = None) -> list[int]:
    """Sizes no recorded call had, for a dimension whose example size is ``example``: 1, an odd
    and an even size other than the example's, and a larger one (twice it), inside
    ``[low, high]`` when the user gave a range; in increasing order, each once.

    Example::

        probe_sizes(8)  # [1, 9, 10, 16]
        probe_sizes(8, high=12)  # [1, 9, 10, 12]"""
    odd = example + 1 if example % 2 == 0 else example + 2
    even = example + 2 if example % 2 == 0 else example + 1
    sizes = [1, odd, even, max(2 * example, even + 1)]
    lo, hi = low if low is not None else 1, high
    kept = []
    for size in sizes:
        size = max(size, lo)
        if hi is not None:
            size = min(size, hi)
        if size != example and size not in kept:
            kept.append(size)
    return sorted(kept)
