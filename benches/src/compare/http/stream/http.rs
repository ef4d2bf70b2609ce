//! The event stream over HTTP: a server in this process, each subscriber on its own connection
//! reading `GET /v1/events/stream` line by line (`id:` lines counted; `data:` lines skipped, not
//! parsed), the producer posting JSON Lines on another.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::body::Incoming;

use super::{produce, Record, SendTimes, Sink, Trial, SUBSCRIBERS};
use crate::compare::http::appends::{client_runtime, json_lines};
use crate::compare::http::client::Client;
use crate::compare::http::server::Served;
use crate::compare::{Context, Res};

/// Runs one trial of `events` events into a fresh server.
///
/// # Errors
/// The server's refusal or a connection's error.
pub fn trial(ctx: &Context, events: u64) -> Res<Trial> {
    let dir = ctx.fresh_dir("http-stream")?;
    let lines = Bytes::from(json_lines(0..events, ctx.ids)?);
    let served = Served::start(&dir.join("journal"))?;
    let measured = client_runtime()?.block_on(measure(served.addr, lines, events));
    served.stop()?;
    std::fs::remove_dir_all(&dir)?;
    measured
}

/// Opens every subscriber's stream, then produces and gathers what they received.
async fn measure(addr: std::net::SocketAddr, lines: Bytes, events: u64) -> Res<Trial> {
    let times = Arc::new(SendTimes::new(events));
    let mut streams = Vec::with_capacity(SUBSCRIBERS);
    for _ in 0..SUBSCRIBERS {
        let mut client = Client::connect(addr).await?;
        let body = client.stream().await?;
        streams.push((client, body));
    }
    let deadline = times.deadline();
    let followers: Vec<_> = streams
        .into_iter()
        .map(|(client, body)| {
            let record = Record::new(events, Arc::clone(&times));
            tokio::spawn(async move {
                let record = follow(body, record, deadline).await;
                drop(client);
                record
            })
        })
        .collect();
    let mut sink = Post::new(Client::connect(addr).await?, lines);
    let first_send = times.now_ns();
    let count = sink.ends.len();
    let produced = produce(&mut sink, count, &times).await?;
    let mut records = Vec::with_capacity(followers.len());
    for follower in followers {
        records.push(follower.await?);
    }
    Ok(Trial::gather(events, produced, first_send, records))
}

/// The producer's connection and its events as JSON Lines.
struct Post {
    client: Client,
    lines: Bytes,
    /// Where each event's line ends (after its newline).
    ends: Vec<usize>,
}

impl Post {
    fn new(client: Client, lines: Bytes) -> Post {
        let ends = memchr::memchr_iter(b'\n', &lines).map(|i| i + 1).collect();
        Post {
            client,
            lines,
            ends,
        }
    }
}

impl Sink for Post {
    async fn append(&mut self, from: usize, to: usize) -> Res<()> {
        let start = from
            .checked_sub(1)
            .and_then(|i| self.ends.get(i))
            .copied()
            .unwrap_or(0);
        let end = to.checked_sub(1).and_then(|i| self.ends.get(i)).copied();
        let end = end.ok_or("no such event")?;
        let acks = self.client.append(self.lines.slice(start..end)).await?;
        let mut n = from;
        for line in acks.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let ack: serde_json::Value = serde_json::from_slice(line)?;
            let position = ack["position"].as_u64().unwrap_or_default();
            n += 1;
            if position != n as u64 {
                return Err(format!("event {n} stored at position {position}").into());
            }
        }
        if n != to {
            return Err(format!("{} acknowledgements for {} events", n - from, to - from).into());
        }
        Ok(())
    }
}

/// Reads one stream until it has brought every event, ends, or `deadline` passes.
async fn follow(mut body: Incoming, record: Record, deadline: tokio::time::Instant) -> Record {
    let mut lines = Lines {
        record,
        buffer: Vec::new(),
    };
    while !lines.record.done() {
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => lines.record.fail("the deadline passed".into()),
            Ok(None) => lines.record.fail("the stream ended".into()),
            Ok(Some(Err(e))) => lines.record.fail(format!("reading the stream: {e}")),
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    lines.take(&data);
                }
            }
        }
    }
    lines.record
}

/// A subscriber's reading of the stream's lines.
struct Lines {
    record: Record,
    /// The bytes of a line not yet complete.
    buffer: Vec<u8>,
}

impl Lines {
    /// Takes a chunk of the stream, line by line; a line cut at the chunk's end waits in the
    /// buffer for the rest.
    fn take(&mut self, data: &[u8]) {
        let mut rest = data;
        if !self.buffer.is_empty() {
            let Some(end) = memchr::memchr(b'\n', rest) else {
                self.buffer.extend_from_slice(rest);
                return;
            };
            let (head, tail) = rest.split_at(end);
            let mut line = std::mem::take(&mut self.buffer);
            line.extend_from_slice(head);
            self.line(&line);
            line.clear();
            self.buffer = line;
            rest = tail.get(1..).unwrap_or_default();
        }
        while let Some(end) = memchr::memchr(b'\n', rest) {
            let (line, tail) = rest.split_at(end);
            self.line(line);
            rest = tail.get(1..).unwrap_or_default();
        }
        self.buffer.extend_from_slice(rest);
    }

    /// One line: an event's `id:`, or a comment saying why the stream ends.
    fn line(&mut self, line: &[u8]) {
        if let Some(id) = line.strip_prefix(b"id:") {
            let id = std::str::from_utf8(id).unwrap_or_default().trim();
            match id.parse::<u64>() {
                Ok(position) => self.record.arrived(position),
                Err(_) => self
                    .record
                    .fail(format!("an id that is not a position: {id:?}")),
            }
        } else if let Some(comment) = line.strip_prefix(b":") {
            let comment = String::from_utf8_lossy(comment);
            let comment = comment.trim();
            if !comment.is_empty() && comment != "heartbeat" {
                self.record.fail(format!("the server said {comment:?}"));
            }
        }
    }
}
