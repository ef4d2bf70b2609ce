// A client for the journal's HTTP API (`journal serve`, docs/SERVER.md), over the global
// `fetch` (Node 20+, Deno, Bun, browsers). No dependencies; types in index.d.ts.
//
//   import { Client, JournalError } from 'journal-client';
//   const client = new Client('http://127.0.0.1:7070', { token: 'jt_...' });
//   const acks = await client.append([{ type: 'session.created', eventId: 'e1',
//     timestamp: '2026-05-11T10:00:00Z', sessionId: 's1' }]);
//   for await (const event of client.read({ session: 's1' })) { ... }
//   for await (const [position, event] of client.follow({ session: 's1' })) { ... }

/** A page of `GET /v1/events` also ends once it holds this many bytes of JSON (SERVER.md). */
export const PAGE_BYTES_MAX = 16 << 20;

/**
 * An error answer of the server: `{"error":{"kind"|"rule":…,"message":…,…}}`. Match on
 * `status` and `kind` (or `rule`, for a command refused by a rule), never on the message.
 */
export class JournalError extends Error {
  /**
   * @param {number} status
   * @param {{kind?: string|null, rule?: string|null, message?: string, line?: number|null,
   *   details?: Record<string, unknown>}} [fields]
   */
  constructor(status, { kind = null, rule = null, message = '', line = null, details = {} } = {}) {
    const code = kind ?? rule ?? 'error';
    super(`${status} ${code}${line != null ? ` (line ${line})` : ''}: ${message}`);
    this.name = 'JournalError';
    /** The HTTP status. */
    this.status = status;
    /** The error's kind (`invalid_event`, `conflict`, ...), or null for a rule. */
    this.kind = kind;
    /** The rule a command broke (`completion_not_accepted`, ...), or null. */
    this.rule = rule;
    /** The server's message, for people. */
    this.serverMessage = message;
    /** The refused line (from 1) of an append, when the server names one. */
    this.line = line;
    /** The whole error object (a conflict's `expectedVersion`/`actualVersion`, ...). */
    this.details = details;
  }

  /** The `kind`, or the `rule` of a command refused by one. */
  get code() {
    return this.kind ?? this.rule;
  }

  /**
   * The error an answer describes (any body: a proxy's HTML too).
   * @param {number} status
   * @param {string} text
   */
  static fromAnswer(status, text) {
    let error;
    try {
      error = JSON.parse(text).error;
    } catch {
      error = undefined;
    }
    if (error === null || typeof error !== 'object' || Array.isArray(error)) {
      return new JournalError(status, { message: text.trim().slice(0, 500) });
    }
    return new JournalError(status, {
      kind: typeof error.kind === 'string' ? error.kind : null,
      rule: typeof error.rule === 'string' ? error.rule : null,
      message: String(error.message ?? ''),
      line: Number.isInteger(error.line) ? error.line : null,
      details: error,
    });
  }
}

/**
 * A query string from the parameters that are not null or undefined.
 * @param {Record<string, unknown>} params
 */
function query(params) {
  const q = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null) q.append(key, String(value));
  }
  return q.toString();
}

/**
 * The query string of the `rel="next"` target of a `Link` header.
 * @param {string|null} link
 */
function nextCursor(link) {
  if (!link) return null;
  for (const part of link.split(',')) {
    const [target, ...params] = part.split(';');
    if (!params.some((p) => /^\s*rel="?next"?\s*$/.test(p))) continue;
    const url = target.trim().replace(/^</, '').replace(/>$/, '');
    const i = url.indexOf('?');
    return i < 0 ? '' : url.slice(i + 1);
  }
  return null;
}

/** @param {string} text */
function parseLines(text) {
  return text
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => JSON.parse(line));
}

