//! Read leases on open sources, so that a read need not check each time that its source is
//! unchanged.
//!
//! A read checks, before or after taking the bytes, that the source still holds the version it
//! was opened as (one `fstat`: same size, same mtime; see [`Source::intact`](super::Source)).
//! Where the daemon holds a read lease on the descriptor (`fcntl(F_SETLEASE, F_RDLCK)`), that
//! check is skipped: no other descriptor can be open for writing, and anyone who opens the file
//! for writing or truncates it waits until the lease is released. The kernel tells the daemon with
//! [`SIGNAL`]; this module's thread then marks every lease being broken as no longer held and
//! releases it, and only then does the writer's `open` return. So a read that still finds its
//! lease held after taking its bytes took bytes that no writer had touched.
//!
//! If the daemon cannot answer (stopped with SIGSTOP, under a debugger, starved), the kernel
//! breaks the lease itself after `fs.lease-break-time` seconds and lets the writer go on. So a
//! lease is only relied on while this module's thread has been awake within half that time: it
//! wakes at least every second, and each time it has first released every lease being broken.
//! After a longer pause, reads check again until the thread has caught up.
//!
//! A lease is taken when a local source is opened (and, once the thread runs, on every source
//! already open), then the descriptor's version is checked once more: a write before the lease
//! is caught there. Where the kernel refuses a lease (not the owner without CAP_LEASE, a writer
//! already open, a filesystem without leases, `fs.leases-enable=0`), reads check each time, as
//! they always do once a lease has been broken. Leases are only taken while the thread runs: the
//! daemon blocks [`SIGNAL`] in every thread before starting it, and [`start`] sets the switch.
//! Without that the signal's default action would end the process.

use std::collections::HashMap;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use log::debug;

use super::opened::{self, Opened};
use super::source::now_ms;

/// What the kernel sends when a lease is being broken (F_SETSIG left at 0): a standard signal,
/// so breaks that come together are delivered once, and each delivery looks at every lease.
pub const SIGNAL: libc::c_int = libc::SIGIO;

/// Whether a descriptor holds a lease that reads may rely on.
#[derive(Debug, Default)]
pub struct Lease(AtomicU8);

const NONE: u8 = 0;
const TAKING: u8 = 1;
const HELD: u8 = 2;
const RELEASED: u8 = 3;

impl Lease {
    /// True while the lease is held: nothing has written to the file since it was taken and
    /// checked. Asked at `now` ([`now_ms`]) after taking bytes, it vouches for them.
    pub fn held(&self, now: u64) -> bool {
        // The thread's last wake first: one after a break began has marked the lease released.
        let awake = AWAKE.load(Ordering::SeqCst);
        self.0.load(Ordering::SeqCst) == HELD
            && now.saturating_sub(awake) < TRUSTED_MS.load(Ordering::Relaxed)
    }
}

/// Set by [`start`] once the thread that releases broken leases runs.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// When the thread last woke, having released every lease being broken ([`now_ms`]).
static AWAKE: AtomicU64 = AtomicU64::new(0);

/// How long after that leases are relied on: half of `fs.lease-break-time`, read at each wake.
static TRUSTED_MS: AtomicU64 = AtomicU64::new(0);

/// The longest the thread sleeps.
const TICK: Duration = Duration::from_secs(1);

/// The descriptors that hold or have taken a lease, by address (see [`forget`]).
static LEASED: Mutex<Option<HashMap<usize, Weak<Opened>>>> = Mutex::new(None);

