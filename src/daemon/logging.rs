//! Where log records go: stderr (the default), a file (`--log-file`, appended), or syslog
//! (`/dev/log`, RFC 3164 `<PRI>tensormount[PID]: message`, facility daemon) for a background daemon
//! without a log file. The `RUST_LOG` filter comes from env_logger.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use log::{Level, LevelFilter, Log, Metadata, Record};

enum Sink {
    Stderr,
    File(File, PathBuf),
    /// Connected lazily (and again after a failure): syslogd may start after the daemon.
    Syslog(Option<UnixDatagram>),
}

static SINK: Mutex<Sink> = Mutex::new(Sink::Stderr);

struct Logger {
    filter: env_logger::Logger,
}

impl Log for Logger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.filter.enabled(metadata)
    }

    fn log(&self, record: &Record<'_>) {
        let message = record.args().to_string();
        let level = level_of(record.target(), record.level(), &message);
        let metadata = Metadata::builder()
            .level(level)
            .target(record.target())
            .build();
        if !self.filter.enabled(&metadata) {
            return;
        }
        let Ok(mut sink) = SINK.lock() else {
            return;
        };
        let text = match level {
            Level::Warn => message,
            level => format!("{}: {message}", level.as_str().to_lowercase()),
        };
        match &mut *sink {
            Sink::Stderr => {
                let _ = writeln!(io::stderr().lock(), "tensormount: {text}");
            }
            Sink::File(f, _) => {
                // One write per record, so that concurrent appenders never interleave within a line.
                let _ = f.write_all(format!("tensormount: {text}\n").as_bytes());
            }
            Sink::Syslog(sock) => syslog(sock, level, &text),
        }
    }

    fn flush(&self) {}
}

/// The level a record is logged at. fuser logs an error when the kernel refuses a reply with
/// ENOENT, which means the kernel no longer waits for that request: the connection was closed by
/// an unmount (a release answered while the filesystem goes away) or the request was dropped.
/// Nothing is lost and nobody waits, so it is debug, not an error in an operator's log (libfuse
/// ignores ENOENT on a reply for the same reason).
fn level_of(target: &str, level: Level, message: &str) -> Level {
    let gone = target == "fuser::reply"
        && message.starts_with("Failed to send FUSE reply")
        && message.ends_with("(os error 2)");
    if gone { Level::Debug } else { level }
}

/// An RFC 3164 line as local syslog daemons take it: `<PRI>tensormount[PID]: text`, facility daemon.
fn syslog_line(level: Level, pid: u32, text: &str) -> String {
    const LOG_DAEMON: u8 = 3 << 3;
    let severity = match level {
        Level::Error => 3,
        Level::Warn => 4,
        Level::Info => 6,
        Level::Debug | Level::Trace => 7,
    };
    format!("<{}>tensormount[{pid}]: {text}", LOG_DAEMON | severity)
}

fn syslog(sock: &mut Option<UnixDatagram>, level: Level, text: &str) {
    let line = syslog_line(level, std::process::id(), text);
    if sock.is_none() {
        *sock = UnixDatagram::unbound()
            .and_then(|s| s.connect("/dev/log").map(|()| s))
            .ok();
    }
    if let Some(s) = sock
        && s.send(line.as_bytes()).is_err()
    {
        *sock = None;
    }
}

/// Installs the logger: warnings by default, `RUST_LOG` overrides the filter. fuser's own warning
/// about unmounting an already unmounted filesystem on exit is noise, so its session module logs
/// errors only. With `log_file`, records are appended there from now on instead of stderr.
pub fn init(log_file: Option<&Path>) -> Result<(), String> {
    if let Some(path) = log_file {
        let file = File::options()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| format!("{}: cannot open the log file: {e}", path.display()))?;
        set_sink(Sink::File(file, path.to_path_buf()));
    }
    let env = env_logger::Env::default().default_filter_or("warn,fuser::session=error");
    let filter = env_logger::Builder::from_env(env).build();
    let max: LevelFilter = filter.filter();
    if log::set_boxed_logger(Box::new(Logger { filter })).is_ok() {
        log::set_max_level(max);
    }
    Ok(())
}

/// In a background daemon: records that would go to stderr (now /dev/null) go to syslog instead.
/// A log file stays the log file.
pub fn detached() {
    if let Ok(mut sink) = SINK.lock()
        && matches!(*sink, Sink::Stderr)
    {
        *sink = Sink::Syslog(None);
    }
}

/// Where records go now, as an argument for [`init_from_arg`] in another process (the
/// auto-unmount watcher): `stderr`, `syslog`, or the log file's path.
pub fn sink_arg() -> OsString {
    let Ok(sink) = SINK.lock() else {
        return "stderr".into();
    };
    match &*sink {
        Sink::Stderr => "stderr".into(),
        Sink::Syslog(_) => "syslog".into(),
        Sink::File(_, path) => path.clone().into_os_string(),
    }
}

/// Installs the logger with records going where [`sink_arg`] said.
pub fn init_from_arg(arg: &OsStr) -> Result<(), String> {
    match arg.to_str() {
        Some("stderr") => init(None),
        Some("syslog") => {
            init(None)?;
            detached();
            Ok(())
        }
        _ => init(Some(Path::new(arg))),
    }
}

fn set_sink(new: Sink) {
    if let Ok(mut sink) = SINK.lock() {
        *sink = new;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_the_kernel_no_longer_waits_for_are_debug() {
        let enoent = std::io::Error::from_raw_os_error(libc::ENOENT);
        let gone = format!("Failed to send FUSE reply: {enoent}");
        assert_eq!(level_of("fuser::reply", Level::Error, &gone), Level::Debug);
        let einval = std::io::Error::from_raw_os_error(libc::EINVAL);
        let bad = format!("Failed to send FUSE reply: {einval}");
        assert_eq!(level_of("fuser::reply", Level::Error, &bad), Level::Error);
        assert_eq!(level_of("tensormount", Level::Error, &gone), Level::Error);
        assert_eq!(level_of("fuser::reply", Level::Warn, "x"), Level::Warn);
    }

    #[test]
    fn syslog_lines() {
        assert_eq!(
            syslog_line(Level::Warn, 42, "x: changed"),
            "<28>tensormount[42]: x: changed"
        );
        assert_eq!(syslog_line(Level::Error, 7, "e"), "<27>tensormount[7]: e");
        assert_eq!(syslog_line(Level::Debug, 7, "d"), "<31>tensormount[7]: d");
    }
}
