//! Unit tests of [`super`].

use super::*;

fn parse(args: &[&str]) -> Result<MountOptions, String> {
    MountOptions::parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
}

#[test]
fn helper_flags_and_type() {
    let a = Args::try_parse_from([
        "tensormount",
        "SRC",
        "MNT",
        "-n",
        "-s",
        "-v",
        "-v",
        "-o",
        "ro",
        "-N",
        "/proc/self/ns/mnt",
        "-t",
        "fuse.tensormount",
    ])
    .unwrap();
    assert!(a.check().is_ok() && !a.foreground);
    let a = Args::try_parse_from(["tensormount", "SRC", "MNT", "-t", "ext4"]).unwrap();
    assert!(a.check().unwrap_err().contains("ext4"));
    assert!(invoked_as_helper(OsStr::new("/sbin/mount.tensormount")));
    assert!(invoked_as_helper(OsStr::new("mount.fuse.tensormount")));
    assert!(!invoked_as_helper(OsStr::new("/usr/local/bin/tensormount")));
}

#[test]
fn splits_with_escapes() {
    assert_eq!(split_options("a,b\\,c,,d"), ["a", "b,c", "d"]);
    assert_eq!(split_options("x\\\\y"), ["x\\y"]);
}

#[test]
fn known_options() {
    let o = parse(&["ro,allow_other", "fsname=my\\,model,strict", "auto_unmount"]).unwrap();
    assert!(o.allow_other && o.build.strict && o.auto_unmount && !o.allow_root);
    assert_eq!(o.fsname.as_deref(), Some("my,model"));
    let o = parse(&["npy,layout=tree"]).unwrap();
    assert!(o.build.npy && o.build.layout == Layout::Tree);
    assert_eq!(parse(&["layout=flat"]).unwrap().build.layout, Layout::Flat);
}

#[test]
fn direct_io_is_the_default_and_the_last_of_direct_io_and_kernel_cache_wins() {
    assert!(!parse(&[]).unwrap().kernel_cache);
    assert!(parse(&["ro,kernel_cache"]).unwrap().kernel_cache);
    assert!(!parse(&["kernel_cache", "direct_io"]).unwrap().kernel_cache);
    assert!(parse(&["direct_io,kernel_cache"]).unwrap().kernel_cache);
    assert!(parse(&["kernel_cache=1"]).is_err());
}

#[test]
fn fstab_and_mount_helper_options_are_accepted() {
    let o = parse(&[
        "rw,dev,suid,nofail,_netdev,defaults,x-systemd.automount,comment=hi,noatime,relatime",
    ])
    .unwrap();
    assert_eq!(o, MountOptions::default());
    assert!(parse(&["noexec"]).unwrap().noexec);
}

#[test]
fn unknown_options_are_named() {
    let e = parse(&["ro,bogus=1"]).unwrap_err();
    assert!(e.contains("bogus=1"), "{e}");
    assert!(parse(&["allow_other=yes"]).is_err());
    assert!(parse(&["allow_other,allow_root"]).is_err());
    let e = parse(&["layout=deep"]).unwrap_err();
    assert!(e.contains("layout=deep") && e.contains("tree"), "{e}");
    for bad in [
        "refresh=sometimes",
        "refresh",
        "refresh_interval=0",
        "refresh_interval=-1",
        "refresh_interval=soon",
        "refresh_interval=nan",
        "settle=-0.5",
        "settle=1e9",
        "source_idle=-1",
        "source_idle=later",
        "decode_cache=lots",
        "decode_cache=-1M",
        "decode_cache=2T",
        "decode_cache=",
    ] {
        let e = parse(&[bad]).unwrap_err();
        assert!(e.contains(bad), "{e}");
    }
}

#[test]
fn refresh_options() {
    let o = parse(&[]).unwrap();
    assert_eq!(o.refresh.mode, Mode::Auto);
    assert_eq!(o.refresh.interval, Duration::from_secs(30));
    assert_eq!(o.build.settle, Duration::from_secs(1));
    let o = parse(&["refresh=poll,refresh_interval=0.25,settle=0"]).unwrap();
    assert_eq!(o.refresh.mode, Mode::Poll);
    assert_eq!(o.refresh.interval, Duration::from_millis(250));
    assert_eq!(o.build.settle, Duration::ZERO);
    assert_eq!(o.sources.idle, Duration::from_secs(30));
    assert_eq!(o.sources.decode_cache, 256 << 20);
    for (v, n) in [("0", 0), ("4096", 4096), ("64K", 64 << 10), ("1g", 1 << 30)] {
        assert_eq!(
            parse(&[&format!("decode_cache={v}")])
                .unwrap()
                .sources
                .decode_cache,
            n
        );
    }
    assert_eq!(
        parse(&["source_idle=2.5"]).unwrap().sources.idle,
        Duration::from_millis(2500)
    );
    for (v, mode) in [
        ("auto", Mode::Auto),
        ("inotify", Mode::Inotify),
        ("off", Mode::Off),
    ] {
        assert_eq!(
            parse(&[&format!("refresh={v}")]).unwrap().refresh.mode,
            mode
        );
    }
}

/// Each format's toggle is taken by its option's name (`pickle=off`, as documented) and by the
/// format's own name (`pytorch=off`); its own setting is parsed by the format, once.
#[test]
fn formats_are_turned_off_by_their_toggle_or_their_name() {
    let toggled = |opt: &str| parse(&[opt]).unwrap().build.off;
    for f in Format::ALL.into_iter().filter(|f| f.toggle().is_some()) {
        let by_toggle = toggled(&format!("{}=off", f.toggle().unwrap()));
        assert_eq!(by_toggle, [f], "{f:?}");
        assert_eq!(toggled(&format!("{}=off", f.name())), [f], "{f:?}");
    }
    assert_eq!(toggled("pytorch=off,pickle=on"), []);
    // A format without a toggle (safetensors itself) is not turned off by its name.
    assert!(parse(&["safetensors=off"]).is_err());
    let e = parse(&["dcp_model="]).unwrap_err();
    assert!(e.contains("dcp_model="), "{e}");
    assert_eq!(
        parse(&["dcp_model=ema"]).unwrap().sources.settings,
        parse(&["dcp_model=all,dcp_model=ema"])
            .unwrap()
            .sources
            .settings
    );
}
