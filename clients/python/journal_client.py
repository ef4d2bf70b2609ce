"""A client for the journal's HTTP API (`journal serve`, docs/SERVER.md).

Standard library only. One :class:`Client` per server; it is safe to share between threads
(every call opens its own connection).

    from journal_client import Client, JournalError

    client = Client("http://127.0.0.1:7070", token="jt_...")
    acks = client.append([{"type": "session.created", "eventId": "e1",
                           "timestamp": "2026-05-11T10:00:00Z", "sessionId": "s1"}])
    for event in client.read(session="s1"):
        ...
    for position, event in client.follow(session="s1"):
        ...

Every error answer of the server raises :class:`JournalError` (its ``status``, ``kind`` or
``rule``, ``message``, ``line`` when the server names one, and the whole error object in
``details``). A failure to reach the server raises :class:`OSError` (``ConnectionError``,
``TimeoutError``) or :class:`http.client.HTTPException`, as the standard library does.
"""

from __future__ import annotations

import http.client
import json
import ssl
import time
import urllib.parse
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple, Union

__all__ = ["Client", "JournalError", "CommandResult", "Page"]

Event = Dict[str, Any]

#: A page of ``GET /v1/events`` also ends once it holds this many bytes of JSON (SERVER.md).
PAGE_BYTES_MAX = 16 << 20

#: The filters of ``GET /v1/events`` and ``GET /v1/events/stream``.
FILTERS = ("from", "to", "session", "task", "run", "type", "limit")


class JournalError(Exception):
    """An error answer of the server: ``{"error":{"kind"|"rule":…,"message":…,…}}``.

    Match on :attr:`status` and :attr:`kind` (or :attr:`rule` for a command refused by a
    rule), never on the message, which is for people.
    """

    def __init__(
        self,
        status: int,
        kind: Optional[str] = None,
        rule: Optional[str] = None,
        message: str = "",
        line: Optional[int] = None,
        details: Optional[Dict[str, Any]] = None,
    ) -> None:
        self.status = status
        self.kind = kind
        self.rule = rule
        self.message = message
        self.line = line
        #: The whole error object (a conflict's ``expectedVersion``/``actualVersion``, ...).
        self.details: Dict[str, Any] = details or {}
        super().__init__(str(self))

    @property
    def code(self) -> Optional[str]:
        """The ``kind``, or the ``rule`` of a command refused by one."""
        return self.kind if self.kind is not None else self.rule

    def __str__(self) -> str:
        where = f" (line {self.line})" if self.line is not None else ""
        return f"{self.status} {self.code or 'error'}{where}: {self.message}"

    @classmethod
    def from_answer(cls, status: int, body: bytes) -> "JournalError":
        """The error an answer's status and body describe (any body: a proxy's HTML too)."""
        try:
            error = json.loads(body.decode("utf-8"))["error"]
            if not isinstance(error, dict):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            text = body.decode("utf-8", "replace").strip()
            return cls(status, message=text[:500] or http.client.responses.get(status, ""))
        line = error.get("line")
        return cls(
            status,
            kind=error.get("kind"),
            rule=error.get("rule"),
            message=str(error.get("message", "")),
            line=line if isinstance(line, int) else None,
            details=error,
        )


class CommandResult(List[Event]):
    """The events a command appended, with the command's :attr:`note` (``None`` or a text)."""

    note: Optional[str] = None


class Page:
    """One page of ``GET /v1/events``: its events, and the cursor of the next page.

    ``cursor`` is the query string of the next page (the server's ``Link: rel="next"``); pass
    it back to :meth:`Client.read_page` to read on. After the last page it points past the head,
    so polling it later answers only newer events.
    """

    def __init__(self, events: List[Event], cursor: Optional[str], limit: int, size: int):
        self.events = events
        self.cursor = cursor
        #: The page size the server used (``limit`` as lowered by the server).
        self.limit = limit
        #: The body's size in bytes.
        self.size = size

    @property
    def full(self) -> bool:
        """Whether the page ended at its limit (more events may follow at once)."""
        return len(self.events) >= self.limit or self.size >= PAGE_BYTES_MAX

    def __repr__(self) -> str:
        return f"Page({len(self.events)} events, cursor={self.cursor!r})"


