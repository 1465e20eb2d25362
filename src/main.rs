#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use clap::FromArgMatches;

use tensormount::cli::{self, Args, MountOptions};
use tensormount::fs::{Live, TensorFs, Tuning};
use tensormount::namespace::{Namespace, Options, Writer};
use tensormount::refresh::{self, Follow, Mode};
use tensormount::{daemon, listing, logging};

fn main() -> ExitCode {
    let args = match Args::from_arg_matches(&cli::command().get_matches()) {
        Ok(args) => args,
        Err(e) => e.exit(),
    };
    let helper = std::env::args_os()
        .next()
        .is_some_and(|a| cli::invoked_as_helper(&a));
    match logging::init(args.log_file.as_deref()).and_then(|()| run(args, helper)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tensormount: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `helper`: invoked as `mount.tensormount` by mount(8), where `-f` means "fake" (validate the
/// options, mount nothing) and the daemon always goes to the background.
fn run(args: Args, helper: bool) -> Result<(), String> {
    args.check()?;
    let opts = MountOptions::parse(&args.options)?;
    if helper && args.foreground {
        return Ok(());
    }
    let build = Options {
        strict: opts.strict,
        layout: opts.layout,
        npy: opts.npy,
        widen: opts.widen,
        settle: opts.settle,
    };
    if args.list {
        let (_, tree) = Writer::build(&args.source, &build).map_err(|e| e.to_string())?;
        let rows = tree.list();
        let out = if args.json {
            listing::json(&rows)
        } else {
            format!("{}\n{}", listing::table(&rows), listing::summary(&rows))
        };
        return std::io::stdout()
            .write_all(out.as_bytes())
            .map_err(|e| e.to_string());
    }
    let Some(mountpoint) = args.mountpoint else {
        return Err("no MOUNTPOINT given".into());
    };
    let source = std::fs::canonicalize(&args.source)
        .map_err(|e| format!("{}: {e}", args.source.display()))?;
    let mnt = daemon::check_mountpoint(&mountpoint)?;
    let live = opts.refresh.mode != Mode::Off;
    let inotify = refresh::inotify_for(&opts.refresh);
    let (writer, tree) = Writer::build(&source, &build).map_err(|e| e.to_string())?;
    let fsname = opts
        .fsname
        .clone()
        .unwrap_or_else(|| source.to_string_lossy().into_owned());
    let tuning = Tuning::from_env();
    let config = daemon::fuse_config(&opts, fsname, tuning.threads);
    let ns = Arc::new(Namespace::new(tree, live));
    let (follow, fs) = if live {
        let (follow, refresh, invalidate) =
            Follow::new(writer, ns.clone(), (opts.refresh, inotify));
        let live = Live {
            refresh,
            invalidate,
        };
        (Some(follow), TensorFs::new(ns, Some(live), tuning))
    } else {
        // Frozen: what the scans found is never needed again.
        drop(writer);
        (None, TensorFs::new(ns, None, tuning))
    };
    if args.foreground && !helper {
        daemon::run_foreground(fs, &mnt, &config, follow, opts.source_idle)
    } else {
        daemon::run_background(fs, &mnt, &config, follow, opts.source_idle)
    }
}
