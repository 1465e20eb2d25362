//! Calls to the source made several at a time, and long work spread over the CPUs.
//!
//! On storage far away (a network or FUSE filesystem), each `stat`, `open` and header read costs
//! a round trip, so a directory's entries are looked at with up to [`IN_FLIGHT`] calls in flight;
//! on a local filesystem, only large batches are spread over the CPUs (header parsing is the
//! work there). The threads are scoped: they are all gone when a call returns, so the daemon still
//! forks with a single thread.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// At most this many calls to a remote source in flight at once.
const IN_FLIGHT: usize = 16;

/// Below this many items, a local batch is done on the calling thread.
const LOCAL_BATCH: usize = 16;

/// `f` applied to every item, in order: with up to [`IN_FLIGHT`] threads for a `remote` source,
/// with one per CPU for a large local batch, else on this thread.
pub fn map<T: Sync, R: Send>(items: &[T], remote: bool, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = match remote {
        true => IN_FLIGHT,
        false if items.len() >= LOCAL_BATCH => cpus(),
        false => 1,
    };
    spread(items, threads, f)
}

/// `f` applied to every item, in order, by one thread per CPU, each taking the next item when it
/// is free: for long work on the CPU (hashing or comparing whole files and tensors), with the
/// longest items first in `items`.
pub fn on_cpus<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    spread(items, cpus(), f)
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// `f` applied to every item, in order, by up to `threads` threads (this one among them).
fn spread<T: Sync, R: Send>(items: &[T], threads: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = threads.min(items.len());
    if threads <= 1 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let out: Vec<Mutex<Option<R>>> = items.iter().map(|_| Mutex::new(None)).collect();
    let work = || {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = items.get(i) else {
                return;
            };
            let r = f(item);
            if let Ok(mut slot) = out[i].lock() {
                *slot = Some(r);
            }
        }
    };
    std::thread::scope(|s| {
        for _ in 1..threads {
            // A thread that cannot be started leaves its share to the others and to this one.
            let _ = std::thread::Builder::new().spawn_scoped(s, work);
        }
        work();
    });
    out.into_iter()
        .zip(items)
        .map(|(slot, item)| match slot.into_inner().ok().flatten() {
            Some(r) => r,
            // Only a panicking call leaves a slot empty (and the scope has re-raised it by now).
            None => f(item),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_the_order_of_the_items() {
        let items: Vec<u64> = (0..1000).collect();
        for remote in [false, true] {
            let out = map(&items, remote, |&i| i * 3);
            assert_eq!(out, items.iter().map(|i| i * 3).collect::<Vec<_>>());
        }
        assert_eq!(map(&[] as &[u8], true, |&b| b), Vec::<u8>::new());
        assert_eq!(map(&[7u8], true, |&b| b + 1), vec![8]);
    }
}
