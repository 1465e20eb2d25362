//! A thin inotify(7) wrapper: one descriptor, one watch per directory, events read in batches.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use crate::base::sys;

/// What a directory watch reports: entries created, deleted, moved in or out, written, or changed
/// in attributes, and the directory itself deleted or moved.
const DIR_EVENTS: u32 = libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_CLOSE_WRITE
    | libc::IN_MODIFY
    | libc::IN_ATTRIB
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF
    | libc::IN_ONLYDIR;

/// The size of `struct inotify_event` before its name, and where its fields are in it: `wd`,
/// `mask`, then (after `cookie`) `len`, the length of the name that follows.
const HEADER: usize = 16;
const WD: usize = 0;
const MASK: usize = 4;
const NAME_LEN: usize = 12;

/// Bytes of events read at once: hundreds of events (each 16 bytes plus its name).
const READ_BUFFER: usize = 64 << 10;

#[derive(Debug)]
pub struct Inotify {
    fd: File,
}

/// One event.
#[derive(Debug, Clone)]
pub struct Event {
    /// The watch it came from; -1 for a queue overflow.
    pub wd: i32,
    pub mask: u32,
}

impl Event {
    /// Events were lost: everything must be looked at again.
    pub fn overflow(&self) -> bool {
        self.mask & libc::IN_Q_OVERFLOW != 0
    }
}

impl Inotify {
    pub fn new() -> io::Result<Inotify> {
        Ok(Inotify {
            fd: sys::inotify_init()?,
        })
    }

    /// Watches the directory `dir` (links followed). The same directory watched twice gives the
    /// same watch descriptor.
    pub fn add(&self, dir: &Path) -> io::Result<i32> {
        sys::inotify_add_watch(&self.fd, dir, DIR_EVENTS)
    }

    pub fn remove(&self, wd: i32) {
        sys::inotify_rm_watch(&self.fd, wd);
    }

    /// Waits for events and returns those queued.
    pub fn read(&self) -> io::Result<Vec<Event>> {
        let mut buf = vec![0u8; READ_BUFFER];
        let n = loop {
            match (&self.fd).read(&mut buf) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        };
        Ok(parse(&buf[..n]))
    }
}

/// Splits a buffer of `struct inotify_event`s (native endianness).
fn parse(mut buf: &[u8]) -> Vec<Event> {
    let word = |b: &[u8], at: usize| {
        b.get(at..at + 4)
            .and_then(|w| w.try_into().ok())
            .map_or(0, u32::from_ne_bytes)
    };
    let mut events = Vec::new();
    while buf.len() >= HEADER {
        let len = word(buf, NAME_LEN) as usize;
        events.push(Event {
            wd: word(buf, WD) as i32,
            mask: word(buf, MASK),
        });
        buf = buf.get(HEADER + len..).unwrap_or_default();
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_of_a_real_directory() {
        let dir = std::env::temp_dir().join(format!("tm-inotify-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let ino = Inotify::new().unwrap();
        let wd = ino.add(&dir).unwrap();
        assert_eq!(ino.add(&dir).unwrap(), wd, "one watch per directory");
        std::fs::write(dir.join("a-rather-long-name.safetensors"), b"x").unwrap();
        std::fs::rename(dir.join("a-rather-long-name.safetensors"), dir.join("b")).unwrap();
        let mut masks = Vec::new();
        while !masks.iter().any(|m| m & libc::IN_MOVED_TO != 0) {
            for e in ino.read().unwrap() {
                assert_eq!(e.wd, wd);
                masks.push(e.mask);
            }
        }
        assert!(masks[0] & libc::IN_CREATE != 0, "{masks:x?}");
        assert!(masks.iter().any(|m| m & libc::IN_CLOSE_WRITE != 0));
        std::fs::remove_dir_all(&dir).unwrap();
        let mut gone = false;
        while !gone {
            gone = ino
                .read()
                .unwrap()
                .iter()
                .any(|e| e.mask & libc::IN_IGNORED != 0);
        }
        assert!(ino.add(Path::new("/nonexistent/tm")).is_err());
    }
}
