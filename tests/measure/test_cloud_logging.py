"""CloudLoggingStore on the real google-cloud-logging client against a loopback server.

The client is ``Client(project=..., credentials=AnonymousCredentials(),
_use_grpc=False, client_options={"api_endpoint": "http://127.0.0.1:PORT"})``,
the resource is explicit (``global``), the metadata-server probe is patched, and
any socket traffic off the loopback raises (see ``gcl_server.loopback_only``).
"""

from __future__ import annotations

import logging
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from goodput_jax.measure.calculator import BadputType, GoodputCalculator
from goodput_jax.measure.events import Event
from goodput_jax.measure.events import EventKind as K
from goodput_jax.measure.stores import open_store
from goodput_jax.measure.stores.base import StoreError
from goodput_jax.measure.stores.cloud_logging import (
    SCHEMA_KEY,
    CloudLoggingCursor,
    CloudLoggingStore,
    quote_filter_value,
)
from goodput_jax.measure.stores.sqlite import SQLiteStore
from tests.measure.gcl_server import FakeCloudLogging, global_resource, loopback_only, make_store
from tests.measure.store_contract import T0, read_all, steps


@pytest.fixture(scope="module")
def server():
    with loopback_only(), FakeCloudLogging() as srv:
        yield srv


@pytest.fixture
def srv(server):
    server.reset()
    yield server
    server.reset()


@pytest.fixture
def stores():
    opened = []
    yield opened
    for s in opened:
        s.close(timeout=1)


@pytest.fixture
def new_store(srv, stores):
    def factory(**kw):
        s = make_store(srv, **kw)
        stores.append(s)
        return s

    return factory


# ----------------------------------------------------------------- entries
def test_entries_are_structured_and_labelled(srv, new_store):
    store = new_store()
    store.append([Event(K.STEP_START, "job-a", "run-7", 3, T0 + 0.5, step=12)])
    assert store.flush(5)
    (entry,) = srv.entries
    assert entry["logName"] == "projects/test-project/logs/goodput_test"
    assert entry["resource"] == {"type": "global", "labels": {}}
    assert entry["labels"] == {"job": "job-a", "run": "run-7", "host": "3"}
    assert entry["jsonPayload"]["kind"] == "step_start"
    assert entry["jsonPayload"]["step"] == 12.0  # a protobuf Struct double
    assert entry["jsonPayload"][SCHEMA_KEY] == "event/1"
    assert entry["timestamp"].startswith("2023-11-14T22:13:20.500000")
    assert entry["insertId"]


def test_append_writes_synchronously_in_batches(srv, new_store):
    """The store has no queue or thread: append returns once its batches are written."""
    store = new_store(batch_size=100)
    store.append(steps("job", 250))
    assert len(srv.entries) == 250  # no flush needed
    assert srv.count("write") == 3  # 100 + 100 + 50, not one call per event
    assert store.pending == 0 and store.stats()["written"] == 250
    assert not [t for t in threading.enumerate() if "gcl-writer" in t.name]  # no store thread
    t = time.monotonic()
    assert store.flush(0) and time.monotonic() - t < 0.05  # nothing pending: at once


# ----------------------------------------------------------------- faults
@pytest.mark.parametrize("status", [500, 429, 503])
def test_transient_faults_then_recovery_lose_no_event(srv, new_store, status, caplog):
    store = new_store(batch_size=20)
    srv.fail("write", status, times=3)
    events = steps("job", 55)
    store.append(events)  # retries inside the call, then returns
    assert srv.count("write", status) == 3 and len(srv.entries) == 55
    assert store.retries == 3
    assert store.dropped_events == 0
    assert read_all(store, "job")[0] == events
    assert "retrying" in caplog.text


def test_mixed_500_and_429_faults_on_every_batch(srv, new_store):
    store = new_store(batch_size=10)
    events = steps("job", 64)
    for i in range(0, 64, 16):
        srv.fail("write", 500, times=1)
        srv.fail("write", 429, times=1)
        store.append(events[i:i + 16])
    assert store.flush(10)
    assert read_all(store, "job")[0] == events
    assert store.dropped_events == 0 and store.retries == 8


def test_lost_response_is_retried_and_deduplicated(srv, new_store):
    store = new_store()
    srv.fail("write", 500, times=2, after_commit=True)  # stored, but the client sees 500
    events = steps("job", 30)
    store.append(events)
    assert store.flush(10)
    assert srv.count("write") == 3
    assert read_all(store, "job")[0] == events  # retry reused insertIds: no duplicates


