"""The requirement algebra behaves like Karpenter's: the pairwise intersection table of its requirement tests,
membership, operators, generated values, serialization, and Requirements compatibility."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core import labels
from core.scheduling.requirements import MAX_INT64, Operator, Requirement, Requirements

KEY = "key"

FIXTURES: dict[str, Requirement] = {
    "Exists": Requirement.new(KEY, Operator.EXISTS),
    "DoesNotExist": Requirement.new(KEY, Operator.DOES_NOT_EXIST),
    "In A": Requirement.new(KEY, Operator.IN, ["A"]),
    "In B": Requirement.new(KEY, Operator.IN, ["B"]),
    "In A,B": Requirement.new(KEY, Operator.IN, ["A", "B"]),
    "NotIn A": Requirement.new(KEY, Operator.NOT_IN, ["A"]),
    "In 1": Requirement.new(KEY, Operator.IN, ["1"]),
    "In 9": Requirement.new(KEY, Operator.IN, ["9"]),
    "In 1,9": Requirement.new(KEY, Operator.IN, ["1", "9"]),
    "NotIn 1,2": Requirement.new(KEY, Operator.NOT_IN, ["1", "2"]),
    "Gt 1": Requirement.new(KEY, Operator.GT, ["1"]),
    "Gt 9": Requirement.new(KEY, Operator.GT, ["9"]),
    "Lt 1": Requirement.new(KEY, Operator.LT, ["1"]),
    "Lt 9": Requirement.new(KEY, Operator.LT, ["9"]),
}

MIN_VALUES = {name: 2 if name in ("In A,B", "In 1,9", "NotIn 1,2") else 1 for name in FIXTURES}
"""The minValues Karpenter's flexibility fixtures carry: 2 on the two-value requirements, 1 elsewhere."""


def raw(text: str, min_values: int | None = None) -> Requirement:
    """A requirement in its raw representation from "<In|NotIn|Exists|DoesNotExist> [v,w] [>=n] [<=n]"."""
    operator, *rest = text.split()
    values: list[str] = []
    greater_than = less_than = None
    for token in rest:
        if token.startswith(">="):
            greater_than = int(token[2:])
        elif token.startswith("<="):
            less_than = int(token[2:])
        else:
            values = token.split(",")
    complement = operator in ("NotIn", "Exists")
    return Requirement(KEY, complement, values, greater_than, less_than, min_values)


def expected(text: str, min_values: int | None = None) -> Requirement:
    """A fixture by name (re-tagged with `min_values`), or the raw requirement `text` describes."""
    if text in FIXTURES:
        fixture = FIXTURES[text]
        return Requirement(
            KEY, fixture.complement, fixture.values, fixture.greater_than, fixture.less_than, min_values
        )
    return raw(text, min_values)


def flexible(name: str) -> Requirement:
    """The fixture with Karpenter's flexibility minValues."""
    return expected(name, MIN_VALUES[name])


DNE = "DoesNotExist"

