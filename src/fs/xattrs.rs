//! Extended attributes: those of the snapshot's nodes (see the namespace's table), and those only
//! the running mount knows: the root's refresh state, each tensor file's SHA-256 (computed on the
//! read pool), and `-o verify`'s verdict.

use super::{CHECK_WAIT, Cause, FsError, TensorFs};
use crate::base::digest::{Hasher, hex};
use crate::namespace::{Content, Ino, Node, ROOT, ReadAllError};
use crate::source::ReadError;

/// The root's extended attributes about the refresh.
const XATTR_GENERATION: &str = "user.tensormount.refresh_generation";
const XATTR_MODE: &str = "user.tensormount.refresh_mode";

/// A tensor file's SHA-256: of the bytes it serves. Asked for by name, it is computed; it is
/// listed only once known.
const XATTR_DIGEST: &str = "user.safetensors.sha256";

/// `-o verify`'s verdict on the bytes of a mirrored weight file, and of its tensor files.
const XATTR_VERIFIED: &str = "user.tensormount.verified";

/// The length of a SHA-256 in hex, what a size query of [`XATTR_DIGEST`] is answered at once.
const DIGEST_LEN: usize = 64;

/// Where the value of an extended attribute goes: the kernel's reply, or a test's.
pub trait ReplyValue: Send + 'static {
    fn value(self, value: Result<Vec<u8>, FsError>);
}

impl<B: Send + Sync + 'static> TensorFs<B> {
    /// The value of the extended attribute `name` of `ino`, to `reply` (later, from the read pool,
    /// for a tensor file's digest not known yet). `size_only`: the kernel asks only for the
    /// length, which a digest's is known without computing it.
    pub fn getxattr<R: ReplyValue>(&self, ino: Ino, name: &[u8], size_only: bool, reply: R) {
        let node = match self.node(ino) {
            Ok(n) => n,
            Err(e) => return reply.value(Err(e)),
        };
        self.look_up_recorded(&node);
        if name == XATTR_DIGEST.as_bytes() && serves_tensor(&node) {
            if size_only {
                return reply.value(Ok(vec![0; DIGEST_LEN]));
            }
            return self.tensor_digest(ino, node, reply);
        }
        reply.value(self.xattr_now(ino, &node, name));
    }

    /// The value of an attribute known without reading any file.
    fn xattr_now(&self, ino: Ino, node: &Node, name: &[u8]) -> Result<Vec<u8>, FsError> {
        if !name.starts_with(b"user.") {
            // Namespaces this filesystem does not serve (security., system., trusted.).
            return Err(FsError::OtherNamespace);
        }
        let own = match ino {
            ROOT => self.root_xattr(name),
            _ if name == XATTR_VERIFIED.as_bytes() => verdict(node).map(Vec::from),
            _ => None,
        };
        own.or_else(|| std::str::from_utf8(name).ok().and_then(|n| node.xattr(n)))
            .ok_or(FsError::NoAttribute)
    }

    /// The SHA-256 of the bytes the tensor file `ino` serves: remembered, or read through on the
    /// read pool (never on a FUSE thread) and remembered.
    fn tensor_digest<R: ReplyValue>(&self, ino: Ino, node: Node, reply: R) {
        if let Some(d) = self.digests.get(ino) {
            return reply.value(Ok(hex(&d).into_bytes()));
        }
        let digests = self.digests.clone();
        self.pool.submit(move |run| {
            if !run {
                return reply.value(Err(FsError::Io(Cause::Busy)));
            }
            let mut h = Hasher::default();
            let read = node.read_all(|b| {
                h.update(b);
                true
            });
            reply.value(match read {
                Ok(()) => {
                    let d = h.finish();
                    digests.insert(ino, d);
                    Ok(hex(&d).into_bytes())
                }
                Err(ReadAllError::Source(e)) => Err(FsError::Io(Cause::Read(e))),
                Err(ReadAllError::NotReadable(_)) => Err(FsError::Io(Cause::Read(ReadError::Io(
                    "not readable".into(),
                )))),
            });
        });
    }

    /// The names of the extended attributes of `ino`, each followed by a NUL.
    pub fn listxattr(&self, ino: Ino) -> Result<Vec<u8>, FsError> {
        let node = self.node(ino)?;
        self.look_up_recorded(&node);
        let mut names = node.xattr_names();
        if ino == ROOT {
            names.extend([XATTR_GENERATION, XATTR_MODE].map(String::from));
        }
        // Listed once known, so that `getfattr -d` never reads a tensor's bytes.
        if serves_tensor(&node) && self.digests.get(ino).is_some() {
            names.push(XATTR_DIGEST.into());
        }
        if verdict(&node).is_some() {
            names.push(XATTR_VERIFIED.into());
        }
        let mut list = Vec::new();
        for name in names {
            list.extend_from_slice(name.as_bytes());
            list.push(0);
        }
        Ok(list)
    }

    /// Looks up the digest SOURCE records for a mirrored file on a filesystem that may stall on the
    /// read pool, within a bounded wait (past it, the attribute is absent until it answers).
    fn look_up_recorded(&self, node: &Node) {
        let Content::Mirror { source, .. } = &node.content else {
            return;
        };
        if !source.remote || source.recorded_if_known().is_some() {
            return;
        }
        let s = source.clone();
        let dev = source.version.id.dev;
        let _ = self.pool.within_unless_stalled(dev, CHECK_WAIT, move || {
            s.recorded();
        });
    }

    /// The root's own extended attributes: the refresh generation and mode.
    fn root_xattr(&self, name: &[u8]) -> Option<Vec<u8>> {
        let value = match name {
            n if n == XATTR_GENERATION.as_bytes() => self.ns.applied().to_string(),
            n if n == XATTR_MODE.as_bytes() => match &self.live {
                Some(live) => live.refresh.mode().to_string(),
                None => "off".to_string(),
            },
            _ => return None,
        };
        Some(value.into_bytes())
    }
}

/// Whether `node` is a tensor file (or its NPY view), which has a digest of its own.
fn serves_tensor(node: &Node) -> bool {
    matches!(node.content, Content::Tensor { .. } | Content::Npy { .. })
}

/// `-o verify`'s verdict on the bytes `node` serves, once its source was hashed.
fn verdict(node: &Node) -> Option<&'static [u8]> {
    Some(node.source()?.verdict()?.name().as_bytes())
}
