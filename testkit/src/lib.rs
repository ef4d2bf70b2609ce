//! What the workspace's tests and benchmarks share. [`browser`]: a headless Chromium driven
//! over the DevTools protocol, which the review app's browser tests (`cli/tests/cli_serve_app.rs`)
//! and the `app` workload of `compare` both use. [`disk`]: a journal's directory read by the
//! test itself (files holding given bytes, a data key unwrapped), for the redaction tests of the
//! engine and the CLI.

pub mod browser;
pub mod disk;

/// The error of every helper here: what failed, as text a test prints.
pub type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;
