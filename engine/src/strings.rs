//! Strings kept back to back in one buffer, each named by its [`Span`]: the stream keys, task
//! and run ids a write request carries, and the ids of an index batch. One allocation for a
//! whole request or batch, where owned strings took up to three per event on the caller's path
//! and were freed, one by one, by the indexer's thread (glibc's allocator takes its slow path
//! for every block another thread frees).
//!
//! Invariant: a span is only ever read from the buffer whose `push` made it, and only while
//! that buffer still holds it (`truncate` and `clear` drop the strings after a point, and their
//! holders drop the spans with them). Reading a span breaks no memory safety either way: it
//! gives the empty string, and debug builds assert.

/// Where one string lies in its [`Strings`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    start: usize,
    end: usize,
}

impl Span {
    /// Where the string starts in its buffer: the point to truncate at to drop it and every
    /// string pushed after it.
    pub(crate) fn start(self) -> usize {
        self.start
    }
}

/// Strings back to back in one buffer.
#[derive(Clone, Debug, Default)]
pub(crate) struct Strings {
    text: String,
}

impl Strings {
    /// Adds `s` and names where it lies.
    pub(crate) fn push(&mut self, s: &str) -> Span {
        self.push_joined(&[s])
    }

    /// Adds `parts`, joined with nothing between them, as one string.
    pub(crate) fn push_joined(&mut self, parts: &[&str]) -> Span {
        let start = self.text.len();
        for part in parts {
            self.text.push_str(part);
        }
        Span {
            start,
            end: self.text.len(),
        }
    }

    /// The string `span` names.
    pub(crate) fn get(&self, span: Span) -> &str {
        let s = self.text.get(span.start..span.end);
        debug_assert!(
            s.is_some(),
            "{span:?} read from a buffer that does not hold it"
        );
        s.unwrap_or_default()
    }

    /// Room for `bytes` more bytes of strings.
    pub(crate) fn reserve(&mut self, bytes: usize) {
        self.text.reserve(bytes);
    }

    /// The bytes held, all strings together.
    pub(crate) fn len(&self) -> usize {
        self.text.len()
    }

    /// Drops every string that starts at `start` or after it.
    pub(crate) fn truncate(&mut self, start: usize) {
        self.text.truncate(start);
    }

    pub(crate) fn clear(&mut self) {
        self.text.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_give_back_what_was_pushed_until_truncated_away() {
        let mut strings = Strings::default();
        let a = strings.push("session:");
        let b = strings.push_joined(&["session:", "sess-é"]);
        let empty = strings.push("");
        assert_eq!(
            (strings.get(a), strings.get(b), strings.get(empty)),
            ("session:", "session:sess-é", "")
        );
        let len = |span| strings.get(span).len();
        assert_eq!((len(a), len(b), len(empty)), (8, 15, 0));
        strings.truncate(b.start());
        assert_eq!(strings.len(), 8);
        let c = strings.push("task:t1");
        assert_eq!((strings.get(a), strings.get(c)), ("session:", "task:t1"));
        assert_eq!(c.start(), b.start());
        strings.clear();
        assert_eq!(strings.len(), 0);
    }
}
