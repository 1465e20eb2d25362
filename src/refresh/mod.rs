//! Following SOURCE while mounted: the refresh thread finds what may have changed (inotify events,
//! polling, SIGUSR1, requests that found the tree out of date), has the namespace's
//! [`Writer`] rescan those directories, publishes the new snapshot, and hands the diff to the
//! invalidator, which updates the kernel's caches from a thread of its own.
//!
//! Only this thread writes the namespace. Request handlers that need a directory read again ask
//! it and wait for the answer; it never waits on them.

pub(crate) mod inotify;
pub(crate) mod invalidate;

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use log::{debug, info, warn};

use crate::namespace::{Diff, Ino, Namespace, Writer};
use crate::refresh::inotify::{Event, Inotify};
use crate::refresh::invalidate::{Invalidator, Notice, Sink};
use crate::source::Sources;

/// After an event, a directory is read once it has been quiet this long...
const QUIET: Duration = Duration::from_millis(100);
/// ... or this long after its first event, whichever comes first.
const MAX_DELAY: Duration = Duration::from_secs(1);

/// How long a request waits for the refresh thread to read a directory again...
const ASK_LIMIT: Duration = Duration::from_secs(10);
/// ... as long as the thread's calls to the source keep returning, at least one in this long: a
/// stalled backend must not hold the requests that the tree as it is can answer.
const ASK_PATIENCE: Duration = Duration::from_millis(300);

/// `-o refresh_interval=`'s default: a polled directory is read again this often (a `stat` of
/// the directory and of each entry, on a network filesystem a round trip each).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(30);

/// How changes are found (`-o refresh=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// inotify where the source is local, polling where it is not (or where watches run out).
    #[default]
    Auto,
    Inotify,
    Poll,
    /// Never: the tree built at mount stays.
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    pub mode: Mode,
    /// The polling period.
    pub interval: Duration,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            mode: Mode::Auto,
            interval: DEFAULT_INTERVAL,
        }
    }
}

/// How the refresh thread is reached, by request handlers and the signal thread.
#[derive(Debug, Clone)]
pub struct Handle {
    tx: Sender<Msg>,
    /// What the watching ended up as ([`Handle::mode`]).
    mode: Arc<AtomicU8>,
    /// Set when a request gave up waiting for the refresh thread, cleared when the thread is back
    /// at its loop: meanwhile requests do not wait at all, and one [`Msg::Ping`] at most is queued
    /// to have it cleared.
    stuck: Arc<AtomicBool>,
    pinged: Arc<AtomicBool>,
    /// Whose calls to the source count as progress.
    sources: Sources,
}

#[derive(Debug)]
enum Msg {
    Events(Vec<Event>),
    /// Read every directory again (SIGUSR1).
    RescanAll,
    /// Read the directory again if it may have changed; answer once published, with whether
    /// anything changed.
    Revalidate(Ino, Sender<bool>),
    /// Read the directory again; answer once published.
    Rescan(Ino, Sender<bool>),
    /// Nothing: wakes the thread, which then clears [`Handle::stuck`].
    Ping,
}

const WATCHING_NONE: u8 = 0;
const WATCHING_INOTIFY: u8 = 1;
const WATCHING_POLL: u8 = 2;
const WATCHING_BOTH: u8 = 3;

/// The channel to the refresh thread.
fn channel(sources: Sources) -> (Handle, Receiver<Msg>) {
    let (tx, rx) = mpsc::channel();
    let handle = Handle {
        tx,
        mode: Arc::new(AtomicU8::new(WATCHING_NONE)),
        stuck: Arc::new(AtomicBool::new(false)),
        pinged: Arc::new(AtomicBool::new(false)),
        sources,
    };
    (handle, rx)
}

impl Handle {
    /// Reads every directory of SOURCE again.
    pub fn rescan_all(&self) {
        let _ = self.tx.send(Msg::RescanAll);
    }

    /// If the directory `ino` of SOURCE may have changed, reads it again; returns once any change
    /// is published, with whether the tree changed.
    pub fn revalidate(&self, ino: Ino) -> bool {
        self.ask(|tx| Msg::Revalidate(ino, tx))
    }

