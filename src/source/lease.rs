//! Read leases on open sources, so that a read need not check each time that its source is
//! unchanged.
//!
//! A read checks, after taking its bytes, that the source still holds the version it was opened
//! as (one `fstat`: same size, same mtime). Where the daemon holds a read lease on the descriptor
//! (`fcntl(F_SETLEASE, F_RDLCK)`), that check is skipped: no other descriptor can be open for
//! writing, and anyone who opens the file for writing or truncates it waits until the lease is
//! released. The kernel tells the daemon with [`SIGNAL`]; the thread of [`Leases::start`] then marks
//! every lease being broken as no longer held and releases it, and only then does the writer's
//! `open` return. So a read that still finds its lease held after taking its bytes took bytes that
//! no writer had touched. A reply sent as a slice of the source's mapping is copied by the kernel
//! only after the daemon let go of it: [`Descriptor::while_leased`] keeps the lease from being
//! released until that copy is done, so no writer can cut the file short under it.
//!
//! If the daemon cannot answer (stopped with SIGSTOP, under a debugger, starved), the kernel
//! breaks the lease itself after `fs.lease-break-time` seconds and lets the writer go on. So a
//! lease is only relied on while the thread has been awake within half that time: it wakes at
//! least every [`TICK`], and each time it has first released every lease being broken. After a
//! longer pause, reads check again until the thread has caught up.
//!
//! A lease is taken when a local source is opened (and, once the thread runs, on every source
//! already open), then the descriptor's version is checked once more: a write before the lease is
//! caught there. Where the kernel refuses a lease (not the owner without CAP_LEASE, a writer
//! already open, a filesystem without leases, `fs.leases-enable=0`), reads check each time, as
//! they always do once a lease has been broken. Leases are only taken while the thread runs: the
//! daemon blocks [`SIGNAL`] in every thread before starting it, and [`Leases::start`] sets the
//! switch. Without that the signal's default action would end the process.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use log::debug;

use crate::base::clock::Clock;
use crate::base::sys::{self, Signals};

/// What the kernel sends when a lease is being broken (F_SETSIG left at 0): a standard signal,
/// so breaks that come together are delivered once, and each delivery looks at every lease.
pub const SIGNAL: libc::c_int = libc::SIGIO;

/// The longest the lease thread sleeps: it must wake well within half of the shortest sensible
/// `fs.lease-break-time` (the default is 45 s; tests set 2 s).
const TICK: Duration = Duration::from_secs(1);

/// Where the kernel says how long it waits for a lease holder before breaking the lease itself.
const BREAK_TIME: &str = "/proc/sys/fs/lease-break-time";

/// The daemon's read leases: whether they are taken, the descriptors that hold one, and how long
/// after the lease thread's last wake they may be relied on.
#[derive(Debug)]
pub struct Leases {
    clock: Clock,
    /// Set by [`Leases::start`] once the thread that releases broken leases runs.
    enabled: AtomicBool,
    /// When the thread last woke, having released every lease being broken ([`Clock::ms`]).
    awake: AtomicU64,
    /// How long after that leases are relied on: half of `fs.lease-break-time`, read at each wake.
    trusted_ms: AtomicU64,
    /// The descriptors that hold or have taken a lease, by address (each leaves as it is dropped).
    leased: Mutex<HashMap<usize, Weak<Descriptor>>>,
}

/// A source's open file, with its read lease.
#[derive(Debug)]
pub struct Descriptor {
    pub file: File,
    state: AtomicU8,
    /// Replies being sent from the mapping under the lease (see [`Descriptor::while_leased`]).
    sending: AtomicU32,
    leases: Arc<Leases>,
}

const NONE: u8 = 0;
const TAKING: u8 = 1;
const HELD: u8 = 2;
const RELEASED: u8 = 3;

impl Descriptor {
    /// True while the lease is held: nothing has written to the file since it was taken and
    /// checked. Asked at `now` ([`Clock::ms`]) after taking bytes, it vouches for them.
    pub fn leased(&self, now: u64) -> bool {
        // The thread's last wake first: one after a break began has marked the lease released.
        let awake = self.leases.awake.load(Ordering::SeqCst);
        self.state.load(Ordering::SeqCst) == HELD
            && now.saturating_sub(awake) < self.leases.trusted_ms.load(Ordering::Relaxed)
    }

    /// Runs `send` if the lease is held at `now` ([`Descriptor::leased`]), and keeps it from
    /// being released until `send` returns; `None` (and `send` not run) where it is not held.
    pub fn while_leased<T>(&self, now: u64, send: impl FnOnce() -> T) -> Option<T> {
        // Counted before the state is read: the lease thread marks the lease released before it
        // waits for the count, so either this sees it released or the thread sees this count.
        self.sending.fetch_add(1, Ordering::SeqCst);
        let sent = self.leased(now).then(send);
        self.sending.fetch_sub(1, Ordering::SeqCst);
        sent
    }
}

