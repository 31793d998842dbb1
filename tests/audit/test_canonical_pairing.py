"""Pairing a run's entries with the canonical reanalysis' (found on the honest oracle run, issue 31/37): a cutoff
written in a key (``@0.40nm``) is not a key separator, and an entry whose cutoff lives only in its stated
definition is compared when that definition is the reanalysis' own."""
from __future__ import annotations

from mdbench.audit.canonical import _canonical_match, _definitions_match
from mdbench.audit.runread import Entry

CHANNELS = ("FSI:O", "FSI:N", "DMC:O_ether", "DMC:O_carbonyl")


def _cn(key: str, value: float) -> Entry:
    return Entry(f"observables.coordination/{key}", value, [value] * 4, {"value": value})


def test_each_channel_at_a_fixed_cutoff_pairs_with_its_own_canonical_channel():
    canonical = {}
    for i, ch in enumerate(CHANNELS):
        for suffix in ("@first_min", "@0.40nm"):
            e = _cn(ch + suffix, 1.0 + i)
            canonical[e.key] = e
    for key, e in canonical.items():
        got = _canonical_match("coordination", e, canonical)
        assert got is not None and got.key == key, (key, got and got.key)


def test_the_same_stated_definition_matches_where_one_side_declares_no_cutoff_field():
    text = "per anion: distinct cations in contact 0 -> free_or_SSIP, 1 -> CIP, >=2 -> AGG; contact = FSI:O within 0.3 nm"
    run = Entry("observables.association/FSI/CIP", 0.2, None, {"definition": text})
    canon = Entry("observables.association/FSI/CIP", 0.2, None, {"definition": text, "cutoff_nm": 0.3})
    assert _definitions_match("association", run, canon)
    other = Entry(run.key, 0.2, None, {"definition": text.replace("0.3 nm", "0.2 nm")})
    assert not _definitions_match("association", other, canon)
    assert not _definitions_match("association", Entry(run.key, 0.2, None, {}), canon)
