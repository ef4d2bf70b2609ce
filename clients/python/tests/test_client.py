"""Tests of journal_client against a real `journal serve` (the built binary: `JOURNAL_BIN`, else
`target/debug/journal` under the repository root) on 127.0.0.1, in a temporary directory.

    JOURNAL_BIN=target/debug/journal python3 -m unittest discover -s clients/python/tests -v
"""

from __future__ import annotations

import faulthandler
import io
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import unittest
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from journal_client import Client, JournalError  # noqa: E402


#: Every server started, for the watchdog.
SERVERS: List["Server"] = []
#: The suite gives up after this many seconds (a follow that waits for ever, say): it stops
#: every server, prints every thread's stack and exits 1.
WATCHDOG_SECONDS = 120


def _watchdog() -> None:
    sys.stderr.write(f"\ntest_client: still running after {WATCHDOG_SECONDS} s; giving up\n")
    faulthandler.dump_traceback(all_threads=True)
    for server in SERVERS:
        server.process.kill()
    os._exit(1)


_watchdog_timer: Optional[threading.Timer] = None


def setUpModule() -> None:
    global _watchdog_timer
    _watchdog_timer = threading.Timer(WATCHDOG_SECONDS, _watchdog)
    _watchdog_timer.daemon = True
    _watchdog_timer.start()


def tearDownModule() -> None:
    if _watchdog_timer is not None:
        _watchdog_timer.cancel()


def journal_bin() -> str:
    """The `journal` binary: `JOURNAL_BIN`, else `target/debug/journal` of this checkout."""
    given = os.environ.get("JOURNAL_BIN")
    path = Path(given).resolve() if given else HERE.parents[2] / "target" / "debug" / "journal"
    if not path.is_file():
        raise RuntimeError(f"no journal binary at {path}: build it, or set JOURNAL_BIN")
    return str(path)


def event(event_id: str, session: Optional[str], type: str = "session.created", **extra: Any) -> Dict[str, Any]:
    e: Dict[str, Any] = {"type": type, "eventId": event_id, "timestamp": "2026-05-11T10:00:00Z"}
    if session is not None:
        e["sessionId"] = session
    e.update(extra)
    return e


def events(prefix: str, session: str, n: int, start: int = 0) -> List[Dict[str, Any]]:
    return [event(f"{prefix}{i}", session) for i in range(start, start + n)]


class Server:
    """A running `journal --dir DIR serve --listen 127.0.0.1:PORT`."""

    def __init__(self, directory: Path, *args: str, listen: str = "127.0.0.1:0") -> None:
        self.directory = directory
        self.stderr_path = directory.parent / f"serve-{time.monotonic_ns()}.log"
        self._stderr = open(self.stderr_path, "wb")
        self.process = subprocess.Popen(
            [journal_bin(), "--dir", str(directory), "serve", "--listen", listen, *args],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
        )
        SERVERS.append(self)
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], 20)
        first = self.process.stdout.readline() if ready else b""
        if not first:
            self.process.kill()
            raise RuntimeError(f"the server did not start: {self.stderr_path.read_text()}")
        self.address = json.loads(first)["listening"]
        self.url = f"http://{self.address}"
        self.port = int(self.address.rsplit(":", 1)[1])

    def terminate(self) -> int:
        """SIGTERM; the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise
        finally:
            if self.process.stdout:
                self.process.stdout.close()
            self._stderr.close()
        return code

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")


def create_token(directory: Path, scope: str, sessions: Optional[str] = None) -> str:
    args = [journal_bin(), "--dir", str(directory), "token", "create", "--scope", scope]
    if sessions:
        args += ["--sessions", sessions]
    out = subprocess.run(args, capture_output=True, check=True)
    return json.loads(out.stdout)["token"]


class Proxy:
    """A TCP proxy in front of the server that can drop its connections on demand: all at
    once (`sever`), or the next answer right after some bytes (`cut_after`), in the middle of
    an event's frame."""

    def __init__(self, upstream: Tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.lock = threading.Lock()
        self.open: List[socket.socket] = []
        self.connections = 0
        self.cuts = 0
        self.marker: Optional[bytes] = None
        threading.Thread(target=self._accept, daemon=True).start()

    def cut_after(self, marker: bytes) -> None:
        with self.lock:
            self.marker = marker

    def sever(self) -> None:
        with self.lock:
            sockets, self.open = self.open, []
        for s in sockets:
            _close(s)

    def close(self) -> None:
        self.sever()
        _close(self.listener)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                _close(client)
                continue
            with self.lock:
                self.connections += 1
                self.open += [client, server]
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, downstream: bool) -> None:
        tail = b""
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                marker = self.marker if downstream else None
                if marker:
                    window = tail + data
                    i = window.find(marker)
                    if i >= 0:
                        with self.lock:
                            self.marker = None
                            self.cuts += 1
                        dst.sendall(data[: i + len(marker) - len(tail)])
                        break
                    tail = window[-(len(marker) - 1):] if len(marker) > 1 else b""
                dst.sendall(data)
        except OSError:
            pass
        finally:
            _close(src)
            _close(dst)


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()


