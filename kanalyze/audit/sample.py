"""The hand-audit sample: N pairs per clause, drawn with a seed, for a person to check by hand.

    hand_audit_sample(records, per_stratum=5, seed=0) -> [{"stratum", "size", "pairs"}]

A paper that reports kanalyze's numbers should report its own hand-check of them:
pick a few pairs of each kind, read the candidate and the witness, and say how many
verdicts a person agrees with.  The strata are one per clause (the pairs whose
verdict for that clause is `confirmed`), then `no violation` (the pairs that ran to
the end with nothing confirmed: where a missed violation would hide).

Each stratum keeps the `per_stratum` pairs with the smallest sha256 of
`"{seed}:{stratum}:{pair id}"`: a uniform sample without replacement that depends
on nothing but the journal's pair ids and the seed (not on the journal's order,
nor on the machine).  A journal that grows keeps the pairs it had sampled unless
a new pair hashes below them, and another seed gives an independent sample.
"""

from __future__ import annotations

import hashlib

NO_VIOLATION = "no violation"


def _rank(seed: int, stratum: str, identifier: str) -> str:
    return hashlib.sha256(f"{seed}:{stratum}:{identifier}".encode()).hexdigest()


def strata(records: list[dict]) -> dict[str, list[dict]]:
    """{clause: the pairs confirming it} in clause order, then the pairs with nothing confirmed."""
    by_clause: dict[str, list[dict]] = {}
    clean = []
    for record in records:
        if record.get("status") == "duplicate":
            continue
        confirmed = [code for code, v in record.get("verdicts", {}).items() if v.get("status") == "confirmed"]
        for code in confirmed:
            by_clause.setdefault(code, []).append(record)
        if record.get("status") == "done" and not confirmed:
            clean.append(record)
    found = dict(sorted(by_clause.items()))
    if clean:
        found[NO_VIOLATION] = clean
    return found


def hand_audit_sample(records: list[dict], per_stratum: int = 5, seed: int = 0) -> list[dict]:
    """Per stratum: its name, how many pairs it has, and the sampled records (in rank order)."""
    sample = []
    for name, members in strata(records).items():
        chosen = sorted(members, key=lambda r: _rank(seed, name, r["id"]))[:max(per_stratum, 0)]
        sample.append({"stratum": name, "size": len(members), "pairs": chosen})
    return sample
