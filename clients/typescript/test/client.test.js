// Tests of journal-client against a real `journal serve` (the built binary: JOURNAL_BIN, else
// target/debug/journal under the repository root) on 127.0.0.1, in a temporary directory.
//
//   JOURNAL_BIN=target/debug/journal node --test clients/typescript/test/

import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { Client, JournalError } from '../src/index.js';

const here = path.dirname(fileURLToPath(import.meta.url));

/** The `journal` binary: JOURNAL_BIN, else target/debug/journal of this checkout. */
function journalBin() {
  const given = process.env.JOURNAL_BIN;
  const bin = given ? path.resolve(given) : path.resolve(here, '../../../target/debug/journal');
  if (!existsSync(bin)) throw new Error(`no journal binary at ${bin}: build it, or set JOURNAL_BIN`);
  return bin;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function event(eventId, session, extra = {}) {
  const e = { type: 'session.created', eventId, timestamp: '2026-05-11T10:00:00Z', ...extra };
  if (session != null) e.sessionId = session;
  return e;
}

function events(prefix, session, n, start = 0) {
  return Array.from({ length: n }, (_, i) => event(`${prefix}${start + i}`, session));
}

/** Starts `journal --dir DIR serve --listen LISTEN ARGS`; resolves once it says where it listens. */
async function startServer(dir, args = [], listen = '127.0.0.1:0') {
  const child = spawn(journalBin(), ['--dir', dir, 'serve', '--listen', listen, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve(code ?? signal)));
  const first = await new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`the server did not start: ${stderr}`)), 20_000);
    child.stdout.on('data', (d) => {
      out += d;
      const i = out.indexOf('\n');
      if (i >= 0) {
        clearTimeout(timer);
        resolve(out.slice(0, i));
      }
    });
    exited.then((code) => reject(new Error(`the server exited ${code}: ${stderr}`)));
  });
  const address = JSON.parse(first).listening;
  return {
    url: `http://${address}`,
    port: Number(address.split(':').pop()),
    stderr: () => stderr,
    /** SIGTERM; the exit code. */
    async terminate() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}

function createToken(dir, scope, sessions) {
  const args = ['--dir', dir, 'token', 'create', '--scope', scope];
  if (sessions) args.push('--sessions', sessions);
  return JSON.parse(execFileSync(journalBin(), args, { stdio: ['ignore', 'pipe', 'pipe'] })).token;
}

/**
 * A TCP proxy in front of the server that drops its connections on demand: all at once
 * (`sever`), or the next answer right after some bytes (`cutAfter`), inside an event's frame.
 */
class Proxy {
  constructor(upstreamPort) {
    this.upstreamPort = upstreamPort;
    this.sockets = new Set();
    this.connections = 0;
    this.cuts = 0;
    this.marker = null;
    this.server = net.createServer((client) => this.connect(client));
  }

