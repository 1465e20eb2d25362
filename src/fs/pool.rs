//! The read pool: requests that may wait on storage run on threads of their own, so that a stalled
//! backend costs pool threads, never the FUSE threads that answer everything else from memory.
//!
//! Threads are started as work arrives (after the fork, like every thread), up to a limit; work
//! beyond what they can take waits in a queue of bounded length, and is refused past it. Every job
//! ends by itself once its backend call returns, so a slot is never held longer than that call.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use log::warn;

/// A job: called with `true` on a pool thread, or with `false` at once where the queue is full
/// (it must then answer its request without the backend).
type Job = Box<dyn FnOnce(bool) + Send>;

#[derive(Clone)]
pub struct Pool {
    inner: Arc<Inner>,
    /// Keys (devices) with a call of [`Pool::within_unless_stalled`] that did not answer in time
    /// and has not returned yet.
    stalled: Arc<Mutex<HashSet<u64>>>,
}

/// Whether a call given up on has returned since.
#[derive(Default)]
struct Late {
    done: bool,
    given_up: bool,
}

struct Inner {
    state: Mutex<State>,
    work: Condvar,
    max_threads: usize,
    max_queue: usize,
    /// Set while the queue is full, so that it is said once per episode.
    full: AtomicBool,
}

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    threads: usize,
    idle: usize,
}

impl Pool {
    pub fn new(max_threads: usize, max_queue: usize) -> Pool {
        Pool {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                work: Condvar::new(),
                max_threads: max_threads.max(1),
                max_queue,
                full: AtomicBool::new(false),
            }),
            stalled: Arc::default(),
        }
    }

    /// Runs `job(true)` on a pool thread after the work queued before it, or `job(false)` now if
    /// the queue is full.
    pub fn submit(&self, job: impl FnOnce(bool) + Send + 'static) {
        if let Err(job) = self.push(Box::new(job), false) {
            job(false);
        }
    }

    /// Runs `f` on a pool thread ahead of queued work and waits at most `limit` for its result:
    /// `None` if it did not finish in time (it still runs to its end) or the queue is full.
    pub fn within<T: Send + 'static>(
        &self,
        limit: Duration,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let (tx, rx) = mpsc::sync_channel(1);
        let job = move |run: bool| {
            if run {
                let _ = tx.send(f());
            }
        };
        self.push(Box::new(job), true).ok()?;
        rx.recv_timeout(limit).ok()
    }

    /// [`Pool::within`], except that once a call for `key` (a device) has not answered in time,
    /// the next calls for that key return `None` at once, without running, until it returns.
    pub fn within_unless_stalled<T: Send + 'static>(
        &self,
        key: u64,
        limit: Duration,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        if self.lock_stalled().contains(&key) {
            return None;
        }
        let late = Arc::new(Mutex::new(Late::default()));
        let job = {
            let (late, stalled) = (late.clone(), self.stalled.clone());
            move || {
                let out = f();
                let mut late = late.lock().unwrap_or_else(PoisonError::into_inner);
                late.done = true;
                if late.given_up {
                    stalled
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .remove(&key);
                }
                out
            }
        };
        let out = self.within(limit, job);
        if out.is_none() {
            let mut late = late.lock().unwrap_or_else(PoisonError::into_inner);
            if !late.done {
                late.given_up = true;
                self.lock_stalled().insert(key);
            }
        }
        out
    }

    fn lock_stalled(&self) -> std::sync::MutexGuard<'_, HashSet<u64>> {
        self.stalled.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn push(&self, job: Job, first: bool) -> Result<(), Job> {
        let inner = &self.inner;
        let mut state = inner.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.jobs.len() >= inner.max_queue {
            if !inner.full.swap(true, Ordering::Relaxed) {
                warn!(
                    "{} reads are waiting on storage that does not answer: further reads fail \
                     with EIO until it does",
                    state.jobs.len() + state.threads
                );
            }
            return Err(job);
        }
        if first {
            state.jobs.push_front(job);
        } else {
            state.jobs.push_back(job);
        }
        if state.idle == 0 && state.threads < inner.max_threads {
            let pool = inner.clone();
            let spawned = std::thread::Builder::new()
                .name("read".into())
                .spawn(move || work(&pool));
            if spawned.is_ok() {
                state.threads += 1;
            } else if state.threads == 0 {
                // No thread to run it: take it back.
                let job = if first {
                    state.jobs.pop_front()
                } else {
                    state.jobs.pop_back()
                };
                return job.map_or(Ok(()), Err);
            }
        } else {
            inner.work.notify_one();
        }
        Ok(())
    }
}