/// Takes a read lease on `opened`, a descriptor of a local source, if leases are enabled and it
/// has none yet, and keeps it only if `unchanged` (asked once the lease is held) says the file is
/// still the version it was opened as.
pub fn take(opened: &Arc<Opened>, unchanged: impl FnOnce() -> bool) {
    let lease = &opened.lease;
    if !ENABLED.load(Ordering::SeqCst)
        || TRUSTED_MS.load(Ordering::Relaxed) == 0
        || lease
            .0
            .compare_exchange(NONE, TAKING, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
    {
        return;
    }
    // Listed before the lease exists, so that a break that comes at once is not missed.
    LEASED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get_or_insert_with(HashMap::new)
        .insert(Arc::as_ptr(opened) as usize, Arc::downgrade(opened));
    let fd = opened.file.as_raw_fd();
    // SAFETY: fcntl on a descriptor that `opened` owns and keeps open; F_SETLEASE takes an int.
    if unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_RDLCK) } != 0 {
        debug!("no read lease: {}", io::Error::last_os_error());
        lease.0.store(RELEASED, Ordering::SeqCst);
        return;
    }
    let held = unchanged()
        && lease
            .0
            .compare_exchange(TAKING, HELD, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
    if !held {
        // Changed before the lease, or the lease was broken meanwhile: reads check each time.
        lease.0.store(RELEASED, Ordering::SeqCst);
        unlock(fd);
    }
}

/// Starts the thread that releases broken leases, and takes leases on the local sources already
/// open. Call it once, after blocking [`SIGNAL`] in the process's only thread: every thread
/// started after that has it blocked too, so it is only ever received here.
pub fn start() -> io::Result<()> {
    let set = signal_set();
    awake();
    std::thread::Builder::new()
        .name("leases".into())
        .spawn(move || {
            let tick = libc::timespec {
                tv_sec: TICK.as_secs() as libc::time_t,
                tv_nsec: 0,
            };
            loop {
                // SAFETY: `set` is an initialised signal set, `tick` a valid timeout; no siginfo
                // is asked for.
                let sig = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &tick) };
                if sig == SIGNAL {
                    release_broken();
                    awake();
                } else if sig < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN)
                {
                    // A timeout: no break began since the last wake (its signal would be
                    // pending), and those that began before were released then.
                    awake();
                }
            }
        })?;
    ENABLED.store(true, Ordering::SeqCst);
    for source in opened::open_sources() {
        if let Some(o) = source.current() {
            source.lease(&o);
        }
    }
    Ok(())
}

/// Records that the thread is awake now, and how long leases may be relied on after that.
fn awake() {
    let break_secs: u64 = std::fs::read_to_string("/proc/sys/fs/lease-break-time")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    TRUSTED_MS.store(break_secs * 1000 / 2, Ordering::Relaxed);
    AWAKE.store(now_ms(), Ordering::SeqCst);
}

fn signal_set() -> libc::sigset_t {
    let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset initialises the set; sigaddset adds a valid signal number to it.
    unsafe {
        libc::sigemptyset(set.as_mut_ptr());
        libc::sigaddset(set.as_mut_ptr(), SIGNAL);
        set.assume_init()
    }
}

/// Marks every lease that the kernel is breaking (F_GETLEASE then answers F_UNLCK) as no longer
/// held, then releases it, which lets the writer waiting for it go on.
fn release_broken() {
    let leased: Vec<Arc<Opened>> = LEASED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .flat_map(HashMap::values)
        .filter_map(Weak::upgrade)
        .collect();
    for o in leased {
        let state = o.lease.0.load(Ordering::SeqCst);
        if state != TAKING && state != HELD {
            continue;
        }
        let fd = o.file.as_raw_fd();
        // SAFETY: fcntl on a descriptor that `o`, held here, keeps open.
        if unsafe { libc::fcntl(fd, libc::F_GETLEASE) } == libc::F_RDLCK {
            continue;
        }
        o.lease.0.store(RELEASED, Ordering::SeqCst);
        unlock(fd);
        debug!("read lease on descriptor {fd} broken by a writer: released");
    }
}

/// Drops `opened` from the list once it is being dropped (its descriptor closes with its lease).
pub fn forget(opened: &Opened) {
    if opened.lease.0.load(Ordering::SeqCst) == NONE {
        return;
    }
    if let Some(leased) = LEASED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_mut()
    {
        leased.remove(&(opened as *const Opened as usize));
    }
}

fn unlock(fd: libc::c_int) {
    // SAFETY: fcntl on a descriptor that the caller keeps open; F_SETLEASE takes an int.
    unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_UNLCK) };
}
