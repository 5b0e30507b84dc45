"""The rules of the fuzz benchmark's objects that JSON Schema cannot say: the CRDs' own CEL rules
(`x-kubernetes-validations`, as deploy/crds states them) and, for pods, the rules of Kubernetes' pod validation
that the benchmark says in CEL beside the PodSpec (`benchmarks.fuzz_objects.POD_RULES`).

They are evaluated with a CEL library (common-expression-language) on each object as the API server would see it:
defaulted from the schema first, then every rule of every field present, with Kubernetes' string extensions
(`split`, `lowerAscii`, ...). A rule that reads `oldSelf` only judges updates and is left out: the benchmark creates.

`Rules.repair` makes an object the generator means to be valid satisfy them, with as small an edit as it finds: at
the first field whose rules fail, another value of an enum or a boolean, a string the failing rule names (`'.'`,
`'karpenter.sh'`), a field or an item removed where the schema lets it go, or the field itself removed. Each edit
must leave fewer of the field's rules failing and the failing one passing, so repairing ends; an object it cannot
repair stays as it is, and `failures` says so (the benchmark then counts it invalid).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

import cel
from cel.stdlib import add_stdlib_to_context

Path = tuple[Any, ...]

QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|[numkMGTPE]?)\Z"
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def quantity(value: Any) -> Decimal | None:
    """A Kubernetes quantity's value (a JSON number is read as its text, as the API server reads it); None for
    anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    found = QUANTITY.match(value if isinstance(value, str) else repr(value))
    if found is None:
        return None
    number, suffix = Decimal(found["number"]), found["suffix"]
    try:
        if suffix in _BINARY:
            return number * _BINARY[suffix]
        if suffix[:1] in ("e", "E") and len(suffix) > 1:
            return number.scaleb(int(suffix[1:]))
        return number.scaleb(_DECIMAL[suffix])
    except InvalidOperation:
        return None


def _compare(value: Any, bound: Any) -> int:
    """-1, 0 or 1 as the quantity `value` is below, at or above the quantity `bound`; 2 when either is none."""
    left, right = quantity(value), quantity(bound)
    if left is None or right is None:
        return 2
    return (left > right) - (left < right)


def _whole(value: Any) -> bool:
    amount = quantity(value)
    return amount is not None and amount == amount.to_integral_value()


def _whole_multiple(value: Any, unit: Any) -> bool:
    """Whether the quantity `value` is a whole, non-negative multiple of the quantity `unit`."""
    amount, step = quantity(value), quantity(unit)
    return amount is not None and step is not None and amount >= 0 and step > 0 and amount % step == 0


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "isQuantity": lambda value: quantity(value) is not None,
    "quantityCompare": _compare,
    "isWholeQuantity": _whole,
    "isWholeMultiple": _whole_multiple,
    "isUnique": lambda values: len(values) == len({json.dumps(v, sort_keys=True) for v in values}),
}
"""What the pod rules call beside CEL's own functions: the quantity checks Kubernetes' validation makes (its
own CEL library has `quantity()` objects, which this library cannot define), and uniqueness of a list. None
raises: the library reports an exception out of a function on standard error."""


@dataclass(frozen=True, slots=True)
class Failure:
    path: Path
    """Where the rule stands, from the object's content (`spec`, ...)."""
    rule: str

    def __str__(self) -> str:
        where = "".join(f"[{key}]" if isinstance(key, int) else f".{key}" for key in self.path).lstrip(".")
        return f"{where or '(object)'}: {self.rule}"