  async listen() {
    await new Promise((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${this.server.address().port}`;
    return this;
  }

  connect(client) {
    this.connections += 1;
    const upstream = net.connect(this.upstreamPort, '127.0.0.1');
    for (const s of [client, upstream]) {
      this.sockets.add(s);
      s.on('error', () => {});
      s.on('close', () => {
        this.sockets.delete(s);
        client.destroy();
        upstream.destroy();
      });
    }
    client.on('data', (d) => upstream.write(d));
    let tail = Buffer.alloc(0);
    upstream.on('data', (d) => {
      const marker = this.marker;
      if (marker) {
        const window = Buffer.concat([tail, d]);
        const i = window.indexOf(marker);
        if (i >= 0) {
          this.marker = null;
          this.cuts += 1;
          client.write(d.subarray(0, i + marker.length - tail.length), () => {
            client.destroy();
            upstream.destroy();
          });
          return;
        }
        tail = window.subarray(Math.max(0, window.length - (marker.length - 1)));
      }
      client.write(d);
    });
  }

  cutAfter(marker) {
    this.marker = Buffer.from(marker);
  }

  sever() {
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
  }

  async close() {
    this.sever();
    await new Promise((resolve) => this.server.close(resolve));
  }
}

async function refused(status, kind, call) {
  await assert.rejects(call, (e) => {
    assert.ok(e instanceof JournalError, String(e));
    assert.deepEqual([e.status, e.kind], [status, kind], e.message);
    return true;
  });
}

async function collect(iterable) {
  const out = [];
  for await (const x of iterable) out.push(x);
  return out;
}

/** A server of the suite's own in a temporary directory; `prepare(dir)` runs before it starts. */
function serverSuite(args = [], prepare = () => {}) {
  const ctx = {};
  before(async () => {
    ctx.tmp = mkdtempSync(path.join(os.tmpdir(), 'journal-client-js-'));
    ctx.dir = path.join(ctx.tmp, 'journal');
    mkdirSync(ctx.dir);
    prepare(ctx.dir, ctx);
    ctx.server = await startServer(ctx.dir, args);
    ctx.client = new Client(ctx.server.url);
    ctx.head = async () => (await ctx.client.digest()).position;
  });
  after(async () => {
    const code = await ctx.server.terminate();
    rmSync(ctx.tmp, { recursive: true, force: true });
    assert.equal(code, 0, `the server exited ${code}: ${ctx.server.stderr()}`);
  });
  return ctx;
}

describe('append, read, commands, read models', { timeout: 30_000 }, () => {
  const ctx = serverSuite();

  it('appends then reads back in pages', async () => {
    const { client } = ctx;
    const batch = events('rt-', 'rt', 25);
    const acks = await client.append(batch);
    assert.deepEqual(acks.map((a) => a.eventId), batch.map((e) => e.eventId));
    assert.deepEqual(acks.map((a) => a.streamVersion), Array.from({ length: 25 }, (_, i) => i + 1));
    const positions = acks.map((a) => a.position);
    assert.deepEqual(positions, Array.from({ length: 25 }, (_, i) => positions[0] + i));
    assert.ok(acks.every((a) => a.hash.length === 64));
    await client.append(events('rt-other-', 'rt-other', 3));
    await client.append(events('rt-', 'rt', 5, 25));

    const first = await client.readPage({ session: 'rt', limit: 10 });
    assert.equal(first.events.length, 10);
    assert.ok(first.full);
    assert.match(first.cursor, new RegExp(`from=${positions[10]}\\b`));
    const second = await client.readPage({ cursor: first.cursor });
    assert.equal(second.events[0].eventId, 'rt-10');

    const read = await collect(client.read({ session: 'rt', limit: 10 }));
    assert.deepEqual(read.map((e) => e.eventId), Array.from({ length: 30 }, (_, i) => `rt-${i}`));
    read.slice(0, 25).forEach((stored, i) => {
      for (const key of ['type', 'eventId', 'timestamp', 'sessionId']) assert.equal(stored[key], batch[i][key]);
      assert.ok(stored.recordedAt);
    });
    assert.deepEqual(read.slice(0, 25).map((e) => e.position), positions);
    const some = await collect(client.read({ from: positions[3], to: positions[6], type: 'session.' }));
    assert.deepEqual(some.map((e) => e.eventId), ['rt-3', 'rt-4', 'rt-5', 'rt-6']);
    assert.equal((await client.readPage({ session: 'rt', limit: 5000 })).limit, 1000);
  });

  it("the last page's cursor answers only newer events", async () => {
    const { client } = ctx;
    await client.append(events('poll-', 'poll', 3));
    const page = await client.readPage({ session: 'poll' });
    assert.equal(page.events.length, 3);
    assert.equal(page.full, false);
    const empty = await client.readPage({ cursor: page.cursor });
    assert.deepEqual(empty.events, []);
    await client.append(events('poll-', 'poll', 2, 3));
    const newer = await client.readPage({ cursor: empty.cursor });
    assert.deepEqual(newer.events.map((e) => e.eventId), ['poll-3', 'poll-4']);
  });

  it('a bad line is 400 naming it, and nothing is written', async () => {
    const { client } = ctx;
    const before = await ctx.head();
    const batch = [event('bad-1', 'bad'), { type: 'session.created', eventId: 'bad-2' }, event('bad-3', 'bad')];
    await assert.rejects(client.append(batch), (e) => {
      assert.deepEqual([e.status, e.kind, e.line], [400, 'invalid_event', 2]);
      assert.match(e.serverMessage, /^line 2: /);
      return true;
    });
    assert.equal(await ctx.head(), before, 'nothing of a refused batch is written');
    await assert.rejects(client.append(['{"type":']), (e) => e.status === 400 && e.line === 1);
    await refused(400, 'bad_request', () => client.append([]));
  });

  it('an expected version conflict is 409 with the actual version', async () => {
    const { client } = ctx;
    await client.append(events('cv-', 'cv', 2), { expectedVersion: 0 });
    await assert.rejects(client.append([event('cv-x', 'cv')], { expectedVersion: 5 }), (e) => {
      assert.deepEqual([e.status, e.kind], [409, 'conflict']);
      assert.equal(e.details.expectedVersion, 5);
      assert.equal(e.details.actualVersion, 2);
      assert.equal(e.details.stream, 'session:cv');
      return true;
    });
    const acks = await client.append([event('cv-2', 'cv')], { expectedVersion: 2 });
    assert.equal(acks[0].streamVersion, 3);
    const again = await client.append([event('cv-2', 'cv')], { expectedVersion: 2 });
    assert.deepEqual([again[0].position, again[0].duplicate], [acks[0].position, true]);
  });

  it(
    'an event id reused with another body is 409 id_reused',
    async () => {
      const { client } = ctx;
      await client.append([event('reuse-1', 'reuse')]);
      await refused(409, 'id_reused', () => client.append([event('reuse-1', 'reuse', { payload: { changed: true } })]));
    },
  );

  it('an unknown filter is 400, not ignored', async () => {
    await assert.rejects(collect(ctx.client.read({ sesion: 's1' })), (e) => {
      assert.deepEqual([e.status, e.kind], [400, 'bad_request']);
      assert.match(e.serverMessage, /sesion/);
      return true;
    });
  });

  it('a command refused by a rule is 422 naming it', async () => {
    const { client } = ctx;
    const created = await client.command('create_task', { sessionId: 'cmd', taskId: 'cmd-t1', title: 'one' });
    assert.deepEqual(created.map((e) => e.type), ['task.created']);
    assert.equal(created.note, null);
    await assert.rejects(client.command('complete_task', { sessionId: 'cmd', taskId: 'cmd-t1' }), (e) => {
      assert.deepEqual([e.status, e.rule, e.kind, e.code], [422, 'completion_not_accepted', null, 'completion_not_accepted']);
      return true;
    });
    for (const [name, args] of [['no_such_command', {}], ['create_task', { taskId: 5 }]]) {
      await assert.rejects(client.command(name, args), (e) => e.status === 422 && e.rule === 'invalid_arguments');
    }
  });

  it('get reads a model and 404s what is not recorded', async () => {
    const { client } = ctx;
    const created = await client.command('create_task', { sessionId: 'gm', taskId: 'gm-t1', title: 'read me' });
    const position = created[0].position;
    const answer = await client.get('task', 'gm-t1', { minPosition: position, timeoutMs: 5000 });
    assert.equal(answer.model.taskId, 'gm-t1');
    assert.equal(answer.model.title, 'read me');
    assert.ok(answer.freshness.position >= position);
    assert.equal(answer.freshness.state, 'fresh');
    const history = await client.get('history', 'gm', { limit: 10 });
    assert.deepEqual(history.model.events.map((e) => e.position), [position]);
    await refused(404, 'not_found', () => client.get('task', 'gm-nope'));
    await refused(404, 'unknown_model', () => client.get('nonsense', 'x'));
    const behind = await client.get('task', 'gm-t1', { minPosition: 1e9, timeoutMs: 100 });
    assert.equal(behind.freshness.state, 'behind');
    await refused(404, 'not_found', () => client.get('task', 'a/b ?#'));
  });

  it('status, digest, verify and health', async () => {
    const { client } = ctx;
    await client.append([event('sdv-1', 'sdv')]);
    const digest = await client.digest();
    assert.equal(digest.hash.length, 64);
    const status = await client.status();
    assert.ok(status.headPosition >= digest.position);
    assert.ok(Array.isArray(status.projections));
    assert.equal((await client.verify()).ok, true);
    assert.equal((await client.verify(digest)).ok, true);
    assert.equal((await client.verify(`${digest.position}:${digest.hash}`)).ok, true);
    assert.equal((await client.verify({ position: digest.position, hash: '0'.repeat(64) })).ok, false);
    await assert.rejects(client.verify('nope'), (e) => e.status === 400);
    assert.equal((await client.health()).ok, true);
    assert.match(await client.metrics(), /journal_head_position/);
  });
});

/** Imports the repository's real Claude Code session (testdata/) into `dir`; its session id. */
function importClaudeCode(dir) {
  const logs = path.resolve(here, '../../../testdata/agent-logs/claude-code');
  const out = execFileSync(
    journalBin(),
    [
      '--dir', dir, 'import', 'claude-code', path.join(logs, 'cctrace_phase0-investigation_main.jsonl'),
      '--blobs', path.join(logs, 'cctrace_file-history'), '--json',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  return JSON.parse(out).sessions[0];
}

/** The files of an uncompressed tar archive (ustar): name to bytes. */
function untar(bytes) {
  const files = new Map();
  const text = (from, length) => new TextDecoder().decode(bytes.subarray(from, from + length)).replace(/\0.*$/s, '');
  for (let at = 0; at + 512 <= bytes.length; ) {
    const name = text(at, 100);
    if (!name) break;
    const prefix = text(at + 345, 155);
    const size = parseInt(text(at + 124, 12).trim(), 8);
    files.set(prefix ? `${prefix}/${name}` : name, bytes.subarray(at + 512, at + 512 + size));
    at += 512 + Math.ceil(size / 512) * 512;
  }
  return files;
}

describe('replay, evidence, schemas', { timeout: 30_000 }, () => {
  let session;
  const ctx = serverSuite([], (dir) => {
    session = importClaudeCode(dir);
  });

  it('replays a session in each format', async () => {
    const { client } = ctx;
    const narrative = await client.replay('session', session);
    assert.deepEqual(narrative.scope, { kind: 'session', id: session });
    assert.equal(narrative.counts.toolCalls, 152);
    assert.equal(narrative.counts.subagents, 3);
    const text = await client.replay('session', session, { format: 'text' });
    assert.ok(text.startsWith(`Replay of session ${session}`), text.slice(0, 200));
    const html = await client.replay('session', session, { format: 'html' });
    assert.match(html.slice(0, 500).toLowerCase(), /<html/);
    const early = await client.replay('session', session, { at: 100 });
    assert.deepEqual([early.asOf, early.counts.events], [100, 100]);
  });

  it('refuses what is not recorded, or not a replay', async () => {
    const { client } = ctx;
    await refused(404, 'not_found', () => client.replay('session', 'no-such-session'));
    await refused(400, 'bad_request', () => client.replay('sessions', session));
    await refused(400, 'bad_request', () => client.replay('session', session, { format: 'pdf' }));
  });

  it('answers the evidence pack as a tar archive', async () => {
    const { client } = ctx;
    const files = untar(await client.evidence(session));
    const prefix = `evidence-${session}/`;
    const manifest = JSON.parse(new TextDecoder().decode(files.get(`${prefix}MANIFEST.json`)));
    assert.equal(manifest.exported.session, session);
    const lines = new TextDecoder().decode(files.get(`${prefix}events.jsonl`)).trim().split('\n');
    assert.equal(lines.length, manifest.exported.events);
    assert.deepEqual(
      new Set(files.keys()),
      new Set([...manifest.files.map((f) => prefix + f.file), `${prefix}MANIFEST.json`]),
    );
    assert.ok(manifest.exported.blobs >= 10);
    await refused(404, 'not_found', () => client.evidence('no-such-session'));
  });

  it('answers schemas by name', async () => {
    const { client } = ctx;
    assert.ok((await client.schema()).includes('replay.narrative'));
    assert.ok('eventId' in (await client.schema('event')).properties);
    await refused(404, 'not_found', () => client.schema('no.such'));
  });
});

describe('follow', { timeout: 30_000 }, () => {
  const ctx = serverSuite(['--heartbeat-ms', '300']);

  it('yields history then live events, and ends at `to`', async () => {
    const { client } = ctx;
    const acks = await client.append(events('live-', 'live', 3));
    await client.append(events('noise-', 'noise', 2));
    const head = await ctx.head();
    const writer = sleep(300).then(() => client.append(events('live-', 'live', 3, 3)));
    const got = await collect(client.follow({ from: acks[0].position, session: 'live', to: head + 3 }));
    await writer;
    assert.deepEqual(got.map(([, e]) => e.eventId), Array.from({ length: 6 }, (_, i) => `live-${i}`));
    assert.deepEqual(got.map(([p]) => p), got.map(([, e]) => e.position));
    assert.deepEqual(got.slice(0, 3).map(([p]) => p), acks.map((a) => a.position));
  });

  it('resumes after forced disconnects without gap or duplicate', async () => {
    const { client, server } = ctx;
    const proxy = await new Proxy(server.port).listen();
    try {
      const through = new Client(proxy.url, { timeout: 10_000 });
      const first = await client.append(events('fd-', 'fd', 20));
      await client.append(events('fd-noise-', 'fd-noise', 5));
      // The first connection is cut inside the frame of fd-7, after its `data:` began.
      proxy.cutAfter('"eventId":"fd-7"');
      const got = [];
      // fd-0..19, 5 others, fd-20..24, 2 others, fd-25..29: fd-29 is 36 after fd-0. With `to`
      // a gap ends the loop short instead of waiting for ever; should the client wait anyway,
      // the proxy closes after 10 s and the follow gives up.
      const last = first[0].position + 36;
      const deadline = setTimeout(() => proxy.close(), 10_000);
      const done = new Set();
      const once = (step) => !done.has(step) && done.add(step);
      try {
        for await (const [position, e] of through.follow({
          from: first[0].position,
          to: last,
          session: 'fd',
          retryDelay: 50,
          maxRetries: 5,
        })) {
          got.push([position, e]);
          const index = Number(e.eventId.split('-').pop());
          if (index >= 11 && once('sever in the history')) proxy.sever(); // between frames
          if (index >= 19 && once('live')) await client.append(events('fd-', 'fd', 5, 20));
          if (index >= 22 && once('sever live')) proxy.sever();
          if (index >= 24 && once('after the drop')) {
            // Only a new connection can bring these.
            await client.append(events('fd-noise-', 'fd-noise', 2, 5));
            await client.append(events('fd-', 'fd', 5, 25));
          }
        }
      } finally {
        clearTimeout(deadline);
      }
      assert.deepEqual(got.map(([, e]) => e.eventId), Array.from({ length: 30 }, (_, i) => `fd-${i}`), 'no gap, no duplicate');
      const positions = got.map(([p]) => p);
      assert.deepEqual(positions, [...new Set(positions)].sort((a, b) => a - b));
      assert.deepEqual(positions, got.map(([, e]) => e.position));
      assert.equal(positions.at(-1), last);
      assert.equal(proxy.cuts, 1);
      // The cut, then the drop at fd-22 (events read ahead of a drop come from the client's
      // buffer, so the drop at fd-11 may not need a connection of its own).
      assert.ok(proxy.connections >= 3, `${proxy.connections} connections`);
    } finally {
      await proxy.close();
    }
  });

  it('resumes across a server restart', async () => {
    const dir = path.join(ctx.tmp, 'restart');
    mkdirSync(dir);
    let server = await startServer(dir, ['--heartbeat-ms', '300']);
    const port = server.port;
    const client = new Client(server.url, { timeout: 10_000 });
    await client.append(events('rs-', 'rs', 5));
    let restarting = null;
    const got = [];
    try {
      for await (const [, e] of client.follow({ from: 1, to: 10, retryDelay: 100, maxRetries: 50 })) {
        got.push(e.eventId);
        if (got.length === 5) {
          restarting = (async () => {
            assert.equal(await server.terminate(), 0);
            await sleep(500); // the follower's reconnections are refused meanwhile
            server = await startServer(dir, ['--heartbeat-ms', '300'], `127.0.0.1:${port}`);
            await new Client(server.url).append(events('rs-', 'rs', 5, 5));
          })();
        }
      }
      await restarting;
      assert.deepEqual(got, Array.from({ length: 10 }, (_, i) => `rs-${i}`));
    } finally {
      await restarting?.catch(() => {});
      assert.equal(await server.terminate(), 0);
    }
  });

  it('after `to` ends without waiting', async () => {
    const acks = await ctx.client.append(events('end-', 'end', 2));
    const last = acks.at(-1).position;
    const started = Date.now();
    assert.deepEqual(await collect(ctx.client.follow({ lastEventId: last, to: last })), []);
    assert.ok(Date.now() - started < 2000);
  });

  it('from now yields only new events', async () => {
    const { client } = ctx;
    await client.append(events('now-old-', 'now', 2));
    const stream = client.follow({ session: 'now', idleTimeout: 5000 });
    const writer = sleep(300).then(() => client.append(events('now-new-', 'now', 2)));
    const got = [(await stream.next()).value[1].eventId, (await stream.next()).value[1].eventId];
    await stream.return();
    await writer;
    assert.deepEqual(got, ['now-new-0', 'now-new-1']);
  });

  it('stops on its signal', async () => {
    const controller = new AbortController();
    const stream = ctx.client.follow({ signal: controller.signal });
    setTimeout(() => controller.abort(new Error('enough')), 200);
    await assert.rejects(collect(stream), /enough/);
  });
});

describe('authentication', { timeout: 30_000 }, () => {
  const tokens = {};
  const ctx = serverSuite([], (dir) => {
    tokens.appender = createToken(dir, 'append');
    tokens.reader = createToken(dir, 'read');
    tokens.acme = createToken(dir, 'read,append,command', 'acme-');
    tokens.admin = createToken(dir, 'admin');
  });
  const as = (token) => new Client(ctx.server.url, { token });

  it('no token, or an unknown one, is 401', async () => {
    await refused(401, 'unauthorized', () => as(null).status());
    await refused(401, 'unauthorized', () => as('jt_nope').append([event('a-1', 's')]));
    assert.equal((await as(null).health()).ok, true, '/healthz needs no token');
  });

  it('a token without the scope is 403', async () => {
    await refused(403, 'forbidden', () => as(tokens.reader).append([event('a-2', 's')]));
    await refused(403, 'forbidden', () => collect(as(tokens.appender).read()));
    await refused(403, 'forbidden', () => as(tokens.reader).verify());
    await refused(403, 'forbidden', () => as(tokens.appender).command('create_task', { sessionId: 's', taskId: 't' }));
    await as(tokens.appender).append([event('a-3', 's')]);
    assert.equal((await collect(as(tokens.reader).read({ session: 's' }))).length, 1);
    assert.equal((await as(tokens.admin).verify()).ok, true);
  });

  it('a token limited to sessions is 403 elsewhere', async () => {
    const acme = as(tokens.acme);
    await refused(403, 'forbidden', () => acme.append([event('a-4', 'other')]));
    await acme.append([event('a-5', 'acme-1')]);
    await refused(403, 'forbidden', () => collect(acme.read()));
    assert.deepEqual((await collect(acme.read({ session: 'acme-1' }))).map((e) => e.eventId), ['a-5']);
    await refused(403, 'forbidden', () => acme.get('task', 't1'));
    await refused(403, 'forbidden', () => acme.command('create_task', { sessionId: 'other', taskId: 't' }));
  });

  it('follow without the read scope is 403 at once', async () => {
    const started = Date.now();
    await refused(403, 'forbidden', () => as(tokens.appender).follow({ from: 1 }).next());
    await refused(403, 'forbidden', () => as(tokens.acme).follow({ from: 1, session: 'other' }).next());
    await refused(401, 'unauthorized', () => as('jt_nope').follow({ from: 1 }).next());
    assert.ok(Date.now() - started < 5000, 'a refusal is not retried');
  });
});
