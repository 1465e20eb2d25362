//! `tensormount verify SOURCE`: every weight file checked against the SHA-256 its source records.

use std::process::ExitCode;

use crate::cli::VerifyArgs;

pub fn main(args: VerifyArgs) -> ExitCode {
    let _ = args;
    eprintln!("tensormount: verify: not yet");
    ExitCode::from(2)
}
