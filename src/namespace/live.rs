//! The namespace as requests see it: the snapshot published last, and the entries the kernel still
//! holds although they left the tree.
//!
//! The kernel holds an inode from the LOOKUP or READDIRPLUS reply that names it until it sends
//! FORGET for as many lookups. An inode that leaves the tree (removed, or replaced by a new
//! version) while the kernel holds it stays known until then: handles open on it keep reading its
//! old bytes (they keep its source open), and a new open of it is refused as stale.
//!
//! Lock order: `refs`, then `current`. Nothing here waits on anything else while holding either.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use super::node::{Ino, Node, ROOT};
use super::snapshot::Snapshot;

#[derive(Debug)]
pub struct Namespace {
    current: RwLock<Arc<Snapshot>>,
    refs: Mutex<Refs>,
    /// The generation whose kernel notifications have all been sent.
    applied: AtomicU64,
    /// Whether lookups are counted (not needed when nothing ever leaves the tree).
    counting: bool,
}

#[derive(Debug, Default)]
struct Refs {
    /// Lookups the kernel holds, by inode (absent: none).
    counts: HashMap<Ino, u64>,
    /// Inodes no longer in the tree that the kernel still holds.
    detached: HashMap<Ino, Node>,
}

impl Namespace {
    /// `live`: the tree will change, so lookups must be counted.
    pub fn new(snapshot: Snapshot, live: bool) -> Namespace {
        Namespace {
            applied: AtomicU64::new(snapshot.generation()),
            current: RwLock::new(Arc::new(snapshot)),
            refs: Mutex::new(Refs::default()),
            counting: live,
        }
    }

    /// The snapshot published last.
    pub fn current(&self) -> Arc<Snapshot> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn refs(&self) -> MutexGuard<'_, Refs> {
        self.refs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The node of `ino`: in the current tree, or kept for the kernel after leaving it.
    pub fn get(&self, ino: Ino) -> Option<Node> {
        if let Some(n) = self.current().node(ino) {
            return Some(n.clone());
        }
        self.refs().detached.get(&ino).cloned()
    }

    /// The path of `ino` in the mount (`.` for the root), as its nodes name it: for messages.
    pub fn path(&self, ino: Ino) -> String {
        let mut names = Vec::new();
        let mut at = ino;
        // Bounded: a node kept for the kernel may name a parent that left the tree since.
        while at != ROOT && names.len() < 256 {
            let Some(node) = self.get(at) else {
                names.push(format!("<inode {at}>").into_bytes());
                break;
            };
            names.push(node.name.to_vec());
            at = node.parent;
        }
        if names.is_empty() {
            return ".".into();
        }
        names.reverse();
        String::from_utf8_lossy(&names.join(&b'/')).into_owned()
    }

    /// Whether `ino` is in the current tree.
    pub fn is_current(&self, ino: Ino) -> bool {
        self.current().node(ino).is_some()
    }

    /// Counts a lookup of `ino` (whose node is `node`) about to be handed to the kernel. Returns
    /// false if `ino` has already left the tree (the reply came from an older snapshot): it is then
    /// kept for the kernel like any detached inode, and its name should be invalidated.
    pub fn remember(&self, ino: Ino, node: &Node) -> bool {
        if !self.counting {
            return true;
        }
        let mut refs = self.refs();
        *refs.counts.entry(ino).or_default() += 1;
        let current = self
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .node(ino)
            .is_some();
        if !current {
            refs.detached.entry(ino).or_insert_with(|| node.clone());
        }
        current
    }

    /// The kernel forgot `n` lookups of `ino`. Returns true if it holds none any more; a detached
    /// inode is then dropped (and with it, possibly, the last use of its source).
    pub fn forget(&self, ino: Ino, n: u64) -> bool {
        if !self.counting {
            return false;
        }
        let mut refs = self.refs();
        let Entry::Occupied(mut count) = refs.counts.entry(ino) else {
            return true;
        };
        *count.get_mut() = count.get().saturating_sub(n);
        if *count.get() > 0 {
            return false;
        }
        count.remove();
        let dropped = refs.detached.remove(&ino);
        drop(refs);
        drop(dropped);
        true
    }

    /// Whether the kernel holds `ino`.
    pub fn held(&self, ino: Ino) -> bool {
        self.refs().counts.contains_key(&ino)
    }

    /// Publishes `snapshot`; of the inodes it no longer has (`detached`), those the kernel holds
    /// stay served.
    pub fn publish(&self, snapshot: Snapshot, detached: &[Ino]) {
        let mut refs = self.refs();
        let old = std::mem::replace(
            &mut *self.current.write().unwrap_or_else(PoisonError::into_inner),
            Arc::new(snapshot),
        );
        for &ino in detached {
            if refs.counts.contains_key(&ino)
                && let Some(node) = old.node(ino)
            {
                refs.detached.insert(ino, node.clone());
            }
        }
        drop(refs);
        drop(old);
    }

    /// The generation of the last refresh whose kernel notifications have all been sent.
    pub fn applied(&self) -> u64 {
        self.applied.load(Ordering::Acquire)
    }

    pub fn set_applied(&self, generation: u64) {
        self.applied.fetch_max(generation, Ordering::AcqRel);
    }
}
