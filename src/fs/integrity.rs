//! What the mount proves of the bytes it serves, beside serving them:
//! - [`TensorDigests`]: each tensor file's SHA-256 (`user.safetensors.sha256`), computed on first
//!   request on the read pool, kept per inode (an inode's bytes never change), within a bound;
//! - [`Verifier`] (`-o verify`): a thread that hashes, one at a time and last in line for the CPU
//!   and storage, every mirrored weight file whose digest SOURCE records, sets its verdict, and
//!   has the kernel drop what it cached of a mismatched file. Between chunks it waits while files
//!   are being read through the mount ([`Activity`]), so that serving comes first. Reads of a
//!   mismatched file and of its tensor files then fail with EIO (see `fs`).

use std::collections::{HashMap, HashSet, VecDeque};
use std::io;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use log::{info, warn};

use crate::base::digest::{Sha256, hex};
use crate::namespace::{Content, Ino, Namespace, Snapshot};
use crate::refresh::invalidate::{Invalidator, Notice};
use crate::source::{ReadError, Source, Verdict, Version};

/// The most tensor digests kept; past it the oldest are forgotten (and computed again if asked).
const MAX_DIGESTS: usize = 1 << 18;

/// How often the verifier looks for a new tree once it has checked every file of the last one.
const POLL: Duration = Duration::from_secs(1);

/// The verifier reads its next chunk only once no file has been read through the mount for this
/// long, waiting this long at a time...
const QUIET: Duration = Duration::from_millis(20);

/// ...but at most this long per chunk, so that it still ends under a steady load.
const MAX_YIELD: Duration = Duration::from_secs(1);

/// When a file of the mount was last read: what the verifier yields to.
pub struct Activity {
    start: Instant,
    /// Milliseconds since `start`.
    last: AtomicU64,
}

impl Default for Activity {
    fn default() -> Activity {
        Activity {
            start: Instant::now(),
            last: AtomicU64::new(0),
        }
    }
}

impl Activity {
    /// A file was read now.
    pub fn touch(&self) {
        let ms = self.start.elapsed().as_millis() as u64;
        if self.last.load(Ordering::Relaxed) != ms {
            self.last.store(ms, Ordering::Relaxed);
        }
    }

    /// Waits until nothing was read for [`QUIET`], or [`MAX_YIELD`] has passed.
    fn yield_to_readers(&self) {
        let since = Instant::now();
        while since.elapsed() < MAX_YIELD {
            let last = Duration::from_millis(self.last.load(Ordering::Relaxed));
            if self.start.elapsed().saturating_sub(last) >= QUIET {
                return;
            }
            std::thread::sleep(QUIET);
        }
    }
}

/// Tensor files' digests by inode, oldest first out.
#[derive(Default)]
pub struct TensorDigests(Mutex<(HashMap<Ino, Sha256>, VecDeque<Ino>)>);

impl TensorDigests {
    pub fn get(&self, ino: Ino) -> Option<Sha256> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .0
            .get(&ino)
            .copied()
    }

    pub fn insert(&self, ino: Ino, digest: Sha256) {
        let mut guard = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let (map, order) = &mut *guard;
        if map.insert(ino, digest).is_none() {
            order.push_back(ino);
        }
        while order.len() > MAX_DIGESTS {
            if let Some(old) = order.pop_front() {
                map.remove(&old);
            }
        }
    }
}

/// The `-o verify` thread's work: the tree to follow, and the way to the kernel's caches (when the
/// mount follows SOURCE; a frozen mount refuses new opens and reads instead).
pub struct Verifier {
    pub ns: Arc<Namespace>,
    pub invalidate: Option<Invalidator>,
    /// Reads of the mount, which come first.
    pub activity: Arc<Activity>,
}

impl Verifier {
    /// Starts the thread (once mounted, after any fork).
    pub fn start(self) -> io::Result<()> {
        std::thread::Builder::new()
            .name("verify".into())
            .spawn(move || self.run())?;
        Ok(())
    }

    fn run(self) {
        crate::base::sys::lowest_priority();
        // Versions tried that could not be read through (changed, unreadable): not tried again.
        let mut failed: HashSet<Version> = HashSet::new();
        // The generation of the last tree whose every file was checked.
        let mut done = None;
        loop {
            let snapshot = self.ns.current();
            if done == Some(snapshot.generation()) {
                drop(snapshot);
                std::thread::sleep(POLL);
                continue;
            }
            let due = due(&snapshot, &failed);
            if due.is_empty() {
                done = Some(snapshot.generation());
                continue;
            }
            // Hashing takes long: the tree may be replaced meanwhile, and need not be kept.
            drop(snapshot);
            for (name, source) in due {
                match check(&name, &source, &self.activity) {
                    Ok(verdict) => {
                        source.set_verdict(verdict);
                        if verdict == Verdict::Mismatch {
                            self.refuse(&source);
                        } else {
                            info!("{name}: SHA-256 verified");
                        }
                    }
                    Err(e) => {
                        warn!("{}: not verified: {e}", source.path.display());
                        failed.insert(source.version);
                    }
                }
            }
        }
    }

    /// Has the kernel drop what it cached of every file of `source`'s bytes, in the tree as it is
    /// now (a refresh during the hash may have added files made of them, a merged directory).
    fn refuse(&self, source: &Arc<Source>) {
        let Some(invalidate) = &self.invalidate else {
            return;
        };
        let inos: Vec<Ino> = self
            .ns
            .current()
            .entries()
            .into_iter()
            .filter(|(_, _, n)| n.source().is_some_and(|s| ptr::eq(&**s, &**source)))
            .map(|(_, ino, _)| ino)
            .collect();
        invalidate.send(Notice::Dropped(inos));
    }
}

/// The mirrored files of `snapshot` with a recorded digest and no verdict yet, by path (each
/// version's first), each version once.
fn due(snapshot: &Snapshot, failed: &HashSet<Version>) -> Vec<(String, Arc<Source>)> {
    let mut seen = HashSet::new();
    snapshot
        .entries()
        .into_iter()
        .filter_map(|(path, _, node)| match &node.content {
            Content::Mirror { source, .. } => Some((path, source)),
            _ => None,
        })
        .filter(|(_, s)| {
            s.verdict().is_none()
                && !failed.contains(&s.version)
                && s.recorded().is_some()
                && seen.insert(s.version)
        })
        .map(|(path, s)| (path, s.clone()))
        .collect()
}

/// Hashes `source` whole and compares with its recorded digest; an error where it could not be
/// read through as this version.
fn check(name: &str, source: &Source, activity: &Activity) -> Result<Verdict, String> {
    let Some(recorded) = source.recorded() else {
        return Err("no recorded digest".into());
    };
    let (digest, _) = source
        .sha256(&[], &mut |_| activity.yield_to_readers())
        .map_err(|e| match e {
            ReadError::Changed(_) => "changed while being verified".to_string(),
            ReadError::Io(m) => format!("cannot read: {m}"),
        })?;
    if digest == recorded.sha256 {
        return Ok(Verdict::Ok);
    }
    warn!(
        "{name}: SHA-256 mismatch: expected {}, read {} (recorded as {} in {}); its \
         reads now fail with EIO",
        hex(&recorded.sha256),
        hex(&digest),
        recorded.how.name(),
        recorded.at.display()
    );
    Ok(Verdict::Mismatch)
}
