//! READ: a read's bytes sent from the FUSE thread where they are at hand, else from the read
//! pool, and how they (or the error) reach the kernel's reply.

use std::io;

use super::{Cause, FsError, TensorFs, changed, refused};
use crate::namespace::{Ino, NotReadable};
use crate::source::{Out, ReadError, Reading, Wait};

/// Where a read's bytes go: the kernel's reply, or a test's.
pub trait ReplyData: Send + 'static + Sized {
    fn data(self, bytes: &[u8]);
    fn error(self, e: FsError);

    /// Replies the bytes of `bufs`, one after the other (one `writev` of the kernel's reply,
    /// which copies them); gives the reply back, nothing sent, where it cannot.
    fn vectored(self, _bufs: &[io::IoSlice<'_>]) -> Result<(), Self> {
        Err(self)
    }
}

impl<B> TensorFs<B> {
    /// Reads up to `size` bytes of `ino` from `offset` into `reply`. Bytes the daemon has or that
    /// are in the page cache of a local source are sent from this thread; anything that may wait
    /// on storage goes to the read pool.
    pub fn read<R: ReplyData>(&self, ino: Ino, offset: u64, size: u32, reply: R) {
        let Some(node) = self.ns.get(ino) else {
            return reply.error(FsError::Stale(Cause::LeftTree));
        };
        if let Some(s) = node.source().filter(|s| refused(s)) {
            return reply.error(FsError::Io(Cause::Mismatch(s.path.clone())));
        }
        if let Some(activity) = &self.verify {
            activity.touch();
        }
        let reading = match node.read(offset, size) {
            Ok(r) => r,
            Err(NotReadable::IsDir) => return reply.error(FsError::IsDir),
            Err(NotReadable::Nothing) => return reply.error(FsError::NotFound),
        };
        let follow = self.live.is_some();
        let Some(reply) = send(&reading, Wait::No, reply, follow) else {
            return;
        };
        let reading = reading.into_owned();
        self.pool.submit(move |run| {
            if run {
                send(&reading, Wait::Yes, reply, follow);
            } else {
                reply.error(FsError::Io(Cause::Busy));
            }
        });
    }
}

/// Sends `reading` to `reply`, or its error (see [`changed`] for `follow`). Gives the reply back
/// if nothing could be sent without waiting (`wait` [`Wait::No`]).
fn send<R: ReplyData>(reading: &Reading<'_>, wait: Wait, reply: R, follow: bool) -> Option<R> {
    let mut reply = Replying(Some(reply));
    let sent = reading.send(wait, &mut reply);
    match (sent, reply.0) {
        (Some(Err(e)), Some(r)) => r.error(match e {
            e @ ReadError::Changed(_) => changed(follow, Cause::Read(e)),
            e @ ReadError::Io(_) => FsError::Io(Cause::Read(e)),
        }),
        (None, reply) => return reply,
        _ => {}
    }
    None
}

/// A reply not sent yet, as the read path sends bytes.
struct Replying<R>(Option<R>);

impl<R: ReplyData> Out for Replying<R> {
    fn bytes(&mut self, bytes: &[u8]) {
        if let Some(r) = self.0.take() {
            r.data(bytes);
        }
    }

    fn vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> bool {
        let Some(reply) = self.0.take() else {
            return false;
        };
        reply.vectored(bufs).map_err(|r| self.0 = Some(r)).is_ok()
    }
}
