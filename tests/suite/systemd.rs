//! systemd and mount(8) integration: the unit file, sd_notify readiness, --log-file, the mount
//! helper's calling conventions and the fstab generator's view of a tensormount line.

use std::fs;
use std::io::ErrorKind;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::common::*;

fn example() -> PathBuf {
    fs::canonicalize(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/tiny-model")).unwrap()
}

fn show(o: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        stdout(o),
        stderr(o)
    )
}

/// A temporary directory with an empty `mnt` in it; anything mounted there is unmounted on drop.
struct Mnt {
    tmp: TempDir,
    dir: PathBuf,
}

impl Mnt {
    fn new(tag: &str) -> Mnt {
        let tmp = TempDir::new(tag);
        let dir = fs::canonicalize(tmp.path()).unwrap().join("mnt");
        fs::create_dir(&dir).unwrap();
        Mnt { tmp, dir }
    }
}

impl Drop for Mnt {
    fn drop(&mut self) {
        for _ in 0..3 {
            if !is_mounted(&self.dir) {
                break;
            }
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}

/// A datagram socket standing in for systemd's notification socket.
fn notify_socket(dir: &Path) -> (UnixDatagram, String) {
    let path = dir.join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    (sock, s(&path).to_string())
}

fn recv(sock: &UnixDatagram) -> String {
    let mut buf = [0u8; 4096];
    let n = sock
        .recv(&mut buf)
        .unwrap_or_else(|e| panic!("no notification: {e}"));
    String::from_utf8(buf[..n].to_vec()).unwrap()
}

fn lines(msg: &str) -> Vec<&str> {
    msg.lines().collect()
}

// ---------------------------------------------------------------------------------------------
// The unit file
// ---------------------------------------------------------------------------------------------

/// `systemd-analyze verify` on an instance of every unit under systemd/, with the installed path
/// of the binary rewritten to the built one (verify checks that ExecStart= is executable). What
/// this verifies: the syntax and values of every setting, that the commands exist, and the
/// dependencies' names; not that the unit runs (no systemd manager here). A deliberately broken
/// copy must fail, so a verify that checks nothing cannot pass.
#[test]
fn systemd_analyze_verify_accepts_the_units() {
    require_tools(&["systemd-analyze"]);
    let units = Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd");
    let built = fs::canonicalize(bin()).unwrap();
    let mut seen = 0;
    for entry in fs::read_dir(&units).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        if !(name.ends_with(".service") || name.ends_with(".mount") || name.ends_with(".target")) {
            continue;
        }
        seen += 1;
        let text = fs::read_to_string(&path).unwrap();
        assert!(text.contains("ExecStart=tensormount "), "{name}");
        let instance = name.replace("@.", "@llama.");
        let tmp = TempDir::new("unit");
        let rewritten = text.replace(
            "ExecStart=tensormount ",
            &format!("ExecStart={} ", s(&built)),
        );
        let unit = tmp.join(&instance);
        fs::write(&unit, &rewritten).unwrap();
        let out = Command::new("systemd-analyze")
            .arg("verify")
            .arg(&unit)
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}: {}", show(&out));
        assert!(
            !stderr(&out).contains(&instance),
            "{name}: complaints: {}",
            show(&out)
        );

        let broken = tmp.join("broken").join(&instance);
        fs::create_dir(broken.parent().unwrap()).unwrap();
        fs::write(
            &broken,
            rewritten.replace(s(&built), "/nonexistent/tensormount"),
        )
        .unwrap();
        let out = Command::new("systemd-analyze")
            .arg("verify")
            .arg(&broken)
            .output()
            .unwrap();
        assert!(
            !out.status.success(),
            "broken {name} passed: {}",
            show(&out)
        );
    }
    assert!(seen > 0);
    let service = fs::read_to_string(units.join("tensormount@.service")).unwrap();
    for line in [
        "Type=notify",
        "EnvironmentFile=/etc/tensormount/%i.conf",
        "ExecStart=tensormount -f ${SOURCE} ${MOUNTPOINT} -o ro,${OPTIONS}",
        "ExecStopPost=-/bin/umount -l ${MOUNTPOINT}",
        "Restart=on-failure",
    ] {
        assert!(service.lines().any(|l| l == line), "missing {line}");
    }
}

// ---------------------------------------------------------------------------------------------
// sd_notify
// ---------------------------------------------------------------------------------------------

