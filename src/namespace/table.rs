//! The inode table of a snapshot: inode number → node.
//!
//! Inode numbers are handed out in increasing order and never reused, so the table is a vector of
//! fixed-size chunks indexed by number. Chunks are shared between snapshots (`Arc`) and copied on
//! write, so that a new snapshot costs one pointer per chunk plus the chunks a refresh touches, and
//! a lookup is two array indexings.

use std::sync::Arc;

use super::node::{Ino, Node};

const CHUNK: usize = 1024;

#[derive(Debug, Clone, Default)]
pub(super) struct Table {
    chunks: Vec<Option<Arc<Chunk>>>,
    len: usize,
}

#[derive(Debug, Clone)]
struct Chunk {
    slots: Vec<Option<Node>>,
    live: usize,
}

fn split(ino: Ino) -> (usize, usize) {
    ((ino / CHUNK as u64) as usize, (ino % CHUNK as u64) as usize)
}

impl Table {
    pub fn get(&self, ino: Ino) -> Option<&Node> {
        let (c, s) = split(ino);
        self.chunks.get(c)?.as_ref()?.slots[s].as_ref()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Sets the node of `ino`, replacing any.
    pub fn insert(&mut self, ino: Ino, node: Node) {
        let (c, s) = split(ino);
        if self.chunks.len() <= c {
            self.chunks.resize(c + 1, None);
        }
        let chunk = self.chunks[c].get_or_insert_with(|| {
            Arc::new(Chunk {
                slots: vec![None; CHUNK],
                live: 0,
            })
        });
        let chunk = Arc::make_mut(chunk);
        if chunk.slots[s].replace(node).is_none() {
            chunk.live += 1;
            self.len += 1;
        }
    }

    pub fn remove(&mut self, ino: Ino) -> Option<Node> {
        let (c, s) = split(ino);
        let slot = self.chunks.get_mut(c)?;
        let chunk = Arc::make_mut(slot.as_mut()?);
        let node = chunk.slots[s].take()?;
        chunk.live -= 1;
        self.len -= 1;
        if chunk.live == 0 {
            *slot = None;
        }
        Some(node)
    }
}