# left ∩ right -> result, for every pair of fixtures (Karpenter's requirement_test.go, in our notation).
# Gt n is stored as the inclusive bound >=n+1 and Lt n as <=n-1; results with bounds are written raw.
INTERSECTIONS: dict[str, dict[str, str]] = {
    "Exists": {name: name for name in FIXTURES},
    "DoesNotExist": {name: DNE for name in FIXTURES},
    "In A": {
        "Exists": "In A",
        "DoesNotExist": DNE,
        "In A": "In A",
        "In B": DNE,
        "In A,B": "In A",
        "NotIn A": DNE,
        "In 1": DNE,
        "In 9": DNE,
        "In 1,9": DNE,
        "NotIn 1,2": "In A",
        "Gt 1": DNE,
        "Gt 9": DNE,
        "Lt 1": DNE,
        "Lt 9": DNE,
    },
    "In B": {
        "Exists": "In B",
        "DoesNotExist": DNE,
        "In A": DNE,
        "In B": "In B",
        "In A,B": "In B",
        "NotIn A": "In B",
        "In 1": DNE,
        "In 9": DNE,
        "In 1,9": DNE,
        "NotIn 1,2": "In B",
        "Gt 1": DNE,
        "Gt 9": DNE,
        "Lt 1": DNE,
        "Lt 9": DNE,
    },
    "In A,B": {
        "Exists": "In A,B",
        "DoesNotExist": DNE,
        "In A": "In A",
        "In B": "In B",
        "In A,B": "In A,B",
        "NotIn A": "In B",
        "In 1": DNE,
        "In 9": DNE,
        "In 1,9": DNE,
        "NotIn 1,2": "In A,B",
        "Gt 1": DNE,
        "Gt 9": DNE,
        "Lt 1": DNE,
        "Lt 9": DNE,
    },
    "NotIn A": {
        "Exists": "NotIn A",
        "DoesNotExist": DNE,
        "In A": DNE,
        "In B": "In B",
        "In A,B": "In B",
        "NotIn A": "NotIn A",
        "In 1": "In 1",
        "In 9": "In 9",
        "In 1,9": "In 1,9",
        "NotIn 1,2": "NotIn A,1,2",
        "Gt 1": "Gt 1",
        "Gt 9": "Gt 9",
        "Lt 1": "Lt 1",
        "Lt 9": "Lt 9",
    },
    "In 1": {
        "Exists": "In 1",
        "DoesNotExist": DNE,
        "In A": DNE,
        "In B": DNE,
        "In A,B": DNE,
        "NotIn A": "In 1",
        "In 1": "In 1",
        "In 9": DNE,
        "In 1,9": "In 1",
        "NotIn 1,2": DNE,
        "Gt 1": DNE,
        "Gt 9": DNE,
        "Lt 1": DNE,
        "Lt 9": "In 1",
    },
    "In 9": {
        "Exists": "In 9",
        "DoesNotExist": DNE,
        "In A": DNE,
        "In B": DNE,
        "In A,B": DNE,
        "NotIn A": "In 9",
        "In 1": DNE,
        "In 9": "In 9",
        "In 1,9": "In 9",
        "NotIn 1,2": "In 9",
        "Gt 1": "In 9",
        "Gt 9": DNE,
        "Lt 1": DNE,
        "Lt 9": DNE,
    },
    "In 1,9": {
        "Exists": "In 1,9",
        "DoesNotExist": DNE,
        "In A": DNE,
        "In B": DNE,
        "In A,B": DNE,
        "NotIn A": "In 1,9",
        "In 1": "In 1",
        "In 9": "In 9",
        "In 1,9": "In 1,9",
        "NotIn 1,2": "In 9",
        "Gt 1": "In 9",
        "Gt 9": DNE,
        "Lt 1": DNE,
        "Lt 9": "In 1",
    },
    "NotIn 1,2": {
        "Exists": "NotIn 1,2",
        "DoesNotExist": DNE,
        "In A": "In A",
        "In B": "In B",
        "In A,B": "In A,B",
        "NotIn A": "NotIn A,1,2",
        "In 1": DNE,
        "In 9": "In 9",
        "In 1,9": "In 9",
        "NotIn 1,2": "NotIn 1,2",
        "Gt 1": "NotIn 2 >=2",
        "Gt 9": "Exists >=10",
        "Lt 1": "Exists <=0",
        "Lt 9": "NotIn 1,2 <=8",
    },
    "Gt 1": {
        "Exists": "Gt 1",
        "DoesNotExist": DNE,
        "In A": DNE,
        "In B": DNE,
        "In A,B": DNE,
        "NotIn A": "Gt 1",
        "In 1": DNE,
        "In 9": "In 9",
        "In 1,9": "In 9",
        "NotIn 1,2": "NotIn 2 >=2",
        "Gt 1": "Gt 1",
        "Gt 9": "Gt 9",
        "Lt 1": DNE,
        "Lt 9": "Exists >=2 <=8",
    },
    "Gt 9": {
        "Exists": "Gt 9",
        "DoesNotExist": DNE,
        "In A": DNE,
        "In B": DNE,
        "In A,B": DNE,
        "NotIn A": "Gt 9",
        "In 1": DNE,
        "In 9": DNE,
        "In 1,9": DNE,
        "NotIn 1,2": "Gt 9",
        "Gt 1": "Gt 9",
        "Gt 9": "Gt 9",
        "Lt 1": DNE,
        "Lt 9": DNE,
    },
    "Lt 1": {
        "Exists": "Lt 1",
        "DoesNotExist": DNE,
        "In A": DNE,
        "In B": DNE,
        "In A,B": DNE,
        "NotIn A": "Lt 1",
        "In 1": DNE,
        "In 9": DNE,
        "In 1,9": DNE,
        "NotIn 1,2": "Lt 1",
        "Gt 1": DNE,
        "Gt 9": DNE,
        "Lt 1": "Lt 1",
        "Lt 9": "Lt 1",
    },
    "Lt 9": {
        "Exists": "Lt 9",
        "DoesNotExist": DNE,
        "In A": DNE,
        "In B": DNE,
        "In A,B": DNE,
        "NotIn A": "Lt 9",
        "In 1": "In 1",
        "In 9": DNE,
        "In 1,9": "In 1",
        "NotIn 1,2": "NotIn 1,2 <=8",
        "Gt 1": "Exists >=2 <=8",
        "Gt 9": DNE,
        "Lt 1": "Lt 1",
        "Lt 9": "Lt 9",
    },
}

