//! `tensormount diff A B`: which tensors two checkpoints or model directories do not share.

use std::process::ExitCode;

use crate::cli::DiffArgs;

pub fn main(args: DiffArgs) -> ExitCode {
    let _ = args;
    eprintln!("tensormount: diff: not yet");
    ExitCode::from(2)
}
