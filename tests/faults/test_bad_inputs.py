"""Every bad input of the catalogue (``tests/faults/bad_inputs.py``) raises its typed error with a message
naming the problem; nothing committed is lost and a refused write leaves nothing behind. The catalogue in
RELIABILITY.md is generated from the same list and must match it."""

from __future__ import annotations

import os
import uuid

import pytest

from logstore import open_object_store
from logstore.errors import DynacommitError
from tests.support.memory import reset_memory
from table import Table, write_table
from table.cli import main as cli_main
from tests.faults.bad_inputs import (
    CASES,
    CLI,
    ROOT,
    Case,
    Env,
    base,
    catalogue_in,
    catalogue_markdown,
)


@pytest.fixture
def env() -> Env:
    bucket = f"bad-{uuid.uuid4().hex[:8]}"
    found = Env(fresh=f"memory://{bucket}/fresh", table=f"memory://{bucket}/table")
    write_table(found.table, base(), partition_by=["day"])
    write_table(found.table, base())
    yield found
    reset_memory()


def state_of(uri: str) -> tuple[int, list]:
    table = Table(uri)
    return table.version, sorted(table.to_pyarrow_table().to_pylist(), key=lambda r: (r["day"], r["x"]))


def leftovers(uri: str) -> list[str]:
    objects = open_object_store(uri)
    prefix = uri.split("/", 3)[3] + "/"
    return [o.key for o in objects.list(prefix)] + [f"upload {u.key}" for u in objects.list_uploads(prefix)]


def test_the_catalogue_holds_at_least_80_distinct_inputs():
    assert len(CASES) >= 80
    assert len({c.id for c in CASES}) == len(CASES)
    for case in CASES:
        assert case.error == CLI or issubclass(case.error, DynacommitError), case.id


def test_reliability_md_catalogue_is_generated_from_the_cases():
    with open(os.path.join(ROOT, "RELIABILITY.md"), encoding="utf-8") as handle:
        document = handle.read()
    assert catalogue_in(document) == catalogue_markdown(), (
        "RELIABILITY.md's bad-input catalogue is out of date: run `python tests/faults/bad_inputs.py --write-catalogue`")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_raises_its_typed_error_naming_the_problem(case: Case, env: Env, request, capsys):
    if case.needs_s3:
        stack = request.getfixturevalue("local_stack")
        env.s3 = f"s3://{stack.bucket}/bad/{uuid.uuid4().hex[:12]}"
        env.options = stack.storage_options()
    before = state_of(env.table) if case.existing else None
    problems = []
    if case.error == CLI:
        problems += run_cli(case, env, capsys)
    else:
        problems += run_api(case, env)
    if case.existing and state_of(env.table) != before:
        problems.append(f"the table changed: version {before[0]} -> {state_of(env.table)[0]}")
    if case.refused_write and leftovers(env.fresh):
        problems.append(f"the refused write left {leftovers(env.fresh)}")
    assert not problems, f"{case.shows}:\n" + "\n".join(problems)


def run_api(case: Case, env: Env) -> list[str]:
    try:
        case.run(env)
    except BaseException as exc:  # noqa: BLE001 - any escape is judged below
        error = exc
    else:
        return [f"nothing was raised; expected {case.error_name}"]
    problems = []
    where = f"{type(error).__module__}.{type(error).__name__}: {str(error)[:300]}"
    if not isinstance(error, DynacommitError):
        problems.append(f"raised {where}, which is not a DynacommitError")
    if not isinstance(error, case.error):
        problems.append(f"raised {where}; expected {case.error_name}")
    if case.fragment not in str(error):
        problems.append(f"the message does not contain {case.fragment!r}: {str(error)[:300]!r}")
    if case.secret is not None and case.secret in str(error):
        problems.append("the message echoes the secret")
    return problems


def run_cli(case: Case, env: Env, capsys) -> list[str]:
    argv = case.run(env)
    try:
        status = cli_main(argv)
    except BaseException as exc:  # noqa: BLE001
        return [f"the command raised {type(exc).__module__}.{type(exc).__name__}: {exc} (a traceback for the user)"]
    out = capsys.readouterr()
    text = out.err + out.out
    problems = []
    if status != 2:
        problems.append(f"exit status {status}, expected 2; output: {text[-400:]!r}")
    if "error:" not in out.err:
        problems.append(f"no 'error:' line on stderr: {out.err[-400:]!r}")
    if "Traceback" in text:
        problems.append("a traceback was printed")
    if case.fragment not in text:
        problems.append(f"the output does not contain {case.fragment!r}: {text[-400:]!r}")
    if case.secret is not None and case.secret in text:
        problems.append("the output echoes the secret")
    return problems