PAIRS = [
    pytest.param(left, right, result, id=f"{left} ∩ {right}")
    for left, row in INTERSECTIONS.items()
    for right, result in row.items()
]


def test_the_intersection_table_covers_every_pair() -> None:
    assert list(INTERSECTIONS) == list(FIXTURES)
    for row in INTERSECTIONS.values():
        assert list(row) == list(FIXTURES)


@pytest.mark.parametrize(("left", "right", "result"), PAIRS)
def test_intersection_without_min_values(left: str, right: str, result: str) -> None:
    assert FIXTURES[left].intersection(FIXTURES[right]) == expected(result)


@pytest.mark.parametrize(("left", "right", "result"), PAIRS)
def test_intersection_keeps_the_min_values_of_the_left_side(left: str, right: str, result: str) -> None:
    assert flexible(left).intersection(FIXTURES[right]) == expected(result, MIN_VALUES[left])


@pytest.mark.parametrize(("left", "right", "result"), PAIRS)
def test_intersection_keeps_the_min_values_of_the_right_side(left: str, right: str, result: str) -> None:
    assert FIXTURES[left].intersection(flexible(right)) == expected(result, MIN_VALUES[right])


@pytest.mark.parametrize(("left", "right", "result"), PAIRS)
def test_intersection_keeps_the_larger_min_values(left: str, right: str, result: str) -> None:
    larger = max(MIN_VALUES[left], MIN_VALUES[right])
    assert flexible(left).intersection(flexible(right)) == expected(result, larger)


def test_crossing_bounds_keep_min_values_on_does_not_exist() -> None:
    assert flexible("Gt 9").intersection(flexible("Lt 1")) == raw("DoesNotExist", 1)
    assert flexible("In 1,9").intersection(flexible("Lt 1")) == raw("DoesNotExist", 2)


# Gte/Lte are the inclusive forms Gt/Lt are stored as.
def test_gte_and_lte_are_the_inclusive_forms_of_gt_and_lt() -> None:
    assert Requirement.new(KEY, Operator.GTE, ["2"]) == FIXTURES["Gt 1"]
    assert Requirement.new(KEY, Operator.LTE, ["8"]) == FIXTURES["Lt 9"]
    assert Requirement.new(KEY, Operator.GT, ["-1"]) == raw("Exists >=0")
    assert Requirement.new(KEY, Operator.LT, ["-1"]) == raw("Exists <=-2")


def gte(n: int) -> Requirement:
    return Requirement.new(KEY, Operator.GTE, [str(n)])


def lte(n: int) -> Requirement:
    return Requirement.new(KEY, Operator.LTE, [str(n)])


def in_(*values: str) -> Requirement:
    return Requirement.new(KEY, Operator.IN, values)


def not_in(*values: str) -> Requirement:
    return Requirement.new(KEY, Operator.NOT_IN, values)


@pytest.mark.parametrize(
    ("requirements", "result"),
    [
        pytest.param([gte(5), lte(5)], "Exists >=5 <=5", id="Gte 5 ∩ Lte 5 is the single value 5"),
        pytest.param([gte(6), lte(5)], "DoesNotExist", id="Gte 6 ∩ Lte 5 crosses"),
        pytest.param(
            [FIXTURES["Gt 1"], Requirement.new(KEY, Operator.LT, ["2"])], "DoesNotExist", id="Gt 1 ∩ Lt 2"
        ),
        pytest.param([in_("5"), gte(5)], "In 5", id="In 5 ∩ Gte 5"),
        pytest.param([in_("5"), lte(4)], "DoesNotExist", id="In 5 ∩ Lte 4"),
        pytest.param([in_("1", "5", "9", "x"), gte(1), lte(5)], "In 1,5", id="In 1,5,9,x ∩ [1,5]"),
        pytest.param([not_in("5", "7"), gte(5), lte(6)], "NotIn 5 >=5 <=6", id="exclusions outside dropped"),
        pytest.param([gte(3), gte(7)], "Exists >=7", id="Gte 3 ∩ Gte 7"),
        pytest.param([lte(3), lte(7)], "Exists <=3", id="Lte 3 ∩ Lte 7"),
        pytest.param([in_("08", "+9", "1e1"), gte(8)], "In 08,+9", id="integer spellings Go accepts"),
    ],
)
def test_inclusive_bounds(requirements: list[Requirement], result: str) -> None:
    combined = requirements[0]
    for requirement in requirements[1:]:
        combined = combined.intersection(requirement)
    assert combined == raw(result)


