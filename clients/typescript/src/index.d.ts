// Types of journal-client (src/index.js), written by hand: no compiler is needed to use it.

/** An event in the Agent Runtime form, as appended. */
export interface Event {
  type: string;
  eventId: string;
  timestamp: string;
  sessionId?: string;
  [field: string]: unknown;
}

/** An event as stored and read back, with the fields the journal assigns. */
export interface StoredEvent extends Event {
  position: number;
  recordedAt: string;
  /** The chain link of the event's run (events appended in one run share it). */
  hash: string;
  streamVersion: number;
}

/** The acknowledgement of one appended event. */
export interface Ack {
  position: number;
  eventId: string;
  hash: string;
  streamVersion: number;
  /** True for an event id already stored (answered with its original position). */
  duplicate?: boolean;
}

/** The filters of `GET /v1/events` (a filter the server does not know is refused, 400). */
export interface ReadFilters {
  from?: number;
  to?: number;
  session?: string;
  task?: string;
  run?: string;
  /** A prefix of the event type. */
  type?: string;
  /** The page size (default 100, at most 1,000), not a total. */
  limit?: number;
}

export interface Page {
  events: StoredEvent[];
  /** The query string of the next page (`Link: rel="next"`); pass it to `readPage({cursor})`. */
  cursor: string | null;
  /** The page size the server used. */
  limit: number;
  /** The body's size in bytes. */
  size: number;
  /** Whether the page ended at its limit (more events may follow at once). */
  full: boolean;
}

export interface FollowOptions extends Omit<ReadFilters, 'limit'> {
  /** Resume after this position. */
  lastEventId?: number | null;
  /** Failed reconnections in a row before the last error is thrown (default: never give up). */
  maxRetries?: number | null;
  /** The first wait before reconnecting after a failure, in ms (default 250), doubled after each. */
  retryDelay?: number;
  /** The longest wait between reconnections, in ms (default 5,000). */
  maxRetryDelay?: number;
  /** Milliseconds without a byte before the connection counts as dropped (default: the client's timeout). */
  idleTimeout?: number | null;
  /** Stops following; the iteration throws the signal's reason. */
  signal?: AbortSignal | null;
}

export interface Freshness {
  projection: string;
  position: number;
  head: number;
  lagEvents: number;
  lagMs: number;
  state: 'fresh' | 'behind' | string;
  minPosition?: number;
  [field: string]: unknown;
}

export interface ModelAnswer<M = any> {
  model: M | null;
  freshness?: Freshness;
}

export interface Digest {
  position: number;
  hash: string;
}

export interface VerifyReport {
  ok: boolean;
  events: number;
  segments: number;
  head: Digest;
  problems: Array<{ kind: string; segment?: unknown; offset?: unknown; position?: unknown; detail: string }>;
}

export interface ClientOptions {
  /** A bearer token (`journal token create`). */
  token?: string | null;
  /** Milliseconds to wait for an answer (default 30,000). */
  timeout?: number;
  /** A fetch to use instead of the global one. */
  fetch?: typeof fetch;
}

export declare const PAGE_BYTES_MAX: number;

export declare class JournalError extends Error {
  constructor(
    status: number,
    fields?: { kind?: string | null; rule?: string | null; message?: string; line?: number | null; details?: Record<string, unknown> },
  );
  readonly status: number;
  /** The error's kind (`invalid_event`, `conflict`, `unauthorized`, ...), or null for a rule. */
  readonly kind: string | null;
  /** The rule a refused command broke (`completion_not_accepted`, `invalid_arguments`, ...). */
  readonly rule: string | null;
  /** The server's message, for people. */
  readonly serverMessage: string;
  /** The refused line of an append (from 1), when the server names one. */
  readonly line: number | null;
  /** The whole error object. */
  readonly details: Record<string, unknown>;
  /** `kind`, or `rule`. */
  readonly code: string | null;
  static fromAnswer(status: number, text: string): JournalError;
}

export declare class Client {
  constructor(baseUrl: string, options?: ClientOptions);
  readonly baseUrl: string;
  token: string | null;
  timeout: number;
  append(events: Iterable<Event | string>, options?: { expectedVersion?: number | null }): Promise<Ack[]>;
  readPage(filters?: ReadFilters & { cursor?: string | null }): Promise<Page>;
  read(filters?: ReadFilters): AsyncGenerator<StoredEvent, void, undefined>;
  follow(options?: FollowOptions): AsyncGenerator<[number, StoredEvent], void, undefined>;
  command(name: string, args: Record<string, unknown>): Promise<StoredEvent[] & { note: string | null }>;
  get<M = any>(
    kind: string,
    id: string,
    options?: { minPosition?: number; timeoutMs?: number; cursor?: number; limit?: number },
  ): Promise<ModelAnswer<M>>;
  replay(kind: 'run' | 'task' | 'session', id: string, options?: { at?: number; format?: 'json' }): Promise<Record<string, any>>;
  replay(kind: 'run' | 'task' | 'session', id: string, options: { at?: number; format: 'text' | 'html' }): Promise<string>;
  /** The bytes of the session's evidence pack, a tar archive. */
  evidence(session: string): Promise<Uint8Array>;
  schema(): Promise<string[]>;
  schema(name: string): Promise<Record<string, any>>;
  status(): Promise<Record<string, any>>;
  digest(): Promise<Digest>;
  verify(digest?: string | Digest | null): Promise<VerifyReport>;
  health(): Promise<{ ok: boolean; head: number; poisoned?: string }>;
  metrics(): Promise<string>;
}