class ServerTestCase(unittest.TestCase):
    """A server of the class's own, without tokens unless `server_args` says otherwise."""

    server_args: Tuple[str, ...] = ()

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = tempfile.TemporaryDirectory(prefix="journal-client-py-")
        cls.dir = Path(cls.tmp.name) / "journal"
        cls.dir.mkdir()
        cls.prepare(cls.dir)
        cls.server = Server(cls.dir, *cls.server_args)
        cls.client = Client(cls.server.url)

    @classmethod
    def prepare(cls, directory: Path) -> None:
        """Before the server starts (tokens)."""

    @classmethod
    def tearDownClass(cls) -> None:
        code = cls.server.terminate()
        stderr = cls.server.stderr()
        cls.tmp.cleanup()
        assert code == 0, f"the server exited {code}: {stderr}"

    def head(self) -> int:
        return self.client.digest()["position"]


class AppendReadTests(ServerTestCase):
    def test_append_then_read_round_trip_in_pages(self) -> None:
        batch = events("rt-", "rt", 25)
        acks = self.client.append(batch)
        self.assertEqual([a["eventId"] for a in acks], [e["eventId"] for e in batch])
        self.assertEqual([a["streamVersion"] for a in acks], list(range(1, 26)))
        positions = [a["position"] for a in acks]
        self.assertEqual(positions, list(range(positions[0], positions[0] + 25)))
        self.assertTrue(all(len(a["hash"]) == 64 for a in acks))
        # Another session's events in between, which the filter leaves out.
        self.client.append(events("rt-other-", "rt-other", 3))
        self.client.append(events("rt-", "rt", 5, start=25))

        first = self.client.read_page(session="rt", limit=10)
        self.assertEqual(len(first.events), 10)
        self.assertTrue(first.full)
        self.assertIn(f"from={positions[10]}", first.cursor)
        second = self.client.read_page(first.cursor)
        self.assertEqual(second.events[0]["eventId"], "rt-10")

        read = list(self.client.read(session="rt", limit=10))
        self.assertEqual([e["eventId"] for e in read], [f"rt-{i}" for i in range(30)])
        for stored, sent in zip(read, batch):
            for key in ("type", "eventId", "timestamp", "sessionId"):
                self.assertEqual(stored[key], sent[key])
            self.assertIn("recordedAt", stored)
        self.assertEqual([e["position"] for e in read[:25]], positions)
        # `from`, `to` and `type`.
        some = list(self.client.read(from_=positions[3], to=positions[6], type="session."))
        self.assertEqual([e["eventId"] for e in some], ["rt-3", "rt-4", "rt-5", "rt-6"])
        # A page size over the server's maximum is lowered to it.
        self.assertEqual(self.client.read_page(session="rt", limit=5000).limit, 1000)

    def test_the_last_pages_cursor_answers_only_newer_events(self) -> None:
        self.client.append(events("poll-", "poll", 3))
        page = self.client.read_page(session="poll")
        self.assertEqual(len(page.events), 3)
        self.assertFalse(page.full)
        empty = self.client.read_page(page.cursor)
        self.assertEqual(empty.events, [])
        self.client.append(events("poll-", "poll", 2, start=3))
        newer = self.client.read_page(empty.cursor)
        self.assertEqual([e["eventId"] for e in newer.events], ["poll-3", "poll-4"])

    def test_a_bad_line_is_400_naming_it_and_nothing_is_written(self) -> None:
        before = self.head()
        batch: List[Any] = [event("bad-1", "bad"), {"type": "session.created", "eventId": "bad-2"}, event("bad-3", "bad")]
        with self.assertRaises(JournalError) as caught:
            self.client.append(batch)
        error = caught.exception
        self.assertEqual((error.status, error.kind, error.line), (400, "invalid_event", 2))
        self.assertTrue(error.message.startswith("line 2: "), error.message)
        self.assertEqual(self.head(), before, "nothing of a refused batch is written")
        # Text that is not JSON, on line 1; an empty batch.
        with self.assertRaises(JournalError) as caught:
            self.client.append(['{"type":'])
        self.assertEqual((caught.exception.status, caught.exception.line), (400, 1))
        with self.assertRaises(JournalError) as caught:
            self.client.append([])
        self.assertEqual((caught.exception.status, caught.exception.kind), (400, "bad_request"))

    def test_an_expected_version_conflict_is_409_with_the_actual_version(self) -> None:
        self.client.append(events("cv-", "cv", 2), expected_version=0)
        with self.assertRaises(JournalError) as caught:
            self.client.append([event("cv-x", "cv")], expected_version=5)
        error = caught.exception
        self.assertEqual((error.status, error.kind), (409, "conflict"))
        self.assertEqual(error.details["expectedVersion"], 5)
        self.assertEqual(error.details["actualVersion"], 2)
        self.assertEqual(error.details["stream"], "session:cv")
        acks = self.client.append([event("cv-2", "cv")], expected_version=2)
        self.assertEqual(acks[0]["streamVersion"], 3)
        # A retry of an acknowledged append is answered as a duplicate, not a conflict.
        again = self.client.append([event("cv-2", "cv")], expected_version=2)
        self.assertEqual((again[0]["position"], again[0].get("duplicate")), (acks[0]["position"], True))

    def test_an_event_id_reused_with_another_body_is_409_id_reused(self) -> None:
        self.client.append([event("reuse-1", "reuse")])
        with self.assertRaises(JournalError) as caught:
            self.client.append([event("reuse-1", "reuse", payload={"changed": True})])
        self.assertEqual((caught.exception.status, caught.exception.kind), (409, "id_reused"))

    def test_an_unknown_filter_is_400_not_ignored(self) -> None:
        with self.assertRaises(JournalError) as caught:
            list(self.client.read(sesion="s1"))
        self.assertEqual((caught.exception.status, caught.exception.kind), (400, "bad_request"))
        self.assertIn("sesion", caught.exception.message)

    def test_a_command_refused_by_a_rule_is_422_naming_it(self) -> None:
        created = self.client.command("create_task", {"sessionId": "cmd", "taskId": "cmd-t1", "title": "one"})
        self.assertEqual([e["type"] for e in created], ["task.created"])
        self.assertIsNone(created.note)
        with self.assertRaises(JournalError) as caught:
            self.client.command("complete_task", {"sessionId": "cmd", "taskId": "cmd-t1"})
        error = caught.exception
        self.assertEqual((error.status, error.rule, error.kind), (422, "completion_not_accepted", None))
        self.assertEqual(error.code, "completion_not_accepted")
        for name, args in [("no_such_command", {}), ("create_task", {"taskId": 5})]:
            with self.assertRaises(JournalError) as caught:
                self.client.command(name, args)
            self.assertEqual((caught.exception.status, caught.exception.rule), (422, "invalid_arguments"), name)

    def test_get_reads_a_model_and_404s_what_is_not_recorded(self) -> None:
        created = self.client.command("create_task", {"sessionId": "gm", "taskId": "gm-t1", "title": "read me"})
        position = created[0]["position"]
        answer = self.client.get("task", "gm-t1", min_position=position, timeout_ms=5000)
        self.assertEqual(answer["model"]["taskId"], "gm-t1")
        self.assertEqual(answer["model"]["title"], "read me")
        self.assertGreaterEqual(answer["freshness"]["position"], position)
        self.assertEqual(answer["freshness"]["state"], "fresh")
        history = self.client.get("history", "gm", limit=10)
        self.assertEqual([e["position"] for e in history["model"]["events"]], [position])
        with self.assertRaises(JournalError) as caught:
            self.client.get("task", "gm-nope")
        self.assertEqual((caught.exception.status, caught.exception.kind), (404, "not_found"))
        with self.assertRaises(JournalError) as caught:
            self.client.get("nonsense", "x")
        self.assertEqual((caught.exception.status, caught.exception.kind), (404, "unknown_model"))
        behind = self.client.get("task", "gm-t1", min_position=10**9, timeout_ms=100)
        self.assertEqual(behind["freshness"]["state"], "behind")
        # An id with characters a path needs escaped.
        with self.assertRaises(JournalError) as caught:
            self.client.get("task", "a/b ?#")
        self.assertEqual((caught.exception.status, caught.exception.kind), (404, "not_found"))

    def test_status_digest_verify_and_health(self) -> None:
        self.client.append([event("sdv-1", "sdv")])
        digest = self.client.digest()
        self.assertEqual(len(digest["hash"]), 64)
        status = self.client.status()
        self.assertGreaterEqual(status["headPosition"], digest["position"])
        self.assertIsInstance(status["projections"], list)
        report = self.client.verify()
        self.assertTrue(report["ok"], report)
        self.assertTrue(self.client.verify(digest)["ok"])
        self.assertTrue(self.client.verify(f"{digest['position']}:{digest['hash']}")["ok"])
        wrong = self.client.verify({"position": digest["position"], "hash": "0" * 64})
        self.assertFalse(wrong["ok"])
        with self.assertRaises(JournalError) as caught:
            self.client.verify("nope")
        self.assertEqual(caught.exception.status, 400)
        health = self.client.health()
        self.assertTrue(health["ok"])
        self.assertIn("journal_head_position", self.client.metrics())