def test_list_fault_is_a_store_error_and_the_cursor_survives(srv, new_store):
    store = new_store()
    store.append(steps("job", 5))
    assert store.flush(5)
    _, cur = store.read_events("job")
    store.append(steps("job", 3, t0=T0 + 10))
    assert store.flush(5)
    srv.fail("list", 503)
    with pytest.raises(StoreError, match="reading job 'job' failed"):
        store.read_events("job", cur)
    assert store.read_events("job", cur)[0] == steps("job", 3, t0=T0 + 10)


def test_bad_request_bisects_the_batch(srv, new_store):
    store = new_store(batch_size=8)
    srv.fail("write", 400, times=1)
    store.append(steps("job", 8))
    assert store.flush(5)
    assert len(srv.entries) == 8 and store.dropped_events == 0
    assert srv.count("write", 400) == 1 and srv.count("write", 200) == 2


def test_permanent_error_drops_and_counts(srv, new_store, caplog):
    store = new_store()
    srv.fail("write", 403, times=1, message="caller lacks logging.logEntries.create")
    store.append(steps("job", 4))
    assert store.flush(5)
    assert store.dropped_events == 4 and store.written_events == 0
    assert "Forbidden" in store.last_error
    assert "dropped 4 event(s)" in caplog.text


def test_append_blocks_until_written_and_flush_waits_for_it(srv, new_store):
    """append waits on the network (in the recorder's writer thread, never the training
    loop); flush() from another thread waits for that append."""
    store = new_store(batch_size=5)
    with srv.hold():
        writer = threading.Thread(target=store.append, args=(steps("job", 12),))
        writer.start()
        time.sleep(0.2)
        assert writer.is_alive() and srv.entries == []  # still inside append
        assert store.pending == 12
        assert not store.flush(0.05)  # times out while the write is held
    writer.join(10)
    assert not writer.is_alive()
    assert store.flush(5) and store.pending == 0
    assert len(srv.entries) == 12 and srv.count("write", 200) == 3


def test_close_is_bounded_when_the_service_hangs(srv, new_store):
    store = new_store()
    with srv.hold():
        writer = threading.Thread(target=store.append, args=(steps("job", 10),), daemon=True)
        writer.start()
        time.sleep(0.1)
        t = time.monotonic()
        store.close(timeout=0.2)
        assert time.monotonic() - t < 1.5
        with pytest.raises(StoreError, match="closed"):
            store.append(steps("job", 1))
    writer.join(10)
    store.close()  # idempotent


def test_close_stops_the_retries_of_an_append_in_progress(srv, new_store, caplog):
    """A write retrying a failing service is interrupted by close() (e.g. at interpreter
    exit) instead of running to retry_deadline; its batch is dropped and counted."""
    store = new_store(batch_size=4, retry_initial=0.05, retry_max=0.1, retry_deadline=60)
    srv.fail("write", 503, times=10_000)
    writer = threading.Thread(target=store.append, args=(steps("job", 8),))
    writer.start()
    time.sleep(0.3)
    assert writer.is_alive() and store.retries >= 1
    t = time.monotonic()
    store.close(timeout=0.1)
    writer.join(5)
    assert not writer.is_alive() and time.monotonic() - t < 3
    assert store.dropped_events == 8 and store.written_events == 0
    assert "store closed" in caplog.text


# ----------------------------------------------------------------- reads
def test_paging_across_more_than_three_pages(srv, new_store):
    store = new_store(read_page_size=10)
    events = steps("job", 47, dt=0.5)
    store.append(events)
    assert store.flush(5)
    n0 = srv.count("list")
    got, cursor = store.read_events("job")
    assert got == events
    assert srv.count("list") - n0 == 5  # 10 + 10 + 10 + 10 + 7
    assert all(b.get("pageSize") == 10 for b in srv.list_bodies)
    assert sum(1 for b in srv.list_bodies if b.get("pageToken")) == 4
    assert isinstance(cursor, CloudLoggingCursor)


