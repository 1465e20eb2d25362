#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use tensormount::cli::{Args, MountOptions};
use tensormount::fs::{TensorFs, Tuning};
use tensormount::namespace::{Options, Tree};
use tensormount::{daemon, listing};

fn main() -> ExitCode {
    init_logging();
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tensormount: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<(), String> {
    let opts = MountOptions::parse(&args.options)?;
    let build = Options {
        strict: opts.strict,
    };
    if args.list {
        let tree = Tree::build(&args.source, &build).map_err(|e| e.to_string())?;
        let rows = tree.list();
        let out = if args.json {
            listing::json(&rows)
        } else {
            listing::table(&rows)
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
    let tree = Tree::build(&source, &build).map_err(|e| e.to_string())?;
    let fsname = opts
        .fsname
        .clone()
        .unwrap_or_else(|| source.to_string_lossy().into_owned());
    let tuning = Tuning::from_env();
    let config = daemon::fuse_config(&opts, fsname, tuning.threads);
    let fs = TensorFs::new(tree, tuning);
    if args.foreground {
        daemon::run_foreground(fs, &mnt, &config)
    } else {
        daemon::run_background(fs, &mnt, &config)
    }
}

/// Warnings reach the terminal by default; `RUST_LOG` overrides the filter. fuser's own warning
/// about unmounting an already unmounted filesystem on exit is noise, so its session module logs
/// errors only.
fn init_logging() {
    let env = env_logger::Env::default().default_filter_or("warn,fuser::session=error");
    env_logger::Builder::from_env(env)
        .format(|buf, record| match record.level() {
            log::Level::Warn => writeln!(buf, "tensormount: {}", record.args()),
            level => writeln!(
                buf,
                "tensormount: {}: {}",
                level.as_str().to_lowercase(),
                record.args()
            ),
        })
        .init();
}
