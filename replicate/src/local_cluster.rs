//! A local JetStream cluster of `nats-server` processes on free loopback ports, their
//! configuration files and stores in a temporary directory, stopped (SIGKILL) when dropped:
//! for the NATS tests and the `replicate` benchmark, and for trying replication on one machine.
#![allow(
    clippy::expect_used,
    clippy::panic,
    reason = "a test and benchmark harness: a node that cannot start ends the run, saying why"
)]

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// What to install when `nats-server` is missing.
const INSTALL: &str = "nats-server is not installed: these tests start a JetStream cluster of \
    them; install it with `apt-get install nats-server` (Debian's package; .ci/run does this)";

/// One node: its ports, configuration file and process.
#[derive(Debug)]
struct Node {
    client_port: u16,
    config: PathBuf,
    child: Option<Child>,
}

/// A running cluster.
#[derive(Debug)]
pub struct Cluster {
    dir: tempfile::TempDir,
    nodes: Vec<Node>,
}

/// A port free on loopback now, drawn below the kernel's range of ephemeral ports (32768 and
/// up on Linux), so that no client connection of a test running beside is given it before the
/// node binds it.
fn free_port() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    for _ in 0..1000 {
        let draw = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        let port = 20_000 + u16::try_from(draw % 12_000).unwrap_or(0);
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// How many times a cluster is started on fresh ports before giving up.
const START_ATTEMPTS: usize = 3;

impl Cluster {
    /// Starts `n` nodes clustered together, and waits until each takes connections; a node
    /// that does not (its port taken meanwhile, say) has the cluster started again on other
    /// ports.
    ///
    /// # Panics
    /// When `nats-server` is not installed (saying how to install it) or a node does not
    /// listen within 10 s in any of the attempts (with its log).
    #[must_use]
    pub fn start(n: usize) -> Cluster {
        let found = Command::new("nats-server")
            .arg("--version")
            .stdout(Stdio::null())
            .status();
        assert!(found.is_ok_and(|s| s.success()), "{INSTALL}");
        let mut why = String::new();
        for attempt in 1..=START_ATTEMPTS {
            let mut cluster = Cluster::configure(n);
            for i in 0..n {
                cluster.spawn(i);
            }
            match (0..n).try_for_each(|i| cluster.ready(i)) {
                Ok(()) => return cluster,
                Err(e) => {
                    eprintln!("local cluster, attempt {attempt} of {START_ATTEMPTS}: {e}");
                    why = e;
                }
            }
        }
        panic!("{why}");
    }

    /// The nodes' ports, configuration files and stores, in a new temporary directory.
    fn configure(n: usize) -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
        let mut nodes = Vec::new();
        for (i, (client, cluster)) in ports.iter().enumerate() {
            let routes: Vec<String> = ports
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, (_, c))| format!("\"nats-route://127.0.0.1:{c}\""))
                .collect();
            let store = dir.path().join(format!("n{i}"));
            let config = dir.path().join(format!("n{i}.conf"));
            std::fs::write(
                &config,
                format!(
                    "server_name: n{i}\nlisten: \"127.0.0.1:{client}\"\n\
                     jetstream {{ store_dir: \"{}\", max_memory_store: 64MB, max_file_store: 2GB }}\n\
                     cluster {{ name: journal-test, listen: \"127.0.0.1:{cluster}\", routes: [{}] }}\n",
                    store.display(),
                    routes.join(", ")
                ),
            )
            .expect("write a node's configuration");
            nodes.push(Node {
                client_port: *client,
                config,
                child: None,
            });
        }
        Cluster { dir, nodes }
    }

    fn spawn(&mut self, i: usize) {
        let Some(node) = self.nodes.get_mut(i) else {
            return;
        };
        let log = std::fs::File::create(node.config.with_extension("log")).expect("log file");
        let child = Command::new("nats-server")
            .arg("-c")
            .arg(&node.config)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect(INSTALL);
        node.child = Some(child);
    }

    fn wait_ready(&mut self, i: usize) {
        if let Err(why) = self.ready(i) {
            panic!("{why}");
        }
    }

    /// Waits until node `i` takes connections; why not, with its log, when it exits first or
    /// does not within 10 s.
    fn ready(&mut self, i: usize) -> Result<(), String> {
        let Some(node) = self.nodes.get_mut(i) else {
            return Ok(());
        };
        for _ in 0..200 {
            if TcpStream::connect(("127.0.0.1", node.client_port)).is_ok() {
                return Ok(());
            }
            let exited = node
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let log = std::fs::read_to_string(node.config.with_extension("log")).unwrap_or_default();
        let tail: String = log.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
        Err(format!(
            "nats-server node {i} did not listen on port {} within 10 s; its log ends: {tail}",
            node.client_port
        ))
    }

    /// Every node's client URL, separated by commas.
    #[must_use]
    pub fn url(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("nats://127.0.0.1:{}", n.client_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Kills node `i` with SIGKILL.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.nodes.get_mut(i).and_then(|n| n.child.take()) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts node `i` again (on its ports, with its store) and waits for it.
    ///
    /// # Panics
    /// As [`Cluster::start`].
    pub fn restart(&mut self, i: usize) {
        self.spawn(i);
        self.wait_ready(i);
    }

    /// Where the nodes keep their files.
    #[must_use]
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
    }
}