def test_reads_carry_an_explicit_time_filter_and_order(srv, new_store):
    # 2023 entries are far older than the client's default "last 24 hours".
    store = new_store(start_time=T0 - 3600)
    store.append(steps("job", 3))
    assert store.flush(5)
    assert len(store.read_events("job")[0]) == 3
    body = srv.list_bodies[-1]
    assert body["orderBy"] == "timestamp asc"
    assert body["resourceNames"] == ["projects/test-project"]
    assert 'timestamp>="2023-11-14T21:13:20.000000Z"' in body["filter"]
    assert body["filter"].count("timestamp") == 1  # the client added no default


def test_start_time_bounds_reads(srv, new_store):
    store = new_store(start_time=T0 + 5)
    store.append(steps("job", 10))
    assert store.flush(5)
    assert [e.step for e in store.read_events("job")[0]] == [5, 6, 7, 8, 9]


def test_late_entries_within_the_overlap_are_delivered_once(srv, new_store):
    store = new_store(read_overlap_seconds=30.0)
    late_host = new_store()
    store.append(steps("job", 10, t0=T0 + 20))
    assert store.flush(5)
    got, cur = store.read_events("job")
    assert len(got) == 10
    # Host 1 flushes late: its events are older than what was already read.
    late = steps("job", 3, t0=T0 + 5, host=1, run="run-1")
    too_late = steps("job", 2, t0=T0 - 100, host=2, run="run-1")
    late_host.append(late + too_late)
    assert late_host.flush(5)
    got2, cur2 = store.read_events("job", cur)
    assert got2 == late
    assert store.read_events("job", cur2)[0] == []


def test_diagnostic_and_foreign_entries_are_skipped(srv, new_store, monkeypatch):
    import google.cloud.logging_v2 as lv2

    store = new_store()
    client = srv.client()
    logger = client.logger("goodput_test", resource=global_resource())
    # The client prepends its one-per-process diagnostic entry to its first write.
    monkeypatch.setattr(lv2, "_instrumentation_emitted", False)
    logger.log_struct({"message": "someone else's entry"}, labels={"job": "job"})
    logger.log_text("plain text", labels={"job": "job"})
    diag = [e for e in srv.entries if "logging.googleapis.com/diagnostic" in str(e)]
    assert len(diag) == 1
    store.append(steps("job", 3))
    assert store.flush(5)
    assert read_all(store, "job")[0] == steps("job", 3)
    assert store.skipped_entries >= 2
    assert store.list_jobs() == ["job"]


# ----------------------------------------------------------------- security
def test_filter_injection_cannot_widen_a_query(srv, new_store):
    store = new_store()
    store.append(steps("victim", 4) + steps("a", 1))
    assert store.flush(5)
    attacker = 'a" OR labels.job="victim'
    log = f'logName="{store.log_name}" AND timestamp>="1970-01-01T00:00:00Z"'
    client = srv.client()
    # The naive filter really is widened by the server's parser (so this test can fail)...
    naive = list(client.list_entries(filter_=f'{log} AND labels.job="{attacker}"'))
    assert {e.labels["job"] for e in naive} == {"a", "victim"}
    # ...the store's quoted filter is not, even without the client-side job check.
    quoted = list(client.list_entries(filter_=store.build_filter(attacker)))
    assert quoted == []
    assert store.read_events(attacker)[0] == []
    for name in ['x" OR "1"="1', 'y") OR (labels.job="victim', "z\\", "victim\\"]:
        assert list(client.list_entries(filter_=store.build_filter(name))) == []
        assert list(client.list_entries(filter_=store.build_filter("job", run_id=name))) == []


def test_quote_filter_value():
    assert quote_filter_value('a"b') == '"a\\"b"'
    assert quote_filter_value("a\\") == '"a\\\\"'
    with pytest.raises(ValueError, match="job_name.*control character"):
        quote_filter_value("a\nOR labels.job=b", name="job_name")
    with pytest.raises(TypeError, match="job_name"):
        quote_filter_value(3, name="job_name")


def test_control_characters_in_job_names_are_rejected(new_store):
    store = new_store()
    with pytest.raises(ValueError, match="job_name"):
        store.read_events('a"\nOR labels.job="b')


