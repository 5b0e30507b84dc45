"""The requirement algebra: the set of label values a node may carry for each key, and how such sets combine.

Pods, NodePools, instance types and offerings all speak in node-selector requirements. Karpenter reduces every
requirement on a key to one shape, a possibly-complemented value set with optional inclusive integer bounds,
so that intersecting two constraints is a set operation and "can these ever be satisfied together" is a cheap
check. The scheduler runs these operations millions of times per solve, so `Requirement` is a small immutable
slotted value and `Requirements` a thin dict wrapper that copies cheaply.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import re
from collections.abc import Callable, Iterable, Iterator, KeysView, Mapping
from typing import Any

from core.api.meta import NodeSelectorOperator
from core.labels import RESTRICTED_LABELS, WELL_KNOWN_LABELS, normalize_key

MAX_INT64 = 2**63 - 1
"""What `len()` of an unbounded requirement counts from, as in Karpenter (complements are "infinite")."""

_MIN_INT64 = -(2**63)
_INTEGER = re.compile(r"[+-]?[0-9]+")
_GENERATED_SPAN = 2**32
"""How far from its lower bound a generated value may land (keeps generated labels short)."""
_SHOWN_VALUES = 5
_EMPTY: frozenset[str] = frozenset()


Operator = NodeSelectorOperator
"""Node-selector operators, including Karpenter's inclusive `Gte` and `Lte` (one definition, in the API)."""


_BOUND_OPERATORS = frozenset({Operator.GT, Operator.LT, Operator.GTE, Operator.LTE})


@functools.lru_cache(maxsize=65536)
def _as_int(value: str) -> int | None:
    """The value as a 64-bit integer the way Go's `strconv.Atoi` reads it, or None."""
    if not _INTEGER.fullmatch(value):
        return None
    number = int(value)
    return number if _MIN_INT64 <= number <= MAX_INT64 else None


@functools.lru_cache(maxsize=65536)
def _label_requirement(key: str, value: str) -> Requirement:
    """`key In [value]`, made once per label: every plan reads the labels of every existing node, which mostly
    stay the same from one plan to the next (requirements are immutable, so they are shared)."""
    return Requirement.new(key, Operator.IN, [value])


def _within(value: str, lower: int | None, upper: int | None) -> bool:
    if lower is None and upper is None:
        return True
    number = _as_int(value)
    if number is None:
        return False
    return (lower is None or number >= lower) and (upper is None or number <= upper)