impl Drop for Descriptor {
    fn drop(&mut self) {
        if self.state.load(Ordering::SeqCst) != NONE {
            self.leases.forget(self);
        }
    }
}

impl Leases {
    pub fn new(clock: Clock) -> Arc<Leases> {
        Arc::new(Leases {
            clock,
            enabled: AtomicBool::new(false),
            awake: AtomicU64::new(0),
            trusted_ms: AtomicU64::new(0),
            leased: Mutex::new(HashMap::new()),
        })
    }

    /// `file` as a descriptor that may take a lease.
    pub fn descriptor(self: &Arc<Self>, file: File) -> Descriptor {
        Descriptor {
            file,
            state: AtomicU8::new(NONE),
            sending: AtomicU32::new(0),
            leases: self.clone(),
        }
    }

    /// Takes a read lease on `fd`, a descriptor of a local source, if leases are enabled and it
    /// has none yet, and keeps it only if `unchanged` (asked once the lease is held) says the file
    /// is still the version it was opened as.
    pub fn take(&self, fd: &Arc<Descriptor>, unchanged: impl FnOnce() -> bool) {
        if !self.enabled.load(Ordering::SeqCst)
            || self.trusted_ms.load(Ordering::Relaxed) == 0
            || fd
                .state
                .compare_exchange(NONE, TAKING, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
        {
            return;
        }
        // Listed before the lease exists, so that a break that comes at once is not missed.
        self.lock()
            .insert(Arc::as_ptr(fd) as usize, Arc::downgrade(fd));
        if let Err(e) = sys::take_read_lease(&fd.file) {
            debug!("no read lease: {e}");
            fd.state.store(RELEASED, Ordering::SeqCst);
            return;
        }
        let held = unchanged()
            && fd
                .state
                .compare_exchange(TAKING, HELD, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok();
        if !held {
            // Changed before the lease, or the lease was broken meanwhile: reads check each time.
            fd.state.store(RELEASED, Ordering::SeqCst);
            sys::release_lease(&fd.file);
        }
    }

    /// Starts the thread that releases broken leases. Call it once, after blocking [`SIGNAL`] in
    /// the process's only thread: every thread started after that has it blocked too, so it is
    /// only ever received here. Leases are taken from then on.
    pub fn start(self: &Arc<Self>) -> io::Result<()> {
        let signals = Signals::of(&[SIGNAL]);
        self.awake();
        let leases = self.clone();
        std::thread::Builder::new()
            .name("leases".into())
            .spawn(move || {
                loop {
                    match signals.wait_for(TICK) {
                        Ok(Some(_)) => {
                            leases.release_broken();
                            leases.awake();
                        }
                        // A timeout: no break began since the last wake (its signal would be
                        // pending), and those that began before were released then.
                        Ok(None) => leases.awake(),
                        // Another signal interrupted the wait: it says nothing of the leases.
                        Err(_) => {}
                    }
                }
            })?;
        self.enabled.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Records that the thread is awake now, and how long leases may be relied on after that.
    fn awake(&self) {
        let break_secs: u64 = std::fs::read_to_string(BREAK_TIME)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        self.trusted_ms
            .store(break_secs * 1000 / 2, Ordering::Relaxed);
        self.awake.store(self.clock.ms(), Ordering::SeqCst);
    }

    /// Marks every lease that the kernel is breaking as no longer held, then releases it, which
    /// lets the writer waiting for it go on.
    fn release_broken(&self) {
        let leased: Vec<Arc<Descriptor>> = self.lock().values().filter_map(Weak::upgrade).collect();
        for fd in leased {
            let state = fd.state.load(Ordering::SeqCst);
            if (state != TAKING && state != HELD) || sys::holds_read_lease(&fd.file) {
                continue;
            }
            fd.state.store(RELEASED, Ordering::SeqCst);
            // Replies being sent from the mapping finish first (each one a copy, never a wait
            // on the writer): the writer must not cut the file short under them.
            while fd.sending.load(Ordering::SeqCst) > 0 {
                std::thread::yield_now();
            }
            sys::release_lease(&fd.file);
            debug!("read lease broken by a writer: released");
        }
    }

    /// Drops `fd` from the list as it is being dropped (its descriptor closes with its lease).
    fn forget(&self, fd: &Descriptor) {
        self.lock().remove(&(fd as *const Descriptor as usize));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<usize, Weak<Descriptor>>> {
        self.leased.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