def test_credentials_never_reach_logs_or_errors(srv, stores, caplog):
    from google.cloud import logging as gcl
    from google.oauth2.credentials import Credentials

    secret = "ya29.SECRET-TOKEN-do-not-log"
    caplog.set_level(logging.DEBUG)
    client = gcl.Client(project="test-project", credentials=Credentials(token=secret),
                        _use_grpc=False, client_options={"api_endpoint": srv.endpoint})
    store = CloudLoggingStore(client=client, logger_name="goodput_test",
                              resource=global_resource(), retry_initial=0.001)
    stores.append(store)
    srv.fail("write", 403, times=1)
    srv.fail("write", 500, times=1)
    srv.fail("list", 401, times=1)
    store.append(steps("job", 2))
    store.flush(5)
    with pytest.raises(StoreError) as info:
        store.read_events("job")
    assert f"Bearer {secret}" in srv.auth_headers  # the token was really in use
    texts = [caplog.text, str(info.value), repr(store), str(store.stats())]
    assert all(secret not in t for t in texts)


# ----------------------------------------------------------------- construction
def test_from_url_and_open_store_end_to_end(srv, stores):
    url = f"gcl://test-project/goodput_url?api_endpoint={srv.endpoint}&anonymous=1"
    store = open_store(url, retry_initial=0.001, flush_interval=0.005)
    stores.append(store)
    assert isinstance(store, CloudLoggingStore)
    assert store.url == url  # reopens the same store
    assert CloudLoggingStore.from_url("gcl://test-project/goodput_x",
                                      client=srv.client()).url == "gcl://test-project/goodput_x"
    store.append(steps("job", 3))
    assert store.flush(5)
    assert srv.entries[0]["resource"]["type"] == "global"  # detected; metadata probe patched
    assert read_all(store, "job")[0] == steps("job", 3)


@pytest.mark.parametrize(
    "url, match",
    [
        ("gcl://", "gcl://PROJECT/LOGGER"),
        ("gcl://proj", "gcl://PROJECT/LOGGER"),
        ("gcl://Bad_Project/log", "project"),
        ("gcl://my-proj/bad log", "logger_name"),
        ("gcl://my-proj/log?token=x", "unknown query"),
        ("gcl://my-proj/log?api_endpoint=http://10.0.0.1:80", "api_endpoint"),
    ],
)
def test_from_url_rejects_bad_urls(url, match):
    with pytest.raises(ValueError, match=match):
        CloudLoggingStore.from_url(url)


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": 1001}, "batch_size"),
        ({"max_queue": 0}, "max_queue"),
        ({"read_page_size": 5000}, "read_page_size"),
        ({"retry_initial": -1.0}, "retry_initial"),
        ({"logger_name": "a b"}, "logger_name"),
        ({"read_overlap_seconds": float("nan")}, "read_overlap_seconds"),
    ],
)
def test_constructor_validates(srv, kw, match):
    with pytest.raises(ValueError, match=match):
        make_store(srv, **kw)


def test_append_validates_events(new_store):
    store = new_store()
    with pytest.raises(TypeError, match=r"events\[0\]"):
        store.append(["not an event"])
    with pytest.raises(ValueError, match="job_name"):
        store.append([Event(K.STEP_START, "", "r", 0, T0, step=0)])
    assert store.pending == 0


# ----------------------------------------------------------------- calculator parity
def _scenario() -> list[Event]:
    """A job with init, data loading, a checkpoint, a crash and a restart, and hints."""
    out: list[Event] = []

    def add(kind, run, t, step=None, **kw):
        out.append(Event(kind, "parity", run, 0, T0 + t, step=step, **kw))

    add(K.JOB_START, "r1", 0.0)
    add(K.ACCELERATOR_INIT_START, "r1", 0.0)
    add(K.ACCELERATOR_INIT_END, "r1", 4.0)
    for i in range(20):
        t = 5.0 + i * 1.5
        add(K.DATA_LOADING_START, "r1", t)
        add(K.DATA_LOADING_END, "r1", t + 0.25)
        add(K.STEP_START, "r1", t + 0.25, step=i)
        if i == 9:
            add(K.CHECKPOINT_SAVE_START, "r1", t + 1.0)
            add(K.CHECKPOINT_SAVE_END, "r1", t + 1.4)
    add(K.HINTS, "r1", 36.0, payload={"gradParams": {"norm": 0.5, "var": 3.0}, "initBatchSize": 32})
    # crash, then a restart that redoes steps 15..
    add(K.JOB_START, "r2", 60.0)
    add(K.CHECKPOINT_RESTORE_START, "r2", 61.0)
    add(K.CHECKPOINT_RESTORE_END, "r2", 63.0)
    for j, i in enumerate(range(15, 30)):
        add(K.STEP_START, "r2", 64.0 + j * 1.2, step=i)
    add(K.CUSTOM_BADPUT_START, "r2", 83.0, label="eval")
    add(K.CUSTOM_BADPUT_END, "r2", 85.0, label="eval")
    add(K.JOB_END, "r2", 86.0)
    return out


