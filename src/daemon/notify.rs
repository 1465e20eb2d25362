//! systemd's readiness protocol (sd_notify) without libsystemd: one datagram of `KEY=VALUE` lines
//! to the Unix socket named by `$NOTIFY_SOCKET` (a path, or an abstract name when it starts with
//! `@`). Without `$NOTIFY_SOCKET` nothing is sent.

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Sends `state` (e.g. `READY=1`) to `$NOTIFY_SOCKET`, if set. Failures are logged, not fatal: the
/// mount works either way, and systemd reports a unit that never became ready.
pub fn notify(state: &str) {
    let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    if let Err(e) = send(&socket, state) {
        log::warn!("cannot notify systemd at {}: {e}", socket.to_string_lossy());
    }
}

fn send(socket: &std::ffi::OsStr, state: &str) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = socket.as_bytes();
    let addr = match bytes.strip_prefix(b"@") {
        Some(name) => SocketAddr::from_abstract_name(name)?,
        None if bytes.starts_with(b"/") => SocketAddr::from_pathname(socket)?,
        None => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not an absolute path or an @abstract name",
            ));
        }
    };
    let sock = UnixDatagram::unbound()?;
    sock.send_to_addr(state.as_bytes(), &addr)?;
    Ok(())
}