class Rules:
    """The rules of one kind, from its structural schema (`x-kubernetes-validations` on any field)."""

    def __init__(self, openapi: dict[str, Any], words: Sequence[str] = ()) -> None:
        self.openapi = openapi
        self.words = list(words)
        """Strings a repair may put in a field besides those its failing rule names."""
        self._context = cel.Context()
        add_stdlib_to_context(self._context)
        for name, function in FUNCTIONS.items():
            self._context.add_function(name, function)
        self._programs: dict[str, Any] = {}

    # --- judging ----------------------------------------------------------------------------------------------

    def failures(self, content: Any) -> list[Failure]:
        """Every rule the content (defaulted as the API server would) breaks, outermost field first."""
        return list(self._failing(self.openapi, defaulted(self.openapi, content), ()))

    def _failing(self, schema: dict[str, Any], value: Any, at: Path) -> Iterator[Failure]:
        for path, node_schema, node in walk(schema, value, at):
            rules = rules_of(node_schema)
            if rules:
                yield from (Failure(path, rule) for rule in self.broken(rules, node))

    def holds(self, rule: str, value: Any) -> bool:
        """Whether `rule` holds with `self` the value."""
        return not self.broken([rule], value)

    def broken(self, rules: Sequence[str], value: Any) -> list[str]:
        """The rules that do not hold with `self` the value; a rule that cannot be evaluated does not, as on the
        API server (an index out of range, a field missing, an `int()` of a word)."""
        self._context.add_variable("self", value)  # converting the value is most of the cost: once for all
        failing = []
        for rule in rules:
            program = self._programs.get(rule)
            if program is None:
                program = self._programs[rule] = cel.compile(rule)
            try:
                if program.execute(self._context) is not True:
                    failing.append(rule)
            except Exception:  # every evaluation error is a refusal
                failing.append(rule)
        return failing

    # --- repairing --------------------------------------------------------------------------------------------

    def repair(self, content: Any, steps: int = 100) -> Any:
        """The content with its rules satisfied as far as small edits can (a copy; the content is not changed)."""
        value = copy.deepcopy(content)
        seen = {_key(value)}
        for _ in range(steps):
            fixed = next(
                (
                    trial
                    for failure in self.failures(value)
                    if (trial := self._repaired(value, failure, seen)) is not None
                ),
                None,
            )
            if fixed is None:
                break
            value = fixed
            seen.add(_key(value))
        return value

    def _repaired(self, value: Any, failure: Failure, seen: set[str]) -> Any | None:
        """The first edit around the failing field that makes its rule hold, leaves no more of the rules under
        that field failing and makes an object not seen before (`_edits`; then two of the rule's own strings, or
        an item added and one of them, for a rule such as "the list has both '.' and 'cluster.local'"); None when
        there is none."""
        schema = schema_at(self.openapi, failure.path)
        node = at(value, failure.path)
        before = self._count_under(schema, node, failure.path)
        progress = self._progress(failure.rule, defaulted(schema, node))

        def accepted(trial: Any) -> bool:
            if _key(trial) in seen:
                return False
            try:
                changed = at(trial, failure.path)
            except KeyError:
                return True  # the failing field itself was removed
            judged = defaulted(schema, changed)
            return (
                self.holds(failure.rule, judged) or self._progress(failure.rule, judged) > progress
            ) and self._count_under(schema, changed, failure.path) <= before

        for edit in self._edits(schema, at(value, failure.path), failure):
            trial = copy.deepcopy(value)
            if edit(trial) and accepted(trial):
                return trial
        for first in self._growths(schema, at(value, failure.path), failure):
            grown = copy.deepcopy(value)
            if not first(grown):
                continue
            for second in self._growths(schema, at(grown, failure.path), failure, appends=False):
                trial = copy.deepcopy(grown)
                if second(trial) and accepted(trial):
                    return trial
        return None

    def _progress(self, rule: str, node: Any) -> int:
        """For a rule on a list or a map, how many of its items or entries alone satisfy it: a rule such as
        `self.all(x, ...)` is repaired one item at a time."""
        if isinstance(node, list):
            return sum(self.holds(rule, [item]) for item in node)
        if isinstance(node, dict):
            return sum(self.holds(rule, {key: item}) for key, item in node.items())
        return 0

    def _count_under(self, schema: dict[str, Any], node: Any, path: Path) -> int:
        return sum(1 for _ in self._failing(schema, defaulted(schema, node), path))

    def _edits(self, schema: dict[str, Any], node: Any, failure: Failure) -> Iterator[Callable[[Any], bool]]:
        """Edits of the object at and under the failing field, the smallest first: another value of a field the
        rule reads, a field it reads that was not there, a field or item removed (the smallest first), the failing
        field removed. Only fields the rule names are changed, added or removed (items and map entries of them
        may be any)."""
        named, below = _named_below(schema, node, failure)
        literals = [*_literals(failure.rule), *self.words]
        for path, field_schema, current in below:
            for other in _alternatives(field_schema, current, literals):
                yield _setter(path, other)
        for path, field_schema, current in below:
            if isinstance(current, dict) and field_schema.get("properties") is not None:
                for name, absent in field_schema["properties"].items():
                    if name in named and name not in current:
                        for new in _alternatives(absent, None, literals):
                            yield _setter((*path, name), new)
        removable = [
            (len(_key(current)), path)
            for path, _, current in below[1:]
            if _removable(
                schema_at(schema, path[len(failure.path) : -1]),
                at(node, path[len(failure.path) : -1]),
                path[-1],
            )
        ]
        for _, path in sorted(removable, key=lambda item: item[0]):
            yield _remover(path)
        if failure.path:
            parent_path = failure.path[:-1]
            parent_schema = schema_at(self.openapi, parent_path)
            yield (
                lambda trial: (
                    _removable(parent_schema, at(trial, parent_path), failure.path[-1])
                    and _remove(trial, failure.path)
                )
            )

    def _growths(
        self, schema: dict[str, Any], node: Any, failure: Failure, appends: bool = True
    ) -> Iterator[Callable[[Any], bool]]:
        """A string the rule names put in a field it reads, or (with `appends`) a list it reads given a copy of
        its last item."""
        _, below = _named_below(schema, node, failure)
        literals = _literals(failure.rule)
        for path, field_schema, current in below:
            if field_schema.get("type") == "string" and "enum" not in field_schema:
                for other in _alternatives(field_schema, current, literals):
                    yield _setter(path, other)
            room = (
                len(current) < field_schema.get("maxItems", len(current) + 1)
                if isinstance(current, list)
                else False
            )
            if appends and room and current:
                yield _appender(path, current[-1])