def test_goodput_from_cloud_logging_equals_goodput_from_sqlite(srv, new_store, tmp_path):
    events = _scenario()
    gcl_store = new_store(read_page_size=17)
    sql_store = SQLiteStore(str(tmp_path / "parity.db"))
    for i in range(0, len(events), 7):  # the recorder appends in small batches
        gcl_store.append(events[i:i + 7])
        sql_store.append(events[i:i + 7])
    assert gcl_store.flush(5)
    clock = lambda: T0 + 100.0
    calcs = [GoodputCalculator("parity", "goodput_test", store=s, clock=clock)
             for s in (gcl_store, sql_store)]
    (g1, b1, s1), (g2, b2, s2) = (c.get_job_goodput(include_badput_breakdown=True) for c in calcs)
    assert 0 < g1 < 100
    assert g1 == pytest.approx(g2, abs=1e-9) and s1 == s2 == 29
    assert b1.keys() == b2.keys()
    for k in b1:
        assert b1[k] == pytest.approx(b2[k], abs=1e-9), k
    assert b1[BadputType.WASTED_PROGRESS_FROM_DISRUPTION] > 0
    d1, d2 = (c.get_step_deviation() for c in calcs)
    assert d1.median == pytest.approx(d2.median) and d1.num_steps == d2.num_steps
    i1, i2 = (c.get_job_goodput_interval(T0 + 10, T0 + 70)[0] for c in calcs)
    assert i1 == pytest.approx(i2, abs=1e-9)
    assert calcs[0].get_latest_hints() == calcs[1].get_latest_hints()
    # Incremental: more events, same answer from both.
    tail = [Event(K.JOB_START, "parity", "r3", 0, T0 + 90), Event(K.STEP_START, "parity", "r3", 0, T0 + 91, step=30)]
    gcl_store.append(tail)
    sql_store.append(tail)
    assert gcl_store.flush(5)
    g1, g2 = (c.get_job_goodput()[0] for c in calcs)
    assert g1 == pytest.approx(g2, abs=1e-9)
    sql_store.close()


def test_environment_variable_selects_cloud_logging(srv, stores, monkeypatch):
    monkeypatch.setenv(
        "GOODPUT_JAX_STORE", f"gcl://test-project/goodput_env?api_endpoint={srv.endpoint}&anonymous=1"
    )
    store = open_store()
    stores.append(store)
    assert isinstance(store, CloudLoggingStore) and store.logger_name == "goodput_env"


def test_read_argument_validation(new_store):
    store = new_store()
    with pytest.raises(TypeError, match="cursor"):
        store.read_events("job", cursor=17)
    with pytest.raises(ValueError, match="limit"):
        store.read_events("job", limit=0)
    with pytest.raises(TypeError, match="job_name"):
        store.read_events(None)


def test_recorder_to_cloud_logging_to_calculator(srv, new_store, tmp_path):
    """The whole path: GoodputRecorder -> CloudLoggingStore -> (another reader) -> calculator,
    against the same recorder calls into SQLite."""
    from goodput_jax.measure.recorder import GoodputRecorder

    def run(store):
        t = [T0]
        rec = GoodputRecorder("e2e", "goodput_test", logging_enabled=True, store=store,
                              clock=lambda: t[0], run_id="run-e2e", flush_interval=0.01)
        rec.record_job_start_time()
        rec.record_tpu_init_start_time()
        t[0] += 3.0
        rec.record_tpu_init_end_time()
        for step in range(12):
            t[0] += 0.25
            rec.record_step_start_time(step)
            t[0] += 1.0 + 0.1 * (step % 3)
        rec.record_hints({"gradParams": {"norm": 1.0, "var": 0.5}, "initBatchSize": 16})
        rec.record_job_end_time()
        rec.close(timeout=10)
        return t[0]

    writer = new_store()
    end = run(writer)
    assert writer.flush(5) and writer.dropped_events == 0
    reader = new_store()  # e.g. the monitor, on another machine
    sql = SQLiteStore(str(tmp_path / "e2e.db"))
    run(sql)
    results = []
    for store in (reader, sql):
        calc = GoodputCalculator("e2e", "goodput_test", store=store, clock=lambda: end + 5)
        results.append((calc.get_job_goodput(include_badput_breakdown=True),
                        calc.get_latest_hints()))
    (g1, b1, s1), h1 = results[0]
    (g2, b2, s2), h2 = results[1]
    assert s1 == s2 == 11 and g1 == pytest.approx(g2, abs=1e-9) and 0 < g1 < 100
    accel = BadputType.ACCELERATOR_INITIALIZATION
    assert b1[accel] > 0 and b1[accel] == pytest.approx(b2[accel])
    assert h1 == h2 == {"gradParams": {"norm": 1.0, "var": 0.5}, "initBatchSize": 16}
    sql.close()