def import_claude_code(directory: Path) -> str:
    """Imports the repository's real Claude Code session (testdata/) into the journal at
    `directory`; its session id."""
    logs = HERE.parents[2] / "testdata" / "agent-logs" / "claude-code"
    out = subprocess.run(
        [journal_bin(), "--dir", str(directory), "import", "claude-code",
         str(logs / "cctrace_phase0-investigation_main.jsonl"),
         "--blobs", str(logs / "cctrace_file-history"), "--json"],
        check=True, capture_output=True,
    )
    return json.loads(out.stdout)["sessions"][0]


class ReviewTests(ServerTestCase):
    """Replays, evidence packs and schemas, on a real Claude Code session."""

    @classmethod
    def prepare(cls, directory: Path) -> None:
        cls.session = import_claude_code(directory)

    def test_replay_answers_the_narrative_in_each_format(self) -> None:
        narrative = self.client.replay("session", self.session)
        self.assertEqual(narrative["scope"], {"kind": "session", "id": self.session})
        self.assertEqual(narrative["counts"]["toolCalls"], 152)
        self.assertEqual(narrative["counts"]["subagents"], 3)
        text = self.client.replay("session", self.session, format="text")
        self.assertTrue(text.startswith(f"Replay of session {self.session}"), text[:200])
        html = self.client.replay("session", self.session, format="html")
        self.assertIn("<html", html[:500].lower())
        early = self.client.replay("session", self.session, at=100)
        self.assertEqual(early["asOf"], 100)
        self.assertEqual(early["counts"]["events"], 100)

    def test_replay_refuses_what_is_not_recorded_or_not_a_replay(self) -> None:
        with self.assertRaises(JournalError) as caught:
            self.client.replay("session", "no-such-session")
        self.assertEqual((caught.exception.status, caught.exception.kind), (404, "not_found"))
        with self.assertRaises(JournalError) as caught:
            self.client.replay("sessions", self.session)
        self.assertEqual((caught.exception.status, caught.exception.kind), (400, "bad_request"))
        with self.assertRaises(JournalError) as caught:
            self.client.replay("session", self.session, format="pdf")
        self.assertEqual(caught.exception.status, 400)

    def test_evidence_is_a_tar_archive_of_the_pack(self) -> None:
        data = self.client.evidence(self.session)
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            names = archive.getnames()
            prefix = f"evidence-{self.session}/"
            self.assertTrue(all(n.startswith(prefix) for n in names), names[:5])
            manifest = json.load(archive.extractfile(prefix + "MANIFEST.json"))
            events = archive.extractfile(prefix + "events.jsonl").read().decode().splitlines()
        self.assertEqual(manifest["exported"]["session"], self.session)
        self.assertEqual(len(events), manifest["exported"]["events"])
        self.assertEqual({prefix + f["file"] for f in manifest["files"]} | {prefix + "MANIFEST.json"}, set(names))
        self.assertGreaterEqual(manifest["exported"]["blobs"], 10)
        with self.assertRaises(JournalError) as caught:
            self.client.evidence("no-such-session")
        self.assertEqual((caught.exception.status, caught.exception.kind), (404, "not_found"))

    def test_schemas_by_name(self) -> None:
        names = self.client.schema()
        self.assertIn("replay.narrative", names)
        self.assertIn("eventId", self.client.schema("event")["properties"])
        with self.assertRaises(JournalError) as caught:
            self.client.schema("no.such")
        self.assertEqual((caught.exception.status, caught.exception.kind), (404, "not_found"))