/// A pool thread: runs jobs until the process ends.
fn work(inner: &Inner) {
    let mut state = inner.state.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        match state.jobs.pop_front() {
            Some(job) => {
                if state.jobs.len() < inner.max_queue / 2 {
                    inner.full.store(false, Ordering::Relaxed);
                }
                drop(state);
                job(true);
                state = inner.state.lock().unwrap_or_else(PoisonError::into_inner);
            }
            None => {
                state.idle += 1;
                state = inner
                    .work
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
                state.idle -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::Instant;

    #[test]
    fn stalled_jobs_cost_threads_and_checks_run_ahead_of_the_queue() {
        let pool = Pool::new(2, 4);
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let release_rx = Arc::new(Mutex::new(release_rx));
        let started = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicUsize::new(0));
        let refused = Arc::new(AtomicUsize::new(0));
        let stalled = |n: usize| {
            for _ in 0..n {
                let (rx, started, done, refused) = (
                    release_rx.clone(),
                    started.clone(),
                    done.clone(),
                    refused.clone(),
                );
                pool.submit(move |run| {
                    if run {
                        started.fetch_add(1, Ordering::SeqCst);
                        let _ = rx.lock().unwrap().recv();
                        done.fetch_add(1, Ordering::SeqCst);
                    } else {
                        refused.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
        };
        let until = |what: &str, cond: &dyn Fn() -> bool| {
            let t = Instant::now();
            while !cond() {
                assert!(t.elapsed() < Duration::from_secs(10), "{what}");
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        // Two stalled jobs hold both threads; three more wait.
        stalled(2);
        until("both threads started", &|| {
            started.load(Ordering::SeqCst) == 2
        });
        stalled(3);
        assert_eq!(refused.load(Ordering::SeqCst), 0);
        // A check cannot start while both threads are stalled: it gives up after its limit.
        let t = Instant::now();
        assert_eq!(pool.within(Duration::from_millis(100), || 7), None);
        assert!(t.elapsed() >= Duration::from_millis(100));
        // The queue is full now (three jobs and the check): the next job is refused at once.
        stalled(1);
        assert_eq!(refused.load(Ordering::SeqCst), 1);
        for _ in 0..5 {
            release_tx.send(()).unwrap();
        }
        until("every queued job ran", &|| done.load(Ordering::SeqCst) == 5);
        // Once the threads are free, a check answers.
        assert_eq!(pool.within(Duration::from_secs(10), || 7), Some(7));
    }

    #[test]
    fn a_key_whose_call_stalled_is_not_waited_on_until_it_returns() {
        let pool = Pool::new(4, 16);
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let limit = Duration::from_millis(100);
        // Key 1's call stalls: it is given up on after the limit.
        let t = Instant::now();
        let stalled = pool.within_unless_stalled(1, limit, move || release_rx.recv().is_ok());
        assert_eq!(stalled, None);
        assert!(t.elapsed() >= limit);
        // Meanwhile key 1 is not waited on at all; key 2 is.
        let t = Instant::now();
        assert_eq!(pool.within_unless_stalled(1, limit, || 1), None);
        assert!(t.elapsed() < limit, "{:?}", t.elapsed());
        assert_eq!(pool.within_unless_stalled(2, limit, || 2), Some(2));
        // Once the stalled call returns, key 1 answers again.
        release_tx.send(()).unwrap();
        let t = Instant::now();
        loop {
            if pool.within_unless_stalled(1, limit, || 1) == Some(1) {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "key 1 stayed stalled"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