# --- schemas -------------------------------------------------------------------------------------------------

_GO_CLASSES = {"d": "0-9", "s": "\\t\\n\\f\\r ", "w": "0-9A-Za-z_"}
"""What `\\d`, `\\s` and `\\w` match in Go's regular expressions (RE2, which the API server runs): ASCII only."""


def go_pattern(pattern: str) -> str:
    """A Python regular expression that matches what the Go one `pattern` matches: Python's `\\d`, `\\s` and `\\w`
    take every script's digits, spaces and letters, and its `$` takes a final newline, where Go's do not."""
    out, inside, index = [], False, 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\" and index + 1 < len(pattern):
            escaped = pattern[index + 1]
            index += 2
            if escaped.lower() in _GO_CLASSES:
                chars = _GO_CLASSES[escaped.lower()]
                negated = escaped.isupper()
                if inside and not negated:
                    out.append(chars)
                    continue
                if not inside:
                    out.append(f"[{'^' if negated else ''}{chars}]")
                    continue
            out.append("\\" + escaped)
            continue
        if char == "[" and not inside:
            inside = True
        elif char == "]" and inside:
            inside = False
        elif char == "$" and not inside:
            char = r"\Z"
        out.append(char)
        index += 1
    return "".join(out)


def rules_of(schema: dict[str, Any]) -> list[str]:
    """The CEL rules a field's schema states that judge a create (those reading `oldSelf` judge updates only), and
    the uniqueness a list of type `set` or `map` has (the API server refuses a duplicate item or map key)."""
    rules = [
        str(validation["rule"])
        for validation in schema.get("x-kubernetes-validations") or []
        if "oldSelf" not in str(validation.get("rule"))
    ]
    if schema.get("x-kubernetes-list-type") == "set":
        rules.append("isUnique(self)")
    if schema.get("x-kubernetes-list-type") == "map":
        keys = ", ".join(
            f"has(x.{key}) ? x.{key} : null" for key in schema.get("x-kubernetes-list-map-keys", [])
        )
        rules.append(f"isUnique(self.map(x, [{keys}]))")
    return rules


def walk(schema: dict[str, Any], value: Any, at: Path = ()) -> Iterator[tuple[Path, dict[str, Any], Any]]:
    """(path, schema, value) of the value and of everything in it that the schema describes, outermost first."""
    yield at, schema, value
    if isinstance(value, dict):
        properties = schema.get("properties")
        others = schema.get("additionalProperties")
        for key, child in value.items():
            child_schema = properties.get(key) if properties is not None else others
            if isinstance(child_schema, dict):
                yield from walk(child_schema, child, (*at, key))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, child in enumerate(value):
            yield from walk(schema["items"], child, (*at, index))


def schema_at(schema: dict[str, Any], path: Path) -> dict[str, Any]:
    """The schema of the field at `path` ({} where the schema says nothing)."""
    for key in path:
        if isinstance(key, int):
            schema = schema.get("items") or {}
        elif schema.get("properties") is not None:
            schema = schema["properties"].get(key) or {}
        else:
            others = schema.get("additionalProperties")
            schema = others if isinstance(others, dict) else {}
    return schema


