//! The command: options parsed, logging set up, SOURCE built into a tree, then `--list` printed
//! or the tree mounted (in the foreground, or by a daemon in the background).

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use clap::FromArgMatches;

use crate::base::clock::Clock;
use crate::base::sys;
use crate::command::cli::{self, Args, Command, MountOptions};
use crate::command::diff;
use crate::command::list;
use crate::command::verify;
use crate::daemon::logging;
use crate::daemon::unmount;
use crate::daemon::{self, Serve};
use crate::fs::integrity::{Activity, Verifier};
use crate::fs::tuning::Tuning;
use crate::fs::{Live, TensorFs};
use crate::fuse::Fuse;
use crate::namespace::{Namespace, Writer};
use crate::refresh::{self, Follow, Mode};
use crate::source::Sources;

/// `tensormount`'s `main`: exit 0 once mounted (or listed), 1 with a message on stderr otherwise.
pub fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv
        .first()
        .is_some_and(|a| std::path::Path::new(a).file_name() == Some(unmount::NAME.as_ref()))
    {
        return unmount::main(&argv[1..]);
    }
    let args = match Args::from_arg_matches(&cli::command().get_matches()) {
        Ok(args) => args,
        Err(e) => e.exit(),
    };
    let helper = std::env::args_os()
        .next()
        .is_some_and(|a| cli::invoked_as_helper(&a));
    if let Some(command) = args.command {
        // Warnings (a file that cannot be interpreted, or opened) go to stderr.
        if let Err(e) = logging::init(None) {
            eprintln!("tensormount: {e}");
        }
        return match command {
            Command::Verify(v) => verify::main(v),
            Command::Diff(d) => diff::main(d),
        };
    }
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
    let Some(source) = args.source.clone() else {
        return Err("no SOURCE given".into());
    };
    let opts = MountOptions::parse(&args.options)?;
    if helper && args.foreground {
        return Ok(());
    }
    let build = opts.build.clone();
    // Every source may hold a descriptor: as many as the hard limit allows.
    let sources = Sources::configured(
        Clock::system(),
        sys::raise_descriptor_limit(),
        &opts.sources,
    );
    if args.list {
        let (_, tree) = Writer::build(&sources, &source, &build).map_err(|e| e.to_string())?;
        let rows = tree.list();
        let out = if args.json {
            list::json(&rows, tree.list_metadata())
        } else {
            format!("{}\n{}", list::table(&rows), list::summary(&rows))
        };
        return std::io::stdout()
            .write_all(out.as_bytes())
            .map_err(|e| e.to_string());
    }
    let Some(mountpoint) = args.mountpoint else {
        return Err("no MOUNTPOINT given".into());
    };
    let source =
        std::fs::canonicalize(&source).map_err(|e| format!("{}: {e}", source.display()))?;
    let mnt = daemon::check_mountpoint(&mountpoint)?;
    let live = opts.refresh.mode != Mode::Off;
    let inotify = refresh::inotify_for(&opts.refresh);
    let (writer, tree) = Writer::build(&sources, &source, &build).map_err(|e| e.to_string())?;
    let fsname = opts
        .fsname
        .clone()
        .unwrap_or_else(|| source.to_string_lossy().into_owned());
    let mut tuning = Tuning::from_env();
    tuning.direct_io &= !opts.kernel_cache;
    let config = daemon::fuse_config(&opts, fsname, tuning.threads);
    let ns = Arc::new(Namespace::new(tree, live));
    let (follow, fs, invalidate) = if live {
        let (follow, refresh, invalidate) =
            Follow::new(writer, ns.clone(), sources.clone(), (opts.refresh, inotify));
        let live = Live {
            refresh,
            invalidate: invalidate.clone(),
        };
        let fs = TensorFs::new(ns.clone(), Some(live), tuning);
        (Some(follow), fs, Some(invalidate))
    } else {
        // Frozen: what the scans found is never needed again.
        drop(writer);
        (None, TensorFs::new(ns.clone(), None, tuning), None)
    };
    let activity = opts.verify.then(Arc::<Activity>::default);
    let fs = fs.verifying(activity.clone());
    let verifier = activity.map(|activity| Verifier {
        ns,
        invalidate,
        activity,
    });
    let serve = Serve {
        sources,
        source_idle: opts.sources.idle,
        follow,
        verifier,
        auto_unmount: opts.auto_unmount,
    };
    if args.foreground && !helper {
        daemon::run_foreground(Fuse::new(fs), &mnt, &config, serve)
    } else {
        daemon::run_background(Fuse::new(fs), &mnt, &config, serve)
    }
}