/** @param {number} ms */
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** A client of one `journal serve`. */
export class Client {
  /**
   * @param {string} baseUrl the server, `http://HOST:PORT` (a path prefix is kept, for a server
   *   behind a reverse proxy).
   * @param {{token?: string|null, timeout?: number, fetch?: typeof fetch}} [options] `token`:
   *   a bearer token (`journal token create`); `timeout`: milliseconds to wait for an answer
   *   (and, in `follow`, for the next byte unless `idleTimeout` says otherwise), default 30,000.
   */
  constructor(baseUrl, { token = null, timeout = 30_000, fetch: fetchImpl } = {}) {
    const url = new URL(baseUrl);
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      throw new TypeError(`baseUrl must be http(s)://HOST[:PORT][/PREFIX], not ${baseUrl}`);
    }
    this.baseUrl = baseUrl.replace(/\/+$/, '');
    this.token = token;
    this.timeout = timeout;
    this.fetch = fetchImpl ?? globalThis.fetch.bind(globalThis);
  }

  /**
   * @param {string} path
   * @param {string} [q]
   */
  url(path, q = '') {
    return `${this.baseUrl}${path}${q ? `?${q}` : ''}`;
  }

  /** @param {Record<string, string>} [extra] */
  headers(extra = {}) {
    /** @type {Record<string, string>} */
    const headers = { accept: 'application/json, application/x-ndjson', ...extra };
    if (this.token) headers.authorization = `Bearer ${this.token}`;
    return headers;
  }

  /**
   * Sends a request and reads the whole answer; a status not in `ok` throws JournalError.
   * @param {string} method
   * @param {string} path
   * @param {{query?: string, body?: string, headers?: Record<string, string>,
   *   timeout?: number, ok?: number[]}} [options]
   */
  async request(method, path, { query: q = '', body, headers, timeout, ok = [200] } = {}) {
    const response = await this.fetch(this.url(path, q), {
      method,
      body,
      headers: this.headers(headers),
      signal: AbortSignal.timeout(timeout ?? this.timeout),
    });
    const bytes = await response.arrayBuffer();
    const text = new TextDecoder().decode(bytes);
    if (!ok.includes(response.status)) throw JournalError.fromAnswer(response.status, text);
    return {
      status: response.status,
      headers: response.headers,
      text,
      bytes: new Uint8Array(bytes),
      size: bytes.byteLength,
    };
  }

  /**
   * @param {string} path
   * @param {string} [q]
   * @param {number} [timeout]
   */
  async json(path, q = '', timeout) {
    const { text } = await this.request('GET', path, { query: q, timeout });
    return JSON.parse(text);
  }

  /**
   * Appends `events` as one atomic batch (`POST /v1/events`): all of it is stored, or none.
   * Resolves to one acknowledgement per event, `{position, eventId, hash, streamVersion}`
   * (`duplicate: true` for an event id already stored), once the batch is durable.
   * Throws JournalError: `400 invalid_event` with `line`, `409 conflict` (with
   * `details.actualVersion`), `413 too_large`, ...
   * @param {Iterable<Record<string, unknown> | string>} events
   * @param {{expectedVersion?: number|null}} [options] the stream version the batch's one
   *   stream must be at (optimistic concurrency).
   */
  async append(events, { expectedVersion } = {}) {
    const lines = [];
    for (const event of events) {
      const text = typeof event === 'string' ? event : JSON.stringify(event);
      if (text.includes('\n')) throw new TypeError('an event given as text must be one line of JSON');
      lines.push(text);
    }
    const { text } = await this.request('POST', '/v1/events', {
      query: query({ expectedVersion }),
      body: lines.length ? `${lines.join('\n')}\n` : '',
      headers: { 'content-type': 'application/x-ndjson' },
    });
    return parseLines(text);
  }

  /**
   * One page of `GET /v1/events`. `cursor` is the previous page's `cursor` (it carries the
   * filters); else the filters: `from`, `to`, `session`, `task`, `run`, `type` (a prefix of
   * the event type), `limit` (the page size, default 100, at most 1,000). A filter the server
   * does not know is refused (400), never ignored.
   * @param {import('./index.js').ReadFilters & {cursor?: string|null}} [filters]
   */
  async readPage({ cursor = null, ...filters } = {}) {
    const q = cursor ?? query(filters);
    const { headers, text, size } = await this.request('GET', '/v1/events', { query: q });
    const events = parseLines(text);
    const next = nextCursor(headers.get('link'));
    const limit = Number(new URLSearchParams(next ?? '').get('limit') ?? 100) || 100;
    return {
      events,
      cursor: next,
      limit,
      size,
      full: events.length >= limit || size >= PAGE_BYTES_MAX,
    };
  }

  /**
   * Every stored event the filters match, in order, page by page (following the
   * `Link: rel="next"` cursor) up to the head as it is when the last page is read.
   * `limit` is the page size, not a total.
   * @param {import('./index.js').ReadFilters} [filters]
   */
  async *read(filters = {}) {
    let page = await this.readPage(filters);
    for (;;) {
      yield* page.events;
      if (page.events.length === 0 || !page.full || page.cursor == null) return;
      page = await this.readPage({ cursor: page.cursor });
    }
  }

  /**
   * Follows `GET /v1/events/stream` (Server-Sent Events): yields `[position, event]` for the
   * history, then for live appends, forever or until the event at `to`.
   *
   * A dropped connection (the network, a server restart, a stream the server closed because
   * this client fell behind, no byte for `idleTimeout` ms while the server sends a heartbeat
   * every 15 s) is reopened with `Last-Event-ID` set to the last position yielded: no event is
   * missed, none is yielded twice. Without `lastEventId` the stream starts at `from` when
   * given, else after the head as it is now.
   *
   * `maxRetries`: how many reconnections in a row may fail before the last error is thrown
   * (default: never give up); a 4xx answer is thrown at once. `retryDelay` (ms, default 250)
   * doubles after each failure up to `maxRetryDelay` (5,000). `signal` stops it (the
   * iteration throws the signal's reason); breaking out of the loop closes the connection.
   * @param {import('./index.js').FollowOptions} [options]
   * @returns {AsyncGenerator<[number, import('./index.js').StoredEvent], void, undefined>}
   */
  async *follow({
    lastEventId = null,
    maxRetries = null,
    retryDelay = 250,
    maxRetryDelay = 5000,
    idleTimeout = null,
    signal = null,
    from = null,
    limit: _limit,
    ...filters
  } = {}) {
    const to = filters.to ?? null;
    let last;
    if (lastEventId != null) last = Number(lastEventId);
    else if (from != null) last = Math.max(Number(from) - 1, 0);
    // Pin "after the head" now, so a reconnection before the first event misses none.
    else last = Number((await this.digest()).position);
    const q = query(filters);
    const idle = idleTimeout ?? this.timeout;
    let failures = 0;
    for (;;) {
      if (to != null && last >= Number(to)) return;
      signal?.throwIfAborted();
      const controller = new AbortController();
      const stop = () => controller.abort(signal?.reason);
      signal?.addEventListener('abort', stop, { once: true });
      /** @type {ReturnType<typeof setTimeout> | undefined} */
      let timer;
      const arm = () => {
        clearTimeout(timer);
        timer = setTimeout(() => controller.abort(new IdleTimeout(idle)), idle);
      };
      arm();
      let ended = false;
      let progress = false;
      /** @type {unknown} */
      let error = null;
      try {
        const response = await this.fetch(this.url('/v1/events/stream', q), {
          headers: this.headers({ accept: 'text/event-stream', 'last-event-id': String(last) }),
          signal: controller.signal,
        });
        if (response.status !== 200) {
          const failure = JournalError.fromAnswer(response.status, await response.text());
          if (response.status >= 400 && response.status < 500 && response.status !== 408 && response.status !== 429) {
            throw failure;
          }
          throw new Retry(failure);
        }
        for await (const frame of sse(/** @type {ReadableStream<Uint8Array>} */ (response.body), arm)) {
          progress = true;
          if (frame.comment !== undefined) {
            if (frame.comment.startsWith('end:')) ended = true;
            continue;
          }
          const position = frame.position;
          if (position == null || position <= last) continue; // never yield a position twice
          last = position;
          yield [position, frame.event];
        }
      } catch (e) {
        if (e instanceof Retry) error = e.error;
        else if (e instanceof JournalError) throw e;
        else if (signal?.aborted) throw signal.reason;
        else error = e; // a dropped connection, an idle timeout, a frame cut short
      } finally {
        clearTimeout(timer);
        signal?.removeEventListener('abort', stop);
        controller.abort();
      }
      if (ended) return;
      if (progress) {
        // The stream worked, then dropped (or the server closed it): reconnect at once.
        failures = 0;
        continue;
      }
      failures += 1;
      if (maxRetries != null && failures > maxRetries) {
        throw error ?? new Error('the event stream closed at once');
      }
      await sleep(Math.min(retryDelay * 2 ** (failures - 1), maxRetryDelay));
    }
  }

  /**
   * Runs a control-plane command (`POST /v1/commands/{name}`). Resolves to the events it
   * appended (an array, with the command's `note`). Throws JournalError `422` with the broken
   * `rule` (`invalid_arguments` for an unknown command or a bad field), `409 contended`.
   * @param {string} name
   * @param {Record<string, unknown>} args
   */
  async command(name, args) {
    const { text } = await this.request('POST', `/v1/commands/${encodeURIComponent(name)}`, {
      body: JSON.stringify(args),
      headers: { 'content-type': 'application/json' },
    });
    const answer = JSON.parse(text);
    const events = Object.assign([...(answer.events ?? [])], { note: answer.note ?? null });
    return events;
  }

  /**
   * A read model (`GET /v1/models/{kind}/{id}`): `{model, freshness}`. `minPosition` waits (up
   * to `timeoutMs`, server default 5,000, at most 60,000) until the read models reflect that
   * position; if they do not in time the answer still comes, `freshness.state` `behind`.
   * `cursor` and `limit` page the `history` kind. Throws JournalError `404 not_found` when
   * nothing is recorded about `id`, `404 unknown_model` for an unknown kind.
   * @param {string} kind
   * @param {string} id
   * @param {{minPosition?: number, timeoutMs?: number, cursor?: number, limit?: number}} [options]
   */
  async get(kind, id, { minPosition, timeoutMs, cursor, limit } = {}) {
    const wait = minPosition != null ? Math.min(timeoutMs ?? 5000, 60_000) : 0;
    return this.json(
      `/v1/models/${encodeURIComponent(kind)}/${encodeURIComponent(id)}`,
      query({ minPosition, timeoutMs, cursor, limit }),
      this.timeout + wait,
    );
  }

  /**
   * The narrative of a run, task or session (`GET /v1/replay/{kind}/{id}`), as `journal replay`
   * prints it: an object (schema `replay.narrative`) for `format` `json` (the default), a
   * string for `text` and `html`. `at`: as of this position (default the head). Throws
   * JournalError `404 not_found` when nothing is recorded about the id, `400 bad_request` for
   * an unknown kind or format.
   * @param {'run'|'task'|'session'} kind
   * @param {string} id
   * @param {{at?: number, format?: 'json'|'text'|'html'}} [options]
   */
  async replay(kind, id, { at, format = 'json' } = {}) {
    const { text } = await this.request('GET', `/v1/replay/${encodeURIComponent(kind)}/${encodeURIComponent(id)}`, {
      query: query({ at, format }),
    });
    return format === 'json' ? JSON.parse(text) : text;
  }

  /**
   * A session's evidence pack (`GET /v1/evidence/{session}`): the bytes of a tar archive of
   * the files `journal export evidence` writes, under `evidence-<session>/`. Throws
   * JournalError `404 not_found` when nothing is recorded about the session.
   * @param {string} session
   */
  async evidence(session) {
    const { bytes } = await this.request('GET', `/v1/evidence/${encodeURIComponent(session)}`, {
      timeout: Math.max(this.timeout, 300_000),
    });
    return bytes;
  }

  /**
   * One JSON Schema by name (`GET /v1/schema/{name}`, as `journal schema NAME`), or without a
   * name the list of names (`GET /v1/schema`). Throws `404 not_found` for an unknown name.
   * @param {string|null} [name]
   */
  async schema(name = null) {
    if (name == null) return (await this.json('/v1/schema')).names;
    return this.json(`/v1/schema/${encodeURIComponent(name)}`);
  }

  /** `journal status` with the read models' freshness (`GET /v1/status`). */
  async status() {
    return this.json('/v1/status');
  }

  /** The head's position and chain link, `{position, hash}`: keep it elsewhere, pass it to `verify` later. */
  async digest() {
    return this.json('/v1/digest');
  }

  /**
   * `journal verify`'s report (`GET /v1/verify`, the `admin` scope); its `ok` says whether the
   * journal holds. With a digest kept earlier (`digest()`'s answer or `"POSITION:HASH"`), also
   * checks that history up to it was not truncated or rewritten.
   * @param {string | {position: number, hash: string} | null} [digest]
   */
  async verify(digest = null) {
    const d = digest == null || typeof digest === 'string' ? digest : `${digest.position}:${digest.hash}`;
    return this.json('/v1/verify', query({ digest: d }), Math.max(this.timeout, 300_000));
  }

  /** `GET /healthz` (no token): `{ok, head}`; `ok` false once the writer is poisoned (a 503, returned, not thrown). */
  async health() {
    const { text } = await this.request('GET', '/healthz', { ok: [200, 503] });
    return JSON.parse(text);
  }

  /** `GET /metrics` (the `admin` scope): Prometheus text. */
  async metrics() {
    return (await this.request('GET', '/metrics')).text;
  }
}

