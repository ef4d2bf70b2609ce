//! The helpers the NATS tests share: the local cluster (`journal_replicate::local_cluster`),
//! child processes killed when dropped, and a JetStream client on the test's own thread.
#![allow(dead_code)]

use std::process::Child;
use std::time::Duration;

pub use journal_replicate::local_cluster::Cluster;

/// A child process killed (SIGKILL) when dropped, so a failing test leaves none behind.
pub struct Killed(pub Option<Child>);

impl Killed {
    /// Kills it now with SIGKILL.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits up to `limit` for it to exit; its exit status, or `None` when it is still running.
    pub fn wait_for(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let child = self.0.as_mut()?;
        let steps = limit.as_millis() / 50;
        for _ in 0..steps {
            if let Ok(Some(status)) = child.try_wait() {
                self.0 = None;
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A runtime of the test's own thread, for the NATS client.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A client of the cluster at `url`, and its JetStream context.
pub async fn jetstream(url: &str) -> (async_nats::Client, async_nats::jetstream::Context) {
    let client = journal_replicate::connect(url).await.unwrap();
    let js = async_nats::jetstream::new(client.clone());
    (client, js)
}
