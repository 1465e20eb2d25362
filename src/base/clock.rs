//! The monotonic time the daemon's timers read: how long a file has been settling, how long a
//! source has been idle, when the lease thread last woke. The system's clock in the daemon; in
//! tests, a clock that moves only when told, so that waiting out a settle time takes no time.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct Clock {
    start: Instant,
    /// For a manual clock: the nanoseconds it has been moved since `start`.
    manual: Option<Arc<AtomicU64>>,
}

impl Clock {
    /// The system's monotonic clock.
    pub fn system() -> Clock {
        Clock {
            start: Instant::now(),
            manual: None,
        }
    }

    /// A clock that stands still until [`Clock::advance`] moves it.
    pub fn manual() -> Clock {
        Clock {
            start: Instant::now(),
            manual: Some(Arc::default()),
        }
    }

    pub fn now(&self) -> Instant {
        match &self.manual {
            Some(moved) => self.start + Duration::from_nanos(moved.load(Ordering::SeqCst)),
            None => Instant::now(),
        }
    }

    /// Milliseconds since the clock was made.
    pub fn ms(&self) -> u64 {
        self.now().duration_since(self.start).as_millis() as u64
    }

    /// Moves a manual clock forward by `by` (the system clock moves by itself: nothing happens).
    pub fn advance(&self, by: Duration) {
        if let Some(moved) = &self.manual {
            moved.fetch_add(by.as_nanos() as u64, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let c = Clock::manual();
        let t = c.now();
        assert_eq!(c.now(), t);
        assert_eq!(c.ms(), 0);
        c.advance(Duration::from_millis(1500));
        assert_eq!(c.now(), t + Duration::from_millis(1500));
        assert_eq!(c.ms(), 1500);
        let copy = c.clone();
        copy.advance(Duration::from_secs(1));
        assert_eq!(c.ms(), 2500, "clones share the time");
    }
}