/// A foreground daemon started with `NOTIFY_SOCKET` set to `notify` (or unset), not waited for:
/// the tests wait for its readiness message instead.
fn notified(src: &Path, mnt: &Path, opts: &[&str], notify: Option<&str>) -> Daemon {
    Daemon::start(src, mnt, opts, &mnt.with_extension("stderr"), |cmd| {
        match notify {
            Some(n) => cmd.env("NOTIFY_SOCKET", n),
            None => cmd.env_remove("NOTIFY_SOCKET"),
        };
    })
    .unwrap()
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn foreground_notifies_ready_once_mounted_and_stopping_on_sigterm() {
    require_fuse();
    let m = Mnt::new("notify-fg");
    let (sock, path) = notify_socket(m.tmp.path());
    let src = example();
    let mut fg = notified(&src, &m.dir, &[], Some(&path));
    let msg = recv(&sock);
    // At the moment READY=1 arrives, the mount is there and serves.
    assert!(is_mounted(&m.dir), "READY=1 before the mount existed");
    let ls = Command::new("ls").arg(&m.dir).output().unwrap();
    assert!(ls.status.success(), "{}", show(&ls));
    assert!(
        stdout(&ls).contains("model.safetensors.index.json"),
        "{}",
        show(&ls)
    );
    assert_eq!(lines(&msg), ["READY=1"], "{msg:?}");

    fg.signal(libc::SIGTERM);
    assert_eq!(lines(&recv(&sock)), ["STOPPING=1"]);
    let st = fg.wait(Duration::from_secs(10));
    assert_eq!(st.code(), Some(0), "{st}: {}", fg.stderr());
    assert!(!is_mounted(&m.dir));
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn foreground_notifies_an_abstract_socket() {
    require_fuse();
    let m = Mnt::new("notify-abs");
    let name = format!("tensormount-test-{}", std::process::id());
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let sock = UnixDatagram::bind_addr(&addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let src = example();
    let mut fg = notified(&src, &m.dir, &[], Some(&format!("@{name}")));
    assert_eq!(lines(&recv(&sock)), ["READY=1"]);
    assert!(is_mounted(&m.dir));
    fg.signal(libc::SIGINT);
    assert_eq!(lines(&recv(&sock)), ["STOPPING=1"]);
    assert_eq!(fg.wait(Duration::from_secs(10)).code(), Some(0));
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn background_daemon_notifies_ready_with_mainpid_before_the_command_returns() {
    require_fuse();
    let m = Mnt::new("notify-bg");
    let (sock, path) = notify_socket(m.tmp.path());
    let src = example();
    let out = Command::new(bin())
        .args([s(&src), s(&m.dir)])
        .env("NOTIFY_SOCKET", &path)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    assert!(is_mounted(&m.dir));
    // Already queued: no waiting.
    sock.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 4096];
    let n = match sock.recv(&mut buf) {
        Ok(n) => n,
        Err(e) if e.kind() == ErrorKind::WouldBlock => {
            panic!("no READY=1 when the command returned")
        }
        Err(e) => panic!("{e}"),
    };
    let msg = String::from_utf8(buf[..n].to_vec()).unwrap();
    let l = lines(&msg);
    assert_eq!(l.first(), Some(&"READY=1"), "{msg:?}");
    let pid: i32 = l
        .iter()
        .find_map(|x| x.strip_prefix("MAINPID="))
        .unwrap_or_else(|| panic!("no MAINPID in {msg:?}"))
        .parse()
        .unwrap();
    // MAINPID is the daemon serving this mount.
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    assert!(
        args.contains(&m.dir.to_str().unwrap().as_bytes()),
        "{msg:?}"
    );

    let um = Command::new("umount").arg(&m.dir).output().unwrap();
    assert!(um.status.success(), "{}", show(&um));
    wait_for("daemon exit", || {
        fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|st| st.split(' ').nth(2) == Some("Z"))
            .unwrap_or(true)
    });
}

// ---------------------------------------------------------------------------------------------
// --log-file
// ---------------------------------------------------------------------------------------------

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn log_file_receives_warnings_while_serving() {
    require_fuse();
    let m = Mnt::new("logfile");
    let src = m.tmp.join("model.safetensors");
    write_safetensors(
        &src,
        &[
            T {
                name: "a",
                dtype: "U8",
                shape: &[4096],
                data: bytes(4096, 1),
            },
            T {
                name: "b",
                dtype: "U8",
                shape: &[65536],
                data: bytes(65536, 2),
            },
        ],
        None,
    );
    let log = m.tmp.join("tensormount.log");
    fs::write(&log, "earlier line\n").unwrap();
    // Frozen (refresh=off), so that the truncated file stays in the tree and reads of it warn.
    let mut fg = notified(
        &src,
        &m.dir,
        &["-o", "refresh=off", "--log-file", s(&log)],
        None,
    );
    wait_for("mount", || is_mounted(&m.dir));
    let list = run(&["--list", "--json", s(&src)]);
    let rows: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let b = rows["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "b")
        .unwrap()["path"]
        .as_str()
        .unwrap()
        .to_string();
    let len = fs::metadata(&src).unwrap().len();
    fs::File::options()
        .write(true)
        .open(&src)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let err = fs::read(m.dir.join(&b)).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");

    let text = fs::read_to_string(&log).unwrap();
    assert!(text.starts_with("earlier line\n"), "not appended: {text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("tensormount: ") && l.contains("changed in place")),
        "{text}"
    );
    fg.signal(libc::SIGTERM);
    assert_eq!(fg.wait(Duration::from_secs(10)).code(), Some(0));
    let err = fg.stderr();
    assert!(!err.contains("changed since"), "went to stderr too: {err}");
}

/// The background daemon, once detached, logs to syslog. In a private mount namespace whose /dev is
/// a fresh tmpfs (holding only `fuse`, `null` and `log`), `/dev/log` is the test's own socket.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn detached_daemon_logs_warnings_to_syslog() {
    require_fuse();
    let m = Mnt::new("syslog");
    let root = fs::canonicalize(m.tmp.path()).unwrap();
    let src = root.join("model.safetensors");
    write_safetensors(
        &src,
        &[T {
            name: "t",
            dtype: "U8",
            shape: &[65536],
            data: bytes(65536, 3),
        }],
        None,
    );
    let sock_path = root.join("log.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    fs::create_dir(root.join("olddev")).unwrap();
    let script = format!(
        r#"set -e
trap 'umount -l {mnt} 2>/dev/null || true' EXIT
mount --bind /dev {root}/olddev
mount -t tmpfs tmpfs /dev
for n in fuse null; do touch /dev/$n; mount --bind {root}/olddev/$n /dev/$n; done
touch /dev/log
mount --bind {sock} /dev/log
{bin} -o refresh=off {src} {mnt}
truncate -s 1000 {src}
cat {mnt}/t >/dev/null 2>&1 || echo MARK-EIO
umount {mnt}
"#,
        root = s(&root),
        mnt = s(&m.dir),
        sock = s(&sock_path),
        bin = bin(),
        src = s(&src),
    );
    let out = in_private_mount_namespace(&script);
    assert!(out.status.success(), "{}", show(&out));
    assert!(stdout(&out).contains("MARK-EIO"), "{}", show(&out));
    assert!(!stderr(&out).contains("changed in place"), "{}", show(&out));
    let mut buf = vec![0; 65536];
    let n = sock.recv(&mut buf).expect("a syslog datagram");
    let line = String::from_utf8_lossy(&buf[..n]).into_owned();
    // <28> = facility daemon (3 << 3) | severity warning (4).
    assert!(line.starts_with("<28>tensormount["), "{line}");
    assert!(
        line.contains(&format!("{}: changed in place", s(&src))),
        "{line}"
    );
}

// ---------------------------------------------------------------------------------------------
// mount(8) helper conventions
// ---------------------------------------------------------------------------------------------

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn helper_flags_are_tolerated() {
    require_fuse();
    let m = Mnt::new("helper-flags");
    let src = example();
    let out = run(&[
        s(&src),
        s(&m.dir),
        "-n",
        "-s",
        "-v",
        "-o",
        "ro",
        "-N",
        "/proc/self/ns/mnt",
        "-t",
        "fuse.tensormount",
    ]);
    assert!(out.status.success(), "{}", show(&out));
    assert!(is_mounted(&m.dir));
    assert!(fs::read_dir(&m.dir).unwrap().count() > 0);
    let um = Command::new("umount").arg(&m.dir).output().unwrap();
    assert!(um.status.success(), "{}", show(&um));

    let out = run(&[s(&src), s(&m.dir), "-t", "ext4"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("ext4"), "{}", show(&out));
    assert!(!is_mounted(&m.dir));
}

/// Runs a shell script as root in a private mount namespace (its mounts are not seen outside).
fn in_private_mount_namespace(script: &str) -> Output {
    Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", script])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn helper_link(dir: &Path) -> PathBuf {
    let link = dir.join("mount.tensormount");
    std::os::unix::fs::symlink(fs::canonicalize(bin()).unwrap(), &link).unwrap();
    link
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn mount_helper_fake_mounts_nothing() {
    require_fuse();
    let m = Mnt::new("helper-fake");
    let helper = helper_link(m.tmp.path());
    let src = example();
    let out = Command::new(&helper)
        .args(["-f", s(&src), s(&m.dir)])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    std::thread::sleep(Duration::from_millis(200));
    assert!(!is_mounted(&m.dir));
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn mount_helper_mounts_in_the_background() {
    require_fuse();
    let m = Mnt::new("helper-bg");
    let helper = helper_link(m.tmp.path());
    let src = example();
    let out = Command::new(&helper)
        .args([s(&src), s(&m.dir), "-o", "ro"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    assert!(is_mounted(&m.dir));
    assert!(fs::read_dir(&m.dir).unwrap().count() > 0);
    let um = Command::new("umount").arg(&m.dir).output().unwrap();
    assert!(um.status.success(), "{}", show(&um));
}

// ---------------------------------------------------------------------------------------------
// fstab through systemd's generator
// ---------------------------------------------------------------------------------------------

fn fstab_generator() -> Option<PathBuf> {
    [
        "/usr/lib/systemd/system-generators/systemd-fstab-generator",
        "/lib/systemd/system-generators/systemd-fstab-generator",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
}

fn unit_setting<'a>(unit: &'a str, key: &str) -> Option<&'a str> {
    unit.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
}

#[test]
fn fstab_generator_makes_mount_and_automount_units() {
    let generator = fstab_generator()
        .expect("no systemd-fstab-generator: `tests/run` (as root) installs the package systemd");
    let tmp = TempDir::new("fstab-gen");
    let out_dir = tmp.join("out");
    fs::create_dir(&out_dir).unwrap();
    let fstab = tmp.join("fstab");
    fs::write(
        &fstab,
        "/models/llama /mnt/llama fuse.tensormount ro,nofail,x-systemd.automount 0 0\n",
    )
    .unwrap();
    let out = Command::new(&generator)
        .args([&out_dir, &out_dir, &out_dir])
        .env("SYSTEMD_FSTAB", &fstab)
        .env("SYSTEMD_LOG_LEVEL", "debug")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));

    let mount = fs::read_to_string(out_dir.join("mnt-llama.mount"))
        .unwrap_or_else(|e| panic!("no mnt-llama.mount ({e}): {}", show(&out)));
    assert_eq!(
        unit_setting(&mount, "What"),
        Some("/models/llama"),
        "{mount}"
    );
    assert_eq!(unit_setting(&mount, "Where"), Some("/mnt/llama"), "{mount}");
    assert_eq!(
        unit_setting(&mount, "Type"),
        Some("fuse.tensormount"),
        "{mount}"
    );
    let options = unit_setting(&mount, "Options").unwrap_or_default();
    assert!(options.split(',').any(|o| o == "ro"), "{mount}");
    // Every option the generator passes on is one tensormount accepts.
    let check = run(&["--list", "-o", options, s(&example())]);
    assert!(check.status.success(), "{}", show(&check));

    let automount = fs::read_to_string(out_dir.join("mnt-llama.automount"))
        .unwrap_or_else(|e| panic!("no mnt-llama.automount ({e}): {}", show(&out)));
    assert_eq!(
        unit_setting(&automount, "Where"),
        Some("/mnt/llama"),
        "{automount}"
    );
}

/// `mount -t tensormount SRC MNT` through the real mount(8), which runs `/sbin/mount.tensormount`:
/// in a private mount namespace where /usr/sbin (= /sbin) is a directory holding only that link.
/// mount(8) adds `rw` to the options, which the helper takes silently.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn mount_t_tensormount_runs_the_helper_link() {
    require_fuse();
    let m = Mnt::new("mount-t");
    let bindir = fs::canonicalize(m.tmp.path()).unwrap().join("sbin");
    fs::create_dir(&bindir).unwrap();
    helper_link(&bindir);
    let src = example();
    let script = format!(
        r#"set -e
trap 'umount -l {mnt} 2>/dev/null || true' EXIT
mount --bind {bindir} /usr/sbin
mount -t tensormount {src} {mnt} -o npy,layout=tree
echo MARK-MOUNTED
ls {mnt}
ls {mnt}/model.tensors/model/layers/0/input_layernorm
grep " {mnt} " /proc/mounts
umount {mnt}
grep -q " {mnt} " /proc/mounts || echo MARK-GONE
"#,
        mnt = s(&m.dir),
        bindir = s(&bindir),
        src = s(&src),
    );
    let out = in_private_mount_namespace(&script);
    assert!(out.status.success(), "{}", show(&out));
    let text = stdout(&out);
    let mounted = text
        .split("MARK-MOUNTED")
        .nth(1)
        .unwrap_or_else(|| panic!("{}", show(&out)));
    for entry in ["model.tensors", "weight", "weight.npy"] {
        assert!(
            mounted.lines().any(|l| l == entry),
            "{entry}: {}",
            show(&out)
        );
    }
    assert!(!stderr(&out).contains("rw"), "{}", show(&out));
    assert!(
        mounted.lines().any(|l| l.starts_with(&format!(
            "{} {} fuse.tensormount ro,",
            s(&src),
            s(&m.dir)
        ))),
        "{}",
        show(&out)
    );
    assert!(text.contains("MARK-GONE"), "{}", show(&out));
    assert!(!is_mounted(&m.dir));
}
