//! Telling the kernel what changed: refresh diffs turned into FUSE notifications, sent from a
//! thread of its own, never from a request handler and never while holding a lock that handlers
//! take (a notification can wait on a request in progress, hence deadlocks elsewhere).
//!
//! Per diff, for what the kernel holds only:
//! - each inode that left the tree, children before their directory: `delete(parent, ino, name)`
//!   (its link count drops to 0 and inotify watchers on the mount see it deleted), or
//!   `inval_entry` where the kernel refuses that (a directory in use). Over [`MAX_PER_DIR`] such
//!   entries in one directory, the directory's own entry is invalidated instead, which drops
//!   everything cached below it;
//! - each directory whose entries or attributes changed: `inval_inode(dir)`, which drops its
//!   cached listing and attributes;
//! - never a file's pages: the bytes behind an inode never change.
//!
//! Then the diff's generation is marked applied (the root's `user.tensormount.refresh_generation`).

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};

use fuser::{INodeNo, Notifier};
use log::debug;

use crate::namespace::{Diff, Ino, Namespace, ROOT, Removed};

/// Where the kernel's cache notifications are sent: the FUSE session's notifier. Named here so
/// that the refresh layer hands it on without knowing the FUSE library.
pub type Sink = Notifier;

/// Above this many changed names in one directory, its entry is invalidated as a whole.
const MAX_PER_DIR: usize = 4096;

#[derive(Debug)]
pub enum Notice {
    /// A refresh was published.
    Diff(Diff),
    /// A reply named an inode that had just left the tree: its name must not stay cached.
    Stale(Removed),
    /// Files whose bytes are refused from now on (`-o verify` found them wrong): the kernel must
    /// not serve them from its cache.
    Dropped(Vec<Ino>),
}

/// The way to the invalidator thread (cheap to clone), made before it starts.
#[derive(Debug, Clone)]
pub struct Invalidator {
    tx: Sender<Notice>,
    /// Set once unmounting starts: a notification then could wait forever on a dying connection.
    disarmed: Arc<AtomicBool>,
}

impl Invalidator {
    /// The invalidator's handle, and the queue its thread will read.
    pub fn new() -> (Invalidator, Receiver<Notice>) {
        let (tx, rx) = mpsc::channel();
        let handle = Invalidator {
            tx,
            disarmed: Arc::default(),
        };
        (handle, rx)
    }

    /// Queues a notice; a thread that is gone (or never started) drops it.
    pub fn send(&self, notice: Notice) {
        let _ = self.tx.send(notice);
    }

    /// Stops all notifications (at unmount).
    pub fn disarm(&self) {
        self.disarmed.store(true, Ordering::SeqCst);
    }

    /// Starts the invalidator thread, sending through `notifier` what `rx` receives.
    pub fn start(
        &self,
        notifier: Notifier,
        ns: Arc<Namespace>,
        rx: Receiver<Notice>,
    ) -> io::Result<()> {
        let disarmed = self.disarmed.clone();
        std::thread::Builder::new()
            .name("invalidate".into())
            .spawn(move || {
                for notice in rx {
                    if disarmed.load(Ordering::SeqCst) {
                        continue;
                    }
                    match notice {
                        Notice::Diff(diff) => {
                            send_diff(&notifier, &ns, &diff, &disarmed);
                            ns.set_applied(diff.generation);
                        }
                        Notice::Stale(r) => delete(&notifier, &r, &disarmed),
                        Notice::Dropped(inos) => {
                            for ino in inos.into_iter().filter(|&i| ns.held(i)) {
                                check(notifier.inval_inode(INodeNo(ino), 0, 0), &disarmed);
                            }
                        }
                    }
                }
            })?;
        Ok(())
    }
}

fn send_diff(notifier: &Notifier, ns: &Namespace, diff: &Diff, disarmed: &AtomicBool) {
    // The detached inodes the kernel holds are kept (with their names) until it forgets them.
    let mut held: Vec<Removed> = Vec::new();
    for &ino in diff.detached.iter().rev() {
        if let Some(node) = ns.get(ino).filter(|_| ns.held(ino)) {
            held.push(Removed {
                parent: node.parent,
                name: node.name,
                ino,
            });
        }
    }
    let mut per_dir: HashMap<Ino, usize> = HashMap::new();
    for r in &held {
        *per_dir.entry(r.parent).or_default() += 1;
    }
    let snapshot = ns.current();
    let mut whole: HashSet<Ino> = HashSet::new();
    for (&dir, &n) in &per_dir {
        if n <= MAX_PER_DIR {
            continue;
        }
        // Too many to name one by one: drop the directory's entry and all below it instead (a
        // directory that left the tree too is dropped by its own entry).
        whole.insert(dir);
        if let Some(node) = snapshot.node(dir)
            && dir != ROOT
        {
            debug!("{n} entries changed in inode {dir}: invalidating it whole");
            check(notifier.inval_inode(INodeNo(dir), 0, 0), disarmed);
            check(
                notifier.inval_entry(INodeNo(node.parent), OsStr::from_bytes(&node.name)),
                disarmed,
            );
        }
    }
    drop(snapshot);
    for r in held.iter().filter(|r| !whole.contains(&r.parent)) {
        delete(notifier, r, disarmed);
    }
    for &dir in &diff.changed_dirs {
        if dir == ROOT || ns.held(dir) {
            check(notifier.inval_inode(INodeNo(dir), 0, 0), disarmed);
        }
    }
}

/// The name `r.name` in `r.parent` no longer leads to `r.ino`.
fn delete(notifier: &Notifier, r: &Removed, disarmed: &AtomicBool) {
    let name = OsStr::from_bytes(&r.name);
    match notifier.delete(INodeNo(r.parent), INodeNo(r.ino), name) {
        // A directory still in use (ENOTEMPTY) or a mount point (EBUSY): at least make the name
        // be looked up again.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTEMPTY | libc::EBUSY)) => {
            check(notifier.inval_entry(INodeNo(r.parent), name), disarmed)
        }
        other => check(other, disarmed),
    }
}

/// Disarms on a connection that is gone; other failures only mean the kernel had nothing cached.
fn check(result: io::Result<()>, disarmed: &AtomicBool) {
    if let Err(e) = result {
        if matches!(
            e.raw_os_error(),
            Some(libc::ENODEV | libc::ENOTCONN | libc::EBADF)
        ) {
            disarmed.store(true, Ordering::SeqCst);
        } else {
            debug!("notification refused: {e}");
        }
    }
}
