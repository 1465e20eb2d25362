#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

fn main() -> std::process::ExitCode {
    tensormount::command::run::main()
}