ALLOWED = {
    "Exists": "A B 1 2 9",
    "DoesNotExist": "",
    "In A": "A",
    "In B": "B",
    "In A,B": "A B",
    "NotIn A": "B 1 2 9",
    "In 1": "1",
    "In 9": "9",
    "In 1,9": "1 9",
    "NotIn 1,2": "A B 9",
    "Gt 1": "2 9",
    "Gt 9": "",
    "Lt 1": "",
    "Lt 9": "1 2",
}
"""Which of A, B, 1, 2, 9 each fixture allows (Karpenter's Has table)."""


@pytest.mark.parametrize(("name", "allowed"), ALLOWED.items())
def test_has(name: str, allowed: str) -> None:
    assert {value for value in ("A", "B", "1", "2", "9") if FIXTURES[name].has(value)} == set(allowed.split())


def test_bounded_requirements_only_admit_integers() -> None:
    assert FIXTURES["Gt 1"].has("+5")
    assert FIXTURES["Lt 9"].has("-7")
    assert FIXTURES["Lt 9"].has("01")
    assert not FIXTURES["Lt 9"].has(" 1")
    assert not FIXTURES["Lt 9"].has("1.0")
    assert not FIXTURES["Gt 1"].has("99999999999999999999")


OPERATORS = {
    "Exists": Operator.EXISTS,
    "DoesNotExist": Operator.DOES_NOT_EXIST,
    "In A": Operator.IN,
    "In B": Operator.IN,
    "In A,B": Operator.IN,
    "NotIn A": Operator.NOT_IN,
    "In 1": Operator.IN,
    "In 9": Operator.IN,
    "In 1,9": Operator.IN,
    "NotIn 1,2": Operator.NOT_IN,
    "Gt 1": Operator.EXISTS,
    "Gt 9": Operator.EXISTS,
    "Lt 1": Operator.EXISTS,
    "Lt 9": Operator.EXISTS,
}


@pytest.mark.parametrize(("name", "operator"), OPERATORS.items())
def test_operator(name: str, operator: Operator) -> None:
    assert FIXTURES[name].operator() is operator


def test_bounded_exclusions_read_as_not_in() -> None:
    assert raw("NotIn 2 >=2").operator() is Operator.NOT_IN


LENGTHS = {
    "Exists": MAX_INT64,
    "DoesNotExist": 0,
    "In A": 1,
    "In A,B": 2,
    "NotIn A": MAX_INT64 - 1,
    "In 1,9": 2,
    "NotIn 1,2": MAX_INT64 - 2,
    "Gt 1": MAX_INT64,
    "Lt 9": MAX_INT64,
}


@pytest.mark.parametrize(("name", "length"), LENGTHS.items())
def test_len(name: str, length: int) -> None:
    assert len(FIXTURES[name]) == length


def test_negative_and_empty() -> None:
    negative = {name for name, fixture in FIXTURES.items() if fixture.is_negative()}
    assert negative == {"DoesNotExist", "NotIn A", "NotIn 1,2"}
    assert [name for name, fixture in FIXTURES.items() if fixture.is_empty()] == ["DoesNotExist"]


class TestAny:
    def test_concrete_sets_yield_their_smallest_value(self) -> None:
        assert FIXTURES["In A"].any() == "A"
        assert FIXTURES["In A,B"].any() == "A"
        assert FIXTURES["In 1,9"].any() == "1"
        assert FIXTURES["DoesNotExist"].any() == ""

    @pytest.mark.parametrize("name", ["Exists", "NotIn A", "NotIn 1,2", "Gt 1", "Gt 9", "Lt 1", "Lt 9"])
    def test_complements_yield_an_allowed_integer(self, name: str) -> None:
        value = FIXTURES[name].any()
        assert FIXTURES[name].has(value)
        int(value)

    def test_bounds_are_respected(self) -> None:
        assert FIXTURES["Lt 1"].any() == "0"
        assert 0 <= int(FIXTURES["Lt 9"].any()) <= 8
        assert int(FIXTURES["Gt 9"].any()) >= 10
        assert int(lte(-10).any()) <= -10
        assert -12 <= int(lte(-10).intersection(gte(-12)).any()) <= -10

    def test_a_single_allowed_value_is_found_past_exclusions(self) -> None:
        assert raw("NotIn 0,1 >=0 <=2").any() == "2"
        assert raw("NotIn 5 >=5 <=5").any() == ""

    def test_generated_values_are_deterministic(self) -> None:
        first = Requirement.new("team", Operator.NOT_IN, ["a", "b"]).any()
        assert Requirement.new("team", Operator.NOT_IN, ["b", "a"]).any() == first