class FollowTests(ServerTestCase):
    server_args = ("--heartbeat-ms", "300")

    def test_follow_yields_history_then_live_events_and_ends_at_to(self) -> None:
        acks = self.client.append(events("live-", "live", 3))
        self.client.append(events("noise-", "noise", 2))
        start = acks[0]["position"]

        def later() -> None:
            time.sleep(0.3)
            self.client.append(events("live-", "live", 3, start=3))

        writer = threading.Thread(target=later)
        writer.start()
        head = self.head()
        got = list(self.client.follow(from_=start, session="live", to=head + 3))
        writer.join()
        self.assertEqual([e["eventId"] for _, e in got], [f"live-{i}" for i in range(6)])
        self.assertEqual([p for p, _ in got], [e["position"] for _, e in got])
        self.assertEqual([p for p, _ in got][:3], [a["position"] for a in acks])

    def test_follow_resumes_after_forced_disconnects_without_gap_or_duplicate(self) -> None:
        proxy = Proxy(("127.0.0.1", self.server.port))
        try:
            through = Client(proxy.url, timeout=10)
            first = self.client.append(events("fd-", "fd", 20))
            self.client.append(events("fd-noise-", "fd-noise", 5))
            # The first connection is cut inside the frame of fd-7, after its `data:` began.
            proxy.cut_after(b'"eventId":"fd-7"')
            got: List[Tuple[int, Dict[str, Any]]] = []
            # fd-0..19, 5 others, fd-20..24, 2 others, fd-25..29: fd-29 is 36 after fd-0. With
            # `to` a gap ends the loop short instead of waiting for ever; should the client
            # wait anyway, the proxy closes after 10 s and the follow gives up.
            last = first[0]["position"] + 36
            deadline = threading.Timer(10, proxy.close)
            deadline.start()
            done = set()

            def once(step: str) -> bool:
                if step in done:
                    return False
                done.add(step)
                return True

            try:
                for position, e in through.follow(
                    from_=first[0]["position"], to=last, session="fd", retry_delay=0.05, max_retries=5
                ):
                    got.append((position, e))
                    index = int(e["eventId"].rsplit("-", 1)[1])
                    if index >= 11 and once("sever in the history"):
                        proxy.sever()  # between frames
                    if index >= 19 and once("live"):
                        # Live: appended while following, then dropped again.
                        self.client.append(events("fd-", "fd", 5, start=20))
                    if index >= 22 and once("sever live"):
                        proxy.sever()
                    if index >= 24 and once("after the drop"):
                        # Only a new connection can bring these.
                        self.client.append(events("fd-noise-", "fd-noise", 2, start=5))
                        self.client.append(events("fd-", "fd", 5, start=25))
            finally:
                deadline.cancel()
            ids = [e["eventId"] for _, e in got]
            self.assertEqual(ids, [f"fd-{i}" for i in range(30)], "no gap, no duplicate")
            positions = [p for p, _ in got]
            self.assertEqual(positions, sorted(set(positions)))
            self.assertEqual(positions, [e["position"] for _, e in got])
            self.assertEqual(positions[-1], last)
            self.assertEqual(proxy.cuts, 1)
            # The cut, then the drop at fd-22 (events the client had read ahead of the drop
            # come from its buffer, so the drop at fd-11 may not need a connection of its own).
            self.assertGreaterEqual(proxy.connections, 3)
        finally:
            proxy.close()

    def test_follow_resumes_across_a_server_restart(self) -> None:
        # A server of this test's own, restarted on the same port while a client follows it.
        directory = Path(self.tmp.name) / "restart"
        directory.mkdir()
        server = Server(directory, "--heartbeat-ms", "300")
        client = Client(server.url, timeout=10)
        client.append(events("rs-", "rs", 5))
        holder = {"server": server}

        def restart() -> None:
            code = holder["server"].terminate()
            assert code == 0, code
            time.sleep(0.5)  # the follower's reconnections are refused meanwhile
            holder["server"] = Server(directory, "--heartbeat-ms", "300", listen=f"127.0.0.1:{server.port}")
            Client(holder["server"].url).append(events("rs-", "rs", 5, start=5))

        restarter = threading.Thread(target=restart)
        got = []
        try:
            for position, e in client.follow(from_=1, to=10, retry_delay=0.1, max_retries=50):
                got.append(e["eventId"])
                if len(got) == 5:
                    restarter.start()
            restarter.join()
            self.assertEqual(got, [f"rs-{i}" for i in range(10)])
        finally:
            if restarter.is_alive():
                restarter.join()
            self.assertEqual(holder["server"].terminate(), 0)

    def test_follow_after_to_ends_without_waiting(self) -> None:
        acks = self.client.append(events("end-", "end", 2))
        last = acks[-1]["position"]
        started = time.monotonic()
        self.assertEqual(list(self.client.follow(last_event_id=last, to=last)), [])
        self.assertLess(time.monotonic() - started, 2)

    def test_follow_from_now_yields_only_new_events(self) -> None:
        self.client.append(events("now-old-", "now", 2))
        stream = self.client.follow(session="now", idle_timeout=5)

        def later() -> None:
            time.sleep(0.3)
            self.client.append(events("now-new-", "now", 2))

        threading.Thread(target=later).start()
        got = [next(stream)[1]["eventId"], next(stream)[1]["eventId"]]
        stream.close()
        self.assertEqual(got, ["now-new-0", "now-new-1"])


