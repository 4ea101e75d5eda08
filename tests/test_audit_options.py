"""`kanalyze audit`'s static pass as `check` runs it: `--extend-select` (the z3 proofs), `--ir`,
and targeted gates that still run a candidate nothing flagged; pairs naming missing files;
`--no-spares`; `--check-builds own`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_audit_allclose import NEEDS_A_COMPILER, builds_at_import

from kanalyze.audit.journal import read_records
from kanalyze.cli import main

pytest.importorskip("torch")
pytest.importorskip("triton")

KB = Path(__file__).resolve().parent.parent / "fixtures" / "kernelbench"
CLEAN = KB / "candidates" / "level1_problem6_leaky_relu.py"
PROBLEM = KB / "level1" / "6_leaky_relu.py"


def _audit(tmp_path: Path, name: str, candidate: Path, *options: str, problem: Path = PROBLEM) -> list[dict]:
    manifest = tmp_path / f"{name}.jsonl"
    manifest.write_text(json.dumps({"candidate": str(candidate), "problem": str(problem)}) + "\n")
    out = tmp_path / name
    code = main(["audit", "--manifest", str(manifest), "--output", str(out), "--device", "cpu", "-q", *options])
    assert code in (0, 1)
    records, _, _ = read_records(str(out / "results.jsonl"))
    return records


def test_extend_select_runs_the_proofs_and_changes_the_pair_id(tmp_path) -> None:
    plain = _audit(tmp_path, "plain", CLEAN, "--gates", "MEM002")
    proofs = _audit(tmp_path, "proofs", CLEAN, "--gates", "MEM002", "--extend-select", "MEM004")
    codes = {name: {f["code"] for f in records[0]["static"]} for name, records in (("plain", plain),
                                                                                    ("proofs", proofs))}
    assert "MEM004" not in codes["plain"] and "MEM004" in codes["proofs"], codes   # int32 `pid * BLOCK`
    assert plain[0]["id"] != proofs[0]["id"]


def test_targeted_gates_still_run_a_candidate_nothing_flagged(tmp_path) -> None:
    broken = tmp_path / "level1_problem6_leaky_relu_broken.py"
    broken.write_text(CLEAN.read_text().replace("        x = x.contiguous()\n",
                                                "        rows, cols, depth = x.shape   # the input is 2-D\n"
                                                "        x = x.contiguous()\n"))
    records = _audit(tmp_path, "broken", broken, "--gates", "targeted")
    assert records[0]["static"] == []
    verdict = records[0]["verdicts"]["CMP001"]
    assert verdict["status"] == "confirmed" and "not enough values to unpack" in verdict["summary"]


def test_ir_adds_the_compiled_codes_evidence_to_the_static_pass(tmp_path) -> None:
    tf32 = KB / "candidates" / "level1_problem3_matmul_tf32.py"
    problem = KB / "level1" / "3_matmul.py"
    compiled = _audit(tmp_path, "ir", tf32, "--gates", "MEM002", "--ir", problem=problem)
    source = _audit(tmp_path, "no-ir", tf32, "--gates", "MEM002", problem=problem)
    message = {name: next(f["message"] for f in records[0]["static"] if f["code"] == "PRC001")
               for name, records in (("ir", compiled), ("source", source))}
    assert "IR: compiles to" in message["ir"] and "tf32" in message["ir"], message
    assert "IR:" not in message["source"]
    assert compiled[0]["id"] != source[0]["id"]


def test_a_pair_whose_file_does_not_exist_is_said_and_the_others_run(tmp_path, capsys) -> None:
    """A manifest line naming a missing file (a path written relative to the wrong folder) is
    not a pair that ran to the end with nothing found: it is named on stderr, left out of the
    journal, and makes the exit code 1; when every pair's file is missing, nothing runs (exit 2)."""
    manifest = tmp_path / "pairs.jsonl"
    lines = [{"candidate": str(CLEAN), "problem": str(PROBLEM)},
             {"candidate": "corpus/level1_problem6_gone.py", "problem": str(PROBLEM)}]
    manifest.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "out"
    code = main(["audit", "--manifest", str(manifest), "--output", str(out), "--device", "cpu", "-q",
                 "--gates", "MEM002"])
    err = capsys.readouterr().err
    assert code == 1
    assert "1 of 2 pairs name a file that does not exist" in err and "level1_problem6_gone.py" in err
    assert f"relative to its folder, {tmp_path}" in err
    records, _, _ = read_records(str(out / "results.jsonl"))
    assert [Path(r["candidate"]).name for r in records] == [CLEAN.name]

    manifest.write_text(json.dumps(lines[1]) + "\n")
    assert main(["audit", "--manifest", str(manifest), "--output", str(tmp_path / "none"), "--device", "cpu",
                 "-q"]) == 2
    assert "no pairs to audit: 1 of 1 pairs name a file that does not exist" in capsys.readouterr().err
    assert not (tmp_path / "none" / "results.jsonl").exists()


def test_no_spares_starts_each_pair_s_process_at_its_turn(tmp_path) -> None:
    """By default the second pair's process stands by while the first runs (tests/test_audit.py);
    with `--no-spares` none does: no line says it stood by."""
    manifest = tmp_path / "pairs.jsonl"
    twin = tmp_path / "level1_problem6_leaky_relu_again.py"
    twin.write_text(CLEAN.read_text() + "\n# another file, another pair\n")
    manifest.write_text("".join(json.dumps({"candidate": str(c), "problem": str(PROBLEM)}) + "\n"
                                for c in (CLEAN, twin)))
    out = tmp_path / "out"
    assert main(["audit", "--manifest", str(manifest), "--output", str(out), "--device", "cpu", "-q",
                 "--gates", "MEM002", "--no-spares"]) in (0, 1)
    records, _, _ = read_records(str(out / "results.jsonl"))
    assert len(records) == 2 and all(r["status"] == "done" for r in records), records
    assert not any("standby_seconds" in r for r in records)


@NEEDS_A_COMPILER
def test_check_builds_own_has_kernelbench_s_check_build_the_extension_again(tmp_path, monkeypatch) -> None:
    """By default the check loads the extension the gates built (tests/test_audit_allclose.py); with
    `--check-builds own` it builds its own in torch's folder, as KernelBench does, so that its time
    holds a build as kanalyze's does; the line's options say so."""
    from kanalyze.dynamic.sandbox import extensions
    from kanalyze.dynamic.sandbox.process import candidate_caches

    monkeypatch.setenv(extensions.ROOT_VARIABLE, str(tmp_path / "builds"))
    candidate = builds_at_import(tmp_path)
    (record,) = _audit(tmp_path, "own", candidate, "--gates", "MEM002", "--check-builds", "own")
    assert record["status"] == "done" and record["allclose"]["verdict"] == "PASS", record
    assert record["options"]["check_builds"] == "own"
    caches = candidate_caches({}, str(candidate))
    # (on the CPU the gates do not run a C++ candidate: the only build is the check's)
    assert list(Path(caches["TORCH_EXTENSIONS_DIR"]).glob("custom_op*")), "the check did not build its own"
    assert not list(Path(caches[extensions.ROOT_VARIABLE]).glob("custom_op-*")), "built in the gates' folder"