STRINGS = {
    "Exists": "key Exists",
    "DoesNotExist": "key DoesNotExist",
    "In A,B": "key In [A B]",
    "NotIn 1,2": "key NotIn [1 2]",
    "Gt 1": "key Exists >=2",
    "Lt 9": "key Exists <=8",
}


@pytest.mark.parametrize(("name", "text"), STRINGS.items())
def test_str(name: str, text: str) -> None:
    assert str(FIXTURES[name]) == text


def test_str_of_derived_requirements() -> None:
    assert str(FIXTURES["Gt 1"].intersection(FIXTURES["Lt 9"])) == "key Exists >=2 <=8"
    assert str(FIXTURES["Gt 9"].intersection(FIXTURES["Lt 1"])) == "key DoesNotExist"
    assert str(FIXTURES["NotIn 1,2"].intersection(FIXTURES["Gt 1"])) == "key NotIn [2] >=2"
    assert str(flexible("In A,B")) == "key In [A B] minValues 2"
    assert str(in_(*"abcdefg")) == "key In [a b c d e and 2 others]"


class TestNew:
    def test_normalizes_beta_keys(self) -> None:
        requirement = Requirement.new("beta.kubernetes.io/arch", Operator.IN, ["amd64"])
        assert requirement.key == labels.ARCH

    def test_accepts_operator_names(self) -> None:
        assert Requirement.new(KEY, "NotIn", ["A"]) == FIXTURES["NotIn A"]
        assert Requirement.new(KEY, "Exists", None) == FIXTURES["Exists"]

    @pytest.mark.parametrize(
        ("operator", "values", "min_values", "message"),
        [
            ("Foo", [], None, 'requirement on "key": unknown operator "Foo" (expected one of In, NotIn,'),
            ("In", [], None, 'requirement on "key": operator In needs at least one value'),
            ("Gt", ["a"], None, 'requirement on "key": operator Gt needs exactly one integer value, got'),
            ("Lt", ["1", "2"], None, "operator Lt needs exactly one integer value, got ['1', '2']"),
            ("Gte", [], None, "operator Gte needs exactly one integer value, got []"),
            ("Lte", ["1.5"], None, "operator Lte needs exactly one integer value"),
            ("Exists", ["A"], None, "operator Exists takes no values, got ['A']"),
            ("DoesNotExist", ["A"], None, "operator DoesNotExist takes no values"),
            ("In", ["A"], 0, 'requirement on "key": minValues must be at least 1, got 0'),
        ],
    )
    def test_rejects_invalid_expressions(
        self, operator: str, values: list[str], min_values: int | None, message: str
    ) -> None:
        with pytest.raises(ValueError) as caught:
            Requirement.new(KEY, operator, values, min_values)
        assert message in str(caught.value)

    def test_rejects_a_bare_string_of_values(self) -> None:
        with pytest.raises(TypeError, match="values must be a list of strings"):
            Requirement.new(KEY, Operator.IN, "amd64")


def test_requirements_are_immutable_hashable_values() -> None:
    with pytest.raises(AttributeError):
        FIXTURES["In A"].values = frozenset({"B"})
    rebuilt = in_("B", "A")
    assert rebuilt == FIXTURES["In A,B"]
    assert hash(rebuilt) == hash(FIXTURES["In A,B"])
    assert len({rebuilt, FIXTURES["In A,B"], flexible("In A,B")}) == 2


class TestSerialization:
    @pytest.mark.parametrize(
        ("name", "entries"),
        [
            ("Exists", [{"key": KEY, "operator": "Exists", "values": []}]),
            ("DoesNotExist", [{"key": KEY, "operator": "DoesNotExist", "values": []}]),
            ("In A,B", [{"key": KEY, "operator": "In", "values": ["A", "B"]}]),
            ("NotIn 1,2", [{"key": KEY, "operator": "NotIn", "values": ["1", "2"]}]),
            ("Gt 1", [{"key": KEY, "operator": "Gte", "values": ["2"]}]),
            ("Lt 9", [{"key": KEY, "operator": "Lte", "values": ["8"]}]),
        ],
    )
    def test_single_entries(self, name: str, entries: list[dict[str, object]]) -> None:
        assert FIXTURES[name].to_dicts() == entries
        assert FIXTURES[name].to_dict() == entries[0]

    def test_min_values_is_carried(self) -> None:
        assert flexible("In A,B").to_dict() == {
            "key": KEY,
            "operator": "In",
            "values": ["A", "B"],
            "minValues": 2,
        }

    def test_both_bounds_become_two_entries(self) -> None:
        bounded = flexible("Gt 1").intersection(FIXTURES["Lt 9"])
        assert bounded.to_dicts() == [
            {"key": KEY, "operator": "Gte", "values": ["2"], "minValues": 1},
            {"key": KEY, "operator": "Lte", "values": ["8"], "minValues": 1},
        ]
        with pytest.raises(ValueError, match="needs 2 node-selector entries"):
            bounded.to_dict()

    def test_exclusions_within_bounds_keep_their_entry(self) -> None:
        assert raw("NotIn 2 >=2").to_dicts() == [
            {"key": KEY, "operator": "Gte", "values": ["2"]},
            {"key": KEY, "operator": "NotIn", "values": ["2"]},
        ]

    def test_requirements_serialize_in_key_order(self) -> None:
        requirements = Requirements(
            [
                Requirement.new("b", Operator.IN, ["x"]),
                Requirement.new("a", Operator.GT, ["1"]),
                Requirement.new("a", Operator.LT, ["9"]),
            ]
        )
        assert requirements.to_dicts() == [
            {"key": "a", "operator": "Gte", "values": ["2"]},
            {"key": "a", "operator": "Lte", "values": ["8"]},
            {"key": "b", "operator": "In", "values": ["x"]},
        ]

    def test_round_trip(self) -> None:
        requirements = Requirements([flexible("In A,B"), Requirement("other", True, ["2"], 2, 8, 3)])
        assert Requirements.from_dicts(requirements.to_dicts()) == requirements