def _larger(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a >= b else b


def _smaller(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a <= b else b


class Requirement:
    """The values one label key may take on a node.

    `complement` False: the key must carry one of `values` (empty means the key must be absent).
    `complement` True: the key must be present with any value except `values`. `greater_than` and
    `less_than` are inclusive integer bounds; only complements keep them, and a value that is not an
    integer never satisfies a bounded requirement. `min_values` is the NodePool flexibility floor.

    Build requirements with `Requirement.new`; the constructor takes the raw representation.
    """

    __slots__ = ("_hash", "complement", "greater_than", "key", "less_than", "min_values", "values")

    key: str
    complement: bool
    values: frozenset[str]
    greater_than: int | None
    less_than: int | None
    min_values: int | None
    _hash: int | None

    def __init__(
        self,
        key: str,
        complement: bool,
        values: Iterable[str] = (),
        greater_than: int | None = None,
        less_than: int | None = None,
        min_values: int | None = None,
    ) -> None:
        _init(self, key, complement, frozenset(values), greater_than, less_than, min_values)

    @classmethod
    def new(
        cls,
        key: str,
        operator: Operator | str,
        values: Iterable[str] | None = (),
        min_values: int | None = None,
    ) -> Requirement:
        """A requirement from a node-selector expression; raises ValueError naming the key and the rule.

        `Gt n` becomes the inclusive lower bound n+1 and `Lt n` the upper bound n-1; deprecated beta keys
        are normalized to their current names.
        """
        key = normalize_key(key)
        if isinstance(values, str):
            raise TypeError(
                f'requirement on "{key}": values must be a list of strings, not the string {values!r}'
            )
        given = list(values or ())
        try:
            op = Operator(operator)
        except ValueError:
            expected = ", ".join(Operator)
            raise ValueError(
                f'requirement on "{key}": unknown operator "{operator}" (expected one of {expected})'
            ) from None
        if min_values is not None and min_values < 1:
            raise ValueError(f'requirement on "{key}": minValues must be at least 1, got {min_values}')
        if op is Operator.IN:
            if not given:
                raise ValueError(f'requirement on "{key}": operator In needs at least one value')
            return _make(key, False, frozenset(given), None, None, min_values)
        if op is Operator.NOT_IN:
            return _make(key, True, frozenset(given), None, None, min_values)
        if op is Operator.EXISTS or op is Operator.DOES_NOT_EXIST:
            if given:
                raise ValueError(f'requirement on "{key}": operator {op} takes no values, got {given}')
            return _make(key, op is Operator.EXISTS, _EMPTY, None, None, min_values)
        bound = _as_int(given[0]) if len(given) == 1 else None
        if bound is None:
            raise ValueError(
                f'requirement on "{key}": operator {op} needs exactly one integer value, got {given}'
            )
        if op is Operator.GT:
            return _make(key, True, _EMPTY, bound + 1, None, min_values)
        if op is Operator.GTE:
            return _make(key, True, _EMPTY, bound, None, min_values)
        if op is Operator.LT:
            return _make(key, True, _EMPTY, None, bound - 1, min_values)
        return _make(key, True, _EMPTY, None, bound, min_values)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Requirement is immutable (tried to set {name})")

    def operator(self) -> Operator:
        """The operator this requirement reads as; bounds do not show (Gt 1 reads Exists, as in Karpenter)."""
        if self.complement:
            return Operator.NOT_IN if self.values else Operator.EXISTS
        return Operator.IN if self.values else Operator.DOES_NOT_EXIST

    def is_negative(self) -> bool:
        """Whether the operator is NotIn or DoesNotExist: it restricts values without asking for any."""
        return self.complement == bool(self.values)

    def is_empty(self) -> bool:
        """Whether no node can satisfy it by carrying the key (it is DoesNotExist)."""
        return not self.complement and not self.values

    def has(self, value: str) -> bool:
        """Whether a node labelled `value` for this key satisfies the requirement."""
        if (value in self.values) == self.complement:
            return False
        return _within(value, self.greater_than, self.less_than)

    def intersection(self, other: Requirement) -> Requirement:
        """The values both requirements allow (keeps this requirement's key); minValues is the larger one."""
        if other is self or _is_unconstrained(other):
            return self
        if _is_unconstrained(self):
            return other if other.key == self.key else _with_key(other, self.key)
        lower = _larger(self.greater_than, other.greater_than)
        upper = _smaller(self.less_than, other.less_than)
        min_values = _larger(self.min_values, other.min_values)
        if lower is not None and upper is not None and lower > upper:
            return _make(self.key, False, _EMPTY, None, None, min_values)
        complement = self.complement and other.complement
        if complement:
            values = self.values | other.values
        elif self.complement:
            values = other.values - self.values
        elif other.complement:
            values = self.values - other.values
        else:
            values = self.values & other.values
        if values and (lower is not None or upper is not None):
            values = frozenset(value for value in values if _within(value, lower, upper))
        if not complement:
            lower = upper = None
        return _make(self.key, complement, values, lower, upper, min_values)

    def has_intersection(self, other: Requirement) -> bool:
        """Whether `intersection(other)` is not DoesNotExist, without building it."""
        lower = _larger(self.greater_than, other.greater_than)
        upper = _smaller(self.less_than, other.less_than)
        if lower is not None and upper is not None and lower > upper:
            return False
        if self.complement and other.complement:
            return True
        if self.complement:
            return any(v not in self.values and _within(v, lower, upper) for v in other.values)
        if other.complement:
            return any(v not in other.values and _within(v, lower, upper) for v in self.values)
        return any(v in other.values and _within(v, lower, upper) for v in self.values)

    def any(self) -> str:
        """A value that satisfies the requirement, or "" when none exists or it is DoesNotExist.

        In picks its smallest value. Complements get an integer (Karpenter picks one at random); ours is
        derived from the key and the excluded values so the same requirement always yields the same label.
        """
        if not self.complement:
            return min(self.values) if self.values else ""
        lower, upper = self.greater_than, self.less_than
        if lower is None:
            lower = 0 if upper is None or upper >= 0 else upper - _GENERATED_SPAN + 1
        if upper is None:
            upper = lower + _GENERATED_SPAN - 1
        span = upper - lower + 1
        seed = "\0".join([self.key, *sorted(self.values)]).encode()
        offset = int.from_bytes(hashlib.blake2b(seed, digest_size=8).digest(), "big") % span
        # Exclusions are finite: stepping past them finds a free value unless they cover the whole range.
        for step in range(min(span, len(self.values) + 1)):
            candidate = str(lower + (offset + step) % span)
            if candidate not in self.values:
                return candidate
        return ""

    def sorted_values(self) -> list[str]:
        """The listed values (allowed for In, excluded for NotIn) in string order."""
        return sorted(self.values)

    def to_dicts(self) -> list[dict[str, Any]]:
        """Node-selector requirements that together mean this requirement.

        Bounds become `Gte`/`Lte` entries (two when both exist, as Karpenter emits them); exclusions that
        remain within the bounds get their own `NotIn` entry, which Karpenter drops.
        """
        entries: list[dict[str, Any]] = []
        if self.greater_than is not None:
            entries.append(self._entry(Operator.GTE, [str(self.greater_than)]))
        if self.less_than is not None:
            entries.append(self._entry(Operator.LTE, [str(self.less_than)]))
        if not entries or self.values:
            entries.append(self._entry(self.operator(), self.sorted_values()))
        return entries

    def to_dict(self) -> dict[str, Any]:
        """The one node-selector requirement for this key; ValueError when it needs several (`to_dicts`)."""
        entries = self.to_dicts()
        if len(entries) != 1:
            raise ValueError(f"requirement {self} needs {len(entries)} node-selector entries; use to_dicts()")
        return entries[0]

    def _entry(self, operator: Operator, values: list[str]) -> dict[str, Any]:
        entry: dict[str, Any] = {"key": self.key, "operator": str(operator), "values": values}
        if self.min_values is not None:
            entry["minValues"] = self.min_values
        return entry

    def __len__(self) -> int:
        return MAX_INT64 - len(self.values) if self.complement else len(self.values)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Requirement):
            return NotImplemented
        return (
            self.key == other.key
            and self.complement == other.complement
            and self.greater_than == other.greater_than
            and self.less_than == other.less_than
            and self.min_values == other.min_values
            and self.values == other.values
        )

    def __hash__(self) -> int:
        cached = self._hash
        if cached is None:
            fields = (
                self.key,
                self.complement,
                self.values,
                self.greater_than,
                self.less_than,
                self.min_values,
            )
            cached = hash(fields)
            _set_hash(self, cached)
        return cached

    def __str__(self) -> str:
        operator = self.operator()
        text = f"{self.key} {operator}"
        if operator is Operator.IN or operator is Operator.NOT_IN:
            shown = self.sorted_values()
            if len(shown) > _SHOWN_VALUES:
                shown = [*shown[:_SHOWN_VALUES], f"and {len(shown) - _SHOWN_VALUES} others"]
            text += f" [{' '.join(shown)}]"
        if self.greater_than is not None:
            text += f" >={self.greater_than}"
        if self.less_than is not None:
            text += f" <={self.less_than}"
        if self.min_values is not None:
            text += f" minValues {self.min_values}"
        return text

    def __repr__(self) -> str:
        return f"Requirement({str(self)!r})"


# __setattr__ is closed to keep requirements immutable; construction writes the slots through their
# descriptors, which is also faster than object.__setattr__ on this hot path.
def _slot_setter(name: str) -> Callable[[Requirement, object], None]:
    setter: Callable[[Requirement, object], None] = getattr(Requirement, name).__set__
    return setter


_set_key = _slot_setter("key")
_set_complement = _slot_setter("complement")
_set_values = _slot_setter("values")
_set_greater_than = _slot_setter("greater_than")
_set_less_than = _slot_setter("less_than")
_set_min_values = _slot_setter("min_values")
_set_hash = _slot_setter("_hash")
_allocate = object.__new__


def _init(
    requirement: Requirement,
    key: str,
    complement: bool,
    values: frozenset[str],
    greater_than: int | None,
    less_than: int | None,
    min_values: int | None,
) -> None:
    _set_key(requirement, key)
    _set_complement(requirement, complement)
    _set_values(requirement, values)
    _set_greater_than(requirement, greater_than)
    _set_less_than(requirement, less_than)
    _set_min_values(requirement, min_values)
    _set_hash(requirement, None)


def _make(
    key: str,
    complement: bool,
    values: frozenset[str],
    greater_than: int | None,
    less_than: int | None,
    min_values: int | None,
) -> Requirement:
    requirement: Requirement = _allocate(Requirement)
    _init(requirement, key, complement, values, greater_than, less_than, min_values)
    return requirement


def _with_key(requirement: Requirement, key: str) -> Requirement:
    r = requirement
    return _make(key, r.complement, r.values, r.greater_than, r.less_than, r.min_values)


def _is_unconstrained(requirement: Requirement) -> bool:
    """Plain Exists without minValues: the identity of intersection."""
    r = requirement
    return (
        r.complement
        and not r.values
        and r.greater_than is None
        and r.less_than is None
        and r.min_values is None
    )


@functools.lru_cache(maxsize=4096)
def _typo_hint(key: str, known: tuple[str, ...]) -> str:
    """' (typo of "<known key>"?)' for the known key `key` most likely meant, or ""."""
    name = key.rsplit("/", 1)[-1]
    guess = next((candidate for candidate in known if candidate.rsplit("/", 1)[-1] == name), None)
    guess = guess or next((candidate for candidate in known if key in candidate), None)
    guess = guess or next(iter(difflib.get_close_matches(key, known, n=1, cutoff=0.8)), None)
    return f' (typo of "{guess}"?)' if guess else ""


class Requirements:
    """Requirements by label key; adding a requirement for a key already present intersects the two.

    Iterating yields the `Requirement` values. Keys are normalized (deprecated beta labels become current).
    """

    __slots__ = ("_by_key", "_signature")

    def __init__(self, requirements: Iterable[Requirement] = ()) -> None:
        self._by_key: dict[str, Requirement] = {}
        self._signature: frozenset[Requirement] | None = None
        self.add(*requirements)

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> Requirements:
        """One `In` requirement per label (a node selector, or the labels of an existing node)."""
        return cls(_label_requirement(key, value) for key, value in labels.items())

    @classmethod
    def from_dicts(cls, entries: Iterable[Mapping[str, Any]]) -> Requirements:
        """Requirements from node-selector dicts (`key`, `operator`, optional `values` and `minValues`)."""
        return cls(
            Requirement.new(entry["key"], entry["operator"], entry.get("values"), entry.get("minValues"))
            for entry in entries
        )

    def add(self, *requirements: Requirement) -> None:
        """Constrain by each requirement, intersecting with any existing requirement on its key."""
        by_key = self._by_key
        for requirement in requirements:
            existing = by_key.get(requirement.key)
            by_key[requirement.key] = requirement if existing is None else requirement.intersection(existing)
        self._signature = None

    def copy(self) -> Requirements:
        """An independent copy (requirements themselves are immutable and shared)."""
        duplicate: Requirements = object.__new__(Requirements)
        duplicate._by_key = self._by_key.copy()
        duplicate._signature = self._signature
        return duplicate

    def get(self, key: str) -> Requirement:
        """The requirement on `key`; Exists when the key is not constrained."""
        key = normalize_key(key)
        requirement = self._by_key.get(key)
        return requirement if requirement is not None else Requirement.new(key, Operator.EXISTS)

    def has(self, key: str) -> bool:
        """Whether `key` is constrained."""
        return normalize_key(key) in self._by_key

    def keys(self) -> KeysView[str]:
        """The constrained keys, in the order they were first added."""
        return self._by_key.keys()

    def signature(self) -> frozenset[Requirement]:
        """A hashable value equal for equal requirement sets (a cache key)."""
        if self._signature is None:
            self._signature = frozenset(self._by_key.values())
        return self._signature

    def compatible(
        self, other: Requirements, allow_undefined: frozenset[str] = WELL_KNOWN_LABELS
    ) -> str | None:
        """Why `other` cannot be satisfied by what these requirements allow, or None when it can.

        A key `other` constrains but these do not define is only acceptable when it is in `allow_undefined`
        (well-known labels, filled in by instance types and offerings) or when `other` merely forbids values
        (NotIn, DoesNotExist). Defined keys must then intersect (see `intersects`).
        """
        mine = self._by_key
        undefined = [
            key
            for key, requirement in other._by_key.items()
            if key not in mine and key not in allow_undefined and not requirement.is_negative()
        ]
        if undefined:
            key = min(undefined)
            known = (*sorted(allow_undefined), *sorted(mine))
            return f'label "{key}" does not have known values{_typo_hint(key, known)}'
        return self.intersects(other)

    def intersects(self, other: Requirements) -> str | None:
        """Why some key both define has no value both allow, or None when every shared key intersects.

        Two requirements that only forbid values (NotIn, DoesNotExist) always intersect: a node without the
        key satisfies both. Keys only one side defines are not checked.
        """
        smaller, larger = (self._by_key, other._by_key)
        if len(smaller) > len(larger):
            smaller, larger = larger, smaller
        conflicts: list[str] = []
        for key in smaller:
            if key not in larger:
                continue
            existing = self._by_key[key]
            incoming = other._by_key[key]
            if existing.has_intersection(incoming) or (existing.is_negative() and incoming.is_negative()):
                continue
            conflicts.append(f"key {key}, {incoming} not in {existing}")
        return "; ".join(sorted(conflicts)) if conflicts else None

    def labels(self) -> dict[str, str]:
        """Concrete node labels for the custom keys: one allowed value per key that has one.

        Well-known keys are skipped (the provider labels those from the launched instance) and so are
        restricted keys such as the hostname.
        """
        result: dict[str, str] = {}
        for key, requirement in self._by_key.items():
            if key in WELL_KNOWN_LABELS or key in RESTRICTED_LABELS:
                continue
            value = requirement.any()
            if value:
                result[key] = value
        return result

    def to_dicts(self) -> list[dict[str, Any]]:
        """Node-selector requirements (with minValues) in key order; see `Requirement.to_dicts`."""
        return [entry for key in sorted(self._by_key) for entry in self._by_key[key].to_dicts()]

    def __iter__(self) -> Iterator[Requirement]:
        return iter(self._by_key.values())

    def __len__(self) -> int:
        return len(self._by_key)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and normalize_key(key) in self._by_key

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Requirements):
            return NotImplemented
        return self._by_key == other._by_key

    __hash__ = None  # type: ignore[assignment]  # mutable; use signature() as a key

    def __str__(self) -> str:
        shown = sorted(str(r) for key, r in self._by_key.items() if key not in RESTRICTED_LABELS)
        return ", ".join(shown)

    def __repr__(self) -> str:
        return f"Requirements({str(self)!r})"
