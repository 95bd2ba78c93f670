"""Random SQL92 selector cases (expressions + properties) for the differential fixture.

``python tests/filter/sql92_cases.py N SEED > cases.tsv`` writes one case a line:
``expression<TAB>name<TAB>value...`` (newlines in the expression as ``\\n``). The answers of
RocketMQ 4.9.7's own ``SelectorParser`` for these lines are in
``tests/fixtures/sql92/java_answers.txt`` (see ``tests/fixtures/sql92/README.md``).
"""
from __future__ import annotations

import random
import sys

NAMES = ["a", "b", "c", "A", "$x", "_y"]
VALUES = ["1", "5", "-3", "0", "10", "2.5", "-0", "1e3", "NaN", "Infinity", " 7 ", "0x1p3", "3000000000",
          "abc", "", "true", "TRUE", "false", "x", "5L", "1.5f", "٣", "+4", "9223372036854775808"]
NUMS = ["0", "1", "5", "10", "3", "2147483647", "2147483648", "9223372036854775807", "5L", "1.5",
        "2.", ".5", "1e2", "0.0", "3E-2", "007"]
STRS = ["'abc'", "'x'", "'5'", "''", "'it''s'", "'true'", "'1.0'"]


def operand(r: random.Random, depth: int) -> str:
    c = r.random()
    if c < 0.45:
        return r.choice(NAMES)
    if c < 0.7:
        return r.choice(NUMS)
    if c < 0.82:
        return r.choice(STRS)
    if c < 0.88:
        return r.choice(["TRUE", "FALSE", "NULL", "true", "null"])
    if c < 0.95:
        return "-" + operand(r, depth)
    return "+" + operand(r, depth)


def cond(r: random.Random, depth: int) -> str:
    c = r.random()
    if depth > 0 and c < 0.25:
        op = r.choice(["AND", "OR", "and", "or"])
        return f"{cond(r, depth - 1)} {op} {cond(r, depth - 1)}"
    if depth > 0 and c < 0.32:
        return f"({cond(r, depth - 1)})"
    if depth > 0 and c < 0.38:
        return f"NOT {cond(r, depth - 1)}"
    c = r.random()
    x = operand(r, depth)
    if c < 0.45:
        return f"{x} {r.choice(['=', '<>', '>', '>=', '<', '<='])} {operand(r, depth)}"
    if c < 0.55:
        return f"{x} {r.choice(['BETWEEN', 'NOT BETWEEN'])} {operand(r, depth)} AND {operand(r, depth)}"
    if c < 0.68:
        items = ", ".join(r.choice(STRS) for _ in range(r.randint(1, 6)))
        return f"{x} {r.choice(['IN', 'NOT IN'])} ({items})"
    if c < 0.78:
        return f"{x} {r.choice(['IS NULL', 'IS NOT NULL', 'is null'])}"
    if c < 0.85:
        return x
    return f"{x} = {operand(r, depth)} = {operand(r, depth)}"


NOISE = [" )", " b", " AND", " --c\\n", " /* c */", " #", " 5", " NOT", " ,", "(", " = ", " IS", " NOT 5", "--x"]


def case(r: random.Random) -> str:
    e = cond(r, r.randint(0, 3))
    if r.random() < 0.15:
        e = e + r.choice(NOISE)
    if r.random() < 0.05:
        e = r.choice(NOISE) + e
    props = []
    for name in NAMES:
        if r.random() < 0.6:
            props += [name, r.choice(VALUES)]
    return "\t".join([e] + props)


def main() -> None:
    n, seed = int(sys.argv[1]), int(sys.argv[2])
    r = random.Random(seed)
    for _ in range(n):
        print(case(r))


if __name__ == "__main__":
    main()
