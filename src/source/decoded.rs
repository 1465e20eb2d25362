//! [`DecodedChunks`]: the read path's cache of decoded chunks (a compressed chunk inflated, a
//! big-endian one byte-swapped), so that a sequential read of a decoded tensor, which the kernel
//! sends as many reads of at most 1 MiB, decodes each chunk once rather than once per read.
//!
//! A chunk is kept by the version of the file that stores it (see [`Version`]: which file, its
//! size and mtime) and where in that file it is stored: a replaced or rewritten file is another
//! version, so its chunks are never served from an old one's. The cache holds at most its budget
//! (`-o decode_cache=`) of decoded bytes; past it, the least recently used chunks go. Two reads
//! that want one chunk at once decode it once: the second waits for the first.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use super::version::Version;

/// `-o decode_cache=`'s default.
pub const DEFAULT_BUDGET: u64 = 256 << 20;

/// Which chunk: the version of the file that stores it, and where it starts there.
pub type Key = (Version, u64);

/// One chunk: decoded once by whichever read asks first (`None` where that failed).
type Slot = Arc<OnceLock<Option<Arc<[u8]>>>>;

/// The cache (see the module's doc).
#[derive(Debug)]
pub struct DecodedChunks {
    budget: u64,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Every chunk kept or being decoded: its slot, the tick of its last use, and the bytes it
    /// counts in `used` (0 until it is found decoded).
    chunks: HashMap<Key, (Slot, u64, u64)>,
    /// The chunks by their last use, oldest first.
    order: BTreeMap<u64, Key>,
    /// Decoded bytes kept.
    used: u64,
    tick: u64,
}

impl DecodedChunks {
    /// A cache of at most `budget` bytes of decoded chunks (0: none kept).
    pub fn new(budget: u64) -> DecodedChunks {
        DecodedChunks {
            budget,
            state: Mutex::new(State::default()),
        }
    }

    /// The decoded bytes of the chunk `key`: kept ones, else those `decode` makes now, which are
    /// then kept (those of a chunk larger than the whole budget are not).
    pub fn get(
        &self,
        key: Key,
        decode: impl FnOnce() -> io::Result<Vec<u8>>,
    ) -> io::Result<Arc<[u8]>> {
        if self.budget == 0 {
            return decode().map(Arc::from);
        }
        let slot = self.slot(key);
        let mut decode = Some(decode);
        let mut failed = None;
        let decoded = slot.get_or_init(|| match decode.take().map(|d| d()) {
            Some(Ok(bytes)) => Some(Arc::from(bytes)),
            Some(Err(e)) => {
                failed = Some(e);
                None
            }
            None => None,
        });
        if let Some(bytes) = decoded {
            let bytes = bytes.clone();
            self.kept(key, &slot, bytes.len() as u64);
            return Ok(bytes);
        }
        self.forget(key, &slot);
        match (failed, decode) {
            (Some(e), _) => Err(e),
            // Another read's decoding failed while this one waited: this one decodes on its own.
            (None, Some(decode)) => decode().map(Arc::from),
            (None, None) => Err(io::Error::other("a chunk that could not be decoded")),
        }
    }