def test_recorder_is_the_one_buffer_over_a_slow_failing_service(srv, new_store):
    """The recorder's writer thread waits on the network (hung, then 503s); the training
    thread's record_* calls do not, and every event arrives once, in order."""
    from goodput_jax.measure.recorder import GoodputRecorder

    store = new_store(batch_size=50)
    rec = GoodputRecorder("buf", "goodput_test", logging_enabled=True, store=store,
                          run_id="run-buf", flush_interval=0.01)
    with srv.hold():
        srv.fail("write", 503, times=3)
        t = time.monotonic()
        for step in range(200):
            rec.record_step_start_time(step, T0 + step)
        assert time.monotonic() - t < 0.5  # the hung service never reached this thread
        time.sleep(0.1)
        assert store.pending > 0 and srv.entries == []  # writer thread blocked in append
    assert rec.flush(10)
    assert rec.written_count == 200 and rec.dropped_count == 0
    assert store.retries == 3 and store.dropped_events == 0 and store.pending == 0
    got = read_all(store, "buf")[0]
    assert [e.step for e in got] == list(range(200))
    rec.close(timeout=5)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs")), max_size=40))
def test_quoted_names_always_parse_as_one_literal(name):
    """Any name without control characters is one literal to a Logging-filter parser."""
    from tests.measure.gcl_server import _Parser

    tree = _Parser(f"labels.job={quote_filter_value(name)} AND labels.run=\"r\"").parse()
    assert tree == ("and", ("cmp", "labels.job", "=", name), ("cmp", "labels.run", "=", "r"))


def test_entries_are_valid_for_the_grpc_transport_too(new_store):
    """Production clients default to gRPC: the same entry dicts must convert to LogEntry
    protobufs (checked offline with the library's own converter)."""
    from google.cloud.logging_v2._gapic import _log_entry_mapping_to_pb
    from google.cloud.logging_v2.types import WriteLogEntriesRequest

    store = new_store()
    event = Event(K.HINTS, "job", "run-1", 2, T0 + 0.25, payload={"gradParams": {"norm": 1.5}})
    entry = store._to_entry(event)
    pb = _log_entry_mapping_to_pb(entry)
    assert pb.insert_id == entry["insertId"] and pb.labels["host"] == "2"
    assert pb.json_payload["kind"] == "hints"
    assert pb.json_payload["payload"]["gradParams"]["norm"] == 1.5
    assert pb.timestamp.timestamp() == pytest.approx(T0 + 0.25)
    request = WriteLogEntriesRequest(log_name=store.log_name, resource=store._resource(),
                                     entries=[pb], partial_success=False)
    assert request.resource.type == "global"


def test_a_service_that_stays_unavailable_is_not_retried_forever(srv, new_store):
    """After retry_deadline a failing batch is dropped and counted, and later events are
    written (the writer used to retry transient errors forever, holding every later event)."""
    # a deadline well above one refused call's time, even on a busy machine (with 0.3 s a
    # loaded run's first call outlasted it: no retry at all, which is right but untested)
    store = new_store(batch_size=5, retry_initial=0.01, retry_max=0.05, retry_deadline=1.5)
    srv.fail("write", 503, times=10_000)
    t = time.monotonic()
    store.append(steps("job", 5))  # retries until the deadline, then drops (no raise)
    took = time.monotonic() - t
    assert 1.5 <= took < 30  # bounded: not retried forever
    assert store.dropped_events == 5 and store.written_events == 0 and store.retries >= 2
    srv.reset()
    later = steps("job", 3, t0=T0 + 100)
    store.append(later)
    assert read_all(store, "job")[0] == later
    with pytest.raises(ValueError, match="retry_deadline"):
        new_store(retry_deadline=-1)
