"""Sources and sinks (issue 41, item 3): every front end is a source, the release and a sink,
composed by :func:`privembed.release.publish`; none opens a ledger or stages a release itself.

The composition's rules, checked on a source and sinks written here: a sink that commits once
publishes one release of every row; one that commits per batch publishes one release per batch,
with ids unique across them; a failure before a commit records nothing; the summary adds the
releases up (a keyed re-release of unchanged content is free).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from privembed import LaplaceMechanism
from privembed.keys.ledger import DuplicateIds, Ledger
from privembed.release import Batch, ReleaseRequest, Releases, Rows, publish

SRC = Path(__file__).resolve().parents[1] / "src" / "privembed"
KEY = bytes(range(32))
MECH = LaplaceMechanism(epsilon=20.0)


class _Vectors:
    """Three batches of two rows, ids n0..n5 (or ``ids`` as given)."""

    name = "vectors"
    model = "test-model"

    def __init__(self, ids: list[str] | None = None) -> None:
        self.X = np.random.default_rng(0).standard_normal((6, 8)).astype(np.float32)
        self.ids = ids or [f"n{i}" for i in range(6)]

    def batches(self):
        for start in range(0, 6, 2):
            yield Batch(self.X[start : start + 2], self.ids[start : start + 2], start=start)


class _Collect:
    """A sink that keeps what it is given; ``per_batch``: commits each batch before keeping it;
    ``fail_at``: raises at that batch (before its commit)."""

    destination = "memory"

    def __init__(self, per_batch: bool, fail_at: int | None = None) -> None:
        self.per_batch, self.fail_at = per_batch, fail_at
        self.rows: list[np.ndarray] = []

    def run(self, source, releases: Releases) -> None:
        for i, batch in enumerate(source.batches()):
            Y = releases.protect(batch)
            if i == self.fail_at:
                raise RuntimeError("the sink failed")
            if self.per_batch:
                releases.commit()
                self.rows.append(Y)
                releases.published()
            else:
                self.rows.append(Y)
        if not self.per_batch:
            releases.commit()
            releases.published()


def _releases(led: Path) -> list[int]:
    """Rows per release recorded in the ledger, in order."""
    if not led.exists():
        return []
    with Ledger(led, readonly=True) as L:
        assert L.unpublished() == []  # every release recorded was published
        counts: dict[str, int] = {}
        for row in L.export():  # in order
            counts[row["batch"]] = counts.get(row["batch"], 0) + 1
    return list(counts.values())


@pytest.mark.parametrize("per_batch", [False, True])
def test_a_sink_publishes_one_release_per_commit(tmp_path, per_batch):
    led = tmp_path / "l.db"
    sink = _Collect(per_batch)
    run = publish(_Vectors(), sink, MECH, ReleaseRequest(key=KEY, ledger=led))
    assert _releases(led) == ([2, 2, 2] if per_batch else [6])
    assert run.count == (3 if per_batch else 1)
    assert run.summary is not None
    assert (run.summary.rows, run.summary.fresh, run.summary.free) == (6, 6, 0)
    assert run.summary.destination == "memory" and run.summary.dim_out == 8
    # the same content again under the same key and ids: identical vectors, charged nothing
    again = _Collect(per_batch)
    run2 = publish(_Vectors(), again, MECH, ReleaseRequest(key=KEY, ledger=led))
    assert np.array_equal(np.concatenate(again.rows), np.concatenate(sink.rows))
    assert (run2.summary.fresh, run2.summary.free) == (0, 6)


def test_ids_are_unique_across_the_releases_of_a_per_batch_sink(tmp_path):
    led = tmp_path / "l.db"
    ids = ["a", "b", "c", "a", "d", "e"]  # "a" again in the second batch
    sink = _Collect(per_batch=True)
    with pytest.raises(DuplicateIds, match="'a'"):
        publish(_Vectors(ids), sink, MECH, ReleaseRequest(key=KEY, ledger=led))
    assert _releases(led) == [2]  # the first batch was published, nothing after it
    assert len(sink.rows) == 1


@pytest.mark.parametrize("per_batch", [False, True])
def test_a_failure_before_the_commit_records_nothing_of_its_release(tmp_path, per_batch):
    led = tmp_path / "l.db"
    with pytest.raises(RuntimeError, match="the sink failed"):
        publish(
            _Vectors(), _Collect(per_batch, fail_at=1), MECH, ReleaseRequest(key=KEY, ledger=led)
        )
    assert _releases(led) == ([2] if per_batch else [])


def test_the_request_refuses_a_seed_with_a_ledger_before_the_source_is_read(tmp_path):
    class _Unread(_Vectors):
        def batches(self):
            raise AssertionError("read")

    req = ReleaseRequest(rng=3, ledger=tmp_path / "l.db")
    with pytest.raises(ValueError, match="a seed cannot be used with"):
        req.check()
    with pytest.raises(ValueError, match="cannot be used with"):
        publish(_Unread(), _Collect(False), MECH, req)
    assert not (tmp_path / "l.db").exists()


def test_rows_in_memory_are_a_source_and_their_alias_claims_are_recorded(tmp_path):
    led = tmp_path / "l.db"
    X = np.eye(3, dtype=np.float32)
    batch = Batch(X, ["x", "y", "z"], aliases=(["t1", "t2", "t3"], ["x", "y", "z"]))
    sink = _Collect(per_batch=False)
    publish(Rows(batch, "request", "m"), sink, MECH, ReleaseRequest(key=KEY, ledger=led))
    with Ledger(led) as L:
        assert L.lookup_aliases(["t1", "t2", "t3", "t4"]) == {"t1": "x", "t2": "y", "t3": "z"}


#: the front ends composed of a source, the release and a sink
FRONT_ENDS = [
    "release/files.py",
    "integrations/stream.py",
    "integrations/shards.py",
    "integrations/cluster_index.py",
    "server/service.py",
]


@pytest.mark.parametrize("module", FRONT_ENDS)
def test_no_front_end_opens_a_ledger_or_stages_a_release_itself(module):
    text = (SRC / module).read_text(encoding="utf-8")
    code = re.sub(r'"""[\s\S]*?"""', "", text)  # docstrings may name what they do not do
    for spelled in (
        r"open_ledger\(",
        r"ledger_for_command\(",
        r"Ledger\(",
        r"\.stage\(",
        r"Release\(",
    ):
        assert not re.search(r"(?<![\w])" + spelled, code), f"{module} calls {spelled} itself"
    assert "publish(" in code, f"{module} does not compose a source and a sink"


def test_a_store_upsert_is_a_composition_too():
    """``ProtectedCollection.add`` (``index``'s sink) begins no release of its own (its probe
    ``Release``, without a ledger, only reads the protection metadata)."""
    text = (SRC / "integrations" / "collection_core.py").read_text(encoding="utf-8")
    code = re.sub(r'"""[\s\S]*?"""', "", text)
    for spelled in (r"open_ledger\(", r"ledger_for_command\(", r"\.stage\(", r"with Release\("):
        assert not re.search(r"(?<![\w])" + spelled, code), f"collection_core.py calls {spelled}"
    assert "publish(" in code