    /// The bytes kept now, and how many chunks (kept or being decoded).
    #[cfg(test)]
    pub fn held(&self) -> (u64, usize) {
        let state = self.lock();
        (state.used, state.chunks.len())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The slot of `key`, made if there is none, marked as just used.
    fn slot(&self, key: Key) -> Slot {
        let mut state = self.lock();
        state.tick += 1;
        let tick = state.tick;
        let (slot, old) = match state.chunks.get_mut(&key) {
            Some((slot, used, _)) => (slot.clone(), Some(std::mem::replace(used, tick))),
            None => {
                let slot = Slot::default();
                state.chunks.insert(key, (slot.clone(), tick, 0));
                (slot, None)
            }
        };
        if let Some(old) = old {
            state.order.remove(&old);
        }
        state.order.insert(tick, key);
        slot
    }

    /// Counts the `len` decoded bytes of `key` the first time they are found decoded, then makes
    /// room: the least recently used chunks go until what is kept fits the budget.
    fn kept(&self, key: Key, slot: &Slot, len: u64) {
        let mut state = self.lock();
        match state.chunks.get_mut(&key) {
            Some((held, _, counted)) if Arc::ptr_eq(held, slot) && *counted == 0 => {
                *counted = len.max(1);
            }
            _ => return,
        }
        state.used = state.used.saturating_add(len.max(1));
        while state.used > self.budget {
            let Some((_, oldest)) = state.order.pop_first() else {
                break;
            };
            if let Some((_, _, counted)) = state.chunks.remove(&oldest) {
                state.used = state.used.saturating_sub(counted);
            }
        }
    }

    /// Drops `key`'s slot if it is still `slot`, so that a later read decodes it again.
    fn forget(&self, key: Key, slot: &Slot) {
        let mut state = self.lock();
        if let Some((held, tick, counted)) = state.chunks.get(&key)
            && Arc::ptr_eq(held, slot)
        {
            let (tick, counted) = (*tick, *counted);
            state.order.remove(&tick);
            state.chunks.remove(&key);
            state.used = state.used.saturating_sub(counted);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn key(ino: u64, at: u64) -> Key {
        let v = Version {
            id: super::super::version::FileId { dev: 1, ino },
            size: 100,
            mtime: (1, 0),
            ctime: (1, 0),
        };
        (v, at)
    }

    #[test]
    fn each_chunk_is_decoded_once_while_it_is_kept() {
        let cache = DecodedChunks::new(300);
        let decodes = Cell::new(0);
        let get = |k: Key, byte: u8| {
            cache
                .get(k, || {
                    decodes.set(decodes.get() + 1);
                    Ok(vec![byte; 100])
                })
                .unwrap()
        };
        assert_eq!(&get(key(1, 0), 1)[..], &[1; 100][..]);
        assert_eq!(&get(key(1, 0), 9)[..], &[1; 100][..]);
        assert_eq!(decodes.get(), 1);
        // Another place, another file, another version of the file: other chunks.
        get(key(1, 100), 2);
        get(key(2, 0), 3);
        assert_eq!(decodes.get(), 3);
        assert_eq!(cache.held(), (300, 3));
        let (mut v, at) = key(1, 0);
        v.mtime = (2, 0);
        assert_eq!(&get((v, at), 4)[..], &[4; 100][..]);
        assert_eq!(decodes.get(), 4);
        // Past the budget the least recently used went: key(1, 0), used before key(1, 100).
        assert_eq!(cache.held(), (300, 3));
        get(key(1, 100), 0);
        assert_eq!(decodes.get(), 4);
        assert_eq!(&get(key(1, 0), 5)[..], &[5; 100][..]);
        assert_eq!(decodes.get(), 5);
    }

    #[test]
    fn a_failed_decoding_is_not_kept_and_a_chunk_past_the_budget_is_not_kept() {
        let cache = DecodedChunks::new(150);
        let e = cache.get(key(1, 0), || Err(io::Error::other("bad deflate stream")));
        assert_eq!(e.unwrap_err().to_string(), "bad deflate stream");
        assert_eq!(cache.held(), (0, 0));
        assert_eq!(
            &cache.get(key(1, 0), || Ok(vec![7; 10])).unwrap()[..],
            &[7; 10]
        );
        assert_eq!(cache.held(), (10, 1));
        cache.get(key(1, 10), || Ok(vec![8; 200])).unwrap();
        assert_eq!(cache.held(), (0, 0));
        let none = DecodedChunks::new(0);
        none.get(key(1, 0), || Ok(vec![1])).unwrap();
        assert_eq!(none.held(), (0, 0));
    }

    #[test]
    fn two_reads_of_one_chunk_at_once_decode_it_once() {
        let cache = Arc::new(DecodedChunks::new(1 << 20));
        let decodes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (cache, decodes) = (cache.clone(), decodes.clone());
                std::thread::spawn(move || {
                    cache
                        .get(key(1, 0), || {
                            decodes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            std::thread::sleep(std::time::Duration::from_millis(50));
                            Ok(vec![3; 1000])
                        })
                        .unwrap()
                        .len()
                })
            })
            .collect();
        for t in threads {
            assert_eq!(t.join().unwrap(), 1000);
        }
        assert_eq!(decodes.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
