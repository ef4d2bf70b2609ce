//! Signals: a thread's state behind a mutex, with a condition variable that says it changed.
//! The filler and the syncer share theirs with the writer this way.

use std::sync::{Condvar, Mutex, MutexGuard};

/// A state behind a mutex, and the condition variable its changes are signalled on.
#[derive(Debug, Default)]
pub(crate) struct Signal<T> {
    state: Mutex<T>,
    changed: Condvar,
}

impl<T> Signal<T> {
    /// Locks the state. A panic while it was held leaves it as its last statement did: each
    /// user's state is a few fields, consistent after every statement, so it is used on.
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Releases `guard` until the state is signalled changed (or spuriously), then locks again.
    pub(crate) fn wait<'a>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.changed.wait(guard).unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes every thread waiting for a change.
    pub(crate) fn changed(&self) {
        self.changed.notify_all();
    }
}