    /// Reads the directory `ino` of SOURCE again; returns once any change is published.
    pub fn rescan(&self, ino: Ino) {
        self.ask(|tx| Msg::Rescan(ino, tx));
    }

    /// Asks the refresh thread and waits for its answer, at most [`ASK_LIMIT`], and no longer
    /// than [`ASK_PATIENCE`] without progress: a request must not hang on a source that stopped
    /// answering (the request then goes on with the tree as it is). Once a request has given up,
    /// the next ones neither ask nor wait until the thread answers again. No answer, or no
    /// refresh thread, reads as "nothing changed".
    fn ask(&self, msg: impl FnOnce(Sender<bool>) -> Msg) -> bool {
        if self.stuck.load(Ordering::Relaxed) {
            if !self.pinged.swap(true, Ordering::Relaxed) {
                let _ = self.tx.send(Msg::Ping);
            }
            return false;
        }
        let (tx, rx) = mpsc::channel();
        if self.tx.send(msg(tx)).is_err() {
            return false;
        }
        let started = Instant::now();
        let mut seen = self.sources.progress();
        while started.elapsed() < ASK_LIMIT {
            match rx.recv_timeout(ASK_PATIENCE) {
                Ok(changed) => return changed,
                Err(RecvTimeoutError::Disconnected) => return false,
                Err(RecvTimeoutError::Timeout) => {
                    let now = self.sources.progress();
                    if now == seen {
                        debug!("the source has not answered for {ASK_PATIENCE:?}: not waiting");
                        self.stuck.store(true, Ordering::Relaxed);
                        return false;
                    }
                    seen = now;
                }
            }
        }
        false
    }

    /// `inotify`, `poll`, or `inotify+poll` where some directories could not be watched.
    pub fn mode(&self) -> &'static str {
        match self.mode.load(Ordering::Relaxed) {
            WATCHING_INOTIFY => "inotify",
            WATCHING_POLL => "poll",
            WATCHING_BOTH => "inotify+poll",
            _ => "starting",
        }
    }
}

/// The inotify instance for `settings`, if they use one; made before the daemon forks, with the
/// rest of what following SOURCE needs (see `Follow`).
pub fn inotify_for(settings: &Settings) -> Option<io::Result<Inotify>> {
    matches!(settings.mode, Mode::Auto | Mode::Inotify).then(Inotify::new)
}

/// What following SOURCE needs once mounted: made before the daemon forks (no thread exists
/// then), started after the mount.
pub struct Follow {
    writer: Writer,
    ns: Arc<Namespace>,
    settings: Settings,
    inotify: Option<io::Result<Inotify>>,
    handle: Handle,
    rx: Receiver<Msg>,
    invalidator: Invalidator,
    notices: Receiver<Notice>,
}

impl Follow {
    /// Returns also what the request handlers use: the handle of the refresh thread and the
    /// invalidator.
    pub fn new(
        writer: Writer,
        ns: Arc<Namespace>,
        sources: Sources,
        (settings, inotify): (Settings, Option<io::Result<Inotify>>),
    ) -> (Follow, Handle, Invalidator) {
        let (handle, rx) = channel(sources);
        let (invalidator, notices) = Invalidator::new();
        let for_fs = (handle.clone(), invalidator.clone());
        let follow = Follow {
            writer,
            ns,
            settings,
            inotify,
            handle,
            rx,
            invalidator,
            notices,
        };
        (follow, for_fs.0, for_fs.1)
    }

    /// Starts the invalidator (sending through `notifier`) and the refresh thread. The mount's
    /// own device `own_dev` is never entered. Returns the handle for SIGUSR1 and the invalidator,
    /// to disarm at unmount.
    pub fn start(self, notifier: Sink, own_dev: Option<u64>) -> io::Result<(Handle, Invalidator)> {
        self.invalidator
            .start(notifier, self.ns.clone(), self.notices)?;
        let handle = self.handle.clone();
        start(
            self.writer,
            self.ns,
            (self.handle, self.rx),
            (self.settings, self.inotify),
            self.invalidator.clone(),
            own_dev,
        )?;
        Ok((handle, self.invalidator))
    }
}

