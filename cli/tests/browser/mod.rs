//! The browser tests' view of `journal_testkit::browser`: the same driver (headless Chromium
//! over the DevTools protocol), each step panicking with the browser's message when it fails,
//! and screenshots kept in `target/screenshots/`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use journal_testkit::browser;
use serde_json::Value;

/// A browser with one page; killed when dropped.
pub struct Browser(browser::Browser);

/// Where screenshots go: `target/screenshots/`.
pub fn screenshots_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/screenshots")
}

fn or_panic<T>(step: &str, result: journal_testkit::Res<T>) -> T {
    result.unwrap_or_else(|e| panic!("{step}: {e}"))
}

impl Browser {
    pub fn launch(width: u32, height: u32) -> Browser {
        Browser(or_panic(
            "launching chromium",
            browser::Browser::launch(width, height),
        ))
    }

    /// Every event the browser sent, in order.
    pub fn events(&self) -> &[Value] {
        &self.0.events
    }

    pub fn call(&mut self, method: &str, params: Value) -> Value {
        or_panic(method, self.0.call(method, params))
    }

    pub fn navigate(&mut self, url: &str) {
        or_panic(url, self.0.navigate(url));
    }

    pub fn wait_for_event(&mut self, method: &str, seen: usize) {
        or_panic(method, self.0.wait_for_event(method, seen));
    }

    pub fn eval(&mut self, expression: &str) -> Value {
        or_panic(expression, self.0.eval(expression))
    }

    pub fn wait_until(&mut self, expression: &str, limit: Duration) -> Duration {
        or_panic(expression, self.0.wait_until(expression, limit))
    }

    pub fn click(&mut self, selector: &str) {
        or_panic(selector, self.0.click(selector));
    }

    /// Saves a PNG of the page as `target/screenshots/{name}.png`.
    pub fn screenshot(&mut self, name: &str) -> PathBuf {
        or_panic(name, self.0.screenshot(&screenshots_dir(), name))
    }

    pub fn requests(&self) -> Vec<String> {
        self.0.requests()
    }
}