ZONE = labels.ZONE


def zone(operator: Operator, *values: str) -> Requirements:
    return Requirements([Requirement.new(ZONE, operator, values)])


def custom(operator: Operator, *values: str) -> Requirements:
    return Requirements([Requirement.new("example.com/team", operator, values)])


class TestRequirements:
    def test_adding_a_key_twice_intersects(self) -> None:
        requirements = Requirements([in_("A", "B")])
        requirements.add(not_in("A"))
        assert requirements.get(KEY) == FIXTURES["In B"]
        assert len(requirements) == 1

    def test_keys_are_normalized(self) -> None:
        requirements = Requirements(
            [Requirement.new("failure-domain.beta.kubernetes.io/zone", Operator.IN, ["z"])]
        )
        assert list(requirements.keys()) == [ZONE]
        assert "failure-domain.beta.kubernetes.io/zone" in requirements
        assert requirements.get(ZONE).has("z")

    def test_an_undefined_key_reads_as_exists(self) -> None:
        requirements = Requirements()
        assert not requirements.has(KEY)
        assert KEY not in requirements
        assert requirements.get(KEY) == FIXTURES["Exists"]

    def test_from_labels(self) -> None:
        requirements = Requirements.from_labels({ZONE: "westus2-1", "team": "a"})
        assert sorted(str(r) for r in requirements) == ["team In [a]", f"{ZONE} In [westus2-1]"]

    def test_copies_are_independent(self) -> None:
        original = Requirements([in_("A", "B")])
        duplicate = original.copy()
        duplicate.add(in_("A"))
        assert original.get(KEY) == FIXTURES["In A,B"]
        assert duplicate.get(KEY) == FIXTURES["In A"]

    def test_signature_is_independent_of_order_and_follows_changes(self) -> None:
        first = Requirements([in_("A"), Requirement.new("other", Operator.EXISTS)])
        second = Requirements([Requirement.new("other", Operator.EXISTS), in_("A")])
        assert first.signature() == second.signature()
        assert first == second
        second.add(not_in("A"))
        assert first.signature() != second.signature()

    def test_str_skips_the_hostname(self) -> None:
        requirements = Requirements.from_labels({labels.HOSTNAME: "node-1", "b": "2", "a": "1"})
        assert str(requirements) == "a In [1], b In [2]"