class Retry extends Error {
  /** @param {Error} error */
  constructor(error) {
    super(error.message);
    this.error = error;
  }
}

class IdleTimeout extends Error {
  /** @param {number} ms */
  constructor(ms) {
    super(`no byte of the event stream for ${ms} ms`);
    this.name = 'IdleTimeout';
  }
}

/**
 * The frames of an event stream: `{event, position}` for each complete event (a blank line
 * ends it; one cut short by a dropped connection is never yielded) and `{comment}` for each
 * comment line.
 * @param {ReadableStream<Uint8Array>} body
 * @param {() => void} onBytes called for every chunk read
 * @returns {AsyncGenerator<{comment: string} | {comment?: undefined, event: any, position: number|null}>}
 */
async function* sse(body, onBytes) {
  const decoder = new TextDecoder();
  let buffer = '';
  /** @type {string[]} */
  let data = [];
  /** @type {string|null} */
  let id = null;
  for await (const chunk of /** @type {AsyncIterable<Uint8Array>} */ (/** @type {unknown} */ (body))) {
    onBytes();
    buffer += decoder.decode(chunk, { stream: true });
    let newline;
    while ((newline = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, newline).replace(/\r$/, '');
      buffer = buffer.slice(newline + 1);
      if (line === '') {
        if (data.length) {
          const event = JSON.parse(data.join('\n'));
          const position = id != null && /^\d+$/.test(id) ? Number(id) : (event.position ?? null);
          yield { event, position };
        }
        data = [];
        id = null;
        continue;
      }
      if (line.startsWith(':')) {
        yield { comment: line.slice(1).trim() };
        continue;
      }
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'data') data.push(value);
      else if (field === 'id') id = value.trim();
    }
  }
}