/// Starts the refresh thread (and, for inotify, the thread that reads events).
fn start(
    mut writer: Writer,
    ns: Arc<Namespace>,
    (handle, rx): (Handle, Receiver<Msg>),
    (settings, inotify): (Settings, Option<io::Result<Inotify>>),
    invalidate: Invalidator,
    own_dev: Option<u64>,
) -> io::Result<()> {
    if let Some(dev) = own_dev {
        writer.skip_device(dev);
    }
    let inotify = match inotify {
        Some(Ok(i)) => Some(Arc::new(i)),
        Some(Err(e)) => {
            warn!(
                "inotify unavailable ({e}; see fs.inotify.max_user_instances): SOURCE is polled \
                 every {:?}",
                settings.interval
            );
            None
        }
        None => None,
    };
    if let Some(inotify) = &inotify {
        let (inotify, tx) = (inotify.clone(), handle.tx.clone());
        std::thread::Builder::new()
            .name("inotify".into())
            .spawn(move || {
                while let Ok(events) = inotify.read() {
                    if tx.send(Msg::Events(events)).is_err() {
                        return;
                    }
                }
            })?;
    }
    let mut r = Refresher {
        writer,
        ns,
        settings,
        invalidate,
        watched: Watched {
            inotify,
            watches: HashMap::new(),
            watch_of: HashMap::new(),
            polled: HashSet::new(),
            unwatched: HashSet::new(),
            warned_limit: false,
        },
        dirty: HashMap::new(),
        next_poll: Instant::now() + settings.interval,
        flags: Flags {
            mode: handle.mode.clone(),
            stuck: handle.stuck.clone(),
            pinged: handle.pinged.clone(),
        },
        warned_remote: false,
    };
    let snapshot = r.ns.current();
    for ino in r.writer.dirs(&snapshot) {
        r.watch(ino);
    }
    drop(snapshot);
    r.show_mode();
    std::thread::Builder::new()
        .name("refresh".into())
        .spawn(move || r.run(rx))?;
    Ok(())
}

struct Refresher {
    writer: Writer,
    ns: Arc<Namespace>,
    settings: Settings,
    invalidate: Invalidator,
    watched: Watched,
    /// Directories with events not yet acted on: first and last event.
    dirty: HashMap<Ino, (Instant, Instant)>,
    next_poll: Instant,
    flags: Flags,
    warned_remote: bool,
}

/// How each directory is followed: by an inotify watch, or polled.
struct Watched {
    inotify: Option<Arc<Inotify>>,
    /// Directories by watch (a directory reached through two links has one watch).
    watches: HashMap<i32, Vec<Ino>>,
    watch_of: HashMap<Ino, i32>,
    polled: HashSet<Ino>,
    /// Directories whose watch the kernel dropped, to watch again if they are still there.
    unwatched: HashSet<Ino>,
    /// Whether running out of watches has been logged.
    warned_limit: bool,
}

/// What the thread shares with the handle the filesystem holds: the mode it follows in, whether
/// it is stuck on the source, whether a ping is unanswered.
struct Flags {
    mode: Arc<AtomicU8>,
    stuck: Arc<AtomicBool>,
    pinged: Arc<AtomicBool>,
}

