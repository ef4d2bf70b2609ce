//! A keep-alive HTTP/1.1 client over one connection (hyper's own client connection), the way
//! an agent runtime with one connection per worker talks to `journal serve`.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::compare::Res;

/// One connection to the server, its requests sent one after another.
pub struct Client {
    send: SendRequest<Full<Bytes>>,
    host: String,
}

impl Client {
    /// Connects to `addr`; the connection is driven by a task on the current runtime until
    /// the client is dropped.
    ///
    /// # Errors
    /// The connection's or the handshake's error.
    pub async fn connect(addr: SocketAddr) -> Res<Client> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connecting to {addr}: {e}"))?;
        // A request is written whole; it should not wait for more.
        stream.set_nodelay(true)?;
        let (send, connection) = http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        Ok(Client {
            send,
            host: addr.to_string(),
        })
    }

    /// Sends `request` once the connection is free; answers its response's head and body.
    async fn send(&mut self, request: Request<Full<Bytes>>) -> Res<hyper::Response<Incoming>> {
        self.send.ready().await?;
        Ok(self.send.send_request(request).await?)
    }

    /// `POST /v1/events` with `body` (JSON Lines); answers the acknowledgements, refusing any
    /// status but `200`.
    ///
    /// # Errors
    /// The connection's error, or the server's refusal with its body.
    pub async fn append(&mut self, body: Bytes) -> Res<Bytes> {
        let request = Request::post("/v1/events")
            .header(hyper::header::HOST, &self.host)
            .header(hyper::header::CONTENT_TYPE, "application/x-ndjson")
            .body(Full::new(body))?;
        let response = self.send(request).await?;
        let status = response.status();
        let answer = response.into_body().collect().await?.to_bytes();
        if status != StatusCode::OK {
            return Err(format!(
                "POST /v1/events answered {status}: {}",
                String::from_utf8_lossy(&answer)
            )
            .into());
        }
        Ok(answer)
    }

    /// `GET /v1/events/stream` (new events only); answers the open stream's body once the
    /// server has answered `200`. The client is kept while the stream is read.
    ///
    /// # Errors
    /// The connection's error, or the server's refusal.
    pub async fn stream(&mut self) -> Res<Incoming> {
        let request = Request::get("/v1/events/stream")
            .header(hyper::header::HOST, &self.host)
            .header(hyper::header::ACCEPT, "text/event-stream")
            .body(Full::new(Bytes::new()))?;
        let response = self.send(request).await?;
        if response.status() != StatusCode::OK {
            return Err(format!("GET /v1/events/stream answered {}", response.status()).into());
        }
        Ok(response.into_body())
    }
}