def defaulted(schema: dict[str, Any], value: Any) -> Any:
    """The value with the schema's defaults filled in where a field is absent, as the API server defaults an
    object before its rules are evaluated."""
    if isinstance(value, dict):
        properties = schema.get("properties")
        others = schema.get("additionalProperties")
        out = {}
        for key, child in value.items():
            child_schema = properties.get(key) if properties is not None else others
            out[key] = defaulted(child_schema, child) if isinstance(child_schema, dict) else child
        for key, child_schema in (properties or {}).items():
            if key not in out and "default" in child_schema:
                out[key] = defaulted(child_schema, copy.deepcopy(child_schema["default"]))
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [defaulted(schema["items"], child) for child in value]
    return value


def _alternatives(schema: dict[str, Any], current: Any, literals: Sequence[str]) -> Iterator[Any]:
    """Other values the schema allows a field (`current` None: one that is not there), that a rule may want: an
    enum's others, the other boolean, or a string of `literals` (where the field's pattern and lengths take it)."""
    if "enum" in schema:
        yield from (value for value in schema["enum"] if value != current)
    elif schema.get("type") == "boolean" and isinstance(current, bool | None):
        yield from (value for value in (False, True) if value != current)
    elif schema.get("type") == "string" and isinstance(current, str | None):
        for literal in dict.fromkeys(literals):
            if literal != current and _string_fits(schema, literal):
                yield literal


def _literals(rule: str) -> list[str]:
    """The strings a CEL rule names ('karpenter.sh', '.')."""
    return re.findall(r"'((?:[^'\\]|\\.)*)'", rule)


def _named_below(
    schema: dict[str, Any], node: Any, failure: Failure
) -> tuple[set[str], list[tuple[Path, dict[str, Any], Any]]]:
    """The identifiers the failing rule reads, and the fields at and under the failing one that it may be about:
    those reached through fields it names."""
    named = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", failure.rule))
    below = [
        (path, field_schema, current)
        for path, field_schema, current in walk(schema, node, failure.path)
        if _fields(schema, path[len(failure.path) :]) <= named
    ]
    return named, below


def _fields(schema: dict[str, Any], relative: Path) -> set[str]:
    """The property names along `relative` from a field whose schema is `schema` (not list indexes or map keys)."""
    names = set()
    for key in relative:
        if isinstance(key, str) and schema.get("properties") is not None:
            names.add(key)
        schema = schema_at(schema, (key,))
    return names


def _string_fits(schema: dict[str, Any], text: str) -> bool:
    if len(text) < schema.get("minLength", 0) or len(text) > schema.get("maxLength", len(text)):
        return False
    pattern = schema.get("pattern")
    return pattern is None or re.search(go_pattern(pattern), text) is not None


def _removable(parent_schema: dict[str, Any], parent: Any, key: Any) -> bool:
    """Whether the field or item `key` may go from `parent` and leave it valid by its schema."""
    if isinstance(parent, list):
        return len(parent) > parent_schema.get("minItems", 0)
    if not isinstance(parent, dict) or key not in parent:
        return False
    if parent_schema.get("properties") is not None:
        return key not in (parent_schema.get("required") or [])
    return len(parent) > parent_schema.get("minProperties", 0)


def _key(value: Any) -> str:
    return repr(value)


def at(value: Any, path: Path) -> Any:
    """The field at `path` in a JSON value (KeyError when there is none)."""
    for key in path:
        in_dict = isinstance(value, dict) and key in value
        if in_dict or (isinstance(value, list) and isinstance(key, int) and key < len(value)):
            value = value[key]
        else:
            raise KeyError(path)
    return value


def _setter(path: Path, new: Any) -> Callable[[Any], bool]:
    def edit(trial: Any) -> bool:
        if not path:
            return False
        at(trial, path[:-1])[path[-1]] = copy.deepcopy(new)
        return True

    return edit


def _appender(path: Path, item: Any) -> Callable[[Any], bool]:
    def edit(trial: Any) -> bool:
        at(trial, path).append(copy.deepcopy(item))
        return True

    return edit


def _remover(path: Path) -> Callable[[Any], bool]:
    return lambda trial: _remove(trial, path)


def _remove(trial: Any, path: Path) -> bool:
    parent = at(trial, path[:-1])
    if isinstance(parent, list):
        del parent[path[-1]]
    else:
        parent.pop(path[-1])
    return True