impl Refresher {
    fn run(mut self, rx: Receiver<Msg>) {
        // What changed between the build and the watches: looked at once, now.
        let mut everything = true;
        loop {
            self.due_work(std::mem::take(&mut everything));
            // Whatever it waited on has answered: requests may wait for this thread again.
            self.flags.stuck.store(false, Ordering::Relaxed);
            let timeout = self.next_wakeup().saturating_duration_since(Instant::now());
            match rx.recv_timeout(timeout) {
                Ok(Msg::Events(events)) => self.events(&events, &mut everything),
                Ok(Msg::RescanAll) => everything = true,
                Ok(Msg::Ping) => self.flags.pinged.store(false, Ordering::Relaxed),
                Ok(Msg::Revalidate(ino, done)) => {
                    let changed =
                        self.writer.may_have_changed(ino) && self.refresh(&[ino], "a lookup");
                    let _ = done.send(changed);
                }
                Ok(Msg::Rescan(ino, done)) => {
                    let changed = self.refresh(&[ino], "an open");
                    let _ = done.send(changed);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    /// Rescans what is due: everything (on request or overflow), the polled directories at each
    /// tick, directories whose events have settled, directories whose files have settled.
    fn due_work(&mut self, everything: bool) {
        let now = Instant::now();
        let mut due: HashSet<Ino> = HashSet::new();
        let poll = !self.watched.polled.is_empty() && now >= self.next_poll;
        if poll {
            self.next_poll = now + self.settings.interval;
        }
        self.dirty.retain(|&ino, &mut (first, last)| {
            let ready = now.duration_since(last) >= QUIET || now.duration_since(first) >= MAX_DELAY;
            if ready {
                due.insert(ino);
            }
            !ready
        });
        if let Some((t, ino)) = self.writer.deadline()
            && t <= now
        {
            due.insert(ino);
        }
        if !everything && !poll && due.is_empty() {
            return;
        }
        let snapshot = self.ns.current();
        let dirs: Vec<Ino> = if everything {
            self.writer.dirs(&snapshot)
        } else {
            self.writer
                .dirs(&snapshot)
                .into_iter()
                .filter(|d| due.contains(d) || (poll && self.watched.polled.contains(d)))
                .collect()
        };
        drop(snapshot);
        if !dirs.is_empty() {
            let why = if everything {
                "a full rescan"
            } else if poll {
                "polling"
            } else {
                "changes"
            };
            self.refresh(&dirs, why);
        }
    }

    fn next_wakeup(&self) -> Instant {
        let far = Instant::now() + Duration::from_secs(3600);
        let dirty = self
            .dirty
            .values()
            .map(|&(first, last)| (last + QUIET).min(first + MAX_DELAY))
            .min();
        let poll = (!self.watched.polled.is_empty()).then_some(self.next_poll);
        let settle = self.writer.deadline().map(|(t, _)| t);
        [dirty, poll, settle]
            .into_iter()
            .flatten()
            .fold(far, Instant::min)
    }

    fn events(&mut self, events: &[Event], everything: &mut bool) {
        let now = Instant::now();
        for e in events {
            if e.overflow() {
                debug!("inotify queue overflow: rescanning everything");
                *everything = true;
                continue;
            }
            let Some(inos) = self.watched.watches.get(&e.wd) else {
                continue;
            };
            for &ino in inos {
                self.dirty
                    .entry(ino)
                    .and_modify(|(_, last)| *last = now)
                    .or_insert((now, now));
            }
            if e.mask & libc::IN_IGNORED != 0 {
                // The directory is gone. Its rescan (marked above) finds it gone, or finds a new
                // directory at that path that reused its inode number, to be watched again.
                for ino in self.watched.watches.remove(&e.wd).unwrap_or_default() {
                    self.watched.watch_of.remove(&ino);
                    self.watched.unwatched.insert(ino);
                }
            }
        }
    }

    /// Rescans `dirs`, publishes the result, and queues its kernel notifications. Returns whether
    /// the tree changed.
    fn refresh(&mut self, dirs: &[Ino], why: &str) -> bool {
        let started = Instant::now();
        let old = self.ns.current();
        let (snapshot, diff) = self.writer.rescan(&old, dirs);
        drop(old);
        self.ns.publish(snapshot, &diff.detached);
        for &ino in &diff.gone_dirs {
            self.unwatch(ino);
        }
        for ino in diff
            .new_dirs
            .iter()
            .copied()
            .chain(std::mem::take(&mut self.watched.unwatched))
            .collect::<Vec<_>>()
        {
            self.watch(ino);
        }
        self.show_mode();
        log_diff(&diff, why, started.elapsed());
        let changed = !diff.is_empty();
        self.invalidate.send(Notice::Diff(diff));
        changed
    }

    /// Starts following the directory `ino` of SOURCE: a watch, else polling.
    fn watch(&mut self, ino: Ino) {
        if self.watched.watch_of.contains_key(&ino) || self.watched.polled.contains(&ino) {
            return;
        }
        let Some(path) = self.writer.watch_path(ino).map(Path::to_path_buf) else {
            return;
        };
        let inotify = match (&self.watched.inotify, self.settings.mode) {
            (Some(i), Mode::Inotify) => Some(i),
            (Some(i), Mode::Auto) if !is_remote(&path) => Some(i),
            (Some(_), _) => {
                if !self.warned_remote {
                    self.warned_remote = true;
                    info!(
                        "{}: on a network or FUSE filesystem, where inotify misses changes made \
                         elsewhere: polled every {:?}",
                        path.display(),
                        self.settings.interval
                    );
                }
                None
            }
            (None, _) => None,
        };
        match inotify.map(|i| i.add(&path)) {
            Some(Ok(wd)) => {
                self.watched.watches.entry(wd).or_default().push(ino);
                self.watched.watch_of.insert(ino, wd);
            }
            Some(Err(e)) => {
                if e.raw_os_error() == Some(libc::ENOSPC) && !self.watched.warned_limit {
                    self.watched.warned_limit = true;
                    warn!(
                        "inotify watch limit reached (fs.inotify.max_user_watches, or user.max_inotify_watches in a user namespace): directories \
                         not watched are polled every {:?}",
                        self.settings.interval
                    );
                } else {
                    debug!("{}: cannot watch ({e}): polled", path.display());
                }
                self.watched.polled.insert(ino);
            }
            None => {
                self.watched.polled.insert(ino);
            }
        }
    }

    fn unwatch(&mut self, ino: Ino) {
        self.watched.polled.remove(&ino);
        self.watched.unwatched.remove(&ino);
        self.dirty.remove(&ino);
        let Some(wd) = self.watched.watch_of.remove(&ino) else {
            return;
        };
        if let Some(inos) = self.watched.watches.get_mut(&wd) {
            inos.retain(|&i| i != ino);
            if inos.is_empty() {
                self.watched.watches.remove(&wd);
                if let Some(i) = &self.watched.inotify {
                    i.remove(wd);
                }
            }
        }
    }

    fn show_mode(&self) {
        let mode = match (
            self.watched.watch_of.is_empty(),
            self.watched.polled.is_empty(),
        ) {
            (false, true) => WATCHING_INOTIFY,
            (true, _) => WATCHING_POLL,
            (false, false) => WATCHING_BOTH,
        };
        self.flags.mode.store(mode, Ordering::Relaxed);
    }
}

fn log_diff(diff: &Diff, why: &str, took: Duration) {
    if diff.is_empty() {
        debug!(
            "refresh {} after {why}: nothing changed ({took:.1?})",
            diff.generation
        );
        return;
    }
    let removed = diff.removed.len() - diff.replaced;
    let shown: Vec<String> = diff
        .rescanned
        .iter()
        .take(3)
        .map(|p| p.display().to_string())
        .collect();
    let more = diff.rescanned.len().saturating_sub(shown.len());
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    info!(
        "refresh {} after {why}: rescanned {}{more}: {} added, {removed} removed, {} replaced \
         ({took:.1?})",
        diff.generation,
        shown.join(", "),
        diff.added,
        diff.replaced
    );
}

/// Whether the directory `path` is on a filesystem whose changes made elsewhere inotify never
/// reports.
fn is_remote(path: &Path) -> bool {
    std::fs::File::open(path).is_ok_and(|dir| crate::source::is_remote(&dir))
}

#[cfg(test)]
impl Handle {
    /// A handle on no refresh thread: every question is answered "nothing changed" at once.
    pub fn unanswered(sources: Sources) -> Handle {
        channel(sources).0
    }
}