# Which zone constraints each zone constraint refuses (Karpenter's requirements_test.go compatibility matrix).
# Zone is well known, so a side that does not constrain it accepts everything.
ZONE_FIXTURES = {
    "unconstrained": Requirements(),
    **{
        name: Requirements([Requirement(ZONE, r.complement, r.values, r.greater_than, r.less_than)])
        for name, r in FIXTURES.items()
    },
}
INCOMPATIBLE = {
    "unconstrained": set(),
    "Exists": {"DoesNotExist"},
    "DoesNotExist": {
        "Exists",
        "In A",
        "In B",
        "In A,B",
        "In 1",
        "In 9",
        "In 1,9",
        "Gt 1",
        "Gt 9",
        "Lt 1",
        "Lt 9",
    },
    "In A": {"DoesNotExist", "In B", "NotIn A", "In 1", "In 9", "In 1,9", "Gt 1", "Gt 9", "Lt 1", "Lt 9"},
    "In B": {"DoesNotExist", "In A", "In 1", "In 9", "In 1,9", "Gt 1", "Gt 9", "Lt 1", "Lt 9"},
    "In A,B": {"DoesNotExist", "In 1", "In 9", "In 1,9", "Gt 1", "Gt 9", "Lt 1", "Lt 9"},
    "NotIn A": {"In A"},
    "In 1": {"DoesNotExist", "In A", "In B", "In A,B", "In 9", "NotIn 1,2", "Gt 1", "Gt 9", "Lt 1"},
    "In 9": {"DoesNotExist", "In A", "In B", "In A,B", "In 1", "Gt 9", "Lt 1", "Lt 9"},
    "In 1,9": {"DoesNotExist", "In A", "In B", "In A,B", "Gt 9", "Lt 1"},
    "NotIn 1,2": {"In 1"},
    "Gt 1": {"DoesNotExist", "In A", "In B", "In A,B", "In 1", "Lt 1"},
    "Gt 9": {"DoesNotExist", "In A", "In B", "In A,B", "In 1", "In 9", "In 1,9", "Lt 1", "Lt 9"},
    "Lt 1": {"DoesNotExist", "In A", "In B", "In A,B", "In 1", "In 9", "In 1,9", "Gt 1", "Gt 9"},
    "Lt 9": {"DoesNotExist", "In A", "In B", "In A,B", "In 9", "Gt 9"},
}


@pytest.mark.parametrize("row", INCOMPATIBLE)
def test_zone_compatibility_matrix(row: str) -> None:
    refused = {
        column
        for column, requirements in ZONE_FIXTURES.items()
        if ZONE_FIXTURES[row].compatible(requirements) is not None
    }
    assert refused == INCOMPATIBLE[row]


class TestCompatible:
    def test_an_undefined_custom_key_with_values_is_incompatible(self) -> None:
        reason = Requirements().compatible(custom(Operator.IN, "a"))
        assert reason == 'label "example.com/team" does not have known values'
        assert Requirements().compatible(custom(Operator.EXISTS)) is not None

    @pytest.mark.parametrize("operator", [Operator.NOT_IN, Operator.DOES_NOT_EXIST])
    def test_an_undefined_custom_key_may_be_forbidden(self, operator: Operator) -> None:
        values = ("a",) if operator is Operator.NOT_IN else ()
        assert Requirements().compatible(custom(operator, *values)) is None

    def test_an_undefined_well_known_key_is_compatible(self) -> None:
        assert Requirements().compatible(zone(Operator.IN, "westus2-1")) is None

    def test_allow_undefined_can_be_narrowed(self) -> None:
        reason = Requirements().compatible(zone(Operator.IN, "westus2-1"), allow_undefined=frozenset())
        assert reason == f'label "{ZONE}" does not have known values'

    def test_two_negative_requirements_are_compatible(self) -> None:
        assert zone(Operator.NOT_IN, "a").compatible(zone(Operator.DOES_NOT_EXIST)) is None
        assert zone(Operator.DOES_NOT_EXIST).compatible(zone(Operator.NOT_IN, "a")) is None
        assert custom(Operator.DOES_NOT_EXIST).compatible(custom(Operator.DOES_NOT_EXIST)) is None

    def test_a_defined_custom_key_must_intersect(self) -> None:
        assert custom(Operator.IN, "a", "b").compatible(custom(Operator.IN, "b")) is None
        assert custom(Operator.IN, "a").compatible(custom(Operator.IN, "b")) == (
            "key example.com/team, example.com/team In [b] not in example.com/team In [a]"
        )

    def test_the_first_undefined_key_in_order_is_reported(self) -> None:
        other = Requirements(
            [Requirement.new("z.io/b", Operator.EXISTS), Requirement.new("a.io/b", Operator.EXISTS)]
        )
        assert Requirements().compatible(other) == 'label "a.io/b" does not have known values'

    @pytest.mark.parametrize(
        ("key", "hint"),
        [
            ("zone", labels.ZONE),
            ("region", labels.REGION),
            ("instance-type", labels.INSTANCE_TYPE),
            ("arch", labels.ARCH),
            ("os", labels.OS),
            ("capacity-type", labels.CAPACITY_TYPE),
            ("topology.kubernetesio/zone", labels.ZONE),
            ("topology.kubernetes.io/regio", labels.REGION),
            ("karpenter.azure.com/sku-familly", labels.SKU_FAMILY),
        ],
    )
    def test_typos_of_well_known_keys_get_a_hint(self, key: str, hint: str) -> None:
        reason = Requirements().compatible(Requirements([Requirement.new(key, Operator.EXISTS)]))
        assert reason == f'label "{key}" does not have known values (typo of "{hint}"?)'

    def test_typos_of_defined_keys_get_a_hint(self) -> None:
        reason = custom(Operator.IN, "a").compatible(
            Requirements([Requirement.new("example.com/teams", "In", ["a"])])
        )
        assert reason == 'label "example.com/teams" does not have known values (typo of "example.com/team"?)'

    def test_unrelated_keys_get_no_hint(self) -> None:
        reason = Requirements().compatible(Requirements([Requirement.new("deployment", Operator.EXISTS)]))
        assert reason == 'label "deployment" does not have known values'


