//! Failed requests, logged: a client sees only an errno, so each failed request is logged once,
//! with the file (its path in the mount), the operation, the errno and the cause, as
//! `tensormount: model.tensors/w: read of 131072 bytes at 0 failed with EIO: /src/model.safetensors:
//! read failed: Input/output error`. Errors an operator must see (EIO, ESTALE) are warnings;
//! the expected ones (a lookup of a name that is not there, an absent xattr) are debug. At most
//! [`BURST`] lines of each level are written per [`WINDOW`], so a client retrying in a loop cannot
//! flood the log, and debug lines never crowd out warnings; the next line after a window in which
//! some were left out says how many.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use log::{Level, log, log_enabled};

use crate::fs::FsError;
use crate::namespace::{Ino, Namespace};

/// The window of the rate limit, and how many lines it lets through.
const WINDOW: Duration = Duration::from_secs(10);
const BURST: u32 = 10;

/// A failed request's operation, as its log line names it.
#[derive(Debug, Clone, Copy)]
pub enum Op<'a> {
    Lookup(&'a [u8]),
    Getattr,
    Readlink,
    Open,
    Read { offset: u64, size: u32 },
    Opendir,
    Readdir,
    Getxattr(&'a [u8]),
    Listxattr,
    Lseek,
}

impl fmt::Display for Op<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Lookup(name) => write!(f, "lookup of {:?}", String::from_utf8_lossy(name)),
            Op::Getattr => f.write_str("getattr"),
            Op::Readlink => f.write_str("readlink"),
            Op::Open => f.write_str("open"),
            Op::Read { offset, size } => write!(f, "read of {size} bytes at {offset}"),
            Op::Opendir => f.write_str("opendir"),
            Op::Readdir => f.write_str("readdir"),
            Op::Getxattr(name) => write!(f, "getxattr {}", String::from_utf8_lossy(name)),
            Op::Listxattr => f.write_str("listxattr"),
            Op::Lseek => f.write_str("lseek"),
        }
    }
}

/// The log of failed requests of one mount.
pub struct Failures {
    ns: Arc<Namespace>,
    /// The rate limits of warnings and of debug lines.
    warnings: Mutex<Limit>,
    debug: Mutex<Limit>,
}

/// The rate limit's state: when the window began, what it let through, what it left out.
#[derive(Debug)]
struct Limit {
    since: Instant,
    written: u32,
    left_out: u64,
}

impl Failures {
    pub fn new(ns: Arc<Namespace>) -> Failures {
        let limit = || {
            Mutex::new(Limit {
                since: Instant::now(),
                written: 0,
                left_out: 0,
            })
        };
        Failures {
            ns,
            warnings: limit(),
            debug: limit(),
        }
    }

    /// Logs that `op` on `ino` failed with `e`, answered as `errno` (its name).
    pub fn report(&self, op: Op<'_>, ino: Ino, e: &FsError, errno: &str) {
        let level = level(e);
        if !log_enabled!(level) {
            return;
        }
        let limit = match level {
            Level::Warn => &self.warnings,
            _ => &self.debug,
        };
        let admitted = limit
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .admit(Instant::now());
        let Some(left_out) = admitted else {
            return;
        };
        if left_out > 0 {
            log!(
                level,
                "{left_out} more failed requests were not logged (at most {BURST} lines per {WINDOW:?})"
            );
        }
        let path = self.ns.path(ino);
        match e {
            FsError::Stale(cause) | FsError::Io(cause) => {
                log!(level, "{path}: {op} failed with {errno}: {cause}")
            }
            _ => log!(level, "{path}: {op} failed with {errno}"),
        }
    }
}

impl Limit {
    /// Whether a line may be written now: `Some` of how many were left out before it (reported
    /// with the first line of a new window), `None` to leave it out.
    fn admit(&mut self, now: Instant) -> Option<u64> {
        if now.duration_since(self.since) >= WINDOW {
            self.since = now;
            self.written = 0;
        }
        if self.written >= BURST {
            self.left_out += 1;
            return None;
        }
        self.written += 1;
        Some(std::mem::take(&mut self.left_out))
    }
}

/// The level a failure is logged at: a warning where the source or the tree is at fault, debug
/// where the answer is an ordinary one (no such name or attribute, a read-only tree).
fn level(e: &FsError) -> Level {
    match e {
        FsError::Io(_) | FsError::Stale(_) => Level::Warn,
        FsError::NotFound
        | FsError::NotDir
        | FsError::IsDir
        | FsError::ReadOnly
        | FsError::NotLink
        | FsError::OtherNamespace
        | FsError::NoAttribute
        | FsError::PastEnd => Level::Debug,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_lets_a_burst_through_then_reports_what_it_left_out() {
        let t0 = Instant::now();
        let mut l = Limit {
            since: t0,
            written: 0,
            left_out: 0,
        };
        for _ in 0..BURST {
            assert_eq!(l.admit(t0), Some(0));
        }
        for _ in 0..5 {
            assert_eq!(l.admit(t0 + Duration::from_secs(1)), None);
        }
        // The next window's first line carries the count, once.
        assert_eq!(l.admit(t0 + WINDOW), Some(5));
        assert_eq!(l.admit(t0 + WINDOW), Some(0));
    }

    #[test]
    fn source_and_tree_failures_are_warnings_expected_answers_debug() {
        use crate::fs::Cause;
        assert_eq!(level(&FsError::Io(Cause::Busy)), Level::Warn);
        assert_eq!(level(&FsError::Stale(Cause::LeftTree)), Level::Warn);
        assert_eq!(level(&FsError::NotFound), Level::Debug);
        assert_eq!(level(&FsError::NoAttribute), Level::Debug);
    }
}
