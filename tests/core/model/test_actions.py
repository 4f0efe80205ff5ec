"""Actions: exact JSON round trip, unknown fields kept, hypothesis over random actions."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from serialake.core.model.actions import (
    AddFile,
    CommitInfo,
    DeletionVectorDescriptor,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
    action_from_json,
)

_text = st.text(min_size=1, max_size=12)
_pv = st.dictionaries(_text, st.one_of(st.none(), _text), max_size=3)
_dv = st.builds(
    DeletionVectorDescriptor,
    storage_type=st.sampled_from(["u", "i", "p"]),
    path_or_inline_dv=_text,
    size_in_bytes=st.integers(0, 2**31 - 1),
    cardinality=st.integers(0, 2**40),
    offset=st.one_of(st.none(), st.integers(1, 2**31 - 1)),
)
_add = st.builds(
    AddFile,
    path=_text,
    partition_values=_pv,
    size=st.integers(0, 2**40),
    modification_time=st.integers(0, 2**41),
    data_change=st.booleans(),
    stats=st.one_of(st.none(), st.just('{"numRecords":3}')),
    tags=st.one_of(st.none(), st.dictionaries(_text, _text, max_size=2)),
    deletion_vector=st.one_of(st.none(), _dv),
    base_row_id=st.one_of(st.none(), st.integers(0, 2**40)),
)
_remove = st.builds(
    RemoveFile,
    path=_text,
    deletion_timestamp=st.one_of(st.none(), st.integers(0, 2**41)),
    data_change=st.booleans(),
    partition_values=st.one_of(st.none(), _pv),
    size=st.one_of(st.none(), st.integers(0, 2**40)),
    deletion_vector=st.one_of(st.none(), _dv),
)
_meta = st.builds(
    Metadata,
    schema_string=st.just('{"type":"struct","fields":[]}'),
    partition_columns=st.lists(_text, max_size=2).map(tuple),
    configuration=st.dictionaries(_text, _text, max_size=3),
    id=_text,
    created_time=st.one_of(st.none(), st.integers(0, 2**41)),
)
_proto = st.builds(
    Protocol,
    min_reader_version=st.integers(1, 3),
    min_writer_version=st.integers(1, 7),
    reader_features=st.one_of(st.none(), st.lists(_text, max_size=3).map(tuple)),
    writer_features=st.one_of(st.none(), st.lists(_text, max_size=3).map(tuple)),
)
_txn = st.builds(
    SetTransaction, app_id=_text, version=st.integers(0, 2**40), last_updated=st.one_of(st.none(), st.integers())
)
_domain = st.builds(DomainMetadata, domain=_text, configuration=_text, removed=st.booleans())
_ci = st.builds(CommitInfo, values=st.dictionaries(_text, st.one_of(_text, st.integers(), st.booleans()), max_size=4))


@settings(max_examples=300, deadline=None)
@given(st.one_of(_add, _remove, _meta, _proto, _txn, _domain, _ci))
def test_round_trip(action) -> None:
    line = action.to_json()
    back = action_from_json(line)
    assert back == action
    assert json.loads(back.to_json()) == json.loads(line)


def test_unknown_fields_are_kept() -> None:
    line = (
        '{"add":{"path":"a","partitionValues":{},"size":1,"modificationTime":2,"dataChange":true,'
        '"futureField":{"x":1}}}'
    )
    a = action_from_json(line)
    assert json.loads(a.to_json()) == json.loads(line)


def test_unknown_action_is_ignored() -> None:
    assert action_from_json('{"checkpointMetadata":{"version":3}}') is None


def test_remove_of_add_carries_dv_and_stats() -> None:
    dv = DeletionVectorDescriptor("u", "ab" * 10, 10, 2, 1)
    a = AddFile(
        path="x", partition_values={}, size=1, modification_time=1, stats='{"numRecords":5}', deletion_vector=dv
    )
    r = a.remove()
    assert r.key == a.key and r.stats == a.stats and r.data_change
    assert a.key == ("x", "u" + "ab" * 10 + "@1")
    assert a.num_records == 5


def test_what_a_commit_derives_from_metadata_is_worked_out_once_per_object() -> None:
    import copy
    import pickle

    from serialake.core.model.actions import Metadata

    calls: list[str] = []

    def level(meta: Metadata) -> str:
        calls.append(meta.id)
        return meta.configuration.get("delta.isolationLevel", "WriteSerializable")

    meta = Metadata(configuration={"delta.isolationLevel": "Serializable"})
    assert meta.derived(level) == "Serializable" and meta.derived(level) == "Serializable"
    assert calls == [meta.id]
    changed = meta.with_configuration(**{"delta.isolationLevel": None})  # a change is a new object
    assert changed.derived(level) == "WriteSerializable" and len(calls) == 2
    # Kept beside the object, not in it: its fields, copies and pickles are as before.
    assert "_derived" not in vars(meta) and Metadata(**vars(meta)) == meta
    assert pickle.loads(pickle.dumps(meta)) == meta and copy.copy(meta) == meta
    again = pickle.loads(pickle.dumps(meta))
    assert again.derived(level) == "Serializable" and len(calls) == 3