def _query(params: Mapping[str, Any]) -> str:
    """A query string from the parameters that are not ``None``."""
    pairs = [(k, _text(v)) for k, v in params.items() if v is not None]
    return urllib.parse.urlencode(pairs)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _filters(filters: Mapping[str, Any]) -> Dict[str, Any]:
    """The read filters with Python-friendly spellings (``from_``, ``type_``) mapped to the
    server's. Other names go to the server as they are: it refuses one it does not know
    (``400``), never ignores it."""
    out: Dict[str, Any] = {}
    for key, value in filters.items():
        key = key[:-1] if key in ("from_", "type_") else key
        out[key] = value
    return out


def _next_cursor(link: Optional[str]) -> Optional[str]:
    """The query string of the ``rel="next"`` target of a ``Link`` header."""
    if not link:
        return None
    for part in link.split(","):
        target, _, params = part.partition(";")
        if 'rel="next"' not in params.replace(" ", "") and "rel=next" not in params:
            continue
        target = target.strip().lstrip("<").rstrip(">")
        return urllib.parse.urlsplit(target).query
    return None


def _parse_lines(body: bytes) -> List[Event]:
    return [json.loads(line) for line in body.decode("utf-8").splitlines() if line.strip()]


class Client:
    """A client of one `journal serve`.

    :param base_url: the server, ``http://HOST:PORT`` (a path prefix, for a server behind a
        reverse proxy, is kept: ``https://example.com/journal``).
    :param token: a bearer token (``journal token create``), or ``None`` for a server without
        a tokens file.
    :param timeout: seconds to wait for a connection or an answer (and, in :meth:`follow`, for
        the next byte of the stream unless ``idle_timeout`` says otherwise).
    """

    def __init__(self, base_url: str, token: Optional[str] = None, timeout: float = 30) -> None:
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url must be http(s)://HOST[:PORT][/PREFIX], not {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")

    # ---- plumbing -------------------------------------------------------------------------

    def _connection(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(
                self._host, self._port, timeout=timeout, context=ssl.create_default_context()
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _headers(self, extra: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
        headers = {"Accept": "application/json, application/x-ndjson", "User-Agent": "journal-client-python/0.1"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if extra:
            headers.update(extra)
        return headers

    def _target(self, path: str, query: str = "") -> str:
        return f"{self._prefix}{path}" + (f"?{query}" if query else "")

    def _request(
        self,
        method: str,
        path: str,
        query: str = "",
        body: Optional[bytes] = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
        ok: Tuple[int, ...] = (200,),
    ) -> Tuple[int, http.client.HTTPMessage, bytes]:
        """Sends a request and reads the whole answer; an answer whose status is not in ``ok``
        raises :class:`JournalError`."""
        conn = self._connection(self.timeout if timeout is None else timeout)
        try:
            conn.request(method, self._target(path, query), body=body, headers=self._headers(headers))
            response = conn.getresponse()
            data = response.read()
        finally:
            conn.close()
        if response.status not in ok:
            raise JournalError.from_answer(response.status, data)
        return response.status, response.headers, data

    def _json(self, path: str, query: str = "", timeout: Optional[float] = None) -> Any:
        _, _, data = self._request("GET", path, query, timeout=timeout)
        return json.loads(data)

    # ---- events ---------------------------------------------------------------------------

    def append(
        self, events: Iterable[Union[Event, str]], expected_version: Optional[int] = None
    ) -> List[Event]:
        """Appends ``events`` as one atomic batch (``POST /v1/events``): all of it is stored,
        or none of it.

        :param events: events in the Agent Runtime form (dicts, or JSON texts of one line).
        :param expected_version: the stream version the batch's one stream must be at
            (optimistic concurrency); ``409 conflict`` otherwise.
        :returns: one acknowledgement per event, ``{"position", "eventId", "hash",
            "streamVersion"}`` (with ``"duplicate": True`` for an event id already stored),
            once the batch is durable.
        :raises JournalError: ``400 invalid_event`` naming the ``line`` (counted from 1),
            ``409 conflict`` (``details["actualVersion"]``), ``413 too_large``, ...
        """
        lines = []
        for event in events:
            text = event if isinstance(event, str) else json.dumps(event, ensure_ascii=False, separators=(",", ":"))
            if "\n" in text:
                raise ValueError("an event given as text must be one line of JSON")
            lines.append(text)
        body = ("\n".join(lines) + "\n").encode("utf-8") if lines else b""
        _, _, data = self._request(
            "POST",
            "/v1/events",
            _query({"expectedVersion": expected_version}),
            body=body,
            headers={"Content-Type": "application/x-ndjson"},
        )
        return _parse_lines(data)

    def read_page(self, cursor: Optional[str] = None, **filters: Any) -> Page:
        """One page of ``GET /v1/events``.

        :param cursor: the :attr:`Page.cursor` of the page before (then ``filters`` are not
            used: the cursor carries them).
        :param filters: ``from_`` (or ``**{"from": N}``), ``to``, ``session``, ``task``,
            ``run``, ``type`` (a prefix of the event type), ``limit`` (the page size, default
            100, at most 1,000).
        """
        query = cursor if cursor is not None else _query(_filters(filters))
        _, headers, data = self._request("GET", "/v1/events", query)
        events = _parse_lines(data)
        next_cursor = _next_cursor(headers.get("Link"))
        limit = 100
        if next_cursor:
            for value in urllib.parse.parse_qs(next_cursor).get("limit", []):
                limit = int(value)
        return Page(events, next_cursor, limit, len(data))

    def read(self, **filters: Any) -> Iterator[Event]:
        """Every stored event the filters match, in order, page by page (following the
        ``Link: rel="next"`` cursor) up to the head as it is when the last page is read.

        Filters as :meth:`read_page`'s; ``limit`` is the page size, not a total.
        """
        page = self.read_page(**filters)
        while True:
            yield from page.events
            if not page.events or not page.full or page.cursor is None:
                return
            page = self.read_page(page.cursor)

    def follow(
        self,
        last_event_id: Optional[int] = None,
        *,
        max_retries: Optional[int] = None,
        retry_delay: float = 0.25,
        max_retry_delay: float = 5.0,
        idle_timeout: Optional[float] = None,
        **filters: Any,
    ) -> Iterator[Tuple[int, Event]]:
        """Follows ``GET /v1/events/stream`` (Server-Sent Events): yields ``(position,
        event)`` for the history and then for live appends, forever, or until the event at
        ``to`` when ``to`` is given.

        A dropped connection (the network, a server restart, a stream the server closed
        because this client fell behind, no byte for ``idle_timeout`` seconds while the server
        sends a heartbeat every 15 s) is reopened with ``Last-Event-ID`` set to the last
        position yielded: no event is missed and none is yielded twice.

        :param last_event_id: resume after this position (what a previous ``follow`` yielded
            last). Without it the stream starts at ``from`` when given, else after the head as
            it is now (new events only).
        :param max_retries: how many reconnections in a row may fail before the last error is
            raised (``None``: never give up). A ``4xx`` answer (a bad filter, a token without
            the ``read`` scope) is raised at once.
        :param retry_delay: the first wait before reconnecting after a failure, doubled after
            each failure up to ``max_retry_delay``.
        :param idle_timeout: seconds without a byte before the connection counts as dropped
            (default: the client's ``timeout``).
        :param filters: ``from_``, ``to``, ``session``, ``task``, ``run``, ``type``.
        """
        filters = _filters(filters)
        start = filters.pop("from", None)
        filters.pop("limit", None)
        to = filters.get("to")
        if last_event_id is not None:
            last = int(last_event_id)
        elif start is not None:
            last = max(int(start) - 1, 0)
        else:
            # Pin "after the head" now, so a reconnection before the first event misses none.
            last = int(self.digest()["position"])
        query = _query(filters)
        idle = self.timeout if idle_timeout is None else idle_timeout
        failures = 0
        while True:
            if to is not None and last >= int(to):
                return
            conn = self._connection(idle)
            ended = False
            progress = False  # an event or a heartbeat came on this connection
            error: Optional[BaseException] = None
            try:
                conn.request(
                    "GET",
                    self._target("/v1/events/stream", query),
                    headers=self._headers({"Accept": "text/event-stream", "Last-Event-ID": str(last)}),
                )
                response = conn.getresponse()
                if response.status != 200:
                    failure = JournalError.from_answer(response.status, response.read())
                    if 400 <= response.status < 500 and response.status not in (408, 429):
                        raise failure
                    raise _Retry(failure)
                for kind, value, position in _sse(response):
                    progress = True
                    if kind == "comment":
                        if value.startswith("end:"):
                            ended = True
                        continue
                    if position is None or position <= last:
                        continue  # never yield a position twice
                    last = position
                    yield position, value
            except _Retry as retry:
                error = retry.error
            except (OSError, http.client.HTTPException, ValueError) as e:
                # ValueError: a frame cut short (bad JSON) by a dropped connection.
                error = e
            finally:
                conn.close()
            if ended:
                return
            if progress:
                # The stream worked, then dropped (or the server closed it: shutting down, or
                # this client fell behind): reconnect at once.
                failures = 0
                continue
            failures += 1
            if max_retries is not None and failures > max_retries:
                raise error if error is not None else ConnectionError("the event stream closed at once")
            time.sleep(min(retry_delay * (2 ** (failures - 1)), max_retry_delay))

    # ---- commands and read models -----------------------------------------------------------

    def command(self, name: str, args: Mapping[str, Any]) -> CommandResult:
        """Runs a control-plane command (``POST /v1/commands/{name}``).

        :returns: the events it appended (a list, with the command's ``note``).
        :raises JournalError: ``422`` with the broken ``rule`` (``invalid_arguments`` for an
            unknown command or a bad field), ``409 contended``.
        """
        _, _, data = self._request(
            "POST",
            f"/v1/commands/{urllib.parse.quote(name, safe='')}",
            body=json.dumps(args, ensure_ascii=False).encode("utf-8"),
            headers={"Content-Type": "application/json"},
        )
        answer = json.loads(data)
        result = CommandResult(answer.get("events", []))
        result.note = answer.get("note")
        return result

    def get(
        self,
        kind: str,
        id: str,
        min_position: Optional[int] = None,
        timeout_ms: Optional[int] = None,
        *,
        cursor: Optional[int] = None,
        limit: Optional[int] = None,
    ) -> Dict[str, Any]:
        """A read model (``GET /v1/models/{kind}/{id}``): ``{"model": …, "freshness": …}``.

        :param min_position: wait (up to ``timeout_ms``, server default 5,000, at most 60,000)
            until the read models reflect this position: read your own writes. If they do not
            in time the answer still comes, with ``freshness["state"] == "behind"``.
        :param cursor: for ``history``, the window's first position; ``limit`` its size.
        :raises JournalError: ``404 not_found`` when nothing is recorded about ``id``,
            ``404 unknown_model`` for an unknown ``kind``.
        """
        query = _query({"minPosition": min_position, "timeoutMs": timeout_ms, "cursor": cursor, "limit": limit})
        wait = (timeout_ms if timeout_ms is not None else 5000) / 1000 if min_position is not None else 0
        path = f"/v1/models/{urllib.parse.quote(kind, safe='')}/{urllib.parse.quote(id, safe='')}"
        return self._json(path, query, timeout=self.timeout + min(wait, 60))

    # ---- review and schemas ----------------------------------------------------------------

    def replay(
        self, kind: str, id: str, at: Optional[int] = None, format: str = "json"
    ) -> Union[Dict[str, Any], str]:
        """The narrative of a run, task or session (``GET /v1/replay/{kind}/{id}``), as
        ``journal replay`` prints it.

        :param kind: ``run``, ``task`` or ``session``.
        :param at: the narrative as of this position (default the head).
        :param format: ``json`` (a dict, schema ``replay.narrative``), ``text`` or ``html``
            (a str).
        :raises JournalError: ``404 not_found`` when nothing is recorded about ``id`` (as of
            ``at``), ``400 bad_request`` for an unknown kind or format.
        """
        path = f"/v1/replay/{urllib.parse.quote(kind, safe='')}/{urllib.parse.quote(id, safe='')}"
        _, _, data = self._request("GET", path, _query({"at": at, "format": format}))
        return json.loads(data) if format == "json" else data.decode("utf-8")

    def evidence(self, session: str) -> bytes:
        """A session's evidence pack (``GET /v1/evidence/{session}``): a tar archive of the
        files ``journal export evidence`` writes (``events.jsonl``, ``head.json``, ``blobs/``,
        the replay, ``MANIFEST.json``) under ``evidence-<session>/``. Open it with
        ``tarfile.open(fileobj=io.BytesIO(data))``.

        :raises JournalError: ``404 not_found`` when nothing is recorded about the session.
        """
        path = f"/v1/evidence/{urllib.parse.quote(session, safe='')}"
        _, _, data = self._request("GET", path, timeout=max(self.timeout, 300))
        return data

    def schema(self, name: Optional[str] = None) -> Any:
        """One JSON Schema by name (``GET /v1/schema/{name}``, as ``journal schema NAME``), or
        without a name the list of names (``GET /v1/schema``).

        :raises JournalError: ``404 not_found`` for an unknown name.
        """
        if name is None:
            return self._json("/v1/schema")["names"]
        return self._json(f"/v1/schema/{urllib.parse.quote(name, safe='')}")

    # ---- the journal ----------------------------------------------------------------------

    def status(self) -> Dict[str, Any]:
        """``journal status`` with the read models' freshness (``GET /v1/status``)."""
        return self._json("/v1/status")

    def digest(self) -> Dict[str, Any]:
        """The head's position and chain link, ``{"position": N, "hash": "…"}``: keep it
        somewhere else and pass it to :meth:`verify` later."""
        return self._json("/v1/digest")

    def verify(self, digest: Union[None, str, Mapping[str, Any]] = None) -> Dict[str, Any]:
        """``journal verify``'s report (``GET /v1/verify``, the ``admin`` scope); its ``ok``
        says whether the journal holds.

        :param digest: a digest kept earlier (:meth:`digest`'s answer, or ``"POSITION:HASH"``):
            also checks that history up to it was not truncated or rewritten.
        """
        if digest is not None and not isinstance(digest, str):
            digest = f"{digest['position']}:{digest['hash']}"
        return self._json("/v1/verify", _query({"digest": digest}), timeout=max(self.timeout, 300))

    def health(self) -> Dict[str, Any]:
        """``GET /healthz`` (no token): ``{"ok": True, "head": N}``, or ``ok`` false with why
        once the writer is poisoned (answered ``503``, returned here, not raised)."""
        _, _, data = self._request("GET", "/healthz", ok=(200, 503))
        return json.loads(data)

    def metrics(self) -> str:
        """``GET /metrics`` (the ``admin`` scope): Prometheus text."""
        _, _, data = self._request("GET", "/metrics")
        return data.decode("utf-8")


class _Retry(Exception):
    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def _sse(response: http.client.HTTPResponse) -> Iterator[Tuple[str, Any, Optional[int]]]:
    """The frames of an event stream: ``("event", data, id)`` for each complete event (a blank
    line ends it; one cut short by a dropped connection is never yielded) and
    ``("comment", text, None)`` for each comment line."""
    data: List[str] = []
    event_id: Optional[str] = None
    while True:
        raw = response.readline()
        if not raw:
            return
        if not raw.endswith(b"\n") and not raw.endswith(b"\r"):
            return  # the connection dropped in the middle of a line
        line = raw.decode("utf-8").rstrip("\r\n")
        if line == "":
            if data:
                text = "\n".join(data)
                event = json.loads(text)
                position = int(event_id) if event_id is not None and event_id.isdigit() else event.get("position")
                yield "event", event, position
            data, event_id = [], None
            continue
        if line.startswith(":"):
            yield "comment", line[1:].strip(), None
            continue
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "data":
            data.append(value)
        elif field == "id":
            event_id = value.strip()
