"""No silent wrong answers from plan files: mutants of valid plans (the seeded fuzzer of
plan_mutations.py) are refused before they run, on every rank alike with an error naming the file,
or compute exactly the right data; and a built-in call afterwards is still right."""
from __future__ import annotations

import hashlib
import json
import pathlib
import random
import re

import pytest
from conftest import run_job
from forestcc.plan import PlanError, builtin, dumps, proof, validation_errors, verify
from plan_mutations import mutate

# (algo, collective, in place, root): plans of every shape the fuzzer edits; the first is the
# plan of issue 12 (an extra signal in it skewed the semaphores of later built-in calls).
SOURCES = [
    ("ring", "all_reduce", True, None),
    ("direct", "all_reduce", False, None),
    ("ring", "all_gather", False, None),
    ("direct_small", "all_gather", True, None),
    ("direct", "reduce_scatter", False, None),
    ("halving_doubling", "reduce_scatter", True, None),
    ("pairwise", "all_to_all", False, None),
    ("bruck", "all_to_all", True, None),
    ("tree", "broadcast", True, 1),
    ("eager", "all_reduce", False, None),
]


def _sources(nranks):
    return [({"collective": coll, "in_place": in_place, "root": root},
             builtin.generate(algo, coll, nranks, root=root, in_place=in_place))
            for algo, coll, in_place, root in SOURCES]


def _mutants(nranks, count, seed):
    """count (mutant, meta, description) drawn with a seeded rng; edits that do not apply to
    the drawn plan are redrawn."""
    rng = random.Random(seed)
    sources = _sources(nranks)
    out = []
    while len(out) < count:
        meta, plan = rng.choice(sources)
        mutant, what = mutate(plan, rng)
        if mutant is not None:
            out.append((mutant, {**meta, "k": plan["chunks_per_block"]}, what))
    return out


def _write(path, plan) -> None:
    path.write_text(dumps(plan) if isinstance(plan.get("ranks"), list) else json.dumps(plan))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private proof cache, so that tests neither read nor leave records elsewhere."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(proof, "_seen", {})
    return tmp_path / "cache" / "forestcc" / "verified"


def test_fuzzed_mutants_are_refused_or_proven(tmp_path, cache):
    refused = proven = 0
    for i, (mutant, _meta, what) in enumerate(_mutants(3, 200, seed=12)):
        path = tmp_path / f"mutant{i}.json"
        _write(path, mutant)
        try:
            plan = proof.load_proven(path)
        except PlanError as error:  # nothing else: no KeyError, RecursionError, cast error
            assert str(path) in str(error).splitlines()[0], (what, str(error))
            refused += 1
        else:
            assert verify(plan).ok, what
            assert proof.plan_status(path) == proof.PROVEN
            proven += 1
    # the fuzzer makes both kinds (most edits break a plan, some leave it correct)
    assert refused > 100 and proven > 10, (refused, proven)


def test_the_plan_of_issue_12_is_refused(tmp_path, cache):
    plan = builtin.generate("ring", "all_reduce", 2, in_place=True)
    plan["ranks"][0]["workers"][0]["ops"].append({"op": "signal", "ch": 0})
    path = tmp_path / "extra_signal.json"
    _write(path, plan)
    with pytest.raises(PlanError, match=re.escape(str(path)) + ".*refused before running") as e:
        proof.load_proven(path)
    assert "unbalanced_signals" in str(e.value)


def _job_manifest(tmp_path, nranks):
    """The issue's plan, every mutant that proves and as many refused ones (bounded), each with
    the verdict the proof gives in this process."""
    control = builtin.generate("ring", "all_reduce", nranks, in_place=True)
    issue = json.loads(json.dumps(control))
    issue["ranks"][0]["workers"][0]["ops"].append({"op": "signal", "ch": 0})
    meta = {"collective": "all_reduce", "in_place": True, "root": None,
            "k": control["chunks_per_block"]}
    candidates = [(control, meta, "unchanged"), (issue, meta, "issue 12")]
    candidates += _mutants(nranks, 120, seed=nranks)
    entries, expected, refused = [], [], 0
    for i, (plan, meta, what) in enumerate(candidates):
        path = tmp_path / f"mutant{i}.json"
        _write(path, plan)
        try:
            proof.load_proven(path)
            verdict = "RIGHT"
        except PlanError:
            verdict = "REFUSED"
            if refused >= 20 and what != "issue 12":
                continue
            refused += 1
        entries.append({**meta, "path": str(path), "what": what,
                        "valid": not validation_errors(plan)})
        expected.append(verdict)
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps(entries))
    return manifest, entries, expected


def _verdicts(stdout):
    """{(kind, index): {rank: rest of line}} from forestcc-run --label output."""
    out: dict = {}
    for line in stdout.splitlines():
        m = re.match(r"\[(\d+)\] (MUTANT|BUILTIN) (\d+) (.*)$", line)
        if m:
            out.setdefault((m[2], int(m[3])), {})[int(m[1])] = m[4]
    return out


@pytest.mark.parametrize("nranks", [2, 3])
def test_mutated_plan_files_run_right_or_are_refused_on_every_rank(tmp_path, cache, no_new_shm,
                                                                     nranks):
    # the proofs of this process go to `cache`; the job proves every file again in its own
    manifest, entries, expected = _job_manifest(tmp_path, nranks)
    job_cache = tmp_path / "job-cache"
    result = run_job(nranks, "plan_mutants.py", str(manifest),
                     env={"XDG_CACHE_HOME": str(job_cache), "FORESTCC_TIMEOUT": "30"})
    verdicts = _verdicts(result.stdout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "REFUSED" in expected and "RIGHT" in expected
    for i, (entry, want) in enumerate(zip(entries, expected, strict=True)):
        mutant = verdicts.get(("MUTANT", i), {})
        assert sorted(mutant) == list(range(nranks)), (entry["what"], mutant)
        assert len(set(mutant.values())) == 1, (entry["what"], mutant)  # same message everywhere
        assert mutant[0].split()[0] == want, (entry["what"], mutant)
        assert verdicts[("BUILTIN", i)] == dict.fromkeys(range(nranks), "RIGHT"), entry["what"]
    # every distinct valid content was proven once on the node and recorded for the next job
    # (the rest was refused by the validator, which is cheap and not recorded)
    digests = {hashlib.sha256(pathlib.Path(e["path"]).read_bytes()).hexdigest()
               for e in entries if e["valid"]}
    records = {p.name.split("-")[0] for p in (job_cache / "forestcc" / "verified").iterdir()
               if not p.name.startswith(".")}
    assert records == digests