class AuthTests(ServerTestCase):
    @classmethod
    def prepare(cls, directory: Path) -> None:
        cls.appender = create_token(directory, "append")
        cls.reader = create_token(directory, "read")
        cls.acme = create_token(directory, "read,append,command", sessions="acme-")
        cls.admin = create_token(directory, "admin")

    def as_(self, token: Optional[str]) -> Client:
        return Client(self.server.url, token=token)

    def assertRefused(self, status: int, kind: str, call: Any) -> None:
        with self.assertRaises(JournalError) as caught:
            call()
        self.assertEqual((caught.exception.status, caught.exception.kind), (status, kind), str(caught.exception))

    def test_no_token_or_an_unknown_one_is_401(self) -> None:
        self.assertRefused(401, "unauthorized", lambda: self.as_(None).status())
        self.assertRefused(401, "unauthorized", lambda: self.as_("jt_nope").append([event("a-1", "s")]))
        self.assertTrue(self.as_(None).health()["ok"], "/healthz needs no token")

    def test_a_token_without_the_scope_is_403(self) -> None:
        self.assertRefused(403, "forbidden", lambda: self.as_(self.reader).append([event("a-2", "s")]))
        self.assertRefused(403, "forbidden", lambda: list(self.as_(self.appender).read()))
        self.assertRefused(403, "forbidden", lambda: self.as_(self.reader).verify())
        self.assertRefused(403, "forbidden", lambda: self.as_(self.appender).command("create_task", {"sessionId": "s", "taskId": "t"}))
        self.as_(self.appender).append([event("a-3", "s")])
        self.assertEqual(len(list(self.as_(self.reader).read(session="s"))), 1)
        self.assertTrue(self.as_(self.admin).verify()["ok"])

    def test_a_token_limited_to_sessions_is_403_elsewhere(self) -> None:
        acme = self.as_(self.acme)
        self.assertRefused(403, "forbidden", lambda: acme.append([event("a-4", "other")]))
        acme.append([event("a-5", "acme-1")])
        self.assertRefused(403, "forbidden", lambda: list(acme.read()))
        self.assertEqual([e["eventId"] for e in acme.read(session="acme-1")], ["a-5"])
        self.assertRefused(403, "forbidden", lambda: acme.get("task", "t1"))
        self.assertRefused(403, "forbidden", lambda: acme.command("create_task", {"sessionId": "other", "taskId": "t"}))

    def test_follow_without_the_read_scope_is_403_at_once(self) -> None:
        started = time.monotonic()
        self.assertRefused(403, "forbidden", lambda: next(self.as_(self.appender).follow(from_=1)))
        self.assertRefused(403, "forbidden", lambda: next(self.as_(self.acme).follow(from_=1, session="other")))
        self.assertRefused(401, "unauthorized", lambda: next(self.as_("jt_nope").follow(from_=1)))
        self.assertLess(time.monotonic() - started, 5, "a refusal is not retried")


if __name__ == "__main__":
    unittest.main()