class TestIntersects:
    def test_keys_defined_on_one_side_only_are_not_checked(self) -> None:
        assert custom(Operator.IN, "a").intersects(zone(Operator.IN, "z")) is None

    def test_every_conflict_is_reported_in_key_order(self) -> None:
        mine = Requirements(
            [Requirement.new(labels.ARCH, "In", ["amd64"]), Requirement.new(labels.OS, "In", ["linux"])]
        )
        theirs = Requirements(
            [Requirement.new(labels.OS, "In", ["windows"]), Requirement.new(labels.ARCH, "In", ["arm64"])]
        )
        assert mine.intersects(theirs) == (
            f"key {labels.ARCH}, {labels.ARCH} In [arm64] not in {labels.ARCH} In [amd64]; "
            f"key {labels.OS}, {labels.OS} In [windows] not in {labels.OS} In [linux]"
        )


class TestLabels:
    def test_custom_keys_get_a_value(self) -> None:
        requirements = Requirements(
            [
                Requirement.new("example.com/team", Operator.IN, ["b", "a"]),
                Requirement.new("example.com/tier", Operator.NOT_IN, ["gold"]),
                Requirement.new("example.com/gone", Operator.DOES_NOT_EXIST),
            ]
        )
        result = requirements.labels()
        assert set(result) == {"example.com/team", "example.com/tier"}
        assert result["example.com/team"] == "a"
        assert requirements.get("example.com/tier").has(result["example.com/tier"])

    def test_well_known_and_restricted_keys_are_left_to_the_provider(self) -> None:
        requirements = Requirements.from_labels(
            {ZONE: "westus2-1", labels.SKU_FAMILY: "D", labels.HOSTNAME: "node-1", labels.NODEPOOL: "default"}
        )
        assert requirements.labels() == {}


# Properties over random requirements, including derived ones (bounded exclusions, crossed bounds).
VALUES = st.sampled_from(["A", "B", "1", "2", "5", "9", "10", "-3", "01"])
MIN = st.none() | st.integers(1, 3)
BASE = st.one_of(
    st.builds(
        lambda v, m: Requirement.new(KEY, Operator.IN, v, m), st.lists(VALUES, min_size=1, max_size=3), MIN
    ),
    st.builds(lambda v, m: Requirement.new(KEY, Operator.NOT_IN, v, m), st.lists(VALUES, max_size=3), MIN),
    st.builds(
        lambda o, m: Requirement.new(KEY, o, (), m),
        st.sampled_from([Operator.EXISTS, Operator.DOES_NOT_EXIST]),
        MIN,
    ),
    st.builds(
        lambda o, n, m: Requirement.new(KEY, o, [str(n)], m),
        st.sampled_from([Operator.GT, Operator.LT, Operator.GTE, Operator.LTE]),
        st.integers(-4, 12),
        MIN,
    ),
)
REQUIREMENTS = BASE | st.builds(Requirement.intersection, BASE, BASE)


@given(REQUIREMENTS, REQUIREMENTS)
def test_intersection_is_commutative(left: Requirement, right: Requirement) -> None:
    assert left.intersection(right) == right.intersection(left)


@given(REQUIREMENTS, REQUIREMENTS, st.one_of(VALUES, st.integers(-6, 14).map(str)))
def test_a_value_is_in_the_intersection_exactly_when_both_allow_it(
    left: Requirement, right: Requirement, value: str
) -> None:
    assert left.intersection(right).has(value) == (left.has(value) and right.has(value))


@given(REQUIREMENTS, REQUIREMENTS)
def test_has_intersection_agrees_with_intersection(left: Requirement, right: Requirement) -> None:
    assert left.has_intersection(right) == (not left.intersection(right).is_empty())


@given(REQUIREMENTS)
def test_any_yields_an_allowed_value(requirement: Requirement) -> None:
    value = requirement.any()
    if value:
        assert requirement.has(value)
    else:  # only a DoesNotExist, or a closed range whose every value is excluded, has nothing to offer
        assert requirement.is_empty() or None not in (requirement.greater_than, requirement.less_than)


@given(st.lists(REQUIREMENTS, max_size=3))
def test_serialization_round_trips(requirements: list[Requirement]) -> None:
    original = Requirements(requirements)
    assert Requirements.from_dicts(original.to_dicts()) == original
